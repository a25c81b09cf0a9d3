// The ICRC (IBTA Annex A17.3.3): the one implementation, used to build,
// check and verify-while-placing every frame.
//
// The CRC runs over 8 bytes of 0xFF standing for the LRH, the IP header with
// its variant fields set to ones (IPv4 TOS, TTL, header checksum; IPv6
// traffic class, flow label, hop limit), UDP with the checksum ones, BTH
// with byte 4 (FECN, BECN, reserved) ones, then everything up to the ICRC.
// No copy of the headers: the register after the pseudo-LRH is a constant,
// and the variant fields are ORed in as the CRC loads the headers
// (Crc32UpdateOrMasked); a copy followed by 16-byte loads of the bytes just
// stored stalls store forwarding, which made the ICRC of a 64-byte WRITE
// cost as much as the rest of the packet. Only IPv4 headers with options
// (droce never sends them; a peer may) take a copy of the headers.
//
// Callers that gather a payload continue the register from IcrcBegin over
// it (Crc32Update / Crc32CopyUpdate) and finish with Crc32Final.
#ifndef DROCE_LIB_WIRE_ICRC_H_
#define DROCE_LIB_WIRE_ICRC_H_

#include <array>
#include <cstdint>

#include "wire/crc32.h"

namespace droce::wire {

// The CRC register after the pseudo-LRH and the masked bytes [l3, l3+len).
// `l3` points at the IP header; `len` must cover the IP, UDP and BTH headers.
uint32_t IcrcBegin(const uint8_t* l3, uint32_t len, bool ipv6);

// The ICRC of [l3, l3+len), `len` running up to the ICRC field.
inline uint32_t ComputeIcrc(const uint8_t* l3, uint32_t len, bool ipv6) {
  return Crc32Final(IcrcBegin(l3, len, ipv6));
}

// The register change of the per-packet bytes in headers built from a
// HeaderTemplate (wire/packet.h): IP and UDP lengths, BTH bytes 0-1
// (opcode, SE, MigReq, pad, TVer) and 8-11 (AckReq, PSN). By linearity the
// register after the headers is the register with those bytes zero XOR
// this: ten table lookups instead of a CRC pass over the 40 (IPv4) or 60
// (IPv6) header bytes. `l3` points at a 20-byte IPv4 or an IPv6 header.
namespace icrc_detail {
// kByteAt[i][v]: the CRC register, zero before, after byte v and then
// kDistance[i] - 1 zero bytes; kDistance is the byte's distance from the
// end of the BTH (the last byte: 1).
// (kD35 and kD36: the IPv4 ID, for header prediction, wire/prediction.h.)
enum Distance : uint32_t { kD1, kD2, kD3, kD4, kD11, kD12, kD15, kD16, kD35, kD36, kD37, kD38, kD55, kD56, kDistances };
extern const std::array<std::array<uint32_t, 256>, kDistances> kByteAt;
}  // namespace icrc_detail

inline uint32_t IcrcPerPacketBytes(const uint8_t* l3, bool ipv6) {
  using namespace icrc_detail;
  const auto& t = kByteAt;
  const uint8_t* udp = l3 + (ipv6 ? 40 : 20);
  uint32_t c = ipv6 ? t[kD56][l3[4]] ^ t[kD55][l3[5]] : t[kD38][l3[2]] ^ t[kD37][l3[3]];
  c ^= t[kD16][udp[4]] ^ t[kD15][udp[5]];  // UDP length
  c ^= t[kD12][udp[8]] ^ t[kD11][udp[9]];  // BTH bytes 0-1
  c ^= t[kD4][udp[16]] ^ t[kD3][udp[17]] ^ t[kD2][udp[18]] ^ t[kD1][udp[19]];  // BTH bytes 8-11
  return c;
}
// The BTH's AckReq and PSN bytes (8-11) alone, and the IPv4 ID's bytes: what
// changes from packet to packet where the rest repeats.
inline uint32_t IcrcPsnBytes(const uint8_t* bth) {
  using namespace icrc_detail;
  return kByteAt[kD4][bth[8]] ^ kByteAt[kD3][bth[9]] ^ kByteAt[kD2][bth[10]] ^ kByteAt[kD1][bth[11]];
}
inline uint32_t IcrcIpv4IdBytes(const uint8_t* l3) {
  using namespace icrc_detail;
  return kByteAt[kD36][l3[4]] ^ kByteAt[kD35][l3[5]];
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_ICRC_H_
