// Dispatch: a frame that passed the receive checks goes to its QP (or, a
// multicast datagram, to every QP of its group) once the QP exists, takes
// the frame's transport and, connected, the frame came along its path.
//
// Included by rx.cc alone: the per-frame steps inline into the receive loop.
#ifndef DROCE_LIB_CORE_DISPATCH_H_
#define DROCE_LIB_CORE_DISPATCH_H_

#include "core/device.h"

namespace droce::core {

inline void Device::Dispatch(const uint8_t* frame, const wire::ParsedPacket& p, const RxVerdict& v, uint64_t now_ns) {
  QpSlot* slot = v.index < qp_slots_ ? &qps_[v.index] : nullptr;
  transport::Qp* q = slot != nullptr ? slot->qp.get() : nullptr;
  if (p.opcode == wire::kCnp) {
    ++counters_.rx_cnp;
    if (q == nullptr) {
      ++counters_.rx_cnp_dropped;
    } else if (!PathMatches(frame, p, slot->path)) {
      ++counters_.rx_drop_path;
    } else {
      q->OnCnp(now_ns);
      Refile(v.index);  // the reaction point's timers (the QP stays where it is)
    }
    return;
  }
  if (p.op().transport == wire::Transport::kUd) {
    DeliverUd(frame, p, q);
    return;
  }
  if (q == nullptr || q->ud() ||
      (p.op().transport != wire::Transport::kRc && p.op().transport != wire::Transport::kUc)) {
    ++counters_.rx_unknown_qp;
    return;
  }
  if (!PathMatches(frame, p, slot->path)) {
    ++counters_.rx_drop_path;
    return;
  }
  if (!DeliverConnected(*q, frame, p, v.verify_while_placing, transport::Qp::kAsJudged, v.index, now_ns)) return;
  // It passed every check: its headers predict the QP's next frames
  // (ReceivePredicted), when it came along the QP's path to our own MAC.
  if (slot->path.ip_version != 0 && (frame[0] & 1) == 0 && p.l3_offset == rx_l3_offset_ &&
      wire::Predictable(p)) {
    slot->rx_prediction = wire::LearnPrediction(frame, p);
  }
}

inline bool Device::DeliverConnected(transport::Qp& q, const uint8_t* frame, const wire::ParsedPacket& p,
                                     bool verify_while_placing, transport::Qp::PacketRole role, uint32_t index,
                                     uint64_t now_ns) {
  if (verify_while_placing) {
    // A lent frame's payload is read where it is, once, by the QP's
    // placement; a packet the QP does not place so is copied whole first.
    // A lent frame is placed unchecked where the device trusts them
    // (DeviceConfig::rx_icrc_trust_lent); copied whole, it is checked.
    using U = transport::Qp::Unverified;
    const bool lent = rx_lent_ != nullptr;
    const bool trusted = lent && config_.rx_icrc_trust_lent;
    U r = q.OnUnverifiedPacket(frame, lent ? rx_lent_->lent() : nullptr, p, now_ns, trusted);
    if (r == U::kWantsWhole) {
      TakeWhole();
      r = q.OnUnverifiedPacket(frame, nullptr, p, now_ns);
    } else if (trusted && r == U::kTaken) {
      ++counters_.rx_icrc_trusted;
    }
    if (r != U::kTaken) {
      ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
      return false;
    }
    if (p.ecn() == wire::kEcnCe) q.OnCongestionMark(now_ns);
  } else {
    if (p.ecn() == wire::kEcnCe) q.OnCongestionMark(now_ns);
    if (role != transport::Qp::kAsJudged) {
      q.OnPacketAs(frame, p, now_ns, role);
    } else {
      q.OnPacket(frame, p, now_ns);
    }
  }
  Activate(qpn_base_ + index);
  return true;
}

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_DISPATCH_H_
