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
// Two tiers. A stream's frames mostly repeat even their per-packet fields
// (the same opcode, pad and lengths message after message), so the
// prediction also keeps the last frame it took whole: a frame equal to it
// but for the fields that change with every packet (IPv4 ID and header
// checksum, AckReq and PSN; the source MAC, UDP checksum, IPv6 flow label
// and hop limit no check reads) and of the same length parses as it did,
// and only its IPv4 header checksum is summed again. A sender whose IPv4 ID
// does not change (droce's header template sends a constant one) repeats
// its whole IPv4 header: once two frames taken in a row carry the same ID,
// the exact mask covers the ID and the header checksum too, and a frame
// equal to the last one under it has the header checksum the last one was
// judged with, so nothing is summed, and the ICRC register holds the ID's
// bytes as well. A frame with another ID then differs, is taken by the
// per-field checks and turns this off again. The frame taken before
// the last one is kept as well: frames that alternate two kinds (requests
// and ACKs both ways on one QP) are taken from it the same way. Any other
// frame the mask allows has its per-packet fields checked and becomes the
// last one.
//
// The ICRC of a predicted frame starts from a register precomputed over
// the last frame's headers with its per-packet bytes zero, as
// HeaderTemplate does on transmit: six table lookups for those bytes, then
// the CRC pass over what follows the BTH.
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
  // expect[i] is the last frame's byte i (compared under `exact`). `mask` has ones
  // where every predicted frame's byte must be equal, zeros on the
  // per-packet fields and on fields no receive check reads (source MAC,
  // IPv4 ID, IPv6 flow label and hop limit, UDP checksum, the VLAN PCP).
  // `exact` also has ones on the per-packet fields a stream repeats (IP
  // and UDP lengths, IPv4 TOS and TTL, IPv6 traffic class, VLAN PCP, BTH
  // bytes 0-1): a frame equal to expect under it parses as the last one.
  // Unless `id_varies`, `exact` also has ones on the IPv4 ID and header
  // checksum.
  alignas(16) std::array<uint8_t, kBytes> expect{};
  alignas(16) std::array<uint8_t, kBytes> mask{};
  alignas(16) std::array<uint8_t, kBytes> exact{};
  uint8_t bth_end = 0;  // where the BTH ends; 0: nothing predicted
  uint8_t l3_offset = 0;
  bool ipv6 = false;
  bool has_vlan = false;
  // IPv4 whose frames change the ID: the exact tier sums the header's ID
  // and checksum words, and the ICRC registers leave the ID's bytes out.
  // False for IPv6 and for IPv4 once two frames taken in a row had one ID.
  bool id_varies = false;
  // The ICRC register after the pseudo-LRH and the headers [l3, bth_end)
  // with the per-packet bytes (IcrcPerPacketBytes, and the IPv4 ID) zero.
  uint32_t icrc_base = 0;
  // The last frame taken: its length, parse and class, the register after its
  // headers with BTH bytes 8-11 (and, id_varies, the IPv4 ID) zero, and the one's-
  // complement sum of its IPv4 header's 16-bit words but the ID and the
  // checksum (those the exact mask covers), folded to 16 bits
  // (Ipv4SumButIdAndChecksum).
  uint32_t last_len = ~0u;  // ~0u: none taken yet (no frame is that long)
  uint32_t last_icrc = 0;
  uint32_t last_ipv4_sum = 0;
  ParsedPacket last;
  // The receiver's verdict on `last` (what it decides from the parse
  // alone), kept by the receiver; 0: none yet. A frame taken by the
  // per-field checks sets it to 0; it changes places with the one before.
  uint8_t last_class = 0;
  // The frame taken before the last one, the same six things: a QP whose
  // frames alternate two kinds (its peer's requests and the ACKs of its own
  // on one QP) finds each frame equal to this one, which then changes
  // places with the last instead of taking the per-field checks.
  struct Taken {
    alignas(16) std::array<uint8_t, kBytes> expect{};
    uint32_t len = ~0u;
    uint32_t icrc = 0;
    uint32_t ipv4_sum = 0;
    ParsedPacket parse;
    uint8_t parse_class = 0;
  };
  Taken before;

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
// Bits that differ under `mask` in the 16 bytes at `at`.
inline Bytes16 Differ(const uint8_t* frame, const uint8_t* expect, const uint8_t* mask, uint32_t at) {
  return (Load16(frame + at) ^ Load16(expect + at)) & Load16(mask + at);
}
// True when [0, bth_end) of `frame` equals `expect` under `mask`: 16-byte
// pieces, the last ending at bth_end (bth_end >= 54).
inline bool EqualUnder(const uint8_t* frame, const HeaderPrediction& h, const uint8_t* expect, const uint8_t* mask) {
  const uint32_t bth_end = h.bth_end;
  Bytes16 d = Differ(frame, expect, mask, 0) | Differ(frame, expect, mask, 16) | Differ(frame, expect, mask, 32) |
              Differ(frame, expect, mask, bth_end - 16);
  if (bth_end > 64) d |= Differ(frame, expect, mask, 48);
  return (d[0] | d[1]) == 0;
}
// `frame` equals a frame taken (its bytes under the exact mask in
// `expect`, its length and IPv4 sum) but for the fields every packet
// changes, and (IPv4) its header checksum is right.
inline bool EqualsTaken(const uint8_t* frame, uint32_t len, const HeaderPrediction& h, const uint8_t* expect,
                        uint32_t taken_len, uint32_t ipv4_sum) {
  if (len != taken_len || !EqualUnder(frame, h, expect, h.exact.data())) return false;
  if (!h.id_varies) return true;  // IPv6, or the whole IPv4 header compared
  // The header's ID and checksum, the words the exact mask leaves out, to
  // the rest's folded sum (at most 0xFFFF): less than 3 * 2^16 in all, so
  // one fold gives 0xFFFF exactly when the one's-complement sum is 0xFFFF
  // (a sum that folds to 0x10000 is 1).
  const uint8_t* ip = frame + h.l3_offset;
  const uint32_t sum = ipv4_sum + LoadLe16(ip + 4) + LoadLe16(ip + 10);
  return (sum & 0xFFFF) + (sum >> 16) == 0xFFFF;
}
}  // namespace prediction_detail

