// Receive: one burst from the port; each frame passes the receive checks
// (rx_checks.h) and goes to its QP (dispatch.h).
#include "core/device.h"
#include "core/dispatch.h"
#include "core/rx_checks.h"

namespace droce::core {

uint32_t Device::ReceiveBurst(uint64_t now_ns) {
  pktio::Frame* rx = rx_frames_.data();
  const uint16_t n = io_->RxBurst(rx, config_.burst);
  if (n == 0) return 0;
  ++counters_.rx_bursts;
  if (n == config_.burst) ++counters_.rx_bursts_full;
  // The burst's packets and bytes are counted once (no check reads them).
  counters_.rx_packets += n;
  if (rx_may_lend_) [[unlikely]] {
    ReceiveFrames</*kMayLend=*/true>(rx, n, now_ns);
  } else {
    ReceiveFrames</*kMayLend=*/false>(rx, n, now_ns);
  }
  io_->Release(rx, n);
  return n;
}

template <bool kMayLend>
void Device::ReceiveFrames(pktio::Frame* rx, uint16_t n, uint64_t now_ns) {
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const uint8_t* frame = rx[i].data;
    bytes += rx[i].len;
    if constexpr (kMayLend) {
      if (rx[i].lent() != nullptr) {
        ReceiveLent(rx[i], now_ns);
        continue;
      }
    }
    if (ReceivePredicted(frame, rx[i].len, now_ns)) continue;
    const wire::ParsedPacket p = wire::ParsePacket(frame, rx[i].len);
    const RxVerdict v = CheckFrame(frame, rx[i].len, p);
    if (v.accepted) Dispatch(frame, p, v, now_ns);
  }
  counters_.rx_bytes += bytes;
}

// A lent frame (pktio::Frame::lent): its headers are private, its payload
// stays in the sender's memory. It keeps that shape only as a packet its QP
// places while checking the ICRC, which reads the payload once (doc/rx-checks.md
// "Lent frames"); any other frame is copied whole (TakeWhole) before
// anything reads past its headers.
void Device::ReceiveLent(pktio::Frame& f, uint64_t now_ns) {
  rx_lent_ = &f;
  const uint8_t* frame = f.data;
  if (!ReceivePredicted</*kLent=*/true>(frame, f.len, now_ns)) {
    wire::ParsedPacket p = wire::ParsePacket(frame, f.len);
    const uint32_t index = p.ok() ? wire::BthView(frame + p.bth_offset).dest_qp() - qpn_base_ : 0;
    if (!p.ok() || p.payload_offset > f.lent_head() || config_.rx_icrc_trusted ||
        !transport::Qp::VerifiesWhilePlacing(p) || index >= qp_slots_ || qps_[index].qp == nullptr) {
      // Not a packet placed from the lent bytes: judged whole, as any other
      // (parsed again: the first parse may have read past the copied headers).
      TakeWhole();
      p = wire::ParsePacket(frame, f.len);
    }
    const RxVerdict v = CheckFrame(frame, f.len, p);
    if (v.accepted) Dispatch(frame, p, v, now_ns);
  }
  rx_lent_ = nullptr;
}

}  // namespace droce::core
