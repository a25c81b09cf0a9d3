// droce-ccsim's metrics on synthetic series, and properties of whole runs:
// determinism, DCQCN off vs on, capacity.
#include "apps/ccsim/sim.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace droce::ccsim {
namespace {

TEST(Metrics, Jain) {
  EXPECT_DOUBLE_EQ(Jain({1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Jain({1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(Jain({3, 1}), 16.0 / 20.0);
  EXPECT_DOUBLE_EQ(Jain({2, 2, 2, 2}), 1.0);
  EXPECT_DOUBLE_EQ(Jain({}), 1.0);
}

// Two flows, windows of 10 samples of 100 us, fair share 10.
std::vector<std::vector<double>> Series(const std::vector<std::pair<double, double>>& windows) {
  std::vector<std::vector<double>> thr(2);
  for (auto [a, b] : windows) {
    for (int k = 0; k < 10; ++k) {
      thr[0].push_back(a);
      thr[1].push_back(b);
    }
  }
  return thr;
}

TEST(Metrics, ConvergenceFirstAndStable) {
  // bad, good, bad (20 % off), good, good
  auto thr = Series({{5, 15}, {10, 10}, {8, 12}, {10.5, 9.5}, {10.9, 9.1}});
  Convergence c = ConvergenceTimes(thr, 100, 0, 1000, 10, 0.10);
  EXPECT_DOUBLE_EQ(c.first_us, 2000);
  EXPECT_DOUBLE_EQ(c.stable_us, 3000);
  // Ends out of band: never stable.
  thr = Series({{10, 10}, {10, 10}, {5, 15}});
  c = ConvergenceTimes(thr, 100, 0, 1000, 10, 0.10);
  EXPECT_DOUBLE_EQ(c.first_us, 1000);
  EXPECT_LT(c.stable_us, 0);
  // Never in band.
  thr = Series({{5, 15}, {12, 8}});
  c = ConvergenceTimes(thr, 100, 0, 1000, 10, 0.10);
  EXPECT_LT(c.first_us, 0);
  EXPECT_LT(c.stable_us, 0);
  // Windows start at `from` (a late joiner): from 1000 us skips the bad first window.
  thr = Series({{5, 15}, {10, 10}, {10, 10}});
  c = ConvergenceTimes(thr, 100, 1000, 1000, 10, 0.10);
  EXPECT_DOUBLE_EQ(c.first_us, 1000);
  EXPECT_DOUBLE_EQ(c.stable_us, 0);
}

SimConfig Small() {
  SimConfig c;
  c.senders = 2;
  c.line_rate_gbps = 25;
  c.duration_ms = 10;
  return c;
}

TEST(Sim, SameOptionsSameResultOtherSeedOtherResult) {
  SimResult a, b, c;
  std::string err;
  SimConfig cfg = Small();
  ASSERT_TRUE(RunSim(cfg, &a, &err)) << err;
  ASSERT_TRUE(RunSim(cfg, &b, &err)) << err;
  EXPECT_EQ(SummaryLine(cfg, a), SummaryLine(cfg, b));
  EXPECT_EQ(a.queue_bytes, b.queue_bytes);
  cfg.seed = 2;
  ASSERT_TRUE(RunSim(cfg, &c, &err)) << err;
  EXPECT_NE(a.queue_bytes, c.queue_bytes);
}

TEST(Sim, WithoutDcqcnTheQueueFillsAndDrops) {
  SimConfig cfg = Small();
  cfg.dcqcn = false;
  cfg.buffer_bytes = 200'000;
  SimResult r;
  std::string err;
  ASSERT_TRUE(RunSim(cfg, &r, &err)) << err;
  EXPECT_GT(r.drops, 0u);
  EXPECT_EQ(r.cnps, 0u);
  EXPECT_LE(r.queue_max_run, 200'000u);
  EXPECT_GT(r.queue_p50, 190'000u);  // full
  for (const FlowSeries& f : r.flows)
    for (double rc : f.rc_gbps) EXPECT_EQ(rc, 25.0);

  cfg.dcqcn = true;
  ASSERT_TRUE(RunSim(cfg, &r, &err)) << err;
  EXPECT_GT(r.cnps, 0u);
  EXPECT_LT(r.queue_p50, 200'000u);
  for (const FlowSeries& f : r.flows) EXPECT_LT(f.rc_gbps.back(), 25.0);
}

TEST(Sim, NeverMoreThanTheLineRate) {
  for (const char* profile : {"paper", "mlx5"}) {
    SimConfig cfg = Small();
    cfg.senders = 4;
    cfg.duration_ms = 30;  // mlx5 needs ~10 ms to refill the link after the first incast
    cfg.profile = profile;
    SimResult r;
    std::string err;
    ASSERT_TRUE(RunSim(cfg, &r, &err)) << err;
    double sum = 0;
    for (double g : r.flow_gbps) sum += g;
    EXPECT_LE(sum, 25.0 * 1.0001) << profile;
    EXPECT_LE(r.utilization, 1.0001) << profile;
    EXPECT_GT(r.utilization, 0.5) << profile;
    for (const FlowSeries& f : r.flows)
      for (double thr : f.thr_gbps) EXPECT_LE(thr, 25.0 * 1.0001);
  }
}

TEST(Sim, LateJoinerSendsNothingBeforeItStarts) {
  SimConfig cfg = Small();
  cfg.late_join_ms = 4;
  SimResult r;
  std::string err;
  ASSERT_TRUE(RunSim(cfg, &r, &err)) << err;
  for (size_t s = 0; s < r.t_us.size(); ++s) {
    if (r.t_us[s] <= 4000) {
      EXPECT_EQ(r.flows[1].thr_gbps[s], 0.0) << r.t_us[s];
    }
  }
  EXPECT_GT(r.flow_gbps[1], 1.0);
}

TEST(Sim, KnobOverridesChangeTheRunAndAreNamedInTheSummary) {
  cc::DcqcnParams p = cc::Mlx5Profile(25'000'000'000);
  EXPECT_TRUE(SetKnob(&p, "dce_tcp_rtt_us", 55));
  EXPECT_EQ(p.dce_tcp_rtt_us, 55u);
  EXPECT_TRUE(SetKnob(&p, "rpg_byte_reset", 1e7));
  EXPECT_EQ(p.rpg_byte_reset, 10'000'000u);
  EXPECT_FALSE(SetKnob(&p, "no_such_knob", 1));
  EXPECT_FALSE(SetKnob(&p, "rpg_threshold", -1));
  EXPECT_FALSE(SetKnob(&p, "rpg_threshold", 1.5));

  SimConfig cfg = Small();
  cfg.profile = "mlx5";
  SimResult plain, changed;
  std::string err;
  ASSERT_TRUE(RunSim(cfg, &plain, &err)) << err;
  EXPECT_NE(SummaryLine(cfg, plain).find("set=none "), std::string::npos);
  cfg.overrides = {{"dce_tcp_rtt_us", 55}, {"min_time_between_cnps_us", 50}};
  ASSERT_TRUE(RunSim(cfg, &changed, &err)) << err;
  EXPECT_NE(SummaryLine(cfg, changed).find("set=dce_tcp_rtt_us:55+min_time_between_cnps_us:50 "),
            std::string::npos);
  EXPECT_NE(plain.cnps, changed.cnps);  // the NP interval comes from the overridden profile
  cfg.overrides = {{"dce_tcp_rtt", 55}};
  EXPECT_FALSE(RunSim(cfg, &changed, &err));
}

TEST(Sim, RejectsBadOptions) {
  SimResult r;
  std::string err;
  SimConfig cfg = Small();
  cfg.profile = "cx9";
  EXPECT_FALSE(RunSim(cfg, &r, &err));
  cfg = Small();
  cfg.senders = 0;
  EXPECT_FALSE(RunSim(cfg, &r, &err));
  cfg = Small();
  cfg.kmin_bytes = 10;
  cfg.kmax_bytes = 5;
  EXPECT_FALSE(RunSim(cfg, &r, &err));
}

}  // namespace
}  // namespace droce::ccsim
