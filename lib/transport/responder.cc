// Responder (IBTA 9.7.5 RC, 9.8.3 UC) as a state machine in rxe's manner
// (rxe_resp.c): OnRequest runs the RespState steps of transport/states.h,
// each a function returning the next state; every failure is a RespError
// whose NAK, completion status, event and counter come from one table
// (kRespErrors). RC and UC share the pipeline: the reliable flag chooses a
// NAK or a silent drop. doc/transport.md draws it.
#include <algorithm>
#include <cstring>

#include "wire/icrc.h"
#include "transport/qp.h"
#include "transport/sr/selective_repeat.h"
#include "transport/step_contexts.h"
#include "wire/psn.h"
#include "wire/short_copy.h"

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


uint8_t Qp::CreditsField() const {
  if (env_.srq != nullptr) return kAethCreditsInvalid;  // no per-QP credits with an SRQ
  const uint32_t available = rq_.size() + rq_.published();  // published without the device lock too
  uint8_t code = 0;
  while (code < 30 && kCreditCounts[code + 1] <= available) ++code;
  return code;
}

// Coalesce: a queued, unsent ACK just moves forward (9.7.5.1.1). Otherwise
// the ACK takes a slot, which every other response leaves it
// (ResponseRoom): the queue is full only with an ACK or SACK at its tail.
void Qp::QueueAck(uint32_t psn) {
  resp_.ack_owed = false;
  if (!actions_.empty()) {
    Action& last = actions_.at(actions_.tail() - 1);
    if (last.kind == ActionKind::kAck) {
      last.psn = psn;
      last.msn = resp_.msn;
      return;
    }
  }
  Action* a = actions_.Reserve();
  if (a == nullptr) return;  // full with a SACK at its tail: built when it leaves, it acknowledges this too
  *a = Action{};
  a->kind = ActionKind::kAck;
  a->psn = psn;
  a->msn = resp_.msn;
  actions_.Commit();
}

bool Qp::PushResponse(const Action& a) {
  if (!ResponseRoom()) {
    ++counters_.responses_refused;
    return false;
  }
  actions_.Push(a);
  return true;
}

void Qp::QueueNak(uint8_t syndrome, uint32_t psn) {
  resp_.ack_owed = false;  // a NAK acknowledges what came before its PSN
  Action a{};
  a.kind = ActionKind::kNak;
  a.syndrome = syndrome;
  a.psn = psn;
  a.msn = resp_.msn;
  // Refused: what came before its PSN is acknowledged all the same (the
  // ACK's slot is free), and the requester's timer recovers the rest.
  if (!PushResponse(a)) QueueAck(PsnAdd(psn, -1));
}

bool Qp::TakeRecvWqe() {
  if (resp_.recv_wqe_held) return true;
  // Taken by selective repeat before a fallback to go-back-N: those first, in posting order.
  if (!sr_chosen_ || !sr_chosen_->TakeHeldRecv(&resp_.recv_wqe)) {
    if (env_.srq == nullptr) TakePostedRecvs();  // posted without the device lock: they count now
    queue::Ring<RecvWr, true>& ring = env_.srq != nullptr ? env_.srq->ring() : rq_;
    if (ring.empty()) return false;
    resp_.recv_wqe = ring.front();
    ring.Pop();
  }
  resp_.recv_wqe_held = true;
  resp_.recv_offset = 0;
  return true;
}

void Qp::CompleteRecv(WcStatus status, WcOpcode opcode, uint32_t byte_len, uint8_t flags,
                        uint32_t imm_or_inv, bool solicited) {
  queue::Completion c;
  c.wr_id = resp_.recv_wqe.wr_id;
  c.status = status;
  c.opcode = opcode;
  c.byte_len = byte_len;
  c.flags = flags | (solicited ? queue::CompletionQueue::kWcSolicited : 0);
  c.imm_or_inv = imm_or_inv;
  c.qp_num = qpn_;
  c.src_qp = attr_.dest_qp_num;
  resp_.recv_wqe_held = false;
  env_.recv_cq->Push(c);
}

// UC (9.8.3): the rest of the message is dropped; the next FIRST/ONLY
// resynchronises, reusing a held receive WQE.
void Qp::DropUcMessage() {
  ++counters_.uc_messages_dropped;
  resp_.in_message = InMessage::kNone;
  resp_.recv_offset = 0;
}

// The error state, read from kRespErrors.
void Qp::RespondError(RespError e, uint32_t psn) {
  const RespErrorInfo& info = Info(e);
  if (!reliable()) {
    if (!info.receive_fault) {
      DropUcMessage();
      return;
    }
    CompleteRecv(info.recv_status, WcOpcode::kRecv, 0, 0, 0, false);
    Fail(QpEvent::kFatal);
    return;
  }
  if (info.counter != nullptr) ++(counters_.*info.counter);
  if (info.nak_type == AethType::kRnrNak) {
    // The PSN is not consumed (9.7.5.2.8): the requester resends it.
    QueueNak(MakeSyndrome(AethType::kRnrNak, attr_.min_rnr_timer), psn);
    return;
  }
  ++counters_.naks_sent;
  QueueNak(MakeSyndrome(AethType::kNak, info.nak_code), psn);
  if (!info.fatal) return;
  if (resp_.recv_wqe_held) CompleteRecv(info.recv_status, WcOpcode::kRecv, 0, 0, 0, false);
  // Class C/D errors move the responder to ERR after the NAK (9.9.3.1) and
  // raise the affiliated asynchronous error of their kind (C9-222.1.1, 11.6.3.1).
  Fail(info.event);
}

