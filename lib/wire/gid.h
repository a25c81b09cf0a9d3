// GIDs as RoCEv2 uses them (Annex A17.4.5.1): an IPv6 address, or an IPv4
// address in its IPv4-mapped form ::ffff:a.b.c.d. The one place that says
// how to tell them apart.
#ifndef DROCE_LIB_WIRE_GID_H_
#define DROCE_LIB_WIRE_GID_H_

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace droce::wire {

using Gid = std::array<uint8_t, 16>;

// ::ffff:a.b.c.d, the GID form of an IPv4 address (RoCEv2 over IPv4).
inline bool IsIpv4MappedGid(const Gid& g) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(g.data(), kPrefix, 12) == 0;
}

// The IPv4-mapped GID of a host-order IPv4 address.
constexpr Gid Ipv4MappedGid(uint32_t ipv4) {
  return Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, static_cast<uint8_t>(ipv4 >> 24),
             static_cast<uint8_t>(ipv4 >> 16), static_cast<uint8_t>(ipv4 >> 8),
             static_cast<uint8_t>(ipv4)};
}

// The Ethernet group address of a RoCEv2 multicast GID, or nullopt when the
// GID is not multicast: ::ffff:224.0.0.0/4 -> 01:00:5e + the low 23 bits of
// the IPv4 address (RFC 1112), ff00::/8 -> 33:33 + its last 32 bits (RFC 2464).
inline std::optional<std::array<uint8_t, 6>> GroupMacOfGid(const Gid& g) {
  if (IsIpv4MappedGid(g)) {
    if ((g[12] & 0xF0) != 0xE0) return std::nullopt;
    return std::array<uint8_t, 6>{0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7F), g[14], g[15]};
  }
  if (g[0] != 0xFF) return std::nullopt;
  return std::array<uint8_t, 6>{0x33, 0x33, g[12], g[13], g[14], g[15]};
}

// The address a GID stands for, as text: 10.0.0.1 (IPv4-mapped) or fe80::1.
inline std::string GidAddressText(const Gid& g) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (IsIpv4MappedGid(g)) {
    inet_ntop(AF_INET, g.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, g.data(), buf, sizeof buf);
  }
  return buf;
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_GID_H_
