#include "wire/prediction.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace droce::wire {

HeaderPrediction LearnPrediction(const uint8_t* frame, const ParsedPacket& p) {
  HeaderPrediction h;
  const uint32_t bth_end = p.bth_offset + kBthBytes;
  h.bth_end = static_cast<uint8_t>(bth_end);
  h.l3_offset = static_cast<uint8_t>(p.l3_offset);
  h.ipv6 = p.ipv6;
  h.has_vlan = p.has_vlan;
  h.id_varies = !p.ipv6;
  // The exact mask: every byte but those each packet changes and those no
  // check reads.
  uint8_t* x = h.exact.data();
  std::fill(x, x + bth_end, 0xFF);
  auto clear = [](uint8_t* m, uint32_t at, uint32_t n) { std::fill(m + at, m + at + n, 0); };
  clear(x, 6, 6);                            // source MAC: no check reads it
  const uint32_t l3 = p.l3_offset;
  if (p.ipv6) {
    x[l3 + 1] = 0xF0;                        // traffic class; not the flow label
    clear(x, l3 + 2, 2);
    x[l3 + 7] = 0;                           // hop limit
  } else {
    clear(x, l3 + 4, 2);                     // ID
    clear(x, l3 + 10, 2);                    // header checksum (summed per packet)
  }
  const uint32_t l4 = p.l4_offset;
  clear(x, l4 + 6, 2);                       // UDP checksum
  const uint32_t bth = p.bth_offset;
  clear(x, bth + 8, 4);                      // AckReq, PSN
  // The mask: the exact one without the per-packet fields a stream repeats.
  uint8_t* m = h.mask.data();
  std::copy(x, x + bth_end, m);
  if (p.has_vlan) m[kEthBytes] = 0x0F;       // the VLAN PCP and DEI (the VID is checked)
  if (p.ipv6) {
    m[l3] = 0xF0;                            // version; traffic class not
    m[l3 + 1] = 0;
    clear(m, l3 + 4, 2);                     // payload length
  } else {
    clear(m, l3 + 1, 1);                     // TOS
    clear(m, l3 + 2, 2);                     // total length
    m[l3 + 8] = 0;                           // TTL (checked for 0 per packet)
  }
  clear(m, l4 + 4, 2);                       // UDP length
  m[bth] = 0;                                // opcode
  m[bth + 1] = 0x0F;                         // SE, MigReq, pad per packet; TVer checked
  std::copy(frame, frame + bth_end, h.expect.begin());

  const uint8_t* ip = frame + l3;
  uint32_t base = IcrcBegin(ip, bth_end - l3, p.ipv6) ^ IcrcPerPacketBytes(ip, p.ipv6);
  if (!p.ipv6) base ^= IcrcIpv4IdBytes(ip);
  h.icrc_base = base;
  return h;  // no frame taken yet: the next one the mask allows is
}

uint32_t Ipv4SumButIdAndChecksum(const uint8_t* ip) {
  // Summed in native words as Ipv4HeaderChecksumOk sums (RFC 1071 2(B)).
  uint64_t sum = uint64_t{LoadLe32(ip)} + LoadLe16(ip + 6) + LoadLe16(ip + 8) + LoadLe32(ip + 12) + LoadLe32(ip + 16);
  while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint32_t>(sum);
}

namespace {
// An IPv4 prediction's exact tier with (false) or without (true) the ID and
// header checksum compared; the frame before's register changes with it
// (its ID is in its expect).
void SetIdVaries(HeaderPrediction& h, bool id_varies) {
  const uint32_t l3 = h.l3_offset;
  const uint8_t m = id_varies ? 0 : 0xFF;
  for (const uint32_t at : {l3 + 4, l3 + 5, l3 + 10, l3 + 11}) h.exact[at] = m;
  h.before.icrc ^= IcrcIpv4IdBytes(h.before.expect.data() + l3);
  h.id_varies = id_varies;
}
}  // namespace

