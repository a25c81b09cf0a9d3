// Completer (IBTA 9.7.5.2, 9.9): processes ACKs, NAKs, READ and atomic
// responses; completes work requests in order; go-back-N retransmission.
#include <algorithm>
#include <bit>
#include <cstring>

#include "transport/qp.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcOpcode;
using queue::WcStatus;
using namespace droce::wire;

bool RcQp::Outstanding() const { return req_.psn_una != req_.psn_next; }

void RcQp::PushSendCompletion(const SendWqe& w) {
  queue::Completion c;
  c.wr_id = w.wr.wr_id;
  c.status = w.status;
  c.qp_num = qpn_;
  switch (w.wr.opcode) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: c.opcode = WcOpcode::kRdmaWrite; break;
    case WrOpcode::kRdmaRead: c.opcode = WcOpcode::kRdmaRead; break;
    case WrOpcode::kAtomicCmpAndSwp: c.opcode = WcOpcode::kCompSwap; break;
    case WrOpcode::kAtomicFetchAndAdd: c.opcode = WcOpcode::kFetchAdd; break;
    case WrOpcode::kLocalInv: c.opcode = WcOpcode::kLocalInv; break;
    case WrOpcode::kBindMw: c.opcode = WcOpcode::kBindMw; break;
    default: c.opcode = WcOpcode::kSend; break;
  }
  c.byte_len = w.total_len;
  env_.send_cq->Push(c);
}

void RcQp::CompleteHead() {
  while (!sq_.empty() && sq_.front().done) {
    const SendWqe& w = sq_.front();
    if (w.status != WcStatus::kSuccess || (w.wr.flags & kSendSignaled) || caps_.sq_sig_all) {
      PushSendCompletion(w);
    }
    sq_.Pop();
  }
  if (static_cast<int32_t>(req_.sq_next - sq_.head()) < 0) req_.sq_next = sq_.head();
}

// A WQE's local SGEs were resolved when it started; their regions must still
// be registered whenever the payload is read again (a retransmission) or a
// READ/atomic's data comes back: the program may have deregistered and
// reused the memory meanwhile. Free while no region was deregistered or
// invalidated since (the table's epoch).
bool RcQp::SgesStillLent(SendWqe& w) const {
  if ((w.wr.flags & kSendInline) || w.mr_epoch == env_.mrs->epoch()) return true;
  for (uint32_t i = 0; i < w.wr.num_sge; ++i) {
    if (!MrStillLent(w.wr.sg_list[i].lkey, w.mr_epoch)) return false;
  }
  w.mr_epoch = env_.mrs->epoch();
  return true;
}

void RcQp::FailWqe(SendWqe& w, WcStatus status) {
  w.done = true;
  w.status = status;
  Fail(QpEvent::kFatal);  // flushes everything behind it and completes in order
}

void RcQp::AckUpTo(uint32_t psn, uint64_t now) {
  bool progress = false;
  // Started WQEs may lie beyond req_.sq_next after a go-back-N rewind; an ACK
  // from their first transmission still counts.
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started) break;
    if (PsnLess(psn, w.first_psn)) break;
    if (IsReadOrAtomic(w)) {
      // An ACK beyond a READ/atomic whose response never came: the response
      // was lost (implied NAK, 9.7.5.2.5). Ask again for what is missing.
      const uint32_t missing =
          w.wr.opcode == WrOpcode::kRdmaRead ? PsnAdd(w.first_psn, w.read_done_bytes / mtu_)
                                             : w.first_psn;
      if (PsnLess(psn, missing)) break;
      if (PsnLess(req_.psn_una, missing)) {
        req_.psn_una = missing;
        progress = true;
      }
      ImpliedNak(missing);
      break;
    }
    if (sr_) req_.sr_peer_answered = true;  // an SR SEND/WRITE packet acknowledged
    if (PsnLess(psn, w.last_psn)) {
      // Part of a multi-packet message acknowledged.
      if (PsnLess(req_.psn_una, PsnAdd(psn, 1))) {
        req_.psn_una = PsnAdd(psn, 1);
        progress = true;
      }
      break;
    }
    w.done = true;
    progress = true;
    if (PsnLess(req_.psn_una, PsnAdd(w.last_psn, 1))) req_.psn_una = PsnAdd(w.last_psn, 1);
  }
  if (progress) NoteProgress(now);
  AdvancePastDone();
}

