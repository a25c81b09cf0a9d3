#include "drivers/verbs/tsc_clock.h"

#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

namespace droce::verbs {

uint64_t TscClock::Rdtsc() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

uint64_t TscClock::MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

bool TscClock::InvariantTsc() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0x80000000u, nullptr) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;
#else
  return false;
#endif
}

TscClock::TscClock(Source ticks, Source reference, bool usable) : ticks_(ticks), reference_(reference) {
#if !defined(__x86_64__)
  if (ticks == nullptr) usable = false;  // no rdtsc here
#endif
  if (!usable) state_.store(kReference, std::memory_order_relaxed);
}


void TscClock::Pair(uint64_t* ticks, uint64_t* ns) const {
  uint64_t best = ~uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const uint64_t t0 = Ticks();
    const uint64_t r = reference_();
    const uint64_t t1 = Ticks();
    if (t1 < t0) continue;
    if (t1 - t0 < best) {
      best = t1 - t0;
      *ticks = t0 + (t1 - t0) / 2;
      *ns = r;
    }
  }
  if (best == ~uint64_t{0}) {  // the counter went back every time: pair it anyway
    *ticks = Ticks();
    *ns = reference_();
  }
}

void TscClock::Publish(uint64_t ticks, uint64_t ns, uint64_t scale) {
  const uint32_t seq = seq_.load(std::memory_order_relaxed);
  seq_.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  anchor_ticks_.store(ticks, std::memory_order_relaxed);
  anchor_ns_.store(ns, std::memory_order_relaxed);
  scale_.store(scale, std::memory_order_relaxed);
  seq_.store(seq + 2, std::memory_order_release);
}

uint64_t TscClock::Slow() {
  if (int probe = kProbe; state_.load(std::memory_order_acquire) == kProbe) {
    // Racing first calls all find the same answer; one stores it.
    state_.compare_exchange_strong(probe, InvariantTsc() ? kUncalibrated : kReference, std::memory_order_acq_rel);
  }
  const uint64_t now = reference_();
  if (state_.load(std::memory_order_acquire) == kReference) return now;
  if (!first_ready_.load(std::memory_order_acquire)) {
    bool expected = false;
    if (first_taken_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      Pair(&first_ticks_, &first_ns_);
      first_ready_.store(true, std::memory_order_release);
    }
    return now;
  }
  if (now < first_ns_ + kCalibrationNs) return now;
  int expected = kUncalibrated;
  if (!state_.compare_exchange_strong(expected, kCalibrating, std::memory_order_acq_rel)) return now;
  uint64_t t = 0, ns = 0;
  Pair(&t, &ns);
  if (t <= first_ticks_ || ns <= first_ns_) {  // a counter that does not count
    state_.store(kReference, std::memory_order_release);
    return now;
  }
  const uint64_t scale =
      static_cast<uint64_t>((static_cast<unsigned __int128>(ns - first_ns_) << kShift) / (t - first_ticks_));
  const uint64_t period = static_cast<uint64_t>((static_cast<unsigned __int128>(kCheckNs) << kShift) / scale);
  if (scale == 0 || period == 0) {
    state_.store(kReference, std::memory_order_release);
    return now;
  }
  check_period_ticks_ = period;
  Publish(t, ns, scale);
  state_.store(kScaled, std::memory_order_release);
  return now;
}

uint64_t TscClock::Check() {
  bool expected = false;
  if (!checking_.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) return reference_();
  // Only a checker publishes (after the calibration): holding checking_,
  // these are the last published values, not a mix of two.
  const uint64_t at = anchor_ticks_.load(std::memory_order_relaxed);
  const uint64_t an = anchor_ns_.load(std::memory_order_relaxed);
  const uint64_t scale = scale_.load(std::memory_order_relaxed);
  uint64_t pt = 0, ns = 0;
  Pair(&pt, &ns);
  const bool counted = pt >= at && pt > first_ticks_;
  const uint64_t mine =
      counted ? an + static_cast<uint64_t>((static_cast<unsigned __int128>(pt - at) * scale) >> kShift) : 0;
  const uint64_t error = mine > ns ? mine - ns : ns - mine;
  if (!counted || error > kMaxErrorNs) {
    fell_back_.store(true, std::memory_order_relaxed);
    state_.store(kReference, std::memory_order_release);
    checking_.store(false, std::memory_order_release);
    return ns;
  }
  // Re-anchor at the reference, the scale over the whole baseline since
  // the first pair; never behind what the clock has already read.
  const uint64_t new_scale =
      static_cast<uint64_t>((static_cast<unsigned __int128>(ns - first_ns_) << kShift) / (pt - first_ticks_));
  Publish(pt, mine > ns ? mine : ns, new_scale != 0 ? new_scale : scale);
  checking_.store(false, std::memory_order_release);
  return mine > ns ? mine : ns;
}

}  // namespace droce::verbs
