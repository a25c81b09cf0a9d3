// The fabric daemon stopped or killed under a running program, and back
// (doc/droced.md): one process opens two fabric devices (droce0,
// droce1), connects an RC QP pair across them (every frame crosses droced),
// checks a SEND and a WRITE, leaves receives posted, prints READY and waits
// while the harness (daemon_loss.sh) stops or SIGKILLs the daemon. Then:
// IBV_EVENT_PORT_ERR on both contexts' async fds, the posted receives
// complete with IBV_WC_WR_FLUSH_ERR, the QPs are in ERR and the ports DOWN;
// prints LOST. The harness starts the daemon again: IBV_EVENT_PORT_ACTIVE on
// both, the ports ACTIVE, and a new QP pair moves and verifies data; prints
// OK. Exit status 0 only if every step held.
//
//   daemon_loss DEV_A DEV_B
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kBuf = 65536, kPending = 8, kGid = 1 };

static void Fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "FAIL: ");
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct Side {
  const char* name;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* mr;
  struct ibv_qp* qp;
  uint8_t* buf;
  union ibv_gid gid;
};

static void Open(struct Side* s, const char* name) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; i < n && s->ctx == NULL; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), name) == 0) s->ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (s->ctx == NULL) Fail("cannot open %s", name);
  s->name = name;
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 256, NULL, NULL, 0);
  s->buf = aligned_alloc(4096, kBuf);
  if (s->pd == NULL || s->cq == NULL || s->buf == NULL) Fail("%s: pd/cq", name);
  s->mr = ibv_reg_mr(s->pd, s->buf, kBuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (s->mr == NULL) Fail("%s: reg_mr", name);
  if (ibv_query_gid(s->ctx, 1, kGid, &s->gid) != 0) Fail("%s: query_gid", name);
}

static void CreateQp(struct Side* s) {
  struct ibv_qp_init_attr ia = {0};
  ia.send_cq = s->cq;
  ia.recv_cq = s->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 64;
  ia.cap.max_recv_wr = 64;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  s->qp = ibv_create_qp(s->pd, &ia);
  if (s->qp == NULL) Fail("%s: create_qp", s->name);
  struct ibv_qp_attr a = {0};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    Fail("%s: INIT", s->name);
  }
}

static void Connect(struct Side* s, const struct Side* peer) {
  struct ibv_qp_attr a = {0};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = peer->qp->qp_num;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = peer->gid;
  a.ah_attr.grh.sgid_index = kGid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    Fail("%s: RTR", s->name);
  }
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 12;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    Fail("%s: RTS", s->name);
  }
}

static void PostRecv(struct Side* s, uint64_t id, uint32_t offset, uint32_t len) {
  struct ibv_sge sge = {(uintptr_t)(s->buf + offset), len, s->mr->lkey};
  struct ibv_recv_wr wr = {0}, *bad;
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(s->qp, &wr, &bad) != 0) Fail("%s: post_recv", s->name);
}

// Waits for one completion on s->cq; returns it.
static struct ibv_wc Poll1(struct Side* s, double timeout_s) {
  struct ibv_wc wc;
  const double end = Now() + timeout_s;
  while (Now() < end) {
    const int n = ibv_poll_cq(s->cq, 1, &wc);
    if (n < 0) Fail("%s: poll_cq", s->name);
    if (n == 1) return wc;
  }
  Fail("%s: no completion in %.0f s", s->name, timeout_s);
  return wc;
}

// A SEND a->b and a WRITE b->a, both verified byte by byte.
static void Traffic(struct Side* a, struct Side* b, unsigned seed) {
  for (int i = 0; i < kBuf; ++i) a->buf[i] = (uint8_t)(i * 7 + seed);
  memset(b->buf, 0, kBuf);
  PostRecv(b, 1, 0, 4096);
  struct ibv_sge sge = {(uintptr_t)a->buf, 4096, a->mr->lkey};
  struct ibv_send_wr wr = {0}, *bad;
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(a->qp, &wr, &bad) != 0) Fail("post_send");
  struct ibv_wc wc = Poll1(b, 20);
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != 4096) {
    Fail("SEND: receive status %s opcode %d len %u", ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len);
  }
  wc = Poll1(a, 20);
  if (wc.status != IBV_WC_SUCCESS) Fail("SEND: %s", ibv_wc_status_str(wc.status));
  if (memcmp(a->buf, b->buf, 4096) != 0) Fail("SEND: data differs");
  // WRITE the whole buffer back from b into a.
  for (int i = 0; i < kBuf; ++i) b->buf[i] = (uint8_t)(i * 13 + seed + 1);
  sge.addr = (uintptr_t)b->buf;
  sge.length = kBuf;
  sge.lkey = b->mr->lkey;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.wr.rdma.remote_addr = (uintptr_t)a->buf;
  wr.wr.rdma.rkey = a->mr->rkey;
  if (ibv_post_send(b->qp, &wr, &bad) != 0) Fail("post WRITE");
  wc = Poll1(b, 20);
  if (wc.status != IBV_WC_SUCCESS) Fail("WRITE: %s", ibv_wc_status_str(wc.status));
  if (memcmp(a->buf, b->buf, kBuf) != 0) Fail("WRITE: data differs");
}

