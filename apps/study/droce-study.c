/*
 * droce-study: a perftest-like server/client for what perftest cannot express,
 * used by tools/bench/study/ (MacArthur & Russell, "A Performance Study to
 * Guide RDMA Programming Decisions").  Plain libibverbs: it runs on any verbs
 * device (droce, rxe, a ConnectX ...), RC QPs, RoCE (GRH always set).
 *
 *   server:  droce-study -d DEV -x GID
 *   client:  droce-study -d DEV -x GID [options] SERVER_HOST
 *
 * The client sends its whole configuration over a TCP side channel, so the
 * server only needs its device.  Modes:
 *   ping  -o send   SEND/RECV ping-pong             (one-way = RTT/2)
 *         -o imm    WRITE_WITH_IMM/RECV ping-pong   (one-way = RTT/2)
 *         -o wr     client WRITEs then READs back the same bytes; -u makes the
 *                   WRITE unsignaled and posts the READ at once, otherwise the
 *                   WRITE's completion is awaited first   (one-way = RTT/2)
 *   blast -o send|imm|write|read: the client keeps -t WRs outstanding for -D
 *         seconds (or -n WRs) and reports Gb/s and M msg/s.
 * Sizes, outstanding, list and signal options take comma lists; the client runs
 * every combination over one connection and prints one CSV line per point,
 * with getrusage CPU user/sys of both sides over the measured interval.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { MODE_PING, MODE_BLAST };
enum { OP_SEND, OP_IMM, OP_WRITE, OP_READ, OP_WR };
static const char *const mode_names[] = {"ping", "blast"};
static const char *const op_names[] = {"send", "imm", "write", "read", "wr"};

#define MAX_POINTS 64
#define MAGIC 0x64737479u /* "dsty" */
#define VERSION 1u

/* Sent client -> server once (same architecture assumed on both sides). */
struct cfg {
  uint32_t magic, version;
  uint32_t mode, op, events, inline_max, mtu, unsig;
  uint32_t iters, warmup, duration_ms;
  uint32_t max_size, max_outstanding, max_list, max_signal;
  uint32_t nslots;
};
struct point { uint32_t size, outstanding, list, signal; };
struct qpinfo {
  uint32_t qpn, psn, rkey, mtu, rd_atom, pad;
  uint64_t addr;
  uint8_t gid[16];
};
struct side_usage { double user, sys, wall; };

/* ---------------------------------------------------------------- helpers */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("droce-study: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cpu_now(double *user, double *sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6;
  *sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t r = write(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die("side channel write: %s", strerror(errno));
    c += r;
    n -= (size_t)r;
  }
}

static void read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) die("side channel closed by peer");
    if (r < 0) die("side channel read: %s", strerror(errno));
    c += r;
    n -= (size_t)r;
  }
}

static int parse_list(const char *s, uint32_t *out, int max, const char *what) {
  int n = 0;
  char *dup = strdup(s), *save = NULL;
  for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *end;
    unsigned long long v = strtoull(t, &end, 0);
    if (*end == 'K' || *end == 'k') v <<= 10, end++;
    else if (*end == 'M' || *end == 'm') v <<= 20, end++;
    else if (*end == 'G' || *end == 'g') v <<= 30, end++;
    if (*end || v == 0 || v > 0x7fffffffULL || n == max) die("bad %s list '%s'", what, s);
    out[n++] = (uint32_t)v;
  }
  free(dup);
  if (!n) die("empty %s list", what);
  return n;
}

static uint32_t umax(uint32_t a, uint32_t b) { return a > b ? a : b; }
static uint32_t umin(uint32_t a, uint32_t b) { return a < b ? a : b; }

static enum ibv_mtu mtu_enum(uint32_t m) {
  switch (m) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
  }
  die("bad MTU %u (256..4096)", m);
  return IBV_MTU_1024;
}
static uint32_t mtu_bytes(enum ibv_mtu m) { return 128u << m; }

/* ------------------------------------------------------------ verbs state */

static struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *chan;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  char *buf;          /* nslots * max_size data slots, then the receive area */
  size_t slot_bytes, buf_bytes;
  uint32_t nslots;
  struct ibv_device_attr dev;
  struct ibv_port_attr port_attr;
  int port, gid_index;
  struct qpinfo local, remote;
  /* progress */
  uint64_t posted, retired, recvs;
  uint32_t since_sig;
  int armed;
  unsigned unacked;
  int sock;
  int verbose;
  int last_seen; /* the last receive carried the "last ping" mark */
} V;

