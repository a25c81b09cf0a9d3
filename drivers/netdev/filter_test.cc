// The packet-socket fallback's classic BPF filter, run by a small
// interpreter of the instructions it uses (the kernel's semantics: a load
// beyond the frame ends the program with 0, i.e. drop).
#include <linux/filter.h>
#include <linux/if_packet.h>

#include <optional>

#include <gtest/gtest.h>

#include "drivers/netdev/xdp.h"

namespace droce::netdev {
namespace {

// vlan_tagged: the kernel moved an 802.1Q tag out of the frame into its
// metadata (SKF_AD_VLAN_TAG_PRESENT).
uint32_t RunFilter(const std::vector<sock_filter>& prog, const std::vector<uint8_t>& f, uint32_t pkttype,
                   bool vlan_tagged = false) {
  uint32_t a = 0, x = 0;
  auto load = [&](uint32_t off, int size) -> std::optional<uint32_t> {
    if (off == static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PKTTYPE) && size == 4) return pkttype;
    if (off == static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT) && size == 4) return vlan_tagged ? 1 : 0;
    if (off + size > f.size()) return std::nullopt;
    uint32_t v = 0;
    for (int i = 0; i < size; ++i) v = (v << 8) | f[off + i];
    return v;
  };
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const sock_filter& i = prog[pc];
    const int size = BPF_SIZE(i.code) == BPF_W ? 4 : BPF_SIZE(i.code) == BPF_H ? 2 : 1;
    switch (BPF_CLASS(i.code)) {
      case BPF_LD: {
        std::optional<uint32_t> v = load(BPF_MODE(i.code) == BPF_IND ? x + i.k : i.k, size);
        if (!v) return 0;
        a = *v;
        break;
      }
      case BPF_LDX: {
        EXPECT_EQ(BPF_MODE(i.code), BPF_MSH);
        std::optional<uint32_t> v = load(i.k, 1);
        if (!v) return 0;
        x = (*v & 0xF) * 4;
        break;
      }
      case BPF_JMP: {
        const bool t = BPF_OP(i.code) == BPF_JEQ ? a == i.k : (a & i.k) != 0;
        EXPECT_TRUE(BPF_OP(i.code) == BPF_JEQ || BPF_OP(i.code) == BPF_JSET);
        pc += t ? i.jt : i.jf;
        break;
      }
      case BPF_RET:
        return i.k;
      default:
        ADD_FAILURE() << "unexpected instruction " << i.code;
        return 0;
    }
  }
  ADD_FAILURE() << "ran off the end";
  return 0;
}

std::vector<uint8_t> V4Frame(uint32_t dst, uint16_t port, uint8_t ihl = 5, uint16_t frag = 0, uint8_t proto = 17) {
  std::vector<uint8_t> f(14 + ihl * 4 + 8 + 12, 0);
  f[12] = 0x08;
  f[14] = static_cast<uint8_t>(0x40 | ihl);
  f[14 + 6] = static_cast<uint8_t>(frag >> 8);
  f[14 + 7] = static_cast<uint8_t>(frag);
  f[14 + 9] = proto;
  for (int i = 0; i < 4; ++i) f[14 + 16 + i] = static_cast<uint8_t>(dst >> (24 - 8 * i));
  f[14 + ihl * 4 + 2] = static_cast<uint8_t>(port >> 8);
  f[14 + ihl * 4 + 3] = static_cast<uint8_t>(port);
  return f;
}

std::vector<uint8_t> V6Frame(const Gid& dst, uint16_t port, uint8_t next = 17) {
  std::vector<uint8_t> f(14 + 40 + 8 + 12, 0);
  f[12] = 0x86;
  f[13] = 0xDD;
  f[14] = 0x60;
  f[14 + 6] = next;
  std::memcpy(f.data() + 14 + 24, dst.data(), 16);
  f[14 + 40 + 2] = static_cast<uint8_t>(port >> 8);
  f[14 + 40 + 3] = static_cast<uint8_t>(port);
  return f;
}

Gid V6(uint8_t last) {
  Gid g{0x20, 0x01, 0x0d, 0xb8};
  g[15] = last;
  return g;
}

