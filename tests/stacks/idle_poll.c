// Empty polls of idle devices, and arrivals on them (doc/verbs.md "Who drives
// the device"): opens every RDMA device libibverbs lists, each with a UD QP, a
// send CQ and a receive CQ, as UCX's progress sees them.
//   1. Idle: every CQ polled ROUNDS times; nothing may be found.
//   2. Arrivals: datagrams from each device to the next (in a ring), one at
//      a time. Once the sender's completion is in, the datagram is in the
//      receiver's direct ring (droced gives every two ports of the fabric
//      one, and a UD send completes when its frame is handed to it), so the
//      receiver's next poll_cq must find it: the poll runs a round whenever
//      a frame waits. Datagrams sent before the pair's direct ring is up go
//      through droced (whose turn may be late on a loaded host) and may take
//      more polls: each pair sends until RUN datagrams in a row were each
//      found by the first poll, at most MAX_DATAGRAMS.
// Prints the polls each datagram took; exit 0 when every check held.
//   idle_poll [ROUNDS]
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 16
#define RUN 100
#define MAX_DATAGRAMS 5000

struct Dev {
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_cq *send_cq, *recv_cq;
  struct ibv_qp* qp;
  struct ibv_mr* mr;
  char buf[2][4096];  // [0] sent from, [1] received into (40 bytes of GRH first)
  union ibv_gid gid;
  const char* name;
};

static struct Dev devs[MAX_DEVICES];
static int n_devs;

static int Open(struct ibv_device* d, struct Dev* v) {
  v->name = ibv_get_device_name(d);
  v->ctx = ibv_open_device(d);
  if (v->ctx == NULL) return 1;
  v->pd = ibv_alloc_pd(v->ctx);
  v->send_cq = ibv_create_cq(v->ctx, 64, NULL, NULL, 0);
  v->recv_cq = ibv_create_cq(v->ctx, 64, NULL, NULL, 0);
  if (v->pd == NULL || v->send_cq == NULL || v->recv_cq == NULL) return 1;
  v->mr = ibv_reg_mr(v->pd, v->buf, sizeof v->buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_qp_init_attr a = {.send_cq = v->send_cq, .recv_cq = v->recv_cq, .qp_type = IBV_QPT_UD,
                               .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
  v->qp = ibv_create_qp(v->pd, &a);
  if (v->mr == NULL || v->qp == NULL || ibv_query_gid(v->ctx, 1, 1, &v->gid) != 0) return 1;
  struct ibv_qp_attr m = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
  if (ibv_modify_qp(v->qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return 1;
  m.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(v->qp, &m, IBV_QP_STATE)) return 1;
  m.qp_state = IBV_QPS_RTS;
  return ibv_modify_qp(v->qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static int PostRecv(struct Dev* v) {
  struct ibv_sge s = {(uintptr_t)v->buf[1], sizeof v->buf[1], v->mr->lkey};
  struct ibv_recv_wr w = {.wr_id = 1, .sg_list = &s, .num_sge = 1}, *bad;
  return ibv_post_recv(v->qp, &w, &bad);
}

// One datagram from `from` to `to`: the polls of to's receive CQ it took
// after from's send completed, or -1 on an error.
static long Datagram(struct Dev* from, struct Dev* to, int seq) {
  struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = to->gid, .sgid_index = 1, .hop_limit = 64}};
  struct ibv_ah* ah = ibv_create_ah(from->pd, &aa);
  if (ah == NULL) return -1;
  snprintf(from->buf[0], 64, "datagram %d", seq);
  struct ibv_sge s = {(uintptr_t)from->buf[0], 64, from->mr->lkey};
  struct ibv_send_wr w = {.wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
                          .wr.ud = {.ah = ah, .remote_qpn = to->qp->qp_num, .remote_qkey = 0x11111111}},
                     *bad;
  struct ibv_wc wc;
  long polls = -1;
  if (ibv_post_send(from->qp, &w, &bad) == 0) {
    int n;
    while ((n = ibv_poll_cq(from->send_cq, 1, &wc)) == 0) {
    }
    if (n == 1 && wc.status == IBV_WC_SUCCESS) {
      for (polls = 1; (n = ibv_poll_cq(to->recv_cq, 1, &wc)) == 0; ++polls) {
        if (polls > 100000000) break;
      }
      if (n != 1 || wc.status != IBV_WC_SUCCESS || strcmp(to->buf[1] + 40, from->buf[0]) != 0) polls = -1;
      if (PostRecv(to) != 0) polls = -1;
    }
  }
  ibv_destroy_ah(ah);
  return polls;
}

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 10000;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != NULL && i < n && n_devs < MAX_DEVICES; ++i) {
    if (Open(list[i], &devs[n_devs]) != 0 || PostRecv(&devs[n_devs]) != 0) {
      fprintf(stderr, "idle_poll: cannot set up %s\n", ibv_get_device_name(list[i]));
      return 1;
    }
    ++n_devs;
  }
  if (n_devs < 2) {
    fprintf(stderr, "idle_poll: needs two devices\n");
    return 1;
  }
  struct ibv_wc wc[4];
  long found = 0;
  for (long r = 0; r < rounds; ++r) {
    for (int i = 0; i < n_devs; ++i) {
      found += ibv_poll_cq(devs[i].send_cq, 4, wc) + ibv_poll_cq(devs[i].recv_cq, 4, wc);
    }
  }
  printf("idle: %ld polls of %d devices' CQs found %ld completions\n", rounds * 2 * n_devs, n_devs, found);
  int bad = found != 0;
  for (int i = 0; i < n_devs; ++i) {
    long sent = 0, in_a_row = 0, late = 0, worst = 0;
    while (in_a_row < RUN && sent < MAX_DATAGRAMS) {
      const long polls = Datagram(&devs[i], &devs[(i + 1) % n_devs], (int)sent++);
      if (polls < 0) {
        fprintf(stderr, "idle_poll: datagram %ld %s -> %s failed\n", sent, devs[i].name, devs[(i + 1) % n_devs].name);
        return 1;
      }
      if (polls == 1) {
        ++in_a_row;
      } else {
        in_a_row = 0;
        ++late;
        if (polls > worst) worst = polls;
      }
    }
    printf("%s -> %s: %ld datagrams, the last %ld each found by the first poll; %ld before took more (at most %ld polls)\n",
           devs[i].name, devs[(i + 1) % n_devs].name, sent, in_a_row, late, worst);
    bad |= in_a_row < RUN;
  }
  return bad;
}
