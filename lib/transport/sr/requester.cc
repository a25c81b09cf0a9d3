// Selective repeat's requester (doc/transport.md "Selective repeat"): the
// SACK bitmap following psn_una, what to resend and the resending itself,
// RTT samples and the RTOs they give (RFC 6298, a windowed maximum, a high
// percentile), RACK, the tail-loss probe, and the fallback to go-back-N.
#include "transport/qp.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "wire/icrc.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcOpcode;
using queue::WcStatus;
using namespace droce::wire;

namespace {
// The bucket of QpCounters' RTT-sized histograms: < 32, 64, ... 2048 us, above.
int SrRttBucket(uint64_t ns) {
  int b = 0;
  for (uint64_t lim = 32'000; b < QpCounters::kSrRttBuckets - 1 && ns >= lim; lim *= 2) ++b;
  return b;
}
}  // namespace

namespace {
// Adds the spans during which `on` held to *total_ns (*since_ns: when the
// current one began, 0 while it does not hold).
void TimeSpan(bool on, uint64_t now, uint64_t* since_ns, uint64_t* total_ns) {
  if (on) {
    if (*since_ns == 0) *since_ns = now;
  } else if (*since_ns != 0) {
    *total_ns += now - *since_ns;
    *since_ns = 0;
  }
}
}  // namespace

// Drops the SACK bits of PSNs now acknowledged: the bitmap covers
// [psn_una, psn_una + kSrWindow).
void Qp::SrSlide() {
  const int32_t moved = PsnDiff(req_.psn_una, sr_state_->req.sack_base);
  if (moved >= static_cast<int32_t>(kSrWindow) || moved < 0) {
    sr_state_->req.sacked = {};
    sr_state_->req.sacked_count = 0;
    sr_state_->req.resent = {};
    sr_state_->req.resent_count = 0;
    sr_state_->req.read_got = {};
    sr_state_->req.ackreq = {};
  } else {
    for (int32_t i = 0; i < moved; ++i) {
      const uint32_t psn = PsnAdd(sr_state_->req.sack_base, i);
      if (SrSacked(psn)) --sr_state_->req.sacked_count;
      if (BitTest(sr_state_->req.resent, psn)) --sr_state_->req.resent_count;
      BitClear(sr_state_->req.sacked, psn);
      BitClear(sr_state_->req.resent, psn);
      BitClear(sr_state_->req.ackreq, psn);
      BitClear(sr_state_->req.read_got, PsnAdd(sr_state_->req.sack_base, i));
    }
  }
  sr_state_->req.sack_base = req_.psn_una;
  if (PsnLess(sr_state_->req.retx_next, req_.psn_una)) sr_state_->req.retx_next = req_.psn_una;
  if (sr_state_->req.rack_active && !PsnLess(sr_state_->req.retx_next, sr_state_->req.rack_limit)) sr_state_->req.rack_active = false;
  if (PsnLess(sr_state_->req.retx_end, sr_state_->req.retx_next)) sr_state_->req.retx_end = sr_state_->req.retx_next;
  if (PsnLess(sr_state_->req.tmo_end, req_.psn_una)) sr_state_->req.tmo_end = req_.psn_una;
}

// PSNs in [from, end) not SACKed are to be resent. The cursor never moves
// back (a PSN is resent once per loss signal; a lost retransmission is
// found by the timeout, which restarts it at psn_una), so SACKs that still
// show a retransmitted PSN missing while it is on its way resend nothing.
void Qp::SrScheduleRetransmit(uint32_t from, uint32_t end) {
  SrSlide();
  if (sr_state_->req.probe_pending) {
    // A probe not sent yet: the cursor goes back to where it was before it
    // (or to the probe, if lower), and the probe is part of this pass.
    sr_state_->req.probe_pending = false;
    if (PsnLess(sr_state_->req.probe_return, sr_state_->req.retx_next)) sr_state_->req.retx_next = sr_state_->req.probe_return;
    if (PsnLess(sr_state_->req.retx_end, sr_state_->req.retx_next)) sr_state_->req.retx_end = sr_state_->req.retx_next;
  }
  if (PsnLess(sr_state_->req.retx_next, from) && !PsnLess(sr_state_->req.retx_next, sr_state_->req.retx_end)) {
    sr_state_->req.retx_next = from;  // nothing pending: start where the new loss is
  }
  if (!PsnLess(sr_state_->req.retx_next, sr_state_->req.retx_end)) sr_state_->req.tmo_end = req_.psn_una;  // (counters)
  if (PsnLess(sr_state_->req.retx_end, end)) sr_state_->req.retx_end = end;
}

uint32_t Qp::SrPendingRetransmits() const {
  const int32_t n = PsnDiff(sr_state_->req.retx_end, sr_state_->req.retx_next);
  return n > 0 ? static_cast<uint32_t>(n) : 0;
}

uint32_t Qp::SrRetransmit(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns) {
  if (SrPendingRetransmits() == 0) return used;
  SrSlide();
  uint32_t i = sq_.head();
  while (used < n && PsnLess(sr_state_->req.retx_next, sr_state_->req.retx_end)) {
    if (Paced(now_ns)) break;
    const uint32_t psn = sr_state_->req.retx_next;
    // A timeout resends the oldest PSN even when SACKed: only an ACK
    // completes it, and the one that would have was lost.
    const bool probe = sr_state_->req.timeout_probe && psn == req_.psn_una;
    if (SrSacked(psn) && !probe) {
      sr_state_->req.retx_next = PsnAdd(psn, 1);
      continue;
    }
    if (sr_state_->req.rack_active) {
      if (!PsnLess(psn, sr_state_->req.rack_limit)) {
        sr_state_->req.rack_active = false;
      } else if (!SrLostAgain(psn)) {
        // RACK region: only retransmissions found lost again; the rest
        // was resent already, or is still on its way.
        sr_state_->req.retx_next = PsnAdd(psn, 1);
        continue;
      } else {
        ++counters_.sr_rack_resent;
      }
    }
    sr_state_->req.timeout_probe = false;
    // The WQE holding psn (WQEs hold increasing PSN ranges).
    while (i != sq_.tail()) {
      const SendWqe& x = sq_.at(i);
      if (!x.done && (!x.started || !PsnLess(x.last_psn, psn))) break;
      ++i;
    }
    if (i == sq_.tail() || !sq_.at(i).started) {
      sr_state_->req.retx_next = sr_state_->req.retx_end;  // nothing sent there
      break;
    }
    SendWqe& w = sq_.at(i);
    if (PsnLess(psn, w.first_psn)) {
      sr_state_->req.retx_next = w.first_psn;
      continue;
    }
    if (!w.fully_sent && !PsnLess(psn, w.next_psn)) {
      sr_state_->req.retx_next = sr_state_->req.retx_end;  // not sent yet: the send queue's walk sends it
      break;
    }
    uint32_t next = PsnAdd(psn, 1);
    if (IsReadOrAtomic(w)) {
      // A READ is asked again from its first missing response on (its
      // later PSNs are responses, not requests); an atomic is resent
      // whole and the responder replays its result.
      const uint32_t missing = w.wr.opcode == WrOpcode::kRdmaRead
                                   ? PsnAdd(w.first_psn, w.read_done_bytes / mtu_)
                                   : w.first_psn;
      next = PsnAdd(w.last_psn, 1);
      if (psn != missing) {
        // Before the first missing response: ask from there; after it: asked already.
        sr_state_->req.retx_next = PsnLess(psn, missing) ? missing : next;
        continue;
      }
    }
    if (!SgesStillLent(w)) {
      FailWqe(w, WcStatus::kLocProtErr);
      return used;
    }
    if (w.wr.opcode == WrOpcode::kRdmaRead) {
      // The READ's responses placed ahead are not asked for again: the
      // request covers the missing run up to the next one that arrived.
      uint32_t run = 1;
      while (PsnLess(PsnAdd(psn, run), PsnAdd(w.last_psn, 1)) &&
             PsnDiff(PsnAdd(psn, run), req_.psn_una) < static_cast<int32_t>(kSrWindow) &&
             !BitTest(sr_state_->req.read_got, PsnAdd(psn, run))) {
        ++run;
      }
      sr_state_->req.read_len = PsnLess(PsnAdd(psn, run), PsnAdd(w.last_psn, 1)) ? run * mtu_ : 0;
    }
    const uint32_t len = BuildResend(w, psn, frames[used].data, now_ns);
    sr_state_->req.read_len = 0;
    sr_state_->req.retx_next = next;
    if (len == 0) continue;
    frames[used].len = len;
    ++counters_.tx_packets;
    ++counters_.sr_retransmitted_packets;
    if (!sr_state_->req.probe_pending && !sr_state_->req.rack_active && PsnLess(psn, sr_state_->req.tmo_end)) {
      ++counters_.sr_timeout_resent;
    }
    counters_.tx_bytes += len;
    NoteSent(len, now_ns);
    ++used;
    if (sr_state_->req.hole_seen_ns != 0) {  // the first resend since a SACK showed a hole
      const uint64_t wait = now_ns >= sr_state_->req.hole_seen_ns ? now_ns - sr_state_->req.hole_seen_ns : 0;
      ++counters_.sr_repair_waits;
      counters_.sr_repair_wait_ns += wait;
      counters_.sr_repair_wait_max_ns = std::max(counters_.sr_repair_wait_max_ns, wait);
      sr_state_->req.hole_seen_ns = 0;
    }
    if (!sr_state_->req.repair_timing && !IsReadOrAtomic(w)) {
      sr_state_->req.repair_timing = true;
      sr_state_->req.repair_psn = psn;
      sr_state_->req.repair_sent_ns = now_ns;
    }
  }
  if (!PsnLess(sr_state_->req.retx_next, sr_state_->req.retx_end)) sr_state_->req.hole_seen_ns = 0;  // nothing left to resend
  if (sr_state_->req.probe_pending && !PsnLess(sr_state_->req.retx_next, sr_state_->req.retx_end)) {
    sr_state_->req.probe_pending = false;  // the probe left: the cursor returns
    sr_state_->req.retx_next = sr_state_->req.retx_end = sr_state_->req.probe_return;
    SrSlide();
  }
  if (req_.retransmit_deadline == 0) req_.retransmit_deadline = ArmRetransmitTimer(now_ns);
  SrArmTlp(now_ns);
  return used;
}

// Every packet an SR QP sends: its place in the send order (RACK), Karn's
// rule for the RTT timing (a retransmitted packet is never timed; timing
// one that is resent is abandoned), SEND/WRITE retransmissions remembered.
void Qp::SrNoteSent(uint32_t psn, bool retransmission, bool data, uint64_t now) {
  sr_state_->req.sent_seq[psn % kSrWindow] = ++sr_state_->req.tx_seq;
  if (retransmission) {
    if (sr_state_->req.rtt_timing && sr_state_->req.rtt_psn == psn) sr_state_->req.rtt_timing = false;
    if (data && !BitTest(sr_state_->req.resent, psn)) {
      BitSet(sr_state_->req.resent, psn);
      ++sr_state_->req.resent_count;
    }
    return;
  }
  if (!sr_state_->req.rtt_timing && data) {
    sr_state_->req.rtt_timing = true;
    sr_state_->req.rtt_psn = psn;
    sr_state_->req.rtt_sent_ns = now;
    sr_state_->req.rtt_clean = sr_state_->req.sacked_count == 0 && SrPendingRetransmits() == 0;
    sr_state_->req.rtt_retx = counters_.sr_retransmitted_packets - counters_.tlp_probes;
  }
}

// `psn` was acknowledged (cumulatively or selectively): an RTT sample if
// it is the timed packet, and the newest send-order place delivered.
void Qp::SrNoteDelivered(uint32_t psn, uint64_t now, bool selective) {
  if (!PsnLess(psn, req_.psn_high) || PsnDiff(req_.psn_high, psn) > static_cast<int32_t>(kSrWindow)) return;
  const uint32_t seq = sr_state_->req.sent_seq[psn % kSrWindow];
  if (static_cast<int32_t>(seq - sr_state_->req.rack_seq) > 0) sr_state_->req.rack_seq = seq;
  if (sr_state_->req.rtt_timing && !PsnLess(psn, sr_state_->req.rtt_psn)) {
    sr_state_->req.rtt_timing = false;
    if (now >= sr_state_->req.rtt_sent_ns) {
      sr_state_->req.rtt.Sample(now - sr_state_->req.rtt_sent_ns);
      SrCountRtt(now - sr_state_->req.rtt_sent_ns);
      const bool no_resend = counters_.sr_retransmitted_packets - counters_.tlp_probes == sr_state_->req.rtt_retx;
      if (sr_state_->req.rtt_clean && no_resend) SrNoteRttMax(now - sr_state_->req.rtt_sent_ns, now);
      // The percentile takes samples under loss too, but not one that waited
      // for a repair: a cumulative acknowledgement after a resend may have.
      if (selective || no_resend) SrNoteRttHigh(now - sr_state_->req.rtt_sent_ns);
      sr_state_->req.backoff_hold = false;  // Karn: a fresh sample ends a kept backoff
    }
  }
}

// The windowed maximum RTT, the RTO's floor (kSrRttMaxPeriodNs; Linux keeps
// windowed extremes the same way, lib/win_minmax.c, for its min RTT): the
// largest sample of the current period and of the previous one.
void Qp::SrNoteRttMax(uint64_t rtt_ns, uint64_t now) {
  const uint64_t elapsed = now - sr_state_->req.rtt_max_start_ns;
  if (elapsed >= kSrRttMaxPeriodNs) {
    sr_state_->req.rtt_max_prev_ns = elapsed >= 2 * kSrRttMaxPeriodNs ? 0 : sr_state_->req.rtt_max_cur_ns;
    sr_state_->req.rtt_max_cur_ns = 0;
    sr_state_->req.rtt_max_start_ns = now;
  }
  sr_state_->req.rtt_max_cur_ns = std::max(sr_state_->req.rtt_max_cur_ns, rtt_ns);
}

// The recent high percentile (kSrRttRank-th largest of the last kSrRttRing
// samples): once per RTT sample, a walk of kSrRttRing words.
void Qp::SrNoteRttHigh(uint64_t rtt_ns) {
  sr_state_->req.rtt_ring[sr_state_->req.rtt_ring_n++ % kSrRttRing] = static_cast<uint32_t>(std::min<uint64_t>(rtt_ns, UINT32_MAX));
  const uint32_t n = std::min(sr_state_->req.rtt_ring_n, kSrRttRing);
  std::array<uint32_t, kSrRttRank> top{};  // descending
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t v = sr_state_->req.rtt_ring[i];
    for (uint32_t k = 0; k < kSrRttRank; ++k) {
      if (v > top[k]) std::swap(v, top[k]);
    }
  }
  sr_state_->req.rtt_high_ns = top[kSrRttRank - 1];
}

