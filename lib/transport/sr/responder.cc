// Selective repeat's responder: SR requests placed out of order inside the
// window, receive WQEs held for messages ahead, the expected PSN advanced
// over what arrived, the SACK that says what is held, and a fallback to
// go-back-N inside a message (the IBTA responder takes it over).
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

// Requests to a QP that uses selective repeat. SR SEND/WRITE packets
// (kRoleSr, an SRETH after the BTH) are placed as they arrive anywhere
// inside the window [ePSN, ePSN + kSrWindow); READ and atomic requests run
// the IBTA steps, in PSN order only (one that arrives ahead is dropped and
// resent: a READ's responses and an atomic's result stay in PSN order, and
// an atomic executes exactly once through the resource ring). Errors are
// only acted on at the expected PSN, so they NAK exactly as go-back-N does.
void SelectiveRepeat::OnRequest(const uint8_t* frame, const ParsedPacket& p, uint64_t now_ns) {
  const uint8_t* bth_p = frame + p.bth_offset;
  ReqCtx c{frame, p, p.op(), bth_p, BthView(bth_p).psn(), p.payload_len, false};
  if (p.int_offset != 0) qp_.CcNoteInt(c);  // the switches' records, echoed in the next ACK or SACK
  const int32_t ahead = PsnDiff(c.psn, qp_.resp_.epsn);
  if (!(c.op.roles & kRoleSr) && (c.is_send() || c.is_write())) {
    // An IBTA SEND/WRITE at the expected PSN: the peer does not use
    // selective repeat (only one end configured it). Answer in its kind,
    // IBTA, and use go-back-N for this connection from now on
    // (doc/transport.md "Fallback"). Anywhere else it proves nothing (a
    // stale or spoofed packet with this QP's number; a non-SR peer's
    // later packets after a loss, which it resends from the expected PSN
    // when its timer fires): a duplicate is acknowledged, as IBTA's are,
    // the rest dropped.
    if (ahead == 0) {
      FallBack(now_ns);
      qp_.OnRequest(frame, p);
      return;
    }
    if (ahead < 0) {
      ++qp_.counters_.duplicates_received;
      QueueSack();  // an ACK of ePSN - 1 (a SACK while anything is held past it)
    } else {
      ++qp_.counters_.out_of_sequence;
      ++qp_.counters_.sr_dropped;
    }
    return;
  }
  if (ahead >= static_cast<int32_t>(kSrWindow)) {
    ++qp_.counters_.sr_dropped;  // beyond the window: the requester never sends that far
    return;
  }
  if (ahead < 0 || (ahead > 0 && Received(c.psn))) {
    ++qp_.counters_.duplicates_received;
    if (ahead < 0 && (c.is_read() || c.is_atomic())) {
      Duplicate(c);  // re-execute a READ, replay an atomic (9.7.5.1.2)
    } else {
      QueueSack();
    }
    return;
  }
  if (!(c.op.roles & kRoleSr)) {
    if (ahead > 0) {
      ++qp_.counters_.out_of_sequence;
      ++qp_.counters_.sr_dropped;
      QueueSack();
      return;
    }
    const RespState s = qp_.CheckAndExecute(c);  // responder.cc: the IBTA steps
    if (s == RespState::kError) {
      qp_.RespondError(c.error, c.psn);
      return;
    }
    resp_.in_message = false;  // a READ/atomic is a message of its own
    Advance();
    return;
  }
  // When a SACK leaves for a SEND/WRITE packet placed: the requester
  // resends what a SACK shows missing and sends new packets as a SACK or
  // ACK frees places in its window, so SACKs are what clock it. A SACK per
  // packet placed ahead (or one per receive burst) would cut its sends into
  // batches of a burst or less; on the fabric every batch is a wake-up of
  // the switch and a preemption of the receiver, which at 1 % loss, with a
  // hole nearly always open, costs about a third of the loss-free goodput
  // (doc/loss-experiment.md "What explains the numbers"). So a SACK leaves
  // at once when asked for (AckReq: every ack_req_every packets and each
  // message's last, every retransmission), for the first hole (this packet
  // placed ahead while nothing else was held: an isolated loss is resent
  // without waiting for the next AckReq), and when a packet fills a hole;
  // holes that open behind a known one, and the packets placed after them,
  // are reported by the next of those, ack_req_every packets later at most.
  // Duplicates and packets dropped ahead are answered as any other.
  const bool ack_req = BthView(bth_p).ack_req();
  bool first_hole = false;
  if (ahead > 0 && !ack_req && !Received(PsnAdd(c.psn, -1))) {
    first_hole = true;
    for (uint64_t w : resp_.received) first_hole &= w == 0;
  }
  RespError error = RespError::kCount;
  if (!PlaceData(c, ahead, &error)) {
    if (ahead == 0 && error != RespError::kCount) {
      RespondErrorAtExpected(error, c.psn);
      return;
    }
    ++qp_.counters_.sr_dropped;
    if (ahead > 0) QueueSack();
    return;
  }
  BitSet(resp_.received, c.psn);
  if (c.last()) BitSet(resp_.last, c.psn);
  if (ahead > 0) {
    ++qp_.counters_.sr_out_of_order_placed;
    if (ack_req || first_hole) QueueSack();
    return;
  }
  qp_.resp_.nak_seq_sent = false;
  Advance();
  if (qp_.state_ == QpState::kErr) return;
  if (ack_req || PsnDiff(qp_.resp_.epsn, c.psn) > 1) QueueSack();  // asked, or a hole filled
}