// Forward progress restores the retry budgets and restarts the ACK timer.
void RcQp::NoteProgress(uint64_t now) {
  if (sr_) SrSlide();  // SACK bits below the new psn_una leave the running count
  req_.implied_nak_pending = false;
  req_.rnr_nak_pending = false;
  req_.retry_left = attr_.retry_cnt;
  req_.rnr_retry_left = attr_.rnr_retry;
  req_.progress_since_retry = true;
  req_.retry_probe_pending = false;
  req_.sr_retry_clock_ns = now;
  if (!req_.sr_backoff_hold) req_.sr_backoff = 0;  // (after a spurious timeout: at the next RTT sample)
  req_.sr_tlp_armable = true;
  req_.sr_tlp_deadline = 0;
  req_.retransmit_deadline = Outstanding() ? ArmRetransmitTimer(now) : 0;
  if (req_.retransmit_deadline == 0) req_.ack_solicit_deadline = 0;  // nothing left to ask about
  if (sr_) SrArmTlp(now);
}

// A response the completer cannot use (a duplicate of one it took, one past
// a lost response, the response of a READ behind the one still missing a
// response) still shows the responder at work on this QP's requests, in
// order; what was asked again comes behind it. Go-back-N's transport timer
// waits for the responder's silence, not for these (rxe's completer re-arms
// its timer after every response it processes); only forward progress
// restores the retry budget. Otherwise a responder slower than the window
// draws a timeout while it still serves the first copies, and with it a
// second copy of the window, the next timeout a third, until the retry
// budget runs out (doc/transport.md "Completer and recovery").
void RcQp::NoteAnswered(uint64_t now) {
  if (sr_ || req_.retransmit_deadline == 0 || !Outstanding()) return;  // (0: an RNR wait, or none)
  req_.retransmit_deadline = ArmRetransmitTimer(now);
}

uint64_t RcQp::ArmRetransmitTimer(uint64_t now) {
  const uint64_t t = RetransmitTimeoutNs();
  req_.sr_rto_low_armed = sr_ && t != 0 && t < SrRtoHighNs();
  return t != 0 ? now + t : 0;
}

// IRN's RTO_high for an SR QP: the device's sr_rto_high_ns before any RTT
// sample, then 3 x the measured RTO (SRTT + 4 RTTVAR, at least
// sr_rto_min_ns) up to sr_rto_high_ns, but never below the measured RTO
// itself: a ceiling below the path's RTT (or below the time between two
// coalesced ACKs) only makes timeouts, spurious ones, on every round trip
// (the fabric's loss-free row, doc/loss-experiment.md). At most the QP's
// IBTA timeout (0, infinite, leaves it).
uint64_t RcQp::SrRtoHighNs() const {
  const uint64_t ibta = AckTimeoutNs(attr_.timeout);
  uint64_t high = env_.sr_rto_high_ns;
  if (req_.sr_rtt.valid) {
    const uint64_t rto = SrMeasuredRtoNs();
    high = std::max(rto, std::min(high, 3 * rto));
  }
  return ibta == 0 ? high : std::min(ibta, high);
}

// IRN's RTO_low: the device's sr_rto_low_ns before any RTT sample, then
// the measured RTO (SRTT + 4 RTTVAR, at least sr_rto_min_ns), even above
// sr_rto_low_ns (a ceiling below the measured value only makes spurious
// timeouts), never above RTO_high.
uint64_t RcQp::SrRtoLowNs() const {
  const uint64_t low = req_.sr_rtt.valid ? SrMeasuredRtoNs() : env_.sr_rto_low_ns;
  return std::min(low, SrRtoHighNs());
}