// Counters only: the timed resend's PSN is acknowledged (below psn_una) or
// SACKed; its time from the resend is the repair's second part.
void Qp::SrNoteRepaired(uint64_t now) {
  if (!sr_state_->req.repair_timing) return;
  if (!PsnLess(sr_state_->req.repair_psn, req_.psn_una) && !SrSacked(sr_state_->req.repair_psn)) return;
  sr_state_->req.repair_timing = false;
  const uint64_t t = now >= sr_state_->req.repair_sent_ns ? now - sr_state_->req.repair_sent_ns : 0;
  ++counters_.sr_repairs_timed;
  counters_.sr_repair_ns += t;
  ++counters_.sr_repair_hist[SrRttBucket(t)];
}

// Counters of the breakdown (doc/loss-experiment.md): RTT samples by size,
// the smallest, the packets in flight at each.
void Qp::SrCountRtt(uint64_t rtt_ns) {
  if (counters_.sr_rtt_min_ns == 0 || rtt_ns < counters_.sr_rtt_min_ns) {
    counters_.sr_rtt_min_ns = std::max<uint64_t>(rtt_ns, 1);
  }
  counters_.sr_rtt_inflight_sum += static_cast<uint32_t>(std::max(0, PsnDiff(req_.psn_high, req_.psn_una)));
  counters_.sr_rtt_max_ns = std::max(counters_.sr_rtt_max_ns, rtt_ns);
  ++counters_.sr_rtt_hist[SrRttBucket(rtt_ns)];
}