// The exact tier: `frame` equals the last frame taken but for the fields
// every packet changes, has its length, and (IPv4) a right header
// checksum: h.last is then what ParsePacket(frame, len) returns.
inline bool MatchesLast(const uint8_t* frame, uint32_t len, const HeaderPrediction& h) {
  return prediction_detail::EqualsTaken(frame, len, h, h.expect.data(), h.last_len, h.last_ipv4_sum);
}
// The same against the frame taken before the last one (h.before).
inline bool MatchesBefore(const uint8_t* frame, uint32_t len, const HeaderPrediction& h) {
  return prediction_detail::EqualsTaken(frame, len, h, h.before.expect.data(), h.before.len, h.before.ipv4_sum);
}

// The one's-complement sum of an IPv4 header's 16-bit words but the ID
// (bytes 4-5) and the header checksum (10-11), folded to 16 bits: what
// EqualsTaken adds those two words to.
uint32_t Ipv4SumButIdAndChecksum(const uint8_t* ip);

// The per-packet fields of a frame the mask allows, checked as ParsePacket
// checks them; when they pass, the frame becomes the last one taken.
bool TakePredicted(const uint8_t* frame, uint32_t len, HeaderPrediction& h);
// A frame the exact tier did not take as the last one: taken as the one
// before (MatchesBefore; it then becomes the last) or by TakePredicted.
// False: nothing predicted, or the frame is not predicted.
bool TakeBeforeOrPredicted(const uint8_t* frame, uint32_t len, HeaderPrediction& h);

// What ParsePacket(frame, len) returns when `frame` (len bytes) carries the
// predicted headers and passes every check ParsePacket makes on its
// per-packet fields (it is then the last frame taken); nullptr: parse it.
inline const ParsedPacket* ParsePredicted(const uint8_t* frame, uint32_t len, HeaderPrediction& h) {
  if (MatchesLast(frame, len, h)) [[likely]] return &h.last;
  return TakeBeforeOrPredicted(frame, len, h) ? &h.last : nullptr;
}

// IcrcMatches for the frame ParsePredicted took last with `h`.
inline bool PredictedIcrcMatches(const uint8_t* frame, const HeaderPrediction& h) {
  const ParsedPacket& p = h.last;
  const uint32_t bth_end = p.bth_offset + kBthBytes;
  uint32_t crc = h.last_icrc ^ IcrcPsnBytes(frame + p.bth_offset);
  if (h.id_varies) crc ^= IcrcIpv4IdBytes(frame + p.l3_offset);
  crc = Crc32Update(crc, frame + bth_end, p.icrc_offset - bth_end);
  return Crc32Final(crc) == LoadLe32(frame + p.icrc_offset);
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_PREDICTION_H_