uint64_t RcQp::RetransmitTimeoutNs() const {
  if (!sr_) return AckTimeoutNs(attr_.timeout);
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
  if (req_.sr_backoff > 0) {
    const uint64_t ibta = AckTimeoutNs(attr_.timeout);
    const uint64_t ceiling = ibta == 0 ? env_.sr_rto_high_ns : std::min(ibta, env_.sr_rto_high_ns);
    // (At least four timeouts per IBTA timeout, though: the fallback toward
    // a peer without selective repeat needs an answer within one.)
    const uint64_t cap = req_.sr_rtt.valid && !req_.sr_backoff_hold ? std::max(t, ceiling)
                                                                    : (ibta == 0 ? UINT64_MAX : std::max(t, ibta / 4));
    t = std::min(cap, t << std::min<uint8_t>(req_.sr_backoff, kSrMaxBackoff));
  }
  return t;
}

uint32_t RcQp::SrUnsackedInFlightByWalk() const {
  uint32_t n = 0;
  for (uint32_t psn = req_.psn_una; wire::PsnLess(psn, req_.psn_high); psn = wire::PsnAdd(psn, 1)) {
    if (!wire::PsnLess(psn, req_.sr_sack_base) && BitTest(req_.sr_sacked, psn)) continue;
    ++n;
  }
  return n;
}

// Skips the transmit cursor over WQEs acknowledged meanwhile and completes
// what can be completed in order.
void RcQp::AdvancePastDone() {
  while (req_.sq_next != sq_.tail() && sq_.at(req_.sq_next).done) ++req_.sq_next;
  CompleteHead();
}

void RcQp::ImpliedNak(uint32_t missing_psn) {
  if (req_.implied_nak_pending && req_.implied_nak_psn == missing_psn) return;
  req_.implied_nak_pending = true;
  req_.implied_nak_psn = missing_psn;
  if (sr_) {
    SrScheduleRetransmit(missing_psn, PsnAdd(missing_psn, 1));  // that READ/atomic only
    // The cursor moves only forward for SACKed losses; a READ's later
    // missing run (its first run asked again took the cursor past the
    // READ's end) is asked for now, or it would wait for a timeout.
    if (PsnLess(missing_psn, req_.sr_retx_next) && !PsnLess(missing_psn, req_.psn_una)) {
      req_.sr_rack_active = false;
      req_.sr_retx_next = missing_psn;
    }
    return;
  }
  RetryFrom(missing_psn);
}

void RcQp::RetryFrom(uint32_t psn) {
  // Go-back-N: resend everything from `psn`, keeping each WQE's PSNs.
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started) break;
    if (PsnLess(w.last_psn, psn)) continue;
    w.next_psn = PsnLess(psn, w.first_psn) ? w.first_psn : psn;
    if (w.wr.opcode == WrOpcode::kRdmaRead) {
      w.read_done_bytes = static_cast<uint32_t>(PsnDiff(w.next_psn, w.first_psn)) * mtu_;
    }
    w.fully_sent = false;
    if (static_cast<int32_t>(i - req_.sq_next) < 0) req_.sq_next = i;
    // Later WQEs restart at their first PSN.
    for (uint32_t j = i + 1; j != sq_.tail(); ++j) {
      SendWqe& later = sq_.at(j);
      if (!later.started) break;
      later.next_psn = later.first_psn;
      later.fully_sent = false;
      if (later.wr.opcode == WrOpcode::kRdmaRead) later.read_done_bytes = 0;
    }
    break;
  }
}

// One response on its way through the completer's steps.
struct RcQp::RespCtx {
  const uint8_t* frame;
  const ParsedPacket& p;
  const OpcodeInfo& op;
  const uint8_t* bth_p;
  uint32_t psn;
  uint64_t now;
  uint8_t syndrome = 0;
  SendWqe* wqe = nullptr;  // the READ/atomic a response answers
};

