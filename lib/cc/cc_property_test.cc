// Every algorithm, driven through the interface with random and absurd
// inputs in virtual time (negative-looking, huge and wrapping RTTs, forged
// telemetry, bursts of CNPs and timeouts, time jumps): its rate stays in
// [min rate, line rate] and its window in [1, its maximum] after every event,
// and once the inputs are honest again (short RTTs, an idle link, no CNPs) it
// is back at line rate within its own recovery time.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "cc/congestion_control.h"

namespace droce::cc {
namespace {

constexpr uint64_t kLine = 25'000'000'000ull;

struct Case {
  const char* algorithm;
  const char* settings;
  const char* min_rate_param;
  double min_rate_scale;  // to b/s
};

const Case kCases[] = {
    {"dcqcn", "", "rpg_min_rate_mbps", 1e6},
    {"dcqcn", "rpg_time_reset_us=300,rpg_byte_reset=32767,rpg_threshold=1,rpg_ai_rate_mbps=5,rpg_hai_rate_mbps=50,"
              "rate_reduce_monitor_period_us=4,dce_tcp_g=1019,dce_tcp_rtt_us=1,initial_alpha_value=1023",
     "rpg_min_rate_mbps", 1e6},
    {"timely", "", "min_rate_bps", 1},
    {"hpcc", "base_rtt_ns=8000", "min_rate_bps", 1},
    {"swift", "base_target_ns=20000", "min_rate_bps", 1},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.algorithm << " " << c.settings; }

class Checker {
 public:
  Checker(const Case& c, uint64_t seed) : rng_(seed) {
    auto cfg = ParseConfig(c.algorithm, c.settings, kLine);
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    cfg_ = *cfg;
    double v = 0;
    EXPECT_TRUE(GetParam(cfg_, c.min_rate_param, &v));
    min_rate_ = static_cast<uint64_t>(v * c.min_rate_scale);
    cc_.Start(cfg_.ops, cfg_.params);
    Check("start");
  }

  uint64_t U64() { return rng_(); }
  uint32_t U32() { return static_cast<uint32_t>(rng_()); }
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

  // An RTT as a broken or hostile clock may produce.
  uint64_t AbsurdRtt() {
    switch (Below(7)) {
      case 0: return 0;
      case 1: return 1;
      case 2: return UINT64_MAX;
      case 3: return UINT64_MAX - Below(1000);  // "negative": a send time after the ACK, unsigned
      case 4: return uint64_t{1} << (20 + Below(44));
      case 5: return U64();
      default: return Below(2'000'000);
    }
  }

  wire::IntStack AbsurdTelemetry() {
    wire::IntStack t;
    t.hops = static_cast<uint8_t>(Below(wire::kIntMaxHops + 3));  // may claim more hops than fit
    t.slots = t.hops;
    t.echo = Below(2) == 0;
    for (auto& h : t.hop) {
      h.timestamp_ns = Below(3) == 0 ? last_ts_ : U32();
      h.tx_bytes = U32();
      h.qlen_bytes = Below(2) == 0 ? 0xFFFFFFFFu : U32();
      h.line_rate_mbps = Below(4) == 0 ? 0 : (Below(2) == 0 ? 1 : U32());
    }
    last_ts_ = t.hop[0].timestamp_ns;
    return t;
  }

  void AdvanceTime() {
    switch (Below(10)) {
      case 0: now_ += uint64_t{1} << Below(40); break;  // up to ~18 min at once
      case 1: break;                                       // the same instant
      default: now_ += Below(20'000); break;
    }
  }

  void RandomEvent() {
    AdvanceTime();
    switch (Below(6)) {
      case 0:
        cc_.OnSent(Below(2) == 0 ? Below(10'000) : U32(), now_);
        break;
      case 1:
      case 2: {
        AckSample a;
        a.rtt_ns = AbsurdRtt();
        a.acked_packets = Below(4) == 0 ? U32() : Below(64);
        wire::IntStack t;
        if (Below(2) == 0) {
          t = AbsurdTelemetry();
          a.telemetry = &t;
        }
        cc_.OnAck(a, now_);
        break;
      }
      case 3: cc_.OnCnp(now_); break;
      case 4: cc_.OnTimeout(now_); break;
      default: cc_.OnTimer(now_); break;
    }
    Check("random event");
  }

  // Honest inputs: an ACK of 16 packets every 5 us with a 5 us RTT, a 25 Gb/s
  // hop half used (8 KB per 5 us, no queue), no CNP or timeout. Returns the
  // virtual ns until line rate, UINT64_MAX if not within `limit_ns`.
  uint64_t Recover(uint64_t limit_ns) {
    const uint64_t start = now_;
    uint32_t ts = 0, tx = 0;
    while (now_ - start < limit_ns) {
      if (AtLineRate()) return now_ - start;
      now_ += 5'000;
      cc_.OnTimer(now_);
      cc_.OnSent(1024, now_);
      ts += 5'000;
      tx += 8192;
      wire::IntStack t;
      t.hops = t.slots = 1;
      t.echo = true;
      t.hop[0] = wire::IntHop{ts, tx, 0, 25'000};
      AckSample a;
      a.rtt_ns = 5'000;
      a.acked_packets = 16;
      a.telemetry = &t;
      cc_.OnAck(a, now_);
      Check("recovery");
    }
    return AtLineRate() ? now_ - start : UINT64_MAX;
  }

  const Stats& stats() const { return cc_.stats(); }

  bool AtLineRate() const {
    const Output& o = cc_.output();
    return (!o.rate_limited || o.rate_bps >= kLine) && (o.window_packets == 0 || o.window_packets >= MinFullWindow());
  }

 private:
  // A window that does not limit 25 Gb/s at the honest 5 us RTT (1024 B packets).
  uint32_t MinFullWindow() const { return static_cast<uint32_t>(kLine * 5e-6 / 8 / 1024); }

  void Check(const char* when) {
    const Output& o = cc_.output();
    ASSERT_LE(o.rate_bps, kLine) << when;
    if (o.rate_limited) {
      ASSERT_GE(o.rate_bps, min_rate_) << when;
    }
    ASSERT_LT(o.window_packets, 1'000'000u) << when;
  }

  std::mt19937_64 rng_;
  Config cfg_;
  CongestionControl cc_;
  uint64_t min_rate_ = 0;
  uint64_t now_ = 1;
  uint32_t last_ts_ = 0;
};

class CcProperty : public ::testing::TestWithParam<Case> {};

TEST_P(CcProperty, RateAndWindowStayInBoundsAndRecover) {
  uint64_t slowest = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    Checker c(GetParam(), seed);
    for (int i = 0; i < 3000; ++i) {
      c.RandomEvent();
      if (::testing::Test::HasFatalFailure()) return;
    }
    // The random inputs did push it down (the bounds were tested, not idle).
    EXPECT_GT(c.stats().rate_decreases, 0u) << seed;
    const uint64_t took = c.Recover(200'000'000);  // 200 ms of honest inputs
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_NE(took, UINT64_MAX) << GetParam().algorithm << " seed " << seed << " never got back to line rate";
    slowest = std::max(slowest, took);
  }
  std::printf("%s: back at line rate within %.3f ms of honest inputs (slowest of 60 seeds)\n", GetParam().algorithm,
              slowest / 1e6);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, CcProperty, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.algorithm) + std::to_string(i.index);
                         });

}  // namespace
}  // namespace droce::cc
