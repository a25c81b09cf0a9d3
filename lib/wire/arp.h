// ARP for IPv4 over Ethernet (RFC 826): just what an RNIC needs to answer for
// its own address and to resolve a peer's MAC. Fixed-size packets; fields
// are read and written byte by byte (no packed structs).
#ifndef DROCE_LIB_WIRE_ARP_H_
#define DROCE_LIB_WIRE_ARP_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "wire/byte_order.h"
#include "wire/headers.h"

namespace droce::wire {

inline constexpr uint32_t kArpBytes = 28;  // Ethernet/IPv4 ARP payload
inline constexpr uint16_t kArpRequest = 1, kArpReply = 2;
inline constexpr uint32_t kArpFrameBytes = 60;  // minimum Ethernet frame (without FCS)

struct ArpPacket {
  uint16_t op = 0;
  std::array<uint8_t, 6> sender_mac{};
  uint32_t sender_ip = 0;  // host order
  std::array<uint8_t, 6> target_mac{};
  uint32_t target_ip = 0;
};

// The reply to ARP request `req` for our address `ip` at `mac` (RFC 826).
inline ArpPacket ArpReplyFor(const ArpPacket& req, const std::array<uint8_t, 6>& mac, uint32_t ip) {
  ArpPacket reply;
  reply.op = kArpReply;
  reply.sender_mac = mac;
  reply.sender_ip = ip;
  reply.target_mac = req.sender_mac;
  reply.target_ip = req.sender_ip;
  return reply;
}

// Parses an ARP frame (optionally 802.1Q-tagged). False if it is not an
// Ethernet/IPv4 ARP request or reply of sane length.
inline bool ParseArp(const uint8_t* f, uint32_t len, ArpPacket* out) {
  const L3Info l3 = ReadL3(f, len);
  const uint32_t off = l3.l3_offset;
  if (l3.ether_type != kEtherTypeArp || len < off + kArpBytes) return false;
  const uint8_t* a = f + off;
  if (LoadBe16(a) != 1 || LoadBe16(a + 2) != kEtherTypeIpv4 || a[4] != 6 || a[5] != 4) return false;
  out->op = LoadBe16(a + 6);
  if (out->op != kArpRequest && out->op != kArpReply) return false;
  std::memcpy(out->sender_mac.data(), a + 8, 6);
  out->sender_ip = LoadBe32(a + 14);
  std::memcpy(out->target_mac.data(), a + 18, 6);
  out->target_ip = LoadBe32(a + 24);
  return true;
}

// Builds an ARP frame into buf (>= kArpFrameBytes + kVlanTagBytes); returns
// its length. A request goes to the broadcast MAC, a reply to target_mac.
inline uint32_t BuildArp(const ArpPacket& p, bool vlan, uint16_t vlan_tci, uint8_t* buf) {
  std::memset(buf, 0, kArpFrameBytes + kVlanTagBytes);
  static constexpr uint8_t kBroadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::memcpy(buf, p.op == kArpRequest ? kBroadcast : p.target_mac.data(), 6);
  std::memcpy(buf + 6, p.sender_mac.data(), 6);
  uint32_t off = 12;
  if (vlan) {
    StoreBe16(buf + off, kEtherTypeVlan);
    StoreBe16(buf + off + 2, vlan_tci);
    off += kVlanTagBytes;
  }
  StoreBe16(buf + off, kEtherTypeArp);
  uint8_t* a = buf + off + 2;
  StoreBe16(a, 1);
  StoreBe16(a + 2, kEtherTypeIpv4);
  a[4] = 6;
  a[5] = 4;
  StoreBe16(a + 6, p.op);
  std::memcpy(a + 8, p.sender_mac.data(), 6);
  StoreBe32(a + 14, p.sender_ip);
  if (p.op == kArpReply) std::memcpy(a + 18, p.target_mac.data(), 6);
  StoreBe32(a + 24, p.target_ip);
  return vlan ? kArpFrameBytes + kVlanTagBytes : kArpFrameBytes;
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_ARP_H_
