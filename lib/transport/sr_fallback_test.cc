// Selective repeat's fallback (doc/transport.md "Selective repeat",
// "Fallback"): when only one end of a connection enabled selective repeat
// by device setting, the pair ends up in go-back-N and every WR completes,
// whichever end is the requester: the SR end falls back when it receives an
// IBTA SEND/WRITE, or when its SR SEND/WRITE packets went unanswered for a
// whole IBTA timeout. After the fallback the wire is plain IBTA.
#include <map>

#include "wire/fields.h"

#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using queue::Completion;
using queue::WcStatus;
using transport::SendWr;
using transport::WrOpcode;

// Counts, per direction, the frames put on the wire after the SR end fell
// back (the tap runs when a frame enters the wire, i.e. when it is sent, as
// long as the link does not reorder).
struct FallbackTap {
  const transport::Qp* sr_qp = nullptr;
  uint64_t sr_opcodes_after = 0;     // droce's SR opcodes (data, SACK) after the fallback
  uint64_t ibta_data_after = 0;      // IBTA SEND/WRITE after the fallback
  uint64_t sr_opcodes_before = 0;
  static void Tap(void* ctx, int, const uint8_t* data, uint32_t len) {
    auto* t = static_cast<FallbackTap*>(ctx);
    const wire::ParsedPacket p = wire::ParsePacket(data, len);
    if (!p.ok()) return;
    const auto& info = wire::OpInfo(p.opcode);
    const bool sr = (info.roles & wire::kRoleSr) != 0;
    if (t->sr_qp->selective_repeat()) {
      t->sr_opcodes_before += sr;
      return;
    }
    t->sr_opcodes_after += sr;
    if (!sr && (info.roles & (wire::kRoleSend | wire::kRoleWrite))) ++t->ibta_data_after;
  }
};

struct Case {
  bool sr_a, sr_b;
  bool a_requests;  // a posts the WRs (else b)
  double drop;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& i) {
  const Case& c = i.param;
  return std::string(c.sr_a ? "SrA" : "GbnA") + (c.sr_b ? "SrB" : "GbnB") +
         (c.a_requests ? "_ARequests" : "_BRequests") + "_drop" + std::to_string(int(c.drop * 1000)) + "permille";
}

class SrFallback : public ::testing::TestWithParam<Case> {};

