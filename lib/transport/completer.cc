// Completer (IBTA 9.7.5.2, 9.9): processes ACKs, NAKs, READ and atomic
// responses; completes work requests in order; go-back-N retransmission.
#include <algorithm>
#include <bit>
#include <cstring>

#include "transport/qp.h"
#include "transport/sr/selective_repeat.h"
#include "transport/step_contexts.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcOpcode;
using queue::WcStatus;
using namespace droce::wire;

bool Qp::Outstanding() const { return req_.psn_una != req_.psn_next; }

void Qp::PushSendCompletion(const SendWqe& w) {
  queue::Completion c;
  c.wr_id = w.wr_id;
  c.status = w.status;
  c.qp_num = qpn_;
  switch (w.opcode) {
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

void Qp::CompleteHead() {
  while (!sq_.empty() && sq_.front().done) {
    const SendWqe& w = sq_.front();
    if (w.status != WcStatus::kSuccess || (w.flags & kSendSignaled) || caps_.sq_sig_all) {
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
// invalidated since (the table's epoch: SgesStillLent, inline, tests it).
bool Qp::SgesStillLentAfterChange(SendWqe& w) {
  uint64_t& epoch = SendWqeEpoch(w);
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    if (!MrStillLent(SgeOf(w, i).lkey, epoch)) return false;
  }
  epoch = env_.mrs->epoch();
  return true;
}

void Qp::FailWqe(SendWqe& w, WcStatus status) {
  w.done = true;
  w.status = status;
  Fail(QpEvent::kFatal);  // flushes everything behind it and completes in order
}

// One walk from the head of the send queue: every WQE it passes is done
// when it stops (acknowledged now, or before), so they complete in order as
// it goes and leave the ring at once; psn_una moves once, to the end of the
// last WQE acknowledged in full. It stops at the first WQE not acknowledged
// in full: not started, past `psn`, a READ/atomic (its response decides),
// or a multi-packet message acknowledged in part (AckPartOf).
void Qp::AckUpTo(uint32_t psn, uint64_t now) {
  if (ack_per_wqe_) {
    AckUpToPerWqe(psn, now);
    return;
  }
  const uint32_t head = sq_.head(), tail = sq_.tail();
  // sq_sig_all as a signaled flag on every WQE: one test per WQE.
  const uint8_t signaled = caps_.sq_sig_all ? uint8_t{kSendSignaled} : uint8_t{0};
  SelectiveRepeat* const sr = sr_;
  bool progress = false;
  uint32_t acked_last = 0;
  uint32_t i = head;
  // Every WQE the walk passes leaves the ring below: none is marked done.
  for (; i != tail; ++i) {
    const SendWqe& w = sq_.at(i);
    if (!w.done) [[likely]] {
      if (!w.started || IsReadOrAtomic(w) || PsnLess(psn, w.last_psn)) break;
      if (sr != nullptr) sr->OnPeerAnswered();  // an SR SEND/WRITE packet acknowledged
      acked_last = w.last_psn;
      progress = true;
      // Its status is kSuccess: a WQE that failed is done (FailWqe, the flushes).
      if ((w.flags | signaled) & kSendSignaled) PushSendCompletion(w);
    } else if (w.status != WcStatus::kSuccess || ((w.flags | signaled) & kSendSignaled)) {
      PushSendCompletion(w);
    }
  }
  if (progress && PsnLess(req_.psn_una, PsnAdd(acked_last, 1))) req_.psn_una = PsnAdd(acked_last, 1);
  if (i != tail) progress |= AckPartOf(sq_.at(i), psn);
  sq_.Pop(i - head);
  // The transmit cursor never points behind the head, nor at a WQE done
  // meanwhile (started WQEs may lie beyond it after a go-back-N rewind; an
  // ACK from their first transmission still counts).
  if (static_cast<int32_t>(req_.sq_next - i) < 0) req_.sq_next = i;
  if (progress) NoteProgress(now);
  while (req_.sq_next != sq_.tail() && sq_.at(req_.sq_next).done) ++req_.sq_next;
}

// The WQE AckUpTo's walk stopped at, not done: a READ/atomic whose
// response an ACK past it shows lost, or a multi-packet message `psn`
// acknowledges in part. True: psn_una moved.
bool Qp::AckPartOf(SendWqe& w, uint32_t psn) {
  if (!w.started || PsnLess(psn, w.first_psn)) return false;
  if (IsReadOrAtomic(w)) {
    // An ACK beyond a READ/atomic whose response never came: the response
    // was lost (implied NAK, 9.7.5.2.5). Ask again for what is missing.
    const uint32_t missing =
        w.opcode == WrOpcode::kRdmaRead ? PsnAdd(w.first_psn, Ext(w).read_done_bytes / mtu_) : w.first_psn;
    if (PsnLess(psn, missing)) return false;
    bool moved = false;
    if (PsnLess(req_.psn_una, missing)) {
      req_.psn_una = missing;
      moved = true;
    }
    ImpliedNak(missing);
    return moved;
  }
  if (sr_) sr_->OnPeerAnswered();  // an SR SEND/WRITE packet acknowledged
  // Part of a multi-packet message acknowledged.
  if (!PsnLess(req_.psn_una, PsnAdd(psn, 1))) return false;
  req_.psn_una = PsnAdd(psn, 1);
  return true;
}

// AckUpTo WQE by WQE, marking each done and completing them afterwards:
// the reference the equivalence test (transport_ack_run) compares the walk with.
void Qp::AckUpToPerWqe(uint32_t psn, uint64_t now) {
  bool progress = false;
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started) break;
    if (PsnLess(psn, w.first_psn)) break;
    if (IsReadOrAtomic(w)) {
      const uint32_t missing =
          w.opcode == WrOpcode::kRdmaRead ? PsnAdd(w.first_psn, Ext(w).read_done_bytes / mtu_)
                                             : w.first_psn;
      if (PsnLess(psn, missing)) break;
      if (PsnLess(req_.psn_una, missing)) {
        req_.psn_una = missing;
        progress = true;
      }
      ImpliedNak(missing);
      break;
    }
    if (sr_) sr_->OnPeerAnswered();
    if (PsnLess(psn, w.last_psn)) {
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
void Qp::NoteProgress(uint64_t now) {
  req_.implied_nak_pending = false;
  req_.rnr_nak_pending = false;
  req_.retry_left = attr_.retry_cnt;
  req_.rnr_retry_left = attr_.rnr_retry;
  req_.progress_since_retry = true;
  req_.retry_probe_pending = false;
  req_.retry_clock_ns = now;
  if (sr_) sr_->OnProgress();
  req_.retransmit_deadline = Outstanding() ? ArmRetransmitTimer(now) : 0;
  if (req_.retransmit_deadline == 0) req_.ack_solicit_deadline = 0;  // nothing left to ask about
  if (sr_) sr_->ArmTlp(now);
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
void Qp::NoteAnswered(uint64_t now) {
  if (sr_ || req_.retransmit_deadline == 0 || !Outstanding()) return;  // (0: an RNR wait, or none)
  req_.retransmit_deadline = ArmRetransmitTimer(now);
}

uint64_t Qp::ArmRetransmitTimer(uint64_t now) {
  const uint64_t t = sr_ ? sr_->ArmTimeoutNs() : IbtaTimeoutNs();
  return t != 0 ? now + t : 0;
}

uint64_t Qp::IbtaTimeoutNs() const {
  if (attr_.timeout == 0) return 0;
  return AckTimeoutNs(std::max(attr_.timeout, env_.min_ack_timeout));
}

// Skips the transmit cursor over WQEs acknowledged meanwhile and completes
// what can be completed in order.
void Qp::AdvancePastDone() {
  while (req_.sq_next != sq_.tail() && sq_.at(req_.sq_next).done) ++req_.sq_next;
  CompleteHead();
}

void Qp::ImpliedNak(uint32_t missing_psn) {
  if (req_.implied_nak_pending && req_.implied_nak_psn == missing_psn) return;
  req_.implied_nak_pending = true;
  req_.implied_nak_psn = missing_psn;
  if (sr_) {
    sr_->OnImpliedNak(missing_psn);  // that READ/atomic alone
    return;
  }
  RetryFrom(missing_psn);
}

void Qp::RetryFrom(uint32_t psn) {
  // Go-back-N: resend everything from `psn`, keeping each WQE's PSNs.
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started) break;
    if (PsnLess(w.last_psn, psn)) continue;
    w.next_psn = PsnLess(psn, w.first_psn) ? w.first_psn : psn;
    if (w.opcode == WrOpcode::kRdmaRead) {
      Ext(w).read_done_bytes = static_cast<uint32_t>(PsnDiff(w.next_psn, w.first_psn)) * mtu_;
    }
    w.fully_sent = false;
    if (static_cast<int32_t>(i - req_.sq_next) < 0) req_.sq_next = i;
    // Later WQEs restart at their first PSN.
    for (uint32_t j = i + 1; j != sq_.tail(); ++j) {
      SendWqe& later = sq_.at(j);
      if (!later.started) break;
      later.next_psn = later.first_psn;
      later.fully_sent = false;
      if (later.opcode == WrOpcode::kRdmaRead) Ext(later).read_done_bytes = 0;
    }
    break;
  }
}


// The completer (IBTA 9.7.5.2, 9.9) as rxe's rxe_comp.c reads: each
// CompState step returns the next (transport/states.h).
void Qp::OnResponse(const uint8_t* frame, const ParsedPacket& p, uint64_t now, bool payload_placed) {
  const uint8_t* bth_p = frame + p.bth_offset;
  RespCtx c{frame, p, p.op(), bth_p, BthView(bth_p).psn(), now, payload_placed};
  // The states run in their order (CompState lists them so), as in the
  // responder: a step that returns a later state skips the ones between.
  CompState s = CompCheckPsn(c);
  if (s == CompState::kCheckAck) s = CompCheckAck(c);
  if (sr_ && (s == CompState::kRnrNak || s == CompState::kNak || s == CompState::kGetWqe)) sr_->OnOtherResponse();
  if (s == CompState::kAck) s = CompAck(c);
  if (s == CompState::kRnrNak) s = CompRnrNak(c);
  if (s == CompState::kNak) s = CompNak(c);
  if (s == CompState::kGetWqe) s = CompGetWqe(c);
  if (s == CompState::kAtomic) s = CompAtomic(c);
  if (s == CompState::kRead) s = CompRead(c);
  if (s == CompState::kComplete) s = CompComplete(c);
  if (s == CompState::kSack) s = sr_->OnSack(c);
  if (s == CompState::kBadResponse) ++counters_.dropped_bad_response;
  if (cc_.ops() != nullptr) CcOnResponse(c);  // cc_hooks.cc
}

// Responses for PSNs never sent, or already acknowledged, are stale.
DROCE_STEP CompState Qp::CompCheckPsn(RespCtx& c) {
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
DROCE_STEP CompState Qp::CompCheckAck(RespCtx& c) {
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

DROCE_STEP CompState Qp::CompAck(RespCtx& c) {
  ++counters_.acks_received;
  if (sr_ && !PsnLess(c.psn, req_.psn_una)) {
    sr_->OnAck(c.psn, c.now);
    return CompState::kDone;
  }
  AckUpTo(c.psn, c.now);
  if (req_.retry_probe_sent) CheckProbeAnswer(c.psn);
  return CompState::kDone;
}

// The first ACK at or past the retry probe's PSN. For exactly that PSN,
// with more outstanding: the responder holds nothing past it (what followed
// was lost: a lost tail, or a gap whose NAK was lost), so go-back-N resends
// the rest now. Past it: the rest is arriving (a slow responder, a lost
// ACK), and nothing is resent; what is missing after it draws a NAK or the
// next timeout's probe.
void Qp::CheckProbeAnswer(uint32_t acked) {
  if (PsnLess(acked, req_.retry_probe_psn)) return;
  req_.retry_probe_sent = false;
  if (acked == req_.retry_probe_psn && Outstanding() && state_ != QpState::kErr) RetryFrom(PsnAdd(acked, 1));
}

// RNR NAK (9.7.5.2.8): what precedes it is acknowledged; wait the timer it
// names, then resend from its PSN; rnr_retry bounds the waits (7: forever).
DROCE_STEP CompState Qp::CompRnrNak(RespCtx& c) {
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
DROCE_STEP CompState Qp::CompNak(RespCtx& c) {
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
DROCE_STEP CompState Qp::CompGetWqe(RespCtx& c) {
  AckUpTo(PsnAdd(c.psn, -1), c.now);
  if (state_ == QpState::kErr || sq_.empty()) return CompState::kDone;
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (w.started && IsReadOrAtomic(w)) c.wqe = &w;
    break;
  }
  if (c.wqe != nullptr && PsnLess(c.wqe->last_psn, c.psn) && (c.op.roles & kRoleReadResponse)) {
    // A later READ's response while the oldest misses one (the implied NAK
    // above asked for it again): dropped (selective repeat places it).
    if (sr_) return sr_->OnLaterReadResponse(c);
    ++counters_.out_of_sequence;
    NoteAnswered(c.now);
    return CompState::kDone;
  }
  if (c.wqe == nullptr || PsnLess(c.psn, c.wqe->first_psn) || PsnLess(c.wqe->last_psn, c.psn)) {
    return CompState::kBadResponse;
  }
  const bool read = c.wqe->opcode == WrOpcode::kRdmaRead;
  if (c.op.roles & kRoleAtomic) return read ? CompState::kBadResponse : CompState::kAtomic;
  if (!(c.op.roles & kRoleReadResponse) || !read) return CompState::kBadResponse;
  return CompState::kRead;
}

DROCE_STEP CompState Qp::CompAtomic(RespCtx& c) {
  SendWqe& w = *c.wqe;
  // The original value lands in host byte order, as verbs defines it.
  const uint64_t original = AtomicAckEthView(c.bth_p + c.op.atomic_ack_offset).original();
  if (!PlaceResponseData(w, 0, reinterpret_cast<const uint8_t*>(&original), 8)) return CompState::kDone;
  return CompState::kComplete;
}

bool Qp::PlaceResponseData(SendWqe& w, uint32_t offset, const uint8_t* data, uint32_t len) {
  if (!SgesStillLent(w)) {
    --req_.rd_atomic_outstanding;
    FailWqe(w, WcStatus::kLocProtErr);
    return false;
  }
  ScatterToSges(w, offset, data, len);
  return true;
}

// The expected response of the oldest READ is scattered at its offset; a
// later one means a response was lost (implied NAK), an earlier one is a
// duplicate (9.7.5.2.3).
DROCE_STEP CompState Qp::CompRead(RespCtx& c) {
  if (sr_) return sr_->OnReadResponse(c);  // places past a lost response too
  SendWqe& w = *c.wqe;
  const uint32_t expected = PsnAdd(w.first_psn, Ext(w).read_done_bytes / mtu_);
  if (c.psn != expected) return ReadResponseNotExpected(c, expected);
  const uint32_t offset = static_cast<uint32_t>(PsnDiff(c.psn, w.first_psn)) * mtu_;
  if (offset > w.total_len) return CompState::kBadResponse;
  const uint32_t remaining = w.total_len - offset;
  const uint32_t seg = c.p.payload_len;
  const bool valid = (c.op.roles & kRoleLast) ? seg == remaining : (seg == mtu_ && seg < remaining);
  if (!valid) return CompState::kBadResponse;
  if (!c.payload_placed && !PlaceResponseData(w, offset, c.frame + c.p.payload_offset, seg)) {
    return CompState::kDone;
  }
  Ext(w).read_done_bytes += seg;
  if (Ext(w).read_done_bytes == w.total_len) return CompState::kComplete;
  req_.psn_una = PsnAdd(w.first_psn, Ext(w).read_done_bytes / mtu_);
  NoteProgress(c.now);
  return CompState::kDone;
}

// OnUnverifiedPacket's test for a READ RESPONSE FIRST, MIDDLE or LAST:
// exactly the response CompRead would place next, with nothing before it in
// the chain that could act otherwise. The oldest WQE not done is a started
// READ, the PSN is the next it expects (so psn_una, and CheckPsn and
// AckUpTo change nothing), FIRST comes at offset 0 and MIDDLE and LAST
// after it, the length is what CompRead accepts there (FIRST and MIDDLE:
// the path MTU with more of the READ left; LAST: the rest of it, not empty),
// and its buffers' regions are still registered.
Qp::SendWqe* Qp::ReadAwaitingResponse(uint32_t opcode, uint32_t psn, uint32_t len) {
  if (sr_ || psn != req_.psn_una) return nullptr;
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started || w.opcode != WrOpcode::kRdmaRead) return nullptr;
    const uint32_t done_bytes = Ext(w).read_done_bytes;
    const uint32_t left = w.total_len - done_bytes;
    const bool first = opcode == kRcReadResponseFirst;
    const bool last = opcode == kRcReadResponseLast;
    if ((done_bytes == 0) != first || (last ? len != left || len - 1 >= mtu_ : len != mtu_ || left <= len) ||
        psn != PsnAdd(w.first_psn, done_bytes / mtu_) || !SgesStillLent(w)) {
      return nullptr;
    }
    return &w;
  }
  return nullptr;
}

CompState Qp::ReadResponseNotExpected(RespCtx& c, uint32_t expected) {
  if (PsnLess(c.psn, expected)) {
    ++counters_.duplicates_received;
  } else {
    ++counters_.out_of_sequence;  // a response was lost: implied NAK
    ImpliedNak(expected);
  }
  NoteAnswered(c.now);
  return CompState::kDone;
}

DROCE_STEP CompState Qp::CompComplete(RespCtx& c) {
  SendWqe& w = *c.wqe;
  w.done = true;
  --req_.rd_atomic_outstanding;
  req_.psn_una = PsnAdd(w.last_psn, 1);
  NoteProgress(c.now);
  AdvancePastDone();
  if (sr_ && state_ != QpState::kErr) sr_->OnReadOrAtomicDone(c.now);
  return CompState::kDone;
}

}  // namespace droce::transport
