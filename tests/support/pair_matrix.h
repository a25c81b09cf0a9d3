// The impaired-wire matrix that the RC pair tests run in both retransmission
// modes: go-back-N (lib/core/rc_pair_test.cc) and selective repeat
// (lib/core/sr_pair_test.cc, doc/transport.md "Selective repeat"). Every
// opcode and size, one WR at a time, under loss, reordering, duplication and
// corruption: data byte for byte, each WR completed exactly once with the
// right status, atomics applied once, and only the mode's opcodes on the wire.
#ifndef DROCE_TESTS_SUPPORT_PAIR_MATRIX_H_
#define DROCE_TESTS_SUPPORT_PAIR_MATRIX_H_
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/rc_pair_fixture.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace droce::core::testing {

struct Scenario {
  const char* name;
  Impairments imp;
};

// The impairments the matrices run under (both directions of the link).
inline constexpr Scenario kImpairedScenarios[] = {
    {"clean", {}},
    {"loss1", {0.01, 0, 0, 0}},
    {"loss5", {0.05, 0, 0, 0}},
    {"reorder", {0, 0, 0.05, 0}},
    {"duplicate", {0, 0.05, 0, 0}},
    {"corrupt", {0, 0, 0, 0.02}},
    {"everything", {0.02, 0.02, 0.02, 0.01}},
};

// A matrix's parameter: a scenario at an MTU.
using MatrixParam = std::tuple<Scenario, uint32_t>;

// The matrix's parameter space and test names ("loss1_mtu1024", ...), for
// INSTANTIATE_TEST_SUITE_P(Impaired, Suite, MatrixValues(), MatrixName).
inline auto MatrixValues() {
  return ::testing::Combine(::testing::ValuesIn(kImpairedScenarios), ::testing::Values(1024u, 4096u));
}
inline std::string MatrixName(const ::testing::TestParamInfo<MatrixParam>& info) {
  return std::string(std::get<0>(info.param).name) + "_mtu" + std::to_string(std::get<1>(info.param));
}

// Counts the opcodes that cross the wire (a MemWire tap), of the frames the
// receiver would take: the tap sees a frame after the wire's impairments, and
// a bit the corruption flips in the opcode makes another opcode of a frame the
// ICRC check then drops.
struct OpcodeTap {
  std::map<uint8_t, uint64_t> count;
  static void Tap(void* ctx, int, const uint8_t* data, uint32_t len) {
    const wire::ParsedPacket p = wire::ParseAndVerify(data, len);
    if (p.ok()) ++static_cast<OpcodeTap*>(ctx)->count[p.opcode];
  }
  uint64_t Sr() const {  // droce's selective-repeat opcodes
    uint64_t n = 0;
    for (const auto& [op, k] : count) n += (wire::OpInfo(op).roles & wire::kRoleSr) ? k : 0;
    return n;
  }
  uint64_t IbtaSendWrite() const {  // IBTA RC SEND/WRITE opcodes
    uint64_t n = 0;
    for (const auto& [op, k] : count) {
      const auto& info = wire::OpInfo(op);
      if (!(info.roles & wire::kRoleSr) && (info.roles & (wire::kRoleSend | wire::kRoleWrite))) n += k;
    }
    return n;
  }
};

// An RC pair whose PSNs start near the top of the PSN space (so runs cross
// 2^24), 8 MiB of memory a side, selective repeat on each end as asked.
inline RcPair MatrixPair(Impairments imp, uint32_t seed, uint32_t mtu, bool sr_a, bool sr_b,
                         uint8_t timeout = 8, const cc::DcqcnParams* dcqcn = nullptr) {
  return RcPair(imp, seed, mtu, 8 << 20, 0xFFFFF0, 0xFFFFE0, timeout, 7, 7, transport::QpType::kRc, 4000,
                dcqcn, 16384, sr_a, sr_b);
}

// Every opcode and size, one WR at a time, with selective repeat on both
// ends or on neither: data verified byte for byte, each WR completed once.
inline void AllOpcodesAllSizes(const Scenario& scenario, uint32_t mtu, bool selective_repeat) {
  RcPair pair = MatrixPair(scenario.imp, 1234, mtu, selective_repeat, selective_repeat);
  OpcodeTap tap;
  pair.link().set_tap(&OpcodeTap::Tap, &tap);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->qp(a.qpn)->selective_repeat(), selective_repeat);
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
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ca[1].status, WcStatus::kSuccess);
  uint64_t v0, v1;
  std::memcpy(&v0, a.mem.data(), 8);
  std::memcpy(&v1, a.mem.data() + 8, 8);
  EXPECT_EQ(v0, 5u);
  EXPECT_EQ(v1, 15u);
  EXPECT_EQ(*target, 77u);  // exactly once, despite duplicates and retries
  // The mode's SEND/WRITE opcodes on the wire, and only those.
  if (selective_repeat) {
    EXPECT_GT(tap.Sr(), 0u);
    EXPECT_EQ(tap.IbtaSendWrite(), 0u);
  } else {
    EXPECT_EQ(tap.Sr(), 0u);
    EXPECT_GT(tap.IbtaSendWrite(), 0u);
  }
  // Impaired runs must actually have exercised recovery.
  const auto& ac = a.dev->qp(a.qpn)->counters();
  if (scenario.imp.drop > 0 || scenario.imp.corrupt > 0) {
    EXPECT_GT(ac.retransmitted_packets, 0u);
  }
  if (scenario.imp.duplicate > 0) {
    EXPECT_GT(ac.duplicates_received + b.dev->qp(b.qpn)->counters().duplicates_received, 0u);
  }
}

}  // namespace droce::core::testing

#endif  // DROCE_TESTS_SUPPORT_PAIR_MATRIX_H_
