#include "wire/icrc.h"

#include <algorithm>
#include <cstring>

#include "wire/headers.h"
#include "wire/opcode.h"

namespace droce::wire {

namespace {

// The register after 8 bytes of 0xFF from the initial value.
uint32_t PseudoLrhState() {
  static const uint8_t kOnes[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  return Crc32Update(kCrc32Init, kOnes, sizeof kOnes);
}

// Sets the variant fields of the IP header (ip_bytes long), UDP and BTH
// starting at b to ones (or marks them in a mask).
void SetVariantFields(uint8_t* b, bool ipv6, uint32_t ip_bytes) {
  if (ipv6) {
    b[0] |= 0x0F;  // traffic class (low nibble of byte 0) and flow label
    b[1] = b[2] = b[3] = 0xFF;
    b[7] = 0xFF;  // hop limit
  } else {
    b[1] = 0xFF;             // TOS
    b[8] = 0xFF;             // TTL
    b[10] = b[11] = 0xFF;    // header checksum
  }
  b[ip_bytes + 6] = b[ip_bytes + 7] = 0xFF;  // UDP checksum
  b[ip_bytes + kUdpBytes + 4] = 0xFF;        // BTH byte 4: FECN, BECN, reserved
}

Crc32OrMask MakeMask(bool ipv6) {
  Crc32OrMask m;
  SetVariantFields(m.bytes, ipv6, ipv6 ? kIpv6Bytes : kIpv4MinBytes);
  return m;
}

const uint32_t kPseudoLrhState = PseudoLrhState();
const Crc32OrMask kMaskV4 = MakeMask(false);
const Crc32OrMask kMaskV6 = MakeMask(true);

// IPv4 options move the UDP and BTH fields past the constant mask: the
// headers (at most 60 + 8 + 12 bytes) are copied and set to ones. Out of
// line, so the common path carries no stack buffer.
[[gnu::noinline]] uint32_t IcrcBeginIpv4Options(const uint8_t* l3, uint32_t len) {
  const uint32_t ip_bytes = (l3[0] & 0x0F) * 4u;
  uint8_t headers[60 + kUdpBytes + kBthBytes];
  const uint32_t masked = std::min(len, ip_bytes + kUdpBytes + kBthBytes);
  std::memcpy(headers, l3, masked);
  SetVariantFields(headers, false, ip_bytes);
  const uint32_t crc = Crc32Update(kPseudoLrhState, headers, masked);
  return Crc32Update(crc, l3 + masked, len - masked);
}

}  // namespace

namespace icrc_detail {
namespace {
constexpr uint32_t kDistance[kDistances] = {1, 2, 3, 4, 11, 12, 15, 16, 35, 36, 37, 38, 55, 56};

// At compile time: the table of distance d from that of d - 1 (one more
// zero byte through the CRC), as slice-by-N tables are made.
constexpr std::array<std::array<uint32_t, 256>, kDistances> MakeByteAt() {
  std::array<uint32_t, 256> one{};
  for (uint32_t v = 0; v < 256; ++v) {
    uint32_t r = v;
    for (int k = 0; k < 8; ++k) r = (r >> 1) ^ ((r & 1) ? 0xEDB88320u : 0);
    one[v] = r;
  }
  std::array<std::array<uint32_t, 256>, kDistances> t{};
  std::array<uint32_t, 256> cur = one;
  uint32_t i = 0;
  for (uint32_t d = 1; i < kDistances; ++d) {
    if (d == kDistance[i]) t[i++] = cur;
    for (uint32_t v = 0; v < 256; ++v) cur[v] = (cur[v] >> 8) ^ one[cur[v] & 0xFF];
  }
  return t;
}
}  // namespace

constexpr std::array<std::array<uint32_t, 256>, kDistances> kByteAt = MakeByteAt();
}  // namespace icrc_detail

uint32_t IcrcBegin(const uint8_t* l3, uint32_t len, bool ipv6) {
  if (!ipv6 && (l3[0] & 0x0F) != 5) [[unlikely]] return IcrcBeginIpv4Options(l3, len);
  return Crc32UpdateOrMasked(kPseudoLrhState, l3, len, ipv6 ? kMaskV6 : kMaskV4);
}

}  // namespace droce::wire
