// Selective repeat's requester (doc/transport.md "Selective repeat"): the
// SACK bitmap following psn_una, what to resend and the resending itself,
// RTT samples and the RTOs they give (RFC 6298, a windowed maximum, a high
// percentile), RACK, the tail-loss probe, and the fallback to go-back-N.
#include "transport/sr/selective_repeat.h"

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
void SelectiveRepeat::Slide() {
  const int32_t moved = PsnDiff(qp_.req_.psn_una, req_.sack_base);
  if (moved >= static_cast<int32_t>(kSrWindow) || moved < 0) {
    req_.sacked = {};
    req_.sacked_count = 0;
    req_.resent = {};
    req_.resent_count = 0;
    req_.read_got = {};
    req_.ackreq = {};
  } else {
    for (int32_t i = 0; i < moved; ++i) {
      const uint32_t psn = PsnAdd(req_.sack_base, i);
      if (Sacked(psn)) --req_.sacked_count;
      if (BitTest(req_.resent, psn)) --req_.resent_count;
      BitClear(req_.sacked, psn);
      BitClear(req_.resent, psn);
      BitClear(req_.ackreq, psn);
      BitClear(req_.read_got, PsnAdd(req_.sack_base, i));
    }
  }
  req_.sack_base = qp_.req_.psn_una;
  if (PsnLess(req_.retx_next, qp_.req_.psn_una)) req_.retx_next = qp_.req_.psn_una;
  if (req_.rack_active && !PsnLess(req_.retx_next, req_.rack_limit)) req_.rack_active = false;
  if (PsnLess(req_.retx_end, req_.retx_next)) req_.retx_end = req_.retx_next;
  if (PsnLess(req_.tmo_end, qp_.req_.psn_una)) req_.tmo_end = qp_.req_.psn_una;
}

// PSNs in [from, end) not SACKed are to be resent. The cursor never moves
// back (a PSN is resent once per loss signal; a lost retransmission is
// found by the timeout, which restarts it at psn_una), so SACKs that still
// show a retransmitted PSN missing while it is on its way resend nothing.
void SelectiveRepeat::ScheduleRetransmit(uint32_t from, uint32_t end) {
  Slide();
  if (req_.probe_pending) {
    // A probe not sent yet: the cursor goes back to where it was before it
    // (or to the probe, if lower), and the probe is part of this pass.
    req_.probe_pending = false;
    if (PsnLess(req_.probe_return, req_.retx_next)) req_.retx_next = req_.probe_return;
    if (PsnLess(req_.retx_end, req_.retx_next)) req_.retx_end = req_.retx_next;
  }
  if (PsnLess(req_.retx_next, from) && !PsnLess(req_.retx_next, req_.retx_end)) {
    req_.retx_next = from;  // nothing pending: start where the new loss is
  }
  if (!PsnLess(req_.retx_next, req_.retx_end)) req_.tmo_end = qp_.req_.psn_una;  // (counters)
  if (PsnLess(req_.retx_end, end)) req_.retx_end = end;
}

