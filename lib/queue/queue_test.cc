#include <gtest/gtest.h>

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

}  // namespace
}  // namespace droce::queue
