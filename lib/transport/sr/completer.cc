// Selective repeat's completer: what a SACK acknowledges and shows missing,
// READ responses placed ahead of a lost one, and F-RTO's decision after a
// timeout (spurious: undone; real: the rest resent).
#include "transport/sr/selective_repeat.h"
#include "transport/step_contexts.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "wire/icrc.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcOpcode;
using queue::WcStatus;
using namespace droce::wire;

// The oldest READ's response. One past a lost response is placed at its
// own offset ((PSN - first PSN) x MTU) and remembered (read_got), and the
// READ is asked again from its first missing response (an implied NAK);
// the go-back-N completer drops it. A run asked again may end before the
// READ's end, so its LAST is checked by length only.
CompState SelectiveRepeat::OnReadResponse(RespCtx& c) {
  SendWqe& w = *c.wqe;
  const uint32_t mtu = qp_.mtu_;
  const uint32_t expected = PsnAdd(w.first_psn, qp_.Ext(w).read_done_bytes / mtu);
  const bool ahead =
      PsnLess(expected, c.psn) && PsnDiff(c.psn, qp_.req_.psn_una) < static_cast<int32_t>(kSrWindow);
  if (c.psn != expected && !ahead) return qp_.ReadResponseNotExpected(c, expected);
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * mtu;
  if (ahead) {
    Slide();
    if (BitTest(req_.read_got, c.psn)) {
      ++qp_.counters_.duplicates_received;
      return CompState::kDone;
    }
  }
  if (offset > w.total_len) return CompState::kBadResponse;
  const uint32_t seg = c.p.payload_len;
  if (seg != std::min(mtu, w.total_len - offset)) return CompState::kBadResponse;
  if (!qp_.PlaceResponseData(w, offset, c.frame + c.p.payload_offset, seg)) return CompState::kDone;
  if (ahead) {
    BitSet(req_.read_got, c.psn);
    ++qp_.counters_.out_of_sequence;
    ++qp_.counters_.sr_out_of_order_placed;
    qp_.ImpliedNak(expected);
    return CompState::kDone;
  }
  qp_.Ext(w).read_done_bytes += seg;
  TakePlacedResponses(w);
  if (qp_.Ext(w).read_done_bytes == w.total_len) return CompState::kComplete;
  qp_.req_.psn_una = PsnAdd(w.first_psn, qp_.Ext(w).read_done_bytes / mtu);
  qp_.NoteProgress(c.now);
  // A run asked again ended and the READ still misses responses that
  // later ones were placed after: ask for the next run now.
  if (c.op.roles & kRoleLast) qp_.ImpliedNak(qp_.req_.psn_una);
  return CompState::kDone;
}

// The responses placed ahead for `w` that now follow its in-order ones count.
void SelectiveRepeat::TakePlacedResponses(SendWqe& w) {
  const uint32_t mtu = qp_.mtu_;
  while (qp_.Ext(w).read_done_bytes < w.total_len) {
    const uint32_t psn = PsnAdd(w.first_psn, qp_.Ext(w).read_done_bytes / mtu);
    if (PsnDiff(psn, qp_.req_.psn_una) >= static_cast<int32_t>(kSrWindow) || !BitTest(req_.read_got, psn)) break;
    BitClear(req_.read_got, psn);
    qp_.Ext(w).read_done_bytes += std::min(mtu, w.total_len - qp_.Ext(w).read_done_bytes);
  }
}

CompState SelectiveRepeat::OnLaterReadResponse(RespCtx& c) {
  for (uint32_t i = qp_.sq_.head(); i != qp_.sq_.tail(); ++i) {
    SendWqe& w = qp_.sq_.at(i);
    if (!w.started) break;
    if (w.done || &w == c.wqe || w.opcode != WrOpcode::kRdmaRead) continue;
    if (!PsnLess(c.psn, w.first_psn) && !PsnLess(w.last_psn, c.psn)) return PlaceLaterRead(c, w);
  }
  return CompState::kBadResponse;
}

