// droced's clock: CLOCK_MONOTONIC in nanoseconds, the time base of its
// switch, its control requests and the CM service it runs.
#ifndef DROCE_APPS_DROCED_CLOCK_H_
#define DROCE_APPS_DROCED_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace droce::droced {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_CLOCK_H_
