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

TEST(Ring, GrowKeepsTheEntriesInOrder) {
  Ring<int> r(3);
  for (int i = 0; i < 5; ++i) {  // wrapped: the entries straddle the slots' end
    r.Push(i);
    if (r.size() == 3) r.Pop();
  }
  ASSERT_EQ(r.size(), 2u);
  r.Grow(10);
  EXPECT_EQ(r.depth(), 10u);
  for (int i = 5; i < 13; ++i) EXPECT_TRUE(r.Push(i));
  EXPECT_FALSE(r.Push(13));
  for (int want = 3; want < 13; ++want) {
    EXPECT_EQ(r.front(), want);
    r.Pop();
  }
  EXPECT_TRUE(r.empty());
  r.Grow(4);  // never smaller
  EXPECT_EQ(r.depth(), 10u);
}

// A producer that does not own the ring (a verbs thread posting without the
// device lock) fills and publishes; the owner takes and pops. Nothing
// published is lost or seen twice, and a slot is never refilled before the
// owner has popped it (it would read a later value there).
TEST(Ring, ProducerPublishesWhileTheOwnerTakesAndPops) {
  Ring<uint64_t, /*kShared=*/true> r(5);  // capacity 8, depth 5: full is judged by depth
  // Both sides yield when they cannot go on: on a loaded host the two
  // threads may share one CPU, and a side that spins through its time
  // slice waiting for the other makes every hand-over cost a slice.
  constexpr uint64_t kCount = 5000;
  std::atomic<bool> refused_when_full{false};
  std::thread producer([&] {
    for (uint64_t v = 1; v <= kCount;) {
      uint64_t* slot = r.ProducerSlot();
      if (slot == nullptr) {
        refused_when_full.store(true, std::memory_order_relaxed);
        std::this_thread::yield();
        continue;
      }
      *slot = v++;
      r.Publish();
    }
  });
  uint64_t expect = 1;
  while (expect <= kCount) {
    while (r.published() != 0) r.TakePublished();
    ASSERT_LE(r.size(), 5u);
    if (r.empty()) {
      std::this_thread::yield();
      continue;
    }
    // Read, then pop (in the engine a completion is built from the WQE first).
    ASSERT_EQ(r.front(), expect);
    r.Pop();
    ++expect;
  }
  producer.join();
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.published(), 0u);
  EXPECT_TRUE(refused_when_full.load());
}

TEST(Ring, ProducerSlotCountsWhatIsPublishedButNotTaken) {
  Ring<int, true> r(2);
  *r.ProducerSlot() = 7;
  r.Publish();
  *r.ProducerSlot() = 8;
  r.Publish();
  EXPECT_EQ(r.ProducerSlot(), nullptr);  // two published, none taken yet
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.published(), 2u);
  EXPECT_EQ(r.TakePublished(), 7);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_EQ(r.ProducerSlot(), nullptr);  // taken is not popped
  r.Pop();
  ASSERT_NE(r.ProducerSlot(), nullptr);
  r.Reset(2);
  EXPECT_EQ(r.published(), 0u);
  EXPECT_NE(r.ProducerSlot(), nullptr);
  EXPECT_TRUE(r.Push(3));  // an owner that fills it itself (an SRQ) publishes nothing
  EXPECT_EQ(r.published(), 0u);
  EXPECT_EQ(r.size(), 1u);
}

// A batch: slots ahead of the next are filled first, nothing of them is
// visible to the owner until all are published at once; a slot past the
// ring's depth (counting what is queued and not popped) is refused.
TEST(Ring, ProducerFillsSlotsAheadAndPublishesThemTogether) {
  Ring<int, true> r(4);
  *r.ProducerSlot() = 1;
  r.Publish();
  EXPECT_EQ(r.TakeAllPublished(), 1u);  // queued, not popped: 3 slots left
  ASSERT_NE(r.ProducerSlot(2), nullptr);
  EXPECT_EQ(r.ProducerSlot(3), nullptr);
  for (uint32_t i = 0; i < 3; ++i) *r.ProducerSlot(i) = 10 + static_cast<int>(i);
  EXPECT_EQ(r.published(), 0u);
  r.Publish(3);
  EXPECT_EQ(r.published(), 3u);
  EXPECT_EQ(r.ProducerSlot(), nullptr);
  EXPECT_EQ(r.TakeAllPublished(), 3u);
  for (int want : {1, 10, 11, 12}) {
    EXPECT_EQ(r.front(), want);
    r.Pop();
  }
  EXPECT_NE(r.ProducerSlot(3), nullptr);  // all four free again, across the wrap
  EXPECT_EQ(r.ProducerSlot(4), nullptr);
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

// PollEach hands the oldest completions to its callback in order, from
// their slots (also across the ring's wrap), pops exactly those, and calls
// nothing on an empty CQ; the solicited flag is still there for the caller
// to mask (the verbs provider's ibv_wc).
TEST(CompletionQueue, PollEachHandsTheOldestInOrderAndPopsThem) {
  CompletionQueue cq(5);  // capacity 8: the indices below wrap
  uint64_t next = 0;
  const auto push = [&](uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      Completion c;
      c.wr_id = next++;
      c.flags = c.wr_id == 6 ? CompletionQueue::kWcSolicited | kWcWithImm : 0;
      ASSERT_TRUE(cq.Push(c));
    }
  };
  std::vector<uint64_t> seen;
  const auto take = [&](uint32_t n) {
    return cq.PollEach(n, [&](const Completion& c) {
      seen.push_back(c.wr_id);
      if (c.wr_id == 6) {
        EXPECT_EQ(c.flags, CompletionQueue::kWcSolicited | kWcWithImm);
      }
    });
  };
  push(5);
  EXPECT_EQ(take(3), 3u);
  EXPECT_EQ(cq.size(), 2u);
  push(3);
  Completion extra;
  EXPECT_FALSE(cq.Push(extra));  // full at 5: not overwritten
  EXPECT_EQ(take(2), 2u);
  push(2);  // indices 8 and 9: slots 0 and 1
  EXPECT_EQ(take(16), 5u);
  EXPECT_EQ(cq.size(), 0u);
  EXPECT_EQ(take(4), 0u);
  EXPECT_EQ(seen, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
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

}  // namespace
}  // namespace droce::queue
