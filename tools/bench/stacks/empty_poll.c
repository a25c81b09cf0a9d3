// What an empty ibv_poll_cq costs on an idle droce device, the way UCX
// progresses: every CQ of every device it opened, one poll each, on every
// progress call (UCX with rc_verbs,ud_verbs has two interfaces per device,
// each with a send and a receive CQ: 4 CQs). Nothing is posted, so every poll
// finds nothing; the program's polling is what drives droce's dataplane.
//   empty_poll ROUNDS CQS_PER_DEVICE [DEVICE...]   (no DEVICE: every device)
// Prints the devices, the polls, and the thread's CPU ns per poll
// (CLOCK_THREAD_CPUTIME_ID: a loaded host's preemptions do not count).
// Under callgrind, --toggle-collect=PollRounds counts the polls alone:
// instructions per empty poll = Ir / polls.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CQS 256

static struct ibv_cq* cqs[MAX_CQS];
static int n_cqs;

static double ThreadCpuNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// One progress call per round: every CQ polled once. Returns the completions
// found (0 expected).
__attribute__((noinline)) long PollRounds(long rounds) {
  struct ibv_wc wc[16];
  long found = 0;
  for (long r = 0; r < rounds; ++r) {
    for (int i = 0; i < n_cqs; ++i) found += ibv_poll_cq(cqs[i], 16, wc);
  }
  return found;
}

static int OpenDevice(struct ibv_device* d, int cqs_per_device) {
  struct ibv_context* ctx = ibv_open_device(d);
  if (ctx == NULL) {
    fprintf(stderr, "cannot open %s\n", ibv_get_device_name(d));
    return 1;
  }
  for (int i = 0; i < cqs_per_device; ++i) {
    if (n_cqs == MAX_CQS) return 1;
    cqs[n_cqs] = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    if (cqs[n_cqs] == NULL) {
      fprintf(stderr, "cannot create a CQ on %s\n", ibv_get_device_name(d));
      return 1;
    }
    ++n_cqs;
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: empty_poll ROUNDS CQS_PER_DEVICE [DEVICE...]\n");
    return 2;
  }
  const long rounds = atol(argv[1]);
  const int cqs_per_device = atoi(argv[2]);
  int n = 0, devices = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL) return 1;
  for (int i = 0; i < n; ++i) {
    int wanted = argc == 3;
    for (int a = 3; a < argc; ++a) wanted |= strcmp(argv[a], ibv_get_device_name(list[i])) == 0;
    if (!wanted) continue;
    if (OpenDevice(list[i], cqs_per_device) != 0) return 1;
    ++devices;
  }
  if (devices == 0) {
    fprintf(stderr, "no device\n");
    return 1;
  }
  PollRounds(rounds / 10 + 1);  // warm: the progress thread has seen the program poll
  const double t0 = ThreadCpuNs();
  const long found = PollRounds(rounds);
  const double ns = ThreadCpuNs() - t0;
  const long polls = rounds * n_cqs;
  printf("devices=%d cqs=%d polls=%ld found=%ld cpu_ns_per_poll=%.1f cpu_us_per_round=%.2f\n", devices, n_cqs,
         polls, found, ns / polls, ns / rounds / 1000);
  return found != 0;
}