// The time new packets wait at the in-flight cap (sr_window_full_ns).
void Qp::SrNoteCap(bool full, uint64_t now) {
  TimeSpan(full, now, &sr_state_->req.cap_since_ns, &counters_.sr_window_full_ns);
}

// The time everything posted had been sent and waited for acknowledgement
// (sr_sq_drained_ns): the program's window, not the transport, held the sender.
void Qp::SrNoteDrained(bool drained, uint64_t now) {
  TimeSpan(drained, now, &sr_state_->req.drained_since_ns, &counters_.sr_sq_drained_ns);
}

// RACK (time/order based, as TCP's RFC 8985 without its reordering window):
// a retransmission still missing while a packet sent after it arrived was
// lost again; resend it now instead of waiting for the timer.
void Qp::SrRackScan() {
  if (sr_state_->req.resent_count == 0) return;
  SrSlide();
  // Only PSNs resent can be lost again: walk the set bits of sr_resent, a
  // 64-PSN word at a time (at most kSrWindow / 64 words per scan).
  for (uint32_t psn = req_.psn_una; PsnLess(psn, sr_state_->req.retx_next); psn = PsnAdd(psn, 1)) {
    const uint32_t bit = psn % kSrWindow;
    const uint64_t rest = sr_state_->req.resent[bit / 64] >> (bit % 64);
    if (rest == 0) {
      psn = PsnAdd(psn, 63 - bit % 64);  // the loop's +1 lands on the next word
      continue;
    }
    psn = PsnAdd(psn, static_cast<uint32_t>(std::countr_zero(rest)));
    if (!PsnLess(psn, sr_state_->req.retx_next)) return;
    if (!SrLostAgain(psn)) continue;
    if (!sr_state_->req.rack_active) {
      sr_state_->req.rack_active = true;
      sr_state_->req.rack_limit = sr_state_->req.retx_next;
    }
    sr_state_->req.retx_next = psn;
    return;
  }
}

