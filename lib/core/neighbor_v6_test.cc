// IPv6 neighbour discovery between two devices on the in-memory wire, the
// device's answers to hand-made NS/NA frames, and NS bytes checked against a
// frame built by hand (and decoded by tshark: checksum good, hop limit 255).
#include <cstring>
#include <vector>

#include "core/device.h"
#include "gtest/gtest.h"
#include "sim/wire/mem_wire.h"
#include "sim/wire/scripted_io.h"
#include "wire/nd.h"

namespace droce::core {
namespace {

Gid Ip6(std::initializer_list<uint8_t> tail) {  // 2001:db8::<tail>
  Gid g{0x20, 0x01, 0x0d, 0xb8};
  size_t i = 16 - tail.size();
  for (uint8_t b : tail) g[i++] = b;
  return g;
}

DeviceConfig V6Config(uint8_t last, const Gid& ip) {
  DeviceConfig c;
  c.mac = {0x02, 0, 0, 0, 0, last};
  c.has_ipv6_global = true;
  c.ipv6_global = ip;
  return c;
}

TEST(NeighborV6, SolicitationIsAnsweredAndBothSidesLearn) {
  sim::MemWire wire(sim::MemWireConfig{});
  const Gid ia = Ip6({0x0a}), ib = Ip6({0x0b});
  Device a(V6Config(0xa, ia), &wire.end(0)), b(V6Config(0xb, ib), &wire.end(1));
  EXPECT_FALSE(a.HasNeighbor(ib));
  a.RequestNeighbor(ib);
  for (int i = 0; i < 4; ++i) {
    a.Poll(i);
    b.Poll(i);
  }
  EXPECT_TRUE(a.HasNeighbor(ib));
  EXPECT_TRUE(b.HasNeighbor(ia));  // from the solicitation's source link-layer address
  EXPECT_EQ(a.counters().nd_solicits_sent, 1u);
  EXPECT_EQ(b.counters().nd_adverts_sent, 1u);
  EXPECT_EQ(a.counters().neighbors_learned, 1u);
  EXPECT_EQ(b.counters().rx_nd_malformed, 0u);
  // The link-local address (GID 0) is resolved the same way.
  a.RequestNeighbor(b.gids()[0]);
  for (int i = 0; i < 4; ++i) {
    a.Poll(i);
    b.Poll(i);
  }
  EXPECT_TRUE(a.HasNeighbor(b.gids()[0]));
  // A solicitation for someone else is neither answered nor learnt from.
  a.RequestNeighbor(Ip6({0x63}));
  for (int i = 0; i < 4; ++i) {
    a.Poll(i);
    b.Poll(i);
  }
  EXPECT_EQ(b.counters().nd_adverts_sent, 2u);
  EXPECT_EQ(b.counters().rx_nd, 3u);
  EXPECT_FALSE(a.HasNeighbor(Ip6({0x63})));
}

// 2001:db8::a (02:00:00:00:00:0a) solicits 2001:db8::b, built by hand from
// RFC 4861 4.3 and RFC 2464 7: to 33:33:ff:00:00:0b / ff02::1:ff00:b, hop
// limit 255, source link-layer address option. tshark decodes this frame as
// "Neighbor Solicitation for 2001:db8::b from 02:00:00:00:00:0a" with a good
// ICMPv6 checksum (0x1c03, "[correct]").
const std::vector<uint8_t> kNsFrame = {
    0x33, 0x33, 0xff, 0x00, 0x00, 0x0b, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x86, 0xdd,  // Ethernet
    0x60, 0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff,                                      // IPv6
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a,                       // source
    0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0x00, 0x00, 0x0b,                 // ff02::1:ff00:b
    0x87, 0x00, 0x1c, 0x03, 0, 0, 0, 0,                                                  // NS, checksum
    0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b,                       // target
    0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a,                                      // source LLA
};

TEST(NeighborV6, SolicitationBytesMatchHandBuiltFrame) {
  sim::ScriptedIo io;
  Device a(V6Config(0xa, Ip6({0x0a})), &io);
  a.RequestNd(Ip6({0x0b}));
  a.Poll(0);
  ASSERT_EQ(io.sent.size(), 1u);
  EXPECT_EQ(io.sent[0], kNsFrame);
  wire::NdPacket p;
  ASSERT_EQ(wire::ParseNd(kNsFrame.data(), static_cast<uint32_t>(kNsFrame.size()), &p), wire::NdParse::kOk);
  EXPECT_EQ(p.type, wire::kNdSolicit);
  EXPECT_TRUE(p.has_lla);
  EXPECT_EQ(p.target, Ip6({0x0b}));
}

TEST(NeighborV6, AnswersSolicitationToSolicitedNodeMacAndChecksumIsRight) {
  sim::ScriptedIo io;
  Device b(V6Config(0xb, Ip6({0x0b})), &io);
  io.rx.push_back(kNsFrame);
  b.Poll(0);
  ASSERT_EQ(io.sent.size(), 1u);
  const std::vector<uint8_t>& na = io.sent[0];
  wire::NdPacket p;
  ASSERT_EQ(wire::ParseNd(na.data(), static_cast<uint32_t>(na.size()), &p), wire::NdParse::kOk);  // checksum verified
  EXPECT_EQ(p.type, wire::kNdAdvert);
  EXPECT_EQ(p.dst, Ip6({0x0a}));
  EXPECT_EQ(p.src, Ip6({0x0b}));
  EXPECT_EQ(p.eth_dst, (wire::MacAddr{0x02, 0, 0, 0, 0, 0x0a}));
  EXPECT_EQ(p.flags, wire::kNaSolicited | wire::kNaOverride);
  EXPECT_TRUE(p.has_lla);
  EXPECT_EQ(p.lla, (wire::MacAddr{0x02, 0, 0, 0, 0, 0x0b}));
  EXPECT_EQ(na[14 + 7], 255);  // hop limit
  EXPECT_TRUE(b.HasNeighbor(Ip6({0x0a})));
}

TEST(NeighborV6, MalformedIsCountedAndDropped) {
  sim::ScriptedIo io;
  Device b(V6Config(0xb, Ip6({0x0b})), &io);
  std::vector<uint8_t> hop = kNsFrame;
  hop[14 + 7] = 254;  // forwarded by a router: not from the link
  std::vector<uint8_t> sum = kNsFrame;
  sum[54 + 3] ^= 1;  // checksum
  std::vector<uint8_t> code = kNsFrame;
  code[54 + 1] = 1;
  std::vector<uint8_t> zero_opt = kNsFrame;
  zero_opt[54 + 24 + 1] = 0;  // option length 0
  std::vector<uint8_t> truncated(kNsFrame.begin(), kNsFrame.end() - 10);
  for (const auto* f : {&hop, &sum, &code, &zero_opt, &truncated}) io.rx.push_back(*f);
  b.Poll(0);
  EXPECT_EQ(b.counters().rx_nd, 5u);
  EXPECT_EQ(b.counters().rx_nd_malformed, 5u);
  EXPECT_TRUE(io.sent.empty());
  EXPECT_FALSE(b.HasNeighbor(Ip6({0x0a})));
}

TEST(NeighborV6, UnsolicitedAdvertisementIsNotLearntButAnAnswerIs) {
  wire::NdPacket na;
  na.type = wire::kNdAdvert;
  na.eth_src = {0x02, 0, 0, 0, 0, 0x0c};
  na.eth_dst = {0x02, 0, 0, 0, 0, 0x0a};
  na.src = na.target = Ip6({0x0c});
  na.dst = Ip6({0x0a});
  na.flags = wire::kNaSolicited | wire::kNaOverride;
  na.has_lla = true;
  na.lla = na.eth_src;
  std::vector<uint8_t> frame(wire::kNdFrameMaxBytes);
  frame.resize(wire::BuildNd(na, true, (5 << 13) | 42, frame.data()));  // 802.1Q-tagged
  sim::ScriptedIo io;
  DeviceConfig cfg = V6Config(0xa, Ip6({0x0a}));
  cfg.vlan = true;  // on VLAN 42 (a tagged frame to a device without a VLAN is dropped)
  cfg.vlan_tci = 42;
  Device a(cfg, &io);
  io.rx.push_back(frame);
  a.Poll(0);
  EXPECT_FALSE(a.HasNeighbor(Ip6({0x0c})));
  EXPECT_EQ(a.counters().rx_nd, 1u);
  EXPECT_EQ(a.counters().rx_nd_malformed, 0u);
  a.RequestNeighbor(Ip6({0x0c}));
  io.rx.push_back(frame);
  a.Poll(1);
  EXPECT_TRUE(a.HasNeighbor(Ip6({0x0c})));
}

// Mutated and truncated solicitations (run under ASan by tools/run-tests.sh):
// the parser stays inside the frame, and whatever it accepts has hop limit
// 255 and a correct checksum.
TEST(NeighborV6, MutatedFramesStayInBounds) {
  sim::ScriptedIo io;
  Device b(V6Config(0xb, Ip6({0x0b})), &io);
  uint64_t x = 12345;
  auto next = [&] { return x ^= x << 13, x ^= x >> 7, x ^= x << 17; };
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> f = kNsFrame;
    for (int k = next() % 4; k >= 0; --k) f[next() % f.size()] ^= static_cast<uint8_t>(1u << (next() % 8));
    f.resize(next() % (f.size() + 1));
    std::vector<uint8_t> exact(f);  // heap block of exactly the frame's size
    wire::NdPacket p;
    if (wire::ParseNd(exact.data(), static_cast<uint32_t>(exact.size()), &p) == wire::NdParse::kOk) {
      EXPECT_EQ(exact[(exact[12] == 0x81 ? 18 : 14) + 7], 255);
    }
    io.rx.push_back(std::move(exact));
    b.Poll(i);
  }
  EXPECT_GT(b.counters().rx_nd_malformed, 0u);
}

}  // namespace
}  // namespace droce::core
