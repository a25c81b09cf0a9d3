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
  // 5. ICRC. The packets transport::Qp::VerifiesWhilePlacing names: the QP checks it while it places the payload.
  //    None on a port configured as trusted (DeviceConfig::rx_icrc_trusted).
  const uint32_t index = bth.dest_qp() - qpn_base_;
  if (config_.rx_icrc_trusted) return {true, false, index};
  const bool has_qp = index < qp_slots_ && qps_[index].qp != nullptr;
  const bool placer = has_qp && transport::Qp::VerifiesWhilePlacing(p);
  if (!placer && !wire::IcrcMatches(frame, p)) {
    ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
    return {};
  }
  return {true, placer, index};
}

// HeaderPrediction::last_class, for the prediction of the slot of QP `q`: a
// known class has kPredictedClass; an RC or UC frame kPredictedConnected
// (others take the full path), one whose ICRC its QP checks while placing
// it (Qp::VerifiesWhilePlacing) kPredictedPlacer; its Qp::RoleOf in the bits
// of kPredictedRole.
inline uint8_t Device::PredictedClass(const wire::ParsedPacket& p, const transport::Qp& q) {
  const wire::Transport t = p.op().transport;
  uint8_t c = kPredictedClass;
  if (t == wire::Transport::kRc || t == wire::Transport::kUc) c |= kPredictedConnected;
  if (transport::Qp::VerifiesWhilePlacing(p)) c |= kPredictedPlacer;
  return static_cast<uint8_t>(c | (q.RoleOf(p) << kPredictedRoleShift));
}

// Header prediction (doc/rx-checks.md): a frame whose headers equal what
// its QP's slot predicts passed checks 0-5, 8 and 9 when the prediction was
// learnt, and nothing they depend on has changed since; ParsePredicted
// checks its per-packet fields as ParsePacket does. Anything else (no
// prediction, a difference, a failed check, a CNP, a bad ICRC) returns
// false and the frame takes the full parse and checks, which count it.
template <bool kLent>
inline bool Device::ReceivePredicted(const uint8_t* frame, uint32_t len, uint64_t now_ns) {
  using namespace wire;
  const uint32_t l3 = rx_l3_offset_;
  if (len < l3 + kIpv4MinBytes + kUdpBytes + kBthBytes + kIcrcBytes) return false;
  // The BTH of an IPv6 frame or (any other EtherType) of an IPv4 one: the
  // comparison tells whether it is one.
  const uint32_t bth = l3 + kUdpBytes + (LoadBe16(frame + l3 - 2) == kEtherTypeIpv6 ? kIpv6Bytes : kIpv4MinBytes);
  if (len < bth + kBthBytes + kIcrcBytes) return false;
  const uint32_t index = (LoadBe32(frame + bth + 4) & 0xFFFFFF) - qpn_base_;  // one load for the QPN
  if (index >= qp_slots_) return false;
  QpSlot& slot = qps_[index];
  HeaderPrediction& h = slot.rx_prediction;
  const ParsedPacket* parsed = ParsePredicted(frame, len, h);
  if (parsed == nullptr) return false;
  // What the parse alone decides, once per frame the per-field checks take
  // (the exact tier's frames parse the same).
  if (h.last_class == 0) [[unlikely]] h.last_class = PredictedClass(*parsed, *slot.qp);
  const uint8_t c = h.last_class;
  if (!(c & kPredictedConnected)) return false;
  // A copy: the QP's steps may forget the slot's prediction.
  const ParsedPacket p = *parsed;
  if constexpr (kLent) {
    // A prediction's headers end below the copied ones (no INT header, no
    // IPv4 options): guarded all the same.
    if (p.payload_offset > rx_lent_->lent_head()) {
      TakeWhole();
      return false;
    }
  }
  bool placer = false;
  if (!config_.rx_icrc_trusted) [[likely]] {
    placer = (c & kPredictedPlacer) != 0;
    if constexpr (kLent) {
      if (!placer) TakeWhole();  // judged whole, as any other
    }
    if (!placer && !PredictedIcrcMatches(frame, h)) return false;
  } else if constexpr (kLent) {
    TakeWhole();
  }
  ++counters_.rx_predicted;
  const auto role = static_cast<transport::Qp::PacketRole>((c & kPredictedRole) >> kPredictedRoleShift);
  DeliverConnected(*slot.qp, frame, p, placer, role, index, now_ns);
  return true;
}

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_RX_CHECKS_H_
