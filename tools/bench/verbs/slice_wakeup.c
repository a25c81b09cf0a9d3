// Does an EEVDF per-task slice (sched_setattr sched_runtime, Linux >= 6.12)
// or a lower nice value let a sleeping thread preempt a program that spins on
// memory when its timer fires? Models ib_write_lat's progress thread: SPINNERS
// threads spin on CPU 1 and one thread, pinned there too, sleeps PERIOD_US at
// a time and measures how late it wakes (lateness = woke - asked). The
// sleeper's slice/nice and the spinners' slice are arguments.
//   cc -O2 -pthread slice_wakeup.c -o slice_wakeup
//   ./slice_wakeup SLEEPER_SLICE_US SLEEPER_NICE SPINNER_SLICE_US SPINNERS PERIOD_US ITERATIONS
//   e.g. ./slice_wakeup 0 0 0 1 50 2000 and ./slice_wakeup 100 0 0 1 50 2000
// Prints one line: the setting, then lateness p50/p90/p99/max in us.
// A slice of 0 keeps the kernel's default (se.slice in /proc/self/sched).
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

struct sched_attr_ {  // sched_setattr(2); glibc 2.36 has no wrapper
  uint32_t size, policy;
  uint64_t flags;
  int32_t nice;
  uint32_t priority;
  uint64_t runtime, deadline, period;
};

static int set_slice(uint32_t slice_us, int nice) {
  if (slice_us == 0 && nice == 0) return 0;
  struct sched_attr_ a;
  memset(&a, 0, sizeof a);
  a.size = sizeof a;
  a.policy = SCHED_OTHER;
  a.nice = nice;
  a.runtime = (uint64_t)slice_us * 1000;
  return (int)syscall(SYS_sched_setattr, 0, &a, 0);
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static volatile int stop;
static uint32_t spinner_slice_us;

static void* spin(void* arg) {
  (void)arg;
  pin(1);
  set_slice(spinner_slice_us, 0);
  while (!stop) __asm__ volatile("pause");
  return NULL;
}

static int cmp(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: %s SLEEPER_SLICE_US SLEEPER_NICE SPINNER_SLICE_US SPINNERS PERIOD_US ITERATIONS\n", argv[0]);
    return 2;
  }
  const uint32_t sleeper_slice_us = (uint32_t)atoi(argv[1]);
  const int sleeper_nice = atoi(argv[2]);
  spinner_slice_us = (uint32_t)atoi(argv[3]);
  const int spinners = atoi(argv[4]);
  const long period_us = atol(argv[5]);
  const int n = atoi(argv[6]);
  if (spinners < 0 || spinners > 8 || n < 100) return 2;
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us, as the progress thread
  pthread_t t[8];
  for (int k = 0; k < spinners; ++k) pthread_create(&t[k], NULL, spin, NULL);
  usleep(20000);
  pin(1);
  const int refused = set_slice(sleeper_slice_us, sleeper_nice) != 0;
  uint64_t* late = malloc(sizeof *late * (size_t)n);
  for (int i = 0; i < n; ++i) {
    const uint64_t t0 = now_ns();
    const struct timespec ts = {0, period_us * 1000};
    nanosleep(&ts, NULL);
    late[i] = now_ns() - t0 - (uint64_t)period_us * 1000;
  }
  stop = 1;
  for (int k = 0; k < spinners; ++k) pthread_join(t[k], NULL);
  qsort(late, (size_t)n, sizeof *late, cmp);
  printf("sleeper_slice_us=%u sleeper_nice=%d%s spinner_slice_us=%u spinners=%d period_us=%ld: lateness us p50 %.1f "
         "p90 %.1f p99 %.1f max %.1f\n",
         sleeper_slice_us, sleeper_nice, refused ? " (refused)" : "", spinner_slice_us, spinners, period_us,
         late[n / 2] / 1e3, late[n * 9 / 10] / 1e3, late[n * 99 / 100] / 1e3, late[n - 1] / 1e3);
  free(late);
  return 0;
}