// The tail-loss probe (RFC 8985's TLP): armed whenever something is sent or
// acknowledged, max(floor, 2 SRTT) ahead, if that comes before the RTO.
void Qp::SrArmTlp(uint64_t now) {
  if (!sr_ || !env_.sr_tlp || !sr_state_->req.rtt.valid || !sr_state_->req.tlp_armable || !Outstanding()) return;
  const uint64_t at = now + std::max(env_.sr_rto_min_ns, 2 * sr_state_->req.rtt.srtt_ns);
  sr_state_->req.tlp_deadline = req_.retransmit_deadline != 0 && at >= req_.retransmit_deadline ? 0 : at;
}

// The probe, once per progress: while nothing is SACKed (a lost tail, or
// lost ACKs), the highest packet sent: its ACK or SACK shows every hole
// before it. Once SACKs showed holes, the first missing one: it holds
// every completion behind it.
void Qp::SrProbe() {
  sr_state_->req.tlp_armable = false;
  SrSlide();
  uint32_t psn = PsnAdd(req_.psn_high, -1);
  if (PsnLess(psn, req_.psn_una) || SrSacked(psn) || sr_state_->req.sacked_count > 0) {
    psn = req_.psn_una;
    while (PsnLess(psn, req_.psn_high) && SrSacked(psn)) psn = PsnAdd(psn, 1);
    if (!PsnLess(psn, req_.psn_high)) return;
  }
  ++counters_.tlp_probes;
  sr_state_->req.rack_active = false;
  sr_state_->req.probe_pending = true;
  sr_state_->req.probe_return = sr_state_->req.retx_next;
  sr_state_->req.retx_next = psn;
  sr_state_->req.retx_end = PsnAdd(psn, 1);
}

