// The provider through libibverbs' public API, in one process: a droce
// device on a DPDK net_ring loopback port (what it sends comes back to it),
// two RC QPs connected to each other. Checks every RC opcode end to end, the
// errnos verbs callers get for bad arguments, and the completions of
// protection errors; completion events through libdroce-preload.so (meson
// runs this test with it preloaded).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <map>
#include <optional>
#include <new>
#include <vector>

#include "drivers/verbs/device_config.h"
#include "gtest/gtest.h"

// The replacement pair below allocates with malloc and frees with free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

// Allocations made by the calling thread while g_count_allocations is set
// (the provider's operator new resolves to this one too).
thread_local bool g_count_allocations = false;
thread_local int g_allocations = 0;

void* operator new(size_t n) {
  if (g_count_allocations) ++g_allocations;
  void* p = std::malloc(n != 0 ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
// The provider allocates its objects with new (std::nothrow): replaced as
// well, so that every delete frees what malloc gave (ASan checks the pairs).
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (g_count_allocations) ++g_allocations;
  return std::malloc(n != 0 ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace droce::verbs {
namespace {
namespace fs = std::filesystem;

// The device `name` of the list libibverbs makes now, opened; nullptr when
// it is not there or does not open.
ibv_context* OpenDeviceNamed(const std::string& name) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i) {
    if (ibv_get_device_name(list[i]) == name) ctx = ibv_open_device(list[i]);
  }
  ibv_free_device_list(list);
  return ctx;
}

class VerbsApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_dir_ = (fs::temp_directory_path() / ("droce-verbs-api-" + std::to_string(getpid()))).string();
    fs::remove_all(run_dir_);
    auto f = ParseDeviceFile(
        "name=droce0\nvdev=net_ring_droce0\nip=10.0.0.1\nip=fd00::1\nmtu=1024\neal_memory_mb=256\n"
        "progress_sched=fifo\nprogress_pm_qos_us=100\n");
    ASSERT_TRUE(f.ok()) << f.status();
    absl::Status s = WriteDeviceTree(run_dir_, kDevInfinibandDir, *f);
    if (s.code() == absl::StatusCode::kPermissionDenied) {
      skip_reason_ = std::string(s.message());
      return;
    }
    ASSERT_TRUE(s.ok()) << s;
    setenv("SYSFS_PATH", SysfsRoot(run_dir_).c_str(), 1);
    const char* provider = std::getenv("DROCE_PROVIDER_DIR");
    ASSERT_NE(provider, nullptr) << "set DROCE_PROVIDER_DIR to the build's drivers/verbs";
    setenv("RDMAV_DRIVERS", (std::string(provider) + "/libdroce").c_str(), 1);
    ctx_ = OpenDeviceNamed("droce0");
    ASSERT_NE(ctx_, nullptr) << "droce0 not found or not opened";
  }
  static void TearDownTestSuite() {
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    if (!run_dir_.empty()) {
      (void)RemoveDeviceTree(run_dir_, kDevInfinibandDir, "droce0");
      fs::remove_all(run_dir_);
    }
  }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    cq_ = ibv_create_cq(ctx_, 256, nullptr, nullptr, 0);
    ASSERT_NE(cq_, nullptr);
    buf_.assign(1 << 20, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(),
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(mr_, nullptr);
  }

  void TearDown() override {
    for (ibv_qp* q : qps_) ibv_destroy_qp(q);
    if (mr_) ibv_dereg_mr(mr_);
    if (cq_) ibv_destroy_cq(cq_);
    if (pd_) ibv_dealloc_pd(pd_);
  }

  ibv_qp* NewQp(bool ex = false, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = a.recv_cq = cq_;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = a.cap.max_recv_sge = 4;
    a.cap.max_inline_data = 64;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd_;
    if (ex) {
      a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
      a.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ;
    }
    ibv_qp* q = ibv_create_qp_ex(ctx_, &a);
    if (q) qps_.push_back(q);
    return q;
  }

  static int ToInit(ibv_qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }

  static int ToRtr(ibv_qp* q, uint32_t dest, bool grh = true) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.rq_psn = 0xfffff0;  // wraps within the first messages
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = grh ? 1 : 0;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 64;
    ibv_query_gid(q->context, 1, 1, &a.ah_attr.grh.dgid);  // our own address: the port loops back
    return ibv_modify_qp(q, &a,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  }

  static int ToRts(ibv_qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 10;
    a.retry_cnt = 3;
    a.rnr_retry = 3;
    a.sq_psn = 0xfffff0;
    a.max_rd_atomic = 4;
    return ibv_modify_qp(q, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
  }

  // Two QPs of one device, made with no fixture state, connected to each other.
  static void ConnectEachOther(ibv_qp* a, ibv_qp* b) {
    for (auto [q, peer] : {std::pair{a, b}, std::pair{b, a}}) {
      ASSERT_EQ(ToInit(q), 0);
      ASSERT_EQ(ToRtr(q, peer->qp_num), 0);
      ASSERT_EQ(ToRts(q), 0);
    }
  }

  // Two QPs connected to each other.
  void Connect(ibv_qp** a, ibv_qp** b, bool ex = false, ibv_srq* b_srq = nullptr) {
    *a = NewQp(ex);
    *b = NewQp(ex, b_srq);
    ASSERT_NE(*a, nullptr);
    ASSERT_NE(*b, nullptr);
    ASSERT_EQ(ToInit(*a), 0);
    ASSERT_EQ(ToInit(*b), 0);
    ASSERT_EQ(ToRtr(*a, (*b)->qp_num), 0);
    ASSERT_EQ(ToRtr(*b, (*a)->qp_num), 0);
    ASSERT_EQ(ToRts(*a), 0);
    ASSERT_EQ(ToRts(*b), 0);
  }

  // A completion channel and a CQ on it, which cq_ names from then on: the
  // QPs Connect makes complete there. *plain: the CQ cq_ named before.
  void ConnectOnChannel(ibv_comp_channel** channel, ibv_cq** plain, ibv_qp** a, ibv_qp** b) {
    *channel = ibv_create_comp_channel(ctx_);
    ASSERT_NE(*channel, nullptr) << "is libdroce-preload.so preloaded? errno " << errno;
    ibv_cq* event_cq = ibv_create_cq(ctx_, 64, nullptr, *channel, 0);
    ASSERT_NE(event_cq, nullptr);
    *plain = cq_;
    cq_ = event_cq;
    Connect(a, b);
  }

  std::vector<ibv_wc> Poll(size_t n) {
    std::vector<ibv_wc> out;
    for (int spins = 0; out.size() < n && spins < 20'000'000; ++spins) {
      ibv_wc wc[8];
      const int got = ibv_poll_cq(cq_, 8, wc);
      EXPECT_GE(got, 0);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
    }
    return out;
  }

  int PostRecv(ibv_qp* q, uint64_t wr_id, uint64_t off, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + off), len, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(q, &wr, &bad);
  }

  // lkey/rkey: the MR's unless given (any value, 0 included, is passed as is).
  int PostSend(ibv_qp* q, ibv_wr_opcode op, uint64_t wr_id, uint64_t off, uint32_t len, uint64_t remote_off,
               uint32_t flags = IBV_SEND_SIGNALED, std::optional<uint32_t> lkey = std::nullopt,
               std::optional<uint32_t> rkey = std::nullopt) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + off), len, lkey.value_or(mr_->lkey)};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.imm_data = htonl(0x1234abcd);
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + remote_off);
      wr.wr.atomic.rkey = rkey.value_or(mr_->rkey);
      wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? 7 : 5;
      wr.wr.atomic.swap = 99;
    } else {
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + remote_off);
      wr.wr.rdma.rkey = rkey.value_or(mr_->rkey);
    }
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q, &wr, &bad);
  }

  void Fill(uint64_t off, uint32_t len, uint8_t seed) {
    for (uint32_t i = 0; i < len; ++i) buf_[off + i] = static_cast<uint8_t>(seed + i * 7);
  }

  static inline std::string run_dir_;
  static inline std::string skip_reason_;
  static inline ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buf_;
  std::vector<ibv_qp*> qps_;
};

TEST_F(VerbsApi, DeviceAndPortLookLikeARoceNic) {
  ibv_device_attr d{};
  ASSERT_EQ(ibv_query_device(ctx_, &d), 0);
  EXPECT_EQ(d.phys_port_cnt, 1);
  EXPECT_GE(d.max_qp_wr, 1024);
  EXPECT_EQ(d.atomic_cap, IBV_ATOMIC_HCA);
  ibv_port_attr p{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &p), 0);
  EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(p.active_mtu, IBV_MTU_1024);
  EXPECT_NE(d.vendor_id, 0u);  // pyverbs' query_device test insists
  EXPECT_EQ(p.gid_tbl_len, 16);  // 3 used (link-local, IPv4, IPv6), the rest empty
  EXPECT_NE(ibv_query_port(ctx_, 2, &p), 0);
  ibv_gid gid{};
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 1, &gid), 0);
  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  EXPECT_EQ(std::memcmp(gid.raw, v4, 16), 0);
  ibv_gid_entry entry{};
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 1, &entry, 0), 0);
  EXPECT_EQ(entry.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 3, &entry, 0), ENODATA);  // an empty slot
  ibv_gid_entry table[16];
  EXPECT_EQ(ibv_query_gid_table(ctx_, table, 16, 0), 3);
}

TEST_F(VerbsApi, BadArgumentsGetTheErrnoVerbsCallersExpect) {
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 4096, IBV_ACCESS_REMOTE_WRITE), nullptr);  // needs LOCAL_WRITE
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 16, nullptr, nullptr, 5), nullptr);  // no such completion vector
  EXPECT_EQ(errno, EINVAL);

  ibv_qp_init_attr raw{};
  raw.send_cq = raw.recv_cq = cq_;
  raw.qp_type = IBV_QPT_RAW_PACKET;  // UD is supported; raw packet QPs are not
  raw.cap.max_send_wr = raw.cap.max_recv_wr = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &raw), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  ibv_ah_attr no_grh{};
  no_grh.port_num = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd_, &no_grh), nullptr);  // RoCE: an AH needs the GRH
  EXPECT_EQ(errno, EINVAL);
  ibv_qp_init_attr big = raw;
  big.qp_type = IBV_QPT_RC;
  big.cap.max_send_sge = 100;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &big), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_qp* q = NewQp();
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(ToInit(q), 0);
  EXPECT_EQ(ToRtr(q, q->qp_num, /*grh=*/false), EINVAL);  // RoCE needs the GRH
  EXPECT_EQ(ToRts(q), EINVAL);                            // INIT -> RTS is not a transition

  // More SGEs than the device has: refused before anything is copied.
  std::vector<ibv_sge> sges(9, ibv_sge{reinterpret_cast<uintptr_t>(buf_.data()), 8, mr_->lkey});
  ibv_recv_wr rwr{};
  rwr.sg_list = sges.data();
  rwr.num_sge = 9;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(q, &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
  ibv_send_wr swr{};
  swr.sg_list = sges.data();
  swr.num_sge = 9;
  swr.opcode = IBV_WR_SEND;
  ibv_send_wr* sbad = nullptr;
  EXPECT_EQ(ibv_post_send(q, &swr, &sbad), EINVAL);
  EXPECT_EQ(sbad, &swr);

  EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);  // a QP still uses it
}

// ECE (doc/cm.md): every RC QP offers droce's selective-repeat bit
// (0x2); set_ece with the peer's options keeps what both offered, the way
// librdmacm calls it on each side before RTR; another vendor's is refused,
// and an older droce offering only the retired 0x1 agrees on nothing.
// Two QPs that agreed use selective repeat and move every kind of WR.
TEST_F(VerbsApi, EceGivesSelectiveRepeatOnlyWhenBothOfferIt) {
  constexpr uint32_t kVendor = 0x64726f, kSelectiveRepeat = 0x2;
  ibv_qp* a = NewQp();
  ibv_qp* b = NewQp();
  ibv_qp* c = NewQp();
  ASSERT_TRUE(a && b && c);
  ibv_ece ea{}, eb{}, ec{};
  ASSERT_EQ(ibv_query_ece(a, &ea), 0);
  EXPECT_EQ(ea.vendor_id, kVendor);
  EXPECT_EQ(ea.options & kSelectiveRepeat, kSelectiveRepeat);
  // Passive side b: the REQ's ECE (a's), then what it answers with.
  ASSERT_EQ(ibv_set_ece(b, &ea), 0);
  ASSERT_EQ(ibv_query_ece(b, &eb), 0);
  EXPECT_EQ(eb.options & kSelectiveRepeat, kSelectiveRepeat);
  // Active side a: the REP's.
  ASSERT_EQ(ibv_set_ece(a, &eb), 0);
  ASSERT_EQ(ibv_query_ece(a, &ea), 0);
  EXPECT_EQ(ea.options & kSelectiveRepeat, kSelectiveRepeat);
  // A peer that did not offer it: the bit is gone, and stays gone.
  ibv_ece none{kVendor, 0, 0};
  ASSERT_EQ(ibv_set_ece(c, &none), 0);
  ASSERT_EQ(ibv_query_ece(c, &ec), 0);
  EXPECT_EQ(ec.options & kSelectiveRepeat, 0u);
  ibv_ece again = ea;
  ASSERT_EQ(ibv_set_ece(c, &again), 0);
  ASSERT_EQ(ibv_query_ece(c, &ec), 0);
  EXPECT_EQ(ec.options & kSelectiveRepeat, 0u);
  ibv_ece older{kVendor, 0x1, 0};  // a droce from before the 1024-PSN SACK
  ASSERT_EQ(ibv_set_ece(c, &older), 0);
  ASSERT_EQ(ibv_query_ece(c, &ec), 0);
  EXPECT_EQ(ec.options, 0u);
  ibv_ece other{0x02c9, kSelectiveRepeat, 0};  // Mellanox's vendor id
  EXPECT_EQ(ibv_set_ece(c, &other), EINVAL);
  // a and b agreed: connected, they move SENDs, WRITEs, READs and atomics.
  ASSERT_EQ(ToInit(a), 0);
  ASSERT_EQ(ToInit(b), 0);
  ASSERT_EQ(ToRtr(a, b->qp_num), 0);
  ASSERT_EQ(ToRtr(b, a->qp_num), 0);
  ASSERT_EQ(ToRts(a), 0);
  ASSERT_EQ(ToRts(b), 0);
  ASSERT_EQ(PostRecv(b, 100, 0x80000, 8192), 0);
  Fill(0x1000, 5000, 3);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 1, 0x1000, 5000, 0), 0);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 2, 0x1000, 5000, 0x40000), 0);
  Fill(0x60000, 3000, 5);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_READ, 3, 0x6000, 3000, 0x60000), 0);
  std::memset(&buf_[0x70000], 0, 8);
  ASSERT_EQ(PostSend(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 4, 0x7100, 8, 0x70000), 0);
  auto wcs = Poll(5);
  ASSERT_EQ(wcs.size(), 5u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(std::memcmp(&buf_[0x80000], &buf_[0x1000], 5000), 0);
  EXPECT_EQ(std::memcmp(&buf_[0x40000], &buf_[0x1000], 5000), 0);
  EXPECT_EQ(std::memcmp(&buf_[0x6000], &buf_[0x60000], 3000), 0);
  uint64_t v;
  std::memcpy(&v, &buf_[0x70000], 8);
  EXPECT_EQ(v, 5u);  // once
}

