// One worker of the fabric soak (tests/fabric/soak.sh, doc/droced.md): NPROC
// processes on one fabric device, each with LINKS RC QPs to every other
// process (all-to-all), traffic for SECONDS, every byte verified, nothing
// lost.
//
// On each QP the two ends take turns: a message is an RDMA WRITE of 1..16 KiB
// into the peer's region for this QP followed by a SEND of 0..4 KiB whose
// header names the message (sequence number, lengths). The receiver checks
// the header's sequence number is the next one, the SEND's payload and, since
// RC places the WRITE before the SEND that follows it, the WRITE's bytes in its
// region; then it answers with its own message. Every byte comes from a
// generator seeded by (sender, receiver, link, sequence, kind), so a byte
// out of place, a duplicate or a lost message fails. The process with the
// lower index starts each QP. After SECONDS, whoever has the turn sends FIN
// instead; a QP is finished when its FIN was sent and completed, or received.
// Processes meet through files in DIR: qp.I (addresses and QPNs), ready.I,
// done.I (barriers, so nobody's QP goes away while a peer still needs it).
//
//   soak DEV DIR INDEX NPROC LINKS SECONDS [events|poll]
// Prints "soak I: qps Q sent S received R bytes_verified B" and exits 0, or
// "FAIL: ..." and exits 1.
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum {
  kGid = 1,
  kMaxWrite = 16384,
  kMaxSend = 4096,
  kMagic = 0x50a4c0de,
  kRecvSlots = 2,
};

struct Header {
  uint32_t magic, seq, write_len, send_len, fin, src, link;
};
enum { kMsg = sizeof(struct Header) + kMaxSend };

// Per QP, in the one registered buffer: the peer's WRITE target, receive
// slots, and two (by sequence parity) WRITE sources and SEND messages.
enum {
  kOffWriteTarget = 0,
  kOffRecv = kOffWriteTarget + kMaxWrite,
  kOffWriteSrc = kOffRecv + kRecvSlots * kMsg,
  kOffSendMsg = kOffWriteSrc + 2 * kMaxWrite,
  kPerQp = kOffSendMsg + 2 * kMsg,
};

struct Qp {
  struct ibv_qp* qp;
  int peer, link;
  uint32_t remote_qpn;
  uint64_t remote_target;  // the peer's WRITE target for this QP
  uint32_t send_seq, recv_seq;
  int fin_sent, fin_done, fin_received, sends_outstanding;
};

static int me, nproc, links;
static const char* dir;
static struct ibv_context* ctx;
static struct ibv_pd* pd;
static struct ibv_cq* cq;
static struct ibv_comp_channel* channel;
static struct ibv_mr* mr;
static uint8_t* mem;
static struct Qp* qps;
static int nqp;
static uint64_t sent, received, bytes_verified;
static uint32_t peer_rkey[256];  // each process's R_Key of its one MR

static void Fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: soak %d: ", me);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  exit(1);
}

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The bytes of one message part: kind 0 the WRITE, 1 the SEND payload.
static void Pattern(uint8_t* out, uint32_t len, int src, int dst, int link, uint32_t seq, int kind) {
  uint64_t s = Mix(((uint64_t)src << 48) ^ ((uint64_t)dst << 36) ^ ((uint64_t)link << 24) ^ ((uint64_t)seq << 1) ^ kind);
  for (uint32_t i = 0; i < len; i += 8) {
    s = Mix(s + 0x9e3779b97f4a7c15ull);
    const uint32_t k = len - i < 8 ? len - i : 8;
    memcpy(out + i, &s, k);
  }
}

static int PatternMatches(const uint8_t* got, uint32_t len, int src, int dst, int link, uint32_t seq, int kind) {
  uint8_t want[kMaxWrite];
  Pattern(want, len, src, dst, link, seq, kind);
  return memcmp(got, want, len) == 0;
}

static uint8_t* QpMem(int i, int off) { return mem + (size_t)i * kPerQp + off; }

static void PostRecv(int i, int slot) {
  struct ibv_sge sge = {(uintptr_t)QpMem(i, kOffRecv + slot * kMsg), kMsg, mr->lkey};
  struct ibv_recv_wr wr = {0}, *bad;
  wr.wr_id = ((uint64_t)i << 8) | (1u << 4) | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (ibv_post_recv(qps[i].qp, &wr, &bad) != 0) Fail("post_recv");
}

