// Selective repeat's completer: what a SACK acknowledges and shows missing,
// READ responses placed ahead of a lost one, and F-RTO's decision after a
// timeout (spurious: undone; real: the rest resent).
#include "transport/qp.h"
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

CompState Qp::SrPlaceLaterRead(RespCtx& c, SendWqe& w) {
  if (PsnDiff(c.psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow)) return CompState::kBadResponse;
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * mtu_;
  SrSlide();
  if (offset < w.read_done_bytes || BitTest(sr_state_->req.read_got, c.psn)) {
    ++counters_.duplicates_received;
    return CompState::kDone;
  }
  if (offset >= w.total_len && !(offset == 0 && w.total_len == 0)) return CompState::kBadResponse;
  const uint32_t seg = c.p.payload_len;
  if (seg != std::min(mtu_, w.total_len - offset)) return CompState::kBadResponse;
  if (!SgesStillLent(w)) {
    --req_.rd_atomic_outstanding;
    FailWqe(w, WcStatus::kLocProtErr);
    return CompState::kDone;
  }
  ScatterToSges(w, offset, c.frame + c.p.payload_offset, seg);
  BitSet(sr_state_->req.read_got, c.psn);
  ++counters_.sr_out_of_order_placed;
  return CompState::kDone;
}

// After the oldest READ/atomic completed: the READs now oldest take the
// responses placed for them while they waited (in order, from their first
// missing one); a READ they complete is done, a READ with a gap before
// responses that arrived asks for the missing run (implied NAK).
void Qp::SrCatchUpReads(uint64_t now) {
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started || w.wr.opcode != WrOpcode::kRdmaRead) return;
    SrSlide();
    bool any_ahead = false;
    while (w.read_done_bytes < w.total_len) {
      const uint32_t psn = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
      if (PsnDiff(psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow) || !BitTest(sr_state_->req.read_got, psn)) break;
      BitClear(sr_state_->req.read_got, psn);
      w.read_done_bytes += std::min(mtu_, w.total_len - w.read_done_bytes);
    }
    if (w.read_done_bytes < w.total_len) {
      const uint32_t missing = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
      for (uint32_t psn = PsnAdd(missing, 1); !PsnLess(w.last_psn, psn); psn = PsnAdd(psn, 1)) {
        if (PsnDiff(psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow)) break;
        if (BitTest(sr_state_->req.read_got, psn)) {
          any_ahead = true;
          break;
        }
      }
      if (PsnLess(req_.psn_una, missing)) {
        req_.psn_una = missing;
        NoteProgress(now);
      }
      if (any_ahead) ImpliedNak(missing);
      return;
    }
    w.done = true;
    --req_.rd_atomic_outstanding;
    req_.psn_una = PsnAdd(w.last_psn, 1);
    NoteProgress(now);
    AdvancePastDone();
    if (state_ == QpState::kErr) return;
    i = sq_.head() - 1;  // completions popped the ring: walk again from its head
  }
}

