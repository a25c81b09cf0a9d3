// Reaction point arithmetic against hand-computed sequences, one test per
// phase, and the pacer's spacing. Rates in the comments are in Gb/s.
#include "cc/dcqcn.h"

#include <cmath>
#include <cstdint>

#include <gtest/gtest.h>

namespace droce::cc {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kG = 1'000'000'000;

// Rates are doubles inside and rounded to whole b/s outside.
#define EXPECT_RATE(actual, expected) EXPECT_NEAR(static_cast<double>(actual), (expected), 1.0)

// Alpha pinned at 1 (g update of 1 stays 1), no monitor period, timers far
// away: each test turns on the phase it checks.
DcqcnParams Quiet(uint64_t line) {
  DcqcnParams p;
  p.line_rate_bps = line;
  p.rpg_time_reset_us = 1'000'000;
  p.rpg_byte_reset = uint64_t{1} << 40;
  p.rpg_threshold = 5;
  p.rpg_ai_rate_mbps = 40;
  p.rpg_hai_rate_mbps = 400;
  p.rpg_gd = 11;
  p.rpg_min_dec_fac = 50;
  p.rpg_min_rate_mbps = 1;
  p.dce_tcp_g = 1020;
  p.dce_tcp_rtt_us = 1'000'000;
  p.initial_alpha_value = 1024;
  return p;
}

TEST(DcqcnProfiles, PaperAndMlx5Values) {
  const DcqcnParams paper = PaperProfile(40 * kG);
  EXPECT_EQ(paper.line_rate_bps, 40 * kG);
  EXPECT_EQ(paper.dce_tcp_g, 1020u);  // g = 1/256
  EXPECT_EQ(paper.dce_tcp_rtt_us, 55u);
  EXPECT_EQ(paper.rpg_time_reset_us, 55u);
  EXPECT_EQ(paper.rpg_byte_reset, 10'000'000u);
  EXPECT_EQ(paper.rpg_threshold, 5u);
  EXPECT_EQ(paper.rpg_ai_rate_mbps, 40u);
  EXPECT_EQ(paper.rpg_hai_rate_mbps, 400u);
  EXPECT_EQ(paper.min_time_between_cnps_us, 50u);
  EXPECT_EQ(paper.rate_reduce_monitor_period_us, 0u);

  const DcqcnParams mlx = Mlx5Profile(100 * kG);
  EXPECT_EQ(mlx.dce_tcp_g, 1019u);
  EXPECT_EQ(mlx.dce_tcp_rtt_us, 1u);
  EXPECT_EQ(mlx.rate_reduce_monitor_period_us, 4u);
  EXPECT_EQ(mlx.rpg_time_reset_us, 300u);
  EXPECT_EQ(mlx.rpg_byte_reset, 32767u);
  EXPECT_EQ(mlx.rpg_threshold, 1u);
  EXPECT_EQ(mlx.rpg_ai_rate_mbps, 5u);
  EXPECT_EQ(mlx.rpg_hai_rate_mbps, 50u);
  EXPECT_EQ(mlx.rpg_gd, 11u);
  EXPECT_EQ(mlx.rpg_min_dec_fac, 50u);
  EXPECT_EQ(mlx.rpg_min_rate_mbps, 1u);
  EXPECT_EQ(mlx.initial_alpha_value, 1023u);
  EXPECT_EQ(mlx.min_time_between_cnps_us, 4u);
  EXPECT_EQ(mlx.cnp_dscp, 48);
  EXPECT_EQ(mlx.cnp_802p_prio, 6);
}

TEST(ReactionPoint, LineRateAndIdleBeforeFirstCnp) {
  ReactionPoint rp(PaperProfile(100 * kG));
  EXPECT_EQ(rp.current_rate_bps(), 100 * kG);
  EXPECT_EQ(rp.target_rate_bps(), 100 * kG);
  EXPECT_EQ(rp.next_deadline_ns(), UINT64_MAX);
  rp.OnBytesSent(1'000'000'000, 5);
  rp.Advance(1'000'000'000);
  EXPECT_EQ(rp.current_rate_bps(), 100 * kG);
  EXPECT_FALSE(rp.rate_limited());
  EXPECT_EQ(rp.byte_stage(), 0u);
  EXPECT_EQ(rp.timer_stage(), 0u);
}

TEST(ReactionPoint, DecreaseOnEveryCnp) {
  ReactionPoint rp(Quiet(100 * kG));
  rp.OnCnp(0);  // alpha 1: RT 100, RC 100 * (1 - 1/2) = 50, alpha (1-g)1 + g = 1
  EXPECT_RATE(rp.target_rate_bps(), 100e9);
  EXPECT_RATE(rp.current_rate_bps(), 50e9);
  EXPECT_DOUBLE_EQ(rp.alpha(), 1.0);
  rp.OnCnp(1 * kUs);  // RT 50, RC 25
  EXPECT_RATE(rp.target_rate_bps(), 50e9);
  EXPECT_RATE(rp.current_rate_bps(), 25e9);
  rp.OnCnp(2 * kUs);  // RT 25, RC 12.5
  EXPECT_RATE(rp.target_rate_bps(), 25e9);
  EXPECT_RATE(rp.current_rate_bps(), 12.5e9);
  EXPECT_EQ(rp.cnps_received(), 3u);
  EXPECT_EQ(rp.rate_decreases(), 3u);
  EXPECT_TRUE(rp.rate_limited());
}

TEST(ReactionPoint, AlphaDecaysPerPeriodWithoutCnpAndRisesOnCnp) {
  DcqcnParams p = Quiet(100 * kG);
  p.dce_tcp_rtt_us = 10;
  ReactionPoint rp(p);
  const double keep = 1020.0 / 1024, g = 4.0 / 1024;
  rp.OnCnp(0);  // RC 50, alpha 1, alpha timer due at 10 us
  rp.Advance(10 * kUs - 1);
  EXPECT_DOUBLE_EQ(rp.alpha(), 1.0);
  rp.Advance(10 * kUs);
  EXPECT_DOUBLE_EQ(rp.alpha(), keep);
  rp.Advance(30 * kUs);  // ticks at 20 and 30 us
  const double a3 = keep * keep * keep;
  EXPECT_DOUBLE_EQ(rp.alpha(), a3);

  // CNP at 35 us: cut by a3/2 from 50, then alpha = (1-g) a3 + g; the alpha
  // timer restarts (next tick at 45 us, not 40 us).
  rp.OnCnp(35 * kUs);
  EXPECT_RATE(rp.target_rate_bps(), 50e9);
  EXPECT_RATE(rp.current_rate_bps(), 50e9 * (1 - a3 / 2));
  const double a4 = keep * a3 + g;
  EXPECT_DOUBLE_EQ(rp.alpha(), a4);
  rp.Advance(45 * kUs - 1);
  EXPECT_DOUBLE_EQ(rp.alpha(), a4);
  rp.Advance(45 * kUs);
  EXPECT_DOUBLE_EQ(rp.alpha(), keep * a4);
}

TEST(ReactionPoint, Mlx5FirstCnpUsesInitialAlphaAndG5Over1024) {
  ReactionPoint rp(Mlx5Profile(100 * kG));
  rp.OnCnp(0);
  const double a0 = 1023.0 / 1024;
  EXPECT_RATE(rp.current_rate_bps(), 100e9 * (1 - a0 / 2));
  EXPECT_DOUBLE_EQ(rp.alpha(), 1019.0 / 1024 * a0 + 5.0 / 1024);
  rp.Advance(1 * kUs);  // one 1 us period without a CNP
  EXPECT_DOUBLE_EQ(rp.alpha(), 1019.0 / 1024 * (1019.0 / 1024 * a0 + 5.0 / 1024));
}

TEST(ReactionPoint, FastRecoveryThenAdditiveIncreaseOnTimer) {
  DcqcnParams p = Quiet(100 * kG);
  p.rpg_time_reset_us = 55;
  ReactionPoint rp(p);
  rp.OnCnp(0);       // RC 50, RT 100
  rp.OnCnp(1 * kUs); // RC 25, RT 50; timer T due at 56 us
  rp.Advance(56 * kUs - 1);
  EXPECT_RATE(rp.current_rate_bps(), 25e9);
  // F = 5 fast-recovery events: RC = (RT + RC) / 2, RT unchanged.
  const double fr[] = {37.5e9, 43.75e9, 46.875e9, 48.4375e9, 49.21875e9};
  for (int i = 0; i < 5; ++i) {
    rp.Advance((1 + 55 * (i + 1)) * kUs);
    EXPECT_EQ(rp.timer_stage(), static_cast<uint32_t>(i + 1));
    EXPECT_RATE(rp.target_rate_bps(), 50e9);
    EXPECT_RATE(rp.current_rate_bps(), fr[i]) << "stage " << i + 1;
  }
  // Then additive increase: RT += 40 Mb/s, RC = (RT + RC) / 2.
  rp.Advance((1 + 55 * 6) * kUs);
  EXPECT_RATE(rp.target_rate_bps(), 50.04e9);
  EXPECT_RATE(rp.current_rate_bps(), (50.04e9 + 49.21875e9) / 2);
  rp.Advance((1 + 55 * 7) * kUs);
  EXPECT_RATE(rp.target_rate_bps(), 50.08e9);
  EXPECT_RATE(rp.current_rate_bps(), (50.08e9 + (50.04e9 + 49.21875e9) / 2) / 2);
  EXPECT_EQ(rp.fast_recovery_events(), 5u);
  EXPECT_EQ(rp.additive_increase_events(), 2u);
  EXPECT_EQ(rp.hyper_increase_events(), 0u);
  // A CNP resets both stage counters: fast recovery again.
  rp.OnCnp(400 * kUs);
  EXPECT_EQ(rp.timer_stage(), 0u);
  rp.Advance(455 * kUs);
  EXPECT_EQ(rp.fast_recovery_events(), 6u);
}

TEST(ReactionPoint, ByteCounterAdditiveAndHyperIncrease) {
  DcqcnParams p = Quiet(10 * kG);
  p.rpg_threshold = 1;
  p.rpg_time_reset_us = 100;
  p.rpg_byte_reset = 1000;
  p.rpg_ai_rate_mbps = 10;
  p.rpg_hai_rate_mbps = 100;
  ReactionPoint rp(p);
  rp.OnCnp(0);
  rp.OnCnp(1);  // RC 2.5, RT 5; T due at 100.001 us
  EXPECT_RATE(rp.current_rate_bps(), 2.5e9);
  rp.OnBytesSent(1000, 2000);  // BC 1, T 0: max 1 <= F: fast recovery
  EXPECT_EQ(rp.byte_stage(), 1u);
  EXPECT_RATE(rp.target_rate_bps(), 5e9);
  EXPECT_RATE(rp.current_rate_bps(), 3.75e9);
  rp.OnBytesSent(1000, 3000);  // BC 2, T 0: additive
  EXPECT_RATE(rp.target_rate_bps(), 5.01e9);
  EXPECT_RATE(rp.current_rate_bps(), 4.38e9);
  rp.Advance(100'001);  // T 1, BC 2: min 1 <= F: additive
  EXPECT_EQ(rp.timer_stage(), 1u);
  EXPECT_RATE(rp.target_rate_bps(), 5.02e9);
  EXPECT_RATE(rp.current_rate_bps(), 4.70e9);
  rp.Advance(200'001);  // T 2, BC 2: both > F: hyper, RT += 100 Mb/s
  EXPECT_RATE(rp.target_rate_bps(), 5.12e9);
  EXPECT_RATE(rp.current_rate_bps(), 4.91e9);
  rp.OnBytesSent(1000, 200'002);  // BC 3, T 2: hyper
  EXPECT_RATE(rp.target_rate_bps(), 5.22e9);
  EXPECT_RATE(rp.current_rate_bps(), 5.065e9);
  EXPECT_EQ(rp.fast_recovery_events(), 1u);
  EXPECT_EQ(rp.additive_increase_events(), 2u);
  EXPECT_EQ(rp.hyper_increase_events(), 2u);
}

TEST(ReactionPoint, ByteCounterAccumulatesAndCarriesRemainder) {
  DcqcnParams p = Quiet(10 * kG);
  p.rpg_byte_reset = 1000;
  ReactionPoint rp(p);
  rp.OnBytesSent(5000, 0);  // before any CNP: not counted
  rp.OnCnp(10);             // RC 5, RT 10
  rp.OnBytesSent(400, 20);
  rp.OnBytesSent(400, 30);
  EXPECT_EQ(rp.byte_stage(), 0u);
  EXPECT_RATE(rp.current_rate_bps(), 5e9);
  rp.OnBytesSent(400, 40);  // 1200: one stage, 200 carried
  EXPECT_EQ(rp.byte_stage(), 1u);
  EXPECT_RATE(rp.current_rate_bps(), 7.5e9);
  rp.OnBytesSent(1800, 50);  // 2000: two stages at once
  EXPECT_EQ(rp.byte_stage(), 3u);
  EXPECT_RATE(rp.current_rate_bps(), 9.375e9);
  rp.OnBytesSent(999, 60);  // 999: none
  EXPECT_EQ(rp.byte_stage(), 3u);
}

TEST(ReactionPoint, MinRateBound) {
  DcqcnParams p = Quiet(10 * kG);
  p.rpg_min_rate_mbps = 1000;
  ReactionPoint rp(p);
  const double expect[] = {5e9, 2.5e9, 1.25e9, 1e9, 1e9};
  for (int i = 0; i < 5; ++i) {
    rp.OnCnp(i * kUs);
    EXPECT_RATE(rp.current_rate_bps(), expect[i]) << "CNP " << i + 1;
  }
}

TEST(ReactionPoint, MinDecFacBoundsOneDecrease) {
  // rpg_gd 10: the cut is alpha (not alpha/2); with alpha 1 it would zero RC.
  DcqcnParams p = Quiet(10 * kG);
  p.rpg_gd = 10;
  p.rpg_min_dec_fac = 25;  // keep at least 25 %
  ReactionPoint rp(p);
  rp.OnCnp(0);
  EXPECT_RATE(rp.current_rate_bps(), 2.5e9);
  rp.OnCnp(1);
  EXPECT_RATE(rp.current_rate_bps(), 0.625e9);

  p.rpg_min_dec_fac = 0;  // unbounded: down to the minimum rate
  p.rpg_min_rate_mbps = 7;
  ReactionPoint rp0(p);
  rp0.OnCnp(0);
  EXPECT_RATE(rp0.current_rate_bps(), 7e6);
}

TEST(ReactionPoint, RateToSetOnFirstCnpAtLineRate) {
  DcqcnParams p = Quiet(10 * kG);
  p.rate_to_set_on_first_cnp_mbps = 2000;
  p.rpg_time_reset_us = 10;
  ReactionPoint rp(p);
  rp.OnCnp(0);
  EXPECT_RATE(rp.current_rate_bps(), 2e9);
  EXPECT_RATE(rp.target_rate_bps(), 2e9);
  rp.OnCnp(1);  // not at line rate any more: the normal cut
  EXPECT_RATE(rp.target_rate_bps(), 2e9);
  EXPECT_RATE(rp.current_rate_bps(), 1e9);
  // Recover to line rate (additive/hyper push RT to 10 G), then again.
  rp.Advance(100'000 * kUs);
  EXPECT_EQ(rp.current_rate_bps(), 10 * kG);
  EXPECT_FALSE(rp.rate_limited());
  rp.OnCnp(100'001 * kUs);
  EXPECT_RATE(rp.current_rate_bps(), 2e9);
}

TEST(ReactionPoint, MonitorPeriodCoalescesCnps) {
  DcqcnParams p = Quiet(100 * kG);
  p.rate_reduce_monitor_period_us = 4;
  ReactionPoint rp(p);
  rp.OnCnp(0);  // decrease at once: RC 50
  rp.OnCnp(1 * kUs);
  rp.OnCnp(2 * kUs);
  EXPECT_EQ(rp.cnps_received(), 3u);
  EXPECT_EQ(rp.rate_decreases(), 1u);
  EXPECT_RATE(rp.current_rate_bps(), 50e9);
  EXPECT_EQ(rp.next_deadline_ns(), 4 * kUs);
  rp.Advance(4 * kUs - 1);
  EXPECT_RATE(rp.current_rate_bps(), 50e9);
  rp.Advance(4 * kUs);  // one decrease for the two CNPs
  EXPECT_EQ(rp.rate_decreases(), 2u);
  EXPECT_RATE(rp.current_rate_bps(), 25e9);
  rp.OnCnp(9 * kUs);  // a whole period later: at once
  EXPECT_EQ(rp.rate_decreases(), 3u);
  EXPECT_RATE(rp.current_rate_bps(), 12.5e9);
}

TEST(ReactionPoint, RecoversToLineRateAndGoesIdle) {
  ReactionPoint rp(PaperProfile(100 * kG));
  rp.OnCnp(0);
  // 100 alpha periods in one Advance (the batched path): (255/256)^100.
  rp.Advance(100 * 55 * kUs);
  EXPECT_NEAR(rp.alpha(), std::pow(1020.0 / 1024, 100), 1e-12);
  rp.Advance(2'000'000 * kUs);
  EXPECT_EQ(rp.current_rate_bps(), 100 * kG);
  EXPECT_FALSE(rp.rate_limited());
  EXPECT_EQ(rp.alpha(), 0.0);  // below 2^-40: timer stopped
  EXPECT_EQ(rp.next_deadline_ns(), UINT64_MAX);
}

TEST(ReactionPoint, ResultDoesNotDependOnAdvanceFrequency) {
  const DcqcnParams p = Mlx5Profile(25 * kG);
  ReactionPoint often(p), rarely(p);
  // The same CNP and byte schedule; `often` is advanced every 100 ns.
  uint64_t t = 0;
  for (int step = 0; step < 20000; ++step, t += 100) {
    often.Advance(t);
    if (step % 97 == 0) {
      often.OnCnp(t);
      rarely.OnCnp(t);
    }
    if (step % 3 == 0) {
      often.OnBytesSent(1024, t);
      rarely.OnBytesSent(1024, t);
    }
  }
  often.Advance(t);
  rarely.Advance(t);
  EXPECT_EQ(often.rate_decreases(), rarely.rate_decreases());
  EXPECT_NEAR(often.alpha(), rarely.alpha(), 1e-12);
  EXPECT_RATE(often.current_rate_bps(), static_cast<double>(rarely.current_rate_bps()));
  EXPECT_EQ(often.timer_stage(), rarely.timer_stage());
  EXPECT_EQ(often.byte_stage(), rarely.byte_stage());
}

TEST(Pacer, SpacesPacketsAtTheRate) {
  Pacer pacer;
  EXPECT_TRUE(pacer.MaySend(0));
  pacer.OnSent(1000, 0, 10 * kG);  // 1000 B at 10 Gb/s: 800 ns
  EXPECT_EQ(pacer.next_send_ns(), 800u);
  EXPECT_FALSE(pacer.MaySend(799));
  EXPECT_TRUE(pacer.MaySend(800));
  pacer.OnSent(1000, 800, 10 * kG);
  EXPECT_EQ(pacer.next_send_ns(), 1600u);
  // Sending late does not earn credit: next = now + cost.
  pacer.OnSent(1000, 5000, 10 * kG);
  EXPECT_EQ(pacer.next_send_ns(), 5800u);
  // Rate change: 1000 B at 1 Gb/s is 8 us.
  pacer.OnSent(1000, 5800, 1 * kG);
  EXPECT_EQ(pacer.next_send_ns(), 13800u);
}

TEST(Pacer, RetimeRespacesTheGapInProgress) {
  Pacer pacer;
  pacer.Retime(10 * kG);  // nothing sent yet: only the rate
  EXPECT_EQ(pacer.next_send_ns(), 0u);
  pacer.OnSent(1000, 1000, 1 * kG);  // 8 us gap: next at 9000
  EXPECT_EQ(pacer.next_send_ns(), 9000u);
  pacer.Retime(10 * kG);  // rate up: the same packet at 10 Gb/s ends at 1800
  EXPECT_EQ(pacer.next_send_ns(), 1800u);
  pacer.Retime(500'000'000);  // rate down: 16 us
  EXPECT_EQ(pacer.next_send_ns(), 17000u);
  EXPECT_EQ(pacer.rate_bps(), 500'000'000u);
}

TEST(Pacer, FractionalNanosecondsAccumulate) {
  Pacer pacer;
  // 1000 B at 3 Gb/s = 2666.67 ns; three back-to-back packets take 8000 ns.
  uint64_t t = 0;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pacer.MaySend(t));
    pacer.OnSent(1000, t, 3 * kG);
    t = pacer.next_send_ns();
  }
  EXPECT_NEAR(static_cast<double>(t), 8000.0, 1.0);
  // A million packets keep the exact long-run rate (error < 1 ns per 2^16 packets).
  for (int i = 3; i < 1'000'000; ++i) {
    pacer.OnSent(1000, t, 3 * kG);
    t = pacer.next_send_ns();
  }
  EXPECT_NEAR(static_cast<double>(t), 1e6 * 8000.0 / 3.0, 20.0);
}

}  // namespace
}  // namespace droce::cc
