#include "drivers/verbs/device_mutex.h"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace droce::verbs {
namespace {

// Several threads increment a plain counter under the lock, with a pause
// between its load and its store: any overlap of two holders loses counts.
void Hammer(DeviceMutex& mu, int threads, int rounds) {
  uint64_t counter = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&mu, &counter, rounds, t] {
      for (int i = 0; i < rounds; ++i) {
        if (t == 0 && i % 2 == 0) {  // one thread also try-locks, as the progress thread does
          while (!mu.try_lock()) std::this_thread::yield();
        } else {
          mu.lock();
        }
        const uint64_t seen = *static_cast<volatile uint64_t*>(&counter);
        for (int k = 0; k < 20; ++k) __builtin_ia32_pause();
        *static_cast<volatile uint64_t*>(&counter) = seen + 1;
        mu.unlock();
      }
    });
  }
  for (std::thread& t : ts) t.join();
  EXPECT_EQ(counter, uint64_t(threads) * rounds);
}

TEST(DeviceMutex, UsesMembarrierWhereTheKernelHasIt) {
  DeviceMutex mu;  // Linux >= 4.14 has the expedited private command
  EXPECT_TRUE(mu.asymmetric());
  EXPECT_FALSE(DeviceMutex(false).asymmetric());
}

TEST(DeviceMutex, HoldersNeverOverlap) {
  DeviceMutex mu;
  Hammer(mu, 4, 20000);
}

TEST(DeviceMutex, HoldersNeverOverlapWithAFullFenceInstead) {
  DeviceMutex mu(false);
  Hammer(mu, 4, 20000);
}

// A thread asleep in lock() is woken by the unlock, not by its sleep's time
// bound: unlock()'s check for sleepers sees it (without a fence of its own).
TEST(DeviceMutex, UnlockWakesASleepingWaiter) {
  for (const bool asymmetric : {true, false}) {
    DeviceMutex mu(asymmetric);
    uint64_t missed_wakeups = 0;
    for (int round = 0; round < 5; ++round) {
      mu.lock();
      std::thread waiter([&mu] {
        mu.lock();
        mu.unlock();
      });
      // Long enough for the waiter to stop spinning and sleep; the bound is
      // 100 ms, so a wake-up that only the bound delivered would count.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      // On a loaded host this thread may wake from the 20 ms late enough for
      // the waiter's bound to expire first: those sleeps ended before the
      // unlock and say nothing about its wake-up.
      const uint64_t timed_out_before_unlock = mu.timed_out_waits();
      mu.unlock();
      waiter.join();
      missed_wakeups += mu.timed_out_waits() - timed_out_before_unlock;
    }
    EXPECT_EQ(missed_wakeups, 0u) << "asymmetric " << asymmetric;
  }
}

TEST(DeviceMutex, WorksWithLockGuard) {
  DeviceMutex mu;
  {
    std::lock_guard<DeviceMutex> g(mu);
    EXPECT_FALSE(mu.try_lock());
  }
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

// A snapshot answers only while nobody held the mutex after it, and only
// as many times as it was taken for: each way of taking the mutex (lock,
// try_lock, the slow path a waiter takes) and a holder's Changed() end it.
TEST(HoldSnapshot, AnswersUntilTheNextHoldOrItsUsesRunOut) {
  DeviceMutex mu;
  HoldSnapshot q;
  EXPECT_FALSE(q.Use(mu)) << "never taken";
  mu.lock();
  q.Take(mu, 3);
  mu.unlock();
  EXPECT_TRUE(q.Use(mu));
  EXPECT_TRUE(q.Use(mu));
  EXPECT_TRUE(q.Use(mu));
  EXPECT_FALSE(q.Use(mu)) << "uses ran out";

  mu.lock();
  q.Take(mu, 3);
  mu.unlock();
  ASSERT_TRUE(mu.try_lock());
  mu.unlock();
  EXPECT_FALSE(q.Use(mu)) << "a try_lock held the device since";

  mu.lock();
  q.Take(mu, 3);
  mu.Changed();  // the holder took work after the snapshot (posted doorbells)
  mu.unlock();
  EXPECT_FALSE(q.Use(mu)) << "the holder changed things after the snapshot";

  mu.lock();
  q.Take(mu, 3);
  std::thread waiter([&mu] {  // takes the mutex through LockSlow
    mu.lock();
    mu.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(q.Use(mu)) << "still this hold";
  mu.unlock();
  waiter.join();
  EXPECT_FALSE(q.Use(mu)) << "the waiter held the device since";
}

}  // namespace
}  // namespace droce::verbs
