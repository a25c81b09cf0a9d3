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

// The progress thread's pass reads the clock once (RoundTime): its round
// takes that reading only if it is the first hold since, and the lock was
// free when it was read; any other round reads the clock again, so round
// times never step back behind a time another holder gave the device.
TEST(RoundTime, ARoundTakesThePassReadingOnlyIfNobodyHeldTheDeviceSince) {
  DeviceMutex mu;
  RoundTime rt;
  uint64_t clock_ns = 1000;
  int reads = 0;
  const auto clock = [&] {
    ++reads;
    return clock_ns;
  };
  EXPECT_EQ(rt.Read(mu, clock), 1000u);
  clock_ns = 1500;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(rt.ForHold(mu, clock), 1000u) << "nobody held it since: the pass's reading";
  EXPECT_EQ(reads, 1);
  EXPECT_EQ(rt.ForHold(mu, clock), 1500u) << "a reading serves one hold";
  mu.unlock();
  EXPECT_EQ(reads, 2);

  reads = 0;
  rt.Read(mu, clock);
  clock_ns = 2000;
  mu.lock();  // a program thread's round at a later time
  mu.unlock();
  clock_ns = 2100;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(rt.ForHold(mu, clock), 2100u) << "another hold since the reading: read again";
  mu.unlock();
  EXPECT_EQ(reads, 2);

  mu.lock();  // held while the pass reads
  rt.Read(mu, clock);
  clock_ns = 2500;
  mu.unlock();
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(rt.ForHold(mu, clock), 2500u) << "the device was held at the reading";
  mu.unlock();

  rt.Read(mu, clock);
  rt.Drop();  // a system call since
  clock_ns = 3000;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(rt.ForHold(mu, clock), 3000u) << "a dropped reading";
  mu.unlock();

  rt.Read(mu, clock);
  ASSERT_TRUE(mu.try_lock());
  mu.Changed();  // no other holder: a hold that changed things is still this one
  mu.unlock();
  clock_ns = 3500;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_EQ(rt.ForHold(mu, clock), 3500u) << "two holds since";
  mu.unlock();
}


}  // namespace
}  // namespace droce::verbs
