// The receive checks (doc/rx-checks.md), in order: the cheap ones that
// decide whether a frame is for this device at all come before the ICRC.
// What fails one is counted and dropped; ARP and neighbour discovery are
// handled here, as the foreign traffic for us they are.
//
// Included by rx.cc alone: the per-frame steps inline into the receive loop.
#ifndef DROCE_LIB_CORE_RX_CHECKS_H_
#define DROCE_LIB_CORE_RX_CHECKS_H_

#include "core/device.h"
#include "wire/icrc.h"

namespace droce::core {

inline Device::RxVerdict Device::CheckFrame(const uint8_t* frame, uint32_t len, const wire::ParsedPacket& p) {
  if (len < wire::kEthBytes) {
    ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kTruncated)];
    return {};
  }
  // 1. Link layer: the VLAN (0 = untagged or priority-tagged), then the
  //    destination MAC (the port may be promiscuous).
  if ((p.has_vlan ? (p.vlan_tci & 0xFFF) : 0) != rx_vid_) {
    ++counters_.rx_drop_vlan;
    return {};
  }
  if (!DstMacAccepted(frame, p.ok() || !wire::IsForeign(p.status))) {
    ++counters_.rx_drop_dst_mac;
    return {};
  }
  // 2. Structure (lib/wire ParsePacket), IPv4 header checksum and TTL.
  if (!p.ok()) {
    if (wire::IsForeign(p.status)) {
      if (p.status == wire::ParseStatus::kNotUdp && p.ipv6) {
        HandleNd(frame, len);  // ICMPv6: neighbour discovery (neighbor_v6.cc)
      } else if (len >= wire::kEthBytes + wire::kArpBytes) {
        HandleArp(frame, len);  // neighbors.cc
      }
      ++counters_.rx_foreign;
    } else {
      ++counters_.rx_parse_errors[static_cast<int>(p.status)];
    }
    return {};
  }
  // 3. Network layer: addressed to one of our GIDs.
  if (!DstIpAccepted(frame, p)) {
    ++counters_.rx_drop_dst_ip;
    return {};
  }
  // 4. The BTH P_Key against the port's one-entry P_Key table, the default
  //    partition 0xFFFF (full member): IBTA 10.9.3 matches when the low 15
  //    bits agree and one side is a full member, so 0xFFFF and 0x7FFF.
  const wire::BthView bth(frame + p.bth_offset);
  if ((bth.pkey() & 0x7FFF) != 0x7FFF) {
    ++counters_.rx_drop_pkey;
    return {};
  }
  // 5. ICRC. RC WRITE MIDDLE: the QP checks it while it places the payload.
  const uint32_t index = bth.dest_qp() - qpn_base_;
  const bool has_qp = index < qps_.size() && qps_[index].qp != nullptr;
  const bool placer = has_qp && transport::Qp::VerifiesWhilePlacing(p);
  if (!placer && !wire::IcrcMatches(frame, p)) {
    ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
    return {};
  }
  return {true, placer, index};
}

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_RX_CHECKS_H_