// ECE picks a QP's congestion control (doc/cc.md "Per QP"): every RC QP
// offers droce's four algorithm bits (0x4 dcqcn, 0x8 timely, 0x10 hpcc,
// 0x20 swift); a program that sets one alone on both ends (as
// rdma_set_local_ece carries it in the REQ) gets that algorithm from RTR.
// Two pairs in one process, TIMELY and HPCC (whose requests carry the INT
// header and whose ACKs echo it), each move a multi-packet WRITE and READ.
TEST_F(VerbsApi, EcePicksEachQpsCongestionControl) {
  constexpr uint32_t kVendor = 0x64726f, kTimely = 0x8, kHpcc = 0x10, kAll = 0x4 | 0x8 | 0x10 | 0x20;
  ibv_qp* q[4] = {NewQp(), NewQp(), NewQp(), NewQp()};
  for (ibv_qp* x : q) ASSERT_NE(x, nullptr);
  ibv_ece e{};
  ASSERT_EQ(ibv_query_ece(q[0], &e), 0);
  EXPECT_EQ(e.options & kAll, kAll);
  const uint32_t pick[4] = {kTimely, kTimely, kHpcc, kHpcc};
  for (int i = 0; i < 4; ++i) {
    ibv_ece want{kVendor, 0x2 | pick[i], 0};
    ASSERT_EQ(ibv_set_ece(q[i], &want), 0);
    ASSERT_EQ(ibv_query_ece(q[i], &e), 0);
    EXPECT_EQ(e.options & kAll, pick[i]);
  }
  for (int i = 0; i < 4; ++i) ASSERT_EQ(ToInit(q[i]), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(ToRtr(q[i], q[i ^ 1]->qp_num), 0) << i;
  for (int i = 0; i < 4; ++i) ASSERT_EQ(ToRts(q[i]), 0);
  for (int pair = 0; pair < 2; ++pair) {
    ibv_qp* a = q[2 * pair];
    Fill(0x1000, 6000, static_cast<uint8_t>(7 + pair));
    ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 1, 0x1000, 6000, 0x40000), 0);
    Fill(0x60000, 5000, static_cast<uint8_t>(9 + pair));
    ASSERT_EQ(PostSend(a, IBV_WR_RDMA_READ, 2, 0x6000, 5000, 0x60000), 0);
    auto wcs = Poll(2);
    ASSERT_EQ(wcs.size(), 2u) << pair;
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(std::memcmp(&buf_[0x40000], &buf_[0x1000], 6000), 0) << pair;
    EXPECT_EQ(std::memcmp(&buf_[0x6000], &buf_[0x60000], 5000), 0) << pair;
  }
}

TEST_F(VerbsApi, EveryRcOpcodeMovesTheRightBytes) {
  ibv_qp *a, *b;
  Connect(&a, &b);
  // SEND and SEND_WITH_IMM, multi-packet (MTU 1024), into posted receives.
  ASSERT_EQ(PostRecv(b, 100, 0x80000, 8192), 0);
  ASSERT_EQ(PostRecv(b, 101, 0x90000, 8192), 0);
  Fill(0x1000, 3000, 1);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 1, 0x1000, 3000, 0), 0);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND_WITH_IMM, 2, 0x1000, 61, 0), 0);
  auto wcs = Poll(4);
  ASSERT_EQ(wcs.size(), 4u);
  int recvs = 0;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    if (wc.opcode == IBV_WC_RECV) {
      ++recvs;
      EXPECT_EQ(wc.qp_num, b->qp_num);
      if (wc.wr_id == 100) {
        EXPECT_EQ(wc.byte_len, 3000u);
      }
      if (wc.wr_id == 101) {
        EXPECT_EQ(wc.byte_len, 61u);
        EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
        EXPECT_EQ(ntohl(wc.imm_data), 0x1234abcdu);
      }
    }
  }
  EXPECT_EQ(recvs, 2);
  EXPECT_EQ(std::memcmp(&buf_[0x80000], &buf_[0x1000], 3000), 0);

  // RDMA WRITE, WRITE_WITH_IMM (consumes a receive), READ, inline SEND.
  Fill(0x2000, 5000, 9);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 3, 0x2000, 5000, 0x40000), 0);
  ASSERT_EQ(PostRecv(b, 102, 0xa0000, 64), 0);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE_WITH_IMM, 4, 0x2000, 100, 0x50000), 0);
  Fill(0x60000, 4000, 77);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_READ, 5, 0x6000, 4000, 0x60000), 0);
  wcs = Poll(4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  EXPECT_EQ(std::memcmp(&buf_[0x40000], &buf_[0x2000], 5000), 0);
  EXPECT_EQ(std::memcmp(&buf_[0x50000], &buf_[0x2000], 100), 0);
  EXPECT_EQ(std::memcmp(&buf_[0x6000], &buf_[0x60000], 4000), 0);

  // Atomics return the original value and update the target.
  uint64_t target = 7;
  std::memcpy(&buf_[0x70000], &target, 8);
  ASSERT_EQ(PostSend(a, IBV_WR_ATOMIC_CMP_AND_SWP, 6, 0x4000, 8, 0x70000), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_COMP_SWAP);
  uint64_t got;
  std::memcpy(&got, &buf_[0x4000], 8);
  EXPECT_EQ(got, 7u);
  std::memcpy(&got, &buf_[0x70000], 8);
  EXPECT_EQ(got, 99u);
  ASSERT_EQ(PostSend(a, IBV_WR_ATOMIC_FETCH_AND_ADD, 7, 0x4008, 8, 0x70000), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_FETCH_ADD);
  std::memcpy(&got, &buf_[0x70000], 8);
  EXPECT_EQ(got, 104u);

  ASSERT_EQ(PostRecv(b, 103, 0xb0000, 64), 0);
  Fill(0x5000, 40, 3);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 8, 0x5000, 40, 0, IBV_SEND_SIGNALED | IBV_SEND_INLINE, /*lkey=*/0xdead), 0);
  Fill(0x5000, 40, 50);  // inline data was copied at post time
  wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  Fill(0x5000, 40, 3);
  EXPECT_EQ(std::memcmp(&buf_[0xb0000], &buf_[0x5000], 40), 0);
}

// A one-SGE WRITE or SEND is staged with only the fields it carries
// (provider.cc ToOneSgeSendWr): every slot of the send ring first holds a
// WR with other values in all of them — a two-SGE WRITE_WITH_IMM into
// another region, under its own rkey — and the one-SGE WRITEs and SENDs
// that take the slots next must not carry any of it along.
TEST_F(VerbsApi, AOneSgeWriteOrSendCarriesNothingOfTheSlotsOlderWr) {
  ibv_qp *a, *b;
  Connect(&a, &b);
  std::vector<uint8_t> other(64 * 1024, 0);
  ibv_mr* mr2 = ibv_reg_mr(pd_, other.data(), other.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr2, nullptr);
  ASSERT_NE(mr2->rkey, mr_->rkey);
  // The one-SGE steps check what the general ones do: max_msg_sz (2 GiB).
  EXPECT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 1, 0, 0x80000001u, 0x40000), EINVAL);
  EXPECT_EQ(PostSend(a, IBV_WR_SEND, 1, 0, 0x80000001u, 0), EINVAL);
  constexpr int kWrs = 256, kBurst = 32;  // four laps of the 64-slot send ring
  Fill(0x1000, 256, 11);
  for (int i = 0; i < kWrs; i += kBurst) {
    for (int j = i; j < i + kBurst; ++j) {
      ASSERT_EQ(PostRecv(b, 1000 + j, 0xc0000, 64), 0);  // the WITH_IMM's receive
      ibv_sge sges[2] = {{reinterpret_cast<uintptr_t>(buf_.data() + 0x1000), 16, mr_->lkey},
                         {reinterpret_cast<uintptr_t>(buf_.data() + 0x1100), 16, mr_->lkey}};
      ibv_send_wr wr{};
      wr.wr_id = j;
      wr.sg_list = sges;
      wr.num_sge = 2;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_FENCE;
      wr.imm_data = htonl(0xfeed0000u + j);
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(other.data() + 64 * (j % 512));
      wr.wr.rdma.rkey = mr2->rkey;
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
    }
    auto wcs = Poll(2 * kBurst);
    ASSERT_EQ(wcs.size(), static_cast<size_t>(2 * kBurst));
    for (const ibv_wc& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  }
  for (int i = 0; i < kWrs; i += kBurst) {
    for (int j = i; j < i + kBurst; ++j) {
      Fill(0x2000 + 64 * j, 48, static_cast<uint8_t>(j));
      if (j % 4 == 3) {  // a SEND: its receive and its bytes, no immediate
        ASSERT_EQ(PostRecv(b, 2000 + j, 0x80000 + 64 * j, 64), 0);
        ASSERT_EQ(PostSend(a, IBV_WR_SEND, j, 0x2000 + 64 * j, 48, 0), 0);
      } else {  // a WRITE under the MR's own rkey, to buf_, not to `other`
        ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, j, 0x2000 + 64 * j, 48, 0x40000 + 64 * j), 0);
      }
    }
    auto wcs = Poll(kBurst + kBurst / 4);
    ASSERT_EQ(wcs.size(), static_cast<size_t>(kBurst + kBurst / 4));
    for (const ibv_wc& wc : wcs) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status) << " wr " << wc.wr_id;
      if (wc.opcode == IBV_WC_RECV) {
        EXPECT_EQ(wc.byte_len, 48u);
        EXPECT_FALSE(wc.wc_flags & IBV_WC_WITH_IMM) << wc.wr_id;
      }
    }
  }
  for (int j = 0; j < kWrs; ++j) {
    const size_t at = j % 4 == 3 ? 0x80000 + 64 * j : 0x40000 + 64 * j;
    EXPECT_EQ(std::memcmp(&buf_[at], &buf_[0x2000 + 64 * j], 48), 0) << "WR " << j;
  }
  ibv_dereg_mr(mr2);
}

TEST_F(VerbsApi, ProtectionErrorsCompleteWithTheirStatusAndFlush) {
  ibv_qp *a, *b;
  Connect(&a, &b);
  // A bad lkey is the requester's own protection error: the MR's key with a
  // bit of its slot flipped, so never the MR's, whatever key it drew.
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 1, 0, 64, 0x1000, IBV_SEND_SIGNALED, /*lkey=*/mr_->lkey ^ 0x100), 0);
  auto wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);

  ibv_qp *c, *d;
  Connect(&c, &d);
  // A remote address outside the MR: the responder NAKs, nothing is written.
  std::vector<uint8_t> before(buf_.begin(), buf_.end());
  ASSERT_EQ(PostSend(c, IBV_WR_RDMA_WRITE, 2, 0, 64, buf_.size() - 16), 0);
  ASSERT_EQ(PostSend(c, IBV_WR_RDMA_WRITE, 3, 0, 64, 0), 0);
  wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), buf_.begin()));
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(c, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_ERR);

  // The transport put c and a (their WRs failed) and d (the responder that
  // refused the access) in ERR: the program learns it through
  // ibv_get_async_event, as from a kernel provider, with the event verbs
  // defines for each (IBTA 11.6.3.1): the responder's access violation is
  // IBV_EVENT_QP_ACCESS_ERR, the requesters' errors IBV_EVENT_QP_FATAL.
  std::map<ibv_qp*, ibv_event_type> events;
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  // (The context is shared: QPs of earlier tests may report too.)
  for (int tries = 0; !(events.count(a) && events.count(c) && events.count(d)) && tries < 200; ++tries) {
    ibv_poll_cq(cq_, 0, nullptr);  // let the dataplane run its periodic checks
    if (poll(&pfd, 1, 10) <= 0) continue;
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    EXPECT_EQ(events.count(ev.element.qp), 0u) << "one event per QP";
    events[ev.element.qp] = ev.event_type;
    ibv_ack_async_event(&ev);
  }
  ASSERT_TRUE(events.count(a) && events.count(c) && events.count(d));
  EXPECT_EQ(events[c], IBV_EVENT_QP_FATAL);
  EXPECT_EQ(events[a], IBV_EVENT_QP_FATAL);
  EXPECT_EQ(events[d], IBV_EVENT_QP_ACCESS_ERR);
  EXPECT_EQ(events.count(b), 0u);  // still fine
}

