// Selective repeat's timers (doc/transport.md "Selective repeat"): the
// tail-loss probe, and what a retransmission timeout does on an SR QP —
// the fallback to go-back-N toward a peer that never answered as SR, F-RTO,
// the resend of what is neither acknowledged nor SACKed. Qp::OnTimer
// (qp.cc) calls them through the hooks OnTimer, OnTimeout and
// ResendAfterTimeout.
#include "transport/sr/selective_repeat.h"
#include "wire/psn.h"

namespace droce::transport {

void SelectiveRepeat::OnTimer(uint64_t now_ns) {
  if (req_.tlp_deadline == 0 || now_ns < req_.tlp_deadline) return;
  // Tail-loss probe: nothing was sent or acknowledged for 2 SRTT.
  req_.tlp_deadline = 0;
  if (qp_.Outstanding() && PendingRetransmits() == 0) Probe();
}

// A timeout on an SR QP, before the retry budget is looked at.
void SelectiveRepeat::OnTimeout(uint64_t now_ns, uint64_t ibta_timeout) {
  // Selective repeat toward a peer that never answered an SR SEND/WRITE
  // packet for a whole IBTA timeout (8 high RTOs if that is infinite): the
  // peer does not use it (configured off: it drops SR opcodes); go-back-N
  // from now on (doc/transport.md "Fallback").
  if (!req_.peer_answered && OldestIsSendOrWrite() &&
      now_ns - qp_.req_.retry_clock_ns >= (ibta_timeout != 0 ? ibta_timeout : 8 * RtoHighNs())) {
    FallBack(now_ns);
    return;
  }
  if (req_.rto_low_armed) ++qp_.counters_.sr_timeouts_low;
  if (req_.backoff > 0) ++qp_.counters_.sr_timeouts_backoff;
  // F-RTO: what a spurious timeout restores (the state before the first timeout of a run).
  if (!req_.frto) {
    req_.frto_retry_left = qp_.req_.retry_left;
    req_.frto_progress = qp_.req_.progress_since_retry;
    req_.frto_retry_clock_ns = qp_.req_.retry_clock_ns;
  }
}

void SelectiveRepeat::ResendAfterTimeout() {
  // Selective repeat: everything sent and not SACKed is resent, from the
  // oldest unacknowledged PSN (a lost retransmission ends here). Karn:
  // the packet being timed may be resent, its sample is void; the RTO
  // doubles until progress.
  req_.rtt_timing = false;
  req_.rack_active = false;
  req_.probe_pending = false;
  req_.tlp_deadline = 0;
  if (req_.backoff < 8) ++req_.backoff;
  Slide();
  // Only the oldest kSrTimeoutResendSpan PSNs (what a 128-bit SACK reports): what lies beyond may well have arrived or be
  // on its way, and the SACKs that follow this retransmission show it.
  req_.retx_next = qp_.req_.psn_una;
  req_.retx_end = qp_.req_.psn_high;
  if (wire::PsnDiff(qp_.req_.psn_high, qp_.req_.psn_una) > static_cast<int32_t>(kSrTimeoutResendSpan)) {
    req_.retx_end = wire::PsnAdd(qp_.req_.psn_una, kSrTimeoutResendSpan);
  }
  req_.timeout_probe = true;
  if (!wire::PsnLess(qp_.req_.psn_una, qp_.req_.psn_high)) req_.retx_end = wire::PsnAdd(qp_.req_.psn_una, 1);
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
  const bool undecided = req_.frto;
  req_.frto = undecided && req_.peer_answered;
  if (req_.frto) {
    if (wire::PsnLess(req_.frto_end, req_.retx_end)) req_.frto_end = req_.retx_end;
    req_.retx_end = wire::PsnAdd(qp_.req_.psn_una, 1);
  } else if (!undecided && wire::PsnDiff(req_.retx_end, qp_.req_.psn_una) > 1) {
    req_.frto = true;
    req_.frto_una = qp_.req_.psn_una;
    req_.frto_end = req_.retx_end;
    req_.retx_end = wire::PsnAdd(qp_.req_.psn_una, 1);
  }
  req_.tmo_end = req_.retx_end;  // (counters: sr_timeout_resent)
}

}  // namespace droce::transport