// Waits for `want` on the context's async fd (other events are noted).
static void WaitEvent(struct Side* s, enum ibv_event_type want, double timeout_s) {
  const double end = Now() + timeout_s;
  while (Now() < end) {
    struct pollfd pfd = {s->ctx->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    struct ibv_async_event ev;
    if (ibv_get_async_event(s->ctx, &ev) != 0) Fail("%s: get_async_event", s->name);
    const enum ibv_event_type got = ev.event_type;
    const int port = (got == IBV_EVENT_PORT_ERR || got == IBV_EVENT_PORT_ACTIVE) ? ev.element.port_num : -1;
    ibv_ack_async_event(&ev);
    printf("%s: async event %s%s\n", s->name, ibv_event_type_str(got), port == 1 ? " (port 1)" : "");
    if (port != -1 && port != 1) Fail("%s: port event for port %d", s->name, port);
    if (got == want) return;
  }
  Fail("%s: no %s in %.0f s", s->name, ibv_event_type_str(want), timeout_s);
}

static void ExpectPort(struct Side* s, enum ibv_port_state want) {
  struct ibv_port_attr pa;
  if (ibv_query_port(s->ctx, 1, &pa) != 0) Fail("%s: query_port", s->name);
  if (pa.state != want) Fail("%s: port %s, expected %s", s->name, ibv_port_state_str(pa.state), ibv_port_state_str(want));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: daemon_loss DEV_A DEV_B\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct Side a = {0}, b = {0};
  Open(&a, argv[1]);
  Open(&b, argv[2]);
  CreateQp(&a);
  CreateQp(&b);
  Connect(&a, &b);
  Connect(&b, &a);
  Traffic(&a, &b, 1);
  ExpectPort(&a, IBV_PORT_ACTIVE);
  for (int i = 0; i < kPending; ++i) {
    PostRecv(&a, 100 + i, 0, 64);
    PostRecv(&b, 100 + i, 0, 64);
  }
  printf("READY\n");
  // The harness stops or kills the daemon now.
  WaitEvent(&a, IBV_EVENT_PORT_ERR, 30);
  WaitEvent(&b, IBV_EVENT_PORT_ERR, 5);
  struct Side* sides[2] = {&a, &b};
  for (int k = 0; k < 2; ++k) {
    struct Side* s = sides[k];
    for (int i = 0; i < kPending; ++i) {
      const struct ibv_wc wc = Poll1(s, 10);
      if (wc.status != IBV_WC_WR_FLUSH_ERR || wc.wr_id != (uint64_t)(100 + i)) {
        Fail("%s: completion %d: %s wr_id %lu, expected a flushed receive", s->name, i,
             ibv_wc_status_str(wc.status), (unsigned long)wc.wr_id);
      }
    }
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    if (ibv_query_qp(s->qp, &qa, IBV_QP_STATE, &qi) != 0) Fail("%s: query_qp", s->name);
    if (qa.qp_state != IBV_QPS_ERR) Fail("%s: QP state %d, expected ERR", s->name, qa.qp_state);
    ExpectPort(s, IBV_PORT_DOWN);
  }
  printf("LOST: port down, %d receives flushed on each side, QPs in ERR\n", kPending);
  // The harness starts the daemon again.
  WaitEvent(&a, IBV_EVENT_PORT_ACTIVE, 60);
  WaitEvent(&b, IBV_EVENT_PORT_ACTIVE, 10);
  ExpectPort(&a, IBV_PORT_ACTIVE);
  ExpectPort(&b, IBV_PORT_ACTIVE);
  if (ibv_destroy_qp(a.qp) != 0 || ibv_destroy_qp(b.qp) != 0) Fail("destroy_qp");
  CreateQp(&a);
  CreateQp(&b);
  Connect(&a, &b);
  Connect(&b, &a);
  Traffic(&a, &b, 2);
  Traffic(&b, &a, 3);
  printf("OK: new QPs %u <-> %u moved and verified data after the daemon came back\n", a.qp->qp_num, b.qp->qp_num);
  ibv_destroy_qp(a.qp);
  ibv_destroy_qp(b.qp);
  ibv_dereg_mr(a.mr);
  ibv_dereg_mr(b.mr);
  ibv_destroy_cq(a.cq);
  ibv_destroy_cq(b.cq);
  ibv_dealloc_pd(a.pd);
  ibv_dealloc_pd(b.pd);
  ibv_close_device(a.ctx);
  ibv_close_device(b.ctx);
  return 0;
}
