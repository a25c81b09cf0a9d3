// The clock and CPU pinning of the two-thread ring benchmarks
// (tx_parts_bench.cc, ring_footprint_bench.cc).
#ifndef DROCE_TOOLS_BENCH_ICRC_TWO_CPUS_H_
#define DROCE_TOOLS_BENCH_ICRC_TWO_CPUS_H_

#include <pthread.h>
#include <sched.h>
#include <time.h>

#include <cstdint>

namespace droce::bench {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// The calling thread runs on `cpu` only.
inline void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace droce::bench

#endif  // DROCE_TOOLS_BENCH_ICRC_TWO_CPUS_H_