// Places an SR SEND/WRITE packet where its SRETH says. False: not placed;
// *error is the request's error when it is one (acted on only at the
// expected PSN), kCount when the packet is just dropped.
bool SelectiveRepeat::PlaceData(ReqCtx& c, int32_t ahead, RespError* error) {
  const SrEthView sr(c.bth_p + c.op.sreth_offset);
  const uint64_t end = uint64_t{sr.offset()} + c.len;
  const bool len_ok = c.last() ? c.len <= qp_.mtu_ : c.len == qp_.mtu_;
  if (!len_ok) {
    *error = RespError::kLength;
    return false;
  }
  if (c.is_write()) {
    if (sr.dma_length() > kMaxMessageBytes) {
      *error = RespError::kMessageTooLong;
      return false;
    }
    if (end > sr.dma_length() || (c.last() && end != sr.dma_length())) {
      *error = RespError::kLength;
      return false;
    }
  } else if (end > kMaxMessageBytes) {
    *error = RespError::kLength;
    return false;
  }
  SrRecv* r = nullptr;
  if (c.is_send() || (c.op.roles & kRoleConsumesRecv)) {
    const uint32_t k = sr.recv_seq() - resp_.recv_base;
    if (k >= kSrMaxHeldRecvs) return false;  // too far ahead to hold a receive for (or stale)
    if (qp_.env_.srq == nullptr) qp_.TakePostedRecvs();
    queue::Ring<RecvWr, true>& ring = qp_.env_.srq != nullptr ? qp_.env_.srq->ring() : qp_.rq_;
    while (resp_.recv_taken <= k) {
      if (ring.empty()) {
        if (ahead == 0) *error = RespError::kRnr;  // RNR NAK, PSN not consumed (9.7.5.2.8)
        return false;
      }
      SrRecv& t = recvs_[(resp_.recv_base + resp_.recv_taken) % kSrMaxHeldRecvs];
      t = SrRecv{};
      t.wr = ring.front();
      ring.Pop();
      ++resp_.recv_taken;
    }
    r = &recvs_[sr.recv_seq() % kSrMaxHeldRecvs];
  }
  const uint8_t* payload = c.frame + c.p.payload_offset;
  if (c.is_write()) {
    // Every packet's range is checked against its R_Key on its own: nothing
    // lands outside [va, va + dma_length) of a region that grants it.
    const auto t = qp_.CheckRkey(sr.rkey(), sr.va() + sr.offset(), c.len, mem::kRemoteWrite);
    if (t.result != mem::AccessResult::kOk) {
      *error = RespError::kRemoteAccess;
      return false;
    }
    if (c.len > 0) std::memcpy(t.host, payload, c.len);
  } else if (!qp_.PlaceIntoRecv(*qp_.env_.mrs, qp_.env_.pd, r->wr, sr.offset(), payload, c.len, error)) {
    return false;
  }
  if (!c.last()) {
    const uint32_t first_psn = PsnAdd(c.psn, -static_cast<int64_t>(sr.offset() / qp_.mtu_));
    msgs_[c.psn % kSrWindow] = SrMsg{sr.va(), sr.rkey(), sr.dma_length(), first_psn, c.is_write(), r != nullptr};
  }
  if (r != nullptr && c.last()) {
    r->ended = true;
    r->end_psn = c.psn;
    r->byte_len = c.is_write() ? sr.dma_length() : static_cast<uint32_t>(end);
    r->solicited = BthView(c.bth_p).solicited();
    r->opcode = c.is_write() ? WcOpcode::kRecvRdmaWithImm : WcOpcode::kRecv;
    if (c.op.roles & kRoleImmediate) {
      r->flags = queue::kWcWithImm;
      r->imm_or_inv = ImmDtView(c.bth_p + c.op.immdt_offset).wire_order();
    } else if (c.op.roles & kRoleInvalidate) {
      r->flags = queue::kWcWithInv;
      r->imm_or_inv = IethView(c.bth_p + c.op.ieth_offset).value();
      r->invalidate = true;
    }
  }
  return true;
}

