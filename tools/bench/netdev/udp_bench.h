// What the netdev bench programs (zerocopy.c, sendpath.c) share: the UDP
// segmentation socket options older headers lack, and the CPU and wall
// clocks they report.
#ifndef DROCE_TOOLS_BENCH_NETDEV_UDP_BENCH_H_
#define DROCE_TOOLS_BENCH_NETDEV_UDP_BENCH_H_

#include <sys/resource.h>
#include <time.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

// This process's user and system CPU seconds.
static inline void cpu_times(double* user, double* sys) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  *user = r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6;
  *sys = r.ru_stime.tv_sec + r.ru_stime.tv_usec / 1e6;
}

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

#endif  // DROCE_TOOLS_BENCH_NETDEV_UDP_BENCH_H_