CompState SelectiveRepeat::PlaceLaterRead(RespCtx& c, SendWqe& w) {
  if (PsnDiff(c.psn, qp_.req_.psn_una) >= static_cast<int32_t>(kSrWindow)) return CompState::kBadResponse;
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * qp_.mtu_;
  Slide();
  if (offset < qp_.Ext(w).read_done_bytes || BitTest(req_.read_got, c.psn)) {
    ++qp_.counters_.duplicates_received;
    return CompState::kDone;
  }
  if (offset >= w.total_len && !(offset == 0 && w.total_len == 0)) return CompState::kBadResponse;
  const uint32_t seg = c.p.payload_len;
  if (seg != std::min(qp_.mtu_, w.total_len - offset)) return CompState::kBadResponse;
  if (!qp_.PlaceResponseData(w, offset, c.frame + c.p.payload_offset, seg)) return CompState::kDone;
  BitSet(req_.read_got, c.psn);
  ++qp_.counters_.sr_out_of_order_placed;
  return CompState::kDone;
}

// After the oldest READ/atomic completed: the READs now oldest take the
// responses placed for them while they waited (in order, from their first
// missing one); a READ they complete is done, a READ with a gap before
// responses that arrived asks for the missing run (implied NAK).
void SelectiveRepeat::CatchUpReads(uint64_t now) {
  for (uint32_t i = qp_.sq_.head(); i != qp_.sq_.tail(); ++i) {
    SendWqe& w = qp_.sq_.at(i);
    if (w.done) continue;
    if (!w.started || w.opcode != WrOpcode::kRdmaRead) return;
    Slide();
    TakePlacedResponses(w);
    bool any_ahead = false;
    if (qp_.Ext(w).read_done_bytes < w.total_len) {
      const uint32_t missing = PsnAdd(w.first_psn, qp_.Ext(w).read_done_bytes / qp_.mtu_);
      for (uint32_t psn = PsnAdd(missing, 1); !PsnLess(w.last_psn, psn); psn = PsnAdd(psn, 1)) {
        if (PsnDiff(psn, qp_.req_.psn_una) >= static_cast<int32_t>(kSrWindow)) break;
        if (BitTest(req_.read_got, psn)) {
          any_ahead = true;
          break;
        }
      }
      if (PsnLess(qp_.req_.psn_una, missing)) {
        qp_.req_.psn_una = missing;
        qp_.NoteProgress(now);
      }
      if (any_ahead) qp_.ImpliedNak(missing);
      return;
    }
    w.done = true;
    --qp_.req_.rd_atomic_outstanding;
    qp_.req_.psn_una = PsnAdd(w.last_psn, 1);
    qp_.NoteProgress(now);
    qp_.AdvancePastDone();
    if (qp_.state_ == QpState::kErr) return;
    i = qp_.sq_.head() - 1;  // completions popped the ring: walk again from its head
  }
}

// Selective repeat (doc/transport.md): the SACK acknowledges up to its BTH
// PSN like an ACK; the PSNs its bitmap holds are not resent; those missing
// below the highest one it holds are lost and resent, once.
CompState SelectiveRepeat::OnSack(RespCtx& c) {
  ++qp_.counters_.sr_sacks_received;
  req_.peer_answered = true;
  if (req_.frto) {
    const SackEthView sk(c.bth_p + c.op.sacketh_offset);
    FrtoDecide(c.psn, sk.any());
  }
  const uint32_t rack_before = req_.rack_seq;
  if (!PsnLess(c.psn, qp_.req_.psn_una)) NoteDelivered(c.psn, c.now);
  qp_.AckUpTo(c.psn, c.now);
  if (qp_.state_ == QpState::kErr) return CompState::kDone;
  Slide();
  const SackEthView sack(c.bth_p + c.op.sacketh_offset);
  const uint32_t base = sack.base_psn();
  if (base != PsnAdd(c.psn, 1)) return CompState::kBadResponse;
  bool any = false;
  bool fresh = false;
  uint32_t highest = 0;
  // Only PSNs sent: the running count of SACKed PSNs stays inside
  // [psn_una, psn_high). Bits past that are ignored.
  const int32_t valid = std::min(PsnDiff(qp_.req_.psn_high, PsnAdd(base, 1)),
                                 static_cast<int32_t>(kSrWindow) - PsnDiff(PsnAdd(base, 1), qp_.req_.psn_una));
  // A word at a time: a SACK now reports the whole window (1024 PSNs), most
  // of them SACKed already by the SACKs before it.
  for (uint32_t w = 0; w < kSackBits / 64 && static_cast<int32_t>(64 * w) < valid; ++w) {
    uint64_t bits = sack.word(w);
    if (valid - static_cast<int32_t>(64 * w) < 64) bits &= (uint64_t{1} << (valid - 64 * w)) - 1;
    if (bits == 0) continue;
    const uint32_t first = PsnAdd(base, 1 + 64 * w);
    any = true;
    highest = PsnAdd(first, 63 - std::countl_zero(bits));
    for (uint64_t news = bits & ~BitWord(req_.sacked, first); news != 0; news &= news - 1) {
      const uint32_t psn = PsnAdd(first, static_cast<uint32_t>(std::countr_zero(news)));
      fresh = true;
      NoteDelivered(psn, c.now, /*selective=*/true);
      MarkSacked(psn);
    }
  }
  if (any) {
    const uint32_t end_before = req_.retx_end;
    ScheduleRetransmit(qp_.req_.psn_una, highest);
    // Counters only: a hole newly known (the repair's wait starts).
    if (req_.hole_seen_ns == 0 && PsnLess(end_before, req_.retx_end)) {
      req_.hole_seen_ns = std::max<uint64_t>(c.now, 1);
    }
  }
  NoteRepaired(c.now);
  if (req_.rack_seq != rack_before) RackScan();
  // IRN restarts the retransmission timer on every acknowledgement of new
  // packets, selective ones included: with the rest SACKed, a lost
  // retransmission is one packet in flight and waits RTO_low, not RTO_high.
  // (Not progress for retry_cnt: that needs the cumulative ACK to move.)
  if (fresh) {
    if (!req_.backoff_hold) req_.backoff = 0;  // the path delivers
    req_.tlp_armable = true;
    if (qp_.req_.retransmit_deadline != 0 && qp_.Outstanding()) qp_.req_.retransmit_deadline = qp_.ArmRetransmitTimer(c.now);
    ArmTlp(c.now);
  }
  return CompState::kDone;
}

