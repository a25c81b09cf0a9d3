// The lossy-network experiment with real processes (doc/loss-experiment.md): an RC QP
// between two programs over plain verbs, for goodput of SIZE-byte RDMA
// WRITEs and the completion time of each (loss comes from the fabric
// switch's drop injector, `droce-ctl switch set DEV loss=P`, set by fabric.sh).
//
// The two sides meet through files in DIR (no TCP side channel): each writes
// "qpn gid rkey addr" to DIR/server or DIR/client and reads the other's.
//   loss_verbs server DEV DIR
//   loss_verbs client DEV DIR COUNT WINDOW LAT_COUNT TIMEOUT [SECONDS]
// The client streams COUNT WRITEs with WINDOW outstanding (stopping early
// after SECONDS), then LAT_COUNT WRITEs one at a time (again SECONDS at most), checks that the
// server's buffer holds its bytes, and prints
//   goodput_gbps=G writes=N p50_us=A p99_us=B max_us=C status=ok
// (status=<work completion status> and exit 1 on an error completion).
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kGid = 1 };

static void Fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "status=error ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static uint64_t NowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

struct Peer {
  uint32_t qpn, rkey;
  uint64_t addr;
  union ibv_gid gid;
};

static void WriteInfo(const char* dir, const char* who, const struct Peer* p) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, who);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (f == NULL) Fail("cannot write %s", tmp);
  fprintf(f, "%u %u %llu ", p->qpn, p->rkey, (unsigned long long)p->addr);
  for (int i = 0; i < 16; ++i) fprintf(f, "%02x", p->gid.raw[i]);
  fprintf(f, "\n");
  fclose(f);
  if (rename(tmp, path) != 0) Fail("rename %s", tmp);
}

static void ReadInfo(const char* dir, const char* who, struct Peer* p, double timeout_s) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, who);
  const uint64_t end = NowNs() + (uint64_t)(timeout_s * 1e9);
  FILE* f;
  while ((f = fopen(path, "r")) == NULL) {
    if (NowNs() > end) Fail("no %s after %.0f s", path, timeout_s);
    usleep(10000);
  }
  unsigned long long addr;
  char gid[33];
  if (fscanf(f, "%u %u %llu %32s", &p->qpn, &p->rkey, &addr, gid) != 4) Fail("bad %s", path);
  fclose(f);
  p->addr = addr;
  for (int i = 0; i < 16; ++i) {
    unsigned b;
    sscanf(gid + 2 * i, "%2x", &b);
    p->gid.raw[i] = (uint8_t)b;
  }
}

