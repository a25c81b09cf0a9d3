#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "queue/completion.h"
#include "queue/ring.h"

namespace droce::queue {
namespace {

TEST(Ring, HonoursRequestedDepthAndWraps) {
  Ring<int> r(3);
  EXPECT_TRUE(r.Push(1));
  EXPECT_TRUE(r.Push(2));
  EXPECT_TRUE(r.Push(3));
  EXPECT_FALSE(r.Push(4));
  for (int round = 0; round < 10; ++round) {
    EXPECT_EQ(r.front(), round + 1);
    r.Pop();
    EXPECT_TRUE(r.Push(round + 4));
  }
  EXPECT_EQ(r.size(), 3u);
}

TEST(CompletionQueue, OverflowIsDetectedNotOverwritten) {
  CompletionQueue cq(2);
  Completion c;
  c.wr_id = 1;
  EXPECT_TRUE(cq.Push(c));
  c.wr_id = 2;
  EXPECT_TRUE(cq.Push(c));
  c.wr_id = 3;
  EXPECT_FALSE(cq.Push(c));
  EXPECT_TRUE(cq.overflowed());
  Completion out[4];
  ASSERT_EQ(cq.Poll(out, 4), 2u);
  EXPECT_EQ(out[0].wr_id, 1u);
  EXPECT_EQ(out[1].wr_id, 2u);
}

TEST(CompletionQueue, RemoveQpKeepsTheOthersInOrder) {
  CompletionQueue cq(8);
  for (uint32_t i = 0; i < 6; ++i) {
    Completion c;
    c.wr_id = i;
    c.qp_num = i % 2 ? 17 : 18;
    ASSERT_TRUE(cq.Push(c));
  }
  cq.RemoveQp(17);
  Completion out[8];
  ASSERT_EQ(cq.Poll(out, 8), 3u);
  EXPECT_EQ(out[0].wr_id, 0u);
  EXPECT_EQ(out[1].wr_id, 2u);
  EXPECT_EQ(out[2].wr_id, 4u);
}

TEST(CompletionQueue, NotificationFiresOncePerArm) {
  CompletionQueue cq(8);
  Completion c;
  cq.Push(c);
  EXPECT_EQ(cq.notifications(), 0u);
  cq.ArmNotify(false);
  cq.Push(c);
  cq.Push(c);
  EXPECT_EQ(cq.notifications(), 1u);
  cq.ArmNotify(true);
  cq.Push(c);
  EXPECT_EQ(cq.notifications(), 1u);
  c.flags = CompletionQueue::kWcSolicited;
  cq.Push(c);
  EXPECT_EQ(cq.notifications(), 2u);
}

// The CQ across threads (ring.h): one producer pushing while a consumer
// polls, in batches of every size, through many wraps of a small ring.
// Every completion comes out once and in order. (Run under
// -Db_sanitize=thread too: before the ring's indices were atomics this was a
// data race.)
TEST(CompletionQueue, OneProducerOneConsumerAcrossThreadsKeepOrder) {
  constexpr uint64_t kItems = 30'000;
  CompletionQueue cq(7);
  std::thread producer([&] {
    for (uint64_t i = 1; i <= kItems;) {
      Completion c;
      c.wr_id = i;
      c.qp_num = static_cast<uint32_t>(i * 3);
      if (cq.Push(c)) {
        ++i;
      } else {
        std::this_thread::yield();  // full: the consumer is behind
      }
    }
  });
  uint64_t next = 1;
  Completion out[8];
  for (uint32_t batch = 1; next <= kItems; batch = batch % 8 + 1) {
    const uint32_t got = cq.Poll(out, batch);
    ASSERT_LE(got, batch);
    for (uint32_t i = 0; i < got; ++i, ++next) {
      ASSERT_EQ(out[i].wr_id, next);
      ASSERT_EQ(out[i].qp_num, static_cast<uint32_t>(next * 3));
    }
  }
  producer.join();
  EXPECT_EQ(cq.Poll(out, 8), 0u);
  // Pushes that found it full are overflow by the CQ's rules; the test
  // retried them, so none was lost.
  EXPECT_EQ(next, kItems + 1);
}

// Several threads polling one CQ take turns under its consumer lock: each
// completion goes to exactly one of them, and each sees its share in order.
TEST(CompletionQueue, SeveralConsumersTakeEachCompletionOnce) {
  constexpr uint64_t kItems = 30'000;
  constexpr int kConsumers = 3;
  CompletionQueue cq(16);
  std::vector<std::atomic<uint8_t>> seen(kItems + 1);
  std::atomic<uint64_t> taken{0};
  std::vector<std::thread> consumers;
  std::atomic<bool> out_of_order{false};
  for (int t = 0; t < kConsumers; ++t) {
    consumers.emplace_back([&] {
      uint64_t last = 0;
      Completion out[4];
      while (taken.load() < kItems) {
        const uint32_t got = cq.Poll(out, 4);
        for (uint32_t i = 0; i < got; ++i) {
          if (out[i].wr_id <= last) out_of_order = true;
          last = out[i].wr_id;
          seen[out[i].wr_id].fetch_add(1);
        }
        taken.fetch_add(got);
        if (got == 0) std::this_thread::yield();
      }
    });
  }
  for (uint64_t i = 1; i <= kItems;) {
    Completion c;
    c.wr_id = i;
    if (cq.Push(c)) {
      ++i;
    } else {
      std::this_thread::yield();
    }
  }
  for (std::thread& t : consumers) t.join();
  EXPECT_FALSE(out_of_order.load());
  EXPECT_EQ(taken.load(), kItems);
  for (uint64_t i = 1; i <= kItems; ++i) ASSERT_EQ(seen[i].load(), 1) << i;
}

// Resize and RemoveQp rewrite the ring; with the producer excluded (the
// caller's part) they exclude pollers with the consumer lock, so a poller
// racing them sees every completion of the kept QP once, in order (QP 2's
// come out or go, depending on who is first).
TEST(CompletionQueue, ResizeAndRemoveQpRaceAPollerSafely) {
  constexpr uint64_t kRounds = 2'000;
  CompletionQueue cq(64);
  std::atomic<bool> done{false};
  std::atomic<bool> bad{false};
  std::atomic<uint64_t> kept_seen{0};
  std::thread poller([&] {
    uint64_t last = 0;
    Completion out[5];
    while (!done.load() || cq.size() != 0) {
      const uint32_t got = cq.Poll(out, 5);
      for (uint32_t i = 0; i < got; ++i) {
        if (out[i].qp_num == 1) {
          if (out[i].wr_id != last + 1) bad = true;
          last = out[i].wr_id;
          kept_seen.fetch_add(1);
        }
      }
    }
  });
  uint64_t kept = 0;
  for (uint64_t r = 0; r < kRounds; ++r) {
    // The producer's side, on this thread: two of QP 2's, one of QP 1's,
    // then QP 2's removal, and now and then a resize.
    Completion c;
    c.qp_num = 2;
    while (!cq.Push(c)) std::this_thread::yield();
    c.qp_num = 1;
    c.wr_id = ++kept;
    while (!cq.Push(c)) std::this_thread::yield();
    c.qp_num = 2;
    while (!cq.Push(c)) std::this_thread::yield();
    cq.RemoveQp(2);
    if (r % 16 == 0) EXPECT_TRUE(cq.Resize(r % 32 == 0 ? 64 : 32));
  }
  done = true;
  poller.join();
  EXPECT_FALSE(bad.load());
  EXPECT_EQ(kept_seen.load(), kept);
}

}  // namespace
}  // namespace droce::queue