// The expected PSN moves over everything that arrived; then the receive
// WQEs whose messages lie wholly before it complete, in order (10.8.3).
void SelectiveRepeat::Advance() {
  while (Received(qp_.resp_.epsn)) {
    BitClear(resp_.received, qp_.resp_.epsn);
    const bool last = BitTest(resp_.last, qp_.resp_.epsn);
    if (last) {
      BitClear(resp_.last, qp_.resp_.epsn);
      qp_.resp_.msn = PsnAdd(qp_.resp_.msn, 1);
    }
    resp_.in_message = !last;
    qp_.resp_.epsn = PsnAdd(qp_.resp_.epsn, 1);
  }
  while (resp_.recv_taken > 0) {
    SrRecv& r = recvs_[resp_.recv_base % kSrMaxHeldRecvs];
    if (!r.ended || !PsnLess(r.end_psn, qp_.resp_.epsn)) break;
    // Remote invalidation (10.6.7) happens in message order, at completion.
    if (r.invalidate && qp_.env_.mrs->RemoteInvalidate(r.imm_or_inv, qp_.env_.pd, qp_.qpn_) != mem::AccessResult::kOk) {
      RespondErrorAtExpected(RespError::kInvalidate, r.end_psn);
      return;
    }
    qp_.resp_.recv_wqe = r.wr;
    qp_.CompleteRecv(WcStatus::kSuccess, r.opcode, r.byte_len, r.flags, r.imm_or_inv, r.solicited);
    ++resp_.recv_base;
    --resp_.recv_taken;
  }
}

