// Notification point: CE-marked packets make the receiving QP send CNPs to
// its peer (RoCEv2 Annex A17.9): BTH opcode 0x81, BECN, 16 reserved bytes,
// a valid ICRC, DSCP 48 and Not-ECT, at most one per min_time_between_cnps.
#include <vector>

#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using transport::WrOpcode;

struct Captured {
  std::vector<std::vector<uint8_t>> cnps;
};

void Tap(void* ctx, int from, const uint8_t* data, uint32_t len) {
  const wire::ParsedPacket p = wire::ParsePacket(data, len);
  if (from == 1 && p.ok() && p.opcode == wire::kCnp) {
    static_cast<Captured*>(ctx)->cnps.emplace_back(data, data + len);
  }
}

void RunMarkedWrites(RcPair& pair, Captured* cap, uint64_t* elapsed_ns, uint64_t* cnps_sent) {
  sim::Impairments mark;
  mark.ecn_mark = 1.0;  // every frame from a to b arrives CE-marked
  pair.link().set_impairments(0, mark);
  pair.link().set_tap(&Tap, cap);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 200; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, 0, 4096, b, 0)), 0);
  }
  const uint64_t start = pair.now();
  std::vector<queue::Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 200, &cb, 0));
  ASSERT_EQ(ca.size(), 200u);
  *elapsed_ns = pair.now() - start;
  *cnps_sent = b.dev->qp(b.qpn)->counters().cnps_sent;
}

TEST(Cnp, CeMarksProduceRateLimitedCnpsThatReachThePeer) {
  RcPair pair({}, 3, 1024);
  Captured cap;
  uint64_t elapsed = 0, sent = 0;
  RunMarkedWrites(pair, &cap, &elapsed, &sent);
  const auto& rx = pair.b().dev->qp(pair.b().qpn)->counters();
  const auto& tx = pair.a().dev->qp(pair.a().qpn)->counters();
  EXPECT_EQ(rx.ce_marked_received, tx.tx_packets);  // every data packet arrived marked
  EXPECT_GT(sent, 0u);
  EXPECT_LT(sent, rx.ce_marked_received);           // throttled
  EXPECT_LE(sent, elapsed / 4000 + 1);              // at most one per 4 us
  EXPECT_EQ(tx.cnps_received, sent);                // all delivered to the sender's QP
  EXPECT_EQ(pair.a().dev->counters().rx_cnp, sent);
  ASSERT_EQ(cap.cnps.size(), sent);
  for (const auto& f : cap.cnps) {
    const wire::ParsedPacket p = wire::ParseAndVerify(f.data(), static_cast<uint32_t>(f.size()));
    ASSERT_TRUE(p.ok()) << wire::ParseStatusName(p.status);
    const wire::BthView bth(f.data() + p.bth_offset);
    EXPECT_EQ(bth.opcode(), wire::kCnp);
    EXPECT_TRUE(bth.becn());
    EXPECT_EQ(bth.dest_qp(), pair.a().qpn);
    EXPECT_EQ(p.tclass, 48 << 2);  // DSCP 48, Not-ECT
    EXPECT_EQ(p.payload_len, 0u);
    for (uint32_t i = 0; i < wire::kCnpPadBytes; ++i) EXPECT_EQ(f[p.bth_offset + wire::kBthBytes + i], 0);
  }
}

TEST(Cnp, ZeroIntervalSendsOnePerMarkedPacket) {
  RcPair pair({}, 3, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, /*min_time_between_cnps_ns=*/0);
  Captured cap;
  uint64_t elapsed = 0, sent = 0;
  RunMarkedWrites(pair, &cap, &elapsed, &sent);
  EXPECT_EQ(sent, pair.b().dev->qp(pair.b().qpn)->counters().ce_marked_received);
}

TEST(Cnp, UnmarkedTrafficSendsNone) {
  RcPair pair({}, 3, 1024);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 50; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, 0, 4096, b, 0)), 0);
  }
  std::vector<queue::Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 50, &cb, 0));
  EXPECT_EQ(b.dev->qp(b.qpn)->counters().cnps_sent, 0u);
  EXPECT_EQ(a.dev->counters().rx_cnp, 0u);
}

}  // namespace
}  // namespace droce::core

namespace droce::core {
namespace {
using namespace droce::core::testing;
using transport::WrOpcode;

// Reaction point in the transmit scheduler: CNPs from the receiver cut the
// sender's rate, and the sender's packets then leave paced at that rate.
uint64_t RunWrites(RcPair& pair, bool mark, uint64_t* bytes) {
  if (mark) {
    sim::Impairments imp;
    imp.ecn_mark = 1.0;
    pair.link().set_impairments(0, imp);
  }
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, 0, 16384, b, 0)), 0);
  }
  const uint64_t start = pair.now();
  std::vector<queue::Completion> ca, cb;
  EXPECT_TRUE(pair.Run(&ca, 100, &cb, 0));
  EXPECT_EQ(ca.size(), 100u);
  for (const auto& c : ca) EXPECT_EQ(c.status, queue::WcStatus::kSuccess);
  *bytes = 100 * 16384;
  return pair.now() - start;
}

TEST(Dcqcn, CnpsCutTheSendersRateAndItsPacketsArePaced) {
  const cc::DcqcnParams params = cc::PaperProfile(10'000'000'000ull);
  RcPair paced({}, 3, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, &params);
  uint64_t bytes = 0;
  const uint64_t elapsed = RunWrites(paced, /*mark=*/true, &bytes);
  const transport::Qp* q = paced.a().dev->qp(paced.a().qpn);
  ASSERT_NE(q->reaction_point(), nullptr);
  const cc::ReactionPoint& rp = *q->reaction_point();
  EXPECT_GT(rp.cnps_received(), 0u);
  EXPECT_GT(rp.rate_decreases(), 0u);
  EXPECT_LT(rp.current_rate_bps(), params.line_rate_bps);
  EXPECT_GT(rp.alpha(), 0.0);
  // Paced: the transfer cannot have gone faster than the highest rate the
  // reaction point allowed after the first cut (the line rate bounds it).
  EXPECT_GE(double(elapsed), double(bytes) * 8 / double(params.line_rate_bps) * 1e9 * 0.5);

  // The same marked traffic without a reaction point finishes much sooner
  // (the in-memory wire has no rate of its own).
  RcPair unpaced({}, 3, 1024);
  const uint64_t fast = RunWrites(unpaced, /*mark=*/true, &bytes);
  EXPECT_EQ(unpaced.a().dev->qp(unpaced.a().qpn)->reaction_point(), nullptr);
  EXPECT_GT(elapsed, 3 * fast);
}

TEST(Dcqcn, NoCongestionNoRateLimit) {
  const cc::DcqcnParams params = cc::PaperProfile(10'000'000'000ull);
  RcPair pair({}, 3, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, &params);
  uint64_t bytes = 0;
  RunWrites(pair, /*mark=*/false, &bytes);
  const cc::ReactionPoint& rp = *pair.a().dev->qp(pair.a().qpn)->reaction_point();
  EXPECT_EQ(rp.cnps_received(), 0u);
  EXPECT_FALSE(rp.rate_limited());
  EXPECT_EQ(pair.a().dev->qp(pair.a().qpn)->paced_until_ns(), 0u);
}

}  // namespace
}  // namespace droce::core
