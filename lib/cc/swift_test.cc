// Swift through the congestion-control interface, against hand-computed windows.
#include "cc/swift.h"

#include <cmath>

#include <gtest/gtest.h>

namespace droce::cc {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kG = 1'000'000'000;

class SwiftTest : public ::testing::Test {
 protected:
  void Start(SwiftParams p) {
    params_ = p;
    cc_.Start(&kSwiftOps, &params_);
  }
  // 100 Gb/s, base target 25 us: max_cwnd = 100e9 * 25e-6 / 8 / 1024 = 305.2 packets.
  void SetUp() override { Start(SwiftPaperParams(100 * kG)); }
  const SwiftState& st() const { return *SwiftStateOf(cc_); }
  void Ack(uint64_t rtt_ns, uint32_t acked = 1) {
    AckSample a;
    a.rtt_ns = rtt_ns;
    a.acked_packets = acked;
    cc_.OnAck(a, now_);
  }
  double Target(double cwnd) const {
    const SwiftState& s = st();
    const double fs = std::clamp(s.fs_alpha / std::sqrt(cwnd) + s.fs_beta, 0.0, 125'000.0);
    return 25'000 + fs;
  }
  SwiftParams params_;
  CongestionControl cc_;
  uint64_t now_ = 1'000'000;
};

TEST_F(SwiftTest, StartsWithOneBdpAndNoPacing) {
  EXPECT_NEAR(st().cwnd, 100e9 * 25e-6 / 8 / 1024, 1e-9);
  EXPECT_EQ(cc_.output().window_packets, 305u);
  EXPECT_FALSE(cc_.rate_limited());
}

TEST_F(SwiftTest, FlowScalingSpansFsRangeOverTheWindowRange) {
  const SwiftState& s = st();
  // fs_alpha / sqrt(0.1) + fs_beta = fs_range; fs_alpha / sqrt(100) + fs_beta = 0.
  EXPECT_NEAR(s.fs_alpha / std::sqrt(0.1) + s.fs_beta, 125'000, 1e-6);
  EXPECT_NEAR(s.fs_alpha / std::sqrt(100.0) + s.fs_beta, 0, 1e-6);
}

TEST_F(SwiftTest, BelowTargetAddsAiPerWindow) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 50;
  Start(p);
  Ack(20 * kUs, 10);  // target at cwnd 50 is above 25 us
  EXPECT_NEAR(st().cwnd, 50 + 10.0 / 50, 1e-9);
  EXPECT_EQ(cc_.output().window_packets, 50u);
}

TEST_F(SwiftTest, AboveTargetCutsOncePerRtt) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 200;  // flow scaling 0 above 100 packets: target 25 us
  Start(p);
  Ack(50 * kUs);  // 1 - 0.8 * 25/50 = 0.6
  EXPECT_NEAR(st().cwnd, 120, 1e-9);
  now_ += 10 * kUs;  // within an RTT (srtt 50 us): no second cut
  Ack(50 * kUs);
  EXPECT_NEAR(st().cwnd, 120, 1e-9);
  now_ += 200 * kUs;  // past an RTT (srtt 106.25 us after this sample)
  Ack(500 * kUs);  // 1 - 0.8 * 475/500 = 0.24, but at most max_mdf 0.5 per cut
  EXPECT_NEAR(st().cwnd, 60, 1e-9);
  EXPECT_EQ(st().decreases, 2u);
}

TEST_F(SwiftTest, TargetGrowsAsTheWindowShrinks) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 1;
  Start(p);
  const double t = Target(1);
  EXPECT_NEAR(t - 25'000, 125'000 * 0.9 / (1 / std::sqrt(0.1) - 0.1), 1e-6);  // fs_alpha (1 - 1/sqrt(100))
  Ack(static_cast<uint64_t>(t) - 1, 1);
  EXPECT_NEAR(st().cwnd, 2, 1e-9);  // below target: + ai / cwnd
}

TEST_F(SwiftTest, BelowOnePacketItPaces) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 0.5;
  Start(p);
  Ack(100 * kUs);  // srtt 100 us: 0.5 packets per 100 us
  ASSERT_LT(st().cwnd, 1);
  EXPECT_EQ(cc_.output().window_packets, 1u);
  EXPECT_TRUE(cc_.rate_limited());
  EXPECT_EQ(cc_.output().rate_bps, static_cast<uint64_t>(st().cwnd * 1024 * 8 / 100e-6));
}

TEST_F(SwiftTest, TimeoutsCutThenReset) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 64;
  Start(p);
  cc_.OnTimeout(now_);
  EXPECT_NEAR(st().cwnd, 32, 1e-9);
  for (int i = 0; i < 4; ++i) cc_.OnTimeout(now_ += 1000 * kUs);
  EXPECT_NEAR(st().cwnd, 0.001, 1e-12);  // 5 in a row
  EXPECT_EQ(cc_.stats().timeouts, 5u);
  EXPECT_GE(cc_.output().rate_bps, 10'000'000u);  // min rate
}

TEST_F(SwiftTest, HopsFromTheTelemetryRaiseTheTarget) {
  SwiftParams p = SwiftPaperParams(100 * kG);
  p.init_cwnd = 200;
  Start(p);
  wire::IntStack t;
  t.hops = t.slots = 3;
  AckSample a;
  a.rtt_ns = 27 * kUs;  // above 25 us, below 25 + 3 x 1 us
  a.acked_packets = 1;
  a.telemetry = &t;
  cc_.OnAck(a, now_);
  EXPECT_GT(st().cwnd, 200 - 1e-9 + 0.0);
  EXPECT_EQ(st().hops, 3);
}

}  // namespace
}  // namespace droce::cc