// Scatters `len` bytes at byte `offset` of a receive WQE's buffers.
bool Qp::PlaceIntoRecv(mem::MrTable& mrs, uint32_t pd, const RecvWr& wr, uint32_t offset,
                   const uint8_t* payload, uint32_t len, RespError* error, ResolvedRegion* learnt) {
  uint32_t skip = offset, left = len;
  const uint8_t* src = payload;
  for (uint32_t i = 0; i < wr.num_sge && left > 0; ++i) {
    const Sge& sge = wr.sg_list[i];
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    const uint32_t n = std::min(left, sge.length - skip);
    const auto r = mrs.CheckLocal(sge.lkey, pd, sge.addr + skip, n, true);
    if (r.result != mem::AccessResult::kOk) {
      *error = RespError::kRecvNotWritable;
      return false;
    }
    std::memcpy(r.host, src, n);
    if (learnt != nullptr) {
      const mem::MemoryRegion* mr = mrs.Find(sge.lkey);
      if (mr != nullptr) *learnt = {mr->host, mr->iova, mr->length, mrs.epoch(), sge.lkey, true};
    }
    src += n;
    left -= n;
    skip = 0;
  }
  if (left > 0) {
    *error = RespError::kRecvTooSmall;  // longer than the posted buffers (9.7.5.2.4 / 10.8.3.4)
    return false;
  }
  return true;
}

bool Qp::PlaceSendPayload(const uint8_t* payload, uint32_t len, RespError* error) {
  return PlaceIntoRecv(*env_.mrs, env_.pd, resp_.recv_wqe, resp_.recv_offset, payload, len, error,
                       &resp_.recv_local);
}

uint8_t* Qp::RecvDestination(const RecvWr& wr, uint32_t offset, uint32_t len) const {
  uint32_t skip = offset;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    const Sge& sge = wr.sg_list[i];
    if (skip >= sge.length) {
      skip -= sge.length;
      continue;
    }
    if (len > sge.length - skip) return nullptr;  // across SGEs, or past the last
    const ResolvedRegion& r = resp_.recv_local;
    const uint64_t addr = sge.addr + skip;
    return r.Holds(sge.lkey, env_.mrs->epoch(), addr, len) ? r.HostAt(addr) : nullptr;
  }
  return nullptr;
}

const RecvWr* Qp::NextRecvWqe() {
  if (resp_.recv_wqe_held) return &resp_.recv_wqe;
  if (sr_chosen_ != nullptr) return nullptr;  // it may hold receives taken first
  if (env_.srq == nullptr) TakePostedRecvs();  // as TakeRecvWqe: posted without the device lock
  queue::Ring<RecvWr, true>& ring = env_.srq != nullptr ? env_.srq->ring() : rq_;
  return ring.empty() ? nullptr : &ring.front();
}

// A posted receive buffer is written once per use, a full ring of them
// later (UCX posts 4,095 of 8 KiB: 32 MiB): it has left the caches, and a
// copy into it waits on a read for ownership per line. A NIC's DMA writes
// memory without the CPU waiting; here the next buffer is fetched while the
// current message is placed and the next one travels, so its copy finds
// the lines in cache (doc/transport.md "ICRC and placement"). Each packet
// fetches the bytes it covers itself, one buffer on: the fetches of a
// message are spread over its packets instead of queued all at its first.
uint32_t Qp::WarmNextRecv(uint32_t offset, uint32_t len) {
  const queue::Ring<RecvWr, true>& ring = env_.srq != nullptr ? env_.srq->ring() : rq_;
  if (ring.empty() || offset >= kRecvWarmMax) return 0;
  const RecvWr& next = ring.at(ring.head());
  if (next.num_sge == 0) return 0;
  const Sge& sge = next.sg_list[0];
  if (offset >= sge.length) return 0;
  const ResolvedRegion& r = resp_.recv_local;
  // Its start inside the region, or at its end (then n is 0): a zero-length
  // bound is one comparison; the range is cut to the region below.
  if (!r.Holds(sge.lkey, env_.mrs->epoch(), sge.addr, 0)) return 0;
  const uint64_t in_region = r.length - (sge.addr - r.iova);
  if (offset >= in_region) return 0;
  const uint8_t* p = r.HostAt(sge.addr) + offset;
  const uint32_t n = static_cast<uint32_t>(
      std::min<uint64_t>({len, kRecvWarmMax - offset, sge.length - offset, in_region - offset}));
  // Line by line from the range's start; the last line the range touches
  // included. Into the L2 (locality 2: prefetcht1 on x86), not the L1: the
  // lines wait a message for their copy, and the L1 is what this message's
  // copies run through (tools/bench/stacks/results.md, stacks30).
  const uint8_t* end = p + n;
#pragma GCC unroll 8
  for (const uint8_t* q = p; q < end; q += 64) __builtin_prefetch(q, 1, 2);
  if (n > 0) __builtin_prefetch(end - 1, 1, 2);
  counters_.recv_warm_bytes += n;
  return n;
}