// The completer (IBTA 9.7.5.2, 9.9) as rxe's rxe_comp.c reads: each
// CompState step returns the next (transport/states.h).
void RcQp::OnResponse(const uint8_t* frame, const ParsedPacket& p, uint64_t now) {
  const uint8_t* bth_p = frame + p.bth_offset;
  RespCtx c{frame, p, p.op(), bth_p, BthView(bth_p).psn(), now};
  // The states run in their order (CompState lists them so), as in the
  // responder: a step that returns a later state skips the ones between.
  CompState s = CompCheckPsn(c);
  if (s == CompState::kCheckAck) s = CompCheckAck(c);
  // F-RTO decides on ACKs and SACKs only; a NAK or a READ/atomic response
  // after a timeout resends the rest, as before F-RTO.
  if (req_.sr_frto && (s == CompState::kRnrNak || s == CompState::kNak || s == CompState::kGetWqe)) {
    SrFrtoRelease();
  }
  if (s == CompState::kAck) s = CompAck(c);
  if (s == CompState::kRnrNak) s = CompRnrNak(c);
  if (s == CompState::kNak) s = CompNak(c);
  if (s == CompState::kGetWqe) s = CompGetWqe(c);
  if (s == CompState::kAtomic) s = CompAtomic(c);
  if (s == CompState::kRead) s = CompRead(c);
  if (s == CompState::kComplete) s = CompComplete(c);
  if (s == CompState::kSack) s = CompSack(c);
  if (s == CompState::kBadResponse) ++counters_.dropped_bad_response;
}

// Responses for PSNs never sent, or already acknowledged, are stale.
DROCE_STEP CompState RcQp::CompCheckPsn(RespCtx& c) {
  // A SACK that acknowledges nothing new still says what arrived.
  if (c.p.opcode == kSrSack && c.psn == PsnAdd(req_.psn_una, -1)) return CompState::kCheckAck;
  if (PsnLess(c.psn, req_.psn_una)) {
    ++counters_.duplicates_received;
    NoteAnswered(c.now);
    return CompState::kDone;
  }
  if (!PsnLess(c.psn, req_.psn_next)) return CompState::kBadResponse;
  return CompState::kCheckAck;
}

// ACKNOWLEDGE by its AETH type; READ responses and atomic acknowledgements
// to the WQE they answer.
DROCE_STEP CompState RcQp::CompCheckAck(RespCtx& c) {
  if (!(c.op.roles & kRoleAck) || (c.op.roles & kRoleAtomic)) return CompState::kGetWqe;
  if (c.op.Has(kHdrSackEth)) return sr_ ? CompState::kSack : CompState::kBadResponse;
  c.syndrome = AethView(c.bth_p + c.op.aeth_offset).syndrome();
  switch (SyndromeType(c.syndrome)) {
    case AethType::kAck: return CompState::kAck;
    case AethType::kRnrNak: return CompState::kRnrNak;
    case AethType::kNak: return CompState::kNak;
    case AethType::kReserved: break;
  }
  return CompState::kBadResponse;
}

DROCE_STEP CompState RcQp::CompAck(RespCtx& c) {
  ++counters_.acks_received;
  if (sr_ && !PsnLess(c.psn, req_.psn_una)) {
    if (req_.sr_frto) SrFrtoDecide(c.psn, false);
    const uint32_t rack_before = req_.sr_rack_seq;
    SrNoteDelivered(c.psn, c.now);
    AckUpTo(c.psn, c.now);
    SrNoteRepaired(c.now);
    if (req_.sr_rack_seq != rack_before && state_ != QpState::kErr) SrRackScan();
    return CompState::kDone;
  }
  AckUpTo(c.psn, c.now);
  return CompState::kDone;
}

// RNR NAK (9.7.5.2.8): what precedes it is acknowledged; wait the timer it
// names, then resend from its PSN; rnr_retry bounds the waits (7: forever).
DROCE_STEP CompState RcQp::CompRnrNak(RespCtx& c) {
  ++counters_.rnr_naks_received;
  AckUpTo(PsnAdd(c.psn, -1), c.now);
  if (state_ == QpState::kErr || sq_.empty()) return CompState::kDone;
  if (req_.rnr_retry_left == 0) {
    FailWqe(sq_.front(), Info(RespError::kRnr).send_status);
    return CompState::kDone;
  }
  if (req_.rnr_retry_left != 7) --req_.rnr_retry_left;  // 7 means retry forever
  req_.rnr_nak_pending = true;
  req_.rnr_nak_psn = c.psn;
  req_.rnr_resume_at = c.now + RnrTimerNs(SyndromeValue(c.syndrome));
  RetryFrom(c.psn);
  req_.retransmit_deadline = 0;
  return CompState::kDone;
}