// Every opcode and a few sizes, many WRs in flight, with loss: data byte for
// byte, every WR completed once, in posting order, on both ends.
TEST_P(SrFallback, OneSideOnFallsBackToGoBackN) {
  const Case k = GetParam();
  RcPair pair(Impairments{k.drop, 0, 0, 0}, 4242, 1024, 8 << 20, 0x100, 0xFFFF00, /*timeout=*/8, 7, 7,
              transport::QpType::kRc, 4000, nullptr, 16384, k.sr_a, k.sr_b);
  Side& req = k.a_requests ? pair.a() : pair.b();
  Side& resp = k.a_requests ? pair.b() : pair.a();
  Side& sr_side = k.sr_a ? pair.a() : pair.b();
  ASSERT_TRUE(sr_side.dev->qp(sr_side.qpn)->selective_repeat());
  FallbackTap tap;
  tap.sr_qp = sr_side.dev->qp(sr_side.qpn);
  pair.link().set_tap(&FallbackTap::Tap, &tap);

  const WrOpcode ops[] = {WrOpcode::kRdmaWrite, WrOpcode::kSend, WrOpcode::kRdmaRead,
                          WrOpcode::kSendWithImm, WrOpcode::kAtomicFetchAndAdd,
                          WrOpcode::kRdmaWriteWithImm, WrOpcode::kAtomicCmpAndSwp};
  const uint32_t sizes[] = {1, 1024, 5000, 65536};
  constexpr uint64_t kAtomicOff = 7 << 20;
  uint64_t* target = reinterpret_cast<uint64_t*>(resp.mem.data() + kAtomicOff);
  *target = 100;
  uint64_t expect_target = 100;
  struct Check {
    WrOpcode op;
    uint64_t src, dst;  // requester's / responder's offsets (READ: from dst into src)
    uint32_t len;
    uint64_t atomic_before;
  };
  std::vector<Check> checks;
  std::vector<uint64_t> recv_ids;
  uint64_t id = 0, off = 0;
  for (int round = 0; round < 2; ++round) {
    for (WrOpcode op : ops) {
      for (uint32_t len : sizes) {
        const bool atomic = op == WrOpcode::kAtomicFetchAndAdd || op == WrOpcode::kAtomicCmpAndSwp;
        if (atomic && len != 1) continue;
        const uint32_t n = atomic ? 8 : len;
        ++id;
        const uint64_t src = off, dst = off;
        off += (n + 4095) / 4096 * 4096 + 4096;
        Fill(req.mem, src, n, static_cast<uint32_t>(id));
        Fill(resp.mem, dst, n, static_cast<uint32_t>(id) * 7 + 1);
        const bool needs_recv = op == WrOpcode::kSend || op == WrOpcode::kSendWithImm ||
                                op == WrOpcode::kRdmaWriteWithImm;
        if (needs_recv) {
          ASSERT_EQ(resp.dev->PostRecv(resp.qpn, MakeRecv(1000 + id, resp, dst, n)), 0);
          recv_ids.push_back(1000 + id);
        }
        SendWr wr = atomic ? MakeWr(id, op, req, src, 8, resp, kAtomicOff)
                           : MakeWr(id, op, req, src, n, resp, dst);
        wr.imm_data = 0xB0000000u + static_cast<uint32_t>(id);
        uint64_t before = 0;
        if (op == WrOpcode::kAtomicFetchAndAdd) {
          wr.compare_add = 3;
          before = expect_target;
          expect_target += 3;
        } else if (op == WrOpcode::kAtomicCmpAndSwp) {
          wr.compare_add = expect_target;
          wr.swap = expect_target * 2;
          before = expect_target;
          expect_target *= 2;
        }
        ASSERT_EQ(req.dev->PostSend(req.qpn, wr), 0);
        checks.push_back({op, src, dst, n, before});
      }
    }
  }
  std::vector<Completion> creq, cresp;
  std::vector<Completion>* ca = k.a_requests ? &creq : &cresp;
  std::vector<Completion>* cb = k.a_requests ? &cresp : &creq;
  const size_t want_a = k.a_requests ? checks.size() : recv_ids.size();
  const size_t want_b = k.a_requests ? recv_ids.size() : checks.size();
  ASSERT_TRUE(pair.Run(ca, want_a, cb, want_b, 20'000'000'000ull))
      << "requester completions " << creq.size() << "/" << checks.size() << ", receives " << cresp.size() << "/"
      << recv_ids.size();
  ASSERT_EQ(creq.size(), checks.size());
  for (size_t i = 0; i < checks.size(); ++i) {
    EXPECT_EQ(creq[i].wr_id, i + 1) << "in posting order";
    EXPECT_EQ(creq[i].status, WcStatus::kSuccess) << queue::WcStatusName(creq[i].status) << " wr " << i + 1;
  }
  ASSERT_EQ(cresp.size(), recv_ids.size());
  for (size_t i = 0; i < recv_ids.size(); ++i) {
    EXPECT_EQ(cresp[i].wr_id, recv_ids[i]) << "receives in order";
    EXPECT_EQ(cresp[i].status, WcStatus::kSuccess);
  }
  for (size_t i = 0; i < checks.size(); ++i) {
    const Check& c = checks[i];
    if (c.op == WrOpcode::kAtomicFetchAndAdd || c.op == WrOpcode::kAtomicCmpAndSwp) {
      uint64_t got;
      std::memcpy(&got, req.mem.data() + c.src, 8);
      EXPECT_EQ(got, c.atomic_before) << "wr " << i + 1;
    } else if (c.op == WrOpcode::kRdmaRead) {
      EXPECT_EQ(std::memcmp(req.mem.data() + c.src, resp.mem.data() + c.dst, c.len), 0) << "READ wr " << i + 1;
    } else {
      EXPECT_EQ(std::memcmp(resp.mem.data() + c.dst, req.mem.data() + c.src, c.len), 0) << "wr " << i + 1;
    }
  }
  EXPECT_EQ(*target, expect_target) << "each atomic executed once";
  // The SR end fell back once; the pair speaks IBTA from then on.
  const transport::Qp* sq = sr_side.dev->qp(sr_side.qpn);
  EXPECT_FALSE(sq->selective_repeat());
  EXPECT_EQ(sq->counters().sr_fallbacks, 1u);
  EXPECT_EQ(tap.sr_opcodes_after, 0u) << "an SR opcode on the wire after the fallback";
  EXPECT_GT(tap.ibta_data_after, 0u);
  // The other end never used selective repeat.
  Side& other = k.sr_a ? pair.b() : pair.a();
  EXPECT_EQ(other.dev->qp(other.qpn)->counters().sr_fallbacks, 0u);
  if (k.a_requests == k.sr_a) {
    // The SR end requested: its SR packets went unanswered (dropped by the
    // peer, counted) until the fallback.
    EXPECT_GT(tap.sr_opcodes_before, 0u);
    EXPECT_GT(other.dev->qp(other.qpn)->counters().sr_dropped, 0u);
  } else {
    // The SR end only answered: the first IBTA SEND/WRITE switched it, and
    // it never answered with a SACK.
    EXPECT_EQ(sq->counters().sr_sacks_sent, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, SrFallback,
    ::testing::Values(Case{true, false, true, 0}, Case{true, false, false, 0}, Case{false, true, true, 0},
                      Case{false, true, false, 0}, Case{true, false, true, 0.02}, Case{true, false, false, 0.02},
                      Case{false, true, true, 0.02}, Case{false, true, false, 0.02}),
    CaseName);

// Both ends on (the ECE case): nothing falls back, even when every packet
// of the first burst is lost for longer than a short RTO.
TEST(SrFallbackNot, TwoSrEndsNeverFallBack) {
  RcPair pair(Impairments{0.05, 0, 0, 0}, 99, 1024, 8 << 20, 0, 0, /*timeout=*/8, 7, 7, transport::QpType::kRc, 4000,
              nullptr, 16384, true, true);
  Side& a = pair.a();
  Side& b = pair.b();
  sim::Impairments all;
  all.drop = 1.0;
  pair.link().set_impairments(0, all);
  for (uint32_t i = 0; i < 8; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
  }
  std::vector<Completion> ca, cb;
  pair.Run(&ca, 1, &cb, 0, 500'000);  // 0.5 ms of total loss (the IBTA timeout is 1 ms)
  sim::Impairments lossy;
  lossy.drop = 0.05;
  pair.link().set_impairments(0, lossy);
  ASSERT_TRUE(pair.Run(&ca, 8, &cb, 0));
  for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 8 * 65536), 0);
  EXPECT_TRUE(a.dev->qp(a.qpn)->selective_repeat());
  EXPECT_TRUE(b.dev->qp(b.qpn)->selective_repeat());
  EXPECT_EQ(a.dev->qp(a.qpn)->counters().sr_fallbacks, 0u);
  EXPECT_EQ(b.dev->qp(b.qpn)->counters().sr_fallbacks, 0u);
}

// Keeps the first SR WRITE frame a sends to b.
struct FirstSrWrite {
  std::vector<uint8_t> frame;
  static void Tap(void* ctx, int from, const uint8_t* data, uint32_t len) {
    auto* t = static_cast<FirstSrWrite*>(ctx);
    if (from != 0 || !t->frame.empty()) return;
    const wire::ParsedPacket p = wire::ParsePacket(data, len);
    if (p.ok() && (p.op().roles & wire::kRoleSr) && (p.op().roles & wire::kRoleWrite)) t->frame.assign(data, data + len);
  }
};

// An IBTA WRITE for b's QP that is not at b's expected PSN (a stale or
// spoofed packet with the QP's number) says nothing of the peer: an SR
// responder does not fall back for it (it used to, on any IBTA SEND/WRITE,
// before the PSN check). It acknowledges an old one and drops one ahead;
// selective repeat goes on.
TEST(SrFallbackNot, AnIbtaWriteAwayFromTheExpectedPsnDoesNotFallBack) {
  for (int32_t shift : {-200, 5}) {
    RcPair pair(Impairments{0, 0, 0, 0}, 7, 1024, 8 << 20, 0, 0, /*timeout=*/8, 7, 7, transport::QpType::kRc,
                4000, nullptr, 16384, true, true);
    Side& a = pair.a();
    Side& b = pair.b();
    FirstSrWrite first;
    pair.link().set_tap(&FirstSrWrite::Tap, &first);
    Fill(a.mem, 0, 16 * 65536, 9);
    for (uint32_t i = 0; i < 8; ++i) {
      ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
    }
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 8, &cb, 0));
    ASSERT_FALSE(first.frame.empty());
    // The same bytes as an IBTA RDMA WRITE ONLY at a PSN away from b's expected one.
    const wire::ParsedPacket p = wire::ParsePacket(first.frame.data(), static_cast<uint32_t>(first.frame.size()));
    wire::PacketFields f = wire::DecodeFields(first.frame.data(), p);
    f.bth.opcode = wire::kRcWriteOnly;
    f.bth.psn = wire::PsnAdd(b.dev->qp(b.qpn)->expected_psn(), shift);
    f.bth.ack_req = true;
    f.reth_va = f.sreth_va + f.sreth_offset;
    f.reth_rkey = f.sreth_rkey;
    f.reth_length = static_cast<uint32_t>(f.payload.size());
    std::vector<uint8_t> out(pktio::kMaxFrameBytes);
    auto n = wire::SerializeFields(f, out.data(), static_cast<uint32_t>(out.size()));
    ASSERT_TRUE(n.ok());
    pktio::Frame fr;
    ASSERT_EQ(pair.link().end(0).AllocTx(&fr, 1), 1);
    std::memcpy(fr.data, out.data(), *n);
    fr.len = *n;
    ASSERT_EQ(pair.link().end(0).TxBurst(&fr, 1), 1);
    const transport::QpCounters before = b.dev->qp(b.qpn)->counters();
    for (uint32_t i = 8; i < 16; ++i) {
      ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
    }
    ASSERT_TRUE(pair.Run(&ca, 16, &cb, 0)) << shift;
    for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 16 * 65536), 0);
    const transport::QpCounters& after = b.dev->qp(b.qpn)->counters();
    EXPECT_EQ(after.sr_fallbacks, 0u) << shift;
    EXPECT_TRUE(b.dev->qp(b.qpn)->selective_repeat()) << shift;
    EXPECT_TRUE(a.dev->qp(a.qpn)->selective_repeat()) << shift;
    if (shift < 0) {
      EXPECT_EQ(after.duplicates_received - before.duplicates_received, 1u);
    } else {
      EXPECT_EQ(after.out_of_sequence - before.out_of_sequence, 1u);
    }
  }
}