// Forward progress restores the retry budgets and restarts the ACK timer.
// Selective repeat's share of progress: the backoff ends (after a spurious
// timeout only at the next RTT sample), a tail-loss probe may be armed again.
void Qp::SrOnProgress() {
  if (!sr_state_->req.backoff_hold) sr_state_->req.backoff = 0;
  sr_state_->req.tlp_armable = true;
  sr_state_->req.tlp_deadline = 0;
}

// IRN's RTO_high for an SR QP: the device's sr_rto_high_ns before any RTT
// sample, then 3 x the measured RTO (SRTT + 4 RTTVAR, at least
// sr_rto_min_ns) up to sr_rto_high_ns, but never below the measured RTO
// itself: a ceiling below the path's RTT (or below the time between two
// coalesced ACKs) only makes timeouts, spurious ones, on every round trip
// (the fabric's loss-free row, doc/loss-experiment.md). At most the QP's
// IBTA timeout (0, infinite, leaves it).
uint64_t Qp::SrRtoHighNs() const {
  const uint64_t ibta = AckTimeoutNs(attr_.timeout);
  uint64_t high = env_.sr_rto_high_ns;
  if (sr_state_->req.rtt.valid) {
    const uint64_t rto = SrMeasuredRtoNs();
    high = std::max(rto, std::min(high, 3 * rto));
  }
  return ibta == 0 ? high : std::min(ibta, high);
}