#define LAST_IMM 0xffffffffu
#define LAST_BYTE 'L'
static double ping_cap_s; /* -T: a ping point stops after this long (0: never) */

static struct cfg C;

static void open_device(const char *name) {
  int n;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) die("no verbs devices");
  struct ibv_device *dev = NULL;
  for (int i = 0; i < n; i++)
    if (!name || !strcmp(ibv_get_device_name(list[i]), name)) { dev = list[i]; break; }
  if (!dev) die("device %s not found", name);
  V.ctx = ibv_open_device(dev);
  if (!V.ctx) die("ibv_open_device(%s): %s", ibv_get_device_name(dev), strerror(errno));
  ibv_free_device_list(list);
  if (ibv_query_device(V.ctx, &V.dev)) die("ibv_query_device failed");
  if (ibv_query_port(V.ctx, V.port, &V.port_attr)) die("ibv_query_port(%d) failed", V.port);
}

static void post_recv_one(void) {
  struct ibv_sge sge = {.addr = (uintptr_t)(V.buf + (size_t)V.nslots * V.slot_bytes),
                        .length = C.max_size, .lkey = V.mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = &sge, .num_sge = C.op == OP_SEND ? 1 : 0}, *bad;
  int e = ibv_post_recv(V.qp, &wr, &bad);
  if (e) die("ibv_post_recv: %s", strerror(e));
}

static uint32_t rq_depth(void) {
  if (C.op != OP_SEND && C.op != OP_IMM) return 1;
  return C.mode == MODE_BLAST ? umax(C.max_outstanding * 2, 64) : 16;
}
static uint32_t sq_depth(void) {
  return umax(umax(C.max_outstanding, C.max_list), C.max_signal) + 4;
}