// Our turn on QP i: the next message, or FIN.
static void SendMessage(int i, int fin, uint32_t* rng) {
  struct Qp* q = &qps[i];
  if (q->sends_outstanding >= 2) Fail("qp %d: a third message in flight", i);
  const uint32_t seq = q->send_seq++;
  *rng = *rng * 1103515245u + 12345u;
  const uint32_t wlen = fin ? 0 : 1 + (*rng >> 8) % kMaxWrite;
  *rng = *rng * 1103515245u + 12345u;
  const uint32_t slen = fin ? 0 : (*rng >> 8) % (kMaxSend + 1);
  uint8_t* src = QpMem(i, kOffWriteSrc + (seq & 1) * kMaxWrite);
  uint8_t* msg = QpMem(i, kOffSendMsg + (seq & 1) * kMsg);
  struct Header h = {kMagic, seq, wlen, slen, (uint32_t)fin, (uint32_t)me, (uint32_t)q->link};
  memcpy(msg, &h, sizeof h);
  Pattern(msg + sizeof h, slen, me, q->peer, q->link, seq, 1);
  struct ibv_sge wsge = {(uintptr_t)src, wlen, mr->lkey};
  struct ibv_sge ssge = {(uintptr_t)msg, (uint32_t)sizeof h + slen, mr->lkey};
  struct ibv_send_wr wwr = {0}, swr = {0}, *bad;
  swr.wr_id = ((uint64_t)i << 8) | (fin ? 2 : 0);
  swr.sg_list = &ssge;
  swr.num_sge = 1;
  swr.opcode = IBV_WR_SEND;
  swr.send_flags = IBV_SEND_SIGNALED;
  struct ibv_send_wr* first = &swr;
  if (wlen > 0) {
    Pattern(src, wlen, me, q->peer, q->link, seq, 0);
    wwr.wr_id = ((uint64_t)i << 8) | 3;
    wwr.sg_list = &wsge;
    wwr.num_sge = 1;
    wwr.opcode = IBV_WR_RDMA_WRITE;
    wwr.wr.rdma.remote_addr = q->remote_target;
    wwr.wr.rdma.rkey = peer_rkey[q->peer];
    wwr.next = &swr;
    first = &wwr;
  }
  if (ibv_post_send(q->qp, first, &bad) != 0) Fail("qp %d: post_send", i);
  ++q->sends_outstanding;
  if (fin) q->fin_sent = 1;
  ++sent;
}

static void WriteFile(const char* name, const char* text) {
  char path[512], tmp[520];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (f == NULL) Fail("cannot write %s", tmp);
  fputs(text, f);
  fclose(f);
  if (rename(tmp, path) != 0) Fail("rename %s", tmp);
}

