// How often this host stops a thread that stays on its CPU (not droce: a baseline for
// verbs_timeline_stalls.py's calls that stayed on the CPU for tens of microseconds):
//   gcc -O2 -pthread -o /tmp/vcpu_stalls tools/bench/stacks/vcpu_stalls.c
//   taskset -c 1 /tmp/vcpu_stalls copy MIB SECS    8 KiB memcpys walking a MIB MiB buffer (as a
//                                                   receiver walks UCX's 32 MiB of receive buffers)
//   taskset -c 1 /tmp/vcpu_stalls spin 0 SECS      clock reads only
// Counts the gaps of 20 us or more (a copy that long, or between two clock reads), apart: those with
// no context switch of the thread (getrusage), i.e. time the guest kernel does not account to anyone
// else (interrupts, or the virtual CPU itself stopped by the host: this VM reports no steal time), and
// those with one.
// COMPANION_US=N starts a thread of this process that sleeps N us in a loop (build with -pthread and
// run under taskset: it shares the CPU), as a rank's progress thread looks back beside it: the gaps
// with a switch then show what one preemption by it costs.
// TIMER_US=N arms a periodic timer every N us that wakes nobody (a timerfd never read): the timer
// interrupts of a progress thread's look-backs on the same CPU, without its context switches.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static long switches(void) {
  struct rusage u;
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw + u.ru_nvcsw;
}

static void* Companion(void* arg) {
  const long us = *(const long*)arg;
  const struct timespec nap = {us / 1000000, (us % 1000000) * 1000};
  for (;;) nanosleep(&nap, NULL);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4 || (strcmp(argv[1], "copy") != 0 && strcmp(argv[1], "spin") != 0)) {
    fprintf(stderr, "usage: %s copy|spin MIB SECS\n", argv[0]);
    return 2;
  }
  const int copy = strcmp(argv[1], "copy") == 0;
  const size_t bytes = (size_t)atoi(argv[2]) << 20;
  const uint64_t end = now_ns() + (uint64_t)atoi(argv[3]) * 1000000000u;
  char* buf = NULL;
  static char src[8192];
  if (copy) {
    if (bytes < sizeof src || (buf = aligned_alloc(4096, bytes)) == NULL) return 2;
    memset(buf, 1, bytes);
    memset(src, 2, sizeof src);
  }
  const char* timer_us = getenv("TIMER_US");
  if (timer_us != NULL && atoi(timer_us) > 0) {
    const int fd = timerfd_create(CLOCK_MONOTONIC, 0);
    const long ns = atol(timer_us) * 1000;
    struct itimerspec its = {{ns / 1000000000, ns % 1000000000}, {ns / 1000000000, ns % 1000000000}};
    if (fd < 0 || timerfd_settime(fd, 0, &its, NULL) != 0) return 2;
  }
  static long companion_us;
  const char* companion = getenv("COMPANION_US");
  if (companion != NULL && (companion_us = atol(companion)) > 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, Companion, &companion_us) != 0) return 2;
  }
  static const uint64_t edge_us[] = {20, 50, 100, 300};
  uint64_t bins[5] = {0}, switched_bins[5] = {0}, steps = 0, stalled_ns = 0;
  size_t off = 0;
  long seen = switches();
  for (uint64_t t = now_ns(); t < end;) {
    // copy: the gap is one 8 KiB copy; spin: the time between two clock reads
    const uint64_t t0 = copy ? now_ns() : t;
    if (copy) {
      memcpy(buf + off, src, sizeof src);
      off = off + 2 * sizeof src > bytes ? 0 : off + sizeof src;
    }
    t = now_ns();
    ++steps;
    const uint64_t gap = t - t0;
    if (gap < edge_us[0] * 1000) continue;
    int b = 0;
    while (b < 4 && gap >= edge_us[b] * 1000) ++b;
    const long s = switches();
    if (s != seen) {  // the scheduler ran something else in the gap
      seen = s;
      ++switched_bins[b];
      continue;
    }
    ++bins[b];
    stalled_ns += gap;
  }
  printf("%s %s MiB: %lu steps; gaps on the CPU 20-50 us %lu, 50-100 %lu, 100-300 %lu, >=300 %lu "
         "(%.1f ms in all); with a context switch 20-50 us %lu, 50-100 %lu, 100-300 %lu, >=300 %lu\n",
         argv[1], argv[2], (unsigned long)steps, (unsigned long)bins[1], (unsigned long)bins[2],
         (unsigned long)bins[3], (unsigned long)bins[4], stalled_ns / 1e6, (unsigned long)switched_bins[1],
         (unsigned long)switched_bins[2], (unsigned long)switched_bins[3], (unsigned long)switched_bins[4]);
  free(buf);
  return 0;
}