uint32_t SelectiveRepeat::Retransmit(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns) {
  if (PendingRetransmits() == 0) return used;
  Slide();
  uint32_t i = qp_.sq_.head();
  while (used < n && PsnLess(req_.retx_next, req_.retx_end)) {
    if (qp_.Paced(now_ns)) break;
    const uint32_t psn = req_.retx_next;
    // A timeout resends the oldest PSN even when SACKed: only an ACK
    // completes it, and the one that would have was lost.
    const bool probe = req_.timeout_probe && psn == qp_.req_.psn_una;
    if (Sacked(psn) && !probe) {
      req_.retx_next = PsnAdd(psn, 1);
      continue;
    }
    if (req_.rack_active) {
      if (!PsnLess(psn, req_.rack_limit)) {
        req_.rack_active = false;
      } else if (!LostAgain(psn)) {
        // RACK region: only retransmissions found lost again; the rest
        // was resent already, or is still on its way.
        req_.retx_next = PsnAdd(psn, 1);
        continue;
      } else {
        ++qp_.counters_.sr_rack_resent;
      }
    }
    req_.timeout_probe = false;
    // The WQE holding psn (WQEs hold increasing PSN ranges).
    while (i != qp_.sq_.tail()) {
      const SendWqe& x = qp_.sq_.at(i);
      if (!x.done && (!x.started || !PsnLess(x.last_psn, psn))) break;
      ++i;
    }
    if (i == qp_.sq_.tail() || !qp_.sq_.at(i).started) {
      req_.retx_next = req_.retx_end;  // nothing sent there
      break;
    }
    SendWqe& w = qp_.sq_.at(i);
    if (PsnLess(psn, w.first_psn)) {
      req_.retx_next = w.first_psn;
      continue;
    }
    if (!w.fully_sent && !PsnLess(psn, w.next_psn)) {
      req_.retx_next = req_.retx_end;  // not sent yet: the send queue's walk sends it
      break;
    }
    uint32_t next = PsnAdd(psn, 1);
    if (qp_.IsReadOrAtomic(w)) {
      // A READ is asked again from its first missing response on (its
      // later PSNs are responses, not requests); an atomic is resent
      // whole and the responder replays its result.
      const uint32_t missing = w.opcode == WrOpcode::kRdmaRead
                                   ? PsnAdd(w.first_psn, qp_.Ext(w).read_done_bytes / qp_.mtu_)
                                   : w.first_psn;
      next = PsnAdd(w.last_psn, 1);
      if (psn != missing) {
        // Before the first missing response: ask from there; after it: asked already.
        req_.retx_next = PsnLess(psn, missing) ? missing : next;
        continue;
      }
    }
    if (!qp_.SgesStillLent(w)) {
      qp_.FailWqe(w, WcStatus::kLocProtErr);
      return used;
    }
    uint32_t read_len = 0;  // a READ: to its end
    if (w.opcode == WrOpcode::kRdmaRead) {
      // The READ's responses placed ahead are not asked for again: the
      // request covers the missing run up to the next one that arrived.
      uint32_t run = 1;
      while (PsnLess(PsnAdd(psn, run), PsnAdd(w.last_psn, 1)) &&
             PsnDiff(PsnAdd(psn, run), qp_.req_.psn_una) < static_cast<int32_t>(kSrWindow) &&
             !BitTest(req_.read_got, PsnAdd(psn, run))) {
        ++run;
      }
      read_len = PsnLess(PsnAdd(psn, run), PsnAdd(w.last_psn, 1)) ? run * qp_.mtu_ : 0;
    }
    const uint32_t len = qp_.BuildResend(w, psn, frames[used], now_ns, read_len);
    req_.retx_next = next;
    if (len == 0) continue;
    frames[used].len = len;
    ++qp_.counters_.tx_packets;
    ++qp_.counters_.sr_retransmitted_packets;
    if (!req_.probe_pending && !req_.rack_active && PsnLess(psn, req_.tmo_end)) {
      ++qp_.counters_.sr_timeout_resent;
    }
    qp_.counters_.tx_bytes += len;
    qp_.NoteSent(len, now_ns);
    ++used;
    if (req_.hole_seen_ns != 0) {  // the first resend since a SACK showed a hole
      const uint64_t wait = now_ns >= req_.hole_seen_ns ? now_ns - req_.hole_seen_ns : 0;
      ++qp_.counters_.sr_repair_waits;
      qp_.counters_.sr_repair_wait_ns += wait;
      qp_.counters_.sr_repair_wait_max_ns = std::max(qp_.counters_.sr_repair_wait_max_ns, wait);
      req_.hole_seen_ns = 0;
    }
    if (!req_.repair_timing && !qp_.IsReadOrAtomic(w)) {
      req_.repair_timing = true;
      req_.repair_psn = psn;
      req_.repair_sent_ns = now_ns;
    }
  }
  if (!PsnLess(req_.retx_next, req_.retx_end)) req_.hole_seen_ns = 0;  // nothing left to resend
  if (req_.probe_pending && !PsnLess(req_.retx_next, req_.retx_end)) {
    req_.probe_pending = false;  // the probe left: the cursor returns
    req_.retx_next = req_.retx_end = req_.probe_return;
    Slide();
  }
  if (qp_.req_.retransmit_deadline == 0) qp_.req_.retransmit_deadline = qp_.ArmRetransmitTimer(now_ns);
  ArmTlp(now_ns);
  return used;
}

// F-RTO: which ACKs were asked for before a timeout (not by its own resend).
void SelectiveRepeat::OnAckRequested(uint32_t psn) {
  if (!(req_.frto && psn == req_.frto_una)) BitSet(req_.ackreq, psn);
}

