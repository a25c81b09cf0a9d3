// A UD QP attached to a multicast group keeps getting the group's datagrams
// after droced restarts (tests/netns/netns.sh, doc/netdev.md "Multicast"):
//
//   mcast_restart recv DEV GROUP SECONDS
//   mcast_restart send DEV GROUP COUNT
//
// recv: a UD QP (Q_Key 0x11111111) attached to GROUP prints "attached", then
// waits up to SECONDS for IBV_EVENT_PORT_ERR (droced gone: the QP flushed)
// and IBV_EVENT_PORT_ACTIVE (re-attached to the new droced), takes the QP
// back to RTS (its attachment stays, as a verbs QP's does through RESET),
// prints "ready" and waits up to SECONDS for a datagram to the group; prints
// "received N bytes" and exits 0 when one came.
// send: COUNT datagrams of 64 bytes to GROUP from GID 1, one each 100 ms.
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

enum { kQkey = 0x11111111, kSize = 64, kGrh = 40 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static int to_rts(struct ibv_qp* qp) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) return -1;
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = kQkey};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0) return -1;
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != 0) return -1;
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// Waits until the context reports `want` (other events are printed and skipped).
static int wait_event(struct ibv_context* ctx, enum ibv_event_type want, double deadline) {
  for (;;) {
    struct pollfd p = {ctx->async_fd, POLLIN, 0};
    const int ms = (int)((deadline - now_s()) * 1000);
    if (ms <= 0 || poll(&p, 1, ms) <= 0) return -1;
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) return -1;
    const enum ibv_event_type type = ev.event_type;
    ibv_ack_async_event(&ev);
    printf("event %s\n", ibv_event_type_str(type));
    fflush(stdout);
    if (type == want) return 0;
  }
}

int main(int argc, char** argv) {
  if (argc != 5 || (strcmp(argv[1], "recv") != 0 && strcmp(argv[1], "send") != 0)) {
    fprintf(stderr, "usage: %s recv|send DEV GROUP SECONDS|COUNT\n", argv[0]);
    return 2;
  }
  const int recv = strcmp(argv[1], "recv") == 0;
  const int arg = atoi(argv[4]);
  union ibv_gid group;
  memset(&group, 0, sizeof group);
  if (inet_pton(AF_INET6, argv[3], group.raw) != 1) {
    group.raw[10] = group.raw[11] = 0xff;
    if (inet_pton(AF_INET, argv[3], &group.raw[12]) != 1) {
      fprintf(stderr, "bad group %s\n", argv[3]);
      return 2;
    }
  }
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list != NULL && i < n && ctx == NULL; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), argv[2]) == 0) ctx = ibv_open_device(list[i]);
  }
  if (ctx == NULL) {
    fprintf(stderr, "no device %s\n", argv[2]);
    return 1;
  }
  static char buf[8][kGrh + kSize];
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_mr* mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
  struct ibv_cq* cq = mr ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
  struct ibv_qp* qp = cq ? ibv_create_qp(pd, &init) : NULL;
  if (qp == NULL || to_rts(qp) != 0) {
    fprintf(stderr, "no UD QP in RTS: %s\n", strerror(errno));
    return 1;
  }
  struct ibv_wc wc;
  if (!recv) {
    struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1,
                             .grh = {.dgid = group, .sgid_index = 1, .hop_limit = 1}};
    struct ibv_ah* a = ibv_create_ah(pd, &ah);
    if (a == NULL) {
      fprintf(stderr, "ibv_create_ah: %s\n", strerror(errno));
      return 1;
    }
    for (int i = 0; i < arg; ++i) {
      struct ibv_sge sge = {(uintptr_t)buf[0], kSize, mr->lkey};
      struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
                               .wr.ud = {.ah = a, .remote_qpn = 0xFFFFFF, .remote_qkey = kQkey}}, *bad;
      if (ibv_post_send(qp, &wr, &bad) != 0) return 1;
      const double deadline = now_s() + 5;
      int got;
      while ((got = ibv_poll_cq(cq, 1, &wc)) == 0 && now_s() < deadline) usleep(1000);
      if (got != 1 || wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "send %d: %s\n", i, got == 1 ? ibv_wc_status_str(wc.status) : "no completion");
        return 1;
      }
      usleep(100000);
    }
    printf("sent %d\n", arg);
    return 0;
  }
  int rc;
  if ((rc = ibv_attach_mcast(qp, &group, 0)) != 0) {
    fprintf(stderr, "ibv_attach_mcast: %s\n", strerror(rc));
    return 1;
  }
  printf("attached\n");
  fflush(stdout);
  const double deadline = now_s() + arg;
  if (wait_event(ctx, IBV_EVENT_PORT_ERR, deadline) != 0 || wait_event(ctx, IBV_EVENT_PORT_ACTIVE, deadline) != 0) {
    fprintf(stderr, "no PORT_ERR and PORT_ACTIVE within %d s\n", arg);
    return 1;
  }
  while (ibv_poll_cq(cq, 1, &wc) > 0) {
  }
  if (to_rts(qp) != 0) {
    fprintf(stderr, "back to RTS: %s\n", strerror(errno));
    return 1;
  }
  for (int i = 0; i < 8; ++i) {
    struct ibv_sge sge = {(uintptr_t)buf[i], sizeof buf[i], mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad) != 0) return 1;
  }
  printf("ready\n");
  fflush(stdout);
  const double until = now_s() + arg;
  while (now_s() < until) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) {
      if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "receive: %s\n", ibv_wc_status_str(wc.status));
        return 1;
      }
      printf("received %u bytes\n", wc.byte_len - kGrh);
      return 0;
    }
    usleep(1000);
  }
  fprintf(stderr, "nothing to the group within %d s\n", arg);
  return 1;
}
