// Dispatch's cold part (dispatch.h): a UD datagram to its QP, a multicast
// datagram to every QP attached to its group.
#include "core/device.h"

namespace droce::core {

using transport::Qp;

void Device::DeliverUd(const uint8_t* frame, const wire::ParsedPacket& p, Qp* q) {
  if (wire::BthView(frame + p.bth_offset).dest_qp() == transport::kMulticastQpn) {
    // IBTA 10.5.3: to every QP attached to the group (each checks its Q_Key).
    const McastGroup* g = FindGroup(frame, p);
    if (g == nullptr) {
      ++counters_.rx_unknown_qp;
      return;
    }
    ++counters_.rx_mcast;
    uint32_t taken = 0;
    for (const uint32_t qpn : g->qpns) {
      Qp* m = qp(qpn);
      if (m == nullptr) continue;
      switch (m->OnUdPacket(frame, p)) {
        case transport::UdRx::kDelivered: ++taken; break;
        case transport::UdRx::kBadQkey: ++counters_.rx_ud_drop_qkey; break;
        case transport::UdRx::kNoRecv: ++counters_.rx_ud_no_recv; break;
        default: break;
      }
    }
    if (taken == 0) ++counters_.rx_mcast_no_qp;
    return;
  }
  if (q == nullptr || !q->ud()) {
    ++counters_.rx_unknown_qp;
    return;
  }
  switch (q->OnUdPacket(frame, p)) {
    case transport::UdRx::kBadQkey: ++counters_.rx_ud_drop_qkey; break;
    case transport::UdRx::kNoRecv: ++counters_.rx_ud_no_recv; break;
    default: break;
  }
}

}  // namespace droce::core