Qp::Unverified Qp::OnUnverifiedPacket(const uint8_t* frame, const uint8_t* lent, const ParsedPacket& p,
                                      uint64_t now_ns, bool trusted) {
  const uint32_t len = p.payload_len;
  const uint32_t psn = BthView(frame + p.bth_offset).psn();
  // Place while verifying only where the destination follows from verified
  // state alone: the WRITE in progress (its RETH was checked on a verified
  // FIRST), at the expected PSN, inside what that WRITE has left; a SEND,
  // into the receive WQE it continues or would take (left in place until
  // the check passed), through the region the last receive's L_Key
  // resolved to; or the READ whose responses arrive, at the offset its
  // accepted responses reached (ReadAwaitingResponse). Anything else is
  // verified first and takes the ordinary path.
  uint8_t* dst = nullptr;
  SendWqe* read = nullptr;
  const bool usable = reliable() && state_ != QpState::kReset && state_ != QpState::kInit && state_ != QpState::kErr;
  if (uint32_t{p.opcode} - kRcReadResponseFirst <= uint32_t{kRcReadResponseLast - kRcReadResponseFirst}) {
    if (usable) read = ReadAwaitingResponse(p.opcode, psn, len);  // which checks the length
  } else {
    const bool ends_message = p.opcode == kRcSendLast || p.opcode == kRcSendOnly;  // 1 byte up to the MTU
    const bool starts_message = p.opcode == kRcSendFirst || p.opcode == kRcSendOnly;
    if (!usable || !(ends_message ? len - 1 < mtu_ : len == mtu_) || psn != resp_.epsn || sr_ != nullptr) {
      // not the request expected, or selective repeat's responder (which
      // takes every request, OnPacket's way): the ordinary path
    } else if (p.opcode == kRcWriteMiddle) {
      if (resp_.in_message == InMessage::kWrite && len <= resp_.write_remaining &&
          MrStillLentSince(resp_.write_rkey, &resp_.write_epoch)) {
        dst = resp_.write_host + (resp_.write_total - resp_.write_remaining);
      }
    } else if (starts_message) {
      const RecvWr* next = resp_.in_message == InMessage::kNone ? NextRecvWqe() : nullptr;
      if (next != nullptr) dst = RecvDestination(*next, 0, len);
    } else if (resp_.in_message == InMessage::kSend && resp_.recv_wqe_held) {
      dst = RecvDestination(len);
    }
  }
  if (dst == nullptr && read == nullptr) {
    if (lent != nullptr) return Unverified::kWantsWhole;
    if (!IcrcMatches(frame, p)) return Unverified::kBadIcrc;
    OnPacket(frame, p, now_ns);
    return Unverified::kTaken;
  }
  // The headers from `frame` (private); what follows them from where it is.
  const uint8_t* body = lent != nullptr ? lent : frame;
  const uint8_t* payload = body + p.payload_offset;
  if (trusted) {
    // Placed by a plain copy, not checked: the destination came from
    // verified state above, so a byte the sender changes meanwhile lands
    // where that byte of this message belongs, as the sender could have
    // sent it anyway.
    if (read != nullptr) {
      ScatterToSges(*read, Ext(*read).read_done_bytes, payload, len);
    } else {
      std::memcpy(dst, payload, len);
    }
  } else {
    const uint8_t* l3 = frame + p.l3_offset;
    uint32_t crc = IcrcBegin(l3, p.payload_offset - p.l3_offset, p.ipv6);
    if (read != nullptr) {
      crc = ScatterToSgesCrc(*read, Ext(*read).read_done_bytes, payload, len, crc, lent != nullptr);
    } else {
      crc = lent != nullptr ? Crc32CopyOnceUpdate(crc, dst, payload, len) : Crc32CopyUpdate(crc, dst, payload, len);
    }
    crc = Crc32Update(crc, payload + len, p.icrc_offset - p.payload_offset - len);  // pad
    if (Crc32Final(crc) != StoredIcrc(body, p)) return Unverified::kBadIcrc;  // silently dropped, state untouched
  }
  ++counters_.rx_packets;
  counters_.rx_bytes += p.payload_len;
  if (read != nullptr) {
    OnResponse(frame, p, now_ns, /*payload_placed=*/true);
  } else {
    OnRequest(frame, p, /*payload_placed=*/true);
  }
  return Unverified::kTaken;
}

// The IBTA responder's resource, R_Key and execute steps, for a READ or
// atomic request selective repeat takes at the expected PSN (sr/responder.cc).
RespState Qp::CheckAndExecute(ReqCtx& c) {
  RespState s = CheckResource(c);
  if (s == RespState::kCheckRkey) s = CheckRkeyStep(c);
  if (s == RespState::kExecute) s = Execute(c);
  return s;
}