// Selective repeat (doc/transport.md): the SACK acknowledges up to its BTH
// PSN like an ACK; the PSNs its bitmap holds are not resent; those missing
// below the highest one it holds are lost and resent, once.
CompState Qp::CompSack(RespCtx& c) {
  ++counters_.sr_sacks_received;
  sr_state_->req.peer_answered = true;
  if (sr_state_->req.frto) {
    const SackEthView sk(c.bth_p + c.op.sacketh_offset);
    SrFrtoDecide(c.psn, sk.any());
  }
  const uint32_t rack_before = sr_state_->req.rack_seq;
  if (!PsnLess(c.psn, req_.psn_una)) SrNoteDelivered(c.psn, c.now);
  AckUpTo(c.psn, c.now);
  if (state_ == QpState::kErr) return CompState::kDone;
  SrSlide();
  const SackEthView sack(c.bth_p + c.op.sacketh_offset);
  const uint32_t base = sack.base_psn();
  if (base != PsnAdd(c.psn, 1)) return CompState::kBadResponse;
  bool any = false;
  bool fresh = false;
  uint32_t highest = 0;
  // Only PSNs sent: the running count of SACKed PSNs stays inside
  // [psn_una, psn_high). Bits past that are ignored.
  const int32_t valid = std::min(PsnDiff(req_.psn_high, PsnAdd(base, 1)),
                                 static_cast<int32_t>(kSrWindow) - PsnDiff(PsnAdd(base, 1), req_.psn_una));
  // A word at a time: a SACK now reports the whole window (1024 PSNs), most
  // of them SACKed already by the SACKs before it.
  for (uint32_t w = 0; w < kSackBits / 64 && static_cast<int32_t>(64 * w) < valid; ++w) {
    uint64_t bits = sack.word(w);
    if (valid - static_cast<int32_t>(64 * w) < 64) bits &= (uint64_t{1} << (valid - 64 * w)) - 1;
    if (bits == 0) continue;
    const uint32_t first = PsnAdd(base, 1 + 64 * w);
    any = true;
    highest = PsnAdd(first, 63 - std::countl_zero(bits));
    for (uint64_t news = bits & ~BitWord(sr_state_->req.sacked, first); news != 0; news &= news - 1) {
      const uint32_t psn = PsnAdd(first, static_cast<uint32_t>(std::countr_zero(news)));
      fresh = true;
      SrNoteDelivered(psn, c.now, /*selective=*/true);
      SrMarkSacked(psn);
    }
  }
  if (any) {
    const uint32_t end_before = sr_state_->req.retx_end;
    SrScheduleRetransmit(req_.psn_una, highest);
    // Counters only: a hole newly known (the repair's wait starts).
    if (sr_state_->req.hole_seen_ns == 0 && PsnLess(end_before, sr_state_->req.retx_end)) {
      sr_state_->req.hole_seen_ns = std::max<uint64_t>(c.now, 1);
    }
  }
  SrNoteRepaired(c.now);
  if (sr_state_->req.rack_seq != rack_before) SrRackScan();
  // IRN restarts the retransmission timer on every acknowledgement of new
  // packets, selective ones included: with the rest SACKed, a lost
  // retransmission is one packet in flight and waits RTO_low, not RTO_high.
  // (Not progress for retry_cnt: that needs the cumulative ACK to move.)
  if (fresh) {
    if (!sr_state_->req.backoff_hold) sr_state_->req.backoff = 0;  // the path delivers
    sr_state_->req.tlp_armable = true;
    if (req_.retransmit_deadline != 0 && Outstanding()) req_.retransmit_deadline = ArmRetransmitTimer(c.now);
    SrArmTlp(c.now);
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
void Qp::SrFrtoDecide(uint32_t acked, bool holds_more) {
  const uint32_t una = sr_state_->req.frto_una;
  bool spurious = false;
  if (!PsnLess(acked, una) && PsnDiff(acked, una) < static_cast<int32_t>(kSrWindow)) {
    spurious = holds_more;
    for (uint32_t psn = PsnAdd(una, 1); !spurious && !PsnLess(acked, psn); psn = PsnAdd(psn, 1)) {
      spurious = BitTest(sr_state_->req.ackreq, psn);
    }
  }
  if (!spurious) {
    SrFrtoRelease();
    return;
  }
  sr_state_->req.frto = false;
  ++counters_.sr_spurious_timeouts;
  req_.retry_left = sr_state_->req.frto_retry_left;
  req_.progress_since_retry = sr_state_->req.frto_progress;
  req_.retry_clock_ns = sr_state_->req.frto_retry_clock_ns;
  sr_state_->req.backoff_hold = true;
}

void Qp::SrFrtoRelease() {
  sr_state_->req.frto = false;
  if (PsnLess(sr_state_->req.retx_end, sr_state_->req.frto_end)) sr_state_->req.retx_end = sr_state_->req.frto_end;
  sr_state_->req.tmo_end = sr_state_->req.retx_end;  // (counters: sr_timeout_resent)
}

// A plain ACK at or past psn_una on an SR QP: F-RTO's decision, the RTT
// sample, the acknowledgement, RACK.
void Qp::SrOnAck(uint32_t psn, uint64_t now) {
  if (sr_state_->req.frto) SrFrtoDecide(psn, false);
  const uint32_t rack_before = sr_state_->req.rack_seq;
  SrNoteDelivered(psn, now);
  AckUpTo(psn, now);
  SrNoteRepaired(now);
  if (sr_state_->req.rack_seq != rack_before && state_ != QpState::kErr) SrRackScan();
}

}  // namespace droce::transport
