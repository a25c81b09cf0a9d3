// The verbs runtime's device mutex (Runtime::mu): a futex lock whose unlock
// is a plain store.
//
// Why not std::mutex: its unlock is an xchg, and a locked instruction waits
// until every store before it has reached the cache. A doorbell's last
// stores go to the wire's shared memory (the memif ring and buffer, the
// fabric's ring), whose cache lines the peer's CPU has just read; on the
// 2-core VM perf put 14 % of `ib_write_bw -s 64`'s posting thread on that
// one xchg (doc/verbs.md "The device mutex").
//
// How a waiter is not missed without a fence in unlock(): unlock() stores
// the word, then loads `sleepers_`; the store may still sit in the store
// buffer when the load runs (x86 lets a load pass an earlier store). A
// thread about to sleep counts itself in `sleepers_` and then calls
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full memory
// barrier on every CPU running a thread of this process: after it, either
// the unlocker's store is visible to the sleeper (whose try_lock then
// succeeds, or whose FUTEX_WAIT finds the word changed), or the unlocker's
// load comes after the barrier and sees the sleeper (and wakes it). The
// rare side pays a system call; the common side pays nothing (the
// asymmetric fence of liburcu and folly). Without membarrier (an old
// kernel, a seccomp filter) unlock() uses a full fence instead: correct,
// as slow as before.
#ifndef DROCE_DRIVERS_VERBS_DEVICE_MUTEX_H_
#define DROCE_DRIVERS_VERBS_DEVICE_MUTEX_H_

#include <atomic>
#include <cstdint>

namespace droce::verbs {

class DeviceMutex {
 public:
  DeviceMutex();
  // Tests choose; a runtime's is what the kernel allows (asymmetric()).
  explicit DeviceMutex(bool asymmetric_if_possible);
  DeviceMutex(const DeviceMutex&) = delete;
  DeviceMutex& operator=(const DeviceMutex&) = delete;

  bool try_lock() {
    uint32_t expected = 0;
    if (!word_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed)) return false;
    Changed();
    return true;
  }
  void lock() {
    if (!try_lock()) LockSlow();
  }
  void unlock() {
    word_.store(0, std::memory_order_release);
    if (asymmetric_) {
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler keeps the order; membarrier does the rest
    } else {
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_relaxed) != 0) Wake();
  }

  // How many times it was taken, plus the holders' Changed() calls: while
  // it reads the same, no thread has held the device since (a poll_cq that
  // found its CQ empty and the device idle may answer from that without the
  // lock, Runtime::QuietPoll). A plain store under the lock: one writer.
  uint64_t holds() const { return holds_.load(std::memory_order_relaxed); }
  // The holder changed what the device will do later in the same hold
  // (doorbells a poster left for it): a later holds() reads differently.
  void Changed() { holds_.store(holds_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

  // Whether some thread holds it (a snapshot; RingPosted's hand-over wait).
  bool locked() const { return word_.load(std::memory_order_relaxed) != 0; }

  // Program threads waiting for the lock (AppLock): the progress thread
  // does not try-lock while one is (runtime.h).
  std::atomic<int> app_waiting{0};

  // Whether unlock() relies on membarrier (false: a full fence).
  bool asymmetric() const { return asymmetric_; }
  // Sleeps that ended by their time bound rather than a wake-up: a holder
  // that kept the lock that long, or a missed wake-up (tests expect none).
  uint64_t timed_out_waits() const { return timed_out_waits_.load(std::memory_order_relaxed); }
  static constexpr long kSleepBoundNs = 100'000'000;
  static constexpr long kUnfencedSleepBoundNs = 100'000;  // membarrier refused (device_mutex.cc)

 private:
  void LockSlow();
  void Wake();

  std::atomic<uint32_t> word_{0};      // 0 free, 1 held
  std::atomic<uint64_t> holds_{0};     // see holds()
  std::atomic<uint32_t> sleepers_{0};  // threads in (or about to enter) FUTEX_WAIT
  const bool asymmetric_;
  std::atomic<uint64_t> timed_out_waits_{0};
};

// What one hold of a DeviceMutex saw, true for as long as nobody holds it
// after: a poll_cq that found its CQ empty and the device idle answers the
// polls after it from that, without the lock (Runtime::QuietPoll). Used by
// any program thread, hence atomics; relaxed, as a stale answer is only an
// empty poll that linearises before the holder that changed things.
class HoldSnapshot {
 public:
  // Caller holds mu: the next `uses` Use() calls may answer from this hold.
  void Take(const DeviceMutex& mu, uint32_t uses) {
    hold_.store(mu.holds(), std::memory_order_relaxed);
    left_.store(uses, std::memory_order_relaxed);
  }
  // Whether nobody has held mu since Take and a use is left (it takes one).
  bool Use(const DeviceMutex& mu) {
    const uint32_t left = left_.load(std::memory_order_relaxed);
    if (left == 0 || hold_.load(std::memory_order_relaxed) != mu.holds()) return false;
    left_.store(left - 1, std::memory_order_relaxed);
    return true;
  }

 private:
  std::atomic<uint64_t> hold_{0};  // holds() at Take; a mutex's holds() is 1 or more once taken
  std::atomic<uint32_t> left_{0};
};

// A clock reading that the next hold of a DeviceMutex may take as its time:
// the progress thread's pass reads the clock once, for its decisions and
// for its poll round (ProgressThread::Run, PollOnce). The engine takes
// unsigned differences of successive round times (timeouts, CNP spacing),
// which must not step back, and a thread that held the device after the
// reading may have given it a later time. So the reading serves only the
// first hold since it was taken: the hold count noted before the reading,
// with the lock free then (a holder that takes it after that look counts a
// hold, and one that held it before let go, its own time read, before the
// reading). Any other hold reads the clock afresh. One thread's.
class RoundTime {
 public:
  // Reads clock(), the mutex's hold count and state noted first.
  template <typename Clock>
  uint64_t Read(const DeviceMutex& mu, Clock&& clock) {
    hold_ = mu.holds();
    std::atomic_thread_fence(std::memory_order_acquire);  // the look at the lock after the count
    usable_ = !mu.locked();
    ns_ = clock();
    return ns_;
  }
  // The reading may be old (the thread made a system call since): the next hold reads afresh.
  void Drop() { usable_ = false; }
  // The caller has just taken mu: the time for its hold. A reading serves one hold.
  template <typename Clock>
  uint64_t ForHold(const DeviceMutex& mu, Clock&& clock) {
    const bool usable = usable_ && mu.holds() == hold_ + 1;
    usable_ = false;
    return usable ? ns_ : clock();
  }

 private:
  uint64_t hold_ = 0;
  uint64_t ns_ = 0;
  bool usable_ = false;
};

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_DEVICE_MUTEX_H_
