// Two devices on an in-memory wire, exchanging every RC opcode under loss,
// reordering, duplication and corruption. Every WR must complete exactly once
// with the right status and the data must match byte for byte.
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using transport::QpAttr;
using transport::SendWr;
using transport::RecvWr;
using transport::WrOpcode;
using queue::Completion;
using queue::WcStatus;

// A lossy link for tests: frames sent by one end arrive at the other after
// optional drop / duplicate / reorder / corruption, all from one seed.
struct Impairments {
  double drop = 0, duplicate = 0, reorder = 0, corrupt = 0;
};

class TestLink {
 public:
  class End : public pktio::BurstIo {
   public:
    End(TestLink* link, int side) : link_(link), side_(side) {}
    uint16_t RxBurst(pktio::Frame* f, uint16_t n) override {
      auto& q = link_->queues_[side_];
      uint16_t i = 0;
      for (; i < n && !q.empty(); ++i) {
        auto* buf = new std::vector<uint8_t>(std::move(q.front()));
        q.pop_front();
        f[i] = {buf->data(), static_cast<uint32_t>(buf->size()), static_cast<uint32_t>(buf->size()), buf};
      }
      return i;
    }
    uint16_t AllocTx(pktio::Frame* f, uint16_t n) override {
      for (uint16_t i = 0; i < n; ++i) {
        auto* buf = new std::vector<uint8_t>(pktio::kMaxFrameBytes);
        f[i] = {buf->data(), 0, pktio::kMaxFrameBytes, buf};
      }
      return n;
    }
    uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
      for (uint16_t i = 0; i < n; ++i) {
        auto* buf = static_cast<std::vector<uint8_t>*>(f[i].handle);
        buf->resize(f[i].len);
        link_->Deliver(1 - side_, std::move(*buf));
        delete buf;
      }
      return n;
    }
    void Release(pktio::Frame* f, uint16_t n) override {
      for (uint16_t i = 0; i < n; ++i) delete static_cast<std::vector<uint8_t>*>(f[i].handle);
    }

   private:
    TestLink* link_;
    int side_;
  };

  TestLink(Impairments imp, uint32_t seed) : imp_(imp), rng_(seed), ends_{End(this, 0), End(this, 1)} {}
  End& end(int i) { return ends_[i]; }
  uint64_t delivered = 0, dropped = 0;

 private:
  void Deliver(int to, std::vector<uint8_t> frame) {
    std::uniform_real_distribution<double> u(0, 1);
    if (u(rng_) < imp_.drop) {
      ++dropped;
      return;
    }
    if (u(rng_) < imp_.corrupt) frame[rng_() % frame.size()] ^= 1 << (rng_() % 8);
    auto& q = queues_[to];
    if (u(rng_) < imp_.duplicate) q.push_back(frame);
    if (u(rng_) < imp_.reorder && !q.empty()) {
      q.insert(q.end() - 1, std::move(frame));  // overtakes the previous frame
    } else {
      q.push_back(std::move(frame));
    }
    ++delivered;
  }

  Impairments imp_;
  std::mt19937 rng_;
  std::deque<std::vector<uint8_t>> queues_[2];
  End ends_[2];
};

struct Side {
  std::unique_ptr<Device> dev;
  uint32_t pd = 0, cq = 0, qpn = 0;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
};