static void setup_resources(void) {
  V.pd = ibv_alloc_pd(V.ctx);
  if (!V.pd) die("ibv_alloc_pd failed");
  if (C.events) {
    V.chan = ibv_create_comp_channel(V.ctx);
    if (!V.chan) die("ibv_create_comp_channel failed (droce: LD_PRELOAD libdroce-preload.so)");
  }
  uint32_t sq = sq_depth(), rq = rq_depth();
  if (sq > (uint32_t)V.dev.max_qp_wr || rq > (uint32_t)V.dev.max_qp_wr)
    die("queue depth %u/%u above the device's max_qp_wr %d", sq, rq, V.dev.max_qp_wr);
  V.cq = ibv_create_cq(V.ctx, (int)(sq + rq + 16), NULL, V.chan, 0);
  if (!V.cq) die("ibv_create_cq failed");

  V.slot_bytes = C.max_size;
  V.nslots = C.nslots;
  V.buf_bytes = V.slot_bytes * (V.nslots + (C.op == OP_SEND ? 1 : 0));
  size_t page = 4096;
  if (posix_memalign((void **)&V.buf, page, (V.buf_bytes + page - 1) / page * page)) die("out of memory");
  memset(V.buf, 0x5a, V.buf_bytes);
  V.mr = ibv_reg_mr(V.pd, V.buf, V.buf_bytes,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!V.mr) die("ibv_reg_mr(%zu bytes): %s", V.buf_bytes, strerror(errno));

  struct ibv_qp_init_attr ia = {
      .send_cq = V.cq, .recv_cq = V.cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
      .cap = {.max_send_wr = sq, .max_recv_wr = rq, .max_send_sge = 1, .max_recv_sge = 1,
              .max_inline_data = C.inline_max}};
  V.qp = ibv_create_qp(V.pd, &ia);
  if (!V.qp) die("ibv_create_qp (sq %u rq %u inline %u): %s", sq, rq, C.inline_max, strerror(errno));

  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)V.port,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                             IBV_ACCESS_REMOTE_READ};
  if (ibv_modify_qp(V.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    die("modify_qp INIT failed");
  for (uint32_t i = 0; i < rq && (C.op == OP_SEND || C.op == OP_IMM); i++) post_recv_one();

  union ibv_gid gid;
  if (ibv_query_gid(V.ctx, V.port, V.gid_index, &gid)) die("ibv_query_gid(%d) failed", V.gid_index);
  V.local.qpn = V.qp->qp_num;
  V.local.psn = (uint32_t)(lrand48() & 0xffffff);
  V.local.rkey = V.mr->rkey;
  V.local.addr = (uintptr_t)V.buf;
  V.local.mtu = V.port_attr.active_mtu;
  V.local.rd_atom = (uint32_t)V.dev.max_qp_rd_atom;
  memcpy(V.local.gid, gid.raw, 16);
}

static void connect_qp(void) {
  enum ibv_mtu mtu = mtu_enum(C.mtu);
  if ((uint32_t)mtu > V.local.mtu) mtu = (enum ibv_mtu)V.local.mtu;
  if ((uint32_t)mtu > V.remote.mtu) mtu = (enum ibv_mtu)V.remote.mtu;
  C.mtu = mtu_bytes(mtu); /* the path MTU actually used */
  uint32_t init_rd = umin((uint32_t)V.dev.max_qp_init_rd_atom, V.remote.rd_atom);
  if (init_rd == 0) init_rd = 1;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = mtu, .dest_qp_num = V.remote.qpn,
                          .rq_psn = V.remote.psn, .max_dest_rd_atomic = (uint8_t)umax(V.local.rd_atom, 1),
                          .min_rnr_timer = 1};
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, V.remote.gid, 16);
  a.ah_attr.grh.sgid_index = (uint8_t)V.gid_index;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = (uint8_t)V.port;
  int e = ibv_modify_qp(V.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (e) die("modify_qp RTR: %s", strerror(e));
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = V.local.psn;
  a.max_rd_atomic = (uint8_t)umin(init_rd, 255);
  e = ibv_modify_qp(V.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (e) die("modify_qp RTS: %s", strerror(e));
}

/* ------------------------------------------------------------ completions */

/* Polls up to max completions; blocks (spinning, or on the completion channel
 * with -e) while none is there if block is set.  Returns the count. */
static int get_completions(struct ibv_wc *wc, int max, int block) {
  for (;;) {
    int n = ibv_poll_cq(V.cq, max, wc);
    if (n < 0) die("ibv_poll_cq failed");
    if (n > 0 || !block) return n;
    if (!C.events) continue;
    if (!V.armed) {
      if (ibv_req_notify_cq(V.cq, 0)) die("ibv_req_notify_cq failed");
      V.armed = 1;
      continue; /* poll once more: a completion may have come before arming */
    }
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    if (ibv_get_cq_event(V.chan, &ev_cq, &ev_ctx)) die("ibv_get_cq_event failed");
    V.armed = 0;
    if (++V.unacked >= 64) { ibv_ack_cq_events(V.cq, V.unacked); V.unacked = 0; }
  }
}

/* Handles completions: receives are counted and reposted, send-side
 * completions retire wr_id WRs (a signaled WR covers the unsignaled ones
 * before it). */
static int progress(int block) {
  struct ibv_wc wc[32];
  int n = get_completions(wc, 32, block);
  for (int i = 0; i < n; i++) {
    if (wc[i].status != IBV_WC_SUCCESS)
      die("completion error: %s (opcode %d, vendor 0x%x)", ibv_wc_status_str(wc[i].status), wc[i].opcode,
          wc[i].vendor_err);
    if (wc[i].opcode & IBV_WC_RECV) {
      V.recvs++;
      /* ping: did the client mark this message as its last? */
      if (wc[i].wc_flags & IBV_WC_WITH_IMM) V.last_seen = ntohl(wc[i].imm_data) == LAST_IMM;
      else V.last_seen = V.buf[(size_t)V.nslots * V.slot_bytes] == LAST_BYTE;
      post_recv_one();
    } else {
      V.retired += wc[i].wr_id;
    }
  }
  return n;
}

/* Posts count WRs of opcode op in one ibv_post_send (a WR list when count > 1).
 * Every signal-th WR is signaled (force: the last one is). */
static int mark_last; /* the next SEND/IMM carries the "last ping" mark */

static void post_ops(int op, uint32_t size, uint32_t count, uint32_t signal, int force_signal,
                     uint64_t seq) {
  struct ibv_send_wr wrs[256], *bad;
  struct ibv_sge sges[256];
  if (count > 256) die("WR list longer than 256");
  for (uint32_t i = 0; i < count; i++) {
    uint64_t slot = (seq + i) % V.nslots;
    sges[i] = (struct ibv_sge){.addr = (uintptr_t)(V.buf + slot * V.slot_bytes), .length = size,
                               .lkey = V.mr->lkey};
    struct ibv_send_wr *w = &wrs[i];
    memset(w, 0, sizeof *w);
    w->sg_list = &sges[i];
    w->num_sge = 1;
    w->next = i + 1 < count ? &wrs[i + 1] : NULL;
    switch (op) {
      case OP_SEND: w->opcode = IBV_WR_SEND; break;
      case OP_IMM:
        w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w->imm_data = htonl(mark_last ? LAST_IMM : (uint32_t)(seq + i) & 0x7fffffff);
        break;
      case OP_WRITE: w->opcode = IBV_WR_RDMA_WRITE; break;
      case OP_READ: w->opcode = IBV_WR_RDMA_READ; break;
    }
    if (op == OP_SEND) V.buf[slot * V.slot_bytes] = mark_last ? LAST_BYTE : 'c';
    if (op != OP_SEND) {
      w->wr.rdma.remote_addr = V.remote.addr + slot * V.slot_bytes;
      w->wr.rdma.rkey = V.remote.rkey;
    }
    if (op != OP_READ && C.inline_max && size <= C.inline_max) w->send_flags |= IBV_SEND_INLINE;
    V.since_sig++;
    if (V.since_sig >= signal || (force_signal && i + 1 == count)) {
      w->send_flags |= IBV_SEND_SIGNALED;
      w->wr_id = V.since_sig;
      V.since_sig = 0;
    }
  }
  int e = ibv_post_send(V.qp, wrs, &bad);
  if (e) die("ibv_post_send (%s, %u bytes, list %u): %s", op_names[op], size, count, strerror(e));
  V.posted += count;
}

/* Waits until every posted WR is retired. */
static void drain_sends(void) {
  while (V.retired < V.posted) progress(1);
}

/* ------------------------------------------------------------------ tests */

struct result {
  double lat_min, lat_typ, lat_avg, lat_p99; /* one-way, us */
  double gbps, mmsgps, wall;
  uint64_t msgs, counted;
  double user0, sys0; /* CPU time at the start of the measured window */
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void lat_stats(double *rtt, uint32_t n, struct result *r) {
  qsort(rtt, n, sizeof *rtt, cmp_double);
  double sum = 0;
  for (uint32_t i = 0; i < n; i++) sum += rtt[i];
  r->lat_min = rtt[0] / 2 * 1e6;
  r->lat_typ = rtt[n / 2] / 2 * 1e6;
  r->lat_avg = sum / n / 2 * 1e6;
  r->lat_p99 = rtt[(uint32_t)((n - 1) * 0.99)] / 2 * 1e6;
}

static void client_ping(const struct point *p, struct result *r) {
  uint32_t total = C.warmup + C.iters, done = 0;
  double *rtt = calloc(C.iters, sizeof *rtt);
  double t_begin = now_s();
  for (uint32_t i = 0; i < total; i++) {
    /* A point stops early when it runs past -T (at least 10 measured pings). */
    int last = i + 1 == total ||
               (ping_cap_s > 0 && i >= C.warmup + 10 && now_s() - t_begin > ping_cap_s);
    double t0 = now_s();
    if (C.op == OP_WR) {
      if (C.unsig) {
        post_ops(OP_WRITE, p->size, 1, UINT32_MAX, 0, i);
        post_ops(OP_READ, p->size, 1, 1, 1, i);
      } else {
        post_ops(OP_WRITE, p->size, 1, 1, 1, i);
        drain_sends();
        post_ops(OP_READ, p->size, 1, 1, 1, i);
      }
      drain_sends();
    } else {
      uint64_t want = V.recvs + 1;
      /* keep room in the send queue for unsignaled sends */
      while (V.posted - V.retired + 1 > sq_depth() - 2) progress(1);
      mark_last = last;
      post_ops(C.op, p->size, 1, p->signal, last, i);
      mark_last = 0;
      while (V.recvs < want) progress(1);
    }
    double t1 = now_s();
    if (i >= C.warmup) rtt[done++] = t1 - t0;
    if (last) break;
  }
  drain_sends();
  r->wall = now_s() - t_begin;
  r->msgs = done;
  r->counted = done;
  if (done) lat_stats(rtt, done, r);
  free(rtt);
}

static void server_ping(const struct point *p) {
  if (C.op == OP_WR) return; /* passive: the client's WRITE/READ need no CPU here */
  for (uint32_t i = 0;; i++) {
    uint64_t want = V.recvs + 1;
    while (V.recvs < want) progress(1);
    int last = V.last_seen;
    while (V.posted - V.retired + 1 > sq_depth() - 2) progress(1);
    post_ops(C.op, p->size, 1, p->signal, last, i);
    if (last) break;
  }
}

static double blast_warm_s = -1; /* -W: blast warm-up before the measured window */

static void client_blast(const struct point *p, struct result *r) {
  uint32_t O = p->outstanding, L = p->list, S = p->signal;
  double warm = blast_warm_s >= 0 ? blast_warm_s : (C.duration_ms ? 0.1 : 0);
  double t0 = now_s(), t_meas = t0, deadline = t0 + warm + C.duration_ms / 1000.0;
  uint64_t limit = C.duration_ms ? UINT64_MAX : (uint64_t)C.iters;
  uint64_t base = V.posted, done_at_meas = 0;
  int stop = 0, measuring = warm <= 0;
  cpu_now(&r->user0, &r->sys0);
  while (!stop) {
    while (V.posted - V.retired + L <= O) {
      uint64_t left = limit - (V.posted - base);
      uint32_t n = left < L ? (uint32_t)left : L;
      post_ops(C.op, p->size, n, S, 0, V.posted);
      if (V.posted - base >= limit) { stop = 1; break; }
    }
    double t = now_s();
    if (!measuring && t >= t0 + warm) {
      /* The measured window starts here: WRs completed so far do not count. */
      measuring = 1;
      t_meas = t;
      done_at_meas = V.retired - base;
      cpu_now(&r->user0, &r->sys0);
    }
    if (C.duration_ms && t >= deadline) stop = 1;
    progress(!stop && V.posted - V.retired + L > O);
  }
  /* The last posted WR may be unsignaled: one more signaled WR retires all. */
  if (V.since_sig) {
    while (V.posted - V.retired + 1 > sq_depth() - 2) progress(1);
    post_ops(C.op, p->size, 1, S, 1, V.posted);
  }
  drain_sends();
  r->wall = now_s() - t_meas;
  r->msgs = V.posted - base; /* what the server must consume */
  uint64_t counted = r->msgs - done_at_meas;
  r->gbps = (double)counted * p->size * 8 / r->wall / 1e9;
  r->mmsgps = (double)counted / r->wall / 1e6;
  r->counted = counted;
}

/* Blast SEND/IMM target: reposts receives until the client's count arrived and
 * was consumed.  Watches the side channel for the count meanwhile. */
static uint64_t server_blast_recv(uint64_t base) {
  uint64_t expect = UINT64_MAX;
  unsigned idle = 0;
  while (V.recvs - base < expect) {
    if (expect == UINT64_MAX) {
      int check = 0;
      if (C.events) {
        /* Sleep on the completion channel and the side channel together. */
        int n = progress(0);
        if (n == 0) {
          if (!V.armed) {
            if (ibv_req_notify_cq(V.cq, 0)) die("ibv_req_notify_cq failed");
            V.armed = 1;
            continue;
          }
          struct pollfd pf[2] = {{.fd = V.chan->fd, .events = POLLIN}, {.fd = V.sock, .events = POLLIN}};
          if (poll(pf, 2, -1) < 0 && errno != EINTR) die("poll: %s", strerror(errno));
          if (pf[0].revents & POLLIN) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (ibv_get_cq_event(V.chan, &ev_cq, &ev_ctx)) die("ibv_get_cq_event failed");
            V.armed = 0;
            if (++V.unacked >= 64) { ibv_ack_cq_events(V.cq, V.unacked); V.unacked = 0; }
          }
          check = (pf[1].revents & (POLLIN | POLLHUP)) != 0;
        }
      } else {
        int n = progress(0);
        idle = n ? 0 : idle + 1;
        check = idle >= 4096;
        if (check) idle = 0;
      }
      if (check) {
        uint64_t cnt;
        ssize_t rd = recv(V.sock, &cnt, sizeof cnt, MSG_DONTWAIT | MSG_PEEK);
        if (rd == (ssize_t)sizeof cnt) {
          read_all(V.sock, &cnt, sizeof cnt);
          expect = cnt;
        } else if (rd == 0) {
          die("side channel closed by peer");
        }
      }
    } else {
      progress(1);
    }
  }
  return expect;
}

/* ------------------------------------------------------------ side channel */

static int tcp_listen(int port) {
  int one = 1, zero = 0, s = socket(AF_INET6, SOCK_STREAM, 0);
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port), .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = INADDR_ANY};
  struct sockaddr *a = (struct sockaddr *)&a6;
  socklen_t alen = sizeof a6;
  if (s < 0) { /* no IPv6 here: IPv4 only */
    s = socket(AF_INET, SOCK_STREAM, 0);
    a = (struct sockaddr *)&a4;
    alen = sizeof a4;
  }
  if (s < 0) die("socket: %s", strerror(errno));
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (a == (struct sockaddr *)&a6) setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(s, a, alen) || listen(s, 1)) die("listen on port %d: %s", port, strerror(errno));
  int c = accept(s, NULL, NULL);
  if (c < 0) die("accept: %s", strerror(errno));
  close(s);
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return c;
}

