#include "drivers/netdev/gid_cache.h"

#include <gtest/gtest.h>

namespace droce::netdev {
namespace {

using Gid = GidCache::Gid;

Gid V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) { return wire::Ipv4MappedGid((a << 24) | (b << 16) | (c << 8) | d); }
Gid V6(uint8_t first, uint8_t last) {
  Gid g{};
  g[0] = first;
  g[1] = first == 0xfe ? 0x80 : 0x01;
  g[15] = last;
  return g;
}
constexpr GidCache::Mac kMac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};

TEST(GidCache, DefaultGidIsTheMacsLinkLocalAddress) {
  GidCache t(kMac);
  const Gid want{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  EXPECT_EQ(t.entries()[0], want);
  EXPECT_TRUE(t.valid(0));
  EXPECT_FALSE(t.valid(1));
}

TEST(GidCache, AddressesTakeTheFirstFreeIndexAndKeepIt) {
  GidCache t(kMac);
  EXPECT_TRUE(t.Update({V4(10, 0, 0, 1), V6(0x20, 1)}));
  EXPECT_EQ(t.Find(V4(10, 0, 0, 1)), 1);
  EXPECT_EQ(t.Find(V6(0x20, 1)), 2);
  EXPECT_FALSE(t.Update({V4(10, 0, 0, 1), V6(0x20, 1)}));  // no change
  // 10.0.0.1 goes: a hole at 1, the IPv6 address keeps 2.
  EXPECT_TRUE(t.Update({V6(0x20, 1)}));
  EXPECT_FALSE(t.valid(1));
  EXPECT_EQ(t.entries()[1], Gid{});
  EXPECT_EQ(t.Find(V6(0x20, 1)), 2);
  // A new address fills the hole.
  EXPECT_TRUE(t.Update({V6(0x20, 1), V4(10, 0, 0, 7)}));
  EXPECT_EQ(t.Find(V4(10, 0, 0, 7)), 1);
  EXPECT_EQ(t.Find(Gid{}), -1);
}

TEST(GidCache, TheInterfacesOwnEui64AddressIsTheDefaultEntry) {
  GidCache t(kMac);
  EXPECT_FALSE(t.Update({GidCache::DefaultGid(kMac)}));
  EXPECT_FALSE(t.valid(1));
  EXPECT_EQ(t.Find(GidCache::DefaultGid(kMac)), 0);
}

TEST(GidCache, AFullTableCountsWhatItLeavesOut) {
  GidCache t(kMac);
  std::vector<Gid> many;
  for (int i = 0; i < 20; ++i) many.push_back(V4(10, 0, 1, static_cast<uint8_t>(i)));
  t.Update(many);
  EXPECT_EQ(t.overflowed(), 20u - (GidCache::kSize - 1));
  for (size_t i = 0; i < GidCache::kSize; ++i) EXPECT_TRUE(t.valid(i));
}

TEST(GidCache, ANewMacMovesTheDefaultGid) {
  GidCache t(kMac);
  GidCache::Mac other = kMac;
  other[5] = 0x66;
  t.Update({GidCache::DefaultGid(other)});  // the new MAC's address, seen before the MAC changed
  EXPECT_EQ(t.Find(GidCache::DefaultGid(other)), 1);
  EXPECT_TRUE(t.SetMac(other));
  EXPECT_EQ(t.Find(GidCache::DefaultGid(other)), 0);
  EXPECT_FALSE(t.valid(1));
}

}  // namespace
}  // namespace droce::netdev