class RcPair {
 public:
  RcPair(Impairments imp, uint32_t seed, uint32_t mtu = 1024, uint32_t mem_bytes = 4 << 20,
         uint32_t start_psn_a = 0, uint32_t start_psn_b = 0, uint8_t timeout = 8,
         uint8_t retry = 7, uint8_t rnr_retry = 7)
      : link_(imp, seed) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      s_[i].dev = std::make_unique<Device>(cfg, &link_.end(i));
      Side& s = s_[i];
      s.pd = s.dev->AllocPd();
      s.cq = *s.dev->CreateCq(4096);
      QpInitAttr init;
      init.pd = s.pd;
      init.send_cq = init.recv_cq = s.cq;
      init.caps.max_send_wr = 1024;
      init.caps.max_recv_wr = 1024;
      s.qpn = *s.dev->CreateQp(init);
      s.mem.resize(mem_bytes);
      s.keys = *s.dev->RegMr(s.pd, s.mem.data(), s.mem.size(), reinterpret_cast<uint64_t>(s.mem.data()),
                             mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
    }
    const uint32_t psn[2] = {start_psn_a, start_psn_b};
    for (int i = 0; i < 2; ++i) {
      Side& s = s_[i];
      Side& peer = s_[1 - i];
      QpAttr a;
      a.qp_state = transport::QpState::kInit;
      a.qp_access_flags = mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic;
      EXPECT_TRUE(s.dev->ModifyQp(s.qpn, a, transport::kAttrState | transport::kAttrPkeyIndex |
                                               transport::kAttrPort | transport::kAttrAccessFlags).ok());
      a.qp_state = transport::QpState::kRtr;
      a.ah.dgid = peer.dev->gids()[1];
      a.ah.sgid_index = 1;
      a.ah.dmac = peer.dev->config().mac;
      a.ah.dmac_valid = true;
      a.path_mtu = mtu;
      a.dest_qp_num = peer.qpn;
      a.rq_psn = psn[1 - i];
      a.max_dest_rd_atomic = 16;
      a.min_rnr_timer = 1;
      auto st = s.dev->ModifyQp(s.qpn, a, transport::kAttrState | transport::kAttrAv |
                                              transport::kAttrPathMtu | transport::kAttrDestQpn |
                                              transport::kAttrRqPsn | transport::kAttrMaxDestRdAtomic |
                                              transport::kAttrMinRnrTimer);
      EXPECT_TRUE(st.ok()) << st;
      a.qp_state = transport::QpState::kRts;
      a.sq_psn = psn[i];
      a.timeout = timeout;
      a.retry_cnt = retry;
      a.rnr_retry = rnr_retry;
      a.max_rd_atomic = 16;
      st = s.dev->ModifyQp(s.qpn, a, transport::kAttrState | transport::kAttrSqPsn |
                                         transport::kAttrTimeout | transport::kAttrRetryCnt |
                                         transport::kAttrRnrRetry | transport::kAttrMaxQpRdAtomic);
      EXPECT_TRUE(st.ok()) << st;
    }
  }

  Side& a() { return s_[0]; }
  Side& b() { return s_[1]; }
  TestLink& link() { return link_; }
  uint64_t now() const { return now_; }

  // Advances virtual time in 1 us steps, polling both devices, until `want`
  // completions have been collected from each side's CQ (or time runs out).
  bool Run(std::vector<Completion>* ca, size_t want_a, std::vector<Completion>* cb, size_t want_b,
           uint64_t max_ns = 5'000'000'000ull) {
    const uint64_t end = now_ + max_ns;
    Completion buf[64];
    while (now_ < end) {
      const uint32_t w = s_[0].dev->Poll(now_) + s_[1].dev->Poll(now_);
      for (uint32_t k; (k = s_[0].dev->PollCq(s_[0].cq, buf, 64)) > 0;) ca->insert(ca->end(), buf, buf + k);
      for (uint32_t k; (k = s_[1].dev->PollCq(s_[1].cq, buf, 64)) > 0;) cb->insert(cb->end(), buf, buf + k);
      if (ca->size() >= want_a && cb->size() >= want_b) return true;
      now_ += w > 0 ? 1000 : 50'000;  // jump ahead when the wire is idle
    }
    return false;
  }

 private:
  TestLink link_;
  Side s_[2];
  uint64_t now_ = 1'000'000;
};

SendWr MakeWr(uint64_t id, WrOpcode op, Side& local, uint64_t off, uint32_t len, Side& remote,
              uint64_t roff) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(local.mem.data()) + off, len, local.keys.lkey};
  wr.remote_addr = reinterpret_cast<uint64_t>(remote.mem.data()) + roff;
  wr.rkey = remote.keys.rkey;
  return wr;
}

RecvWr MakeRecv(uint64_t id, Side& s, uint64_t off, uint32_t len) {
  RecvWr wr;
  wr.wr_id = id;
  wr.num_sge = 1;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(s.mem.data()) + off, len, s.keys.lkey};
  return wr;
}

void Fill(std::vector<uint8_t>& m, uint64_t off, uint32_t len, uint32_t seed) {
  for (uint32_t i = 0; i < len; ++i) m[off + i] = static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 8)) ^ seed);
}

struct Scenario {
  const char* name;
  Impairments imp;
};

class RcMatrix : public ::testing::TestWithParam<std::tuple<Scenario, uint32_t>> {};

