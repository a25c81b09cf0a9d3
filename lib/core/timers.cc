// Timers (doc/core.md "Timers"): every QP's next deadline is filed in the
// timing wheel; a round's expired ones join the active list, where the QP
// runs its timers in its transmit turn (tx.cc).
#include "core/device.h"

namespace droce::core {

void Device::ExpireTimers(uint64_t now_ns) {
  // Lazily filed QPs, whose deadline moved later, are filed again instead.
  for (const uint32_t i : timers_.Expire(now_ns)) {
    const transport::Qp* q = qps_[i].qp.get();
    if (q == nullptr) continue;
    const uint64_t d = q->NextDeadline();
    if (d != 0 && d <= now_ns) {
      Activate(qpn_base_ + i);
    } else if (d != 0) {
      timers_.Arm(i, d);
    }
  }
}

void Device::Refile(uint32_t index) {
  const uint64_t d = qps_[index].qp->NextDeadline();
  if (d == 0) {
    timers_.Cancel(index);
  } else if (!timers_.armed(index) || d < timers_.deadline(index)) {
    timers_.Arm(index, d);
  }
}


}  // namespace droce::core
