#include "drivers/verbs/arrival_wait.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"

namespace droce::verbs {
namespace {

// A wire with an arrival descriptor as memif's: frames arrive from another
// thread, which writes the eventfd only while the receiver asked for it.
struct FakeWire {
  FakeWire() : efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~FakeWire() { close(efd); }
  // The sender: a frame, and a notification if asked for. Sequentially
  // consistent against Arm's store and Poll's load, as the memif ring's
  // index and flags are against each other (a missed notification is then
  // the receiver's protocol's fault, which is what is under test).
  void Send() {
    frames.fetch_add(1);
    if (armed.load()) {
      const uint64_t one = 1;
      (void)!write(efd, &one, sizeof one);
    }
  }
  int Arm() {
    // A frame that lands after the receiver's last empty look but before
    // its request is seen: it sends no notification.
    if (arrive_unnotified_at_arm) frames.fetch_add(1);
    armed.store(true);
    ++arms;
    return efd;
  }
  uint32_t Poll() {
    const uint32_t n = frames.exchange(0);
    received += n;
    return n;
  }
  void Disarm() {
    armed.store(false);
    uint64_t v = 0;
    (void)!read(efd, &v, sizeof v);
  }
  void Lock() { mu.lock(); }
  void Unlock() { mu.unlock(); }

  int efd;
  std::mutex mu;
  std::atomic<bool> armed{false};
  std::atomic<uint32_t> frames{0};
  bool arrive_unnotified_at_arm = false;
  uint64_t arms = 0;
  uint64_t received = 0;
};

// A watchdog period no test waits out unless a wake-up was lost.
constexpr uint64_t kLongPeriodNs = 5'000'000'000;

uint64_t Now() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// Every frame sent while the receiver sleeps wakes it through the
// descriptor: 300 frames, each found by a wait, none left to the watchdog.
// A wake-up with no frame is allowed, as memif's is: a sender preempted
// between reading the request and writing the descriptor writes it after
// the receiver found the frame by looking and asked again (it then waits
// again for the round's frame).
TEST(ArrivalWait, EveryArrivalDuringTheWaitWakesIt) {
  FakeWire wire;
  ArrivalWait wait(kLongPeriodNs);
  ASSERT_TRUE(wait.usable());
  constexpr int kRounds = 300;
  std::atomic<int> consumed{0};
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (int i = 0; i < kRounds && !stop.load(); ++i) {
      while (!wire.armed.load() && !stop.load()) std::this_thread::yield();
      if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // into the sleep
      wire.Send();
      while (consumed.load() <= i && !stop.load()) std::this_thread::yield();
    }
  });
  int arrivals = 0, looks = 0, watchdogs = 0, empty_wakeups = 0;
  for (int i = 0; i < kRounds;) {
    uint32_t work = 0;
    wire.Lock();
    const ArrivalWait::End end = wait.Wait(wire, Now(), &work);
    ASSERT_NE(end, ArrivalWait::End::kNotArmed);
    if (end == ArrivalWait::End::kArrival) ++arrivals;
    if (end == ArrivalWait::End::kWork) ++looks;
    if (end == ArrivalWait::End::kWatchdog) {
      ++watchdogs;  // a lost wake-up: stop at the first (each costs a period)
      break;
    }
    if (end != ArrivalWait::End::kWork) {
      wire.Lock();
      work = wire.Poll();
      wire.Unlock();
    }
    if (work == 0 && end == ArrivalWait::End::kArrival) {
      ++empty_wakeups;  // a late notification of the frame before
      --arrivals;
      continue;
    }
    EXPECT_EQ(work, 1u) << "round " << i;
    consumed.store(++i);
  }
  stop.store(true);
  sender.join();
  ASSERT_EQ(watchdogs, 0) << "a frame sent during a wait did not wake it";
  // At most one late notification per frame; a wait that returns without
  // sleeping would make many more.
  EXPECT_LE(empty_wakeups, kRounds);
  EXPECT_EQ(arrivals + looks, kRounds);
  EXPECT_EQ(wire.received, uint64_t{kRounds});
  EXPECT_FALSE(wire.armed.load()) << "the request is withdrawn after each wait";
}

// A frame that arrived before the request was seen sends no notification:
// the look after arming finds it, and the wait does not sleep at all.
TEST(ArrivalWait, AFrameBeforeTheRequestIsFoundByTheLookAfterArming) {
  FakeWire wire;
  wire.arrive_unnotified_at_arm = true;
  ArrivalWait wait(kLongPeriodNs);
  for (int i = 0; i < 100; ++i) {
    uint32_t work = 0;
    wire.Lock();
    ASSERT_EQ(wait.Wait(wire, Now(), &work), ArrivalWait::End::kWork) << "round " << i;
    EXPECT_EQ(work, 1u);
  }
  EXPECT_EQ(wire.received, 100u);
  EXPECT_FALSE(wire.armed.load());
}

// Nothing arrives: the watchdog ends the wait, and one armed period bounds
// every wait that starts within it (no timer per wait).
TEST(ArrivalWait, TheWatchdogEndsAWaitNothingEnds) {
  FakeWire wire;
  constexpr uint64_t kPeriodNs = 20'000'000;
  ArrivalWait wait(kPeriodNs);
  const uint64_t start = Now();
  uint32_t work = 0;
  wire.Lock();
  EXPECT_EQ(wait.Wait(wire, start, &work), ArrivalWait::End::kWatchdog);
  EXPECT_GE(Now() - start, kPeriodNs / 2);
  wire.Lock();
  EXPECT_EQ(wait.Wait(wire, Now(), &work), ArrivalWait::End::kWatchdog);
  EXPECT_FALSE(wire.armed.load());
}

// A wire that cannot notify: no sleep, the device let go.
TEST(ArrivalWait, AWireThatCannotNotifyIsNotSleptOn) {
  struct NoWire {
    int Arm() { return -1; }
    uint32_t Poll() { return 0; }
    void Disarm() { ++disarms; }
    void Lock() { locked = true; }
    void Unlock() { locked = false; }
    bool locked = true;
    int disarms = 0;
  } w;
  ArrivalWait wait(kLongPeriodNs);
  uint32_t work = 7;
  EXPECT_EQ(wait.Wait(w, Now(), &work), ArrivalWait::End::kNotArmed);
  EXPECT_EQ(work, 0u);
  EXPECT_FALSE(w.locked);
  EXPECT_EQ(w.disarms, 0);
}

}  // namespace
}  // namespace droce::verbs
