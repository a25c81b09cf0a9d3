// The ICRC on the hot path (IBTA Annex A17.3.3, computed as wire::ComputeIcrc
// defines it, and tested against it): no copy of the headers, and on the
// transmit side the payload gather fused with the CRC.
//
// wire::ComputeIcrc copies the IP/UDP/BTH headers into a scratch buffer, sets
// the variant fields to ones there and CRCs the copy: byte stores followed by
// 16-byte loads of the same bytes stall store forwarding, which made the
// ICRC of a 64-byte WRITE cost as much as the rest of the packet. Here the
// register after the 8 bytes of 0xFF standing for the LRH is a constant, and
// the variant fields are ORed in as the CRC loads the headers
// (wire::Crc32UpdateOrMasked).
#ifndef DROCE_LIB_TRANSPORT_ICRC_H_
#define DROCE_LIB_TRANSPORT_ICRC_H_

#include <cstdint>

#include "wire/crc32.h"
#include "wire/packet.h"

namespace droce::transport {

// CRC register after the pseudo-LRH and the masked bytes [l3, l3+len):
// continue it over the payload with wire::Crc32Update / Crc32CopyUpdate and
// finish with wire::Crc32Final. `len` must cover the IP, UDP and BTH headers;
// IPv4 headers with options fall back to the copying code.
uint32_t IcrcBegin(const uint8_t* l3, uint32_t len, bool ipv6);

// The ICRC of [l3, l3+len) (len runs up to the ICRC field).
inline uint32_t Icrc(const uint8_t* l3, uint32_t len, bool ipv6) {
  return wire::Crc32Final(IcrcBegin(l3, len, ipv6));
}

// The received frame's ICRC matches (wire::IcrcMatches, without the copy).
bool VerifyIcrc(const uint8_t* frame, const wire::ParsedPacket& p);

using wire::FinishHeaders;  // FinalizeFrame without the ICRC (lib/wire/packet.h)

// wire::FinalizeFrame with the ICRC computed here.
inline uint32_t SealFrame(uint8_t* frame, const wire::Route& r, uint32_t transport_len) {
  const uint32_t icrc_offset = FinishHeaders(frame, r, transport_len);
  wire::StoreLe32(frame + icrc_offset,
                  Icrc(frame + r.l3_offset, icrc_offset - r.l3_offset, r.ipv6));
  return icrc_offset + wire::kIcrcBytes;
}

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_ICRC_H_