// A fallback while a message is in progress at the expected PSN (its
// packets before it placed as SR ones, ePSN - 1 not its last): go-back-N
// resends from the requester's oldest unacknowledged PSN, so the IBTA
// packet at ePSN is a MIDDLE or LAST, which IBTA accepts only inside a
// message in progress (9.7.5.1.3; without one it is NAKed invalid request, an
// opcode sequence error, and the WR completes REM_INV_REQ_ERR). The IBTA
// responder takes the message over where selective repeat left it, as if
// its first packets had arrived as IBTA ones: a WRITE's target from the
// SRETH its packets carried (checked again for the whole message, as a
// FIRST's RETH is), a SEND's (or WRITE with immediate's) receive WQE held at
// the byte offset reached. Nothing of the message was visible yet (no
// completion, no MSN), and PSNs below ePSN are duplicates either way.
void SelectiveRepeat::ContinueAsIbta() {
  if (!resp_.in_message || msgs_.empty()) return;
  resp_.in_message = false;
  const SrMsg& m = msgs_[PsnAdd(qp_.resp_.epsn, -1) % kSrWindow];
  const auto offset = static_cast<uint64_t>(PsnDiff(qp_.resp_.epsn, m.first_psn)) * qp_.mtu_;
  if (m.consumes_recv) {
    // Its receive WQE is the oldest selective repeat holds: every message
    // that consumed one before it ended before ePSN and completed.
    if (resp_.recv_taken == 0 || qp_.resp_.recv_wqe_held) return;
    qp_.resp_.recv_wqe = recvs_[resp_.recv_base % kSrMaxHeldRecvs].wr;
    qp_.resp_.recv_wqe_held = true;
    ++resp_.recv_base;
    --resp_.recv_taken;
    qp_.resp_.recv_offset = static_cast<uint32_t>(offset);
  }
  if (!m.write) {
    qp_.resp_.in_message = Qp::InMessage::kSend;
    return;
  }
  // (A target that no longer checks leaves no message in progress: the
  // next MIDDLE/LAST is an opcode sequence error, as the WRITE was doomed.)
  const auto t = qp_.CheckRkey(m.rkey, m.va, m.dma_length, mem::kRemoteWrite);
  if (t.result != mem::AccessResult::kOk || offset > m.dma_length) return;
  qp_.resp_.in_message = Qp::InMessage::kWrite;
  qp_.resp_.write_host = t.host;
  qp_.resp_.write_rkey = m.rkey;
  qp_.resp_.write_epoch = qp_.env_.mrs->epoch();
  qp_.resp_.write_total = m.dma_length;
  qp_.resp_.write_remaining = m.dma_length - static_cast<uint32_t>(offset);
}

// The error state for an SR request at the expected PSN: the receive WQE
// of its message (the oldest held) completes with the table's status, as
// the held one does in go-back-N; later ones are flushed.
void SelectiveRepeat::RespondErrorAtExpected(RespError e, uint32_t psn) {
  if (Info(e).fatal && resp_.recv_taken > 0 && !qp_.resp_.recv_wqe_held) {
    const SrRecv& r = recvs_[resp_.recv_base % kSrMaxHeldRecvs];
    if (r.ended ? !PsnLess(r.end_psn, psn) : true) {
      qp_.resp_.recv_wqe = r.wr;
      qp_.resp_.recv_wqe_held = true;
      ++resp_.recv_base;
      --resp_.recv_taken;
    }
  }
  qp_.RespondError(e, psn);
}

void SelectiveRepeat::FlushReceives() {
  while (resp_.recv_taken > 0) {
    queue::Completion c;
    c.wr_id = recvs_[resp_.recv_base % kSrMaxHeldRecvs].wr.wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = WcOpcode::kRecv;
    c.qp_num = qp_.qpn_;
    qp_.env_.recv_cq->Push(c);
    ++resp_.recv_base;
    --resp_.recv_taken;
  }
}

// A duplicate READ or atomic request: the READ executed again, the
// atomic's result replayed (Qp::ReplayResponse). The requester takes
// responses for its oldest outstanding READ only: a run asked again goes
// before the queued streams of later READs/atomics (after its own READ's
// stream, which go-back-N replaces instead), or those would all be sent,
// and dropped, while this READ waits for it.
void SelectiveRepeat::Duplicate(ReqCtx& c) {
  Action a{};
  const Qp::Resource* res = qp_.ReplayResponse(c, &a);
  if (res == nullptr || !qp_.PushResponse(a) || a.kind != ActionKind::kReadResponse) return;
  for (uint32_t i = qp_.actions_.tail() - 1; i != qp_.actions_.head(); --i) {
    Action& prev = qp_.actions_.at(i - 1);
    const bool later = (prev.kind == ActionKind::kReadResponse || prev.kind == ActionKind::kAtomicAck) &&
                       PsnLess(res->last_psn, prev.psn);
    if (!later) break;
    std::swap(prev, qp_.actions_.at(i));
  }
}

