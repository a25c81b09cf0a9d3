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
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const uint8_t* frame = rx[i].data;
    bytes += rx[i].len;
    if (ReceivePredicted(frame, rx[i].len, now_ns)) continue;
    const wire::ParsedPacket p = wire::ParsePacket(frame, rx[i].len);
    const RxVerdict v = CheckFrame(frame, rx[i].len, p);
    if (v.accepted) Dispatch(frame, p, v, now_ns);
  }
  counters_.rx_bytes += bytes;
  io_->Release(rx, n);
  return n;
}

}  // namespace droce::core
