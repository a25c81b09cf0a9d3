// Responder (IBTA 9.7.5): PSN and opcode-sequence checks, R_Key/PD/access/
// bounds checks, placement of SEND/WRITE data, READ and atomic execution,
// duplicate handling from the resource cache, RNR NAK, coalesced ACKs.
#include <algorithm>
#include <cstring>

#include "transport/icrc.h"
#include "transport/qp.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcOpcode;
using queue::WcStatus;
using namespace droce::wire;

namespace {

// IBTA 9.7.5.2.7, Table 44: AETH credit count encoding.
constexpr uint32_t kCreditCounts[31] = {0,    1,    2,    3,     4,     6,     8,    12,
                                        16,   24,   32,   48,    64,    96,    128,  192,
                                        256,  384,  512,  768,   1024,  1536,  2048, 3072,
                                        4096, 6144, 8192, 12288, 16384, 24576, 32768};

}  // namespace

uint8_t RcQp::CreditsField() const {
  if (env_.srq != nullptr) return kAethCreditsInvalid;  // no per-QP credits with an SRQ
  const uint32_t available = rq_.size();
  uint8_t code = 0;
  while (code < 30 && kCreditCounts[code + 1] <= available) ++code;
  return code;
}

void RcQp::QueueAck(uint32_t psn) {
  // Coalesce: a queued, unsent ACK just moves forward (9.7.5.1.1).
  if (!actions_.empty()) {
    Action& last = actions_.at(actions_.tail() - 1);
    if (last.kind == ActionKind::kAck) {
      last.psn = psn;
      last.msn = msn_;
      return;
    }
  }
  Action* a = actions_.Reserve();
  if (a == nullptr) return;  // a later ACK will cover it
  *a = Action{};
  a->kind = ActionKind::kAck;
  a->psn = psn;
  a->msn = msn_;
  actions_.Commit();
}

void RcQp::QueueNak(uint8_t syndrome, uint32_t psn) {
  Action* a = actions_.Reserve();
  if (a == nullptr) return;  // the requester's timer recovers
  *a = Action{};
  a->kind = ActionKind::kNak;
  a->syndrome = syndrome;
  a->psn = psn;
  a->msn = msn_;
  actions_.Commit();
}

bool RcQp::TakeRecvWqe() {
  if (recv_wqe_held_) return true;
  queue::Ring<RecvWr>& ring = env_.srq != nullptr ? env_.srq->ring() : rq_;
  if (ring.empty()) return false;
  recv_wqe_ = ring.front();
  ring.Pop();
  recv_wqe_held_ = true;
  recv_offset_ = 0;
  return true;
}

void RcQp::CompleteRecv(WcStatus status, WcOpcode opcode, uint32_t byte_len, uint8_t flags,
                        uint32_t imm_or_inv, bool solicited) {
  queue::Completion c;
  c.wr_id = recv_wqe_.wr_id;
  c.status = status;
  c.opcode = opcode;
  c.byte_len = byte_len;
  c.flags = flags | (solicited ? queue::CompletionQueue::kWcSolicited : 0);
  c.imm_or_inv = imm_or_inv;
  c.qp_num = qpn_;
  c.src_qp = attr_.dest_qp_num;
  recv_wqe_held_ = false;
  env_.recv_cq->Push(c);
}

// A new READ or atomic needs one of the responder resources the connection
// negotiated (max_dest_rd_atomic); with none left it is an invalid request
// (class C, IBTA 9.9.3.1.3): NAKed here, and false.
bool RcQp::RdAtomicResourceFree(uint32_t psn) {
  if (rd_atomic_active_ < attr_.max_dest_rd_atomic) return true;
  ++counters_.rd_atomic_overflows;
  ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
  return false;
}

void RcQp::ResponderError(uint8_t nak_code, uint32_t psn, WcStatus local_status) {
  ++counters_.naks_sent;
  QueueNak(MakeSyndrome(AethType::kNak, nak_code), psn);
  if (recv_wqe_held_) CompleteRecv(local_status, WcOpcode::kRecv, 0, 0, 0, false);
  // Class C/D errors move the responder to ERR after the NAK (9.9.3.1) and
  // raise the affiliated asynchronous error of their kind (C9-222.1.1, 11.6.3.1).
  Fail(nak_code == kNakRemoteAccessError ? QpEvent::kAccessError
       : nak_code == kNakInvalidRequest  ? QpEvent::kRequestError
                                         : QpEvent::kFatal);
}

