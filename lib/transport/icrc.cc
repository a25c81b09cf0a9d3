#include "transport/icrc.h"

#include <cstring>

namespace droce::transport {

namespace {

using namespace droce::wire;

// The register after 8 bytes of 0xFF from the initial value.
uint32_t PseudoLrhState() {
  static const uint8_t kOnes[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  return Crc32Update(kCrc32Init, kOnes, sizeof kOnes);
}

// Variant fields, from the IP header: IPv4 (no options) TOS, TTL, header
// checksum; IPv6 traffic class, flow label, hop limit; then the UDP checksum
// and BTH byte 4 (FECN, BECN, reserved).
Crc32OrMask MakeMask(bool ipv6) {
  Crc32OrMask m;
  uint8_t* b = m.bytes;
  uint32_t ip_bytes;
  if (ipv6) {
    b[0] = 0x0F;
    b[1] = b[2] = b[3] = 0xFF;
    b[7] = 0xFF;
    ip_bytes = kIpv6Bytes;
  } else {
    b[1] = 0xFF;
    b[8] = 0xFF;
    b[10] = b[11] = 0xFF;
    ip_bytes = kIpv4MinBytes;
  }
  b[ip_bytes + 6] = b[ip_bytes + 7] = 0xFF;
  b[ip_bytes + kUdpBytes + 4] = 0xFF;
  return m;
}

const uint32_t kPseudoLrhState = PseudoLrhState();
const Crc32OrMask kMaskV4 = MakeMask(false);
const Crc32OrMask kMaskV6 = MakeMask(true);

}  // namespace

uint32_t IcrcBegin(const uint8_t* l3, uint32_t len, bool ipv6) {
  if (!ipv6 && (l3[0] & 0x0F) != 5) {
    // IPv4 options move the masked fields past the mask: copy as wire does.
    // (droce never sends them; a peer may.) ComputeIcrc's result is final,
    // and its inverse is the register.
    return ~wire::ComputeIcrc(l3, len, false);
  }
  return Crc32UpdateOrMasked(kPseudoLrhState, l3, len, ipv6 ? kMaskV6 : kMaskV4);
}

bool VerifyIcrc(const uint8_t* frame, const ParsedPacket& p) {
  return Icrc(frame + p.l3_offset, p.icrc_offset - p.l3_offset, p.ipv6) == StoredIcrc(frame, p);
}

}  // namespace droce::transport
