// IPv6 Neighbor Discovery (RFC 4861): Neighbor Solicitation and
// Advertisement over Ethernet, just what an RNIC needs to answer for its own
// addresses and to resolve a peer's MAC (the IPv6 counterpart of arp.h).
// Fields are read and written byte by byte (no packed structs).
#ifndef DROCE_LIB_WIRE_ND_H_
#define DROCE_LIB_WIRE_ND_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "wire/byte_order.h"
#include "wire/headers.h"

namespace droce::wire {

inline constexpr uint8_t kIpProtoIcmpv6 = 58;
inline constexpr uint8_t kNdSolicit = 135, kNdAdvert = 136;  // ICMPv6 types
inline constexpr uint8_t kNdOptSourceLla = 1, kNdOptTargetLla = 2;
inline constexpr uint32_t kNdBytes = 24;          // type, code, checksum, flags/reserved, target
inline constexpr uint32_t kNdLlaOptBytes = 8;     // type, length (1 = 8 bytes), MAC
inline constexpr uint8_t kNdHopLimit = 255;       // anything else did not come from the link
inline constexpr uint32_t kNaRouter = 1u << 31, kNaSolicited = 1u << 30, kNaOverride = 1u << 29;
// Largest frame BuildNd writes: Ethernet, 802.1Q, IPv6, NS/NA, one LLA option.
inline constexpr uint32_t kNdFrameMaxBytes = kEthBytes + kVlanTagBytes + kIpv6Bytes + kNdBytes + kNdLlaOptBytes;

using Ip6 = std::array<uint8_t, 16>;
using MacAddr = std::array<uint8_t, 6>;

struct NdPacket {
  uint8_t type = kNdSolicit;
  MacAddr eth_src{}, eth_dst{};
  Ip6 src{}, dst{};  // IPv6 header
  Ip6 target{};
  uint32_t flags = 0;    // NA: R, S, O (kNaRouter...)
  bool has_lla = false;  // NS: source link-layer address option; NA: target's
  MacAddr lla{};
};

enum class NdParse : uint8_t {
  kNotNd,      // not IPv6 ICMPv6 NS/NA: someone else's business
  kOk,
  kMalformed,  // an NS/NA that fails RFC 4861 7.1.1 / 7.1.2 validation: drop and count
};

inline bool IsMulticast(const Ip6& a) { return a[0] == 0xff; }
inline bool IsUnspecified(const Ip6& a) { return a == Ip6{}; }

// ff02::1:ffXX:XXXX, where a solicitation for `target` is sent.
inline Ip6 SolicitedNodeMulticast(const Ip6& target) {
  Ip6 a{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff};
  a[13] = target[13];
  a[14] = target[14];
  a[15] = target[15];
  return a;
}

// 33:33 and the low 32 bits of an IPv6 multicast address (RFC 2464 7).
inline MacAddr MulticastMac(const Ip6& group) {
  return MacAddr{0x33, 0x33, group[12], group[13], group[14], group[15]};
}

// The advertisement answering solicitation `ns` for an address we own, sent
// from `mac` (RFC 4861 7.2.4): to the solicitor, or to all nodes (without
// the Solicited flag) when it came from the unspecified address (duplicate
// address detection).
inline NdPacket AdvertFor(const NdPacket& ns, const MacAddr& mac) {
  NdPacket na;
  na.type = kNdAdvert;
  na.eth_src = mac;
  na.src = ns.target;
  na.target = ns.target;
  na.has_lla = true;
  na.lla = mac;
  if (IsUnspecified(ns.src)) {
    na.dst = Ip6{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    na.eth_dst = MulticastMac(na.dst);
    na.flags = kNaOverride;
  } else {
    na.dst = ns.src;
    na.eth_dst = ns.has_lla ? ns.lla : ns.eth_src;
    na.flags = kNaSolicited | kNaOverride;
  }
  return na;
}

// ICMPv6 checksum (RFC 4443 2.3): one's-complement sum over the pseudo-header
// (source, destination, upper-layer length, next header 58) and the message.
inline uint16_t Icmpv6Checksum(const Ip6& src, const Ip6& dst, const uint8_t* msg, uint32_t len) {
  uint32_t sum = 0;
  for (int i = 0; i < 16; i += 2) sum += LoadBe16(src.data() + i) + LoadBe16(dst.data() + i);
  sum += len >> 16;
  sum += len & 0xFFFF;
  sum += kIpProtoIcmpv6;
  uint32_t i = 0;
  for (; i + 1 < len; i += 2) sum += LoadBe16(msg + i);
  if (i < len) sum += uint32_t{msg[i]} << 8;
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum & 0xFFFF);
}

// Parses an NS or NA (optionally 802.1Q-tagged) and validates it as RFC 4861
// 7.1.1 (NS) and 7.1.2 (NA) require of a receiver: hop limit 255, checksum,
// code 0, length, target not multicast, no zero-length option; NS from the
// unspecified address only to a solicited-node group and without a source
// LLA; NA to a multicast group without the Solicited flag.
inline NdParse ParseNd(const uint8_t* f, uint32_t len, NdPacket* out) {
  if (len < kEthBytes) return NdParse::kNotNd;
  uint32_t off = kEthBytes;
  uint16_t type = LoadBe16(f + 12);
  if (type == kEtherTypeVlan) {
    if (len < off + kVlanTagBytes) return NdParse::kNotNd;
    type = LoadBe16(f + off + 2);
    off += kVlanTagBytes;
  }
  if (type != kEtherTypeIpv6 || len < off + kIpv6Bytes) return NdParse::kNotNd;
  Ipv6View ip(f + off);
  if (ip.version() != 6 || ip.next_header() != kIpProtoIcmpv6) return NdParse::kNotNd;
  const uint8_t* m = f + off + kIpv6Bytes;
  const uint32_t avail = len - off - kIpv6Bytes;
  if (avail < 1 || (m[0] != kNdSolicit && m[0] != kNdAdvert)) return NdParse::kNotNd;
  const uint32_t icmp_len = ip.payload_length();
  if (icmp_len > avail || icmp_len < kNdBytes) return NdParse::kMalformed;
  std::memcpy(out->eth_dst.data(), f, 6);
  std::memcpy(out->eth_src.data(), f + 6, 6);
  std::memcpy(out->src.data(), ip.src(), 16);
  std::memcpy(out->dst.data(), ip.dst(), 16);
  out->type = m[0];
  if (ip.hop_limit() != kNdHopLimit || m[1] != 0) return NdParse::kMalformed;
  if (Icmpv6Checksum(out->src, out->dst, m, icmp_len) != 0) return NdParse::kMalformed;
  out->flags = out->type == kNdAdvert ? LoadBe32(m + 4) & (kNaRouter | kNaSolicited | kNaOverride) : 0;
  std::memcpy(out->target.data(), m + 8, 16);
  if (IsMulticast(out->target)) return NdParse::kMalformed;
  out->has_lla = false;
  const uint8_t want_opt = out->type == kNdSolicit ? kNdOptSourceLla : kNdOptTargetLla;
  for (uint32_t o = kNdBytes; o < icmp_len;) {
    if (o + 2 > icmp_len) return NdParse::kMalformed;
    const uint32_t opt_len = uint32_t{m[o + 1]} * 8;
    if (opt_len == 0 || o + opt_len > icmp_len) return NdParse::kMalformed;
    if (m[o] == want_opt && opt_len == kNdLlaOptBytes) {
      out->has_lla = true;
      std::memcpy(out->lla.data(), m + o + 2, 6);
    }
    o += opt_len;
  }
  if (out->type == kNdSolicit && IsUnspecified(out->src)) {
    if (out->dst != SolicitedNodeMulticast(out->target) || out->has_lla) return NdParse::kMalformed;
  }
  if (out->type == kNdAdvert && IsMulticast(out->dst) && (out->flags & kNaSolicited)) return NdParse::kMalformed;
  return NdParse::kOk;
}

// Builds the frame for `p` (Ethernet addresses, IPv6 header with hop limit
// 255 and traffic class 0, the message with one link-layer address option
// when has_lla) into buf (>= kNdFrameMaxBytes); returns its length.
inline uint32_t BuildNd(const NdPacket& p, bool vlan, uint16_t vlan_tci, uint8_t* buf) {
  std::memcpy(buf, p.eth_dst.data(), 6);
  std::memcpy(buf + 6, p.eth_src.data(), 6);
  uint32_t off = 12;
  if (vlan) {
    StoreBe16(buf + off, kEtherTypeVlan);
    StoreBe16(buf + off + 2, vlan_tci);
    off += kVlanTagBytes;
  }
  StoreBe16(buf + off, kEtherTypeIpv6);
  off += 2;
  const uint32_t icmp_len = kNdBytes + (p.has_lla ? kNdLlaOptBytes : 0);
  Ipv6Writer ip(buf + off);
  ip.set_version_class_flow(0, 0);
  ip.set_payload_length(static_cast<uint16_t>(icmp_len));
  ip.set_next_header(kIpProtoIcmpv6);
  ip.set_hop_limit(kNdHopLimit);
  ip.set_src(p.src.data());
  ip.set_dst(p.dst.data());
  uint8_t* m = buf + off + kIpv6Bytes;
  std::memset(m, 0, icmp_len);
  m[0] = p.type;
  if (p.type == kNdAdvert) StoreBe32(m + 4, p.flags);
  std::memcpy(m + 8, p.target.data(), 16);
  if (p.has_lla) {
    m[kNdBytes] = p.type == kNdSolicit ? kNdOptSourceLla : kNdOptTargetLla;
    m[kNdBytes + 1] = 1;
    std::memcpy(m + kNdBytes + 2, p.lla.data(), 6);
  }
  StoreBe16(m + 2, Icmpv6Checksum(p.src, p.dst, m, icmp_len));
  return off + kIpv6Bytes + icmp_len;
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_ND_H_