// Scatters a SEND payload into the held receive WQE at the running offset.
// On failure the responder has already reported the error.
bool RcQp::PlaceSendPayload(const uint8_t* payload, uint32_t len, uint32_t psn) {
  uint32_t skip = recv_offset_, left = len;
  const uint8_t* src = payload;
  for (uint32_t i = 0; i < recv_wqe_.num_sge && left > 0; ++i) {
    const Sge& sge = recv_wqe_.sg_list[i];
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    const uint32_t n = std::min(left, sge.length - skip);
    const auto r = env_.mrs->CheckLocal(sge.lkey, env_.pd, sge.addr + skip, n, true);
    if (r.result != mem::AccessResult::kOk) {
      if (reliable()) {
        ResponderError(kNakRemoteOperationalError, psn, WcStatus::kLocProtErr);
      } else {
        CompleteRecv(WcStatus::kLocProtErr, WcOpcode::kRecv, 0, 0, 0, false);
        Fail(QpEvent::kFatal);
      }
      return false;
    }
    std::memcpy(r.host, src, n);
    src += n;
    left -= n;
    skip = 0;
  }
  if (left > 0) {
    // Message longer than the posted buffers (9.7.5.2.4 / 10.8.3.4).
    if (reliable()) {
      ResponderError(kNakInvalidRequest, psn, WcStatus::kLocLenErr);
    } else {
      CompleteRecv(WcStatus::kLocLenErr, WcOpcode::kRecv, 0, 0, 0, false);
      Fail(QpEvent::kFatal);
    }
    return false;
  }
  return true;
}

// Unreliable Connection responder (9.8.3): no ACKs, NAKs or RNR. A PSN gap,
// a missing receive or an access violation drops the rest of the message;
// the next FIRST/ONLY resynchronises.
void RcQp::OnUcRequest(const uint8_t* frame, const ParsedPacket& p) {
  const uint8_t* bth_p = frame + p.bth_offset;
  const BthView bth(bth_p);
  const uint32_t psn = bth.psn();
  const OpcodeInfo& op = p.op();
  if (op.transport != Transport::kUc) {
    ++counters_.dropped_wrong_state;
    return;
  }
  const bool first = op.roles & kRoleFirst;
  const bool last = op.roles & kRoleLast;
  const bool is_send = op.roles & kRoleSend;
  auto drop_message = [&] {
    ++counters_.uc_messages_dropped;
    in_message_ = InMessage::kNone;
    recv_offset_ = 0;  // a held receive WQE is reused by the next message
  };
  if (psn != epsn_) {
    ++counters_.out_of_sequence;
    if (in_message_ != InMessage::kNone) drop_message();
    if (!first) {
      epsn_ = PsnAdd(psn, 1);
      return;
    }
  }
  epsn_ = PsnAdd(psn, 1);
  if (first && in_message_ != InMessage::kNone) drop_message();  // previous one never finished
  if (!first && in_message_ == InMessage::kNone) return;          // tail of a dropped message
  const uint32_t len = p.payload_len;
  if (last ? len > mtu_ : len != mtu_) {
    drop_message();
    return;
  }
  const uint8_t* payload = frame + p.payload_offset;
  if (is_send) {
    if (first) {
      if (!TakeRecvWqe()) {
        ++counters_.uc_messages_dropped;  // no receive posted: the message is lost
        return;
      }
      recv_offset_ = 0;
      in_message_ = InMessage::kSend;
    }
    if (!PlaceSendPayload(payload, len, psn)) return;
    recv_offset_ += len;
    if (last) {
      const bool imm = op.Has(kHdrImmDt);
      CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecv, recv_offset_, imm ? queue::kWcWithImm : 0,
                   imm ? ImmDtView(bth_p + op.immdt_offset).wire_order() : 0, bth.solicited());
      in_message_ = InMessage::kNone;
    }
    return;
  }
  // RDMA WRITE.
  if (first) {
    const RethView reth(bth_p + op.reth_offset);
    if (reth.dma_length() > kMaxMessageBytes) {
      drop_message();
      return;
    }
    const auto r = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(), mem::kRemoteWrite);
    if (r.result != mem::AccessResult::kOk) {
      drop_message();
      return;
    }
    write_host_ = r.host;
    write_rkey_ = reth.rkey();
    write_epoch_ = env_.mrs->epoch();
    write_total_ = write_remaining_ = reth.dma_length();
    in_message_ = InMessage::kWrite;
  }
  if (len > write_remaining_ || (last && len != write_remaining_) ||
      !MrStillLentSince(write_rkey_, &write_epoch_)) {
    drop_message();
    return;
  }
  if (last && op.Has(kHdrImmDt) && !TakeRecvWqe()) {
    drop_message();
    return;
  }
  if (len > 0) std::memcpy(write_host_ + (write_total_ - write_remaining_), payload, len);
  write_remaining_ -= len;
  if (last) {
    if (op.Has(kHdrImmDt)) {
      CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, write_total_, queue::kWcWithImm,
                   ImmDtView(bth_p + op.immdt_offset).wire_order(), bth.solicited());
    }
    in_message_ = InMessage::kNone;
  }
}

