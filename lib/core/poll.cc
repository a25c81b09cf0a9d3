// The run-to-completion loop (doc/core.md "The poll loop"): one round is a
// receive burst whose frames each pass the receive checks and go to their
// QP, then the timers that came due, then transmission.
#include "core/device.h"

namespace droce::core {

uint32_t Device::Poll(uint64_t now_ns, bool hold_acks) {
  n_deferred_ = 0;  // their QPs are on the active list, which this round transmits
  ++poll_round_;
  uint32_t work = ReceiveBurst(now_ns);  // rx.cc: checks (rx_checks.h), then dispatch (dispatch.h)
  ExpireTimers(now_ns);                  // timers.cc
  work += TransmitRound(now_ns, hold_acks);  // tx.cc
  return work;
}

}  // namespace droce::core