// Two SR ends; the requester's first burst reaches the responder but no
// answer comes back for a whole IBTA timeout (a stalled host at connection
// start), so the requester falls back to go-back-N and resends as IBTA from
// the message's first PSN while the responder's expected PSN is inside the
// message (it placed the first burst in order). The responder falls back
// on the IBTA packet at its expected PSN, a MIDDLE: it must continue the
// message it was receiving (IBTA 9.7.5.1.3 accepts a MIDDLE/LAST only in a
// message in progress). It used to answer NAK invalid request (opcode
// sequence) and the WR completed REM_INV_REQ_ERR (the fabric's rare
// remote_invalid_request_error, doc/loss-experiment.md).
TEST(SrFallbackMidMessage, ResponderContinuesTheMessageItWasReceiving) {
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kSend, WrOpcode::kRdmaWriteWithImm}) {
    for (double loss : {0.0, 0.01}) {
      SCOPED_TRACE(std::string(op == WrOpcode::kRdmaWrite ? "WRITE" : op == WrOpcode::kSend ? "SEND" : "WRITE_IMM") +
                   " loss " + std::to_string(loss));
      RcPair pair(Impairments{0, 0, 0, 0}, 31, 1024, 8 << 20, 0, 0, /*timeout=*/8, 7, 7, transport::QpType::kRc,
                  4000, nullptr, 16384, true, true);
      Side& a = pair.a();
      Side& b = pair.b();
      const transport::Qp* qa = a.dev->qp(a.qpn);
      const transport::Qp* qb = b.dev->qp(b.qpn);
      constexpr uint32_t kLen = 256 * 1024;  // 256 packets, more than one burst
      Fill(a.mem, 0, 2 * kLen, 77);
      const bool recv = op != WrOpcode::kRdmaWrite;
      if (recv) {
        ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(500, b, 0, kLen)), 0);
        ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(501, b, kLen, kLen)), 0);
      }
      SendWr w0 = MakeWr(1, op, a, 0, kLen, b, 0);
      SendWr w1 = MakeWr(2, op, a, kLen, kLen, b, kLen);
      ASSERT_EQ(a.dev->PostSend(a.qpn, w0), 0);
      ASSERT_EQ(a.dev->PostSend(a.qpn, w1), 0);
      sim::Impairments all;
      all.drop = 1.0;
      pair.link().set_impairments(1, all);  // no answer reaches a
      a.dev->Poll(pair.now());              // a's first burst reaches b ...
      pair.link().set_impairments(0, all);  // ... and nothing after it
      std::vector<Completion> ca, cb;
      for (int i = 0; i < 1000 && qa->selective_repeat(); ++i) pair.Run(&ca, 1, &cb, 0, 10'000);
      ASSERT_FALSE(qa->selective_repeat()) << "a fell back (no SR answer for an IBTA timeout)";
      ASSERT_TRUE(qb->selective_repeat());
      const uint32_t epsn = qb->expected_psn();
      ASSERT_GT(epsn, 0u);
      ASSERT_LT(epsn, kLen / 1024) << "b's expected PSN inside the first message";
      sim::Impairments lossy;
      lossy.drop = loss;
      pair.link().set_impairments(0, lossy);
      pair.link().set_impairments(1, lossy);
      ASSERT_TRUE(pair.Run(&ca, 2, &cb, recv ? 2 : 0, 2'000'000'000ull))
          << "a " << ca.size() << " b " << cb.size();
      for (const Completion& c : ca) {
        EXPECT_EQ(c.status, WcStatus::kSuccess) << queue::WcStatusName(c.status);
      }
      ASSERT_EQ(ca.size(), 2u);
      EXPECT_EQ(ca[0].wr_id, 1u);
      EXPECT_EQ(ca[1].wr_id, 2u);
      if (recv) {
        ASSERT_EQ(cb.size(), 2u);
        EXPECT_EQ(cb[0].wr_id, 500u);
        EXPECT_EQ(cb[1].wr_id, 501u);
        for (const Completion& c : cb) {
          EXPECT_EQ(c.status, WcStatus::kSuccess) << queue::WcStatusName(c.status);
          EXPECT_EQ(c.byte_len, kLen);
        }
      }
      EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 2 * kLen), 0) << "data byte for byte";
      EXPECT_EQ(qb->counters().naks_sent, qb->counters().seq_naks_sent) << "only go-back-N's sequence NAKs";
      EXPECT_FALSE(qb->selective_repeat());
      EXPECT_EQ(qa->counters().sr_fallbacks, 1u);
      EXPECT_EQ(qb->counters().sr_fallbacks, 1u);
    }
  }
}

}  // namespace
}  // namespace droce::core
