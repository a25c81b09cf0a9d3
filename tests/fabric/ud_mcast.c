// A multicast member or sender over plain verbs (no rdma_cm), for the
// fabric test: ibv_attach_mcast on a UD QP, datagrams to a RoCEv2 group.
//   ud_mcast recv DEVICE GROUP_IPV4 COUNT   join, print "ready", receive COUNT
//   ud_mcast send DEVICE GROUP_IPV4 COUNT   send COUNT datagrams to the group
// A member checks each datagram: IBV_WC_GRH, 40 + payload bytes, the GRH
// area's IPv4 header naming the group as destination, the payload.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QKEY 0x11111111u
#define LEN 64
#define SLOT (40 + LEN)

static int die(const char* what) {
  perror(what);
  return 1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: ud_mcast recv|send DEVICE GROUP_IPV4 COUNT\n");
    return 2;
  }
  const int recv = strcmp(argv[1], "recv") == 0;
  const int count = atoi(argv[4]);
  struct in_addr group_ip;
  if (inet_pton(AF_INET, argv[3], &group_ip) != 1 || count <= 0 || count > 1000) return 2;
  union ibv_gid group = {0};
  group.raw[10] = group.raw[11] = 0xff;
  memcpy(&group.raw[12], &group_ip, 4);

  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; list && i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), argv[2]) == 0) ctx = ibv_open_device(list[i]);
  }
  if (ctx == NULL) return die("ibv_open_device");
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 2 * count + 2, NULL, NULL, 0);
  char* buf = calloc(count, SLOT);
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, (size_t)count * SLOT, IBV_ACCESS_LOCAL_WRITE);
  if (!pd || !cq || !buf || !mr) return die("setup");
  struct ibv_qp_init_attr init = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = count, .max_recv_wr = count, .max_send_sge = 1,
                                          .max_recv_sge = 1}};
  struct ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!qp) return die("ibv_create_qp");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = QKEY};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return die("INIT");
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return die("RTR");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return die("RTS");

  if (recv) {
    if (ibv_attach_mcast(qp, &group, 0)) return die("ibv_attach_mcast");
    for (int i = 0; i < count; ++i) {
      struct ibv_sge sge = {(uintptr_t)(buf + (size_t)i * SLOT), SLOT, mr->lkey};
      struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
      if (ibv_post_recv(qp, &wr, &bad)) return die("ibv_post_recv");
    }
    printf("ready qpn 0x%x\n", qp->qp_num);
    fflush(stdout);
  } else {
    struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1,
                                  .grh = {.dgid = group, .sgid_index = 1, .hop_limit = 1}};
    struct ibv_ah* ah = ibv_create_ah(pd, &ah_attr);
    if (!ah) return die("ibv_create_ah");
    for (int i = 0; i < count; ++i) {
      memset(buf + (size_t)i * SLOT, 'A' + i % 26, LEN);
      struct ibv_sge sge = {(uintptr_t)(buf + (size_t)i * SLOT), LEN, mr->lkey};
      struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED}, *bad;
      wr.wr.ud.ah = ah;
      wr.wr.ud.remote_qpn = 0xFFFFFF;
      wr.wr.ud.remote_qkey = QKEY;
      if (ibv_post_send(qp, &wr, &bad)) return die("ibv_post_send");
    }
  }
  int done = 0;
  const double deadline = now_s() + 20;
  while (done < count && now_s() < deadline) {
    struct ibv_wc wc;
    const int got = ibv_poll_cq(cq, 1, &wc);
    if (got < 0) return die("ibv_poll_cq");
    if (got == 0) continue;
    if (wc.status != IBV_WC_SUCCESS) {
      fprintf(stderr, "completion %d: %s\n", done, ibv_wc_status_str(wc.status));
      return 1;
    }
    if (recv) {
      const char* d = buf + (size_t)wc.wr_id * SLOT;
      if (!(wc.wc_flags & IBV_WC_GRH) || wc.byte_len != 40 + LEN || memcmp(d + 20 + 16, &group_ip, 4) != 0 ||
          d[40] != 'A' + done % 26 || d[40 + LEN - 1] != 'A' + done % 26) {
        fprintf(stderr, "datagram %d: flags 0x%x byte_len %u payload '%c'\n", done, wc.wc_flags, wc.byte_len,
                d[40]);
        return 1;
      }
    }
    ++done;
  }
  printf("%s %d of %d datagrams\n", recv ? "received" : "sent", done, count);
  if (recv && ibv_detach_mcast(qp, &group, 0)) return die("ibv_detach_mcast");
  return done == count ? 0 : 1;
}
