// Opens every RDMA device libibverbs lists (or the first N), starts each
// one's dataplane (a PD, a CQ and a UD QP moved to RTS), and reports what
// each cost the process: resident memory and threads, read from /proc.
// Then it sends one UD datagram through every device to itself and checks it
// arrived, so each device is not only open but working.
//   open_devices [-n N] [-min N] [-wait FILE]
//     exit 0 if at least -min devices (default: all listed) opened and
//     passed the check; with -wait, the devices stay open (and are checked
//     once more) until FILE exists, so many processes can hold theirs at
//     once.
#include <infiniband/verbs.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long StatusKb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, key, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  }
  if (f) fclose(f);
  return v;
}

static long OpenFds(void) {
  DIR* d = opendir("/proc/self/fd");
  long n = 0;
  for (struct dirent* e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n - 1;  // the directory's own descriptor
}

struct Dev {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  char buf[2 * 4096];
};

static int ToRts(struct ibv_qp* qp) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x11111111;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return -1;
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return -1;
  a.qp_state = IBV_QPS_RTS;
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// One datagram from the device's QP to itself, through the device's loopback.
static int SelfDatagram(struct Dev* d, int index) {
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.sgid_index = 1;
  aa.grh.hop_limit = 64;
  if (ibv_query_gid(d->ctx, 1, 1, &aa.grh.dgid)) return -1;
  struct ibv_ah* ah = ibv_create_ah(d->pd, &aa);
  if (!ah) return -1;
  struct ibv_sge rs = {(uintptr_t)d->buf, 4096, d->mr->lkey};
  struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *bad_r;
  snprintf(d->buf + 4096, 64, "device %d", index);
  struct ibv_sge ss = {(uintptr_t)d->buf + 4096, 64, d->mr->lkey};
  struct ibv_send_wr sw, *bad_s;
  memset(&sw, 0, sizeof sw);
  sw.wr_id = 2;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  sw.wr.ud.ah = ah;
  sw.wr.ud.remote_qpn = d->qp->qp_num;
  sw.wr.ud.remote_qkey = 0x11111111;
  int ok = 0;
  if (ibv_post_recv(d->qp, &rw, &bad_r) == 0 && ibv_post_send(d->qp, &sw, &bad_s) == 0) {
    int got_recv = 0, got_send = 0;
    for (long spins = 0; spins < 50000000 && !(got_recv && got_send); ++spins) {
      struct ibv_wc wc;
      int n = ibv_poll_cq(d->cq, 1, &wc);
      if (n < 0) break;
      if (n == 0) continue;
      if (wc.status != IBV_WC_SUCCESS) break;
      if (wc.wr_id == 1) got_recv = 1;
      if (wc.wr_id == 2) got_send = 1;
    }
    char want[64];
    snprintf(want, sizeof want, "device %d", index);
    ok = got_recv && got_send && strcmp(d->buf + 40, want) == 0;
  }
  ibv_destroy_ah(ah);
  return ok ? 0 : -1;
}

int main(int argc, char** argv) {
  int limit = 1 << 30, min = -1;
  const char* wait_file = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "-n") == 0) limit = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-min") == 0) min = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "-wait") == 0) wait_file = argv[i + 1];
  }
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    fprintf(stderr, "no RDMA devices\n");
    return 1;
  }
  if (n > limit) n = limit;
  if (min < 0) min = n;
  struct Dev* devs = calloc(n, sizeof *devs);
  int good = 0;
  long rss0 = StatusKb("VmRSS"), threads0 = StatusKb("Threads"), fds0 = OpenFds();
  printf("before: rss %ld KiB, threads %ld, fds %ld\n", rss0, threads0, fds0);
  for (int i = 0; i < n; ++i) {
    struct Dev* d = &devs[i];
    const char* name = ibv_get_device_name(list[i]);
    long rss = StatusKb("VmRSS"), threads = StatusKb("Threads"), fds = OpenFds();
    d->ctx = ibv_open_device(list[i]);
    if (d->ctx) d->pd = ibv_alloc_pd(d->ctx);
    if (d->pd) d->cq = ibv_create_cq(d->ctx, 16, NULL, NULL, 0);
    if (d->cq) d->mr = ibv_reg_mr(d->pd, d->buf, sizeof d->buf, IBV_ACCESS_LOCAL_WRITE);
    if (d->mr) {
      struct ibv_qp_init_attr qa;
      memset(&qa, 0, sizeof qa);
      qa.send_cq = qa.recv_cq = d->cq;
      qa.qp_type = IBV_QPT_UD;
      qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
      qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
      d->qp = ibv_create_qp(d->pd, &qa);
    }
    const int up = d->qp && ToRts(d->qp) == 0;
    printf("%s: %s, rss +%ld KiB, threads +%ld, fds +%ld\n", name, up ? "open" : "FAILED", StatusKb("VmRSS") - rss,
           StatusKb("Threads") - threads, OpenFds() - fds);
    fflush(stdout);
  }
  for (int i = 0; i < n; ++i) {
    struct Dev* d = &devs[i];
    if (!d->qp) continue;
    if (SelfDatagram(d, i) == 0) ++good;
    else printf("%s: the datagram to itself did not arrive\n", ibv_get_device_name(list[i]));
  }
  long rss1 = StatusKb("VmRSS");
  printf("%d of %d devices open and working; rss %ld KiB (+%ld KiB, %ld KiB per device), threads %ld, fds %ld\n",
         good, n, rss1, rss1 - rss0, n ? (rss1 - rss0) / n : 0, StatusKb("Threads"), OpenFds());
  fflush(stdout);
  if (wait_file != NULL) {
    while (access(wait_file, F_OK) != 0) usleep(20000);
    int again = 0;  // every device still works while the others' are open too
    for (int i = 0; i < n; ++i) again += devs[i].qp && SelfDatagram(&devs[i], i) == 0;
    printf("after the wait: %d of %d devices working\n", again, n);
    if (again < good) good = again;
  }
  for (int i = 0; i < n; ++i) {
    struct Dev* d = &devs[i];
    if (d->qp) ibv_destroy_qp(d->qp);
    if (d->mr) ibv_dereg_mr(d->mr);
    if (d->cq) ibv_destroy_cq(d->cq);
    if (d->pd) ibv_dealloc_pd(d->pd);
    if (d->ctx) ibv_close_device(d->ctx);
  }
  ibv_free_device_list(list);
  free(devs);
  return good >= min ? 0 : 1;
}