// A short RC WRITE ONLY at the expected PSN (16-64 B, not yet placed, no
// INT records), as PlaceExpected would take it: RETH inside the region
// check_rkey resolved last (resp_.expected, MR table epoch unchanged), no
// message in progress. Placed and acknowledged here from the frame's fields
// in registers, with no call but QueueAck's as the last step: a small
// message's responder work without OnRequestSteps' context and stack frame.
// Anything else takes OnRequestSteps, whose PlaceExpected has no effect on a
// WRITE it refuses, so a request this path refuses is taken there as always.
void Qp::OnRequest(const uint8_t* frame, const ParsedPacket& p, bool payload_placed) {
  const uint8_t* bth_p = frame + p.bth_offset;
  const uint32_t len = p.payload_len;
  if (p.opcode == kRcWriteOnly && p.int_offset == 0 && !payload_placed && len - 16 <= 48 &&
      reliable() && resp_.in_message == InMessage::kNone) [[likely]] {
    const BthView bth(bth_p);
    const uint32_t psn = bth.psn();
    const ResolvedRegion& r = resp_.expected;
    const RethView reth(bth_p + kBthBytes);
    if (psn == resp_.epsn && reth.dma_length() == len && len <= mtu_ &&
        r.Holds(reth.rkey(), env_.mrs->epoch(), reth.va(), len)) [[likely]] {
      CopyShortPayload(r.HostAt(reth.va()), frame + p.payload_offset, len);
      resp_.msn = PsnAdd(resp_.msn, 1);
      AcceptExpected(psn, bth);
      return;
    }
  }
  OnRequestSteps(frame, p, payload_placed);
}

void Qp::OnRequestSteps(const uint8_t* frame, const ParsedPacket& p, bool payload_placed) {
  const uint8_t* bth_p = frame + p.bth_offset;
  ReqCtx c{frame, p, p.op(), bth_p, BthView(bth_p).psn(), p.payload_len, payload_placed};
  if (p.int_offset != 0) CcNoteInt(c);  // cc_hooks.cc: the switches' records, echoed in the next ACK
  // The states run in their order (RespState lists them so); a step that
  // returns a later state skips the ones between, kError or kDone ends the
  // request. Written as a chain rather than a switch in a loop: with the
  // steps inlined each test folds into a branch (the loop cost ~75
  // instructions per request in the engine benchmark).
  RespState s = PlaceExpected(c);
  if (s == RespState::kCheckPsn) s = CheckPsn(c);
  if (s == RespState::kCheckOpSequence) s = CheckOpSequence(c);
  if (s == RespState::kCheckLength) s = CheckLength(c);
  if (s == RespState::kCheckResource) s = CheckResource(c);
  if (s == RespState::kCheckRkey) s = CheckRkeyStep(c);
  if (s == RespState::kExecute) s = Execute(c);
  if (s == RespState::kAcknowledge) s = Acknowledge(c);
  if (s == RespState::kDuplicate) s = Duplicate(c);
  if (s == RespState::kError) {
    RespondError(c.error, c.error == RespError::kPsnSequence ? resp_.epsn : c.psn);
  }
}

// The request at psn accepted: the next PSN is expected, and the ACK is
// queued if the request asked for one (its BTH's AckReq), else owed
// (EnterError sends it). Takes no ReqCtx, so OnRequest's short WRITE, which
// has none, shares it. The BTH, not its AckReq bit: read after the stores
// above, as the bit is tested (a bool read first costs an instruction per
// request, the frame's bytes may alias the QP's fields).
[[gnu::always_inline]] inline void Qp::AcceptRequest(uint32_t psn, BthView bth) {
  resp_.epsn = PsnAdd(psn, 1);
  if (bth.ack_req()) {
    QueueAck(psn);
  } else {
    resp_.ack_owed = true;
  }
}

// The acknowledge step of a request header prediction took (PlaceExpected,
// or OnRequest's short WRITE).
[[gnu::always_inline]] inline void Qp::AcceptExpected(uint32_t psn, BthView bth) {
  ++counters_.expected_requests;
  resp_.nak_seq_sent = false;
  AcceptRequest(psn, bth);
}

[[gnu::always_inline]] inline RespState Qp::ExpectedAcknowledge(ReqCtx& c) {
  AcceptExpected(c.psn, BthView(c.bth_p));
  return RespState::kDone;
}

