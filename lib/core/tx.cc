// Transmit (doc/core.md "Transmit scheduling"): control frames, then what
// the port refused last round, then every QP on the active list in turn,
// their frames gathered into shared bursts.
#include "core/device.h"

#include <algorithm>

namespace droce::core {

using transport::Qp;

uint32_t Device::TransmitRound(uint64_t now_ns, bool hold_acks) {
  uint32_t work = 0;
  if (!arp_out_.empty()) work += TransmitArp();
  if (!nd_out_.empty()) work += TransmitNd();
  // Frames the port refused last round go first, in order; while any are
  // left, QPs run their timers but build nothing new. A full TX ring is the
  // wire pushing back (as PFC would): dropping those frames instead made
  // every QP of a 1024-QP run retransmit in lockstep until retries ran out.
  work += FlushTxBacklog();
  bool port_full = tx_backlog_head_ < tx_backlog_.size();
  // Timers and transmission for QPs with work, starting one QP further on
  // every round: when the port is the bottleneck, the QPs first in the list
  // would otherwise take it every round and starve the rest into retry
  // exhaustion (seen with 8 QPs of 128 outstanding 64 KiB WRITEs). Each QP
  // fills at most tx_bursts_per_qp bursts per round, so a port that never
  // pushes back (af_packet) cannot let one long message run a round forever.
  // The QPs' frames are gathered into shared bursts (one TxBurst for many
  // QPs with a packet or two each, as with -q 8 and small messages).
  const size_t n_active = active_.size();
  const size_t start = n_active > 1 ? tx_round_robin_++ % n_active : 0;
  uint16_t pending = 0;
  for (size_t k = 0; k < n_active; ++k) {
    const uint32_t index = active_[(start + k) % n_active];
    QpSlot& slot = qps_[index];
    Qp* q = slot.qp.get();
    if (q == nullptr) continue;
    q->OnTimer(now_ns);
    if (hold_acks && HoldAck(slot, index, now_ns)) {
      // doorbell.cc: the ACK waits for the program's next post.
    } else if (!port_full) {
      work += GatherQp(slot, now_ns, &pending, &port_full);
    }
    Refile(index);
  }
  work += FlushGathered(&pending, &port_full);
  // QPs with nothing to transmit now leave the list; their timers are in
  // the wheel (filed just above, after their last change).
  for (size_t i = 0; i < active_.size();) {
    QpSlot& slot = qps_[active_[i]];
    if (slot.qp == nullptr || !slot.qp->HasTransmitWork(now_ns)) {
      slot.active = false;
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
  return work;
}

uint32_t Device::FlushTxBacklog() {
  if (tx_backlog_.empty()) return 0;
  uint32_t sent_total = 0;
  while (tx_backlog_head_ < tx_backlog_.size()) {
    pktio::Frame* f = tx_backlog_.data() + tx_backlog_head_;
    const auto n = static_cast<uint16_t>(tx_backlog_.size() - tx_backlog_head_);
    const uint16_t sent = io_->TxBurst(f, n);
    ++counters_.tx_bursts;
    for (uint16_t k = 0; k < sent; ++k) counters_.tx_bytes += f[k].len;
    counters_.tx_packets += sent;
    sent_total += sent;
    tx_backlog_head_ += sent;
    if (sent < n) return sent_total;
  }
  tx_backlog_.clear();
  tx_backlog_head_ = 0;
  return sent_total;
}

// Sends the gathered frames gather_frames_[0, *pending) in one burst. What
// the port refuses waits in the backlog (sent first next round) and sets
// *port_full. The spare empty frames behind them move to the front. Returns
// the frames sent.
uint32_t Device::FlushGathered(uint16_t* pending, bool* port_full) {
  if (*pending == 0) return 0;
  pktio::Frame* tx = gather_frames_.data();
  const uint16_t sent = io_->TxBurst(tx, *pending);
  ++counters_.tx_bursts;
  for (uint32_t j = 0; j < sent; ++j) counters_.tx_bytes += tx[j].len;
  counters_.tx_packets += sent;
  if (sent < *pending) {
    tx_backlog_.assign(tx + sent, tx + *pending);
    tx_backlog_head_ = 0;
    counters_.tx_port_full += *pending - sent;
    *port_full = true;
  }
  std::copy(tx + *pending, tx + *pending + gather_spare_, tx);
  *pending = 0;
  return sent;
}

// Lets one QP add at most tx_bursts_per_qp bursts' worth of frames to the
// gathered burst gather_frames_[0, *pending), flushing it whenever it fills:
// the frames of several QPs leave in one TxBurst. Buffers the QP did not use
// stay with the device as spares (gather_frames_[*pending, + gather_spare_))
// for the next call, instead of going back to the port: a QP asks for a
// burst's worth when its window allows it, whatever it has queued, and
// taking buffers from the port per call would cost a 64 B WRITE 32 buffer
// allocations and 31 frees (a third of its CPU time over DPDK). Frames of
// a long message leave tx_flush_bytes at a time: the QP is asked for at most
// that many bytes' worth of frames of its MTU, and while the last frame it
// built is a full one (over half the MTU) each call's frames leave at once;
// short frames fill the burst as before, asked for whole. A QP whose last
// call filled all it was asked for with short frames (a small-message
// stream, not a lone ACK) is asked for a whole burst from its next call on:
// such a stream is built in one call per round, not two (tx_flush_bytes'
// worth and then the rest: ~11 more instructions per 64 B WRITE); a long
// message right behind such a stream has its first burst leave whole, the
// rest tx_flush_bytes at a time. Returns the frames sent.
uint32_t Device::GatherQp(QpSlot& slot, uint64_t now_ns, uint16_t* pending, bool* port_full) {
  Qp& q = *slot.qp;
  uint32_t sent = 0;
  uint32_t budget = uint32_t{config_.tx_bursts_per_qp} * config_.burst;
  const uint32_t flush_bytes = config_.tx_flush_bytes;
  const uint32_t long_per_burst =
      flush_bytes == 0 || q.ud() ? config_.burst : std::max<uint32_t>(1, flush_bytes / q.path_mtu());
  uint32_t per_call = slot.tx_short ? config_.burst : long_per_burst;
  pktio::Frame* tx = gather_frames_.data();
  while (budget > 0 && !*port_full) {
    const uint32_t room = std::min<uint32_t>({budget, per_call, static_cast<uint32_t>(config_.burst - *pending)});
    const uint32_t demand = q.TransmitDemand(now_ns, room);
    if (demand == 0) break;
    if (gather_spare_ < demand) {
      gather_spare_ = static_cast<uint16_t>(
          gather_spare_ + io_->AllocTx(tx + *pending + gather_spare_, static_cast<uint16_t>(demand - gather_spare_)));
    }
    const uint32_t got = std::min<uint32_t>(demand, gather_spare_);
    if (got == 0) break;
    const uint32_t used = q.Transmit(tx + *pending, got, now_ns);
    *pending = static_cast<uint16_t>(*pending + used);
    gather_spare_ = static_cast<uint16_t>(gather_spare_ - used);
    for (uint16_t i = 0; i < gather_spare_; ++i) tx[*pending + i].len = 0;
    budget -= used;
    const bool long_frames = used > 0 && tx[*pending - 1].len > q.path_mtu() / 2;
    if (used > 0) slot.tx_short = !long_frames && used == room;
    per_call = long_frames ? long_per_burst : config_.burst;
    if (*pending == config_.burst || (long_frames && long_per_burst < config_.burst)) {
      sent += FlushGathered(pending, port_full);
    }
    // The QP has nothing more now: it built fewer than it was given, or it
    // asked for less than it could have had (asking again only returns 0).
    if (used < got || used == 0 || demand < room) break;
  }
  return sent;
}

}  // namespace droce::core