bool RcQp::OnUnverifiedPacket(const uint8_t* frame, const ParsedPacket& p, uint64_t now_ns) {
  const uint32_t len = p.payload_len;
  // Place while verifying only where the destination follows from verified
  // state alone: the WRITE in progress (its RETH was checked on a verified
  // FIRST), at the expected PSN, inside what that WRITE has left. Anything
  // else is verified first and takes the ordinary path.
  const bool in_place = VerifiesWhilePlacing(p) && reliable() && state_ != QpState::kReset &&
                        state_ != QpState::kInit && state_ != QpState::kErr &&
                        in_message_ == InMessage::kWrite && len == mtu_ &&
                        len <= write_remaining_ && BthView(frame + p.bth_offset).psn() == epsn_ &&
                        MrStillLentSince(write_rkey_, &write_epoch_);
  if (!in_place) {
    if (!VerifyIcrc(frame, p)) return false;
    OnPacket(frame, p, now_ns);
    return true;
  }
  const uint8_t* l3 = frame + p.l3_offset;
  const uint8_t* payload = frame + p.payload_offset;
  uint32_t crc = IcrcBegin(l3, p.payload_offset - p.l3_offset, p.ipv6);
  crc = Crc32CopyUpdate(crc, write_host_ + (write_total_ - write_remaining_), payload, len);
  crc = Crc32Update(crc, payload + len, p.icrc_offset - p.payload_offset - len);  // pad
  if (Crc32Final(crc) != StoredIcrc(frame, p)) return false;  // silently dropped, state untouched
  ++counters_.rx_packets;
  counters_.rx_bytes += p.payload_len;
  OnRequest(frame, p, now_ns, /*payload_placed=*/true);
  return true;
}

