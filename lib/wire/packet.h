// Parsing, ICRC and frame building for RoCEv2 packets:
//   Ethernet [802.1Q] | IPv4 or IPv6 | UDP (dst 4791) | BTH | ext headers |
//   [INT (wire/int.h), between droce peers that agreed on it] | payload |
//   pad (0-3) | ICRC (4)
//
// ParsePacket never reads outside [frame, frame+len) and classifies every
// frame with one ParseStatus, so the dataplane can count drops by reason.
#ifndef DROCE_LIB_WIRE_PACKET_H_
#define DROCE_LIB_WIRE_PACKET_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/int.h"
#include "wire/opcode.h"

namespace droce::wire {

enum class ParseStatus : uint8_t {
  kOk = 0,
  // Not ours: the dataplane hands these to ARP/ND or drops them as foreign.
  kNotIp,       // EtherType neither IPv4 nor IPv6 (or frame shorter than Ethernet)
  kNotUdp,      // IP but not UDP
  kNotRoce,     // UDP to a port other than 4791
  kIpFragment,  // fragmented IPv4 (RoCEv2 is never fragmented)
  // Malformed RoCEv2 (or IP carrying it).
  kTruncated,         // frame ends before a header or before the IP length says
  kBadIpHeader,       // IP version/IHL inconsistent
  kBadIpChecksum,     // IPv4 header checksum wrong (Linux ip_rcv drops it too)
  kIpTtlZero,         // IPv4 TTL 0: no host may send it (RFC 1122 3.2.1.7), so it was never sent as is
  kBadUdpLength,      // UDP length disagrees with the IP length
  kBadBthVersion,     // BTH TVer != 0
  kUnknownOpcode,     // opcode not in the table
  kBadPad,            // pad count larger than the payload area
  kLengthMismatch,    // payload area not a multiple of 4, or payload on a no-payload opcode
  kBadIcrc,           // ICRC does not match (only from ParseAndVerify)
  kBadInt,            // BTH says an INT header follows (wire/int.h) and it is malformed
  kCount,
};
const char* ParseStatusName(ParseStatus s);
inline bool IsForeign(ParseStatus s) {
  return s == ParseStatus::kNotIp || s == ParseStatus::kNotUdp || s == ParseStatus::kNotRoce ||
         s == ParseStatus::kIpFragment;
}

// Offsets are from the first byte of the frame.
struct ParsedPacket {
  ParseStatus status = ParseStatus::kTruncated;
  bool ipv6 = false;
  bool has_vlan = false;
  uint8_t tclass = 0;  // IPv4 TOS or IPv6 traffic class: DSCP << 2 | ECN
  uint8_t pad = 0;
  uint16_t vlan_tci = 0;
  uint16_t l3_offset = 0;
  uint16_t l4_offset = 0;
  uint16_t bth_offset = 0;
  uint16_t int_offset = 0;  // the INT header (BTH byte 4 has kBthIntFlag); 0: none
  uint16_t payload_offset = 0;
  uint16_t payload_len = 0;
  uint16_t icrc_offset = 0;  // the packet (without Ethernet padding) ends 4 bytes later
  uint8_t opcode = 0;