TEST(RoceFilter, TakesOnlyRoceV2ForOurAddresses) {
  const std::vector<Gid> ours = {wire::Ipv4MappedGid(0x0a000001), V6(1), wire::Ipv4MappedGid(0x0a000101), V6(2)};
  absl::StatusOr<std::vector<sock_filter>> p = RoceFilter(ours);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NE(RunFilter(*p, V4Frame(0x0a000001, 4791), PACKET_HOST), 0u);
  EXPECT_NE(RunFilter(*p, V4Frame(0x0a000101, 4791), PACKET_HOST), 0u);
  EXPECT_NE(RunFilter(*p, V4Frame(0x0a000001, 4791, /*ihl=*/7), PACKET_HOST), 0u);  // IP options
  EXPECT_NE(RunFilter(*p, V6Frame(V6(1), 4791), PACKET_HOST), 0u);
  EXPECT_NE(RunFilter(*p, V6Frame(V6(2), 4791), PACKET_HOST), 0u);
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000002, 4791), PACKET_HOST), 0u);      // another address
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4792), PACKET_HOST), 0u);      // another port
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791, 5, 0x2000), PACKET_HOST), 0u);  // a first fragment (MF)
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791, 5, 0x0010), PACKET_HOST), 0u);  // a later fragment
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791, 5, 0, 6), PACKET_HOST), 0u);    // TCP
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791), PACKET_OUTGOING), 0u);  // our own, leaving
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791), PACKET_BROADCAST), 0u);
  EXPECT_EQ(RunFilter(*p, V6Frame(V6(3), 4791), PACKET_HOST), 0u);
  EXPECT_EQ(RunFilter(*p, V6Frame(V6(1), 4791, 6), PACKET_HOST), 0u);
  Gid almost = V6(1);
  almost[4] = 1;  // differs in the second word only
  EXPECT_EQ(RunFilter(*p, V6Frame(almost, 4791), PACKET_HOST), 0u);
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08, arp[13] = 0x06;
  EXPECT_EQ(RunFilter(*p, arp, PACKET_HOST), 0u);
  std::vector<uint8_t> cut = V4Frame(0x0a000001, 4791);
  cut.resize(14 + 20 + 2);  // no room for the port
  EXPECT_EQ(RunFilter(*p, cut, PACKET_HOST), 0u);
}

// Another VLAN's frame for the same address is its VLAN interface's; a
// group's frames arrive as PACKET_MULTICAST and are taken for the groups
// joined (in the address list) only.
TEST(RoceFilter, SkipsTaggedFramesAndTakesJoinedGroups) {
  const Gid group = wire::Ipv4MappedGid(0xef010203);  // 239.1.2.3
  Gid group6{0xff, 0x0e};
  group6[15] = 7;
  absl::StatusOr<std::vector<sock_filter>> p = RoceFilter({wire::Ipv4MappedGid(0x0a000001), group, group6});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(RunFilter(*p, V4Frame(0x0a000001, 4791), PACKET_HOST, /*vlan_tagged=*/true), 0u);
  EXPECT_NE(RunFilter(*p, V4Frame(0xef010203, 4791), PACKET_MULTICAST), 0u);
  EXPECT_NE(RunFilter(*p, V6Frame(group6, 4791), PACKET_MULTICAST), 0u);
  EXPECT_EQ(RunFilter(*p, V4Frame(0xef010204, 4791), PACKET_MULTICAST), 0u);  // a group not joined
  EXPECT_EQ(RunFilter(*p, V4Frame(0xef010203, 4791), PACKET_MULTICAST, true), 0u);
  EXPECT_EQ(RunFilter(*p, V4Frame(0xef010203, 4791), PACKET_OUTGOING), 0u);
}

TEST(RoceFilter, NoAddressTakesNothingAndTooManyAreRefused) {
  absl::StatusOr<std::vector<sock_filter>> none = RoceFilter({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(RunFilter(*none, V4Frame(0x0a000001, 4791), PACKET_HOST), 0u);
  std::vector<Gid> many;
  for (uint32_t i = 0; i < kMaxFilterAddrs; ++i) many.push_back(i % 2 ? V6(static_cast<uint8_t>(i)) : wire::Ipv4MappedGid(0x0a000000 + i));
  absl::StatusOr<std::vector<sock_filter>> full = RoceFilter(many);
  ASSERT_TRUE(full.ok()) << full.status();  // every jump within reach
  EXPECT_NE(RunFilter(*full, V6Frame(V6(kMaxFilterAddrs - 1), 4791), PACKET_HOST), 0u);
  EXPECT_NE(RunFilter(*full, V4Frame(0x0a000000 + kMaxFilterAddrs - 2, 4791), PACKET_HOST), 0u);
  many.push_back(V6(200));
  EXPECT_FALSE(RoceFilter(many).ok());
}

}  // namespace
}  // namespace droce::netdev
