#include "wire/psn.h"

#include <gtest/gtest.h>

namespace droce::wire {
namespace {

TEST(Psn, AddWraps) {
  EXPECT_EQ(PsnAdd(0xFFFFFF, 1), 0u);
  EXPECT_EQ(PsnAdd(0xFFFFFE, 5), 3u);
  EXPECT_EQ(PsnAdd(2, -3), 0xFFFFFFu);
}

TEST(Psn, DiffIsSignedAcrossWrap) {
  EXPECT_EQ(PsnDiff(0, 0xFFFFFF), 1);
  EXPECT_EQ(PsnDiff(0xFFFFFF, 0), -1);
  EXPECT_EQ(PsnDiff(10, 5), 5);
  EXPECT_EQ(PsnDiff(5, 10), -5);
  EXPECT_EQ(PsnDiff(kPsnHalfWindow - 1, 0), static_cast<int32_t>(kPsnHalfWindow - 1));
  EXPECT_EQ(PsnDiff(kPsnHalfWindow, 0), -static_cast<int32_t>(kPsnHalfWindow));
}

TEST(Psn, OrderingAcrossWrap) {
  EXPECT_TRUE(PsnLess(0xFFFFF0, 0x000010));
  EXPECT_FALSE(PsnLess(0x000010, 0xFFFFF0));
  EXPECT_TRUE(PsnLessEq(7, 7));
  EXPECT_FALSE(PsnLess(7, 7));
  for (uint32_t base : {0u, 0x7FFFFFu, 0xFFFFF0u}) {
    for (int d = -1000; d <= 1000; d += 37) {
      EXPECT_EQ(PsnDiff(PsnAdd(base, d), base), d) << base << " " << d;
    }
  }
}

}  // namespace
}  // namespace droce::wire
