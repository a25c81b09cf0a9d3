#include "wire/prediction.h"

#include <algorithm>

namespace droce::wire {

HeaderPrediction LearnPrediction(const uint8_t* frame, const ParsedPacket& p) {
  HeaderPrediction h;
  const uint32_t bth_end = p.bth_offset + kBthBytes;
  h.bth_end = static_cast<uint8_t>(bth_end);
  h.l3_offset = static_cast<uint8_t>(p.l3_offset);
  h.ipv6 = p.ipv6;
  h.has_vlan = p.has_vlan;
  uint8_t* m = h.mask.data();
  std::fill(m, m + bth_end, 0xFF);
  auto clear = [m](uint32_t at, uint32_t n) { std::fill(m + at, m + at + n, 0); };
  clear(6, 6);                               // source MAC: no check reads it
  if (p.has_vlan) m[kEthBytes] = 0x0F;       // the VLAN PCP and DEI (the VID is checked)
  const uint32_t l3 = p.l3_offset;
  if (p.ipv6) {
    m[l3] = 0xF0;                            // version; traffic class and flow label not
    clear(l3 + 1, 3);
    clear(l3 + 4, 2);                        // payload length
    m[l3 + 7] = 0;                           // hop limit
  } else {
    clear(l3 + 1, 1);                        // TOS
    clear(l3 + 2, 2);                        // total length
    clear(l3 + 4, 2);                        // ID (its ICRC share is added per packet)
    m[l3 + 8] = 0;                           // TTL (checked for 0 per packet)
    clear(l3 + 10, 2);                       // header checksum (checked per packet)
  }
  const uint32_t l4 = p.l4_offset;
  clear(l4 + 4, 2);                          // UDP length
  clear(l4 + 6, 2);                          // UDP checksum
  const uint32_t bth = p.bth_offset;
  m[bth] = 0;                                // opcode
  m[bth + 1] = 0x0F;                         // SE, MigReq, pad per packet; TVer checked
  clear(bth + 8, 4);                         // AckReq, PSN
  for (uint32_t i = 0; i < bth_end; ++i) h.expect[i] = frame[i] & m[i];

  const uint8_t* ip = frame + l3;
  uint32_t base = IcrcBegin(ip, bth_end - l3, p.ipv6) ^ IcrcPerPacketBytes(ip, p.ipv6);
  if (!p.ipv6) base ^= icrc_detail::kByteAt[icrc_detail::kD36][ip[4]] ^ icrc_detail::kByteAt[icrc_detail::kD35][ip[5]];
  h.icrc_base = base;
  return h;
}

}  // namespace droce::wire