void SelectiveRepeat::WriteSrEth(uint8_t* sreth, const SendWqe& w, uint32_t recv_seq, uint32_t offset,
                                 bool write) {
  SrEthWriter sr(sreth);
  sr.set_va(write ? w.remote_addr : 0);
  sr.set_rkey(write ? w.rkey : 0);
  sr.set_dma_length(w.total_len);
  sr.set_offset(offset);
  sr.set_recv_seq(recv_seq);
}

void SelectiveRepeat::OnPacketSent(uint64_t now) {
  if (req_.rto_low_armed && unsacked_in_flight() > qp_.env_.sr_rto_low_below) {
    // Armed low with little in flight; now there is more: the high one.
    qp_.req_.retransmit_deadline = now + RtoHighNs();
    req_.rto_low_armed = false;
  }
  ArmTlp(now);
}

// The window's rule for selective repeat: the packets still in the path
// (sent, neither acknowledged nor SACKed) below the in-flight cap, so a
// hole being repaired does not stop the packets after it; the span past
// psn_una inside the per-PSN state (kSrWindow).
uint32_t SelectiveRepeat::WindowRoom(int32_t span) const {
  const int32_t span_room = static_cast<int32_t>(kSrWindow - 1) - span;
  const int32_t cap_room = static_cast<int32_t>(inflight_cap()) - static_cast<int32_t>(unsacked_in_flight());
  const int32_t room = std::min(span_room, cap_room);
  return room <= 0 ? 0 : static_cast<uint32_t>(room);
}

// Every packet an SR QP sends: its place in the send order (RACK), Karn's
// rule for the RTT timing (a retransmitted packet is never timed; timing
// one that is resent is abandoned), SEND/WRITE retransmissions remembered.
void SelectiveRepeat::OnRequestBuilt(uint32_t psn, bool retransmission, bool data, uint64_t now) {
  req_.sent_seq[psn % kSrWindow] = ++req_.tx_seq;
  if (retransmission) {
    if (req_.rtt_timing && req_.rtt_psn == psn) req_.rtt_timing = false;
    if (data && !BitTest(req_.resent, psn)) {
      BitSet(req_.resent, psn);
      ++req_.resent_count;
    }
    return;
  }
  if (!req_.rtt_timing && data) {
    req_.rtt_timing = true;
    req_.rtt_psn = psn;
    req_.rtt_sent_ns = now;
    req_.rtt_clean = req_.sacked_count == 0 && PendingRetransmits() == 0;
    req_.rtt_retx = qp_.counters_.sr_retransmitted_packets - qp_.counters_.tlp_probes;
  }
}

// `psn` was acknowledged (cumulatively or selectively): an RTT sample if
// it is the timed packet, and the newest send-order place delivered.
void SelectiveRepeat::NoteDelivered(uint32_t psn, uint64_t now, bool selective) {
  if (!PsnLess(psn, qp_.req_.psn_high) || PsnDiff(qp_.req_.psn_high, psn) > static_cast<int32_t>(kSrWindow)) return;
  const uint32_t seq = req_.sent_seq[psn % kSrWindow];
  if (static_cast<int32_t>(seq - req_.rack_seq) > 0) req_.rack_seq = seq;
  if (req_.rtt_timing && !PsnLess(psn, req_.rtt_psn)) {
    req_.rtt_timing = false;
    if (now >= req_.rtt_sent_ns) {
      req_.rtt.Sample(now - req_.rtt_sent_ns);
      CountRtt(now - req_.rtt_sent_ns);
      const bool no_resend = qp_.counters_.sr_retransmitted_packets - qp_.counters_.tlp_probes == req_.rtt_retx;
      if (req_.rtt_clean && no_resend) NoteRttMax(now - req_.rtt_sent_ns, now);
      // The percentile takes samples under loss too, but not one that waited
      // for a repair: a cumulative acknowledgement after a resend may have.
      if (selective || no_resend) NoteRttHigh(now - req_.rtt_sent_ns);
      req_.backoff_hold = false;  // Karn: a fresh sample ends a kept backoff
    }
  }
}