static void WaitAll(const char* prefix, double timeout_s) {
  const double end = Now() + timeout_s;
  for (int p = 0; p < nproc; ++p) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%d", dir, prefix, p);
    while (access(path, F_OK) != 0) {
      if (Now() > end) Fail("no %s after %.0f s", path, timeout_s);
      usleep(10000);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: soak DEV DIR INDEX NPROC LINKS SECONDS [events|poll]\n");
    return 2;
  }
  const char* devname = argv[1];
  dir = argv[2];
  me = atoi(argv[3]);
  nproc = atoi(argv[4]);
  links = atoi(argv[5]);
  const double seconds = atof(argv[6]);
  const int events = argc < 8 || strcmp(argv[7], "poll") != 0;
  if (nproc < 2 || nproc > 256 || me < 0 || me >= nproc || links < 1) Fail("bad arguments");
  nqp = (nproc - 1) * links;

  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; i < n && ctx == NULL; ++i) {
    if (strcmp(ibv_get_device_name(list[i]), devname) == 0) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  if (ctx == NULL) Fail("cannot open %s", devname);
  pd = ibv_alloc_pd(ctx);
  if (events) channel = ibv_create_comp_channel(ctx);
  cq = ibv_create_cq(ctx, nqp * 6 + 16, NULL, channel, 0);
  mem = aligned_alloc(4096, (size_t)nqp * kPerQp);
  if (pd == NULL || cq == NULL || mem == NULL || (events && channel == NULL)) Fail("pd/cq/channel");
  memset(mem, 0, (size_t)nqp * kPerQp);
  mr = ibv_reg_mr(pd, mem, (size_t)nqp * kPerQp, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (mr == NULL) Fail("reg_mr");
  union ibv_gid gid;
  if (ibv_query_gid(ctx, 1, kGid, &gid) != 0) Fail("query_gid");

  // QP i: peer (me + 1 + i / links) % nproc, link i % links.
  qps = calloc(nqp, sizeof *qps);
  char* info = malloc(64 + (size_t)nqp * 12);
  int len = sprintf(info, "%u %llu ", mr->rkey, (unsigned long long)(uintptr_t)mem);
  for (int i = 0; i < 16; ++i) len += sprintf(info + len, "%02x", gid.raw[i]);
  for (int i = 0; i < nqp; ++i) {
    struct ibv_qp_init_attr ia = {0};
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 8;
    ia.cap.max_recv_wr = kRecvSlots;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    qps[i].qp = ibv_create_qp(pd, &ia);
    if (qps[i].qp == NULL) Fail("create_qp %d of %d", i, nqp);
    qps[i].peer = (me + 1 + i / links) % nproc;
    qps[i].link = i % links;
    struct ibv_qp_attr a = {0};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qps[i].qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
      Fail("INIT");
    }
    len += sprintf(info + len, " %u", qps[i].qp->qp_num);
  }
  strcat(info, "\n");
  char name[64];
  snprintf(name, sizeof name, "qp.%d", me);
  WriteFile(name, info);
  WaitAll("qp", 120);

  // Connect: our QP to peer p, link l is p's QP to us, link l.
  for (int p = 0; p < nproc; ++p) {
    if (p == me) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/qp.%d", dir, p);
    FILE* f = fopen(path, "r");
    if (f == NULL) Fail("open %s", path);
    unsigned long long base;
    char g[33];
    union ibv_gid pgid;
    if (fscanf(f, "%u %llu %32s", &peer_rkey[p], &base, g) != 3) Fail("bad %s", path);
    for (int i = 0; i < 16; ++i) {
      unsigned b;
      sscanf(g + 2 * i, "%2x", &b);
      pgid.raw[i] = (uint8_t)b;
    }
    uint32_t* pq = malloc(sizeof(uint32_t) * nqp);
    for (int i = 0; i < nqp; ++i) {
      if (fscanf(f, "%u", &pq[i]) != 1) Fail("bad %s", path);
    }
    fclose(f);
    for (int i = 0; i < nqp; ++i) {
      if (qps[i].peer != p) continue;
      // In p's numbering, we are at distance (me - p - 1) mod nproc.
      const int j = ((me - p - 1 + nproc) % nproc) * links + qps[i].link;
      qps[i].remote_qpn = pq[j];
      qps[i].remote_target = base + (uint64_t)j * kPerQp + kOffWriteTarget;
      struct ibv_qp_attr a = {0};
      a.qp_state = IBV_QPS_RTR;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = pq[j];
      a.max_dest_rd_atomic = 1;
      a.min_rnr_timer = 1;
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = pgid;
      a.ah_attr.grh.sgid_index = kGid;
      a.ah_attr.grh.hop_limit = 64;
      a.ah_attr.port_num = 1;
      if (ibv_modify_qp(qps[i].qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                           IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
        Fail("RTR");
      }
      memset(&a, 0, sizeof a);
      a.qp_state = IBV_QPS_RTS;
      a.timeout = 16;  // 268 ms: a loaded 2-core host can leave a process unscheduled for a while
      a.retry_cnt = 7;
      a.rnr_retry = 7;
      a.max_rd_atomic = 1;
      if (ibv_modify_qp(qps[i].qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
        Fail("RTS");
      }
      for (int s = 0; s < kRecvSlots; ++s) PostRecv(i, s);
    }
    free(pq);
  }
  if (events && ibv_req_notify_cq(cq, 0) != 0) Fail("req_notify_cq");
  snprintf(name, sizeof name, "ready.%d", me);
  WriteFile(name, "1\n");
  WaitAll("ready", 120);

  const double deadline = Now() + seconds;
  uint32_t rng = 0x1234567u + me;
  for (int i = 0; i < nqp; ++i) {
    if (me < qps[i].peer) SendMessage(i, 0, &rng);
  }
  int finished = 0;
  double last_progress = Now();
  while (finished < nqp) {
    struct ibv_wc wc[64];
    int k = ibv_poll_cq(cq, 64, wc);
    if (k < 0) Fail("poll_cq");
    if (k == 0) {
      if (Now() - last_progress > 60) Fail("no completion for 60 s (%d of %d QPs finished)", finished, nqp);
      if (events) {
        struct pollfd pfd = {channel->fd, POLLIN, 0};
        if (poll(&pfd, 1, 100) > 0) {
          struct ibv_cq* ev_cq;
          void* ev_ctx;
          if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) != 0) Fail("get_cq_event");
          ibv_ack_cq_events(ev_cq, 1);
          if (ibv_req_notify_cq(cq, 0) != 0) Fail("req_notify_cq");
        }
      }
      continue;
    }
    last_progress = Now();
    for (int c = 0; c < k; ++c) {
      const int i = (int)(wc[c].wr_id >> 8);
      const int kind = (int)(wc[c].wr_id & 0xff);
      if (i < 0 || i >= nqp) Fail("completion for unknown wr_id %llx", (unsigned long long)wc[c].wr_id);
      struct Qp* q = &qps[i];
      if (wc[c].status != IBV_WC_SUCCESS) {
        Fail("qp %d (peer %d link %d, qpn %u): %s completion status %s (vendor %u), sent %u received %u", i, q->peer,
             q->link, q->qp->qp_num, (kind & 0x10) ? "receive" : "send", ibv_wc_status_str(wc[c].status),
             wc[c].vendor_err, q->send_seq, q->recv_seq);
      }
      if ((kind & 0x10) == 0) {  // our SEND completed (the WRITE before it is unsignaled)
        --q->sends_outstanding;
        if (kind == 2) {
          q->fin_done = 1;
          ++finished;
        }
        continue;
      }
      // A message from the peer.
      const int slot = kind & 0xf;
      const uint8_t* m = QpMem(i, kOffRecv + slot * kMsg);
      struct Header h;
      memcpy(&h, m, sizeof h);
      if (wc[c].byte_len < sizeof h || h.magic != kMagic || h.src != (uint32_t)q->peer ||
          h.link != (uint32_t)q->link || h.send_len > kMaxSend || h.write_len > kMaxWrite ||
          wc[c].byte_len != sizeof h + h.send_len) {
        Fail("qp %d: malformed message (len %u magic %x src %u link %u)", i, wc[c].byte_len, h.magic, h.src, h.link);
      }
      if (h.seq != q->recv_seq) Fail("qp %d (peer %d): message %u, expected %u", i, q->peer, h.seq, q->recv_seq);
      if (!PatternMatches(m + sizeof h, h.send_len, q->peer, me, q->link, h.seq, 1)) {
        Fail("qp %d (peer %d): SEND payload of message %u differs", i, q->peer, h.seq);
      }
      if (!PatternMatches(QpMem(i, kOffWriteTarget), h.write_len, q->peer, me, q->link, h.seq, 0)) {
        Fail("qp %d (peer %d): WRITE data of message %u differs", i, q->peer, h.seq);
      }
      bytes_verified += h.send_len + h.write_len;
      ++q->recv_seq;
      ++received;
      if (h.fin) {
        q->fin_received = 1;
        ++finished;
        continue;
      }
      PostRecv(i, slot);
      SendMessage(i, Now() >= deadline, &rng);
    }
  }
  // Sends still outstanding (a last message whose ACK has not come): wait.
  for (int i = 0; i < nqp; ++i) {
    while (qps[i].sends_outstanding > 0) {
      struct ibv_wc wc;
      const int k = ibv_poll_cq(cq, 1, &wc);
      if (k < 0) Fail("poll_cq");
      if (k == 1) {
        if (wc.status != IBV_WC_SUCCESS) Fail("late completion: %s", ibv_wc_status_str(wc.status));
        if ((wc.wr_id & 0x10) == 0) --qps[wc.wr_id >> 8].sends_outstanding;
      }
    }
  }
  snprintf(name, sizeof name, "done.%d", me);
  char text[128];
  snprintf(text, sizeof text, "%llu %llu\n", (unsigned long long)sent, (unsigned long long)received);
  WriteFile(name, text);
  WaitAll("done", 120);
  printf("soak %d: qps %d sent %llu received %llu bytes_verified %llu\n", me, nqp, (unsigned long long)sent,
         (unsigned long long)received, (unsigned long long)bytes_verified);
  return 0;
}
