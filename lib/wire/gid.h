// GIDs as RoCEv2 uses them (Annex A17.4.5.1): an IPv6 address, or an IPv4
// address in its IPv4-mapped form ::ffff:a.b.c.d. The one place that says
// how to tell them apart.
#ifndef DROCE_LIB_WIRE_GID_H_
#define DROCE_LIB_WIRE_GID_H_

#include <arpa/inet.h>

#include <array>
#include <cstdint>
#include <cstring>
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