// The windowed maximum RTT, the RTO's floor (kSrRttMaxPeriodNs; Linux keeps
// windowed extremes the same way, lib/win_minmax.c, for its min RTT): the
// largest sample of the current period and of the previous one.
void SelectiveRepeat::NoteRttMax(uint64_t rtt_ns, uint64_t now) {
  const uint64_t elapsed = now - req_.rtt_max_start_ns;
  if (elapsed >= kSrRttMaxPeriodNs) {
    req_.rtt_max_prev_ns = elapsed >= 2 * kSrRttMaxPeriodNs ? 0 : req_.rtt_max_cur_ns;
    req_.rtt_max_cur_ns = 0;
    req_.rtt_max_start_ns = now;
  }
  req_.rtt_max_cur_ns = std::max(req_.rtt_max_cur_ns, rtt_ns);
}

// The recent high percentile (kSrRttRank-th largest of the last kSrRttRing
// samples): once per RTT sample, a walk of kSrRttRing words.
void SelectiveRepeat::NoteRttHigh(uint64_t rtt_ns) {
  req_.rtt_ring[req_.rtt_ring_n++ % kSrRttRing] = static_cast<uint32_t>(std::min<uint64_t>(rtt_ns, UINT32_MAX));
  const uint32_t n = std::min(req_.rtt_ring_n, kSrRttRing);
  std::array<uint32_t, kSrRttRank> top{};  // descending
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t v = req_.rtt_ring[i];
    for (uint32_t k = 0; k < kSrRttRank; ++k) {
      if (v > top[k]) std::swap(v, top[k]);
    }
  }
  req_.rtt_high_ns = top[kSrRttRank - 1];
}

// Counters only: the timed resend's PSN is acknowledged (below psn_una) or
// SACKed; its time from the resend is the repair's second part.
void SelectiveRepeat::NoteRepaired(uint64_t now) {
  if (!req_.repair_timing) return;
  if (!PsnLess(req_.repair_psn, qp_.req_.psn_una) && !Sacked(req_.repair_psn)) return;
  req_.repair_timing = false;
  const uint64_t t = now >= req_.repair_sent_ns ? now - req_.repair_sent_ns : 0;
  ++qp_.counters_.sr_repairs_timed;
  qp_.counters_.sr_repair_ns += t;
  ++qp_.counters_.sr_repair_hist[SrRttBucket(t)];
}

// Counters of the breakdown (doc/loss-experiment.md): RTT samples by size,
// the smallest, the packets in flight at each.
void SelectiveRepeat::CountRtt(uint64_t rtt_ns) {
  if (qp_.counters_.sr_rtt_min_ns == 0 || rtt_ns < qp_.counters_.sr_rtt_min_ns) {
    qp_.counters_.sr_rtt_min_ns = std::max<uint64_t>(rtt_ns, 1);
  }
  qp_.counters_.sr_rtt_inflight_sum += static_cast<uint32_t>(std::max(0, PsnDiff(qp_.req_.psn_high, qp_.req_.psn_una)));
  qp_.counters_.sr_rtt_max_ns = std::max(qp_.counters_.sr_rtt_max_ns, rtt_ns);
  ++qp_.counters_.sr_rtt_hist[SrRttBucket(rtt_ns)];
}

// The time new packets wait at the in-flight cap (sr_window_full_ns).
void SelectiveRepeat::NoteWindow(bool full, uint64_t now) {
  TimeSpan(full, now, &req_.cap_since_ns, &qp_.counters_.sr_window_full_ns);
}

// The time everything posted had been sent and waited for acknowledgement
// (sr_sq_drained_ns): the program's window, not the transport, held the sender.
void SelectiveRepeat::NoteDrained(bool drained, uint64_t now) {
  TimeSpan(drained, now, &req_.drained_since_ns, &qp_.counters_.sr_sq_drained_ns);
}