// Every opcode and size: data verified byte for byte, each WR completed once.
TEST_P(RcMatrix, AllOpcodesAllSizes) {
  const auto [scenario, mtu] = GetParam();
  // Start near the top of the PSN space so the run crosses 2^24.
  RcPair pair(scenario.imp, 1234, mtu, 8 << 20, 0xFFFFF0, 0xFFFFE0);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t sizes[] = {0, 1, mtu - 1, mtu, mtu + 1, 1 << 20};
  const WrOpcode ops[] = {WrOpcode::kSend, WrOpcode::kSendWithImm, WrOpcode::kRdmaWrite,
                          WrOpcode::kRdmaWriteWithImm, WrOpcode::kRdmaRead};
  uint64_t id = 0;
  for (WrOpcode op : ops) {
    for (uint32_t len : sizes) {
      ++id;
      const uint64_t src = 0, dst = 2 << 20;
      Fill(a.mem, src, len, static_cast<uint32_t>(id));
      Fill(b.mem, src, len, static_cast<uint32_t>(id) + 99);
      std::memset(a.mem.data() + dst, 0, len + 16);
      std::memset(b.mem.data() + dst, 0, len + 16);
      const bool needs_recv = op == WrOpcode::kSend || op == WrOpcode::kSendWithImm ||
                              op == WrOpcode::kRdmaWriteWithImm;
      if (needs_recv) ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(1000 + id, b, dst, len + 16)), 0);
      SendWr wr = op == WrOpcode::kRdmaRead ? MakeWr(id, op, a, dst, len, b, src)
                                            : MakeWr(id, op, a, src, len, b, dst);
      wr.imm_data = 0xA0000000u + static_cast<uint32_t>(id);
      ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
      std::vector<Completion> ca, cb;
      ASSERT_TRUE(pair.Run(&ca, 1, &cb, needs_recv ? 1 : 0))
          << scenario.name << " op " << int(op) << " len " << len;
      ASSERT_EQ(ca.size(), 1u);
      EXPECT_EQ(ca[0].wr_id, id);
      EXPECT_EQ(ca[0].status, WcStatus::kSuccess) << queue::WcStatusName(ca[0].status);
      if (needs_recv) {
        ASSERT_EQ(cb.size(), 1u);
        EXPECT_EQ(cb[0].wr_id, 1000 + id);
        EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
        EXPECT_EQ(cb[0].byte_len, len);
        EXPECT_EQ(cb[0].src_qp, a.qpn);
        if (op != WrOpcode::kSend) EXPECT_EQ(cb[0].imm_or_inv, wr.imm_data);
        EXPECT_EQ(cb[0].opcode, op == WrOpcode::kRdmaWriteWithImm ? queue::WcOpcode::kRecvRdmaWithImm
                                                                   : queue::WcOpcode::kRecv);
      } else {
        EXPECT_TRUE(cb.empty());
      }
      if (op == WrOpcode::kRdmaRead) {
        ASSERT_EQ(std::memcmp(a.mem.data() + dst, b.mem.data() + src, len), 0) << "read len " << len;
        EXPECT_EQ(a.mem[dst + len], 0) << "wrote past the end";
      } else {
        ASSERT_EQ(std::memcmp(b.mem.data() + dst, a.mem.data() + src, len), 0) << "len " << len;
        EXPECT_EQ(b.mem[dst + len], 0) << "wrote past the end";
      }
    }
  }
  // Atomics.
  uint64_t* target = reinterpret_cast<uint64_t*>(b.mem.data() + 4096);
  *target = 5;
  SendWr faa = MakeWr(++id, WrOpcode::kAtomicFetchAndAdd, a, 0, 8, b, 4096);
  faa.compare_add = 10;
  ASSERT_EQ(a.dev->PostSend(a.qpn, faa), 0);
  SendWr cas = MakeWr(++id, WrOpcode::kAtomicCmpAndSwp, a, 8, 8, b, 4096);
  cas.compare_add = 15;
  cas.swap = 77;
  ASSERT_EQ(a.dev->PostSend(a.qpn, cas), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 0));
  ASSERT_EQ(ca.size(), 2u);
  // Impaired runs must actually have exercised recovery.
  const auto& ac = a.dev->qp(a.qpn)->counters();
  if (scenario.imp.drop > 0 || scenario.imp.corrupt > 0) EXPECT_GT(ac.retransmitted_packets, 0u);
  if (scenario.imp.duplicate > 0) {
    EXPECT_GT(ac.duplicates_received + b.dev->qp(b.qpn)->counters().duplicates_received, 0u);
  }
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ca[1].status, WcStatus::kSuccess);
  uint64_t v0, v1;
  std::memcpy(&v0, a.mem.data(), 8);
  std::memcpy(&v1, a.mem.data() + 8, 8);
  EXPECT_EQ(v0, 5u);
  EXPECT_EQ(v1, 15u);
  EXPECT_EQ(*target, 77u);  // exactly once, despite duplicates and retries
}

const Scenario kScenarios[] = {
    {"clean", {}},
    {"loss1", {0.01, 0, 0, 0}},
    {"loss5", {0.05, 0, 0, 0}},
    {"reorder", {0, 0, 0.05, 0}},
    {"duplicate", {0, 0.05, 0, 0}},
    {"corrupt", {0, 0, 0, 0.02}},
    {"everything", {0.02, 0.02, 0.02, 0.01}},
};

INSTANTIATE_TEST_SUITE_P(Impaired, RcMatrix,
                         ::testing::Combine(::testing::ValuesIn(kScenarios),
                                            ::testing::Values(1024u, 4096u)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).name) + "_mtu" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace droce::core
