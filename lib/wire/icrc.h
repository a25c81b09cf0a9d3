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

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_ICRC_H_