static int tcp_connect(const char *host, int port, double timeout_s) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  int e = getaddrinfo(host, ps, &hints, &res);
  if (e) die("%s: %s", host, gai_strerror(e));
  double end = now_s() + timeout_s;
  for (;;) {
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
      int s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (s < 0) continue;
      if (connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        freeaddrinfo(res);
        return s;
      }
      close(s);
    }
    if (now_s() > end) die("cannot connect to %s:%d", host, port);
    usleep(100000);
  }
}

/* ------------------------------------------------------------------- main */

static void usage(void) {
  fputs("usage: droce-study [options] [SERVER_HOST]   (no host: server)\n"
        "  -d DEV        device (default: the first)      -i PORT   port (1)\n"
        "  -x IDX        GID index (0)                     -p PORT   TCP port (18600)\n"
        "  -M ping|blast mode (ping)                       -o OP     send|imm|wr (ping), send|imm|write|read (blast)\n"
        "  -s LIST       sizes, e.g. 1,64,4K,1M (64)       -t LIST   outstanding WRs, blast (16)\n"
        "  -l LIST       WRs per ibv_post_send (1)         -c LIST   signal every N WRs (1)\n"
        "  -n N          ping iterations / blast WRs when no -D (1000)\n"
        "  -w N          ping warm-up iterations (100)     -D SECS   blast duration per point\n"
        "  -W SECS       blast warm-up before the measured -D window (0.1 with -D, else 0)\n"
        "  -T SECS       a ping point stops after SECS (with >= 10 measured pings; 0: never)\n"
        "  -I N          inline up to N bytes (0: never)   -e        completion events, not busy polling\n"
        "  -m MTU        path MTU 256..4096 (4096, capped by both ports)\n"
        "  -u            wr ping: unsignaled WRITE, READ posted at once\n"
        "  -H            print the CSV header first        -v        verbose\n"
        "CSV (client): mode,op,bytes,iters,outstanding,list,signal,inline,events,mtu,unsig,lat_min_us,\n"
        "  lat_typ_us,lat_avg_us,lat_p99_us,gbps,mmsgps,wall_s,client_user_s,client_sys_s,server_user_s,\n"
        "  server_sys_s,client_cpu_pct,server_cpu_pct   (latency is one-way: RTT/2)\n",
        stderr);
  exit(2);
}