// RACK (time/order based, as TCP's RFC 8985 without its reordering window):
// a retransmission still missing while a packet sent after it arrived was
// lost again; resend it now instead of waiting for the timer.
void SelectiveRepeat::RackScan() {
  if (req_.resent_count == 0) return;
  Slide();
  // Only PSNs resent can be lost again: walk the set bits of sr_resent, a
  // 64-PSN word at a time (at most kSrWindow / 64 words per scan).
  for (uint32_t psn = qp_.req_.psn_una; PsnLess(psn, req_.retx_next); psn = PsnAdd(psn, 1)) {
    const uint32_t bit = psn % kSrWindow;
    const uint64_t rest = req_.resent[bit / 64] >> (bit % 64);
    if (rest == 0) {
      psn = PsnAdd(psn, 63 - bit % 64);  // the loop's +1 lands on the next word
      continue;
    }
    psn = PsnAdd(psn, static_cast<uint32_t>(std::countr_zero(rest)));
    if (!PsnLess(psn, req_.retx_next)) return;
    if (!LostAgain(psn)) continue;
    if (!req_.rack_active) {
      req_.rack_active = true;
      req_.rack_limit = req_.retx_next;
    }
    req_.retx_next = psn;
    return;
  }
}

// The tail-loss probe (RFC 8985's TLP): armed whenever something is sent or
// acknowledged, max(floor, 2 SRTT) ahead, if that comes before the RTO.
void SelectiveRepeat::ArmTlp(uint64_t now) {
  if (!qp_.env_.sr_tlp || !req_.rtt.valid || !req_.tlp_armable || !qp_.Outstanding()) return;
  const uint64_t at = now + std::max(qp_.env_.sr_rto_min_ns, 2 * req_.rtt.srtt_ns);
  req_.tlp_deadline = qp_.req_.retransmit_deadline != 0 && at >= qp_.req_.retransmit_deadline ? 0 : at;
}

// The probe, once per progress: while nothing is SACKed (a lost tail, or
// lost ACKs), the highest packet sent: its ACK or SACK shows every hole
// before it. Once SACKs showed holes, the first missing one: it holds
// every completion behind it.
void SelectiveRepeat::Probe() {
  req_.tlp_armable = false;
  Slide();
  uint32_t psn = PsnAdd(qp_.req_.psn_high, -1);
  if (PsnLess(psn, qp_.req_.psn_una) || Sacked(psn) || req_.sacked_count > 0) {
    psn = qp_.req_.psn_una;
    while (PsnLess(psn, qp_.req_.psn_high) && Sacked(psn)) psn = PsnAdd(psn, 1);
    if (!PsnLess(psn, qp_.req_.psn_high)) return;
  }
  ++qp_.counters_.tlp_probes;
  req_.rack_active = false;
  req_.probe_pending = true;
  req_.probe_return = req_.retx_next;
  req_.retx_next = psn;
  req_.retx_end = PsnAdd(psn, 1);
}

// Selective repeat's share of forward progress: the SACK bits below the
// new psn_una leave the running count, the backoff ends (after a spurious
// timeout only at the next RTT sample), a tail-loss probe may be armed again.
void SelectiveRepeat::OnProgress() {
  Slide();
  if (!req_.backoff_hold) req_.backoff = 0;
  req_.tlp_armable = true;
  req_.tlp_deadline = 0;
}

// IRN's RTO_high for an SR QP: the device's sr_rto_high_ns before any RTT
// sample, then 3 x the measured RTO (SRTT + 4 RTTVAR, at least
// sr_rto_min_ns) up to sr_rto_high_ns, but never below the measured RTO
// itself: a ceiling below the path's RTT (or below the time between two
// coalesced ACKs) only makes timeouts, spurious ones, on every round trip
// (the fabric's loss-free row, doc/loss-experiment.md). At most the QP's
// IBTA timeout (0, infinite, leaves it).
uint64_t SelectiveRepeat::RtoHighNs() const {
  const uint64_t ibta = qp_.IbtaTimeoutNs();
  uint64_t high = qp_.env_.sr_rto_high_ns;
  if (req_.rtt.valid) {
    const uint64_t rto = MeasuredRtoNs();
    high = std::max(rto, std::min(high, 3 * rto));
  }
  return ibta == 0 ? high : std::min(ibta, high);
}

// IRN's RTO_low: the device's sr_rto_low_ns before any RTT sample, then
// the measured RTO (SRTT + 4 RTTVAR, at least sr_rto_min_ns), even above
// sr_rto_low_ns (a ceiling below the measured value only makes spurious
// timeouts), never above RTO_high.
uint64_t SelectiveRepeat::RtoLowNs() const {
  const uint64_t low = req_.rtt.valid ? MeasuredRtoNs() : qp_.env_.sr_rto_low_ns;
  return std::min(low, RtoHighNs());
}

