// What a program sees of its netdev-bound device while the interface
// changes (tests/netns/netns.sh, doc/netdev.md): two RC QPs of the device
// connected to each other through its loopback from the source GID `gid`
// (GID index), a second pair from GID `keep`, and every async event printed
// as it comes, with the QPs' states:
//
//   netdev_events DEV GID KEEP SECONDS
//
// Prints "ready" once both pairs are in RTS, then one line per event
// ("event GID_CHANGE", "event PORT_ERR", "event QP_FATAL qp 0x...") and, at
// the end, "pair GID state S/S" for each pair (S: 3 RTS, 6 ERR) and
// "gid[N] ADDR" for the table as ibv_query_gid reads it.
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int connect_pair(struct ibv_qp* a, struct ibv_qp* b, int gid_index, union ibv_gid* gid) {
  struct ibv_qp* qp[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                             .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return -1;
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = qp[1 - i]->qp_num,
                             .rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12};
    at.ah_attr.is_global = 1;
    at.ah_attr.port_num = 1;
    at.ah_attr.grh.dgid = *gid;
    at.ah_attr.grh.sgid_index = gid_index;
    at.ah_attr.grh.hop_limit = 64;
    if (ibv_modify_qp(qp[i], &at,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      return -1;
    }
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .sq_psn = 0,
                             .max_rd_atomic = 1};
    if (ibv_modify_qp(qp[i], &at,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC)) {
      return -1;
    }
  }
  return 0;
}

static int state_of(struct ibv_qp* qp) {
  struct ibv_qp_attr at;
  struct ibv_qp_init_attr init;
  return ibv_query_qp(qp, &at, IBV_QP_STATE, &init) ? -1 : (int)at.qp_state;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: netdev_events DEV GID KEEP SECONDS\n");
    return 2;
  }
  const int gids[2] = {atoi(argv[2]), atoi(argv[3])};
  const double seconds = atof(argv[4]);
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_device* dev = NULL;
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) dev = list[i];
  }
  if (dev == NULL) {
    fprintf(stderr, "no device %s\n", argv[1]);
    return 1;
  }
  struct ibv_context* ctx = ibv_open_device(dev);
  struct ibv_pd* pd = ctx ? ibv_alloc_pd(ctx) : NULL;
  struct ibv_cq* cq = pd ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : NULL;
  if (cq == NULL) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  struct ibv_qp* qps[2][2];
  for (int p = 0; p < 2; ++p) {
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, gids[p], &gid)) {
      fprintf(stderr, "no GID %d\n", gids[p]);
      return 1;
    }
    for (int i = 0; i < 2; ++i) {
      struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
                                              .max_recv_sge = 1}};
      qps[p][i] = ibv_create_qp(pd, &init);
      if (qps[p][i] == NULL) return 1;
    }
    if (connect_pair(qps[p][0], qps[p][1], gids[p], &gid)) {
      fprintf(stderr, "connecting the pair of GID %d: %s\n", gids[p], strerror(errno));
      return 1;
    }
  }
  printf("ready\n");
  fflush(stdout);
  const double end = now() + seconds;
  while (now() < end) {
    struct pollfd pfd = {ctx->async_fd, POLLIN, 0};
    if (poll(&pfd, 1, 50) != 1) {
      struct ibv_wc wc;
      while (ibv_poll_cq(cq, 1, &wc) > 0) {
      }  // drives the device (flushes)
      continue;
    }
    struct ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev)) continue;
    switch (ev.event_type) {
      case IBV_EVENT_QP_FATAL:
        printf("event QP_FATAL qp 0x%x\n", ev.element.qp->qp_num);
        break;
      case IBV_EVENT_PORT_ERR:
        printf("event PORT_ERR\n");
        break;
      case IBV_EVENT_PORT_ACTIVE:
        printf("event PORT_ACTIVE\n");
        break;
      case IBV_EVENT_GID_CHANGE:
        printf("event GID_CHANGE\n");
        break;
      default:
        printf("event %s\n", ibv_event_type_str(ev.event_type));
    }
    fflush(stdout);
    ibv_ack_async_event(&ev);
  }
  for (int p = 0; p < 2; ++p) printf("pair %d state %d/%d\n", gids[p], state_of(qps[p][0]), state_of(qps[p][1]));
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa) == 0) printf("port %s\n", pa.state == IBV_PORT_ACTIVE ? "ACTIVE" : "not active");
  for (int i = 0; i < 16; ++i) {
    union ibv_gid g;
    if (ibv_query_gid(ctx, 1, i, &g) == 0 && (g.global.subnet_prefix || g.global.interface_id)) {
      char text[64];
      snprintf(text, sizeof text, "%02x%02x:%02x%02x:...:%02x%02x:%02x%02x", g.raw[0], g.raw[1], g.raw[2], g.raw[3],
               g.raw[12], g.raw[13], g.raw[14], g.raw[15]);
      printf("gid[%d] %s\n", i, text);
    }
  }
  for (int p = 0; p < 2; ++p) {
    for (int i = 0; i < 2; ++i) ibv_destroy_qp(qps[p][i]);
  }
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  return 0;
}
