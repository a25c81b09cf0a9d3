// Notification point: CE-marked packets make the receiving QP send CNPs to
// its peer (RoCEv2 Annex A17.9): BTH opcode 0x81, BECN, 16 reserved bytes,
// a valid ICRC, DSCP 48 and Not-ECT, at most one per min_time_between_cnps.
#include <vector>

#include "core/rc_pair_fixture.h"

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
  pktio::Impairments mark;
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