// The responder's header prediction (as Van Jacobson's TCP fast path): an
// RC WRITE at the expected PSN that continues the opcode sequence, without
// immediate data, whose RETH names the region check_rkey resolved last
// (resp_.expected, still valid) and lies inside it, or a MIDDLE/LAST of the
// WRITE in progress while nothing changed in the MR table since that
// region was resolved; or an RC SEND without immediate or invalidation
// whose bytes go inside one SGE of the receive WQE through the region the
// last receive scatter resolved (resp_.recv_local), is placed and
// acknowledged here with exactly the effects the full chain would have.
// Anything else - another opcode or PSN, a length or bound the chain would
// refuse, a key or epoch that differs, a zero-length request - goes to
// check_psn and takes every step of IBTA 9.7.5 as always.
DROCE_STEP RespState Qp::PlaceExpected(ReqCtx& c) {
  if (c.psn != resp_.epsn || !reliable() || c.len == 0) return RespState::kCheckPsn;
  const uint8_t opcode = c.p.opcode;
  const uint64_t epoch = env_.mrs->epoch();
  uint8_t* dst;
  if (opcode == kRcWriteOnly || opcode == kRcWriteFirst) {
    const ResolvedRegion& r = resp_.expected;
    const RethView reth(c.bth_p + kBthBytes);
    const uint32_t dma_length = reth.dma_length();
    const bool only = opcode == kRcWriteOnly;
    if (resp_.in_message != InMessage::kNone || !r.Holds(reth.rkey(), epoch, reth.va(), dma_length) ||
        (only ? (dma_length != c.len || c.len > mtu_) : (c.len != mtu_ || dma_length < c.len))) {
      return RespState::kCheckPsn;
    }
    dst = r.HostAt(reth.va());
    if (only) {
      resp_.msn = PsnAdd(resp_.msn, 1);
    } else {
      if (dma_length > kMaxMessageBytes) return RespState::kCheckPsn;
      resp_.write_host = dst;
      resp_.write_rkey = r.key;
      resp_.write_epoch = epoch;
      resp_.write_total = dma_length;
      resp_.write_remaining = dma_length - c.len;
      resp_.in_message = InMessage::kWrite;
    }
  } else if (opcode == kRcWriteMiddle || opcode == kRcWriteLast) {
    const bool last = opcode == kRcWriteLast;
    if (resp_.in_message != InMessage::kWrite || resp_.write_epoch != epoch || resp_.expected.epoch != epoch ||
        (last ? (c.len > mtu_ || c.len != resp_.write_remaining)
              : (c.len != mtu_ || c.len > resp_.write_remaining))) {
      return RespState::kCheckPsn;
    }
    dst = resp_.write_host + (resp_.write_total - resp_.write_remaining);
    resp_.write_remaining -= c.len;
    if (last) {
      resp_.in_message = InMessage::kNone;
      resp_.msn = PsnAdd(resp_.msn, 1);
    }
  } else if (opcode == kRcSendOnly || opcode == kRcSendFirst || opcode == kRcSendMiddle || opcode == kRcSendLast) {
    // A SEND without immediate or invalidation, into the receive WQE at
    // its running offset, inside one SGE whose L_Key resolved last to the
    // region it still names. The lengths are checked before a WQE is taken:
    // the chain refuses a bad length before check_resource takes one.
    const bool first = opcode == kRcSendOnly || opcode == kRcSendFirst;
    const bool last = opcode == kRcSendOnly || opcode == kRcSendLast;
    if ((first ? resp_.in_message != InMessage::kNone : resp_.in_message != InMessage::kSend) ||
        (last ? c.len > mtu_ : c.len != mtu_)) {
      return RespState::kCheckPsn;
    }
    if (first) {
      if (!TakeRecvWqe()) return RespState::kCheckPsn;  // RNR: the chain's NAK
      resp_.recv_offset = 0;
    } else if (!resp_.recv_wqe_held) {
      return RespState::kCheckPsn;
    }
    // The next message likely looks like this one: this packet's bytes of
    // the next WQE's buffer.
    WarmNextRecv(resp_.recv_offset, c.len);
    dst = RecvDestination(c.len);
    if (dst == nullptr) return RespState::kCheckPsn;  // the full scatter and its checks
    if (!c.payload_placed) CopyShortPayload(dst, c.frame + c.p.payload_offset, c.len);
    resp_.recv_offset += c.len;
    if (last) {
      CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecv, resp_.recv_offset, 0, 0, BthView(c.bth_p).solicited());
      resp_.in_message = InMessage::kNone;
      resp_.msn = PsnAdd(resp_.msn, 1);
    } else {
      resp_.in_message = InMessage::kSend;
    }
    return ExpectedAcknowledge(c);
  } else {
    return RespState::kCheckPsn;
  }
  if (!c.payload_placed) CopyShortPayload(dst, c.frame + c.p.payload_offset, c.len);
  return ExpectedAcknowledge(c);
}


DROCE_STEP RespState Qp::CheckPsn(ReqCtx& c) {
  if (!reliable()) {
    // UC (9.8.3): a gap drops the message in progress; a MIDDLE/LAST after
    // it is skipped, a FIRST/ONLY starts afresh.
    if (c.psn != resp_.epsn) {
      ++counters_.out_of_sequence;
      if (resp_.in_message != InMessage::kNone) DropUcMessage();
      if (!c.first()) {
        resp_.epsn = PsnAdd(c.psn, 1);
        return RespState::kDone;
      }
    }
    resp_.epsn = PsnAdd(c.psn, 1);
    return RespState::kCheckOpSequence;
  }
  const int32_t ahead = PsnDiff(c.psn, resp_.epsn);
  if (ahead > 0) {
    // Out of sequence: one NAK until the expected PSN arrives (9.7.5.1.2).
    ++counters_.out_of_sequence;
    if (resp_.nak_seq_sent) return RespState::kDone;
    resp_.nak_seq_sent = true;
    return c.Fail(RespError::kPsnSequence);
  }
  if (ahead < 0) {
    ++counters_.duplicates_received;
    return RespState::kDuplicate;
  }
  resp_.nak_seq_sent = false;
  return RespState::kCheckOpSequence;
}

// Opcode sequence (9.7.5.1.3): MIDDLE/LAST continue the message in progress.
DROCE_STEP RespState Qp::CheckOpSequence(ReqCtx& c) {
  const bool first = c.first();
  if (!reliable()) {
    if (first && resp_.in_message != InMessage::kNone) DropUcMessage();  // the previous one never finished
    if (!first && resp_.in_message == InMessage::kNone) return RespState::kDone;  // tail of a dropped one
    return RespState::kCheckLength;
  }
  const bool send = c.is_send(), write = c.is_write();
  const bool ok = resp_.in_message == InMessage::kNone
                      ? (first || !(send || write))
                      : (!first && ((resp_.in_message == InMessage::kSend && send) ||
                                    (resp_.in_message == InMessage::kWrite && write)));
  return ok ? RespState::kCheckLength : c.Fail(RespError::kOpcodeSequence);
}

