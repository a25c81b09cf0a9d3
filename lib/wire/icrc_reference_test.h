// A reference ICRC for tests, written as IBTA Annex A17.3.3 reads and
// sharing nothing with wire/icrc.cc but the CRC-32 (crc32_test checks that
// against known values): the pseudo-LRH and a copy of the packet with the
// variant fields set to ones, byte by byte.
#ifndef DROCE_LIB_WIRE_ICRC_REFERENCE_TEST_H_
#define DROCE_LIB_WIRE_ICRC_REFERENCE_TEST_H_

#include <cstdint>
#include <vector>

#include "wire/crc32.h"
#include "wire/packet.h"

namespace droce::wire::testing {

inline uint32_t ReferenceIcrc(const uint8_t* l3, uint32_t len, bool ipv6) {
  std::vector<uint8_t> b(8, 0xFF);
  b.insert(b.end(), l3, l3 + len);
  uint8_t* ip = b.data() + 8;
  uint32_t ip_bytes;
  if (ipv6) {
    ip_bytes = 40;
    ip[0] |= 0x0F;                          // traffic class, low nibble
    ip[1] = ip[2] = ip[3] = 0xFF;           // traffic class, flow label
    ip[7] = 0xFF;                           // hop limit
  } else {
    ip_bytes = (ip[0] & 0x0F) * 4u;
    ip[1] = 0xFF;                           // type of service
    ip[8] = 0xFF;                           // time to live
    ip[10] = ip[11] = 0xFF;                 // header checksum
  }
  ip[ip_bytes + 6] = ip[ip_bytes + 7] = 0xFF;  // UDP checksum
  ip[ip_bytes + 8 + 4] = 0xFF;                 // BTH: FECN, BECN, reserved
  return Crc32(b.data(), b.size());
}

// The frame's stored ICRC is the reference one.
inline bool ReferenceIcrcMatches(const uint8_t* frame, const ParsedPacket& p) {
  return ReferenceIcrc(frame + p.l3_offset, p.icrc_offset - p.l3_offset, p.ipv6) ==
         StoredIcrc(frame, p);
}

// A route with every field set (ECN, VLAN, flow label), for ICRC tests.
inline RouteFields SampleRoute(bool ipv6, bool vlan) {
  RouteFields r;
  r.src_mac = {0x02, 0, 0, 0, 0, 1};
  r.dst_mac = {0x02, 0, 0, 0, 0, 2};
  r.ipv6 = ipv6;
  r.has_vlan = vlan;
  r.vlan_tci = 42;
  r.tclass = (26 << 2) | kEcnEct0;
  r.ttl = 17;
  r.flow_label = 0x12345;
  r.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  r.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  if (ipv6) {
    r.src_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    r.dst_ip = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  }
  return r;
}

}  // namespace droce::wire::testing

#endif  // DROCE_LIB_WIRE_ICRC_REFERENCE_TEST_H_
