// Header prediction on receive: the headers a connected QP's frames carry,
// learnt from one frame that passed every receive check, compared with the
// next frames under a mask in a few 16-byte vector operations.
//
// A frame whose fixed header fields (everything through the BTH except the
// per-packet ones) equal the prediction's needs none of the parse's and the
// receive checks' per-field tests on them: they were judged on the learnt
// frame, and the device forgets its predictions whenever what they were
// judged against changes (its addresses, a QP's path). What varies from
// packet to packet is still checked here as ParsePacket checks it: the IP
// and UDP lengths, the IPv4 TTL and header checksum, the opcode, pad and
// payload area. Any difference or failed check answers "not predicted"
// and the frame takes the full parse and checks, which judge it as always
// (doc/rx-checks.md, "Header prediction").
//
// The ICRC of a predicted frame starts from a register precomputed over
// the learnt headers (their per-packet bytes zero), as HeaderTemplate does
// on transmit: the CRC pass covers only what follows the BTH.
#ifndef DROCE_LIB_WIRE_PREDICTION_H_
#define DROCE_LIB_WIRE_PREDICTION_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "wire/byte_order.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace droce::wire {

struct HeaderPrediction {
  static constexpr uint32_t kBytes = 80;  // the longest headers through the BTH (78), rounded up
  // expect[i] is the frame's byte i with the mask applied; the mask has
  // ones where the byte must be equal, zeros on the per-packet fields and
  // on fields no receive check reads (source MAC, IPv4 ID, IPv6 flow label
  // and hop limit, UDP checksum, the VLAN PCP).
  alignas(16) std::array<uint8_t, kBytes> expect{};
  alignas(16) std::array<uint8_t, kBytes> mask{};
  uint8_t bth_end = 0;  // where the BTH ends; 0: nothing predicted
  uint8_t l3_offset = 0;
  bool ipv6 = false;
  bool has_vlan = false;
  // The ICRC register after the pseudo-LRH and the headers [l3, bth_end)
  // with the per-packet bytes (IcrcPerPacketBytes, and the IPv4 ID) zero.
  uint32_t icrc_base = 0;

  bool empty() const { return bth_end == 0; }
};

// A frame that passed the receive checks can be predicted from: no INT
// header, no IPv4 options.
inline bool Predictable(const ParsedPacket& p) {
  return p.ok() && p.int_offset == 0 && (p.ipv6 || p.l4_offset - p.l3_offset == kIpv4MinBytes);
}
// The prediction learnt from such a frame (Predictable(p)).
HeaderPrediction LearnPrediction(const uint8_t* frame, const ParsedPacket& p);

namespace prediction_detail {
using Bytes16 = uint64_t __attribute__((vector_size(16)));
inline Bytes16 Load16(const uint8_t* p) {
  Bytes16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// Bits that differ under the mask in the 16 bytes at `at`.
inline Bytes16 Differ(const uint8_t* frame, const HeaderPrediction& h, uint32_t at) {
  return (Load16(frame + at) & Load16(h.mask.data() + at)) ^ Load16(h.expect.data() + at);
}
}  // namespace prediction_detail

// True when `frame` (len bytes) carries the predicted headers and passes
// every check ParsePacket makes on its per-packet fields; *p is then what
// ParsePacket(frame, len) returns. False: parse it.
inline bool ParsePredicted(const uint8_t* frame, uint32_t len, const HeaderPrediction& h, ParsedPacket* p) {
  using namespace prediction_detail;
  const uint32_t bth_end = h.bth_end;
  if (bth_end == 0 || len < bth_end + kIcrcBytes) return false;
  // [0, bth_end) in 16-byte pieces, the last ending at bth_end (bth_end >= 54).
  Bytes16 d = Differ(frame, h, 0) | Differ(frame, h, 16) | Differ(frame, h, 32) |
              Differ(frame, h, bth_end - 16);
  if (bth_end > 64) d |= Differ(frame, h, 48);
  if ((d[0] | d[1]) != 0) return false;

  const uint32_t l3 = h.l3_offset;
  const uint8_t* ip = frame + l3;
  uint32_t ip_end;
  uint32_t l4;
  if (h.ipv6) {
    l4 = l3 + kIpv6Bytes;
    ip_end = l4 + LoadBe16(ip + 4);
    p->tclass = static_cast<uint8_t>(LoadBe16(ip) >> 4);
  } else {
    if (ip[8] == 0 || !Ipv4HeaderChecksumOk(ip, kIpv4MinBytes)) return false;  // TTL, checksum
    l4 = l3 + kIpv4MinBytes;
    ip_end = l3 + LoadBe16(ip + 2);
    p->tclass = ip[1];
  }
  if (ip_end < bth_end + kIcrcBytes || ip_end > len || LoadBe16(frame + l4 + 4) != ip_end - l4) return false;
  const uint32_t bth = bth_end - kBthBytes;
  const OpcodeInfo& op = OpInfo(frame[bth]);
  if (!op.valid()) return false;
  const uint32_t icrc = ip_end - kIcrcBytes;
  const uint32_t payload = bth + op.header_bytes;
  if (payload > icrc) return false;
  const uint32_t area = icrc - payload;
  const uint8_t pad = (frame[bth + 1] >> 4) & 3;
  if (area % 4 != 0 || pad > area || (!(op.roles & kRolePayload) && area != 0)) return false;
  p->status = ParseStatus::kOk;
  p->ipv6 = h.ipv6;
  p->has_vlan = h.has_vlan;
  p->pad = pad;
  p->vlan_tci = h.has_vlan ? LoadBe16(frame + kEthBytes) : 0;
  p->l3_offset = static_cast<uint16_t>(l3);
  p->l4_offset = static_cast<uint16_t>(l4);
  p->bth_offset = static_cast<uint16_t>(bth);
  p->int_offset = 0;
  p->payload_offset = static_cast<uint16_t>(payload);
  p->payload_len = static_cast<uint16_t>(area - pad);
  p->icrc_offset = static_cast<uint16_t>(icrc);
  p->opcode = frame[bth];
  return true;
}

// IcrcMatches for a frame ParsePredicted accepted with `h`.
inline bool PredictedIcrcMatches(const uint8_t* frame, const ParsedPacket& p, const HeaderPrediction& h) {
  using namespace icrc_detail;
  const uint8_t* l3 = frame + p.l3_offset;
  uint32_t crc = h.icrc_base ^ IcrcPerPacketBytes(l3, p.ipv6);
  if (!p.ipv6) crc ^= kByteAt[kD36][l3[4]] ^ kByteAt[kD35][l3[5]];  // the IPv4 ID
  const uint32_t bth_end = p.bth_offset + kBthBytes;
  crc = Crc32Update(crc, frame + bth_end, p.icrc_offset - bth_end);
  return Crc32Final(crc) == LoadLe32(frame + p.icrc_offset);
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_PREDICTION_H_