// SENDs to a QP with a shared receive queue take its receives in order; an
// armed SRQ limit raises IBV_EVENT_SRQ_LIMIT_REACHED once, when a receive
// taken leaves fewer posted than the limit, and then reads back as 0.
TEST_F(VerbsApi, SharedReceiveQueueAndItsLimitEvent) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = 16;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &init);
  ASSERT_NE(srq, nullptr);
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/false, srq);
  for (uint64_t i = 0; i < 6; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + 0x80000 + i * 256), 256, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 200 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ibv_srq_attr attr{};
  attr.srq_limit = 17;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), EINVAL);  // above max_wr
  attr.max_wr = 32;
  EXPECT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR), EOPNOTSUPP);
  attr.srq_limit = 4;
  ASSERT_EQ(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT), 0);
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 4u);

  // The context is shared by the tests: QP events an earlier test left are
  // not ours.
  auto limit_events = [&] {
    int n = 0;
    pollfd pfd{ctx_->async_fd, POLLIN, 0};
    while (poll(&pfd, 1, 50) > 0) {
      ibv_async_event ev{};
      if (ibv_get_async_event(ctx_, &ev) != 0) break;
      if (ev.event_type != IBV_EVENT_QP_FATAL && ev.event_type != IBV_EVENT_QP_REQ_ERR &&
          ev.event_type != IBV_EVENT_QP_ACCESS_ERR) {
        EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
        EXPECT_EQ(ev.element.srq, srq);
        ++n;
      }
      ibv_ack_async_event(&ev);
    }
    return n;
  };
  // 6 posted, limit 4: two SENDs leave 4 (not below), the third leaves 3.
  Fill(0x1000, 64, 9);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(PostSend(a, IBV_WR_SEND, 1 + i, 0x1000, 64, 0), 0);
  ASSERT_EQ(Poll(4).size(), 4u);
  EXPECT_EQ(limit_events(), 0);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 3, 0x1000, 64, 0), 0);
  std::vector<ibv_wc> wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(limit_events(), 1);
  ASSERT_EQ(ibv_query_srq(srq, &attr), 0);
  EXPECT_EQ(attr.srq_limit, 0u);  // disarmed by the event
  // Receives were taken in posting order, each holding the SEND's bytes.
  for (const ibv_wc& wc : wcs) {
    if (wc.opcode != IBV_WC_RECV) continue;
    EXPECT_EQ(wc.wr_id, 202u);
    EXPECT_EQ(wc.byte_len, 64u);
    EXPECT_TRUE(std::equal(buf_.begin() + 0x1000, buf_.begin() + 0x1000 + 64, buf_.begin() + 0x80000 + 2 * 256));
  }
  // Disarmed: a fourth SEND raises nothing.
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 4, 0x1000, 64, 0), 0);
  ASSERT_EQ(Poll(2).size(), 2u);
  EXPECT_EQ(limit_events(), 0);
  for (ibv_qp* q : {a, b}) {
    ibv_destroy_qp(q);
    qps_.erase(std::find(qps_.begin(), qps_.end(), q));
  }
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

// UD through libibverbs: a datagram between two UD QPs of the device, then
// a reply addressed with ibv_create_ah_from_wc (libibverbs builds the AH from
// the completion's IBV_WC_GRH and the GRH area, query_port and sysfs GIDs).
TEST_F(VerbsApi, UdDatagramAndAhFromWc) {
  ibv_qp* ud[2];
  for (ibv_qp*& q : ud) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq_;
    a.qp_type = IBV_QPT_UD;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    q = ibv_create_qp(pd_, &a);
    ASSERT_NE(q, nullptr);
    qps_.push_back(q);
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    m.qkey = 0x1234;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
    m.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE), 0);
    m.qp_state = IBV_QPS_RTS;
    m.sq_psn = 7;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
    ibv_qp_attr got{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(q, &got, IBV_QP_QKEY, &init), 0);
    EXPECT_EQ(got.qkey, 0x1234u);
    EXPECT_EQ(init.qp_type, IBV_QPT_UD);
  }
  auto post_recv = [&](ibv_qp* q, size_t off) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_.data() + off), 40 + 64, mr_->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return ibv_post_recv(q, &wr, &bad);
  };
  auto send = [&](ibv_qp* q, ibv_ah* ah, uint32_t qpn, char fill) {
    std::memset(buf_.data() + 4096, fill, 64);
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_.data() + 4096), 64, mr_->lkey};
    ibv_send_wr wr{}, *bad;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = 0x1234;
    return ibv_post_send(q, &wr, &bad);
  };
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.sgid_index = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 1, &aa.grh.dgid), 0);
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ(post_recv(ud[1], 0), 0);
  ASSERT_EQ(send(ud[0], ah, ud[1]->qp_num, 'x'), 0);
  ibv_wc recv{};
  for (const ibv_wc& wc : Poll(2)) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RECV) recv = wc;
  }
  EXPECT_EQ(recv.qp_num, ud[1]->qp_num);
  EXPECT_EQ(recv.src_qp, ud[0]->qp_num);
  EXPECT_EQ(recv.byte_len, 40u + 64u);
  EXPECT_TRUE(recv.wc_flags & IBV_WC_GRH);
  EXPECT_EQ(buf_[40], 'x');
  // The reply: AH from the completion and its GRH area.
  ibv_ah* back = ibv_create_ah_from_wc(pd_, &recv, reinterpret_cast<ibv_grh*>(buf_.data()), 1);
  ASSERT_NE(back, nullptr) << "errno " << errno;
  ASSERT_EQ(post_recv(ud[0], 1024), 0);
  ASSERT_EQ(send(ud[1], back, recv.src_qp, 'y'), 0);
  bool replied = false;
  for (const ibv_wc& wc : Poll(2)) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    if (wc.opcode == IBV_WC_RECV) replied = wc.qp_num == ud[0]->qp_num && wc.src_qp == ud[1]->qp_num;
  }
  EXPECT_TRUE(replied);
  EXPECT_EQ(buf_[1024 + 40], 'y');
  EXPECT_EQ(ibv_destroy_ah(back), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

// UCX 1.13's ud_verbs transport (UCP's wire-up transport) on a RoCE port
// accepts a datagram only if the destination address in its GRH area is one
// of the port's GIDs. It takes from wc.sl whether the area holds an IPv4
// header (sl & 7 == 2: the address is its last 4 bytes) or an IPv6 one (the
// last 16 bytes), as mlx5 reports it; with sl 0 an IPv4 datagram is read as
// IPv6, never matches, and UCX drops every packet until its endpoint times
// out. The QPs, sends and receives are shaped as UCX makes them: inline
// two-SGE sends, unsignaled but for every 64th, receives of one buffer with
// 40 bytes of GRH space, and the check is applied to each receive.
bool PassesUcxDestinationGidCheck(ibv_context* ctx, const ibv_wc& wc, const uint8_t* grh_area) {
  if (!(wc.wc_flags & IBV_WC_GRH)) return false;
  const size_t len = (wc.sl & 0x7) == 2 ? 4 : 16;
  const uint8_t* dst = grh_area + 40 - len;  // IPv4 daddr or the GRH's dgid: both end the area
  ibv_port_attr port{};
  if (ibv_query_port(ctx, 1, &port) != 0) return false;
  for (int i = 0; i < port.gid_tbl_len; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, 1, i, &gid) != 0) return false;
    if (std::memcmp(gid.raw + 16 - len, dst, len) == 0) return true;
  }
  return false;
}

TEST_F(VerbsApi, UdDatagramsPassUcxsDestinationGidCheckOverIpv4AndIpv6) {
  constexpr uint32_t kUcxQkey = 0x1ee7a330;  // UCT_IB_KEY
  constexpr uint32_t kSegment = 4096;
  ibv_qp* ud[2];
  for (ibv_qp*& q : ud) {
    ibv_qp_init_attr_ex a{};
    a.send_cq = a.recv_cq = cq_;
    a.qp_type = IBV_QPT_UD;
    a.sq_sig_all = 0;
    a.cap.max_send_wr = 256;
    a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = a.cap.max_recv_sge = 8;
    a.cap.max_inline_data = 256;
    a.comp_mask = IBV_QP_INIT_ATTR_PD;
    a.pd = pd_;
    q = ibv_create_qp_ex(ctx_, &a);
    ASSERT_NE(q, nullptr) << "errno " << errno;
    qps_.push_back(q);
    EXPECT_GE(a.cap.max_inline_data, 256u);
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    m.qkey = kUcxQkey;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 0);
    m.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE), 0);
    m.qp_state = IBV_QPS_RTS;
    m.sq_psn = 0;
    ASSERT_EQ(ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
  }
  constexpr int kRecvs = 64;
  for (int i = 0; i < kRecvs; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_.data() + i * kSegment), kSegment, mr_->lkey};
    ibv_recv_wr wr{}, *bad;
    wr.wr_id = i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ASSERT_EQ(ibv_post_recv(ud[1], &wr, &bad), 0);
  }
  const uint64_t header_off = kRecvs * kSegment, payload_off = header_off + 64;
  int sent = 0, unsignaled = 0, signaled = 0;
  for (const int gid_index : {1, 2}) {  // 1: the IPv4 address, 2: the IPv6 one
    ibv_ah_attr aa{};
    aa.is_global = 1;
    aa.port_num = 1;
    aa.grh.sgid_index = static_cast<uint8_t>(gid_index);
    aa.grh.hop_limit = 255;
    ASSERT_EQ(ibv_query_gid(ctx_, 1, gid_index, &aa.grh.dgid), 0);
    ibv_ah* ah = ibv_create_ah(pd_, &aa);
    ASSERT_NE(ah, nullptr) << "errno " << errno;
    for (int k = 0; k < 8; ++k, ++sent) {
      Fill(header_off, 16, static_cast<uint8_t>(sent));
      Fill(payload_off, 8, static_cast<uint8_t>(0x80 + sent));
      ibv_sge sge[2] = {{reinterpret_cast<uint64_t>(buf_.data() + header_off), 16, mr_->lkey},
                        {reinterpret_cast<uint64_t>(buf_.data() + payload_off), 8, mr_->lkey}};
      ibv_send_wr wr{}, *bad;
      wr.opcode = IBV_WR_SEND;
      wr.sg_list = sge;
      wr.num_sge = 2;
      wr.send_flags = IBV_SEND_INLINE;
      if (++unsignaled == 4) {  // UCX signals one send in UCT_UD_TX_MODERATION; 4 here
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id = 0xc0de + signaled++;
        unsignaled = 0;
      }
      wr.wr.ud.ah = ah;
      wr.wr.ud.remote_qpn = ud[1]->qp_num;
      wr.wr.ud.remote_qkey = kUcxQkey;
      ASSERT_EQ(ibv_post_send(ud[0], &wr, &bad), 0);
      // The program may reuse inline data at once.
      std::memset(buf_.data() + header_off, 0xee, 64 + 8);
      int got_recv = 0;
      for (const ibv_wc& wc : Poll(wr.send_flags & IBV_SEND_SIGNALED ? 2 : 1)) {
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        if (wc.opcode != IBV_WC_RECV) {
          EXPECT_EQ(wc.wr_id, wr.wr_id);  // only signaled sends complete
          continue;
        }
        ++got_recv;
        const uint8_t* area = buf_.data() + wc.wr_id * kSegment;
        EXPECT_EQ(wc.src_qp, ud[0]->qp_num);
        EXPECT_EQ(wc.byte_len, 40u + 16 + 8);
        EXPECT_EQ((wc.sl & 0x7), gid_index == 1 ? 2 : 1) << "GID index " << gid_index;
        EXPECT_TRUE(PassesUcxDestinationGidCheck(ctx_, wc, area)) << "GID index " << gid_index;
        EXPECT_EQ(area[40], static_cast<uint8_t>(sent));
        EXPECT_EQ(area[40 + 16], static_cast<uint8_t>(0x80 + sent));
      }
      EXPECT_EQ(got_recv, 1);
    }
    EXPECT_EQ(ibv_destroy_ah(ah), 0);
  }
  EXPECT_EQ(signaled, 4);
}

TEST_F(VerbsApi, ExtendedPostSendApi) {
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/true);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ASSERT_NE(x, nullptr);
  Fill(0x1000, 2048, 5);
  char inl[] = "inline through the wr API";
  ASSERT_EQ(PostRecv(b, 50, 0xc0000, 128), 0);
  ibv_wr_start(x);
  x->wr_id = 11;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, mr_->rkey, reinterpret_cast<uintptr_t>(buf_.data() + 0x20000));
  ibv_wr_set_sge(x, mr_->lkey, reinterpret_cast<uintptr_t>(buf_.data() + 0x1000), 2048);
  x->wr_id = 12;
  x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  ibv_wr_send(x);
  ibv_wr_set_inline_data(x, inl, sizeof inl);
  std::memset(inl, 0, sizeof inl);  // the API lets the caller reuse it at once
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto wcs = Poll(3);
  ASSERT_EQ(wcs.size(), 3u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&buf_[0x20000], &buf_[0x1000], 2048), 0);
  EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[0xc0000]), "inline through the wr API");
}

