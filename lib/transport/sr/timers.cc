// Selective repeat's timers (doc/transport.md "Selective repeat"): the
// tail-loss probe, and what a retransmission timeout does on an SR QP —
// the fallback to go-back-N toward a peer that never answered as SR, F-RTO,
// the resend of what is neither acknowledged nor SACKed. Qp::OnTimer
// (qp.cc) calls them through SrOnTimer, SrTimeoutBegins and
// SrResendAfterTimeout.
#include "transport/qp.h"
#include "wire/psn.h"

namespace droce::transport {

void Qp::SrOnTimer(uint64_t now_ns) {
  if (sr_state_->req.tlp_deadline == 0 || now_ns < sr_state_->req.tlp_deadline) return;
  // Tail-loss probe: nothing was sent or acknowledged for 2 SRTT.
  sr_state_->req.tlp_deadline = 0;
  if (Outstanding() && SrPendingRetransmits() == 0) SrProbe();
}

// A timeout on an SR QP, before the retry budget is looked at.
void Qp::SrTimeoutBegins(uint64_t now_ns, uint64_t ibta_timeout) {
  // Selective repeat toward a peer that never answered an SR SEND/WRITE
  // packet for a whole IBTA timeout (8 high RTOs if that is infinite): the
  // peer does not use it (configured off: it drops SR opcodes); go-back-N
  // from now on (doc/transport.md "Fallback").
  if (!sr_state_->req.peer_answered && SrOldestIsSendOrWrite() &&
      now_ns - req_.retry_clock_ns >= (ibta_timeout != 0 ? ibta_timeout : 8 * SrRtoHighNs())) {
    SrFallBack(now_ns);
    return;
  }
  if (sr_state_->req.rto_low_armed) ++counters_.sr_timeouts_low;
  if (sr_state_->req.backoff > 0) ++counters_.sr_timeouts_backoff;
  // F-RTO: what a spurious timeout restores (the state before the first timeout of a run).
  if (!sr_state_->req.frto) {
    sr_state_->req.frto_retry_left = req_.retry_left;
    sr_state_->req.frto_progress = req_.progress_since_retry;
    sr_state_->req.frto_retry_clock_ns = req_.retry_clock_ns;
  }
}

void Qp::SrResendAfterTimeout() {
  // Selective repeat: everything sent and not SACKed is resent, from the
  // oldest unacknowledged PSN (a lost retransmission ends here). Karn:
  // the packet being timed may be resent, its sample is void; the RTO
  // doubles until progress.
  sr_state_->req.rtt_timing = false;
  sr_state_->req.rack_active = false;
  sr_state_->req.probe_pending = false;
  sr_state_->req.tlp_deadline = 0;
  if (sr_state_->req.backoff < 8) ++sr_state_->req.backoff;
  SrSlide();
  // Only the oldest kSrTimeoutResendSpan PSNs (what a 128-bit SACK reports): what lies beyond may well have arrived or be
  // on its way, and the SACKs that follow this retransmission show it.
  sr_state_->req.retx_next = req_.psn_una;
  sr_state_->req.retx_end = req_.psn_high;
  if (wire::PsnDiff(req_.psn_high, req_.psn_una) > static_cast<int32_t>(kSrTimeoutResendSpan)) {
    sr_state_->req.retx_end = wire::PsnAdd(req_.psn_una, kSrTimeoutResendSpan);
  }
  sr_state_->req.timeout_probe = true;
  if (!wire::PsnLess(req_.psn_una, req_.psn_high)) sr_state_->req.retx_end = wire::PsnAdd(req_.psn_una, 1);
  // F-RTO (RFC 5682, adapted; doc/transport.md "Spurious timeouts"): psn_una
  // alone now, the rest once the first acknowledgement after it shows the
  // timeout was not spurious. A timeout while the previous one is still
  // undecided (no acknowledgement at all came) resends psn_una again and
  // keeps waiting, backed off: resending everything, on a path whose delay
  // has grown past the RTO (a descheduled peer), would resend the window
  // once per RTT and void every RTT sample (Karn), so the RTO would never
  // catch up (SrSpurious.ALongerPathAfterTheRttWasMeasured...).
  // Only once the peer has answered as SR: before, everything is resent, so
  // that an SR peer answers within the IBTA timeout that decides the
  // fallback (SrFallbackNot.TwoSrEndsNeverFallBack).
  const bool undecided = sr_state_->req.frto;
  sr_state_->req.frto = undecided && sr_state_->req.peer_answered;
  if (sr_state_->req.frto) {
    if (wire::PsnLess(sr_state_->req.frto_end, sr_state_->req.retx_end)) sr_state_->req.frto_end = sr_state_->req.retx_end;
    sr_state_->req.retx_end = wire::PsnAdd(req_.psn_una, 1);
  } else if (!undecided && wire::PsnDiff(sr_state_->req.retx_end, req_.psn_una) > 1) {
    sr_state_->req.frto = true;
    sr_state_->req.frto_una = req_.psn_una;
    sr_state_->req.frto_end = sr_state_->req.retx_end;
    sr_state_->req.retx_end = wire::PsnAdd(req_.psn_una, 1);
  }
  sr_state_->req.tmo_end = sr_state_->req.retx_end;  // (counters: sr_timeout_resent)
}

}  // namespace droce::transport