int main(int argc, char** argv) {
  if (argc < 4 || (strcmp(argv[1], "server") != 0 && strcmp(argv[1], "client") != 0) ||
      (strcmp(argv[1], "client") == 0 && argc < 8)) {
    fprintf(stderr, "usage: loss_verbs server DEV DIR | client DEV DIR COUNT WINDOW LAT_COUNT TIMEOUT [SECONDS]\n");
    return 2;
  }
  const int client = strcmp(argv[1], "client") == 0;
  const char* devname = argv[2];
  const char* dir = argv[3];
  const uint32_t count = client ? (uint32_t)atoi(argv[4]) : 0;
  const uint32_t window = client ? (uint32_t)atoi(argv[5]) : 0;
  const uint32_t lat_count = client ? (uint32_t)atoi(argv[6]) : 0;
  const int timeout = client ? atoi(argv[7]) : 14;
  const double seconds = client && argc > 8 ? atof(argv[8]) : 1e9;
  const uint32_t size = 65536;

  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; i < n && ctx == NULL; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), devname) == 0) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (ctx == NULL) Fail("cannot open %s", devname);
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0);
  uint8_t* buf = aligned_alloc(4096, size);
  if (pd == NULL || cq == NULL || buf == NULL) Fail("pd/cq");
  for (uint32_t i = 0; i < size; ++i) buf[i] = client ? (uint8_t)(i * 7 + 3) : 0;
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL) Fail("reg_mr");
  struct ibv_qp_init_attr ia = {0};
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 512;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &ia);
  if (qp == NULL) Fail("create_qp");
  struct ibv_qp_attr a = {0};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) Fail("INIT");

  struct Peer me = {qp->qp_num, mr->rkey, (uintptr_t)buf}, peer;
  if (ibv_query_gid(ctx, 1, kGid, &me.gid) != 0) Fail("query_gid");
  WriteInfo(dir, client ? "client" : "server", &me);
  ReadInfo(dir, client ? "server" : "client", &peer, 60);

  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer.qpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer.gid;
  a.ah_attr.grh.sgid_index = kGid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    Fail("RTR");
  }
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    Fail("RTS");
  }

  if (!client) {  // a passive target: the provider's progress thread answers; wait for the client's word
    char done[512];
    snprintf(done, sizeof done, "%s/done", dir);
    while (access(done, F_OK) != 0) usleep(20000);
    FILE* f = fopen(done, "r");
    int ok = 0;
    if (f != NULL) {
      ok = fscanf(f, "%d", &ok) == 1 && ok;
      fclose(f);
    }
    if (ok) {  // the client wrote the same bytes every time: they must all be here
      for (uint32_t i = 0; i < size; ++i) {
        if (buf[i] != (uint8_t)(i * 7 + 3)) Fail("byte %u is %u, not %u", i, buf[i], (uint8_t)(i * 7 + 3));
      }
    }
    printf("status=ok\n");
    ibv_destroy_qp(qp);  // DROCE_STATS: its counters fold into the device's (printed at close)
    return 0;
  }

  struct ibv_sge sge = {(uintptr_t)buf, size, mr->lkey};
  struct ibv_send_wr wr = {0}, *bad;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = peer.addr;
  wr.wr.rdma.rkey = peer.rkey;
  uint64_t* times = calloc(lat_count + 1, sizeof(uint64_t));
  const char* status = "ok";
  struct ibv_wc wc[32];
  // Stream.
  uint32_t posted = 0, completed = 0;
  const uint64_t start = NowNs(), stop = start + (uint64_t)(seconds * 1e9);
  while (completed < posted || (posted < count && NowNs() < stop)) {
    while (posted < count && posted - completed < window && NowNs() < stop) {
      wr.wr_id = posted;
      if (ibv_post_send(qp, &wr, &bad) != 0) Fail("post_send");
      ++posted;
    }
    const int k = ibv_poll_cq(cq, 32, wc);
    if (k < 0) Fail("poll_cq");
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS && strcmp(status, "ok") == 0) status = ibv_wc_status_str(wc[i].status);
      ++completed;
    }
    if (strcmp(status, "ok") != 0) break;
  }
  const double secs = (NowNs() - start) / 1e9;
  const double goodput = (double)completed * size * 8 / secs / 1e9;
  // One at a time.
  uint32_t lat_done = 0;
  const uint64_t lat_stop = NowNs() + (uint64_t)(seconds * 1e9);
  for (; lat_done < lat_count && strcmp(status, "ok") == 0 && NowNs() < lat_stop; ++lat_done) {
    const uint64_t t0 = NowNs();
    if (ibv_post_send(qp, &wr, &bad) != 0) Fail("post_send");
    int k;
    while ((k = ibv_poll_cq(cq, 1, wc)) == 0) {
    }
    if (k < 0) Fail("poll_cq");
    if (wc[0].status != IBV_WC_SUCCESS) {
      status = ibv_wc_status_str(wc[0].status);
      break;
    }
    times[lat_done] = NowNs() - t0;
  }
  // Sort for percentiles.
  for (uint32_t i = 1; i < lat_done; ++i) {
    const uint64_t v = times[i];
    uint32_t j = i;
    for (; j > 0 && times[j - 1] > v; --j) times[j] = times[j - 1];
    times[j] = v;
  }
  const double p50 = lat_done ? times[(lat_done - 1) / 2] / 1e3 : 0;
  const double p99 = lat_done ? times[(uint32_t)((lat_done * 99 + 99) / 100) - 1] / 1e3 : 0;
  const double mx = lat_done ? times[lat_done - 1] / 1e3 : 0;
  char done[512], tmp[520];
  snprintf(done, sizeof done, "%s/done", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", done);
  FILE* f = fopen(tmp, "w");
  if (f != NULL) {
    fprintf(f, "%d\n", strcmp(status, "ok") == 0);
    fclose(f);
    rename(tmp, done);
  }
  printf("goodput_gbps=%.3f writes=%u lat_writes=%u p50_us=%.1f p99_us=%.1f max_us=%.1f status=%s\n", goodput, completed, lat_done, p50,
         p99, mx, status);
  ibv_destroy_qp(qp);  // DROCE_STATS: its counters fold into the device's (printed at close)
  return strcmp(status, "ok") == 0 ? 0 : 1;
}
