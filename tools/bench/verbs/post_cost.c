// What a small RDMA WRITE costs the program's thread on droce, measured in
// that thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), so that a loaded
// host's preemptions do not count: two RC QPs of one device connected to
// each other (the device's internal loopback), `outstanding` 64 B WRITEs
// kept in flight, one signaled in every 32, the program polling its CQ.
// The one thread does everything: post_send (the doorbell), and through
// poll_cq the receive, the responder, the ACKs and the completions.
//   post_cost DEVICE WRITES OUTSTANDING [QPS] [SIZE]
// Prints: writes, wall s, thread CPU s, CPU ns per WRITE, M WRITEs/s of
// thread CPU time, Gb/s of wall time. SIZE (default 64, at most 65536) is
// the WRITE's length. OUTSTANDING 1 signals every WRITE and also prints the
// median post-to-completion time (one WRITE and its ACK through the
// device's loopback: tools/bench/fabric's in-process latency).
// Env SIGNAL_EVERY=N: one WRITE in N signaled (default 32; 1 completes each,
// as ib_send_lat and UCX's signaled sends do).
// Env POST_API=wr: each WRITE posted with ibv_wr_start, ibv_wr_rdma_write,
// ibv_wr_set_sge (or ibv_wr_set_inline_data with INLINE=1, SIZE <= 256) and
// ibv_wr_complete on an extended QP, instead of ibv_post_send (INLINE=1
// there sets IBV_SEND_INLINE).
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double Now(clockid_t c) {
  struct timespec ts;
  clock_gettime(c, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ToRts(struct ibv_qp* q, uint32_t dest, union ibv_gid* gid) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return 1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = dest;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.dgid = *gid;
  if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) return 1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int CompareDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DEVICE WRITES OUTSTANDING [QPS] [SIZE]\n", argv[0]);
    return 2;
  }
  const long writes_arg = atol(argv[2]);
  const int outstanding = atoi(argv[3]);
  const int nqp = argc > 4 ? atoi(argv[4]) : 1;
  const long size = argc > 5 ? atol(argv[5]) : 64;
  // One signaled WRITE in every 32 (SIGNAL_EVERY: 1, 2, 4, 8 or 16 instead),
  // or every one when a single WRITE is in flight.
  const char* every_env = getenv("SIGNAL_EVERY");
  const int every = outstanding == 1 ? 1 : every_env != NULL ? atoi(every_env) : 32;
  if (every < 1 || 32 % every != 0) return 2;
  if (nqp < 1 || nqp > 64 || size < 1 || size > 65536) return 2;
  if (outstanding != 1 && (outstanding < 32 || outstanding % 32 != 0)) return 2;
  if (outstanding == 1 && nqp != 1) return 2;
  const char* api_env = getenv("POST_API");
  const int wr_api = api_env != NULL && strcmp(api_env, "wr") == 0;
  const char* inline_env = getenv("INLINE");
  const int use_inline = inline_env != NULL && strcmp(inline_env, "1") == 0;
  if (use_inline && size > 256) return 2;
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  struct ibv_context* ctx = NULL;
  for (int i = 0; i < n; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0) ctx = ibv_open_device(list[i]);
  }
  if (ctx == NULL) {
    fprintf(stderr, "no device %s\n", argv[1]);
    return 1;
  }
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
  static char buf[2 << 16];  // WRITEs from the first half into the second
  struct ibv_mr* mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  union ibv_gid gid;
  if (!pd || !cq || !mr || ibv_query_gid(ctx, 1, 1, &gid)) return 1;
  struct ibv_qp* src[64];
  struct ibv_qp* dst[64];
  for (int k = 0; k < nqp; ++k) {
    struct ibv_qp_init_attr_ex a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = outstanding;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = use_inline ? (uint32_t)size : 0;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd;
    if (wr_api) {
      a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    }
    src[k] = ibv_create_qp_ex(ctx, &a);
    dst[k] = ibv_create_qp_ex(ctx, &a);
    if (!src[k] || !dst[k] || ToRts(src[k], dst[k]->qp_num, &gid) || ToRts(dst[k], src[k]->qp_num, &gid)) {
      fprintf(stderr, "QP setup failed\n");
      return 1;
    }
  }
  // Per QP: WRs posted and completed. WRITES is rounded to whole groups of
  // `every` per QP, so every QP's last WR is a signaled one.
  const long writes = (writes_arg + (long)every * nqp - 1) / ((long)every * nqp) * every * nqp;
  long posted[64] = {0}, done[64] = {0}, total_done = 0;
  const int per_qp = outstanding == 1 ? 1 : outstanding / nqp < 32 ? 32 : outstanding / nqp / 32 * 32;
  double* lat_us = outstanding == 1 ? calloc((size_t)writes, sizeof(double)) : NULL;
  double posted_at = 0;
  const double w0 = Now(CLOCK_MONOTONIC), c0 = Now(CLOCK_THREAD_CPUTIME_ID);
  long total_posted = 0;
  while (total_done < writes) {
    for (int k = 0; k < nqp; ++k) {
      while (posted[k] - done[k] < per_qp && posted[k] < writes / nqp) {
        struct ibv_sge sge = {(uintptr_t)buf, (uint32_t)size, mr->lkey};
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof wr);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        ++posted[k];
        ++total_posted;
        wr.wr_id = ((uint64_t)k << 40) | (uint64_t)posted[k];  // a signaled WR completes those before it
        wr.send_flags = posted[k] % every == 0 ? IBV_SEND_SIGNALED : 0;
        wr.wr.rdma.remote_addr = (uintptr_t)buf + (1 << 16);
        if (lat_us) posted_at = Now(CLOCK_MONOTONIC);
        wr.wr.rdma.rkey = mr->rkey;
        if (wr_api) {
          struct ibv_qp_ex* x = ibv_qp_to_qp_ex(src[k]);
          ibv_wr_start(x);
          x->wr_id = wr.wr_id;
          x->wr_flags = wr.send_flags;
          ibv_wr_rdma_write(x, mr->rkey, (uintptr_t)buf + (1 << 16));
          if (use_inline) {
            ibv_wr_set_inline_data(x, buf, (size_t)size);
          } else {
            ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, (uint32_t)size);
          }
          if (ibv_wr_complete(x)) {
            fprintf(stderr, "wr_complete failed\n");
            return 1;
          }
          continue;
        }
        if (use_inline) wr.send_flags |= IBV_SEND_INLINE;
        if (ibv_post_send(src[k], &wr, &bad)) {
          fprintf(stderr, "post_send failed\n");
          return 1;
        }
      }
    }
    struct ibv_wc wc[16];
    const int got = ibv_poll_cq(cq, 16, wc);
    for (int i = 0; i < got; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "completion status %s\n", ibv_wc_status_str(wc[i].status));
        return 1;
      }
      const int k = (int)(wc[i].wr_id >> 40);
      const long before = done[k];
      done[k] = (long)(wc[i].wr_id & ((1ull << 40) - 1));
      total_done += done[k] - before;
      if (lat_us) lat_us[total_done - 1] = (Now(CLOCK_MONOTONIC) - posted_at) * 1e6;
    }
  }
  const double wall = Now(CLOCK_MONOTONIC) - w0, cpu = Now(CLOCK_THREAD_CPUTIME_ID) - c0;
  printf("writes=%ld qps=%d outstanding=%d size=%ld wall_s=%.3f thread_cpu_s=%.3f cpu_ns_per_write=%.1f "
         "mwrites_per_cpu_s=%.3f gbps=%.2f",
         writes, nqp, outstanding, size, wall, cpu, cpu * 1e9 / writes, writes / cpu / 1e6,
         writes * size * 8 / wall / 1e9);
  if (lat_us) {
    qsort(lat_us, (size_t)writes, sizeof(double), CompareDouble);
    printf(" completion_p50_us=%.2f", lat_us[writes / 2]);
  }
  printf("\n");
  return 0;
}
