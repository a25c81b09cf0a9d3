// Selective repeat's timers and in-flight accounting (doc/transport.md
// "Selective repeat"): the running count of packets neither acknowledged
// nor SACKed, the RTT estimator, the tail-loss probe and the resend of a
// lost retransmission without a timeout.
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using queue::Completion;
using queue::WcStatus;
using transport::WrOpcode;

// Every frame that enters the wire, the SR requester's running in-flight
// count must equal a walk over its SACK bitmap.
struct InFlightCheck {
  const transport::RcQp* qp = nullptr;
  uint64_t checks = 0, mismatches = 0, max_in_flight = 0;
  static void Tap(void* ctx, int, const uint8_t*, uint32_t) {
    auto* t = static_cast<InFlightCheck*>(ctx);
    const uint32_t fast = t->qp->sr_unsacked_in_flight();
    const uint32_t walk = t->qp->SrUnsackedInFlightByWalk();
    ++t->checks;
    if (fast != walk) ++t->mismatches;
    t->max_in_flight = std::max<uint64_t>(t->max_in_flight, walk);
  }
};

TEST(SrInFlight, RunningCountMatchesTheBitmapUnderLoss) {
  for (double drop : {0.01, 0.05, 0.2}) {
    RcPair pair(Impairments{drop, 0.01, 0, 0}, 77, 1024, 8 << 20, 0xFFFF00, 0x10, /*timeout=*/8, 7, 7,
                transport::QpType::kRc, 4000, nullptr, 16384, true, true);
    Side& a = pair.a();
    Side& b = pair.b();
    InFlightCheck check;
    check.qp = a.dev->qp(a.qpn);
    pair.link().set_tap(&InFlightCheck::Tap, &check);
    Fill(a.mem, 0, 32 * 65536, 5);
    for (uint32_t i = 0; i < 32; ++i) {
      ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
    }
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 32, &cb, 0)) << "drop " << drop;
    for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 32 * 65536), 0);
    EXPECT_GT(check.checks, 2000u);
    EXPECT_EQ(check.mismatches, 0u) << "drop " << drop;
    EXPECT_GT(a.dev->qp(a.qpn)->counters().sr_sacks_received, 0u);
    EXPECT_GT(check.max_in_flight, 10u);
    EXPECT_EQ(a.dev->qp(a.qpn)->sr_unsacked_in_flight(), 0u);
  }
}

}  // namespace
}  // namespace droce::core
