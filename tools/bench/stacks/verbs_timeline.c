// Diagnostic preload for tools/bench/stacks/verbs_timeline.sh (not part of droce): wraps the
// context ops post_send, poll_cq and post_srq_recv of every device the program opens
// (libibverbs' inline ibv_post_send / ibv_poll_cq call through them). One unlocked
// log per process: calls from a second thread (UCX's async thread, rarely) may
// blur a record. Records: ev 1 post (a qpn, b bytes, c opcode<<16|WRs<<8|flags),
// 2 poll with completions (a completions, b received bytes, c receives), 4 SRQ
// post (a WQEs); e/et the empty polls (count, ns) since the previous record; csw
// the thread's involuntary<<32|voluntary context switches, read after a call over 10 us.

#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#define N (1u << 22)
typedef struct { uint64_t t0, t1; uint32_t ev, a, b, c, e, et; uint64_t csw; } rec;
static uint32_t e_n, e_t;
static rec *L; static uint32_t n;
static int (*o_post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int (*o_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
static int (*o_post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static inline uint64_t now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec * 1000000000ull + ts.tv_nsec; }
static inline void put(uint64_t t0, uint64_t t1, uint32_t ev, uint32_t a, uint32_t b, uint32_t c) {
  if (L && n < N) { rec *r = &L[n++]; r->t0 = t0; r->t1 = t1; r->ev = ev; r->a = a; r->b = b; r->c = c; r->e = e_n; r->et = e_t; e_n = 0; e_t = 0; r->csw = 0;
    if (t1 - t0 > 10000) { struct rusage u; getrusage(RUSAGE_THREAD, &u); r->csw = ((uint64_t)u.ru_nivcsw << 32) | (uint32_t)u.ru_nvcsw; } }
}
static int w_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  uint64_t t0 = now(); int rc = o_post_send(qp, wr, bad); uint64_t t1 = now();
  uint32_t bytes = 0, cnt = 0; for (struct ibv_send_wr *w = wr; w; w = w->next) { ++cnt; for (int i = 0; i < w->num_sge; ++i) bytes += w->sg_list[i].length; }
  put(t0, t1, 1, qp->qp_num, bytes, (wr->opcode << 16) | (cnt << 8) | (wr->send_flags & 0xff));
  return rc;
}
static int w_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc) {
  uint64_t t0 = now(); int rc = o_poll_cq(cq, ne, wc); uint64_t t1 = now();
  if (rc > 0) { uint32_t bytes = 0, rx = 0; for (int i = 0; i < rc; ++i) { if (wc[i].opcode & IBV_WC_RECV) { ++rx; bytes += wc[i].byte_len; } }
    put(t0, t1, 2, rc, bytes, rx);
  } else { ++e_n; e_t += (uint32_t)(t1 - t0); }
  return rc;
}
static int w_post_srq_recv(struct ibv_srq *s, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  uint64_t t0 = now(); int rc = o_post_srq_recv(s, wr, bad); uint64_t t1 = now();
  uint32_t cnt = 0; for (struct ibv_recv_wr *w = wr; w; w = w->next) ++cnt;
  put(t0, t1, 4, cnt, 0, 0); return rc;
}
static void hook(struct ibv_context *c) {
  if (!c || c->ops.post_send == w_post_send) return;
  o_post_send = c->ops.post_send; c->ops.post_send = w_post_send;
  o_poll_cq = c->ops.poll_cq; c->ops.poll_cq = w_poll_cq;
  o_post_srq_recv = c->ops.post_srq_recv; c->ops.post_srq_recv = w_post_srq_recv;
  if (!L) L = calloc(N, sizeof(rec));
}
struct ibv_context *ibv_open_device(struct ibv_device *d) {
  static struct ibv_context *(*o)(struct ibv_device *);
  if (!o) o = dlsym(RTLD_NEXT, "ibv_open_device");
  if (!o) o = dlsym(dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL), "ibv_open_device");
  struct ibv_context *c = o(d); hook(c); return c;
}
__attribute__((destructor)) static void dump(void) {
  if (!L || !n) return;
  char p[256]; snprintf(p, sizeof p, "%s/shim.%d.bin", getenv("SHIM_DIR") ? getenv("SHIM_DIR") : ".", getpid());
  FILE *f = fopen(p, "w"); if (!f) return; fwrite(L, sizeof(rec), n, f); fclose(f);
}