// F-RTO (RFC 5682), adapted to SACKs and coalesced ACKs (doc/transport.md
// "Spurious timeouts"). A timeout resent psn_una alone (with AckReq). The
// first ACK or SACK after it decides. The responder acknowledges only what
// asks for it (AckReq) and answers out-of-order packets with SACKs: an ACK
// that covers a PSN past psn_una sent with AckReq before the timeout, or a
// SACK that holds PSNs past its cumulative point, acknowledges original
// transmissions the timeout did not resend, sent on their own: they were
// late, and the timeout was spurious. Then nothing else is resent (what
// the SACKs show missing is resent as always), the retry state is
// restored, and the doubled RTO stays until a fresh RTT sample (Karn).
// Otherwise the ACK can only be the answer to the timeout's resend (a lost
// tail whose AckReq packet was lost: it acknowledges up to the hole): the
// rest is resent, as a timeout did before F-RTO.
void SelectiveRepeat::FrtoDecide(uint32_t acked, bool holds_more) {
  const uint32_t una = req_.frto_una;
  bool spurious = false;
  if (!PsnLess(acked, una) && PsnDiff(acked, una) < static_cast<int32_t>(kSrWindow)) {
    spurious = holds_more;
    for (uint32_t psn = PsnAdd(una, 1); !spurious && !PsnLess(acked, psn); psn = PsnAdd(psn, 1)) {
      spurious = BitTest(req_.ackreq, psn);
    }
  }
  if (!spurious) {
    FrtoRelease();
    return;
  }
  req_.frto = false;
  ++qp_.counters_.sr_spurious_timeouts;
  qp_.req_.retry_left = req_.frto_retry_left;
  qp_.req_.progress_since_retry = req_.frto_progress;
  qp_.req_.retry_clock_ns = req_.frto_retry_clock_ns;
  req_.backoff_hold = true;
}

void SelectiveRepeat::FrtoRelease() {
  req_.frto = false;
  if (PsnLess(req_.retx_end, req_.frto_end)) req_.retx_end = req_.frto_end;
  req_.tmo_end = req_.retx_end;  // (counters: sr_timeout_resent)
}

// A plain ACK at or past psn_una on an SR QP: F-RTO's decision, the RTT
// sample, the acknowledgement, RACK.
void SelectiveRepeat::OnAck(uint32_t psn, uint64_t now) {
  if (req_.frto) FrtoDecide(psn, false);
  const uint32_t rack_before = req_.rack_seq;
  NoteDelivered(psn, now);
  qp_.AckUpTo(psn, now);
  NoteRepaired(now);
  if (req_.rack_seq != rack_before && qp_.state_ != QpState::kErr) RackScan();
}

}  // namespace droce::transport