  bool ok() const { return status == ParseStatus::kOk; }
  uint8_t ecn() const { return tclass & 3; }
  const OpcodeInfo& op() const { return OpInfo(opcode); }
  uint32_t end() const { return icrc_offset + kIcrcBytes; }
};

ParsedPacket ParsePacket(const uint8_t* frame, uint32_t len);
// For captures cut by their snaplen: parses the headers from the first
// `caplen` bytes of a frame whose IP length may run past them. kOk when
// Ethernet through the extended headers are present and consistent with the
// IP/UDP lengths; the payload, pad and ICRC offsets are where the full frame
// has them and may lie beyond `caplen`, so only bytes before
// min(caplen, end()) may be read (DecodeFields reads the ICRC: use it only
// when end() <= caplen). Equals ParsePacket when the frame is complete.
ParsedPacket ParseHeaders(const uint8_t* frame, uint32_t caplen);
// ParsePacket, then checks the ICRC (kBadIcrc on mismatch).
ParsedPacket ParseAndVerify(const uint8_t* frame, uint32_t len);

// The ICRC: ComputeIcrc and IcrcBegin in wire/icrc.h.
// The ICRC field as stored: CRC-32 bytes in little-endian order.
uint32_t StoredIcrc(const uint8_t* frame, const ParsedPacket& p);
bool IcrcMatches(const uint8_t* frame, const ParsedPacket& p);

// ---------------------------------------------------------------------------
// Building frames. A Route is the per-QP (or per-peer) Eth/IP/UDP prefix,
// pre-built once; the transmit path copies it, writes BTH and extended
// headers, copies the payload and calls FinalizeFrame.
struct RouteFields {
  std::array<uint8_t, 6> dst_mac{};
  std::array<uint8_t, 6> src_mac{};
  bool has_vlan = false;
  uint16_t vlan_tci = 0;  // PCP << 13 | DEI << 12 | VID
  bool ipv6 = false;
  uint8_t tclass = 0;       // DSCP << 2 | ECN
  uint8_t ttl = 64;         // hop limit for IPv6
  uint16_t ipv4_id = 0;
  uint16_t ipv4_flags_fragment = 0x4000;  // DF
  uint32_t flow_label = 0;  // IPv6 only
  std::array<uint8_t, 16> src_ip{};  // IPv4 in bytes 12..15 (IPv4-mapped form)
  std::array<uint8_t, 16> dst_ip{};
  uint16_t udp_src_port = 0xC000;
  uint16_t udp_dst_port = kRoceV2Port;
  uint16_t udp_checksum = 0;  // RoCEv2 sends 0 (no checksum) over IPv4
};

struct Route {
  std::array<uint8_t, kEthBytes + kVlanTagBytes + kIpv6Bytes + kUdpBytes> bytes{};
  uint8_t len = 0;  // bytes of prefix; the BTH starts here
  uint8_t l3_offset = 0;
  uint8_t l4_offset = 0;
  bool ipv6 = false;
  // IPv4: one's-complement sum of the header with total length and checksum
  // zero, so FinalizeFrame adds the length instead of summing 20 bytes.
  uint32_t ipv4_partial_sum = 0;
};

Route MakeRoute(const RouteFields& f);
// The same route with another IP traffic class (DSCP << 2 | ECN): CNPs
// leave with their own DSCP and Not-ECT (RoCEv2 Annex A17.9).
Route WithTrafficClass(const Route& r, uint8_t tclass);

// Writes the route prefix at `frame` and returns where the BTH goes.
inline uint8_t* WriteRoute(uint8_t* frame, const Route& r) {
  std::memcpy(frame, r.bytes.data(), r.bytes.size());  // fixed size: one wide copy
  return frame + r.len;
}

// A QP's packet headers built once, when its route or destination QP is
// set: the route prefix and a BTH with the QP's fixed fields (P_Key,
// MigReq, destination QP), and the ICRC register after the pseudo-LRH and
// these headers with every per-packet field zero (IP and UDP lengths, BTH
// bytes 0-1 and 8-11: opcode, SE, pad, TVer, AckReq, PSN). A packet copies
// the prefix and sets its BTH fields, extended headers and payload;
// FinishTemplateFrame fills the lengths and checksum and starts the ICRC
// from `icrc_base` plus the per-packet bytes' contributions (the CRC is
// linear: crc(H ^ D) = crc(H) ^ crc0(D)), with no CRC pass over the
// headers; the pass covers only what follows the BTH.
struct HeaderTemplate {
  static constexpr uint32_t kBytes = 80;  // the longest route (66) and a BTH, rounded up
  std::array<uint8_t, kBytes> bytes{};
  Route route;  // offsets and the IPv4 partial sum (its bytes are those above)
  uint32_t icrc_base = 0;
  // TemplateRegister's share of the last frame's lengths and BTH bytes 0-1
  // (opcode, SE, pad), keyed by those bytes: a QP's packets mostly repeat
  // them, and only the PSN's four table lookups are left per packet.
  mutable uint32_t last_key = 0;  // BTH bytes 0-1, UDP length << 16; 0: none
  mutable uint32_t last_icrc = 0;
  // The transport length whose IP and UDP lengths, IPv4 checksum and BTH
  // pad count `bytes` carry (FinishShortFrame keeps the last frame's there:
  // a QP's short frames mostly repeat their length); 0: none, those fields
  // are zero. Every other build sets them in its frame (FinishLengths).
  uint32_t lengths_for = 0;
};
static_assert(HeaderTemplate::kBytes >= sizeof(Route::bytes) + kBthBytes);
HeaderTemplate MakeHeaderTemplate(const Route& r, uint16_t pkey, uint32_t dest_qp);

// Writes the template's headers at `frame` and returns the BTH.
inline uint8_t* WriteHeaderTemplate(uint8_t* frame, const HeaderTemplate& t) {
  std::memcpy(frame, t.bytes.data(), HeaderTemplate::kBytes);  // fixed size: wide copies
  return frame + t.route.len;
}

// The ICRC register after the pseudo-LRH, the headers [l3, BTH end) of a
// frame begun with WriteHeaderTemplate (its lengths and BTH set) and the
// `after_bth` bytes that follow the BTH: IcrcBegin(l3, ..., ipv6) with a
// CRC pass only over those bytes.
uint32_t IcrcTemplateBegin(const uint8_t* frame, const HeaderTemplate& t, uint32_t after_bth);

// FinalizeFrame without the ICRC: zeroes the pad, sets the pad count, IP and
// UDP lengths and the IPv4 checksum. Returns the ICRC's offset in the frame
// (for callers that compute the ICRC their own way, as lib/transport does).
uint32_t FinishHeaders(uint8_t* frame, const Route& r, uint32_t transport_len);

// Completes a frame whose route, BTH (pad count is set here), extended
// headers and payload are in place: zero pad bytes, IP/UDP lengths, IPv4
// header checksum, ICRC. `transport_len` = BTH + ext headers + payload bytes.
// Returns the frame length. Inline: every short frame's ICRC goes through it.
inline uint32_t FinalizeFrame(uint8_t* frame, const Route& r, uint32_t transport_len) {
  const uint32_t icrc_offset = FinishHeaders(frame, r, transport_len);
  StoreLe32(frame + icrc_offset,
            ComputeIcrc(frame + r.l3_offset, icrc_offset - r.l3_offset, r.ipv6));
  return icrc_offset + kIcrcBytes;
}

// FinalizeFrame for a frame begun with WriteHeaderTemplate: the same bytes,
// the ICRC's pass only over what follows the BTH.
uint32_t FinishTemplateFrame(uint8_t* frame, const HeaderTemplate& t, uint32_t transport_len);

// CE on an ECN-capable IPv4 or IPv6 frame, as a congestion point marks it
// (RFC 3168: a Not-ECT frame is left alone); the IPv4 header checksum
// follows, RoCEv2's ICRC masks the field. True if the frame was changed
// (false for Not-ECT and for a frame already CE).
bool MarkCe(uint8_t* frame, uint32_t len);

// A switch port's INT stamp (wire/int.h) on a frame ParsePacket accepted:
// fills the next hop record of its INT request header and recomputes the
// ICRC. False (the frame unchanged) without such a header or a free slot.
bool StampInt(uint8_t* frame, const ParsedPacket& p, const IntHop& h);

inline uint32_t PadFor(uint32_t payload_len) { return (4 - (payload_len & 3)) & 3; }

// FinishHeaders' steps: zero pad bytes, the pad count, IP and UDP lengths,
// the IPv4 checksum from the route's partial sum (RFC 1624: the length is
// the only field that differs from the route's). Returns the ICRC's offset.
[[gnu::always_inline]] inline uint32_t FinishLengths(uint8_t* frame, const Route& r, uint32_t transport_len) {
  uint8_t* bth = frame + r.len;
  const uint32_t pad = PadFor(transport_len);
  std::memset(bth + transport_len, 0, pad);
  BthWriter(bth).set_pad_count(static_cast<uint8_t>(pad));
  const uint32_t udp_len = kUdpBytes + transport_len + pad + kIcrcBytes;
  UdpWriter(frame + r.l4_offset).set_length(static_cast<uint16_t>(udp_len));
  uint8_t* l3 = frame + r.l3_offset;
  if (r.ipv6) {
    Ipv6Writer(l3).set_payload_length(static_cast<uint16_t>(udp_len));
  } else {
    Ipv4Writer ip(l3);
    const uint32_t total = kIpv4MinBytes + udp_len;
    ip.set_total_length(static_cast<uint16_t>(total));
    uint32_t sum = r.ipv4_partial_sum + total;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    ip.set_checksum(static_cast<uint16_t>(~sum));
  }
  return r.len + transport_len + pad;
}

// IcrcTemplateBegin's steps.
[[gnu::always_inline]] inline uint32_t TemplateRegister(const uint8_t* frame, const HeaderTemplate& t,
                                                       uint32_t after_bth) {
  const uint8_t* bth = frame + t.route.len;
  // Each field loaded as it was just stored (the opcode and pad bytes one
  // by one, the UDP length as 16 bits): a load spanning two stores waits
  // for them to reach the cache. The IP length follows the UDP length.
  uint16_t udp_len;
  std::memcpy(&udp_len, frame + t.route.l4_offset + 4, 2);
  const uint32_t key = bth[0] | bth[1] << 8 | uint32_t{udp_len} << 16;
  if (key != t.last_key) [[unlikely]] {
    t.last_key = key;
    t.last_icrc = t.icrc_base ^ IcrcPerPacketBytes(frame + t.route.l3_offset, t.route.ipv6) ^ IcrcPsnBytes(bth);
  }
  return Crc32Update(t.last_icrc ^ IcrcPsnBytes(bth), bth + kBthBytes, after_bth);
}

// FinishTemplateFrame's steps.
[[gnu::always_inline]] inline uint32_t FinishTemplateFrameInline(uint8_t* frame, const HeaderTemplate& t,
                                                                uint32_t transport_len) {
  const uint32_t icrc_offset = FinishLengths(frame, t.route, transport_len);
  const uint32_t crc = TemplateRegister(frame, t, icrc_offset - (t.route.len + kBthBytes));
  StoreLe32(frame + icrc_offset, Crc32Final(crc));
  return icrc_offset + kIcrcBytes;
}

// FinishTemplateFrameInline for frames built from `t` with WriteHeaderTemplate
// whose BTH byte 1 keeps the template's pad count (SE may be set in it):
// a frame of the transport length the template's fields are for takes them
// as they were copied; another sets them and the template keeps them.
[[gnu::always_inline]] inline uint32_t FinishShortFrame(uint8_t* frame, HeaderTemplate& t, uint32_t transport_len) {
  uint32_t icrc_offset;
  if (transport_len == t.lengths_for) [[likely]] {
    // The pad (0-3 bytes) zeroed by one 4-byte store: what it writes past
    // the pad is the ICRC's place, stored below.
    std::memset(frame + t.route.len + transport_len, 0, 4);
    icrc_offset = t.route.len + transport_len + PadFor(transport_len);
  } else {
    icrc_offset = FinishLengths(frame, t.route, transport_len);
    const uint32_t l3 = t.route.l3_offset, l4 = t.route.l4_offset;
    std::memcpy(&t.bytes[l4 + 4], frame + l4 + 4, 2);  // UDP length
    if (t.route.ipv6) {
      std::memcpy(&t.bytes[l3 + 4], frame + l3 + 4, 2);  // payload length
    } else {
      std::memcpy(&t.bytes[l3 + 2], frame + l3 + 2, 2);    // total length
      std::memcpy(&t.bytes[l3 + 10], frame + l3 + 10, 2);  // header checksum
    }
    uint8_t& b1 = t.bytes[t.route.len + 1];
    b1 = static_cast<uint8_t>((b1 & 0xCF) | (frame[t.route.len + 1] & 0x30));  // pad count
    t.lengths_for = transport_len;
  }
  const uint32_t crc = TemplateRegister(frame, t, icrc_offset - (t.route.len + kBthBytes));
  StoreLe32(frame + icrc_offset, Crc32Final(crc));
  return icrc_offset + kIcrcBytes;
}

uint16_t Ipv4HeaderChecksum(const uint8_t* ip, uint32_t header_bytes);

// A received IPv4 header's checksum is right (RFC 791) when the
// one's-complement sum over the whole header is 0xFFFF. Summed in native
// 32-bit words: the sum does not depend on byte order (RFC 1071 2(B)) and
// 0xFFFF reads the same both ways, nor on the order of the words.
// Ipv4ChecksumFolds: a sum of all of a header's words, folded.
inline bool Ipv4ChecksumFolds(uint64_t sum) {
  sum = (sum & 0xFFFFFFFF) + (sum >> 32);
  sum = (sum & 0xFFFFFFFF) + (sum >> 32);
  sum = (sum & 0xFFFF) + (sum >> 16);
  sum = (sum & 0xFFFF) + (sum >> 16);
  return sum == 0xFFFF;
}
// Inline: with a constant header_bytes (20) the options loop goes away.
inline bool Ipv4HeaderChecksumOk(const uint8_t* ip, uint32_t header_bytes) {
  uint64_t sum = uint64_t{LoadLe32(ip)} + LoadLe32(ip + 4) + LoadLe32(ip + 8) + LoadLe32(ip + 12) + LoadLe32(ip + 16);
  for (uint32_t i = kIpv4MinBytes; i < header_bytes; i += 4) sum += LoadLe32(ip + i);  // options
  return Ipv4ChecksumFolds(sum);
}

// UDP source port for a QP pair as Linux computes it for RoCEv2
// (rdma_calc_flow_label + rdma_flow_label_to_udp_sport): fold the 20-bit flow
// label into 14 bits and offset into 0xC000-0xFFFF.
uint32_t FlowLabelForQpPair(uint32_t local_qpn, uint32_t remote_qpn);
uint16_t UdpSourcePortForFlowLabel(uint32_t flow_label);

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_PACKET_H_
