// TIMELY through the congestion-control interface, against hand-computed
// sequences (rates in Gb/s in the comments).
#include "cc/timely.h"

#include <gtest/gtest.h>

namespace droce::cc {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kG = 1'000'000'000;

// One completion event per ACK: a 16-packet ACK of 1 KB packets.
AckSample Event(uint64_t rtt_ns) {
  AckSample a;
  a.rtt_ns = rtt_ns;
  a.acked_packets = 16;
  return a;
}

class TimelyTest : public ::testing::Test {
 protected:
  void Start(const TimelyParams& p) {
    params_ = p;
    cc_.Start(&kTimelyOps, &params_);
  }
  const TimelyState& st() const { return *TimelyStateOf(cc_); }
  double rate() const { return st().rate_bps; }
  TimelyParams params_;
  CongestionControl cc_;
  uint64_t now_ = 0;
  void Ack(uint64_t rtt_ns) { cc_.OnAck(Event(rtt_ns), now_ += 10 * kUs); }
};

TEST_F(TimelyTest, StartsAtLineRateUnlimited) {
  Start(TimelyPaperParams(10 * kG));
  EXPECT_FALSE(cc_.rate_limited());
  EXPECT_EQ(cc_.output().window_packets, 0u);
  EXPECT_STREQ(cc_.name(), "timely");
  EXPECT_DOUBLE_EQ(rate(), 10e9);
}

TEST_F(TimelyTest, FirstSampleOnlySetsThePreviousRtt) {
  Start(TimelyPaperParams(10 * kG));
  Ack(600 * kUs);  // above t_high, but there is no previous RTT yet
  EXPECT_DOUBLE_EQ(rate(), 10e9);
  EXPECT_EQ(st().prev_rtt_ns, 600 * kUs);
  EXPECT_EQ(st().updates, 0u);
}

TEST_F(TimelyTest, AboveTHighCutsByBetaTimesTheExcess) {
  Start(TimelyPaperParams(10 * kG));
  Ack(100 * kUs);
  Ack(1000 * kUs);  // 10 * (1 - 0.8 * (1 - 500/1000)) = 6
  EXPECT_NEAR(rate(), 6e9, 1);
  EXPECT_TRUE(cc_.rate_limited());
  EXPECT_EQ(cc_.output().rate_bps, 6 * kG);
}

TEST_F(TimelyTest, PositiveGradientCutsProportionally) {
  Start(TimelyPaperParams(10 * kG));
  Ack(100 * kUs);
  Ack(104 * kUs);  // diff 4 us, rtt_diff = 0.875 * 4 = 3.5 us, gradient 3.5/20 = 0.175
  EXPECT_NEAR(st().rtt_diff_ns, 3500, 1e-6);
  EXPECT_NEAR(rate(), 10e9 * (1 - 0.8 * 0.175), 1);
  const double r1 = rate();
  Ack(104 * kUs);  // diff 0: rtt_diff = 0.125 * 3.5 = 0.4375 us, gradient 0.021875
  EXPECT_NEAR(rate(), r1 * (1 - 0.8 * 0.021875), 1);
}

TEST_F(TimelyTest, NegativeGradientAddsDeltaThenHyperactively) {
  TimelyParams p = TimelyPaperParams(10 * kG);
  Start(p);
  Ack(400 * kUs);
  Ack(1000 * kUs);  // 10 * (1 - 0.8 * 0.5) = 6
  const double base = rate();
  uint64_t rtt = 1000 * kUs - 500 * kUs;  // falling RTTs in [t_low, t_high]: gradient < 0
  for (int i = 1; i <= 7; ++i) {
    Ack(rtt -= kUs);
    // Events 1..4: +delta; from the 5th in a row: +5 delta.
    const double expect = base + (i < 5 ? i * 10e6 : 4 * 10e6 + (i - 4) * 50e6);
    EXPECT_NEAR(rate(), expect, 1) << "event " << i;
  }
}

TEST_F(TimelyTest, BelowTLowAddsDeltaWhateverTheGradient) {
  Start(TimelyPaperParams(10 * kG));
  Ack(100 * kUs);
  Ack(1000 * kUs);  // 6 Gb/s
  const double r = rate();
  Ack(10 * kUs);
  Ack(49 * kUs);  // rising, but below t_low
  EXPECT_NEAR(rate(), r + 2 * 10e6, 1);
}

TEST_F(TimelyTest, OneUpdatePerSegment) {
  Start(TimelyPaperParams(10 * kG));
  AckSample a;
  a.rtt_ns = 100 * kUs;
  a.acked_packets = 16;
  cc_.OnAck(a, 1);
  a.rtt_ns = 1000 * kUs;
  a.acked_packets = 4;  // 4 KB of a 16 KB segment: waits
  cc_.OnAck(a, 2);
  cc_.OnAck(a, 3);
  cc_.OnAck(a, 4);
  EXPECT_DOUBLE_EQ(rate(), 10e9);
  a.rtt_ns = 0;  // the segment completes on an ACK without a sample: the newest sample counts
  cc_.OnAck(a, 5);
  EXPECT_NEAR(rate(), 6e9, 1);
  EXPECT_EQ(st().updates, 1u);
}

TEST_F(TimelyTest, RateStaysWithinMinAndLine) {
  Start(TimelyPaperParams(10 * kG));
  Ack(100 * kUs);
  for (int i = 0; i < 200; ++i) Ack(100 * kUs + (i + 1) * 100 * kUs);  // ever steeper: cut by up to 100 %
  EXPECT_DOUBLE_EQ(rate(), 10e6);
  EXPECT_EQ(cc_.output().rate_bps, 10'000'000u);
  for (int i = 0; i < 5000; ++i) Ack(10 * kUs);
  EXPECT_DOUBLE_EQ(rate(), 10e9);
  EXPECT_FALSE(cc_.rate_limited());
}

TEST_F(TimelyTest, HugeSamplesCountAsMaxRtt) {
  Start(TimelyPaperParams(10 * kG));
  Ack(100 * kUs);
  Ack(UINT64_MAX);  // a wrapped timestamp: taken as 10 ms
  EXPECT_NEAR(rate(), 10e9 * (1 - 0.8 * (1 - 500.0 / 10000)), 1);
}

}  // namespace
}  // namespace droce::cc
