// How the verbs runtime's threads wait a little: a pause inside a spin, a
// sleep of some microseconds.
#ifndef DROCE_DRIVERS_VERBS_THREAD_PAUSE_H_
#define DROCE_DRIVERS_VERBS_THREAD_PAUSE_H_

#include <time.h>

#include <cstdint>

namespace droce::verbs {

inline void CpuRelax() { __builtin_ia32_pause(); }

inline void SleepUs(uint32_t us) {
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_THREAD_PAUSE_H_
