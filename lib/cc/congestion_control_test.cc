// The interface itself: algorithms by name, parameter parsing and its
// errors, the per-QP counters, and the pacer following the algorithm's rate.
#include "cc/congestion_control.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cc/dcqcn.h"
#include "cc/hpcc.h"
#include "cc/swift.h"
#include "cc/timely.h"

namespace droce::cc {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kG = 1'000'000'000;

TEST(CcRegistry, EveryAlgorithmByName) {
  EXPECT_EQ(FindAlgorithm("dcqcn"), &kDcqcnOps);
  EXPECT_EQ(FindAlgorithm("timely"), &kTimelyOps);
  EXPECT_EQ(FindAlgorithm("hpcc"), &kHpccOps);
  EXPECT_EQ(FindAlgorithm("swift"), &kSwiftOps);
  EXPECT_EQ(FindAlgorithm("none"), nullptr);
  EXPECT_EQ(FindAlgorithm("DCQCN"), nullptr);
  EXPECT_EQ(AlgorithmNames(), "dcqcn, timely, hpcc, swift, none");
}

TEST(CcConfig, DefaultsAreThePapers) {
  auto c = ParseConfig("timely", "", 10 * kG);
  ASSERT_TRUE(c.ok()) << c.status();
  double v;
  ASSERT_TRUE(GetParam(*c, "t_high_ns", &v));
  EXPECT_EQ(v, 500'000);
  ASSERT_TRUE(GetParam(*c, "beta", &v));
  EXPECT_EQ(v, 0.8);
  ASSERT_TRUE(GetParam(*c, "line_rate_bps", &v));
  EXPECT_EQ(v, 10e9);

  c = ParseConfig("hpcc", "", 100 * kG);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(GetParam(*c, "eta", &v));
  EXPECT_EQ(v, 0.95);
  ASSERT_TRUE(GetParam(*c, "max_stage", &v));
  EXPECT_EQ(v, 5);

  c = ParseConfig("dcqcn", "", 40 * kG);
  ASSERT_TRUE(c.ok());
  const auto& p = *reinterpret_cast<const DcqcnParams*>(c->params);
  EXPECT_EQ(p.rpg_time_reset_us, PaperProfile(40 * kG).rpg_time_reset_us);
  EXPECT_EQ(p.line_rate_bps, 40 * kG);

  c = ParseConfig("none", "", 40 * kG);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->ops, nullptr);
  EXPECT_EQ(DescribeConfig(*c), "none");
}

TEST(CcConfig, SettingsApplyInOrder) {
  auto c = ParseConfig("swift", "base_target_ns=40000, beta=0.5,ai=2 beta=0.7", 25 * kG);
  ASSERT_TRUE(c.ok()) << c.status();
  double v;
  GetParam(*c, "base_target_ns", &v);
  EXPECT_EQ(v, 40'000);
  GetParam(*c, "beta", &v);
  EXPECT_EQ(v, 0.7);
  GetParam(*c, "ai", &v);
  EXPECT_EQ(v, 2);
  EXPECT_THAT(DescribeConfig(*c), HasSubstr("swift line_rate_bps=2.5e+10 "));
  EXPECT_THAT(DescribeConfig(*c), HasSubstr(" beta=0.7 "));
}

TEST(CcConfig, ErrorsSayWhatIsAllowed) {
  auto c = ParseConfig("cubic", "", 10 * kG);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("unknown congestion control 'cubic' (one of dcqcn, timely, hpcc, swift, none)"));

  c = ParseConfig("timely", "gamma=3", 10 * kG);
  EXPECT_THAT(c.status().message(), HasSubstr("timely has no parameter 'gamma' (it has: line_rate_bps, min_rate_bps"));

  c = ParseConfig("timely", "beta=1.5", 10 * kG);
  EXPECT_THAT(c.status().message(), HasSubstr("timely beta: '1.5' is not a number in 0..1"));

  c = ParseConfig("timely", "t_low_ns=12.5", 10 * kG);
  EXPECT_THAT(c.status().message(), HasSubstr("is not an integer"));

  c = ParseConfig("hpcc", "eta=nan", 10 * kG);
  EXPECT_FALSE(c.ok());
  c = ParseConfig("hpcc", "eta", 10 * kG);
  EXPECT_THAT(c.status().message(), HasSubstr("hpcc parameter 'eta': expected name=value"));
  c = ParseConfig("hpcc", "max_stage=-1", 10 * kG);
  EXPECT_FALSE(c.ok());
  c = ParseConfig("none", "eta=1", 10 * kG);
  EXPECT_THAT(c.status().message(), HasSubstr("cc=none takes no parameters"));
  c = ParseConfig("dcqcn", "", 0);
  EXPECT_THAT(c.status().message(), HasSubstr("line rate 0 b/s"));
}

TEST(CcStats, CountsEventsAndRateChanges) {
  auto c = ParseConfig("timely", "", 10 * kG);
  ASSERT_TRUE(c.ok());
  CongestionControl cc;
  cc.Start(c->ops, c->params);
  AckSample a;
  a.acked_packets = 16;
  a.rtt_ns = 100'000;
  cc.OnAck(a, 1);
  a.rtt_ns = 1'000'000;  // above t_high: a decrease
  cc.OnAck(a, 2);
  a.rtt_ns = 10'000;  // below t_low: an increase
  cc.OnAck(a, 3);
  a.rtt_ns = 0;
  cc.OnAck(a, 4);
  cc.OnCnp(5);
  cc.OnTimeout(6);
  const Stats& s = cc.stats();
  EXPECT_EQ(s.acks, 4u);
  EXPECT_EQ(s.rtt_samples, 3u);
  EXPECT_EQ(s.last_rtt_ns, 10'000u);
  EXPECT_EQ(s.min_rtt_ns, 10'000u);
  EXPECT_EQ(s.cnps, 1u);
  EXPECT_EQ(s.timeouts, 1u);
  EXPECT_EQ(s.rate_decreases, 1u);
  EXPECT_EQ(s.rate_increases, 1u);
  EXPECT_EQ(s.telemetry_acks, 0u);
}

TEST(CcNone, NothingLimitsAndNothingIsCounted) {
  CongestionControl cc;
  cc.Start(nullptr, nullptr);
  cc.OnAck(5'000, 1);
  cc.OnCnp(2);
  cc.OnSent(1000, 3);
  EXPECT_FALSE(cc.rate_limited());
  EXPECT_FALSE(cc.Paced(3));
  EXPECT_EQ(cc.output().window_packets, 0u);
  EXPECT_EQ(cc.stats().acks, 0u);
  EXPECT_STREQ(cc.name(), "none");
}

// The pacer spaces packets at the algorithm's rate, and a decrease between
// two packets re-spaces the gap in progress.
TEST(CcPacer, FollowsTheRateAndRetimesOnAChange) {
  auto c = ParseConfig("timely", "", 10 * kG);
  ASSERT_TRUE(c.ok());
  CongestionControl cc;
  cc.Start(c->ops, c->params);
  AckSample a;
  a.acked_packets = 16;
  a.rtt_ns = 100'000;
  cc.OnAck(a, 1);
  a.rtt_ns = 1'000'000;
  cc.OnAck(a, 2);  // 6 Gb/s
  ASSERT_EQ(cc.output().rate_bps, 6 * kG);
  cc.OnSent(1500, 1'000);  // 1500 B at 6 Gb/s: 2000 ns
  EXPECT_EQ(cc.paced_until_ns(), 3'000u);
  EXPECT_TRUE(cc.Paced(2'999));
  EXPECT_FALSE(cc.Paced(3'000));
  a.rtt_ns = 2'000'000;  // 6 * (1 - 0.8 * 0.75) = 2.4 Gb/s: the gap becomes 5000 ns
  cc.OnAck(a, 1'500);
  EXPECT_EQ(cc.output().rate_bps, 2'400'000'000u);
  EXPECT_EQ(cc.paced_until_ns(), 6'000u);
}

}  // namespace
}  // namespace droce::cc