#define CSV_HEADER                                                                                   \
  "mode,op,bytes,iters,outstanding,list,signal,inline,events,mtu,unsig,lat_min_us,lat_typ_us,"      \
  "lat_avg_us,lat_p99_us,gbps,mmsgps,wall_s,client_user_s,client_sys_s,server_user_s,server_sys_s," \
  "client_cpu_pct,server_cpu_pct"

int main(int argc, char **argv) {
  const char *dev = NULL;
  int tcp_port = 18600, header = 0;
  uint32_t sizes[MAX_POINTS] = {64}, outs[MAX_POINTS] = {16}, lists[MAX_POINTS] = {1}, sigs[MAX_POINTS] = {1};
  int nsizes = 1, nouts = 1, nlists = 1, nsigs = 1;
  double duration = 0;
  C = (struct cfg){.magic = MAGIC, .version = VERSION, .mode = MODE_PING, .op = OP_SEND, .mtu = 4096,
                   .iters = 1000, .warmup = 100};
  V.port = 1;
  int opt;
  while ((opt = getopt(argc, argv, "d:i:x:p:M:o:s:t:l:c:n:w:W:T:D:I:em:uHvh")) != -1) {
    switch (opt) {
      case 'd': dev = optarg; break;
      case 'i': V.port = atoi(optarg); break;
      case 'x': V.gid_index = atoi(optarg); break;
      case 'p': tcp_port = atoi(optarg); break;
      case 'M':
        if (!strcmp(optarg, "ping")) C.mode = MODE_PING;
        else if (!strcmp(optarg, "blast")) C.mode = MODE_BLAST;
        else usage();
        break;
      case 'o': {
        int found = 0;
        for (int i = 0; i < 5; i++)
          if (!strcmp(optarg, op_names[i])) C.op = (uint32_t)i, found = 1;
        if (!found) usage();
        break;
      }
      case 's': nsizes = parse_list(optarg, sizes, MAX_POINTS, "size"); break;
      case 't': nouts = parse_list(optarg, outs, MAX_POINTS, "outstanding"); break;
      case 'l': nlists = parse_list(optarg, lists, MAX_POINTS, "list"); break;
      case 'c': nsigs = parse_list(optarg, sigs, MAX_POINTS, "signal"); break;
      case 'n': C.iters = (uint32_t)atoi(optarg); break;
      case 'w': C.warmup = (uint32_t)atoi(optarg); break;
      case 'D': duration = atof(optarg); break;
      case 'W': blast_warm_s = atof(optarg); break;
      case 'T': ping_cap_s = atof(optarg); break;
      case 'I': C.inline_max = (uint32_t)atoi(optarg); break;
      case 'e': C.events = 1; break;
      case 'm': C.mtu = (uint32_t)atoi(optarg); mtu_enum(C.mtu); break;
      case 'u': C.unsig = 1; break;
      case 'H': header = 1; break;
      case 'v': V.verbose = 1; break;
      default: usage();
    }
  }
  const char *host = optind < argc ? argv[optind] : NULL;
  srand48(getpid() ^ (long)time(NULL));

  struct point points[MAX_POINTS * 4];
  int npoints = 0;
  if (host) {
    if (C.mode == MODE_PING && C.op != OP_SEND && C.op != OP_IMM && C.op != OP_WR)
      die("ping takes -o send, imm or wr");
    if (C.mode == MODE_BLAST && C.op == OP_WR) die("blast takes -o send, imm, write or read");
    if (C.iters == 0) die("-n must be > 0");
    C.duration_ms = (uint32_t)(duration * 1000);
    /* Every combination; list and signal are clamped to the outstanding count
     * (a blast cannot wait for a signal it never posts). */
    for (int a = 0; a < nsizes; a++)
      for (int b = 0; b < nouts; b++)
        for (int c = 0; c < nlists; c++)
          for (int d = 0; d < nsigs; d++) {
            if (npoints == MAX_POINTS) die("more than %d points", MAX_POINTS);
            struct point p = {sizes[a], C.mode == MODE_PING ? 1 : outs[b], lists[c], sigs[d]};
            if (C.mode == MODE_PING) p.list = 1;
            if (C.mode == MODE_BLAST) {
              p.list = umin(p.list, p.outstanding);
              p.signal = umin(p.signal, p.outstanding);
            }
            points[npoints++] = p;
            C.max_size = umax(C.max_size, p.size);
            C.max_outstanding = umax(C.max_outstanding, p.outstanding);
            C.max_list = umax(C.max_list, p.list);
            C.max_signal = umax(C.max_signal, p.signal);
          }
    /* Data slots: one per outstanding WR, at most 64 MiB in all. */
    uint64_t cap = (64ull << 20) / C.max_size;
    C.nslots = (uint32_t)umax(1, umin(C.max_outstanding, (uint32_t)umin(cap, 1024)));
    V.sock = tcp_connect(host, tcp_port, 60);
    write_all(V.sock, &C, sizeof C);
    open_device(dev);
    setup_resources();
    write_all(V.sock, &V.local, sizeof V.local);
    read_all(V.sock, &V.remote, sizeof V.remote);
  } else {
    V.sock = tcp_listen(tcp_port);
    read_all(V.sock, &C, sizeof C);
    if (C.magic != MAGIC || C.version != VERSION) die("client speaks another droce-study protocol");
    open_device(dev);
    setup_resources();
    read_all(V.sock, &V.remote, sizeof V.remote);
    write_all(V.sock, &V.local, sizeof V.local);
  }
  connect_qp();
  if (V.verbose)
    fprintf(stderr, "droce-study: %s %s qpn 0x%x -> 0x%x, mtu %u, slots %u x %zu\n", host ? "client" : "server",
            ibv_get_device_name(V.ctx->device), V.local.qpn, V.remote.qpn, C.mtu, V.nslots, V.slot_bytes);
  char ready = 1;
  write_all(V.sock, &ready, 1); /* both QPs are in RTS before anyone sends */
  read_all(V.sock, &ready, 1);

  if (host) {
    if (header) puts(CSV_HEADER);
    for (int i = 0; i < npoints; i++) {
      struct point *p = &points[i];
      write_all(V.sock, p, sizeof *p);
      read_all(V.sock, &ready, 1);
      double u1, s1;
      struct result r = {0};
      cpu_now(&r.user0, &r.sys0);
      if (C.mode == MODE_PING) client_ping(p, &r);
      else client_blast(p, &r);
      cpu_now(&u1, &s1);
      double u0 = r.user0, s0 = r.sys0;
      uint64_t cnt = r.msgs;
      write_all(V.sock, &cnt, sizeof cnt);
      struct side_usage su;
      read_all(V.sock, &su, sizeof su);
      double cu = u1 - u0, cs = s1 - s0;
      int inl = C.op != OP_READ && C.inline_max && p->size <= C.inline_max;
      printf("%s,%s,%u,%llu,%u,%u,%u,%d,%u,%u,%u,", mode_names[C.mode], op_names[C.op], p->size,
             (unsigned long long)r.counted, p->outstanding, p->list, p->signal, inl,
             C.events, C.mtu, C.unsig);
      if (C.mode == MODE_PING) printf("%.3f,%.3f,%.3f,%.3f,,,", r.lat_min, r.lat_typ, r.lat_avg, r.lat_p99);
      else printf(",,,,%.4f,%.5f,", r.gbps, r.mmsgps);
      printf("%.4f,%.4f,%.4f,%.4f,%.4f,%.1f,%.1f\n", r.wall, cu, cs, su.user, su.sys, (cu + cs) / r.wall * 100,
             su.wall > 0 ? (su.user + su.sys) / su.wall * 100 : 0);
      fflush(stdout);
    }
    struct point end = {0, 0, 0, 0};
    write_all(V.sock, &end, sizeof end);
  } else {
    for (;;) {
      struct point p;
      read_all(V.sock, &p, sizeof p);
      if (p.size == 0) break;
      double u0, s0, u1, s1, t0 = now_s();
      cpu_now(&u0, &s0);
      uint64_t base = V.recvs;
      write_all(V.sock, &ready, 1);
      uint64_t cnt;
      if (C.mode == MODE_PING) {
        server_ping(&p);
        read_all(V.sock, &cnt, sizeof cnt);
      } else if (C.op == OP_SEND || C.op == OP_IMM) {
        cnt = server_blast_recv(base);
      } else {
        read_all(V.sock, &cnt, sizeof cnt); /* one-sided: nothing to do here */
      }
      drain_sends();
      cpu_now(&u1, &s1);
      struct side_usage su = {u1 - u0, s1 - s0, now_s() - t0};
      write_all(V.sock, &su, sizeof su);
    }
  }
  if (V.unacked) ibv_ack_cq_events(V.cq, V.unacked);
  ibv_destroy_qp(V.qp);
  ibv_dereg_mr(V.mr);
  ibv_destroy_cq(V.cq);
  if (V.chan) ibv_destroy_comp_channel(V.chan);
  ibv_dealloc_pd(V.pd);
  ibv_close_device(V.ctx);
  free(V.buf);
  close(V.sock);
  return 0;
}
