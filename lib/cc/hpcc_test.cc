// HPCC through the congestion-control interface: one 100 Gb/s hop, T = 10 us,
// against hand-computed windows (W_init = 125 000 B, W_AI = 62.5 B).
#include "cc/hpcc.h"

#include <gtest/gtest.h>

namespace droce::cc {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kG = 1'000'000'000;
constexpr double kWinit = 125'000;
constexpr double kWai = 62.5;

wire::IntStack Echo(uint32_t ts_ns, uint32_t tx_bytes, uint32_t qlen, uint32_t rate_mbps = 100'000) {
  wire::IntStack s;
  s.slots = s.hops = 1;
  s.echo = true;
  s.hop[0] = wire::IntHop{ts_ns, tx_bytes, qlen, rate_mbps};
  return s;
}

class HpccTest : public ::testing::Test {
 protected:
  void SetUp() override {
    params_ = HpccPaperParams(100 * kG);
    params_.base_rtt_ns = 10 * kUs;
    cc_.Start(&kHpccOps, &params_);
  }
  const HpccState& st() const { return *HpccStateOf(cc_); }
  void Send(int n) {
    for (int i = 0; i < n; ++i) cc_.OnSent(1024, now_);
  }
  void Ack(const wire::IntStack& t, uint32_t acked = 1) {
    AckSample a;
    a.acked_packets = acked;
    a.telemetry = &t;
    cc_.OnAck(a, now_ += kUs);
  }
  // The port at line rate for `tau_ns` since the last record, with `qlen` queued.
  wire::IntStack Next(uint32_t tau_ns, uint32_t qlen) {
    ts_ += tau_ns;
    tx_ += static_cast<uint32_t>(100e9 * tau_ns * 1e-9 / 8);
    return Echo(ts_, tx_, qlen);
  }
  HpccParams params_;
  CongestionControl cc_;
  uint64_t now_ = 0;
  uint32_t ts_ = 5'000'000, tx_ = 0;
};

TEST_F(HpccTest, StartsAtLineRateWithAWindowOfOneBdp) {
  EXPECT_STREQ(cc_.name(), "hpcc");
  EXPECT_TRUE(kHpccOps.needs_int);
  EXPECT_TRUE(cc_.rate_limited());
  EXPECT_EQ(cc_.output().rate_bps, 100 * kG);
  EXPECT_EQ(cc_.output().window_packets, 123u);  // ceil(125000 / 1024)
  EXPECT_DOUBLE_EQ(st().w, kWinit);
}

TEST_F(HpccTest, FirstEchoIsTheReference) {
  Send(10);
  Ack(Next(0, 50'000));
  EXPECT_DOUBLE_EQ(st().w, kWinit);
  EXPECT_EQ(st().last_update_seq, 10u);
  EXPECT_EQ(st().ref_hops, 1);
  EXPECT_EQ(st().ref[0].qlen_bytes, 50'000u);
}

TEST_F(HpccTest, AQueueOfOneBdpHalvesTheWindowTowardsEta) {
  Send(10);
  Ack(Next(0, 125'000));
  Send(10);
  // tau = T: U = u = 125000 B / (B T) + 1 = 2; W = Wc / (2 / 0.95) + W_AI.
  Ack(Next(10'000, 125'000), 11);
  EXPECT_NEAR(st().u, 2.0, 1e-9);
  EXPECT_NEAR(st().w, kWinit * 0.475 + kWai, 1e-6);
  EXPECT_DOUBLE_EQ(st().wc, st().w);  // a per-RTT update: 11 acked > 10 sent at the reference
  EXPECT_EQ(st().inc_stage, 0u);
  EXPECT_EQ(st().updates, 1u);
  EXPECT_EQ(cc_.output().rate_bps, static_cast<uint64_t>(st().w * 8 / 10e-6));
}

TEST_F(HpccTest, FastReactionsStartFromTheSameReferenceWindow) {
  Send(10);
  Ack(Next(0, 125'000));
  Send(10);
  Ack(Next(10'000, 125'000), 11);  // per-RTT update: Wc = W1, last_update_seq = 20
  const double wc = st().wc;
  Ack(Next(10'000, 125'000), 1);  // 12 acked <= 20: fast reaction from Wc, Wc kept
  EXPECT_DOUBLE_EQ(st().wc, wc);
  EXPECT_NEAR(st().w, wc * 0.475 + kWai, 1e-6);
  EXPECT_EQ(st().fast_reactions, 1u);
  Ack(Next(10'000, 125'000), 9);  // 21 acked > 20: a new per-RTT update
  EXPECT_NEAR(st().wc, wc * 0.475 + kWai, 1e-6);
  EXPECT_EQ(st().updates, 2u);
}

TEST_F(HpccTest, AdditiveStepsThenAMultiplicativeOneWhenIdle) {
  Send(1);
  Ack(Next(0, 125'000));
  Send(1);
  Ack(Next(10'000, 125'000), 2);  // U = 2: W = Wc 0.475 + W_AI
  double w = st().w;
  // The link half idle from now on (u = 0.5 < eta): W_AI per RTT for max_stage RTTs ...
  for (uint32_t i = 1; i <= 5; ++i) {
    Send(1);
    ts_ += 10'000;
    tx_ += 62'500;  // 50 Gb/s for 10 us
    Ack(Echo(ts_, tx_, 0), 1);
    EXPECT_EQ(st().inc_stage, i);
    EXPECT_NEAR(st().w, w + kWai, 1e-6) << i;
    w = st().w;
  }
  // ... then W = Wc / (U / eta) + W_AI with U = 0.5 (tau = T: U is the last u).
  Send(1);
  ts_ += 10'000;
  tx_ += 62'500;
  Ack(Echo(ts_, tx_, 0), 1);
  EXPECT_EQ(st().inc_stage, 0u);
  EXPECT_NEAR(st().w, w / (0.5 / 0.95) + kWai, 1e-6);
}

TEST_F(HpccTest, TimestampsAndByteCountsWrap) {
  ts_ = 0xFFFFF000u;
  tx_ = 0xFFFFFF00u;
  Send(1);
  Ack(Next(0, 125'000));
  Send(1);
  Ack(Next(10'000, 125'000), 2);  // both wrap past 2^32
  EXPECT_NEAR(st().u, 2.0, 1e-9);
}

TEST_F(HpccTest, AnotherHopCountIsANewReference) {
  Send(1);
  Ack(Next(0, 0));
  Send(1);
  wire::IntStack two = Next(10'000, 500'000);
  two.hops = two.slots = 2;
  two.hop[1] = two.hop[0];
  Ack(two, 2);
  EXPECT_DOUBLE_EQ(st().w, kWinit);
  EXPECT_EQ(st().ref_hops, 2);
  EXPECT_EQ(st().updates, 0u);
}

TEST_F(HpccTest, RecordsWithoutRateOrTimeAreSkipped) {
  Send(1);
  Ack(Next(0, 0));
  Send(1);
  Ack(Echo(ts_ + 10'000, tx_ + 1000, 10'000'000, 0), 2);  // no line rate
  Ack(Echo(ts_ + 10'000, tx_ + 1000, 10'000'000), 2);     // the same timestamp as the reference now
  EXPECT_DOUBLE_EQ(st().w, kWinit);
  EXPECT_EQ(st().updates, 0u);
}

TEST_F(HpccTest, NoTelemetryNoChange) {
  Send(5);
  AckSample a;
  a.rtt_ns = 50 * kUs;
  a.acked_packets = 5;
  cc_.OnAck(a, 1);
  EXPECT_DOUBLE_EQ(st().w, kWinit);
  EXPECT_EQ(cc_.stats().telemetry_acks, 0u);
  EXPECT_EQ(cc_.stats().rtt_samples, 1u);
}

TEST_F(HpccTest, ForgedQueueDrivesTheWindowToItsFloorAndHonestTelemetryBringsItBack) {
  Send(1);
  Ack(Next(0, 0xFFFFFFFFu));
  for (int i = 0; i < 5; ++i) {
    Send(1);
    Ack(Next(10'000, 0xFFFFFFFFu), 2);
  }
  EXPECT_EQ(cc_.output().rate_bps, 100'000'000u);  // min rate
  EXPECT_EQ(cc_.output().window_packets, 1u);       // 125 B
  // An idle link from now on: back to line rate within a few RTTs (W_AI steps, then Wc / (U / eta)).
  int rtts = 0;
  while (cc_.output().rate_bps < 100 * kG && rtts < 100) {
    Send(1);
    ts_ += 10'000;
    tx_ += 1000;
    Ack(Echo(ts_, tx_, 0), 1);
    ++rtts;
  }
  EXPECT_EQ(cc_.output().rate_bps, 100 * kG);
  EXPECT_LT(rtts, 20);
}

}  // namespace
}  // namespace droce::cc