// NAK (9.7.5.2.5 / 9.9.2): a PSN sequence error resends from its PSN
// (retry_cnt bounds the retries without progress); every other code
// completes the oldest WQE with the status of the error table.
DROCE_STEP CompState RcQp::CompNak(RespCtx& c) {
  ++counters_.naks_received;
  AckUpTo(PsnAdd(c.psn, -1), c.now);
  if (state_ == QpState::kErr || sq_.empty()) return CompState::kDone;
  const uint8_t code = SyndromeValue(c.syndrome);
  if (code != kNakPsnSequenceError) {
    FailWqe(sq_.front(), RequesterStatusForNak(code));
    return CompState::kDone;
  }
  // The responder also NAKs the packets that were in flight behind a
  // request it answered with RNR NAK: that sequence NAK names the RNR'd
  // PSN and is its echo, not a loss; the RNR wait resends them.
  if (req_.rnr_nak_pending && c.psn == req_.rnr_nak_psn) return CompState::kDone;
  if (!req_.progress_since_retry) {
    if (req_.retry_left == 0) {
      FailWqe(sq_.front(), Info(RespError::kPsnSequence).send_status);
      return CompState::kDone;
    }
    --req_.retry_left;
  }
  req_.progress_since_retry = false;
  RetryFrom(c.psn);
  return CompState::kDone;
}

// READ responses and atomic acknowledgements answer the oldest outstanding
// READ/atomic; everything before it is implicitly acknowledged (9.7.5.1.6).
DROCE_STEP CompState RcQp::CompGetWqe(RespCtx& c) {
  AckUpTo(PsnAdd(c.psn, -1), c.now);
  if (state_ == QpState::kErr || sq_.empty()) return CompState::kDone;
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (w.started && IsReadOrAtomic(w)) c.wqe = &w;
    break;
  }
  if (sr_ && c.wqe != nullptr && PsnLess(c.wqe->last_psn, c.psn) && (c.op.roles & kRoleReadResponse)) {
    // Selective repeat: a later READ's response while the oldest waits for
    // a lost one (its responses keep coming): placed, not dropped.
    for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
      SendWqe& w = sq_.at(i);
      if (!w.started) break;
      if (w.done || &w == c.wqe || w.wr.opcode != WrOpcode::kRdmaRead) continue;
      if (!PsnLess(c.psn, w.first_psn) && !PsnLess(w.last_psn, c.psn)) return SrPlaceLaterRead(c, w);
    }
    return CompState::kBadResponse;
  }
  if (!sr_ && c.wqe != nullptr && PsnLess(c.wqe->last_psn, c.psn) && (c.op.roles & kRoleReadResponse)) {
    // Go-back-N: a later READ's response while the oldest misses one (the
    // implied NAK above asked for it again).
    ++counters_.out_of_sequence;
    NoteAnswered(c.now);
    return CompState::kDone;
  }
  if (c.wqe == nullptr || PsnLess(c.psn, c.wqe->first_psn) || PsnLess(c.wqe->last_psn, c.psn)) {
    return CompState::kBadResponse;
  }
  const bool read = c.wqe->wr.opcode == WrOpcode::kRdmaRead;
  if (c.op.roles & kRoleAtomic) return read ? CompState::kBadResponse : CompState::kAtomic;
  if (!(c.op.roles & kRoleReadResponse) || !read) return CompState::kBadResponse;
  return CompState::kRead;
}

DROCE_STEP CompState RcQp::CompAtomic(RespCtx& c) {
  SendWqe& w = *c.wqe;
  // The original value lands in host byte order, as verbs defines it.
  const uint64_t original = AtomicAckEthView(c.bth_p + c.op.atomic_ack_offset).original();
  if (!SgesStillLent(w)) {
    --req_.rd_atomic_outstanding;
    FailWqe(w, WcStatus::kLocProtErr);
    return CompState::kDone;
  }
  ScatterToSges(w, 0, reinterpret_cast<const uint8_t*>(&original), 8);
  return CompState::kComplete;
}