// Several threads of one program posting at once (verbs lets any thread
// post on any QP): on one QP shared by all, and on one QP each. Every send
// carries its id inline and as immediate data; one poller thread drives the
// dataplane, reposts receives, and records the completions. Each WR must
// complete exactly once, on both ends, and a thread's WRs in the order it
// posted them (one QP completes in order, IBTA 10.8.3). wr_api: each
// thread posts with ibv_wr_start .. ibv_wr_complete, 1 to 3 WRs a batch,
// the id inline in two pieces (ibv_wr_set_inline_data_list).
void ConcurrentPosting(ibv_cq* cq, const std::vector<ibv_qp*>& senders,
                       const std::vector<ibv_qp*>& receivers, uint8_t* buf, uint32_t lkey, int threads,
                       int per_thread, bool wr_api = false) {
  constexpr int kSlots = 64;  // max_send_wr = max_recv_wr of the fixture's QPs
  std::map<uint32_t, ibv_qp*> receiver_of_qpn;
  for (ibv_qp* r : receivers) receiver_of_qpn[r->qp_num] = r;
  const auto post_recv = [&](ibv_qp* r, uint64_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf + 0x80000 + slot * 64), 64, lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(r, &wr, &bad);
  };
  // Receive slots: kSlots per receiving QP, each QP's in its own range.
  for (size_t i = 0; i < receivers.size(); ++i) {
    for (int s = 0; s < kSlots; ++s) ASSERT_EQ(post_recv(receivers[i], i * kSlots + s), 0);
  }
  // A thread may have its share of one send queue outstanding: at most
  // kSlots sends (and as many receives) in flight in all, within the CQ.
  const int budget = kSlots / threads;
  std::vector<std::atomic<int>> completed(threads);
  std::atomic<bool> failed{false};
  std::vector<std::thread> posters;
  for (int th = 0; th < threads; ++th) {
    posters.emplace_back([&, th] {
      ibv_qp* q = senders[th % senders.size()];
      for (int seq = 0; seq < per_thread && !failed;) {
        if (seq - completed[th].load(std::memory_order_acquire) >= budget) {
          std::this_thread::yield();
          continue;
        }
        if (wr_api) {
          ibv_qp_ex* x = ibv_qp_to_qp_ex(q);
          const int room = budget - (seq - completed[th].load(std::memory_order_acquire));
          const int n = std::min({1 + seq % 3, room, per_thread - seq});
          ibv_wr_start(x);
          for (int k = 0; k < n; ++k) {
            uint64_t id = (uint64_t(th) << 32) | uint32_t(seq + k);
            x->wr_id = id;
            x->wr_flags = IBV_SEND_SIGNALED;
            ibv_wr_send_imm(x, htonl((uint32_t(th) << 24) | uint32_t(seq + k)));
            const ibv_data_buf pieces[2] = {{&id, 4}, {reinterpret_cast<uint8_t*>(&id) + 4, 4}};
            ibv_wr_set_inline_data_list(x, 2, pieces);
            id = 0;  // copied: the buffer may be reused at once
          }
          if (const int err = ibv_wr_complete(x); err != 0) {
            ADD_FAILURE() << "thread " << th << " seq " << seq << ": wr_complete " << err;
            failed = true;
            return;
          }
          seq += n;
          continue;
        }
        uint64_t id = (uint64_t(th) << 32) | uint32_t(seq);
        ibv_sge sge{reinterpret_cast<uintptr_t>(&id), sizeof id, 0};
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        wr.imm_data = htonl((uint32_t(th) << 24) | uint32_t(seq));
        ibv_send_wr* bad = nullptr;
        if (const int err = ibv_post_send(q, &wr, &bad); err != 0) {
          ADD_FAILURE() << "thread " << th << " seq " << seq << ": post_send " << err;
          failed = true;
          return;
        }
        ++seq;
      }
    });
  }
  // The poller: every completion, checked as it comes.
  const int total = threads * per_thread;
  int sends = 0, recvs = 0;
  std::vector<int> next_send(threads, 0), next_recv(threads, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((sends < total || recvs < total) && !failed && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int got = ibv_poll_cq(cq, 16, wc);
    ASSERT_GE(got, 0);
    for (int i = 0; i < got; ++i) {
      ASSERT_EQ(wc[i].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[i].status) << " wr_id " << wc[i].wr_id;
      if (wc[i].opcode == IBV_WC_SEND) {
        const int th = static_cast<int>(wc[i].wr_id >> 32);
        const int seq = static_cast<int>(wc[i].wr_id & 0xFFFFFFFFu);
        ASSERT_TRUE(th >= 0 && th < threads);
        // Exactly once and in the thread's order: anything else is a lost,
        // duplicated or reordered WR.
        ASSERT_EQ(seq, next_send[th]) << "send completion of thread " << th;
        ++next_send[th];
        completed[th].store(next_send[th], std::memory_order_release);
        ++sends;
      } else {
        ASSERT_EQ(wc[i].opcode, IBV_WC_RECV);
        ASSERT_TRUE(wc[i].wc_flags & IBV_WC_WITH_IMM);
        const uint32_t imm = ntohl(wc[i].imm_data);
        const int th = static_cast<int>(imm >> 24);
        const int seq = static_cast<int>(imm & 0xFFFFFF);
        ASSERT_TRUE(th >= 0 && th < threads);
        ASSERT_EQ(seq, next_recv[th]) << "receive of thread " << th;
        ++next_recv[th];
        ASSERT_EQ(wc[i].byte_len, 8u);
        uint64_t payload;
        std::memcpy(&payload, buf + 0x80000 + wc[i].wr_id * 64, 8);
        ASSERT_EQ(payload, (uint64_t(th) << 32) | uint32_t(seq)) << "inline payload";
        ++recvs;
        ibv_qp* r = receiver_of_qpn.at(wc[i].qp_num);
        ASSERT_EQ(post_recv(r, wc[i].wr_id), 0);
      }
    }
  }
  for (std::thread& p : posters) p.join();
  EXPECT_EQ(sends, total);
  EXPECT_EQ(recvs, total);
}

TEST_F(VerbsApi, ConcurrentPostingFromSeveralThreadsOnOneQp) {
  ibv_qp *a, *b;
  Connect(&a, &b);
  ConcurrentPosting(cq_, {a}, {b}, buf_.data(), mr_->lkey, 4, 3000);
}

TEST_F(VerbsApi, ConcurrentPostingFromSeveralThreadsOnSeveralQps) {
  std::vector<ibv_qp*> senders, receivers;
  for (int i = 0; i < 4; ++i) {
    ibv_qp *a, *b;
    Connect(&a, &b);
    senders.push_back(a);
    receivers.push_back(b);
  }
  ConcurrentPosting(cq_, senders, receivers, buf_.data(), mr_->lkey, 4, 3000);
}

TEST_F(VerbsApi, ConcurrentWrApiBatchesFromSeveralThreadsOnOneQp) {
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/true);
  ConcurrentPosting(cq_, {a}, {b}, buf_.data(), mr_->lkey, 4, 3000, /*wr_api=*/true);
}

// Posts take the fast path (no device lock: the WR is published in the
// QP's ring and its doorbell left to whoever owns the device) while the
// engine moves the QP to ERR on its own, at a remote access error the
// poster's 1000th WRITE causes. Every WR completes exactly once and in
// order: those before it successfully, it with REM_ACCESS_ERR, every later
// one flushed, however the posts and the error interleave.
TEST_F(VerbsApi, PostsRacingAnErrorTheEngineRaisesCompleteOnceInOrder) {
  ibv_qp *a, *b;
  Connect(&a, &b);
  constexpr int kTotal = 3000, kBad = 1000, kBudget = 32;
  std::atomic<int> completed{0};
  std::atomic<bool> failed{false};
  std::thread poster([&] {
    for (int seq = 0; seq < kTotal && !failed;) {
      if (seq - completed.load(std::memory_order_acquire) >= kBudget) {
        std::this_thread::yield();
        continue;
      }
      ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + (seq % 64) * 64), 64, mr_->lkey};
      ibv_send_wr wr{};
      wr.wr_id = static_cast<uint64_t>(seq);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + 0x40000 + (seq % 64) * 64);
      wr.wr.rdma.rkey = seq == kBad ? mr_->rkey ^ 0x7f00 : mr_->rkey;  // no MR has that index
      ibv_send_wr* bad = nullptr;
      if (const int err = ibv_post_send(a, &wr, &bad); err != 0) {
        ADD_FAILURE() << "post_send " << seq << ": " << err;
        failed = true;
        return;
      }
      ++seq;
    }
  });
  int next = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (next < kTotal && !failed && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc[16];
    const int got = ibv_poll_cq(cq_, 16, wc);
    ASSERT_GE(got, 0);
    for (int i = 0; i < got; ++i) {
      if (wc[i].qp_num != a->qp_num) continue;  // b's flushes, if any
      ASSERT_EQ(wc[i].wr_id, static_cast<uint64_t>(next)) << "lost, duplicated or reordered";
      const ibv_wc_status want = next < kBad    ? IBV_WC_SUCCESS
                                 : next == kBad ? IBV_WC_REM_ACCESS_ERR
                                                : IBV_WC_WR_FLUSH_ERR;
      ASSERT_EQ(wc[i].status, want) << "wr " << next << ": " << ibv_wc_status_str(wc[i].status);
      completed.store(++next, std::memory_order_release);
    }
  }
  failed = failed || next < kTotal;
  poster.join();
  EXPECT_EQ(next, kTotal);
}

// Whether this process may run a thread SCHED_FIFO (CAP_SYS_NICE, an
// RT-capable cgroup): tried on a throwaway thread.
bool SchedFifoPermitted() {
  bool permitted = false;
  std::thread([&] {
    sched_param sp{};
    sp.sched_priority = 1;
    permitted = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
  }).join();
  return permitted;
}

// With progress_sched=fifo (set in this suite's device file) the progress
// thread runs SCHED_FIFO where the process may: its wake-ups preempt a program spinning on memory
// instead of waiting out the spinner's time slice (doc/verbs.md).
TEST_F(VerbsApi, ProgressThreadRunsSchedFifoWhenPermitted) {
  const bool permitted = SchedFifoPermitted();
  int found = 0, policy = -1, priority = -1;
  const auto look = [&] {
    found = 0;
    for (const auto& task : fs::directory_iterator("/proc/self/task")) {
      FILE* f = std::fopen((task.path() / "comm").c_str(), "r");
      if (f == nullptr) continue;
      char comm[64] = {};
      const bool named = std::fgets(comm, sizeof comm, f) != nullptr && std::string(comm) == "droce-progress\n";
      std::fclose(f);
      if (!named) continue;
      ++found;
      const pid_t tid = static_cast<pid_t>(std::stoi(task.path().filename().string()));
      policy = sched_getscheduler(tid);
      sched_param sp{};
      if (sched_getparam(tid, &sp) == 0) priority = sp.sched_priority;
    }
  };
  // The thread sets its policy as it starts: look again for up to a second.
  look();
  for (int i = 0; i < 100 && (found != 1 || policy != (permitted ? SCHED_FIFO : SCHED_OTHER)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    look();
  }
  ASSERT_EQ(found, 1) << "one progress thread for the device, named droce-progress";
  if (permitted) {
    EXPECT_EQ(policy, SCHED_FIFO);
    EXPECT_EQ(priority, 1);
  } else {
    EXPECT_EQ(policy, SCHED_OTHER);
  }
}

// Under progress_sched=fifo the progress thread serves only programs that
// do not poll: while a program thread calls ibv_poll_cq it stands aside at
// SCHED_OTHER (its look-backs and the arrivals the program polls for do not
// preempt the program); once the program has stopped polling it takes
// SCHED_FIFO again to sleep armed (doc/verbs.md, progress_sched).
TEST_F(VerbsApi, FifoProgressThreadStandsAsideWhileTheProgramPolls) {
  const bool permitted = SchedFifoPermitted();
  if (!permitted) GTEST_SKIP() << "SCHED_FIFO not permitted here";
  pid_t tid = 0;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    FILE* f = std::fopen((task.path() / "comm").c_str(), "r");
    if (f == nullptr) continue;
    char comm[64] = {};
    if (std::fgets(comm, sizeof comm, f) != nullptr && std::string(comm) == "droce-progress\n") {
      tid = static_cast<pid_t>(std::stoi(task.path().filename().string()));
    }
    std::fclose(f);
  }
  ASSERT_NE(tid, 0) << "a progress thread named droce-progress";
  // Idle first: the thread sleeps armed at SCHED_FIFO.
  int policy = -1;
  for (int i = 0; i < 100 && (policy = sched_getscheduler(tid)) != SCHED_FIFO; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(policy, SCHED_FIFO) << "an idle device's progress thread sleeps at SCHED_FIFO";
  // Poll for 200 ms, looking at the thread's policy between polls: after
  // the first 20 ms it is SCHED_OTHER (the odd SCHED_FIFO look is allowed:
  // when this thread is descheduled for longer than app_active_us the
  // progress thread rightly arms, and a timeout can wake it before the next
  // poll demotes it).
  ibv_wc wc[4];
  int fifo_late = 0, other_late = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0;; ++i) {
    (void)ibv_poll_cq(cq_, 4, wc);
    if (i % 256 != 0) continue;
    const auto t = std::chrono::steady_clock::now() - start;
    if (t > std::chrono::milliseconds(200)) break;
    if (t < std::chrono::milliseconds(20)) continue;
    (sched_getscheduler(tid) == SCHED_FIFO ? fifo_late : other_late) += 1;
  }
  EXPECT_GT(other_late, 0);
  EXPECT_LT(fifo_late * 10, other_late) << "SCHED_FIFO while the program polls: its wake-ups preempt the program";
  // The program goes quiet: the thread is SCHED_FIFO again within a second.
  for (int i = 0; i < 100 && (policy = sched_getscheduler(tid)) != SCHED_FIFO; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(policy, SCHED_FIFO) << "a quiet program's progress thread sleeps armed at SCHED_FIFO";
}

// The droce-progress threads of this process.
std::vector<pid_t> ProgressThreads() {
  std::vector<pid_t> tids;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    FILE* f = std::fopen((task.path() / "comm").c_str(), "r");
    if (f == nullptr) continue;
    char comm[64] = {};
    if (std::fgets(comm, sizeof comm, f) != nullptr && std::string(comm) == "droce-progress\n") {
      tids.push_back(static_cast<pid_t>(std::stoi(task.path().filename().string())));
    }
    std::fclose(f);
  }
  return tids;
}

