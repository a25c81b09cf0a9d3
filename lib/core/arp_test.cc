// ARP between two devices on the in-memory wire, and the device's answers to
// hand-made ARP frames.
#include <cstring>

#include "wire/gid.h"
#include "core/device.h"
#include "gtest/gtest.h"
#include "sim/wire/mem_wire.h"
#include "sim/wire/scripted_io.h"
#include "wire/arp.h"

namespace droce::core {
namespace {

TEST(Arp, RequestIsAnsweredAndBothSidesLearn) {
  sim::MemWire wire(sim::MemWireConfig{});
  DeviceConfig ca, cb;
  ca.mac = {0x02, 0, 0, 0, 0, 0xa};
  ca.ipv4 = 0x0A000001;
  cb.mac = {0x02, 0, 0, 0, 0, 0xb};
  cb.ipv4 = 0x0A000002;
  Device a(ca, &wire.end(0)), b(cb, &wire.end(1));
  EXPECT_FALSE(a.HasNeighbor(wire::Ipv4MappedGid(cb.ipv4)));
  a.RequestArp(cb.ipv4);
  for (int i = 0; i < 4; ++i) {
    a.Poll(i);
    b.Poll(i);
  }
  EXPECT_TRUE(a.HasNeighbor(wire::Ipv4MappedGid(cb.ipv4)));
  EXPECT_TRUE(b.HasNeighbor(wire::Ipv4MappedGid(ca.ipv4)));  // learnt from the request itself
  EXPECT_EQ(a.counters().arp_requests_sent, 1u);
  EXPECT_EQ(b.counters().arp_replies_sent, 1u);
  EXPECT_EQ(a.counters().neighbors_learned, 1u);
  // A request for someone else is neither answered nor learnt from.
  a.RequestArp(0x0A000063);
  for (int i = 0; i < 4; ++i) {
    a.Poll(i);
    b.Poll(i);
  }
  EXPECT_EQ(b.counters().arp_replies_sent, 1u);
  EXPECT_EQ(b.counters().rx_arp, 2u);
  EXPECT_FALSE(a.HasNeighbor(wire::Ipv4MappedGid(0x0A000063)));
}

TEST(Arp, BuildAndParseRoundTripWithVlan) {
  wire::ArpPacket p;
  p.op = wire::kArpReply;
  p.sender_mac = {2, 1, 2, 3, 4, 5};
  p.sender_ip = 0xC0A84D02;
  p.target_mac = {2, 9, 8, 7, 6, 5};
  p.target_ip = 0xC0A84D0B;
  uint8_t buf[128];
  const uint32_t len = wire::BuildArp(p, true, 0x2064, buf);
  EXPECT_EQ(len, 64u);
  wire::ArpPacket q;
  ASSERT_TRUE(wire::ParseArp(buf, len, &q));
  EXPECT_EQ(q.op, p.op);
  EXPECT_EQ(q.sender_mac, p.sender_mac);
  EXPECT_EQ(q.sender_ip, p.sender_ip);
  EXPECT_EQ(q.target_mac, p.target_mac);
  EXPECT_EQ(q.target_ip, p.target_ip);
  EXPECT_EQ(std::memcmp(buf, p.target_mac.data(), 6), 0);  // a reply is unicast
  // Truncated or non-Ethernet/IPv4 ARP is rejected.
  EXPECT_FALSE(wire::ParseArp(buf, 40, &q));
  buf[18 + 4] = 8;  // hardware address length
  EXPECT_FALSE(wire::ParseArp(buf, len, &q));
}

}  // namespace
}  // namespace droce::core