DROCE_STEP CompState RcQp::CompRead(RespCtx& c) {
  SendWqe& w = *c.wqe;
  const uint32_t expected = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
  const bool ahead_sr = sr_ && PsnLess(expected, c.psn) &&
                        PsnDiff(c.psn, req_.psn_una) < static_cast<int32_t>(kSrWindow);
  if (c.psn != expected && !ahead_sr) {
    if (PsnLess(c.psn, expected)) {
      ++counters_.duplicates_received;
    } else {
      ++counters_.out_of_sequence;  // a response was lost: implied NAK
      ImpliedNak(expected);
    }
    NoteAnswered(c.now);
    return CompState::kDone;
  }
  // Selective repeat: a response past a lost one is placed at its own
  // offset ((PSN - first) x MTU) and remembered (sr_read_got); the READ is
  // asked again from the first missing response.
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * mtu_;
  if (ahead_sr) {
    SrSlide();
    if (BitTest(req_.sr_read_got, c.psn)) {
      ++counters_.duplicates_received;
      return CompState::kDone;
    }
  }
  if (offset > w.total_len) return CompState::kBadResponse;
  const uint32_t remaining = w.total_len - offset;
  const uint32_t seg = c.p.payload_len;
  const bool ends = (c.op.roles & kRoleLast) != 0;
  // (Selective repeat asks for runs inside the READ: their LAST may come
  // before the READ's end, so only the length is checked.)
  const bool valid = sr_ ? seg == std::min(mtu_, remaining)
                         : ends ? seg == remaining : (seg == mtu_ && seg < remaining);
  if (!valid) return CompState::kBadResponse;
  if (!SgesStillLent(w)) {
    --req_.rd_atomic_outstanding;
    FailWqe(w, WcStatus::kLocProtErr);
    return CompState::kDone;
  }
  ScatterToSges(w, offset, c.frame + c.p.payload_offset, seg);
  if (ahead_sr) {
    BitSet(req_.sr_read_got, c.psn);
    ++counters_.out_of_sequence;
    ++counters_.sr_out_of_order_placed;
    ImpliedNak(expected);
    return CompState::kDone;
  }
  w.read_done_bytes += seg;
  if (sr_) {
    // Responses placed ahead of this one count now.
    while (w.read_done_bytes < w.total_len) {
      const uint32_t psn = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
      if (PsnDiff(psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow) || !BitTest(req_.sr_read_got, psn)) break;
      BitClear(req_.sr_read_got, psn);
      w.read_done_bytes += std::min(mtu_, w.total_len - w.read_done_bytes);
    }
  }
  if (w.read_done_bytes == w.total_len) return CompState::kComplete;
  req_.psn_una = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
  if (sr_ && ends) {
    // A run asked again ended and the READ still misses responses that
    // later ones were placed after: ask for the next run now.
    NoteProgress(c.now);
    ImpliedNak(req_.psn_una);
    return CompState::kDone;
  }
  NoteProgress(c.now);
  return CompState::kDone;
}

DROCE_STEP CompState RcQp::CompComplete(RespCtx& c) {
  SendWqe& w = *c.wqe;
  w.done = true;
  --req_.rd_atomic_outstanding;
  req_.psn_una = PsnAdd(w.last_psn, 1);
  NoteProgress(c.now);
  AdvancePastDone();
  if (sr_ && state_ != QpState::kErr) SrCatchUpReads(c.now);
  return CompState::kDone;
}