// The progress thread blocks the program's signals but never the faults:
// its bursts run under the unmap guard (drivers/ethdev/unmap_guard.h), and a
// SIGSEGV it had blocked would kill the process with the default action.
TEST_F(VerbsApi, ProgressThreadLeavesTheFaultSignalsUnblocked) {
  const std::vector<pid_t> tids = ProgressThreads();
  ASSERT_FALSE(tids.empty()) << "no thread named droce-progress";
  const auto bit = [](int sig) { return uint64_t{1} << (sig - 1); };
  for (const pid_t tid : tids) {
    std::ifstream status("/proc/self/task/" + std::to_string(tid) + "/status");
    std::string line;
    uint64_t blocked = 0;
    bool found = false;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      blocked = std::stoull(line.substr(7), nullptr, 16);
      found = true;
    }
    ASSERT_TRUE(found) << "no SigBlk line for progress thread " << tid;
    EXPECT_EQ(blocked & bit(SIGSEGV), 0u) << tid;
    EXPECT_EQ(blocked & bit(SIGBUS), 0u) << tid;
    EXPECT_NE(blocked & bit(SIGINT), 0u) << tid << ": the program's signals stay with the program's threads";
    EXPECT_NE(blocked & bit(SIGALRM), 0u) << tid;
  }
}

// progress_sched=auto (a second device, droce1, registered here): the
// progress thread is SCHED_OTHER before the program ever called, SCHED_FIFO
// once it called and went quiet (a program spinning on memory needs the
// thread's wake-ups to preempt at once),
// SCHED_OTHER while the program polls (standing aside, and once its polls
// covered 8 windows of progress_auto_drive_us, because it drives), and
// SCHED_FIFO again once it has gone quiet (doc/verbs.md, progress_sched).
TEST_F(VerbsApi, AutoProgressThreadIsFifoWhileTheProgramIsQuietAndOtherWhileItPolls) {
  if (!SchedFifoPermitted()) GTEST_SKIP() << "SCHED_FIFO not permitted here";
  auto f = ParseDeviceFile("name=droce1\nvdev=net_ring_droce1\nip=10.0.0.2\nmtu=1024\nprogress_sched=auto\n");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(WriteDeviceTree(run_dir_, kDevInfinibandDir, *f).ok());
  struct Unregister {
    ~Unregister() { (void)RemoveDeviceTree(run_dir_, kDevInfinibandDir, "droce1"); }
  } unregister;
  // droce0's thread (started by SetUp) first, so that droce1's is the new one.
  for (int i = 0; i < 100 && ProgressThreads().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::vector<pid_t> before = ProgressThreads();
  ibv_context* ctx = OpenDeviceNamed("droce1");
  ASSERT_NE(ctx, nullptr) << "droce1 not found or not opened";
  ibv_pd* pd = ibv_alloc_pd(ctx);  // starts droce1's dataplane and its progress thread
  ibv_cq* cq = pd != nullptr ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  struct Close {
    ibv_context* ctx;
    ibv_pd* pd;
    ibv_cq* cq;
    ~Close() {
      if (cq != nullptr) ibv_destroy_cq(cq);
      if (pd != nullptr) ibv_dealloc_pd(pd);
      ibv_close_device(ctx);
    }
  } closer{ctx, pd, cq};
  ASSERT_NE(cq, nullptr);
  pid_t tid = 0;  // the thread names itself as it starts: look for up to a second
  for (int i = 0; i < 100 && tid == 0; ++i) {
    for (pid_t t : ProgressThreads()) {
      if (std::find(before.begin(), before.end(), t) == before.end()) tid = t;
    }
    if (tid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_NE(tid, 0) << "droce1's progress thread";
  // Quiet, but running: the program spins on memory (here on the policy's
  // system call) with a poll every 20 ms, until the thread has `want` or for
  // up to 10 s. The sparse polls keep the program taking part (one silent
  // for 100 ms has left the work to the thread, which then stays
  // SCHED_OTHER); the 10 s are for a loaded host, where other programs'
  // SCHED_FIFO threads may keep this SCHED_OTHER thread off the CPU for
  // longer than 100 ms.
  ibv_wc wc[4];
  const auto spin_for = [&](int want) {
    int policy = -1;
    const auto start = std::chrono::steady_clock::now();
    auto last_poll = start;
    while ((policy = sched_getscheduler(tid)) != want &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      if (std::chrono::steady_clock::now() - last_poll > std::chrono::milliseconds(20)) {
        (void)ibv_poll_cq(cq, 4, wc);
        last_poll = std::chrono::steady_clock::now();
      }
    }
    return policy;
  };
  // A program that never called leaves the work to the thread: SCHED_OTHER.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(sched_getscheduler(tid), SCHED_OTHER) << "no call yet: not real-time";
  // One poll, then quiet without running (asleep; as a polling program
  // preempted on a loaded host): the thread stays SCHED_OTHER (the churn
  // guard: a real-time thread would preempt the program once it runs again).
  (void)ibv_poll_cq(cq, 4, wc);
  int fifo_asleep = 0;
  for (int i = 0; i < 16; ++i) {  // 80 ms: within the 100 ms in which it takes part
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    fifo_asleep += sched_getscheduler(tid) == SCHED_FIFO;
  }
  EXPECT_EQ(fifo_asleep, 0) << "SCHED_FIFO for a program that did not run";
  // One poll, then quiet, spinning on memory, idle device: SCHED_FIFO
  // (decided before the thread sleeps).
  (void)ibv_poll_cq(cq, 4, wc);
  ASSERT_EQ(spin_for(SCHED_FIFO), SCHED_FIFO) << "a spinning program's progress thread sleeps at SCHED_FIFO";
  // Poll without a pause for 300 ms or more, looking at the policy between polls:
  // after the first 50 ms (1 ms of driving, and the thread's next wake-up)
  // it is SCHED_OTHER. SCHED_FIFO looks are allowed: on a loaded host
  // this thread may be kept off the CPU for most of a millisecond, which is
  // a program that does not drive, and the thread may rightly promote
  // itself then.
  // At least 64 looks: a program kept off the CPU (a loaded host) polls
  // longer, up to 10 s, rather than judging the thread on no looks at all.
  int fifo_late = 0, other_late = 0;
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t i = 0;; ++i) {
    (void)ibv_poll_cq(cq, 4, wc);
    if (i % 256 != 0) continue;
    const auto t = std::chrono::steady_clock::now() - start;
    if ((t > std::chrono::milliseconds(300) && fifo_late + other_late >= 64) || t > std::chrono::seconds(10)) break;
    if (t < std::chrono::milliseconds(50)) continue;
    (sched_getscheduler(tid) == SCHED_FIFO ? fifo_late : other_late) += 1;
  }
  EXPECT_GT(other_late, 0);
  // At least a fifth SCHED_OTHER (on a quiet host nearly all; at load 8,
  // with this thread starved in many milliseconds, about half).
  EXPECT_GT(other_late * 4, fifo_late) << "SCHED_FIFO while the program drives: its wake-ups preempt the program";
  // The program goes quiet, spinning on memory: SCHED_FIFO again.
  const int policy = spin_for(SCHED_FIFO);
  EXPECT_EQ(policy, SCHED_FIFO) << "the thread promotes itself once the program is quiet";
}

// The provider's droce_progress_counters (found as libdroce-preload.so finds
// droce_wait_comp_channel: in the library that holds the context's ops).
struct ProgressCounters {
  uint64_t stand_asides = 0, pm_qos_holds = 0;
};
ProgressCounters ReadProgressCounters(ibv_context* ctx) {
  using Fn = int (*)(ibv_context*, uint64_t*, uint64_t*);
  Dl_info info{};
  ProgressCounters c;
  if (dladdr(reinterpret_cast<void*>(ctx->ops.poll_cq), &info) == 0 || info.dli_fname == nullptr) {
    ADD_FAILURE() << "no provider library";
    return c;
  }
  void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) {
    ADD_FAILURE() << "provider not loaded";
    return c;
  }
  auto fn = reinterpret_cast<Fn>(dlsym(lib, "droce_progress_counters"));
  dlclose(lib);
  if (fn == nullptr) {
    ADD_FAILURE() << "no droce_progress_counters";
    return c;
  }
  EXPECT_EQ(fn(ctx, &c.stand_asides, &c.pm_qos_holds), 0);
  return c;
}

// progress_pm_qos_us (100 in this suite's device file, a bound that keeps
// the host's idle states): the progress thread holds /dev/cpu_dma_latency
// while the device is hot and lets it go once it is idle (doc/verbs.md).
// The traffic here is the progress thread's to carry: the program posts and
// then waits without calling (a program that polls drives the device
// itself, and on a loaded host its polls can keep the progress thread from
// the device lock for seconds). Needs write access to the device (root).
TEST_F(VerbsApi, PmQosIsHeldWhileHotAndReleasedWhenIdle) {
  if (access("/dev/cpu_dma_latency", W_OK) != 0) GTEST_SKIP() << "no write access to /dev/cpu_dma_latency";
  const auto held = [] {
    for (const auto& fd : fs::directory_iterator("/proc/self/fd")) {
      std::error_code ec;
      if (fs::read_symlink(fd.path(), ec) == "/dev/cpu_dma_latency") return true;
    }
    return false;
  };
  // These wait for an outcome, not for a time: the limits only end a run
  // that would otherwise hang.
  const auto released = [&] {
    for (int i = 0; i < 3000 && held(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return !held();
  };
  const auto taken_since = [&](uint64_t holds_before) {
    for (int i = 0; i < 3000 && ReadProgressCounters(ctx_).pm_qos_holds == holds_before; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ReadProgressCounters(ctx_).pm_qos_holds > holds_before;
  };
  ibv_qp *a, *b;
  Connect(&a, &b);
  // The tests before may have left it hot: first idle (and released).
  ASSERT_TRUE(released()) << "held after the previous tests, and never released when quiet";
  const auto before = ReadProgressCounters(ctx_);
  Fill(0x1000, 4096, 9);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 1, 0x1000, 4096, 0x40000), 0);
  EXPECT_TRUE(taken_since(before.pm_qos_holds)) << "no PM QoS request while the device carried a WRITE";
  // Quiet: after progress_hot_us (2 ms) the thread goes idle and lets go.
  EXPECT_TRUE(released()) << "the PM QoS request outlived the hot phase";
  const std::vector<ibv_wc> wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_.data() + 0x1000, buf_.data() + 0x40000, 4096), 0);
}

// A device of its own whose progress thread, once idle, sleeps long (no
// spins, no hot phase, no arrival wake-up), two RC QPs connected to each
// other through its loopback, and 8 KiB registered: after Quiet(), no round
// runs between the test's calls but the ones those calls run themselves.
struct SleepyDevice {
  std::string run_dir;
  std::string name;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  ibv_qp* a = nullptr;
  ibv_qp* b = nullptr;
  ibv_qp* c = nullptr;  // with pairs = 2: a second pair, c and d
  ibv_qp* d = nullptr;
  std::vector<uint8_t> mem = std::vector<uint8_t>(8192, 0);
  int pairs_ = 1;

  // extra: more device-file keys, one per line; depth: each QP's send and
  // receive queue (the CQ holds them all).
  SleepyDevice(const std::string& dir, const std::string& n, const std::string& ip, const std::string& extra = "",
               uint32_t depth = 4, int pairs = 1)
      : run_dir(dir), name(n), pairs_(pairs) {
    auto f = ParseDeviceFile("name=" + n + "\nvdev=net_ring_" + n + "\nip=" + ip +
                             "\nmtu=1024\nprogress_sched=normal\nprogress_spins=0\nprogress_hot_us=0\n"
                             "progress_max_sleep_us=1000000\nprogress_wakeup=off\ndoorbell_batch=1\n" +
                             extra);
    if (!f.ok() || !WriteDeviceTree(run_dir, kDevInfinibandDir, *f).ok()) return;
    ctx = OpenDeviceNamed(n);
    if (ctx == nullptr) return;
    pd = ibv_alloc_pd(ctx);  // starts the dataplane and its progress thread
    if (pd == nullptr) return;
    cq = ibv_create_cq(ctx, std::max<int>(16, static_cast<int>(4 * pairs * depth)), nullptr, nullptr, 0);
    mr = ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (cq == nullptr || mr == nullptr) return;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    a = ibv_create_qp(pd, &init);
    b = ibv_create_qp(pd, &init);
    if (pairs == 2) {
      c = ibv_create_qp(pd, &init);
      d = ibv_create_qp(pd, &init);
    }
  }
  ~SleepyDevice() {
    if (a != nullptr) ibv_destroy_qp(a);
    if (b != nullptr) ibv_destroy_qp(b);
    if (c != nullptr) ibv_destroy_qp(c);
    if (d != nullptr) ibv_destroy_qp(d);
    if (mr != nullptr) ibv_dereg_mr(mr);
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    (void)RemoveDeviceTree(run_dir, kDevInfinibandDir, name);
  }
  bool ok() const { return a != nullptr && b != nullptr && (pairs_ == 1 || (c != nullptr && d != nullptr)); }
  // Idle for 300 ms: the thread's sleeps, doubling from the last work, now
  // last as long; what the test does next takes microseconds.
  static void Quiet() { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }
  // A 64 B WRITE from a to b's half of mem (0x5C bytes).
  int Write(uint64_t wr_id, unsigned int flags) {
    std::memset(mem.data(), 0x5C, 64);
    return WriteOn(a, wr_id, flags, 0, 4096);
  }
  // A 64 B WRITE on q from mem + src to mem + dst.
  int WriteOn(ibv_qp* q, uint64_t wr_id, unsigned int flags, size_t src, size_t dst) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(mem.data() + src), 64, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = flags;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(mem.data() + dst);
    wr.wr.rdma.rkey = mr->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q, &wr, &bad);
  }
  // Completions on cq within `wait` (stops at the first).
  int PollOne(ibv_wc* wc, std::chrono::milliseconds wait) {
    int got = 0;
    const auto start = std::chrono::steady_clock::now();
    while (got == 0 && std::chrono::steady_clock::now() - start < wait) got = ibv_poll_cq(cq, 1, wc);
    return got;
  }
};