void RcQp::OnRequest(const uint8_t* frame, const ParsedPacket& p, uint64_t now,
                     bool payload_placed) {
  (void)now;
  const uint8_t* bth_p = frame + p.bth_offset;
  const BthView bth(bth_p);
  const uint32_t psn = bth.psn();
  const OpcodeInfo& op = p.op();

  const int32_t ahead = PsnDiff(psn, epsn_);
  if (ahead > 0) {
    // Out of sequence: one NAK until the expected PSN arrives (9.7.5.1.2).
    ++counters_.out_of_sequence;
    if (!nak_seq_sent_) {
      nak_seq_sent_ = true;
      ++counters_.seq_naks_sent;
      ++counters_.naks_sent;
      QueueNak(MakeSyndrome(AethType::kNak, kNakPsnSequenceError), epsn_);
    }
    return;
  }
  if (ahead < 0) {
    ++counters_.duplicates_received;
    OnDuplicateRequest(frame, p);
    return;
  }
  nak_seq_sent_ = false;

  const bool first = op.roles & kRoleFirst;
  const bool last = op.roles & kRoleLast;
  const bool is_send = op.roles & kRoleSend;
  const bool is_write = op.roles & kRoleWrite;
  // Opcode sequence (9.7.5.1.3): MIDDLE/LAST continue the message in progress.
  const bool sequence_ok = in_message_ == InMessage::kNone
                               ? (first || !(is_send || is_write))
                               : (!first && ((in_message_ == InMessage::kSend && is_send) ||
                                             (in_message_ == InMessage::kWrite && is_write)));
  if (!sequence_ok) {
    ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
    return;
  }
  const uint32_t len = p.payload_len;
  if (is_send || is_write) {
    const bool length_ok = last ? (len <= mtu_ && (first || len > 0)) : len == mtu_;
    if (!length_ok) {
      ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
      return;
    }
  }
  const uint8_t* payload = frame + p.payload_offset;

  if (is_send) {
    if (!TakeRecvWqe()) {
      // No receive posted: RNR NAK; the PSN is not consumed (9.7.5.2.8).
      ++counters_.rnr_naks_sent;
      QueueNak(MakeSyndrome(AethType::kRnrNak, attr_.min_rnr_timer), psn);
      return;
    }
    in_message_ = InMessage::kSend;
    if (!PlaceSendPayload(payload, len, psn)) return;
    recv_offset_ += len;
    if (last) {
      uint8_t flags = 0;
      uint32_t value = 0;
      if (op.Has(kHdrImmDt)) {
        flags = queue::kWcWithImm;
        value = ImmDtView(bth_p + op.immdt_offset).wire_order();
      } else if (op.Has(kHdrIeth)) {
        value = IethView(bth_p + op.ieth_offset).value();
        // Remote invalidation (IBTA 10.6.7, as rxe): only a type-2 window
        // of this PD bound through this QP; any other key (a region, the
        // program's receive buffer) is refused and stays as it was.
        if (env_.mrs->RemoteInvalidate(value, env_.pd, qpn_) != mem::AccessResult::kOk) {
          ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
          return;
        }
        flags = queue::kWcWithInv;
      }
      CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecv, recv_offset_, flags, value,
                   bth.solicited());
      in_message_ = InMessage::kNone;
      msn_ = PsnAdd(msn_, 1);
    }
  } else if (is_write) {
    // WRITE with immediate consumes a receive WQE: check before touching memory.
    if (last && op.Has(kHdrImmDt) && !TakeRecvWqe()) {
      ++counters_.rnr_naks_sent;
      QueueNak(MakeSyndrome(AethType::kRnrNak, attr_.min_rnr_timer), psn);
      return;
    }
    if (first) {
      const RethView reth(bth_p + op.reth_offset);
      if (reth.dma_length() > kMaxMessageBytes) {  // checked before the R_Key, as rxe's check_length
        ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
        return;
      }
      const auto r = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(), mem::kRemoteWrite);
      if (r.result != mem::AccessResult::kOk) {
        ResponderError(kNakRemoteAccessError, psn, WcStatus::kRemAccessErr);
        return;
      }
      write_host_ = r.host;
      write_rkey_ = reth.rkey();
      write_epoch_ = env_.mrs->epoch();
      write_total_ = write_remaining_ = reth.dma_length();
      in_message_ = InMessage::kWrite;
    }
    if (len > write_remaining_ || (last && len != write_remaining_)) {
      // More (or less) data than the RETH announced.
      ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
      return;
    }
    if (!first && !MrStillLentSince(write_rkey_, &write_epoch_)) {
      ResponderError(kNakRemoteAccessError, psn, WcStatus::kRemAccessErr);
      return;
    }
    if (len > 0 && !payload_placed) {
      std::memcpy(write_host_ + (write_total_ - write_remaining_), payload, len);
    }
    write_remaining_ -= len;
    if (last) {
      if (op.Has(kHdrImmDt)) {
        CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, write_total_,
                     queue::kWcWithImm, ImmDtView(bth_p + op.immdt_offset).wire_order(),
                     bth.solicited());
      }
      in_message_ = InMessage::kNone;
      msn_ = PsnAdd(msn_, 1);
    }
  } else if (p.opcode == kRcReadRequest) {
    const RethView reth(bth_p + op.reth_offset);
    if (!RdAtomicResourceFree(psn)) return;
    if (reth.dma_length() > kMaxMessageBytes) {
      ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
      return;
    }
    const auto r = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(), mem::kRemoteRead);
    if (r.result != mem::AccessResult::kOk) {
      ResponderError(kNakRemoteAccessError, psn, WcStatus::kRemAccessErr);
      return;
    }
    if (actions_.full()) return;  // more READs than negotiated: the requester retries
    const uint32_t packets = PacketsForLength(reth.dma_length());
    msn_ = PsnAdd(msn_, 1);
    Resource& res = resources_[next_resource_++ % resources_.size()];
    res = Resource{true, false, psn, PsnAdd(psn, packets - 1), 0, reth.va(), reth.dma_length(), reth.rkey()};
    Action* a = actions_.Reserve();
    *a = Action{};
    a->holds_resource = true;
    ++rd_atomic_active_;
    a->kind = ActionKind::kReadResponse;
    a->psn = psn;
    a->msn = msn_;
    a->host = r.host;
    a->rkey = reth.rkey();
    a->epoch = env_.mrs->epoch();
    a->length = reth.dma_length();
    actions_.Commit();
    epsn_ = PsnAdd(psn, packets);
    return;
  } else if (op.roles & kRoleAtomic) {
    const AtomicEthView at(bth_p + op.atomic_offset);
    if (!RdAtomicResourceFree(psn)) return;
    const auto r = CheckRkey(at.rkey(), at.va(), 8, mem::kRemoteAtomic);
    if (r.result != mem::AccessResult::kOk) {
      ResponderError(kNakRemoteAccessError, psn, WcStatus::kRemAccessErr);
      return;
    }
    if (at.va() % 8 != 0) {
      ResponderError(kNakInvalidRequest, psn, WcStatus::kRemInvReqErr);
      return;
    }
    if (actions_.full()) return;
    auto* target = reinterpret_cast<uint64_t*>(r.host);
    uint64_t original;
    if (p.opcode == kRcCompareSwap) {
      original = at.compare();
      // On failure `original` receives the current value; either way it is the old value.
      __atomic_compare_exchange_n(target, &original, at.swap_add(), false, __ATOMIC_SEQ_CST,
                                  __ATOMIC_SEQ_CST);
    } else {
      original = __atomic_fetch_add(target, at.swap_add(), __ATOMIC_SEQ_CST);
    }
    msn_ = PsnAdd(msn_, 1);
    Resource& res = resources_[next_resource_++ % resources_.size()];
    res = Resource{true, true, psn, psn, original};
    Action* a = actions_.Reserve();
    *a = Action{};
    a->holds_resource = true;
    ++rd_atomic_active_;
    a->kind = ActionKind::kAtomicAck;
    a->psn = psn;
    a->msn = msn_;
    a->original = original;
    actions_.Commit();
    epsn_ = PsnAdd(psn, 1);
    return;
  }
  epsn_ = PsnAdd(psn, 1);
  if (bth.ack_req()) QueueAck(psn);
}

