#include "drivers/verbs/tsc_clock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace droce::verbs {
namespace {

// The default clock is constant-initialised (NowNs reads one at namespace
// scope with no guard): constinit does not compile otherwise. Its first
// reads, before it asks the CPU whether the TSC is invariant, are
// CLOCK_MONOTONIC's.
constinit TscClock g_constant_clock;
TEST(TscClock, TheDefaultClockIsConstantInitialisedAndReadsFromTheFirstCall) {
  const uint64_t before = TscClock::MonotonicNs();
  const uint64_t now = g_constant_clock.Now();
  const uint64_t after = TscClock::MonotonicNs();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
  EXPECT_FALSE(g_constant_clock.scaled());
}

// The real clock against CLOCK_MONOTONIC: once scaled, every reading lies
// between two reference readings around it (give or take a bound far below
// anything the data path times), and a thread's readings never go back.
TEST(TscClock, AgreesWithClockMonotonic) {
  if (!TscClock::InvariantTsc()) GTEST_SKIP() << "no invariant TSC: the clock is CLOCK_MONOTONIC itself";
  TscClock clock;
  const uint64_t start = TscClock::MonotonicNs();
  while (!clock.scaled() && TscClock::MonotonicNs() - start < 1'000'000'000) clock.Now();
  ASSERT_TRUE(clock.scaled()) << "not calibrated after 1 s";
  constexpr uint64_t kBoundNs = 20'000;  // 20 us: the rate error over 0.2 s plus preemptions
  uint64_t prev = 0, worst = 0, outside = 0, n = 0;
  const uint64_t until = TscClock::MonotonicNs() + 200'000'000;
  for (uint64_t before = 0; (before = TscClock::MonotonicNs()) < until; ++n) {
    const uint64_t now = clock.Now();
    const uint64_t after = TscClock::MonotonicNs();
    ASSERT_GE(now, prev) << "went back after " << n << " readings";
    prev = now;
    const uint64_t off = now + kBoundNs < before ? before - now : now > after + kBoundNs ? now - after : 0;
    if (off > 0) ++outside;
    if (off > worst) worst = off;
  }
  // A preemption between the three reads can push one pair apart: allow a
  // few, never many.
  EXPECT_LE(outside, n / 1000 + 3) << "worst " << worst << " ns off, of " << n;
  EXPECT_FALSE(clock.fell_back());
}

// Several threads across a re-anchoring (the first check comes a second
// after the calibration): each thread's readings never go back and stay
// within the bound of CLOCK_MONOTONIC read around them.
TEST(TscClock, ThreadsAcrossAReanchoring) {
  if (!TscClock::InvariantTsc()) GTEST_SKIP() << "no invariant TSC: the clock is CLOCK_MONOTONIC itself";
  TscClock clock;
  const uint64_t start = TscClock::MonotonicNs();
  while (!clock.scaled() && TscClock::MonotonicNs() - start < 1'000'000'000) clock.Now();
  ASSERT_TRUE(clock.scaled());
  constexpr uint64_t kBoundNs = 20'000;
  const uint64_t until = TscClock::MonotonicNs() + TscClock::kCheckNs + 200'000'000;
  std::atomic<uint64_t> back{0}, outside{0}, total{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&] {
      uint64_t prev = 0, n = 0, b = 0, o = 0;
      for (uint64_t before = 0; (before = TscClock::MonotonicNs()) < until; ++n) {
        const uint64_t now = clock.Now();
        const uint64_t after = TscClock::MonotonicNs();
        if (now < prev) ++b;
        prev = now;
        if (now + kBoundNs < before || now > after + kBoundNs) ++o;
      }
      back += b;
      outside += o;
      total += n;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(back.load(), 0u);
  EXPECT_LE(outside.load(), total.load() / 1000 + 10) << "of " << total.load();
  EXPECT_FALSE(clock.fell_back());
}

// Fake sources: the counter runs at 3 ticks per ns from an arbitrary start.
uint64_t g_ticks = 0;
uint64_t g_ns = 0;
uint64_t FakeTicks() { return g_ticks; }
uint64_t FakeNs() { return g_ns; }
void Advance(uint64_t ns, uint64_t ticks_per_ns = 3) {
  g_ns += ns;
  g_ticks += ns * ticks_per_ns;
}

// Fake time at some start, then a clock on it through its calibration.
struct Calibrated {
  Calibrated() {
    clock.Now();  // the first pair
    Advance(TscClock::kCalibrationNs);
    clock.Now();  // the second: scaled from here
  }
  static bool Reset() {
    g_ticks = 1'000'000'007;
    g_ns = 5'000'000'000;
    return true;
  }
  bool reset = Reset();
  TscClock clock{&FakeTicks, &FakeNs, true};
};

TEST(TscClock, ScalesTicksToTheReference) {
  Calibrated c;
  TscClock& clock = c.clock;
  ASSERT_TRUE(clock.scaled());
  Advance(123'456'789);
  // The fast path does not read the reference: hide it to see that.
  const uint64_t expect = g_ns;
  g_ns = 0;
  EXPECT_NEAR(static_cast<double>(clock.Now()), static_cast<double>(expect), 2.0);
  g_ns = expect;
}

TEST(TscClock, ReferenceOnlyWhenNotUsable) {
  g_ns = 42;
  g_ticks = 7;
  TscClock clock(&FakeTicks, &FakeNs, false);
  for (int i = 0; i < 3; ++i) {
    Advance(TscClock::kCalibrationNs);
    EXPECT_EQ(clock.Now(), g_ns);
  }
  EXPECT_FALSE(clock.scaled());
}

// Before the calibration window has passed the clock reads the reference.
TEST(TscClock, ReferenceWhileCalibrating) {
  g_ticks = 100;
  g_ns = 1'000;
  TscClock clock(&FakeTicks, &FakeNs, true);
  EXPECT_EQ(clock.Now(), 1'000u);
  Advance(TscClock::kCalibrationNs - 1);
  EXPECT_EQ(clock.Now(), g_ns);
  EXPECT_FALSE(clock.scaled());
  Advance(1);
  EXPECT_EQ(clock.Now(), g_ns);
  EXPECT_TRUE(clock.scaled());
}

// A counter that changes rate (not invariant after all): the first check
// after a second finds it 1 % off — 10 ms, beyond kMaxErrorNs — and the
// clock reads the reference from then on.
TEST(TscClock, FallsBackWhenTheRateChanges) {
  Calibrated c;
  TscClock& clock = c.clock;
  Advance(TscClock::kCheckNs / 2);
  EXPECT_NEAR(static_cast<double>(clock.Now()), static_cast<double>(g_ns), 2.0);
  g_ns += TscClock::kCheckNs;
  g_ticks += TscClock::kCheckNs * 3 * 101 / 100;
  const uint64_t now = clock.Now();
  EXPECT_TRUE(clock.fell_back());
  EXPECT_EQ(now, g_ns);
  Advance(1'000);
  EXPECT_EQ(clock.Now(), g_ns);
}

// A counter that went back (reset): checked at once, not after a second.
TEST(TscClock, FallsBackWhenTheCounterGoesBack) {
  Calibrated c;
  TscClock& clock = c.clock;
  Advance(1'000);
  clock.Now();
  g_ticks -= 10'000'000;
  g_ns += 1'000;
  EXPECT_EQ(clock.Now(), g_ns);
  EXPECT_TRUE(clock.fell_back());
}

// A small rate error (the reference slewed by NTP, 100 ppm): the check
// re-anchors at the reference instead of falling back, and the readings
// never go back across it.
TEST(TscClock, ReanchorsOnSmallDriftWithoutGoingBack) {
  Calibrated c;
  TscClock& clock = c.clock;
  uint64_t prev = 0;
  for (int i = 0; i < 5; ++i) {
    // The reference runs 100 ppm slower than the counter says.
    for (int k = 0; k < 10; ++k) {
      g_ticks += TscClock::kCheckNs / 10 * 3;
      g_ns += TscClock::kCheckNs / 10 - TscClock::kCheckNs / 10 / 10'000;
      for (int j = 0; j < 2; ++j) {  // and 1 us later (the step a re-anchoring could take back)
        const uint64_t now = clock.Now();
        EXPECT_GE(now, prev);
        prev = now;
        Advance(1'000);
      }
    }
  }
  EXPECT_FALSE(clock.fell_back());
  EXPECT_TRUE(clock.scaled());
  // Re-anchored: within one check period's drift (100 us) of the reference.
  EXPECT_NEAR(static_cast<double>(clock.Now()), static_cast<double>(g_ns), 200'000.0);
}

}  // namespace
}  // namespace droce::verbs