// FIRST and MIDDLE carry exactly one MTU, LAST and ONLY up to one; an RC
// LAST that is not also FIRST carries at least one byte.
DROCE_STEP RespState Qp::CheckLength(ReqCtx& c) {
  if (!(c.op.roles & kRolePayload)) return RespState::kCheckResource;
  const bool ok = c.last() ? (c.len <= mtu_ && (c.first() || c.len > 0 || !reliable()))
                           : c.len == mtu_;
  return ok ? RespState::kCheckResource : c.Fail(RespError::kLength);
}

// A receive WQE for what consumes one (checked before any memory is
// touched), a responder resource for a new READ or atomic (max_dest_rd_atomic).
DROCE_STEP RespState Qp::CheckResource(ReqCtx& c) {
  if (c.is_send() || (c.op.roles & kRoleConsumesRecv)) {
    if (!TakeRecvWqe()) return c.Fail(RespError::kRnr);
    if (c.first()) resp_.recv_offset = 0;
  } else if (c.is_read() || c.is_atomic()) {
    if (resp_.rd_atomic_active >= attr_.max_dest_rd_atomic) return c.Fail(RespError::kRdAtomicOverflow);
  }
  return RespState::kCheckRkey;
}

// The one remote-access check: a RETH (WRITE FIRST/ONLY, READ) or an
// AtomicETH names memory; the DMA length is bounded before the R_Key is
// checked, as rxe's check_length; an atomic's alignment after it.
DROCE_STEP RespState Qp::CheckRkeyStep(ReqCtx& c) {
  if (c.op.Has(kHdrReth)) {
    const RethView reth(c.bth_p + c.op.reth_offset);
    if (reth.dma_length() > kMaxMessageBytes) return c.Fail(RespError::kMessageTooLong);
    c.target = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(),
                         c.is_read() ? mem::kRemoteRead : mem::kRemoteWrite);
    if (c.target.result != mem::AccessResult::kOk) return c.Fail(RespError::kRemoteAccess);
  } else if (c.op.Has(kHdrAtomicEth)) {
    const AtomicEthView at(c.bth_p + c.op.atomic_offset);
    c.target = CheckRkey(at.rkey(), at.va(), 8, mem::kRemoteAtomic);
    if (c.target.result != mem::AccessResult::kOk) return c.Fail(RespError::kRemoteAccess);
    if (at.va() % 8 != 0) return c.Fail(RespError::kAtomicAlignment);
  }
  return RespState::kExecute;
}

DROCE_STEP RespState Qp::Execute(ReqCtx& c) {
  if (c.is_send()) return ExecuteSend(c);
  if (c.is_write()) return ExecuteWrite(c);
  if (c.is_read()) return ExecuteRead(c);
  if (c.is_atomic()) return ExecuteAtomic(c);
  return RespState::kAcknowledge;
}

DROCE_STEP RespState Qp::ExecuteSend(ReqCtx& c) {
  resp_.in_message = InMessage::kSend;
  RespError error;
  if (!PlaceSendPayload(c.frame + c.p.payload_offset, c.len, &error)) return c.Fail(error);
  resp_.recv_offset += c.len;
  if (!c.last()) return RespState::kAcknowledge;
  uint8_t flags = 0;
  uint32_t value = 0;
  if (c.op.roles & kRoleImmediate) {
    flags = queue::kWcWithImm;
    value = ImmDtView(c.bth_p + c.op.immdt_offset).wire_order();
  } else if (c.op.roles & kRoleInvalidate) {
    value = IethView(c.bth_p + c.op.ieth_offset).value();
    // Remote invalidation (IBTA 10.6.7, as rxe): only a type-2 window of
    // this PD bound through this QP; any other key (a region, the
    // program's receive buffer) is refused and stays as it was.
    if (env_.mrs->RemoteInvalidate(value, env_.pd, qpn_) != mem::AccessResult::kOk) {
      return c.Fail(RespError::kInvalidate);
    }
    flags = queue::kWcWithInv;
  }
  CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecv, resp_.recv_offset, flags, value,
               BthView(c.bth_p).solicited());
  resp_.in_message = InMessage::kNone;
  resp_.msn = PsnAdd(resp_.msn, 1);
  return RespState::kAcknowledge;
}

DROCE_STEP RespState Qp::ExecuteWrite(ReqCtx& c) {
  if (c.first()) {
    const RethView reth(c.bth_p + c.op.reth_offset);
    resp_.write_host = c.target.host;
    resp_.write_rkey = reth.rkey();
    resp_.write_epoch = env_.mrs->epoch();
    resp_.write_total = resp_.write_remaining = reth.dma_length();
    resp_.in_message = InMessage::kWrite;
    // The region the key resolved to, for PlaceExpected (a zero-length
    // WRITE resolves none: its key was not checked).
    const mem::MemoryRegion* mr = c.target.host != nullptr ? env_.mrs->Find(resp_.write_rkey) : nullptr;
    if (mr != nullptr) resp_.expected = {mr->host, mr->iova, mr->length, resp_.write_epoch, resp_.write_rkey};
  }
  // More (or less) data than the RETH announced.
  if (c.len > resp_.write_remaining || (c.last() && c.len != resp_.write_remaining)) {
    return c.Fail(RespError::kLength);
  }
  // Deregistered (invalidated) since the FIRST: read no further.
  if (!c.first() && !MrStillLentSince(resp_.write_rkey, &resp_.write_epoch)) {
    return c.Fail(RespError::kRemoteAccess);
  }
  if (c.len > 0 && !c.payload_placed) {
    std::memcpy(resp_.write_host + (resp_.write_total - resp_.write_remaining), c.frame + c.p.payload_offset, c.len);
  }
  resp_.write_remaining -= c.len;
  if (c.last()) {
    if (c.op.roles & kRoleImmediate) {
      CompleteRecv(WcStatus::kSuccess, WcOpcode::kRecvRdmaWithImm, resp_.write_total, queue::kWcWithImm,
                   ImmDtView(c.bth_p + c.op.immdt_offset).wire_order(),
                   BthView(c.bth_p).solicited());
    }
    resp_.in_message = InMessage::kNone;
    resp_.msn = PsnAdd(resp_.msn, 1);
  }
  return RespState::kAcknowledge;
}