void RcQp::OnDuplicateRequest(const uint8_t* frame, const ParsedPacket& p) {
  const uint8_t* bth_p = frame + p.bth_offset;
  const uint32_t psn = BthView(bth_p).psn();
  const OpcodeInfo& op = p.op();
  if (p.opcode == kRcReadRequest || (op.roles & kRoleAtomic)) {
    for (const Resource& res : resources_) {
      if (!res.valid || PsnLess(psn, res.first_psn) || PsnLess(res.last_psn, psn)) continue;
      if (res.atomic != ((op.roles & kRoleAtomic) != 0)) return;
      Action a{};
      a.psn = psn;
      a.msn = msn_;
      if (res.atomic) {
        if (psn != res.first_psn) return;
        a.kind = ActionKind::kAtomicAck;  // replay, never re-execute
        a.original = res.original;
      } else {
        // Re-execute the (possibly partial) READ the duplicate asks for: the
        // original or a part of it, with its R_Key, answered within the
        // original's PSNs; anything else is dropped (rxe's duplicate_request).
        const RethView reth(bth_p + op.reth_offset);
        const uint64_t skip = reth.va() - res.va;
        const bool inside = reth.rkey() == res.rkey && reth.va() >= res.va && skip <= res.length &&
                            reth.dma_length() <= res.length - skip &&
                            PacketsForLength(reth.dma_length()) <=
                                static_cast<uint32_t>(PsnDiff(res.last_psn, psn)) + 1;
        if (!inside) {
          ++counters_.dropped_bad_duplicates;
          return;
        }
        const auto r = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(), mem::kRemoteRead);
        if (r.result != mem::AccessResult::kOk) return;
        a.kind = ActionKind::kReadResponse;
        a.host = r.host;
        a.rkey = reth.rkey();
        a.epoch = env_.mrs->epoch();
        a.length = reth.dma_length();
        // A stream for the same READ still queued restarts here instead of
        // running to its end beside a second copy.
        for (uint32_t i = actions_.head(); i != actions_.tail(); ++i) {
          Action& q = actions_.at(i);
          if (q.kind == ActionKind::kReadResponse && !PsnLess(q.psn, res.first_psn) &&
              !PsnLess(res.last_psn, q.psn)) {
            a.holds_resource = q.holds_resource;
            q = a;
            return;
          }
        }
      }
      actions_.Push(a);
      return;
    }
    return;  // too old to be in the cache: ignore (9.7.5.1.2)
  }
  // Duplicate SEND/WRITE: acknowledge what we have (the latest PSN). The
  // ACK is counted when it is sent (BuildResponse), like every other.
  QueueAck(PsnAdd(epsn_, -1));
}