// destroy_qp first answers what already reached the device (DestroyQp's
// poll round), as a NIC answers frames when they arrive: a WRITE whose
// frame waits in the device's receive ring when its target QP is destroyed
// is still acknowledged, and the peer's WR completes. Without that round
// the frame finds no QP at the next one, and the WR ends in
// IBV_WC_RETRY_EXC_ERR.
TEST_F(VerbsApi, DestroyQpAcknowledgesTheRequestThatAlreadyArrived) {
  SleepyDevice d(run_dir_, "droce2", "10.0.0.3");
  ASSERT_TRUE(d.ok()) << "droce2 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  SleepyDevice::Quiet();
  ASSERT_EQ(d.Write(42, IBV_SEND_SIGNALED), 0);  // the frame loops back into droce2's receive ring
  ASSERT_EQ(ibv_destroy_qp(d.b), 0);
  d.b = nullptr;
  ibv_wc wc{};
  ASSERT_EQ(d.PollOne(&wc, std::chrono::seconds(5)), 1) << "no completion for the WRITE";
  EXPECT_EQ(wc.wr_id, 42u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(d.mem[4096], 0x5C) << "placed before its QP went";
}

// rdma_cm's disconnect, each side's QP moved to ERR in turn with no round
// of the device between (the DREQ, through the daemon, can overtake the
// dataplane's rounds; unsignaled_ack_every makes the peer's last WRITE one
// without AckReq): modify_qp to ERR first takes and answers what reached
// the device, as a NIC did on arrival, and the ACK the responder owes
// (EnterError's) leaves before the call returns, ahead of the DREQ. The
// requester's own move to ERR then finds that ACK received: its unsignaled
// WRITE completed, and nothing is flushed. Without the receive round b
// moves to ERR with the WRITE unplaced; without the send the ACK is still
// queued in b when a moves to ERR; either way a's WRITE completes
// IBV_WC_WR_FLUSH_ERR.
TEST_F(VerbsApi, ModifyToErrAnswersWhatArrivedAndSendsTheOwedAckAtOnce) {
  SleepyDevice d(run_dir_, "droce3", "10.0.0.4", "ack_solicit_us=10000000\n");
  ASSERT_TRUE(d.ok()) << "droce3 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  SleepyDevice::Quiet();
  ASSERT_EQ(d.Write(7, 0), 0);  // unsignaled, and the QP's first packet: no AckReq
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(d.b, &err, IBV_QP_STATE), 0);  // the side that disconnects
  ASSERT_EQ(ibv_modify_qp(d.a, &err, IBV_QP_STATE), 0);  // its peer, on the DISCONNECTED event
  EXPECT_EQ(d.mem[4096], 0x5C) << "the WRITE was not placed before b left RTS";
  ibv_wc wc{};
  const int got = d.PollOne(&wc, std::chrono::milliseconds(200));
  EXPECT_EQ(got, 0) << "WR " << wc.wr_id << " completed " << ibv_wc_status_str(wc.status)
                    << " although its data arrived";
}

// destroy_qp of a QP still in RTS (libfabric's rxm closes its endpoint so,
// and rdma_destroy_id's DREQ follows) acknowledges the unasked WRITE it
// accepted, as a move to ERR does: the peer's move to ERR on that DREQ
// then flushes nothing. Without it a's WRITE completes IBV_WC_WR_FLUSH_ERR.
TEST_F(VerbsApi, DestroyQpInRtsSendsTheOwedAck) {
  SleepyDevice d(run_dir_, "droce4", "10.0.0.5", "ack_solicit_us=10000000\n");
  ASSERT_TRUE(d.ok()) << "droce4 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  SleepyDevice::Quiet();
  ASSERT_EQ(d.Write(8, 0), 0);  // unsignaled, the QP's first packet: no AckReq
  ASSERT_EQ(ibv_destroy_qp(d.b), 0);
  d.b = nullptr;
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(d.a, &err, IBV_QP_STATE), 0);
  EXPECT_EQ(d.mem[4096], 0x5C);
  ibv_wc wc{};
  const int got = d.PollOne(&wc, std::chrono::milliseconds(200));
  EXPECT_EQ(got, 0) << "WR " << wc.wr_id << " completed " << ibv_wc_status_str(wc.status)
                    << " although its data arrived";
}

// Doorbell batching at its widest (a post within a second of the last one,
// with no poll between, defers), on a SleepyDevice: a burst's posts after
// its first only leave their QP's doorbell record (Runtime::RingPosted),
// and no round runs but the test's own.
constexpr char kDeferEveryBurstPost[] = "doorbell_batch=16\ndoorbell_burst_gap_ns=1000000000\n";

// Polls enough to stamp the program's last poll (the batcher defers only
// for a program that polls): one poll in Runtime::kQuietPolls takes the
// lock.
void StampPoll(ibv_cq* cq) {
  ibv_wc wc{};
  for (int i = 0; i < 10; ++i) (void)ibv_poll_cq(cq, 1, &wc);
}

// A burst's deferred doorbells leave with the program's next poll_cq when
// no post follows: the poll's round takes the QP's doorbell record. Without
// the record (a deferring post that publishes its WRs and marks nothing)
// the last three WRITEs stay in the ring unsent and never complete.
TEST_F(VerbsApi, DeferredDoorbellsLeaveWithTheNextPollWhenNoPostFollows) {
  SleepyDevice d(run_dir_, "droce5", "10.0.0.6", kDeferEveryBurstPost);
  ASSERT_TRUE(d.ok()) << "droce5 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  SleepyDevice::Quiet();
  StampPoll(d.cq);
  for (int i = 0; i < 4; ++i) std::memset(d.mem.data() + i * 64, 0xA0 + i, 64);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(d.WriteOn(d.a, i, IBV_SEND_SIGNALED, i * 64, 4096 + i * 64), 0);
  int got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got < 4 && std::chrono::steady_clock::now() < deadline) {
    ibv_wc wc{};
    if (ibv_poll_cq(d.cq, 1, &wc) != 1) continue;
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(got)) << "completions in posting order";
    ++got;
  }
  ASSERT_EQ(got, 4) << "deferred WRITEs never left";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.mem[4096 + i * 64], 0xA0 + i) << "WRITE " << i;
}

// The same burst when the program then calls nothing (it waits on memory):
// the progress thread's next round takes the record and sends the WRITEs.
// Watched through a's next PSN (query_qp takes the device lock, so the
// look is ordered with the rounds, and runs no round itself).
TEST_F(VerbsApi, DeferredDoorbellsLeaveWithTheProgressThreadsRoundWhenTheProgramStops) {
  SleepyDevice d(run_dir_, "droce6", "10.0.0.7", kDeferEveryBurstPost);
  ASSERT_TRUE(d.ok()) << "droce6 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  const auto next_psn = [&d] {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(d.a, &attr, IBV_QP_SQ_PSN, &init), 0);
    return attr.sq_psn;
  };
  const uint32_t psn = next_psn();
  StampPoll(d.cq);
  for (int i = 0; i < 4; ++i) std::memset(d.mem.data() + i * 64, 0xB0 + i, 64);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(d.WriteOn(d.a, i, IBV_SEND_SIGNALED, i * 64, 4096 + i * 64), 0);
  // The thread sleeps up to progress_max_sleep_us (1 s) between rounds.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  uint32_t sent = 0;
  while (sent < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    sent = (next_psn() - psn) & 0xFFFFFF;
  }
  ASSERT_EQ(sent, 4u) << "deferred WRITEs never left";
  int got = 0;
  ibv_wc wc[4];
  for (int tries = 0; got < 4 && tries < 100000; ++tries) got += ibv_poll_cq(d.cq, 4 - got, wc + got);
  ASSERT_EQ(got, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.mem[4096 + i * 64], 0xB0 + i) << "WRITE " << i;
}

// A signaled WRITE after unsignaled ones on the device's only QP (completion
// moderation, as perftest's every 100th WR) rings its doorbell at once, the
// deferred posts before it leaving with it: all four are on the wire before
// any poll, where otherwise the last three wait for the batch's end or the
// next poll. The QP is connected to itself (b destroyed: a second QP on the
// device would keep the batch). Watched through a's next PSN, as above.
TEST_F(VerbsApi, ASignaledPostAfterUnsignaledOnesOnTheOnlyQpRingsAtOnce) {
  SleepyDevice d(run_dir_, "droce8", "10.0.0.9", kDeferEveryBurstPost, /*depth=*/16);
  ASSERT_TRUE(d.ok()) << "droce8 not set up";
  ASSERT_EQ(ibv_destroy_qp(d.b), 0);
  d.b = nullptr;
  ASSERT_EQ(ToInit(d.a), 0);
  ASSERT_EQ(ToRtr(d.a, d.a->qp_num), 0);
  ASSERT_EQ(ToRts(d.a), 0);
  const auto next_psn = [&d] {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(d.a, &attr, IBV_QP_SQ_PSN, &init), 0);
    return attr.sq_psn;
  };
  SleepyDevice::Quiet();
  const uint32_t psn = next_psn();
  StampPoll(d.cq);
  for (int i = 0; i < 4; ++i) std::memset(d.mem.data() + i * 64, 0xC0 + i, 64);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(d.WriteOn(d.a, i, 0, i * 64, 4096 + i * 64), 0);
  EXPECT_LT((next_psn() - psn) & 0xFFFFFF, 3u) << "the unsignaled posts did not defer: nothing to show";
  ASSERT_EQ(d.WriteOn(d.a, 3, IBV_SEND_SIGNALED, 3 * 64, 4096 + 3 * 64), 0);
  EXPECT_EQ((next_psn() - psn) & 0xFFFFFF, 4u) << "the signaled post's doorbell was deferred";
  ibv_wc wc{};
  ASSERT_EQ(d.PollOne(&wc, std::chrono::seconds(5)), 1) << "no completion for the signaled WRITE";
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.mem[4096 + i * 64], 0xC0 + i) << "WRITE " << i;
}

// Two threads posting bursts on two QPs at once, every post after a
// burst's first deferring its doorbell without the device lock: the two
// QPs' records, the batcher's shared stamps and the owner's takes race
// (run under ThreadSanitizer by tools/run-tests.sh), and every WRITE
// completes once, in its QP's order. Without the record (as above) the
// deferred WRITEs never complete.
TEST_F(VerbsApi, TwoThreadsDeferringOnTwoQpsLoseNothing) {
  constexpr uint32_t kPerBurst = 48, kBursts = 20;
  SleepyDevice d(run_dir_, "droce7", "10.0.0.8", kDeferEveryBurstPost, /*depth=*/64, /*pairs=*/2);
  ASSERT_TRUE(d.ok()) << "droce7 not set up";
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.a, d.b));
  ASSERT_NO_FATAL_FAILURE(ConnectEachOther(d.c, d.d));
  const uint32_t qpn_a = d.a->qp_num;
  for (uint32_t burst = 0; burst < kBursts; ++burst) {
    for (int t = 0; t < 2; ++t) std::memset(d.mem.data() + t * 64, 0xC0 + burst, 64);
    StampPoll(d.cq);
    std::atomic<int> ready{0};
    std::atomic<bool> failed{false};
    std::vector<std::thread> posters;
    for (int t = 0; t < 2; ++t) {
      posters.emplace_back([&, t] {
        ibv_qp* q = t == 0 ? d.a : d.c;
        ready.fetch_add(1);
        while (ready.load() < 2) {
        }
        for (uint32_t i = 0; i < kPerBurst; ++i) {
          // Each thread its own 64 B source and target.
          if (d.WriteOn(q, (uint64_t{burst} << 32) | i, IBV_SEND_SIGNALED, t * 64, 4096 + t * 64) != 0) {
            failed = true;
          }
        }
      });
    }
    for (std::thread& p : posters) p.join();
    ASSERT_FALSE(failed) << "burst " << burst << ": a post failed";
    uint32_t next[2] = {0, 0};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((next[0] < kPerBurst || next[1] < kPerBurst) && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[16];
      const int got = ibv_poll_cq(d.cq, 16, wc);
      ASSERT_GE(got, 0);
      for (int k = 0; k < got; ++k) {
        ASSERT_EQ(wc[k].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[k].status);
        const int t = wc[k].qp_num == qpn_a ? 0 : 1;
        ASSERT_EQ(wc[k].wr_id, (uint64_t{burst} << 32) | next[t]) << "QP " << t << ": lost, repeated or reordered";
        ++next[t];
      }
    }
    ASSERT_EQ(next[0], kPerBurst) << "burst " << burst << ": QP a's WRITEs did not all complete";
    ASSERT_EQ(next[1], kPerBurst) << "burst " << burst << ": QP c's WRITEs did not all complete";
  }
}

