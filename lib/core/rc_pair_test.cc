// Two devices on an in-memory wire, exchanging every RC opcode under loss,
// reordering, duplication and corruption. Every WR must complete exactly once
// with the right status and the data must match byte for byte.
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using queue::Completion;
using queue::WcStatus;
using transport::SendWr;
using transport::WrOpcode;

struct Scenario {
  const char* name;
  Impairments imp;
};

// post_send's doorbell (Device::Doorbell) sends the posting QP's packets at
// once and does nothing else: a frame waiting on the receive side stays
// there, for the poll loop.
TEST(Doorbell, TransmitsThePostingQpAndReceivesNothing) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 64, 1);
  Fill(b.mem, 0, 64, 2);
  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(1, WrOpcode::kRdmaWrite, b, 0, 64, a, 4096)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 1u);  // b's WRITE is on the wire to a
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().tx_packets, 1u);
  EXPECT_EQ(a.dev->counters().rx_packets, 0u);  // b's WRITE waits for a's poll loop
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 0u);  // nothing more to send
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].wr_id, 2u);
  EXPECT_EQ(cb[0].wr_id, 1u);
  EXPECT_EQ(std::memcmp(a.mem.data() + 4096, b.mem.data(), 64), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
}

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
      if (needs_recv) {
        ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(1000 + id, b, dst, len + 16)), 0);
      }
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
        if (op != WrOpcode::kSend) {
          EXPECT_EQ(cb[0].imm_or_inv, wr.imm_data);
        }
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
  if (scenario.imp.drop > 0 || scenario.imp.corrupt > 0) {
    EXPECT_GT(ac.retransmitted_packets, 0u);
  }
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