// IRN's RTO_low: the device's sr_rto_low_ns before any RTT sample, then
// the measured RTO (SRTT + 4 RTTVAR, at least sr_rto_min_ns), even above
// sr_rto_low_ns (a ceiling below the measured value only makes spurious
// timeouts), never above RTO_high.
uint64_t Qp::SrRtoLowNs() const {
  const uint64_t low = sr_state_->req.rtt.valid ? SrMeasuredRtoNs() : env_.sr_rto_low_ns;
  return std::min(low, SrRtoHighNs());
}

uint32_t Qp::SrUnsackedInFlightByWalk() const {
  uint32_t n = 0;
  for (uint32_t psn = req_.psn_una; wire::PsnLess(psn, req_.psn_high); psn = wire::PsnAdd(psn, 1)) {
    if (!wire::PsnLess(psn, sr_state_->req.sack_base) && BitTest(sr_state_->req.sacked, psn)) continue;
    ++n;
  }
  return n;
}

// The oldest unacknowledged work is an SR SEND/WRITE (a READ or atomic
// goes out with its IBTA opcode, so its answer says nothing of the peer).
bool Qp::SrOldestIsSendOrWrite() const {
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    const SendWqe& w = sq_.at(i);
    if (w.done) continue;
    return w.started && !IsReadOrAtomic(w) && !IsLocalOp(w);
  }
  return false;
}