// UCX's pattern: its async thread arms a completion channel on its UD
// receive CQ once and waits on the fd with epoll for the whole job, while
// the program polls every CQ itself. A channel armed long ago (more than
// progress_max_sleep_us) does not keep the progress thread polling beside
// a program that polls: it stands aside as for any polling program (its
// rounds beside every round trip cost MPI's ping-pong, on the rank's own
// core, tools/bench/stacks/results.md), and the program's own poll rounds
// deliver the channel's event (doc/verbs.md "Who drives the device").
TEST_F(VerbsApi, ProgressThreadStandsAsideBesideAChannelArmedLongAgo) {
  ibv_comp_channel* channel = nullptr;
  ibv_cq* event_cq = nullptr;  // the plain CQ until the swap below
  ibv_qp *a = nullptr, *b = nullptr;
  ASSERT_NO_FATAL_FAILURE(ConnectOnChannel(&channel, &event_cq, &a, &b));
  std::swap(cq_, event_cq);  // the program polls the plain CQ; event_cq is the channel's
  ASSERT_EQ(ibv_req_notify_cq(event_cq, 0), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the arming is old now
  // The program polls another CQ (nothing on it) for 100 ms.
  const auto poll_for = [&](std::chrono::milliseconds d, const std::function<bool()>& done) {
    ibv_wc wc[4];
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0;; ++i) {
      EXPECT_EQ(ibv_poll_cq(cq_, 4, wc), 0);
      if (i % 64 == 0 && (done() || std::chrono::steady_clock::now() - start > d)) return;
    }
  };
  const uint64_t before = ReadProgressCounters(ctx_).stand_asides;
  poll_for(std::chrono::milliseconds(100), [] { return false; });
  EXPECT_GT(ReadProgressCounters(ctx_).stand_asides, before)
      << "the progress thread kept polling beside a polling program: a channel armed long ago held it";
  // A SEND completes on the armed CQ while the program keeps polling the
  // other one: its poll rounds receive it and deliver the event.
  ASSERT_EQ(PostRecv(b, 1, 4096, 64), 0);
  ASSERT_EQ(PostSend(a, IBV_WR_SEND, 2, 0, 64, 0), 0);
  const auto readable = [&] {
    pollfd p{channel->fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  poll_for(std::chrono::seconds(5), readable);
  ASSERT_TRUE(readable()) << "no completion event while the program polled another CQ";
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), 0);
  EXPECT_EQ(cq, event_cq);
  ibv_ack_cq_events(event_cq, 1);
  std::swap(cq_, event_cq);
  EXPECT_EQ(Poll(2).size(), 2u);
  std::swap(cq_, event_cq);
  // A completion made outside a poll round (a receive flushed by the move
  // to ERR) on the armed CQ: the program's next empty poll of the other CQ
  // runs the round that sends its event, however many unarmed CQs the
  // device has.
  ASSERT_EQ(PostRecv(b, 3, 4096, 64), 0);
  ASSERT_EQ(ibv_req_notify_cq(event_cq, 0), 0);
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(b, &err, IBV_QP_STATE), 0);
  ibv_wc wc[4];
  EXPECT_EQ(ibv_poll_cq(cq_, 4, wc), 0);
  EXPECT_TRUE(readable()) << "the flush's event waited for a later round";
  ASSERT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), 0);
  ibv_ack_cq_events(event_cq, 1);
  std::swap(cq_, event_cq);
  const std::vector<ibv_wc> flushed = Poll(1);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
  for (ibv_qp* q : qps_) ibv_destroy_qp(q);
  qps_.clear();
  std::swap(cq_, event_cq);
  EXPECT_EQ(ibv_destroy_cq(event_cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// ibv_wr_set_inline_data keeps a copy of the data (the caller may reuse
// its buffer at once) without allocating: it goes into the WR's ring slot,
// so no wr_start .. wr_complete allocates, the first one included.
TEST_F(VerbsApi, ExtendedApiInlineDataDoesNotAllocatePerRequest) {
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/true);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ASSERT_NE(x, nullptr);
  constexpr int kWrs = 4;
  char data[kWrs][48];
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kWrs; ++i) {
      ASSERT_EQ(PostRecv(b, 100 + i, 0xc0000 + i * 64, 64), 0);
      std::snprintf(data[i], sizeof data[i], "round %d inline %d", round, i);
    }
    g_count_allocations = true;
    ibv_wr_start(x);
    for (int i = 0; i < kWrs; ++i) {
      x->wr_id = 10 + i;
      x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
      ibv_wr_send(x);
      ibv_wr_set_inline_data(x, data[i], sizeof data[i]);
      std::memset(data[i], 0, sizeof data[i]);
    }
    const int err = ibv_wr_complete(x);
    g_count_allocations = false;
    ASSERT_EQ(err, 0);
    EXPECT_EQ(g_allocations, 0) << "round " << round;
    g_allocations = 0;
    auto wcs = Poll(2 * kWrs);
    ASSERT_EQ(wcs.size(), size_t{2 * kWrs});
    for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    for (int i = 0; i < kWrs; ++i) {
      char want[48];
      std::snprintf(want, sizeof want, "round %d inline %d", round, i);
      EXPECT_STREQ(reinterpret_cast<const char*>(&buf_[0xc0000 + i * 64]), want);
    }
  }
}

// An ibv_wr_* batch is posted whole at wr_complete or not at all: one WR
// more than the send queue holds (ENOMEM), a setter's bad argument or a WR
// the QP refuses at wr_complete (EINVAL), and wr_abort post nothing; the
// next batch then posts normally. Between wr_start and wr_complete the
// thread holds the QP's post lock: its own post, modify or destroy of that
// QP fails rather than waiting for itself.
TEST_F(VerbsApi, ExtendedApiBatchIsPostedWholeOrNotAtAll) {
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/true);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  ASSERT_NE(x, nullptr);
  const auto write = [&](uint64_t wr_id, uint32_t flags, uint32_t len) {
    x->wr_id = wr_id;
    x->wr_flags = flags;
    ibv_wr_rdma_write(x, mr_->rkey, reinterpret_cast<uintptr_t>(buf_.data() + 0x40000));
    ibv_wr_set_sge(x, mr_->lkey, reinterpret_cast<uintptr_t>(buf_.data() + 0x1000), len);
  };
  const auto nothing_completes = [&] {
    for (int i = 0; i < 2000; ++i) {
      ibv_wc wc;
      const int got = ibv_poll_cq(cq_, 1, &wc);
      if (got != 0) {
        ADD_FAILURE() << "a completion (wr_id " << wc.wr_id << ") of a batch that was not posted";
        return;
      }
      usleep(50);
    }
  };
  ibv_wr_start(x);  // 65 WRs: one more than the send queue's 64
  for (int i = 0; i < 65; ++i) write(100 + i, IBV_SEND_SIGNALED, 64);
  EXPECT_EQ(ibv_wr_complete(x), ENOMEM);
  ibv_wr_start(x);  // a setter's bad argument, in the second WR
  write(200, IBV_SEND_SIGNALED, 64);
  x->wr_id = 201;
  ibv_wr_send(x);
  std::vector<ibv_sge> nine(9, ibv_sge{reinterpret_cast<uintptr_t>(buf_.data()), 8, mr_->lkey});
  ibv_wr_set_sge_list(x, nine.size(), nine.data());  // more SGEs than the QP has
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  ibv_wr_start(x);  // refused when posted: inline data longer than the QP takes, in the last WR
  write(300, IBV_SEND_SIGNALED, 64);
  write(301, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 4096);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL);
  ibv_wr_start(x);
  write(400, IBV_SEND_SIGNALED, 64);
  ibv_wr_abort(x);
  EXPECT_EQ(ibv_wr_complete(x), EINVAL) << "wr_complete without wr_start";
  nothing_completes();

  // Inside a batch: the thread's own post, modify and destroy of the QP.
  ibv_wr_start(x);
  Fill(0x1000, 64, 9);
  write(500, IBV_SEND_SIGNALED, 64);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), 8, mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(a, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(ibv_modify_qp(a, &attr, IBV_QP_STATE), EINVAL);
  EXPECT_EQ(ibv_destroy_qp(a), EBUSY);
  write(501, IBV_SEND_SIGNALED, 64);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 500u);
  EXPECT_EQ(wcs[1].wr_id, 501u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(std::memcmp(&buf_[0x40000], &buf_[0x1000], 64), 0);

  // A full send queue's worth in one batch, then again.
  for (int round = 0; round < 2; ++round) {
    ibv_wr_start(x);
    for (int i = 0; i < 64; ++i) write(600 + i, IBV_SEND_SIGNALED, 64);
    ASSERT_EQ(ibv_wr_complete(x), 0);
    wcs = Poll(64);
    ASSERT_EQ(wcs.size(), 64u);
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(wcs[i].wr_id, 600u + i);
      EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    }
  }
}

// A batch on a QP whose posts take the device's lock (not in RTS: here
// ERR) goes through the engine's post: every WR flushed, in order, with
// its inline data having been taken without harm.
TEST_F(VerbsApi, ExtendedApiBatchIntoAnErrQpFlushesInOrder) {
  ibv_qp *a, *b;
  Connect(&a, &b, /*ex=*/true);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(a, &attr, IBV_QP_STATE), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(a);
  char inl[] = "flushed";
  ibv_wr_start(x);
  for (int i = 0; i < 3; ++i) {
    x->wr_id = 700 + i;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_inline_data(x, inl, sizeof inl);
  }
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto wcs = Poll(3);
  ASSERT_EQ(wcs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, 700u + i);
    EXPECT_EQ(wcs[i].status, IBV_WC_WR_FLUSH_ERR);
  }
}

volatile sig_atomic_t g_alarms = 0;

void StartAlarm(int ms) {
  itimerval t{};
  t.it_value.tv_usec = ms * 1000;
  ASSERT_EQ(setitimer(ITIMER_REAL, &t, nullptr), 0);
}

// ibv_get_cq_event on a droce channel waits in the provider (it drives the
// dataplane itself) yet behaves as libibverbs' blocking read of the channel:
// an event that comes while it waits ends it; a signal handler without
// SA_RESTART makes it fail with EINTR (qperf ends its tests that way), one
// with SA_RESTART does not; a non-blocking channel answers EAGAIN.
// Memory windows through the provider's ops, as rdma-core's pyverbs
// MWTest and test_qp_ex_rc_bind_mw use them: ibv_bind_mw (type 1), a
// BIND_MW work request and ibv_wr_bind_mw (type 2), LOCAL_INV and
// SEND_WITH_INV, and the region's life while windows are bound to it.
TEST_F(VerbsApi, MemoryWindows) {
  ibv_device_attr dev{};
  ASSERT_EQ(ibv_query_device(ctx_, &dev), 0);
  EXPECT_TRUE(dev.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(dev.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_GT(dev.max_mw, 0);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);

  // The window's memory: the second half of buf_, registered with the bind right only.
  ibv_mr* bindable = ibv_reg_mr(pd_, buf_.data() + 0x80000, 0x80000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  ASSERT_NE(bindable, nullptr);
  const uint64_t win = reinterpret_cast<uintptr_t>(buf_.data()) + 0x80000;

  // Type 1, bound with ibv_bind_mw on the responder's QP.
  ibv_qp *a, *b;
  Connect(&a, &b);
  ibv_mw* mw1 = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(mw1, nullptr);
  const uint32_t first_key = mw1->rkey;
  ibv_mw_bind bind{};
  bind.wr_id = 11;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = {bindable, win, 0x1000, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  ASSERT_EQ(ibv_bind_mw(b, mw1, &bind), 0);
  EXPECT_NE(mw1->rkey, first_key);
  EXPECT_EQ(mw1->rkey >> 8, first_key >> 8);
  auto wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_BIND_MW);
  Fill(0x1000, 256, 21);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 12, 0x1000, 256, 0x80000, IBV_SEND_SIGNALED, std::nullopt, mw1->rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wcs[0].status);
  EXPECT_EQ(std::memcmp(&buf_[0x80000], &buf_[0x1000], 256), 0);
  // The region stays while the window is bound to it (EINVAL, as rxe).
  EXPECT_EQ(ibv_dereg_mr(bindable), EINVAL);
  // Past the window's end: remote access error.
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 13, 0x1000, 256, 0x80F80, IBV_SEND_SIGNALED, std::nullopt, mw1->rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  // Unbind (zero length) and deallocate; then the region goes.
  Connect(&a, &b);
  bind.bind_info = {bindable, 0, 0, 0};
  ASSERT_EQ(ibv_bind_mw(b, mw1, &bind), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 14, 0x1000, 8, 0x80000, IBV_SEND_SIGNALED, std::nullopt, mw1->rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dealloc_mw(mw1), 0);

  // Type 2, bound by a BIND_MW work request; freed by the peer's SEND_WITH_INV.
  Connect(&a, &b);
  ibv_mw* mw2 = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw2, nullptr);
  ibv_send_wr wr{};
  wr.wr_id = 21;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw2;
  wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
  wr.bind_mw.bind_info = {bindable, win, 0x1000, IBV_ACCESS_REMOTE_WRITE};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(b, &wr, &bad), 0);
  const uint32_t key2 = wr.bind_mw.rkey;
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 22, 0x1000, 64, 0x80000, IBV_SEND_SIGNALED, std::nullopt, key2), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(b, 23, 0x2000, 64), 0);
  ibv_send_wr inv{};
  inv.wr_id = 24;
  inv.opcode = IBV_WR_SEND_WITH_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = key2;
  ASSERT_EQ(ibv_post_send(a, &inv, &bad), 0);
  wcs = Poll(2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    if (wc.opcode == IBV_WC_RECV) {
      EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_INV);
      EXPECT_EQ(wc.invalidated_rkey, key2);
    }
  }
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 25, 0x1000, 64, 0x80000, IBV_SEND_SIGNALED, std::nullopt, key2), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);

  // ibv_wr_bind_mw on an extended QP, a window without remote rights
  // (test_qp_ex_rc_bind_mw), then LOCAL_INV of it.
  ibv_qp *c, *d;
  Connect(&c, &d, /*ex=*/true);
  ibv_qp_ex* dx = ibv_qp_to_qp_ex(d);
  ibv_mw* mw3 = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  ASSERT_NE(mw3, nullptr);
  const uint32_t key3 = ibv_inc_rkey(mw3->rkey);
  ibv_wr_start(dx);
  dx->wr_id = 31;
  dx->wr_flags = IBV_SEND_SIGNALED;
  const ibv_mw_bind_info info{bindable, win, 0x1000, IBV_ACCESS_LOCAL_WRITE};
  ibv_wr_bind_mw(dx, mw3, key3, &info);
  ASSERT_EQ(ibv_wr_complete(dx), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ibv_send_wr linv{};
  linv.wr_id = 32;
  linv.opcode = IBV_WR_LOCAL_INV;
  linv.send_flags = IBV_SEND_SIGNALED;
  linv.invalidate_rkey = key3;
  ASSERT_EQ(ibv_post_send(d, &linv, &bad), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(ibv_dealloc_mw(mw2), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw3), 0);
  EXPECT_EQ(ibv_dereg_mr(bindable), 0);
}

