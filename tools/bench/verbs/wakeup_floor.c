// The operating system's floor for event-driven latency on this machine: two
// threads ping-pong through eventfds, each blocking in read() until the other
// writes. Half of the round trip is what one wake-up costs; ib_send_lat -e
// pays at least one per one-way trip (the program sleeps in the kernel until
// the completion event), so -e latency cannot fall below it whatever droce
// does. Optional busy threads (argv[2]) show the cost when the CPUs are taken.
//   cc -O2 -pthread wakeup_floor.c -o wakeup_floor && ./wakeup_floor 20000 0
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int ping_fd, pong_fd;
static volatile int stop_spinners;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void* ponger(void* arg) {
  long n = (long)arg;
  uint64_t v;
  for (long i = 0; i < n; ++i) {
    if (read(ping_fd, &v, 8) != 8) return NULL;
    v = 1;
    if (write(pong_fd, &v, 8) != 8) return NULL;
  }
  return NULL;
}

static void* spinner(void* arg) {
  (void)arg;
  while (!stop_spinners) __builtin_ia32_pause();
  return NULL;
}

static int cmp(const void* a, const void* b) {
  const uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 20000;
  const int spinners = argc > 2 ? atoi(argv[2]) : 0;
  ping_fd = eventfd(0, 0);
  pong_fd = eventfd(0, 0);
  pthread_t t, s[16];
  for (int i = 0; i < spinners && i < 16; ++i) pthread_create(&s[i], NULL, spinner, NULL);
  pthread_create(&t, NULL, ponger, (void*)n);
  uint64_t* rtt = malloc(sizeof(uint64_t) * (size_t)n);
  uint64_t v = 1;
  for (long i = 0; i < n; ++i) {
    const uint64_t t0 = now_ns();
    if (write(ping_fd, &v, 8) != 8 || read(pong_fd, &v, 8) != 8) return 1;
    rtt[i] = now_ns() - t0;
    v = 1;
  }
  pthread_join(t, NULL);
  stop_spinners = 1;
  for (int i = 0; i < spinners && i < 16; ++i) pthread_join(s[i], NULL);
  qsort(rtt, (size_t)n, sizeof(uint64_t), cmp);
  // One line, machine-readable: half round trip = one wake-up.
  printf("wakeup_floor spinners=%d n=%ld half_rtt_p50_us=%.2f half_rtt_p99_us=%.2f\n", spinners, n,
         rtt[n / 2] / 2e3, rtt[n * 99 / 100] / 2e3);
  free(rtt);
  return 0;
}