// Fallback (doc/transport.md "Selective repeat", "Fallback"): the QP uses
// go-back-N for the rest of the connection. The requester resends from
// psn_una as IBTA packets; the responder forgets what it held past ePSN
// (go-back-N resends it) but keeps the receive WQEs it took, which the
// IBTA path consumes first, in order.
void Qp::SrFallBack(uint64_t now_ns) {
  if (!sr_) return;
  sr_ = false;
  ++counters_.sr_fallbacks;
  SrContinueAsIbta();
  sr_state_->resp.received = {};
  sr_state_->resp.last = {};
  sr_state_->req.sacked = {};
  sr_state_->req.sacked_count = 0;
  sr_state_->req.read_got = {};
  sr_state_->req.sack_base = sr_state_->req.retx_next = sr_state_->req.retx_end = req_.psn_una;
  sr_state_->req.hole_seen_ns = 0;
  sr_state_->req.repair_timing = false;
  sr_state_->req.timeout_probe = false;
  sr_state_->req.rto_low_armed = false;
  sr_state_->req.rack_active = false;
  sr_state_->req.probe_pending = false;
  sr_state_->req.tlp_deadline = 0;
  sr_state_->req.resent = {};
  sr_state_->req.resent_count = 0;
  sr_state_->req.frto = false;
  sr_state_->req.ackreq = {};
  sr_state_->req.backoff_hold = false;
  req_.implied_nak_pending = false;
  if (Outstanding()) {
    RetryFrom(req_.psn_una);
    req_.retransmit_deadline = ArmRetransmitTimer(now_ns);
  }
}

// IRN's RTO_low while little is in flight and the last timeout was
// followed by progress, RTO_high otherwise, backed off.
uint64_t Qp::SrRetransmitTimeoutNs() const {
  const uint64_t high = SrRtoHighNs();
  // IRN's RTO_low: a loss with few packets behind it produces no SACK.
  uint64_t t = req_.progress_since_retry && SrUnsackedInFlight() <= env_.sr_rto_low_below ? SrRtoLowNs() : high;
  // Backoff: doubled per timeout without progress, up to the device's
  // RTO_high ceiling (or the QP's IBTA timeout) once the RTT is measured;
  // up to 2^kSrMaxBackoff times before the first sample (Karn: the
  // backed-off value must outgrow the RTT for a sample to come; capped at
  // sr_rto_high_ns, on a path whose RTT is longer every RTO fired before the
  // ACK came back, no sample ever came, and the second timeout of each
  // pair resent the window), and after a spurious timeout until the next
  // sample (the path has just shown a delay above the RTO; Eifel's
  // response, RFC 4015: on the fabric a stall of a few ms otherwise makes
  // a timeout every 320 us, each second one resending the window).
  if (sr_state_->req.backoff > 0) {
    const uint64_t ibta = AckTimeoutNs(attr_.timeout);
    const uint64_t ceiling = ibta == 0 ? env_.sr_rto_high_ns : std::min(ibta, env_.sr_rto_high_ns);
    // (At least four timeouts per IBTA timeout, though: the fallback toward
    // a peer without selective repeat needs an answer within one.)
    const uint64_t cap = sr_state_->req.rtt.valid && !sr_state_->req.backoff_hold ? std::max(t, ceiling)
                                                                    : (ibta == 0 ? UINT64_MAX : std::max(t, ibta / 4));
    t = std::min(cap, t << std::min<uint8_t>(sr_state_->req.backoff, kSrMaxBackoff));
  }
  return t;
}

// An implied NAK (a READ/atomic response missing): that request alone is resent.
void Qp::SrImpliedNak(uint32_t missing_psn) {
  SrScheduleRetransmit(missing_psn, PsnAdd(missing_psn, 1));  // that READ/atomic only
  // The cursor moves only forward for SACKed losses; a READ's later
  // missing run (its first run asked again took the cursor past the
  // READ's end) is asked for now, or it would wait for a timeout.
  if (PsnLess(missing_psn, sr_state_->req.retx_next) && !PsnLess(missing_psn, req_.psn_una)) {
    sr_state_->req.rack_active = false;
    sr_state_->req.retx_next = missing_psn;
  }
}

}  // namespace droce::transport