uint32_t RcQp::BuildResponse(Action& a, uint8_t* frame, bool* finished) {
  uint8_t* ext;
  const uint32_t bth_off = WriteHeaders(frame, 0, a.psn, false, false, &ext);
  uint8_t* bth_p = frame + bth_off;
  BthWriter bth(bth_p);
  *finished = true;
  switch (a.kind) {
    case ActionKind::kAck:
    case ActionKind::kNak: {
      bth.set_opcode(kRcAcknowledge);
      AethWriter aeth(ext);
      aeth.set_syndrome(a.kind == ActionKind::kAck ? MakeSyndrome(AethType::kAck, CreditsField())
                                                   : a.syndrome);
      aeth.set_msn(a.msn);
      if (a.kind == ActionKind::kAck) ++counters_.acks_sent;
      return SealFrame(frame, route_, kBthBytes + kAethBytes);
    }
    case ActionKind::kAtomicAck: {
      bth.set_opcode(kRcAtomicAcknowledge);
      AethWriter aeth(ext);
      aeth.set_syndrome(MakeSyndrome(AethType::kAck, CreditsField()));
      aeth.set_msn(a.msn);
      AtomicAckEthWriter(ext + kAethBytes).set_original(a.original);
      return SealFrame(frame, route_, kBthBytes + kAethBytes + kAtomicAckEthBytes);
    }
    case ActionKind::kReadResponse: {
      if (a.offset > 0 && !MrStillLentSince(a.rkey, &a.epoch)) {
        // Deregistered mid-READ: end the stream with a NAK (remote access
        // error) at the next response PSN instead of reading on.
        ++counters_.naks_sent;
        bth.set_opcode(kRcAcknowledge);
        bth.set_psn(PsnAdd(a.psn, a.offset / mtu_));
        AethWriter aeth(ext);
        aeth.set_syndrome(MakeSyndrome(AethType::kNak, kNakRemoteAccessError));
        aeth.set_msn(a.msn);
        return SealFrame(frame, route_, kBthBytes + kAethBytes);
      }
      const uint32_t seg = std::min(mtu_, a.length - a.offset);
      const bool first = a.offset == 0;
      const bool last = a.offset + seg == a.length;
      const uint8_t opcode = first ? (last ? kRcReadResponseOnly : kRcReadResponseFirst)
                                   : (last ? kRcReadResponseLast : kRcReadResponseMiddle);
      const OpcodeInfo& op = OpInfo(opcode);
      bth.set_opcode(opcode);
      bth.set_psn(PsnAdd(a.psn, a.offset / mtu_));
      if (op.Has(kHdrAeth)) {
        AethWriter aeth(bth_p + op.aeth_offset);
        aeth.set_syndrome(MakeSyndrome(AethType::kAck, CreditsField()));
        aeth.set_msn(a.msn);
      }
      uint8_t* payload = bth_p + op.header_bytes;
      const uint8_t* src = a.host + a.offset;
      a.offset += seg;
      *finished = last;
      if (seg < kFusedGatherMin) {
        if (seg > 0) std::memcpy(payload, src, seg);
        return SealFrame(frame, route_, op.header_bytes + seg);
      }
      // Copied from the MR and CRCed in one pass.
      const uint32_t icrc_offset = FinishHeaders(frame, route_, op.header_bytes + seg);
      const uint8_t* l3 = frame + route_.l3_offset;
      uint32_t crc = IcrcBegin(l3, static_cast<uint32_t>(payload - l3), route_.ipv6);
      crc = Crc32CopyUpdate(crc, payload, src, seg);
      crc = Crc32Update(crc, payload + seg, frame + icrc_offset - (payload + seg));  // pad
      StoreLe32(frame + icrc_offset, Crc32Final(crc));
      return icrc_offset + kIcrcBytes;
    }
  }
  return 0;
}

}  // namespace droce::transport
