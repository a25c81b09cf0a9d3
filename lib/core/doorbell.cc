// Doorbells, and the two ways a driver whose program posts and polls in
// turn (the verbs provider) batches them (doc/core.md "Doorbells"):
// - doorbell deferral: DeferDoorbell puts a QP's doorbell off until the
//   next Doorbell, which gathers the deferred QPs' frames into its bursts;
// - ACK holding (Poll's hold_acks): in a round the program drives, a QP
//   whose only frame is a plain ACK keeps it for the program's next post,
//   so that a reply and the ACK it answers leave in one burst.
#include "core/device.h"

namespace droce::core {

using transport::Qp;

uint32_t Device::Doorbell(uint32_t qpn, uint64_t now_ns) {
  Qp* q = qp(qpn);
  if (q == nullptr) return 0;
  q->TakePosted();  // WRs posted without the device lock (Qp::PublishSend)
  if (io_ == nullptr) return 0;
  Activate(qpn);  // what the doorbell leaves (timers, the rest of a long message) goes to Poll
  uint32_t work = FlushTxBacklog();
  // Frames the port refused go first (the QP's own may be among them).
  if (tx_backlog_head_ < tx_backlog_.size()) return work;
  bool port_full = false;
  uint16_t pending = 0;
  // Deferred doorbells were rung first: their frames go first.
  work += GatherDeferred(now_ns, qpn, &pending, &port_full);
  if (!port_full) work += GatherQp(qps_[qpn - qpn_base_], now_ns, &pending, &port_full);
  return work + FlushGathered(&pending, &port_full);
}

// Puts qpn on the deferred-doorbell list once; false when the list is full
// (the QP is still on the active list: the next Poll sends it).
bool Device::AddDeferred(uint32_t qpn) {
  for (size_t i = 0; i < n_deferred_; ++i) {
    if (deferred_[i] == qpn) return true;
  }
  if (n_deferred_ == deferred_.size()) return false;
  deferred_[n_deferred_++] = qpn;
  return true;
}

uint32_t Device::FlushDeferredDoorbells(uint64_t now_ns) {
  if (n_deferred_ == 0 || io_ == nullptr) return 0;
  uint32_t work = FlushTxBacklog();
  if (tx_backlog_head_ < tx_backlog_.size()) return work;
  bool port_full = false;
  uint16_t pending = 0;
  work += GatherDeferred(now_ns, kQpnLimit, &pending, &port_full);
  return work + FlushGathered(&pending, &port_full);
}

// Gathers the deferred doorbells' QPs (but except_qpn, gathered by the
// caller) and empties the list: what they leave stays on the active list.
uint32_t Device::GatherDeferred(uint64_t now_ns, uint32_t except_qpn, uint16_t* pending, bool* port_full) {
  uint32_t sent = 0;
  for (size_t i = 0; i < n_deferred_ && !*port_full; ++i) {
    if (deferred_[i] == except_qpn) continue;
    if (qp(deferred_[i]) != nullptr) {  // destroyed since: nothing to send
      sent += GatherQp(qps_[deferred_[i] - qpn_base_], now_ns, pending, port_full);
    }
  }
  n_deferred_ = 0;
  return sent;
}

// ACK holding: at most one round per ACK (the next round sends it whatever
// it is asked), and only while the deferred list has room. The program is
// about to see what this ACK acknowledges; if it answers (a SEND for a
// SEND, as ibv_rc_pingpong), both leave in one burst and the peer takes
// them in one receive.
bool Device::HoldAck(QpSlot& slot, uint32_t index, uint64_t now_ns) {
  if (slot.ack_held_round + 1 == poll_round_ || !slot.qp->OnlyAnAckToSend(now_ns) ||
      !AddDeferred(qpn_base_ + index)) {
    return false;
  }
  slot.ack_held_round = poll_round_;
  ++counters_.tx_acks_held;
  return true;
}

}  // namespace droce::core