DROCE_STEP RespState Qp::ExecuteRead(ReqCtx& c) {
  if (!ResponseRoom()) {  // more READs than negotiated: the requester retries
    ++counters_.responses_refused;
    return RespState::kDone;
  }
  const RethView reth(c.bth_p + c.op.reth_offset);
  const uint32_t packets = PacketsForLength(reth.dma_length());
  resp_.msn = PsnAdd(resp_.msn, 1);
  Resource& res = resources_[resp_.next_resource++ % resources_.size()];
  res = Resource{true, false, c.psn, PsnAdd(c.psn, packets - 1), 0, reth.va(), reth.dma_length(),
                 reth.rkey()};
  Action* a = actions_.Reserve();
  *a = Action{};
  a->holds_resource = true;
  ++resp_.rd_atomic_active;
  a->kind = ActionKind::kReadResponse;
  a->psn = c.psn;
  a->msn = resp_.msn;
  a->host = c.target.host;
  a->rkey = reth.rkey();
  a->epoch = env_.mrs->epoch();
  a->length = reth.dma_length();
  actions_.Commit();
  resp_.epsn = PsnAdd(c.psn, packets);  // the responses carry the ACK
  return RespState::kDone;
}

DROCE_STEP RespState Qp::ExecuteAtomic(ReqCtx& c) {
  if (!ResponseRoom()) {
    ++counters_.responses_refused;
    return RespState::kDone;
  }
  const AtomicEthView at(c.bth_p + c.op.atomic_offset);
  auto* target = reinterpret_cast<uint64_t*>(c.target.host);
  uint64_t original;
  if (c.op.roles & kRoleCompare) {
    original = at.compare();
    // On failure `original` receives the current value; either way it is the old value.
    __atomic_compare_exchange_n(target, &original, at.swap_add(), false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
  } else {
    original = __atomic_fetch_add(target, at.swap_add(), __ATOMIC_SEQ_CST);
  }
  resp_.msn = PsnAdd(resp_.msn, 1);
  Resource& res = resources_[resp_.next_resource++ % resources_.size()];
  res = Resource{true, true, c.psn, c.psn, original};
  Action* a = actions_.Reserve();
  *a = Action{};
  a->holds_resource = true;
  ++resp_.rd_atomic_active;
  a->kind = ActionKind::kAtomicAck;
  a->psn = c.psn;
  a->msn = resp_.msn;
  a->original = original;
  actions_.Commit();
  resp_.epsn = PsnAdd(c.psn, 1);  // the ATOMIC ACKNOWLEDGE is the ACK
  return RespState::kDone;
}

DROCE_STEP RespState Qp::Acknowledge(ReqCtx& c) {
  if (!reliable()) return RespState::kDone;  // UC moved resp_.epsn in CheckPsn and never ACKs
  AcceptRequest(c.psn, BthView(c.bth_p));
  return RespState::kDone;
}

RespState Qp::Duplicate(ReqCtx& c) {
  if (!c.is_read() && !c.is_atomic()) {
    // Duplicate SEND/WRITE: acknowledge what we have (the latest PSN). The
    // ACK is counted when it is sent (BuildResponse), like every other.
    QueueAck(PsnAdd(resp_.epsn, -1));
    return RespState::kDone;
  }
  Action a{};
  const Resource* res = ReplayResponse(c, &a);
  if (res == nullptr) return RespState::kDone;
  if (a.kind == ActionKind::kReadResponse) {
    // A stream for the same READ still queued restarts here instead of
    // running to its end beside a second copy.
    for (uint32_t i = actions_.head(); i != actions_.tail(); ++i) {
      Action& q = actions_.at(i);
      if (q.kind == ActionKind::kReadResponse && !PsnLess(q.psn, res->first_psn) &&
          !PsnLess(res->last_psn, q.psn)) {
        a.holds_resource = q.holds_resource;
        q = a;
        return RespState::kDone;
      }
    }
  }
  (void)PushResponse(a);  // refused: the requester asks again
  return RespState::kDone;
}

// A duplicate READ or atomic request (9.7.5.1.2) is answered from the
// resource it falls in: an atomic's saved result is replayed, never
// executed again; a READ is executed again for what the duplicate asks: the
// original or a part of it, with its R_Key, answered within the original's
// PSNs; anything else is dropped (rxe's duplicate_request). The resource,
// and the response in *a; null: nothing to answer (too old to be in the
// ring, 9.7.5.1.2, or dropped).
const Qp::Resource* Qp::ReplayResponse(ReqCtx& c, Action* a) {
  const uint32_t psn = c.psn;
  for (const Resource& res : resources_) {
    if (!res.valid || PsnLess(psn, res.first_psn) || PsnLess(res.last_psn, psn)) continue;
    if (res.atomic != c.is_atomic()) return nullptr;
    *a = Action{};
    a->psn = psn;
    a->msn = resp_.msn;
    if (res.atomic) {
      if (psn != res.first_psn) return nullptr;
      a->kind = ActionKind::kAtomicAck;
      a->original = res.original;
      return &res;
    }
    const RethView reth(c.bth_p + c.op.reth_offset);
    const uint64_t skip = reth.va() - res.va;
    const bool inside = reth.rkey() == res.rkey && reth.va() >= res.va && skip <= res.length &&
                        reth.dma_length() <= res.length - skip &&
                        PacketsForLength(reth.dma_length()) <=
                            static_cast<uint32_t>(PsnDiff(res.last_psn, psn)) + 1;
    if (!inside) {
      ++counters_.dropped_bad_duplicates;
      return nullptr;
    }
    const auto r = CheckRkey(reth.rkey(), reth.va(), reth.dma_length(), mem::kRemoteRead);
    if (r.result != mem::AccessResult::kOk) return nullptr;
    a->kind = ActionKind::kReadResponse;
    a->host = r.host;
    a->rkey = reth.rkey();
    a->epoch = env_.mrs->epoch();
    a->length = reth.dma_length();
    return &res;
  }
  return nullptr;
}

uint32_t Qp::BuildResponse(Action& a, pktio::Frame& f, bool* finished) {
  uint8_t* frame = f.data;
  uint8_t* ext;
  const uint32_t bth_off = WriteHeaders(frame, 0, a.psn, false, false, &ext);
  uint8_t* bth_p = frame + bth_off;
  BthWriter bth(bth_p);
  *finished = true;
  switch (a.kind) {
    case ActionKind::kSack:
      return sr_chosen_->BuildSack(frame);  // selective repeat's (also queued before a fallback)
    case ActionKind::kAck:
    case ActionKind::kNak: {
      bth.set_opcode(kRcAcknowledge);
      AethWriter aeth(ext);
      aeth.set_syndrome(a.kind == ActionKind::kAck ? MakeSyndrome(AethType::kAck, CreditsField())
                                                   : a.syndrome);
      aeth.set_msn(a.msn);
      if (a.kind == ActionKind::kAck) ++counters_.acks_sent;
      const uint32_t echo = int_echo_pending_ ? CcWriteIntEcho(bth_p, kBthBytes + kAethBytes) : 0;
      return FinishTemplateFrame(frame, headers_, kBthBytes + kAethBytes + echo);
    }
    case ActionKind::kAtomicAck: {
      bth.set_opcode(kRcAtomicAcknowledge);
      AethWriter aeth(ext);
      aeth.set_syndrome(MakeSyndrome(AethType::kAck, CreditsField()));
      aeth.set_msn(a.msn);
      AtomicAckEthWriter(ext + kAethBytes).set_original(a.original);
      return FinishTemplateFrame(frame, headers_, kBthBytes + kAethBytes + kAtomicAckEthBytes);
    }
    case ActionKind::kReadResponse: {
      // The first response too: it may leave rounds after the request was
      // checked (queued behind another READ's responses or a full port).
      if (!MrStillLentSince(a.rkey, &a.epoch)) {
        // Deregistered since the request was checked: end the stream with a
        // NAK (remote access error) at the next response PSN instead of
        // reading on.
        ++counters_.naks_sent;
        bth.set_opcode(kRcAcknowledge);
        bth.set_psn(PsnAdd(a.psn, a.offset / mtu_));
        AethWriter aeth(ext);
        aeth.set_syndrome(MakeSyndrome(AethType::kNak, kNakRemoteAccessError));
        aeth.set_msn(a.msn);
        return FinishTemplateFrame(frame, headers_, kBthBytes + kAethBytes);
      }
      const uint32_t seg = std::min(mtu_, a.length - a.offset);
      const bool first = a.offset == 0;
      const bool last = a.offset + seg == a.length;
      const uint8_t opcode =
          OpcodeFor(Transport::kRc, Operation::kReadResponse, PositionOf(first, last));
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
        return FinishTemplateFrame(frame, headers_, op.header_bytes + seg);
      }
      // Read where it is, by the port, in this round: the bytes the copy
      // below would read now.
      if (env_.gather_tx && seg >= kGatherTxMin) return FinishGatherFrame(f, payload, op.header_bytes, seg, src);
      // Copied from the MR and CRCed in one pass.
      const uint32_t icrc_offset = FinishHeaders(frame, route_, op.header_bytes + seg);
      uint32_t crc = IcrcTemplateBegin(frame, headers_, op.header_bytes - kBthBytes);
      crc = Crc32CopyUpdate(crc, payload, src, seg);
      crc = Crc32Update(crc, payload + seg, frame + icrc_offset - (payload + seg));  // pad
      StoreLe32(frame + icrc_offset, Crc32Final(crc));
      return icrc_offset + kIcrcBytes;
    }
  }
  return 0;
}

}  // namespace droce::transport