CompState RcQp::SrPlaceLaterRead(RespCtx& c, SendWqe& w) {
  if (PsnDiff(c.psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow)) return CompState::kBadResponse;
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * mtu_;
  SrSlide();
  if (offset < w.read_done_bytes || BitTest(req_.sr_read_got, c.psn)) {
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
  BitSet(req_.sr_read_got, c.psn);
  ++counters_.sr_out_of_order_placed;
  return CompState::kDone;
}

// After the oldest READ/atomic completed: the READs now oldest take the
// responses placed for them while they waited (in order, from their first
// missing one); a READ they complete is done, a READ with a gap before
// responses that arrived asks for the missing run (implied NAK).
void RcQp::SrCatchUpReads(uint64_t now) {
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started || w.wr.opcode != WrOpcode::kRdmaRead) return;
    SrSlide();
    bool any_ahead = false;
    while (w.read_done_bytes < w.total_len) {
      const uint32_t psn = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
      if (PsnDiff(psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow) || !BitTest(req_.sr_read_got, psn)) break;
      BitClear(req_.sr_read_got, psn);
      w.read_done_bytes += std::min(mtu_, w.total_len - w.read_done_bytes);
    }
    if (w.read_done_bytes < w.total_len) {
      const uint32_t missing = PsnAdd(w.first_psn, w.read_done_bytes / mtu_);
      for (uint32_t psn = PsnAdd(missing, 1); !PsnLess(w.last_psn, psn); psn = PsnAdd(psn, 1)) {
        if (PsnDiff(psn, req_.psn_una) >= static_cast<int32_t>(kSrWindow)) break;
        if (BitTest(req_.sr_read_got, psn)) {
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
DROCE_STEP CompState RcQp::CompSack(RespCtx& c) {
  ++counters_.sr_sacks_received;
  req_.sr_peer_answered = true;
  if (req_.sr_frto) {
    const SackEthView sk(c.bth_p + c.op.sacketh_offset);
    SrFrtoDecide(c.psn, sk.any());
  }
  const uint32_t rack_before = req_.sr_rack_seq;
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
    for (uint64_t news = bits & ~BitWord(req_.sr_sacked, first); news != 0; news &= news - 1) {
      const uint32_t psn = PsnAdd(first, static_cast<uint32_t>(std::countr_zero(news)));
      fresh = true;
      SrNoteDelivered(psn, c.now, /*selective=*/true);
      SrMarkSacked(psn);
    }
  }
  if (any) {
    const uint32_t end_before = req_.sr_retx_end;
    SrScheduleRetransmit(req_.psn_una, highest);
    // Counters only: a hole newly known (the repair's wait starts).
    if (req_.sr_hole_seen_ns == 0 && PsnLess(end_before, req_.sr_retx_end)) {
      req_.sr_hole_seen_ns = std::max<uint64_t>(c.now, 1);
    }
  }
  SrNoteRepaired(c.now);
  if (req_.sr_rack_seq != rack_before) SrRackScan();
  // IRN restarts the retransmission timer on every acknowledgement of new
  // packets, selective ones included: with the rest SACKed, a lost
  // retransmission is one packet in flight and waits RTO_low, not RTO_high.
  // (Not progress for retry_cnt: that needs the cumulative ACK to move.)
  if (fresh) {
    if (!req_.sr_backoff_hold) req_.sr_backoff = 0;  // the path delivers
    req_.sr_tlp_armable = true;
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
void RcQp::SrFrtoDecide(uint32_t acked, bool holds_more) {
  const uint32_t una = req_.sr_frto_una;
  bool spurious = false;
  if (!PsnLess(acked, una) && PsnDiff(acked, una) < static_cast<int32_t>(kSrWindow)) {
    spurious = holds_more;
    for (uint32_t psn = PsnAdd(una, 1); !spurious && !PsnLess(acked, psn); psn = PsnAdd(psn, 1)) {
      spurious = BitTest(req_.sr_ackreq, psn);
    }
  }
  if (!spurious) {
    SrFrtoRelease();
    return;
  }
  req_.sr_frto = false;
  ++counters_.sr_spurious_timeouts;
  req_.retry_left = req_.sr_frto_retry_left;
  req_.progress_since_retry = req_.sr_frto_progress;
  req_.sr_retry_clock_ns = req_.sr_frto_retry_clock_ns;
  req_.sr_backoff_hold = true;
}

void RcQp::SrFrtoRelease() {
  req_.sr_frto = false;
  if (PsnLess(req_.sr_retx_end, req_.sr_frto_end)) req_.sr_retx_end = req_.sr_frto_end;
  req_.sr_tmo_end = req_.sr_retx_end;  // (counters: sr_timeout_resent)
}

}  // namespace droce::transport