// An ACK whose contents are decided when it leaves: coalesces with a
// queued ACK or SACK, as ACKs do (9.7.5.1.1).
void SelectiveRepeat::QueueSack() {
  if (!qp_.actions_.empty()) {
    Action& last = qp_.actions_.at(qp_.actions_.tail() - 1);
    if (last.kind == ActionKind::kAck || last.kind == ActionKind::kSack) {
      last.kind = ActionKind::kSack;
      return;
    }
  }
  Action* a = qp_.actions_.Reserve();
  if (a == nullptr) return;  // not while Qp::ResponseRoom keeps an ACK's slot: the tail would be an ACK
  *a = Action{};
  a->kind = ActionKind::kSack;
  qp_.actions_.Commit();
}

// ACKNOWLEDGE of ePSN - 1 while nothing past ePSN has arrived; otherwise
// SR_SACK: the same BTH PSN and AETH, and a SACKETH with ePSN and the
// bitmap of the kSackBits (1024) PSNs after it.
uint32_t SelectiveRepeat::BuildSack(uint8_t* frame) {
  // Never acknowledge past a READ/atomic whose responses are still queued
  // behind this ACK: they carry its acknowledgement, in PSN order
  // (an ACK beyond a READ without its responses is an implied NAK).
  uint32_t ack = qp_.resp_.epsn;
  for (uint32_t i = qp_.actions_.head() + 1; i != qp_.actions_.tail(); ++i) {
    const Action& q = qp_.actions_.at(i);
    if (q.kind == ActionKind::kReadResponse || q.kind == ActionKind::kAtomicAck) {
      if (PsnLess(q.psn, ack)) ack = q.psn;
      break;
    }
  }
  static_assert(kSackBits == kSrWindow, "the bitmap is read from the ring a word at a time");
  uint64_t words[kSackBits / 64] = {};
  uint64_t held = 0;
  for (uint32_t w = 0; w < kSackBits / 64; ++w) held |= words[w] = BitWord(resp_.received, PsnAdd(ack, 1 + 64 * w));
  // Only what arrived past ePSN: PSNs below it but past a READ still queued
  // may be that READ's own responses, which the requester must not take for
  // arrived (their places in the ring may hold PSNs a window ahead).
  const int32_t below = PsnDiff(qp_.resp_.epsn, PsnAdd(ack, 1));
  for (int32_t i = 0; held != 0 && i < below && i < static_cast<int32_t>(kSackBits); ++i) {
    words[i / 64] &= ~(uint64_t{1} << (i % 64));
  }
  bool any = false;
  for (uint64_t w : words) any |= w != 0;
  uint8_t* ext;
  const uint32_t bth_off = qp_.WriteHeaders(frame, 0, PsnAdd(ack, -1), false, false, &ext);
  BthWriter bth(frame + bth_off);
  AethWriter aeth(ext);
  aeth.set_syndrome(MakeSyndrome(AethType::kAck, qp_.CreditsField()));
  aeth.set_msn(qp_.resp_.msn);
  // Either carries the INT records the last request brought (HPCC), as
  // go-back-N's ACK does: after the extended headers.
  if (!any) {
    bth.set_opcode(kRcAcknowledge);
    ++qp_.counters_.acks_sent;
    const uint32_t echo = qp_.int_echo_pending_ ? qp_.CcWriteIntEcho(frame + bth_off, kBthBytes + kAethBytes) : 0;
    return FinishTemplateFrame(frame, qp_.headers_, kBthBytes + kAethBytes + echo);
  }
  bth.set_opcode(kSrSack);
  SackEthWriter sack(ext + kAethBytes);
  sack.set_base_psn(ack);
  for (uint32_t w = 0; w < kSackBits / 64; ++w) sack.set_word(w, words[w]);
  ++qp_.counters_.sr_sacks_sent;
  const uint32_t headers = kBthBytes + kAethBytes + kSackEthBytes;
  const uint32_t echo = qp_.int_echo_pending_ ? qp_.CcWriteIntEcho(frame + bth_off, headers) : 0;
  return FinishTemplateFrame(frame, qp_.headers_, headers + echo);
}

}  // namespace droce::transport