bool TakePredicted(const uint8_t* frame, uint32_t len, HeaderPrediction& h) {
  using namespace prediction_detail;
  const uint32_t bth_end = h.bth_end;
  if (len < bth_end + kIcrcBytes || !EqualUnder(frame, h, h.expect.data(), h.mask.data())) return false;
  ParsedPacket p;
  const uint32_t l3 = h.l3_offset;
  const uint8_t* ip = frame + l3;
  uint32_t ip_end;
  uint32_t l4;
  if (h.ipv6) {
    l4 = l3 + kIpv6Bytes;
    ip_end = l4 + LoadBe16(ip + 4);
    p.tclass = static_cast<uint8_t>(LoadBe16(ip) >> 4);
  } else {
    if (ip[8] == 0 || !Ipv4HeaderChecksumOk(ip, kIpv4MinBytes)) return false;  // TTL, checksum
    l4 = l3 + kIpv4MinBytes;
    ip_end = l3 + LoadBe16(ip + 2);
    p.tclass = ip[1];
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
  p.status = ParseStatus::kOk;
  p.ipv6 = h.ipv6;
  p.has_vlan = h.has_vlan;
  p.pad = pad;
  p.vlan_tci = h.has_vlan ? LoadBe16(frame + kEthBytes) : 0;
  p.l3_offset = static_cast<uint16_t>(l3);
  p.l4_offset = static_cast<uint16_t>(l4);
  p.bth_offset = static_cast<uint16_t>(bth);
  p.int_offset = 0;
  p.payload_offset = static_cast<uint16_t>(payload);
  p.payload_len = static_cast<uint16_t>(area - pad);
  p.icrc_offset = static_cast<uint16_t>(icrc);
  p.opcode = frame[bth];
  // The frame passed: the next ones equal to it under the exact mask parse
  // as it did. The last one becomes the one before.
  std::copy(h.expect.begin(), h.expect.end(), h.before.expect.begin());
  h.before.len = h.last_len;
  h.before.icrc = h.last_icrc;
  h.before.ipv4_sum = h.last_ipv4_sum;
  h.before.parse = h.last;
  h.before.parse_class = h.last_class;
  h.last = p;
  h.last_class = 0;
  h.last_len = len;
  // The ID against the one of the frame taken before (or learnt from): the
  // same one turns on the whole header's comparison, another turns it off.
  const bool id_varies = !h.ipv6 && LoadLe16(ip + 4) != LoadLe16(h.expect.data() + l3 + 4);
  if (id_varies != h.id_varies) SetIdVaries(h, id_varies);
  std::copy(frame, frame + bth_end, h.expect.begin());
  h.last_icrc = h.icrc_base ^ IcrcPerPacketBytes(ip, h.ipv6) ^ IcrcPsnBytes(frame + bth);
  if (!h.ipv6 && !id_varies) h.last_icrc ^= IcrcIpv4IdBytes(ip);
  if (!h.ipv6) h.last_ipv4_sum = Ipv4SumButIdAndChecksum(ip);
  return true;
}

bool TakeBeforeOrPredicted(const uint8_t* frame, uint32_t len, HeaderPrediction& h) {
  if (h.bth_end == 0) return false;
  if (!MatchesBefore(frame, len, h)) return TakePredicted(frame, len, h);
  // The last frame taken and the one before change places. A stream that
  // alternates two kinds (a two-frame SEND's FIRST and LAST, message after
  // message) comes here for every frame: the headers change places 16
  // bytes at a time, where std::swap of the byte arrays is a byte loop
  // (~560 instructions a frame).
  using prediction_detail::Bytes16;
  using prediction_detail::Load16;
  static_assert(HeaderPrediction::kBytes % sizeof(Bytes16) == 0);
  for (uint32_t i = 0; i < HeaderPrediction::kBytes; i += sizeof(Bytes16)) {
    const Bytes16 a = Load16(h.expect.data() + i);
    const Bytes16 b = Load16(h.before.expect.data() + i);
    std::memcpy(h.expect.data() + i, &b, sizeof b);
    std::memcpy(h.before.expect.data() + i, &a, sizeof a);
  }
  std::swap(h.last_len, h.before.len);
  std::swap(h.last_icrc, h.before.icrc);
  std::swap(h.last_ipv4_sum, h.before.ipv4_sum);
  std::swap(h.last, h.before.parse);
  std::swap(h.last_class, h.before.parse_class);
  return true;
}

}  // namespace droce::wire