// ibv_rereg_mr keeps the keys and changes what it is asked to
// (pyverbs MRTest.test_mr_rereg_*).
TEST_F(VerbsApi, ReregMr) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_.data() + 0x80000, 0x1000, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  const uint32_t rkey = mr->rkey;
  ibv_qp *a, *b;
  Connect(&a, &b);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 1, 0, 64, 0x80000, IBV_SEND_SIGNALED, std::nullopt, rkey), 0);
  auto wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), 0);
  EXPECT_EQ(mr->rkey, rkey);
  Connect(&a, &b);
  Fill(0, 64, 5);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 2, 0, 64, 0x80000, IBV_SEND_SIGNALED, std::nullopt, rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(&buf_[0x80000], &buf_[0], 64), 0);
  // Another range: the old addresses are outside it now.
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, buf_.data() + 0x90000, 0x1000, 0), 0);
  EXPECT_EQ(mr->addr, buf_.data() + 0x90000);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 3, 0, 64, 0x90000, IBV_SEND_SIGNALED, std::nullopt, rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_NE(other, nullptr);
  ASSERT_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), EBUSY);
  ASSERT_EQ(PostSend(a, IBV_WR_RDMA_WRITE, 4, 0, 64, 0x90000, IBV_SEND_SIGNALED, std::nullopt, rkey), 0);
  wcs = Poll(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

TEST_F(VerbsApi, CompletionEventsAndSignalsAsTheKernelChannelWouldDeliverThem) {
  ibv_comp_channel* channel = nullptr;
  ibv_cq* event_cq = nullptr;  // the plain CQ: cq_ is the channel's
  ibv_qp *a = nullptr, *b = nullptr;
  ASSERT_NO_FATAL_FAILURE(ConnectOnChannel(&channel, &event_cq, &a, &b));
  const auto send_later = [&](int ms) {
    return std::thread([this, a, b, ms] {
      usleep(ms * 1000);
      EXPECT_EQ(PostRecv(b, 1, 4096, 64), 0);
      EXPECT_EQ(PostSend(a, IBV_WR_SEND, 2, 0, 64, 0), 0);
    });
  };
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;

  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  std::thread sender = send_later(20);
  EXPECT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), 0);
  sender.join();
  EXPECT_EQ(cq, cq_);
  ibv_ack_cq_events(cq_, 1);
  EXPECT_EQ(Poll(2).size(), 2u);

  struct sigaction on_alarm {}, old {};
  on_alarm.sa_handler = [](int) { g_alarms = g_alarms + 1; };
  sigemptyset(&on_alarm.sa_mask);
  on_alarm.sa_flags = 0;
  ASSERT_EQ(sigaction(SIGALRM, &on_alarm, &old), 0);
  usleep(2000);  // the provider looks at the installed handlers once a millisecond (doc/verbs.md)
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  StartAlarm(50);
  // Should the signal not end the wait, an event does after 3 s: a failure, not a hang.
  std::promise<void> interrupted;
  std::thread rescue([&, a, b] {
    // Like a single-threaded program (qperf), only the waiter may take the
    // alarm: the kernel gives a process-directed signal to any thread that
    // does not block it.
    sigset_t alarm;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm, nullptr);
    if (interrupted.get_future().wait_for(std::chrono::seconds(3)) == std::future_status::ready) return;
    EXPECT_EQ(PostRecv(b, 1, 4096, 64), 0);
    EXPECT_EQ(PostSend(a, IBV_WR_SEND, 2, 0, 64, 0), 0);
  });
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), -1);
  EXPECT_EQ(errno, EINTR);
  EXPECT_EQ(g_alarms, 1);
  interrupted.set_value();
  rescue.join();

  on_alarm.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGALRM, &on_alarm, nullptr), 0);
  StartAlarm(20);
  sender = send_later(200);
  EXPECT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), 0);  // after the alarm, on the event
  sender.join();
  EXPECT_EQ(g_alarms, 2);
  ibv_ack_cq_events(cq_, 1);
  EXPECT_EQ(Poll(2).size(), 2u);
  ASSERT_EQ(sigaction(SIGALRM, &old, nullptr), 0);

  const int flags = fcntl(channel->fd, F_GETFL);
  ASSERT_EQ(fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK), 0);
  ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
  errno = 0;
  EXPECT_EQ(ibv_get_cq_event(channel, &cq, &cq_context), -1);
  EXPECT_EQ(errno, EAGAIN);

  for (ibv_qp* q : qps_) ibv_destroy_qp(q);
  qps_.clear();
  std::swap(cq_, event_cq);
  EXPECT_EQ(ibv_destroy_cq(event_cq), 0);
  EXPECT_EQ(ibv_destroy_comp_channel(channel), 0);
}

// What a CQE of PollCqWritesEachCqeWhole's messages must hold, field by
// field: message i (0-based) is a solicited SEND (even i) or WRITE_WITH_IMM
// (odd i) of 32 + i bytes with immediate 0xc0de0000 + i from a to b, its
// receive wr_id 100 + i, its send wr_id 1000 + i.
void ExpectCqe(const ibv_wc& wc, const ibv_qp* a, const ibv_qp* b) {
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.vendor_err, 0u);
  EXPECT_EQ(wc.pkey_index, 0u);
  EXPECT_EQ(wc.slid, 0u);
  EXPECT_EQ(wc.sl, 0u);
  EXPECT_EQ(wc.dlid_path_bits, 0u);
  if (wc.wr_id >= 1000) {  // a's send completion
    const uint32_t i = static_cast<uint32_t>(wc.wr_id - 1000);
    EXPECT_EQ(wc.opcode, i % 2 == 0 ? IBV_WC_SEND : IBV_WC_RDMA_WRITE) << wc.wr_id;
    EXPECT_EQ(wc.qp_num, a->qp_num);
    EXPECT_EQ(wc.byte_len, 32 + i);
    EXPECT_EQ(wc.wc_flags, 0u) << wc.wr_id;
    EXPECT_EQ(wc.imm_data, 0u);
    EXPECT_EQ(wc.src_qp, 0u);
  } else {  // b's receive
    ASSERT_GE(wc.wr_id, 100u);
    const uint32_t i = static_cast<uint32_t>(wc.wr_id - 100);
    EXPECT_EQ(wc.opcode, i % 2 == 0 ? IBV_WC_RECV : IBV_WC_RECV_RDMA_WITH_IMM) << wc.wr_id;
    EXPECT_EQ(wc.qp_num, b->qp_num);
    EXPECT_EQ(wc.src_qp, a->qp_num);
    EXPECT_EQ(wc.byte_len, 32 + i);
    // Exactly WITH_IMM: the solicited event the CQ remembers for
    // ibv_req_notify_cq(solicited_only) is no flag of the CQE.
    EXPECT_EQ(wc.wc_flags, static_cast<unsigned>(IBV_WC_WITH_IMM)) << wc.wr_id;
    EXPECT_EQ(ntohl(wc.imm_data), 0xc0de0000u + i);
  }
}

// poll_cq writes each CQE straight from the completion's slot in the
// device's CQ (provider.cc PollCq, CompletionQueue::PollEach): every field
// of each entry it returns is written whatever the array held, the flag
// the CQ keeps for solicited-only events never shows in wc_flags, entries
// past the count returned are left as they were, and each completion comes
// once, in order on its QP; a flushed one carries its wr_id, status and
// QP. Also through an extended CQ, where what start_poll read ahead comes
// first, then the device's CQ, in one call.
TEST_F(VerbsApi, PollCqWritesEachCqeWhole) {
  for (const bool extended : {false, true}) {
    SCOPED_TRACE(extended ? "extended CQ" : "plain CQ");
    ibv_cq_ex* cqx = nullptr;
    ibv_cq* plain = cq_;
    if (extended) {
      ibv_cq_init_attr_ex attr{};
      attr.cqe = 256;
      attr.wc_flags = IBV_WC_STANDARD_FLAGS;
      cqx = ibv_create_cq_ex(ctx_, &attr);
      ASSERT_NE(cqx, nullptr);
      cq_ = ibv_cq_ex_to_cq(cqx);
    }
    ibv_qp *a, *b;
    Connect(&a, &b);
    constexpr int kMsgs = 40;  // 80 completions: more than one poll_cq's 64 entries
    // Messages first .. first + n - 1, as ExpectCqe describes them.
    const auto post = [&](int first, int n) {
      for (int i = first; i < first + n; ++i) {
        ASSERT_EQ(PostRecv(b, 100 + i, 0x80000 + 256 * i, 256), 0);
        ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data() + 0x1000), static_cast<uint32_t>(32 + i), mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 1000 + i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = i % 2 == 0 ? IBV_WR_SEND_WITH_IMM : IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
        wr.imm_data = htonl(0xc0de0000u + i);
        wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buf_.data() + 0x40000 + 256 * i);
        wr.wr.rdma.rkey = mr_->rkey;
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(a, &wr, &bad), 0);
      }
    };
    post(0, kMsgs / 2);
    uint64_t next_recv = 100, next_send = 1000;
    const auto take = [&](const ibv_wc& wc) {
      ExpectCqe(wc, a, b);
      uint64_t& next = wc.wr_id >= 1000 ? next_send : next_recv;
      EXPECT_EQ(wc.wr_id, next) << "each completion once, in its queue's order";
      next = wc.wr_id + 1;
    };
    // Time for the progress thread to complete them: the CQ then holds
    // more than one poll takes (start_poll's read-ahead: 32).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (extended) {
      // start_poll reads ahead; the first CQE is read through the extended
      // API, the rest stays for poll_cq.
      ibv_poll_cq_attr pa{};
      int err = ENOENT;
      for (int spins = 0; err == ENOENT && spins < 20'000'000; ++spins) err = ibv_start_poll(cqx, &pa);
      ASSERT_EQ(err, 0);
      ibv_wc wc{};
      wc.wr_id = cqx->wr_id;
      wc.status = cqx->status;
      wc.opcode = ibv_wc_read_opcode(cqx);
      wc.byte_len = ibv_wc_read_byte_len(cqx);
      wc.imm_data = ibv_wc_read_imm_data(cqx);
      wc.qp_num = ibv_wc_read_qp_num(cqx);
      wc.src_qp = ibv_wc_read_src_qp(cqx);
      wc.wc_flags = static_cast<unsigned>(ibv_wc_read_wc_flags(cqx));
      wc.slid = static_cast<uint16_t>(ibv_wc_read_slid(cqx));
      wc.sl = ibv_wc_read_sl(cqx);
      wc.dlid_path_bits = ibv_wc_read_dlid_path_bits(cqx);
      wc.vendor_err = ibv_wc_read_vendor_err(cqx);
      ibv_end_poll(cqx);
      take(wc);
    }
    post(kMsgs / 2, kMsgs / 2);  // with an extended CQ: behind its read-ahead
    size_t total = extended ? 1 : 0;
    constexpr int kEntries = 64;
    for (int spins = 0; total < 2 * kMsgs && spins < 20'000'000; ++spins) {
      ibv_wc wc[kEntries];
      std::memset(wc, 0xa5, sizeof wc);
      const int got = ibv_poll_cq(cq_, kEntries, wc);
      ASSERT_GE(got, 0);
      ASSERT_LE(total + got, 2u * kMsgs);
      for (int i = 0; i < got; ++i) take(wc[i]);
      for (int i = got; i < kEntries; ++i) {
        const auto* p = reinterpret_cast<const uint8_t*>(&wc[i]);
        ASSERT_TRUE(std::all_of(p, p + sizeof wc[i], [](uint8_t v) { return v == 0xa5; }))
            << "entry " << i << " past the " << got << " returned was written";
      }
      total += got;
    }
    EXPECT_EQ(total, 2u * kMsgs);
    EXPECT_EQ(next_recv, 100u + kMsgs);
    EXPECT_EQ(next_send, 1000u + kMsgs);
    // A flushed receive: wr_id, status, qp_num and vendor_err are its CQE.
    ASSERT_EQ(PostRecv(b, 999, 0x80000, 64), 0);
    ibv_qp_attr err{};
    err.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b, &err, IBV_QP_STATE), 0);
    const auto flushed = Poll(1);
    ASSERT_EQ(flushed.size(), 1u);
    EXPECT_EQ(flushed[0].wr_id, 999u);
    EXPECT_EQ(flushed[0].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(flushed[0].qp_num, b->qp_num);
    EXPECT_EQ(flushed[0].vendor_err, 0u);
    for (ibv_qp* q : qps_) ibv_destroy_qp(q);
    qps_.clear();
    if (extended) {
      EXPECT_EQ(ibv_destroy_cq(cq_), 0);
      cq_ = plain;
    }
  }
}

TEST_F(VerbsApi, EceVendorIdAndOptions) {
  // What librdmacm does with ECE (doc/cm.md): it queries the new QP's, and
  // on the passive side sets the peer's, keeping the options left.
  ibv_qp* q = NewQp();
  ASSERT_NE(q, nullptr);
  ibv_ece ece{};
  ASSERT_EQ(ibv_query_ece(q, &ece), 0);
  EXPECT_EQ(ece.vendor_id, 0x64726fu);  // the device's vendor_id
  // Selective repeat (1024-PSN SACK) and the four congestion-control
  // algorithms (doc/cc.md "Per QP"): the options droce defines.
  EXPECT_EQ(ece.options, 0x3eu);
  ibv_ece asked{0x64726f, 0xffffffff, 0};
  ASSERT_EQ(ibv_set_ece(q, &asked), 0);
  EXPECT_EQ(asked.options, 0x3eu);  // options droce does not define are reduced away
  ibv_ece other{0x02c9, 1, 0};   // another vendor's
  EXPECT_EQ(ibv_set_ece(q, &other), EINVAL);
  ibv_ece mask{0x64726f, 0, 1};
  EXPECT_EQ(ibv_set_ece(q, &mask), EINVAL);
}

}  // namespace
}  // namespace droce::verbs
