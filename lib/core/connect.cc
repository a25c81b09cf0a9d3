#include "core/connect.h"

namespace droce::core {

absl::Status ConnectQp(Device& dev, uint32_t qpn, const ConnectParams& p) {
  using namespace transport;
  Qp* qp = dev.qp(qpn);
  if (qp == nullptr) return absl::NotFoundError("no such QP");
  const bool rc = qp->reliable();
  QpAttr a;
  if (qp->state() == QpState::kReset) {
    a.qp_state = QpState::kInit;
    a.qp_access_flags = p.access;
    if (absl::Status s = dev.ModifyQp(qpn, a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags);
        !s.ok()) {
      return s;
    }
  }
  a.qp_state = QpState::kRtr;
  a.ah.dgid = p.peer_gid;
  a.ah.sgid_index = p.sgid_index;
  a.ah.dmac = p.peer_mac;
  a.ah.dmac_valid = p.peer_mac_known;
  a.path_mtu = p.mtu;
  a.dest_qp_num = p.peer_qpn;
  a.rq_psn = p.rq_psn;
  a.max_dest_rd_atomic = p.max_dest_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  const uint32_t rtr_rc = kAttrMaxDestRdAtomic | kAttrMinRnrTimer;
  if (absl::Status s = dev.ModifyQp(qpn, a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn |
                                                kAttrRqPsn | (rc ? rtr_rc : 0));
      !s.ok() || !p.to_rts) {
    return s;
  }
  a.qp_state = QpState::kRts;
  a.sq_psn = p.sq_psn;
  a.timeout = p.timeout;
  a.retry_cnt = p.retry_cnt;
  a.rnr_retry = p.rnr_retry;
  a.max_rd_atomic = p.max_rd_atomic;
  const uint32_t rts_rc = kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic;
  return dev.ModifyQp(qpn, a, kAttrState | kAttrSqPsn | (rc ? rts_rc : 0));
}

}  // namespace droce::core