uint32_t SelectiveRepeat::UnsackedInFlightByWalk() const {
  uint32_t n = 0;
  for (uint32_t psn = qp_.req_.psn_una; wire::PsnLess(psn, qp_.req_.psn_high); psn = wire::PsnAdd(psn, 1)) {
    if (!wire::PsnLess(psn, req_.sack_base) && BitTest(req_.sacked, psn)) continue;
    ++n;
  }
  return n;
}

// The oldest unacknowledged work is an SR SEND/WRITE (a READ or atomic
// goes out with its IBTA opcode, so its answer says nothing of the peer).
bool SelectiveRepeat::OldestIsSendOrWrite() const {
  for (uint32_t i = qp_.sq_.head(); i != qp_.sq_.tail(); ++i) {
    const SendWqe& w = qp_.sq_.at(i);
    if (w.done) continue;
    return w.started && !qp_.IsReadOrAtomic(w) && !qp_.IsLocalOp(w);
  }
  return false;
}

// Fallback (doc/transport.md "Selective repeat", "Fallback"): the QP uses
// go-back-N for the rest of the connection. The requester resends from
// psn_una as IBTA packets; the responder forgets what it held past ePSN
// (go-back-N resends it) but keeps the receive WQEs it took, which the
// IBTA path consumes first, in order.
void SelectiveRepeat::FallBack(uint64_t now_ns) {
  qp_.sr_ = nullptr;
  ++qp_.counters_.sr_fallbacks;
  ContinueAsIbta();
  resp_.received = {};
  resp_.last = {};
  req_.sacked = {};
  req_.sacked_count = 0;
  req_.read_got = {};
  req_.sack_base = req_.retx_next = req_.retx_end = qp_.req_.psn_una;
  req_.hole_seen_ns = 0;
  req_.repair_timing = false;
  req_.timeout_probe = false;
  req_.rto_low_armed = false;
  req_.rack_active = false;
  req_.probe_pending = false;
  req_.tlp_deadline = 0;
  req_.resent = {};
  req_.resent_count = 0;
  req_.frto = false;
  req_.ackreq = {};
  req_.backoff_hold = false;
  qp_.req_.implied_nak_pending = false;
  if (qp_.Outstanding()) {
    qp_.RetryFrom(qp_.req_.psn_una);
    qp_.req_.retransmit_deadline = qp_.ArmRetransmitTimer(now_ns);
  }
}

// IRN's RTO_low while little is in flight and the last timeout was
// followed by progress, RTO_high otherwise, backed off.
uint64_t SelectiveRepeat::RetransmitTimeoutNs() const {
  const uint64_t high = RtoHighNs();
  // IRN's RTO_low: a loss with few packets behind it produces no SACK.
  uint64_t t = qp_.req_.progress_since_retry && unsacked_in_flight() <= qp_.env_.sr_rto_low_below ? RtoLowNs() : high;
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
  if (req_.backoff > 0) {
    const uint64_t ibta = qp_.IbtaTimeoutNs();
    const uint64_t ceiling = ibta == 0 ? qp_.env_.sr_rto_high_ns : std::min(ibta, qp_.env_.sr_rto_high_ns);
    // (At least four timeouts per IBTA timeout, though: the fallback toward
    // a peer without selective repeat needs an answer within one.)
    const uint64_t cap = req_.rtt.valid && !req_.backoff_hold ? std::max(t, ceiling)
                                                                    : (ibta == 0 ? UINT64_MAX : std::max(t, ibta / 4));
    t = std::min(cap, t << std::min<uint8_t>(req_.backoff, kSrMaxBackoff));
  }
  return t;
}

// An implied NAK (a READ/atomic response missing): that request alone is resent.
void SelectiveRepeat::OnImpliedNak(uint32_t missing_psn) {
  ScheduleRetransmit(missing_psn, PsnAdd(missing_psn, 1));  // that READ/atomic only
  // The cursor moves only forward for SACKed losses; a READ's later
  // missing run (its first run asked again took the cursor past the
  // READ's end) is asked for now, or it would wait for a timeout.
  if (PsnLess(missing_psn, req_.retx_next) && !PsnLess(missing_psn, qp_.req_.psn_una)) {
    req_.rack_active = false;
    req_.retx_next = missing_psn;
  }
}

}  // namespace droce::transport
