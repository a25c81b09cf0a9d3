#include "pktio/frame_pool.h"

#include <cstring>
#include <set>

#include "gtest/gtest.h"

namespace droce::pktio {
namespace {

TEST(FramePool, HandsOutEveryBufferOnceAndTakesThemBack) {
  FramePool pool(8, kMaxFrameBytes);
  EXPECT_EQ(pool.buffer_bytes() % 64, 0u);
  Frame f[16];
  ASSERT_EQ(pool.Alloc(f, 16), 8);  // no more than it has
  std::set<uint8_t*> seen;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(f[i].len, 0u);
    EXPECT_GE(f[i].capacity, kMaxFrameBytes);
    EXPECT_EQ(f[i].handle, f[i].data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(f[i].data) % 64, 0u);
    std::memset(f[i].data, i, f[i].capacity);  // every byte of each buffer is its own
    seen.insert(f[i].data);
  }
  EXPECT_EQ(seen.size(), 8u);
  EXPECT_EQ(pool.Alloc(f + 8, 1), 0);
  EXPECT_EQ(pool.high_water(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(f[i].data[f[i].capacity - 1], i);
  pool.Free(f, 8);
  EXPECT_EQ(pool.available(), 8u);
}

TEST(FramePool, LastFreedGoesOutFirstSoFewBuffersAreTouched) {
  FramePool pool(1024, kMaxFrameBytes);
  Frame a[4];
  ASSERT_EQ(pool.Alloc(a, 4), 4);
  for (int round = 0; round < 100; ++round) {
    pool.Free(a, 4);
    Frame b[4];
    ASSERT_EQ(pool.Alloc(b, 4), 4);
    std::set<void*> again{b[0].handle, b[1].handle, b[2].handle, b[3].handle};
    for (const Frame& x : a) EXPECT_EQ(again.count(x.handle), 1u);
    std::memcpy(a, b, sizeof a);
  }
  EXPECT_EQ(pool.high_water(), 4u);
}

TEST(FramePool, ForeignAndMisalignedHandlesAreIgnored) {
  FramePool pool(4, 256);
  Frame f[4];
  ASSERT_EQ(pool.Alloc(f, 4), 4);
  uint8_t other[64];
  Frame bad[3] = {{other, 0, 64, other}, {f[0].data + 1, 0, 0, f[0].data + 1}, {nullptr, 0, 0, nullptr}};
  pool.Free(bad, 3);
  EXPECT_EQ(pool.foreign_frees(), 3u);
  EXPECT_EQ(pool.available(), 0u);
  pool.Free(f, 4);
  pool.Free(f, 1);  // one too many: the pool never holds more than it has
  EXPECT_EQ(pool.available(), 4u);
  EXPECT_EQ(pool.foreign_frees(), 4u);
}

TEST(FramePool, FreeOwnedTakesBackWhatAllocGaveOutLastFirst) {
  FramePool pool(3, 256);
  Frame f[3];
  ASSERT_EQ(pool.Alloc(f, 3), 3);
  ASSERT_TRUE(pool.Owns(f[1].handle));
  pool.FreeOwned(f[1].handle);
  pool.FreeOwned(f[2].handle);
  EXPECT_EQ(pool.available(), 2u);
  Frame g[3];
  ASSERT_EQ(pool.Alloc(g, 3), 2);  // only what came back
  EXPECT_EQ(g[0].data, f[2].data);  // the last freed first
  EXPECT_EQ(g[1].data, f[1].data);
  for (const Frame& x : {g[0], g[1]}) {
    EXPECT_EQ(x.handle, x.data);
    EXPECT_EQ(x.len, 0u);
    EXPECT_EQ(x.capacity, pool.buffer_bytes());
  }
  pool.FreeOwned(f[0].handle);
  pool.FreeOwned(g[0].handle);
  pool.FreeOwned(g[1].handle);
  pool.FreeOwned(g[1].handle);  // one too many: counted, the stack stays within the pool
  EXPECT_EQ(pool.available(), 3u);
  EXPECT_EQ(pool.foreign_frees(), 1u);
  EXPECT_EQ(pool.high_water(), 3u);
}

}  // namespace
}  // namespace droce::pktio
