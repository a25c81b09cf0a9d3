#pragma once
// A CLOCK_MONOTONIC in nanoseconds that costs one rdtsc and a multiply
// (doc/verbs.md "The clock"). The verbs data path reads the clock on
// ibv_post_send and ibv_poll_cq (a burst's deferring posts one in four, a
// locked poll once); the vDSO's clock_gettime (an lfence, the
// rdtsc, a seqlock and the scaling, behind a call through the vDSO) took
// ~7 % of a 64 B ib_write_bw client's CPU.
//
// The tick rate is measured, not assumed. The first calls read the
// reference clock (CLOCK_MONOTONIC) and note one (ticks, ns) pair; the
// first call kCalibrationNs later notes a second one, and from then on the
// clock is anchor_ns + (ticks - anchor_ticks) * scale. At most once per
// kCheckNs a call compares it with the reference: within kMaxErrorNs the
// clock re-anchors there, with the scale measured from the first pair (a
// longer baseline each time, so the rate error shrinks), and never steps
// back; further off (a TSC that is not invariant after all, a VM migrated
// to another host) it reads the reference from then on, for good. Without
// an invariant TSC (CPUID) or off x86-64 it is the reference only.
//
// Every thread may call Now() at once: the parameters are published under
// a sequence lock (a reader that races a re-anchoring reads the reference
// instead). Two threads' readings may differ by the pairing error (tens of
// ns), as clock_gettime's may across CPUs.

#include <atomic>
#include <cstdint>

namespace droce::verbs {

class TscClock {
 public:
  using Source = uint64_t (*)();
  static constexpr uint64_t kCalibrationNs = 20'000'000;  // 20 ms between the first two pairs
  static constexpr uint64_t kCheckNs = 1'000'000'000;     // a reference check at most once a second
  static constexpr uint64_t kMaxErrorNs = 1'000'000;      // more than 1 ms off: the reference for good

  // ticks: the counter (nullptr: rdtsc, inline); reference: CLOCK_MONOTONIC in ns. usable =
  // false: the reference clock only. The default constructor takes the
  // real ones (usable when the CPU has an invariant TSC, which the first
  // call asks): constant-initialised, so a clock at namespace scope needs
  // no guard on its reads (NowNs).
  TscClock(Source ticks, Source reference, bool usable);
  constexpr TscClock() : ticks_(nullptr), reference_(&MonotonicNs), state_(kProbe) {}

  uint64_t Now() {
    if (state_.load(std::memory_order_acquire) != kScaled) return Slow();
    const uint32_t seq = seq_.load(std::memory_order_acquire);
    const uint64_t at = anchor_ticks_.load(std::memory_order_relaxed);
    const uint64_t an = anchor_ns_.load(std::memory_order_relaxed);
    const uint64_t scale = scale_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if ((seq & 1) != 0 || seq_.load(std::memory_order_relaxed) != seq) return reference_();  // being re-anchored
    const uint64_t t = Ticks();
    // Unsigned: ticks behind the anchor (a counter reset) also read as due.
    if (t - at >= check_period_ticks_) return Check();
    return an + static_cast<uint64_t>((static_cast<unsigned __int128>(t - at) * scale) >> kShift);
  }

  // Whether Now() is tick-based now (tests).
  bool scaled() const { return state_.load(std::memory_order_acquire) == kScaled; }
  // Set once a reference check found the ticks too far off.
  bool fell_back() const { return fell_back_.load(std::memory_order_relaxed); }

  static uint64_t Rdtsc();
  static uint64_t MonotonicNs();
  // The CPU says its TSC runs at a constant rate in every state (CPUID
  // 0x80000007 EDX bit 8), on x86-64.
  static bool InvariantTsc();

 private:
  // kProbe: the default constructor's, until the first call asks the CPU.
  enum : int { kUncalibrated = 0, kCalibrating = 1, kScaled = 2, kReference = 3, kProbe = 4 };
  static constexpr int kShift = 32;  // scale_: ns per tick in 32.32 fixed point

  // The counter: rdtsc inline (no call) unless a test gave its own.
  uint64_t Ticks() const {
#if defined(__x86_64__)
    if (ticks_ == nullptr) return __builtin_ia32_rdtsc();
#endif
    return ticks_();
  }
  // A (ticks, ns) pair read close together: ticks midway between two reads
  // around the reference, the tightest of a few tries (a preemption
  // between the reads stretches one).
  void Pair(uint64_t* ticks, uint64_t* ns) const;
  uint64_t Slow();                // before the scale (or after a fall-back)
  uint64_t Check();               // the periodic reference check
  void Publish(uint64_t ticks, uint64_t ns, uint64_t scale);

  Source ticks_;  // nullptr: rdtsc
  Source reference_;
  std::atomic<int> state_{kUncalibrated};
  std::atomic<bool> first_taken_{false};
  std::atomic<bool> first_ready_{false};
  std::atomic<bool> checking_{false};
  std::atomic<bool> fell_back_{false};
  uint64_t first_ticks_ = 0;  // written once, before first_ready_
  uint64_t first_ns_ = 0;
  uint64_t check_period_ticks_ = ~uint64_t{0};  // written once, before state_ becomes kScaled
  std::atomic<uint32_t> seq_{0};
  std::atomic<uint64_t> anchor_ticks_{0};
  std::atomic<uint64_t> anchor_ns_{0};
  std::atomic<uint64_t> scale_{0};
};

}  // namespace droce::verbs
