// Requester (IBTA 9.7.1-9.7.4): starts work requests (lkeys checked), assigns
// PSNs, segments messages by path MTU and builds request packets.
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "wire/icrc.h"
#include "wire/short_copy.h"
#include "transport/qp.h"
#include "transport/sr/selective_repeat.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcStatus;
using namespace droce::wire;

// Inline: its callers (BuildRequest, TransmitRequests) are in this file.
[[gnu::always_inline]] inline uint32_t Qp::AckReqEvery() const {
  const uint32_t every = sr_ ? sr_->ack_req_every() : env_.ack_req_every;
  const uint32_t cc_window = cc_.output().window_packets;  // 0: none
  return cc_window != 0 ? std::min(every, std::max(1u, cc_window / 2)) : every;
}

// Inline: the requester's start_wqe step, in this file, is its one caller.
// MrTable::CheckLocal's answer for the QP's PD: the last region resolved
// answers an SGE inside it through the same L_Key while nothing changed in
// the MR table since (a WQE stream from one buffer resolves its key once).
[[gnu::always_inline]] inline mem::MrTable::Resolved Qp::ResolveLocal(const Sge& sge, bool needs_write) {
  ResolvedRegion& r = req_.local;
  const uint64_t epoch = env_.mrs->epoch();
  if (r.Holds(sge.lkey, epoch, sge.addr, sge.length) && (r.writable || !needs_write)) {
    return {mem::AccessResult::kOk, r.HostAt(sge.addr)};
  }
  const auto res = env_.mrs->CheckLocal(sge.lkey, env_.pd, sge.addr, sge.length, needs_write);
  if (res.result == mem::AccessResult::kOk) {
    const mem::MemoryRegion* mr = env_.mrs->Find(sge.lkey);
    r = {mr->host, mr->iova, mr->length, epoch, sge.lkey, (mr->access & mem::kLocalWrite) != 0};
  }
  return res;
}

[[gnu::always_inline]] inline bool Qp::StartWqe(SendWqe& w) {
  const bool read_or_atomic = IsReadOrAtomic(w);
  if (IsLocalOp(w)) {
    // Executed in send-queue order, without a packet (IBTA 10.6.7.2);
    // a failure completes in error and moves the QP to ERR, as
    // in rxe (bind: MW_BIND_ERR; local invalidate: LOC_QP_OP_ERR).
    w.done = true;
    if (w.opcode == WrOpcode::kLocalInv) {
      if (env_.mrs->LocalInvalidate(Ext(w).invalidate_rkey, env_.pd) != mem::AccessResult::kOk) {
        FailWqe(w, WcStatus::kLocQpOpErr);
      }
    } else {
      const BindWr& b = Ext(w).bind;
      const mem::MwBind bind{b.mw_handle, b.new_key, b.mr_lkey, b.addr, b.length, b.access};
      if (env_.mrs->BindMw(bind, env_.pd, qpn_) != mem::AccessResult::kOk) {
        FailWqe(w, WcStatus::kMwBindErr);
      }
    }
    return true;
  }
  if (!(w.flags & kSendInline)) {
    for (uint32_t i = 0; i < w.num_sge; ++i) {
      const auto r = ResolveLocal(SgeOf(w, i), /*needs_write=*/read_or_atomic);
      if (r.result != mem::AccessResult::kOk) {
        FailWqe(w, WcStatus::kLocProtErr);
        return true;
      }
      (w.num_sge == 1 ? w.local_host : Ext(w).sge_host[i]) = r.host;
    }
    SendWqeEpoch(w) = env_.mrs->epoch();
  }
  const uint32_t n = PacketsFor(w);
  w.first_psn = req_.psn_next;
  w.last_psn = PsnAdd(req_.psn_next, n - 1);
  w.next_psn = w.first_psn;
  req_.psn_next = PsnAdd(req_.psn_next, n);
  if (sr_) sr_->OnWqeStarted(w);
  w.started = true;
  if (read_or_atomic) ++req_.rd_atomic_outstanding;
  return true;
}

// What the requester's steps share during one call. The QP's part of
// ShortStart/ShortRequest and the AckReq spacing of short requests are read
// once per call: sending changes neither.
struct Qp::SendCtx {
  pktio::Frame* frames;
  uint32_t used;
  uint32_t n;
  uint64_t now_ns;
  SendWqe* w = nullptr;
  bool short_qp = false;    // ShortQp()
  uint32_t ack_every = 0;   // a short request asks for its ACK at least this often (1: sq_sig_all)
};

uint32_t Qp::TransmitRequests(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns) {
  // What was lost goes first: what selective repeat's SACKs or timeout
  // showed missing, or go-back-N's retry probe.
  if (sr_) {
    used = sr_->Retransmit(frames, used, n, now_ns);
    if (state_ == QpState::kErr) return used;
  } else if (req_.retry_probe_pending) {
    used = SendRetryProbe(frames, used, n, now_ns);
    if (state_ == QpState::kErr) return used;
  }
  SendCtx c{frames, used, n, now_ns};
  c.short_qp = ShortQp();
  // sq_sig_all: every WR signaled, so every short request asks for its ACK.
  c.ack_every = caps_.sq_sig_all ? 1 : std::min(env_.unsignaled_ack_every, AckReqEvery());
  ReqState s = ReqState::kGetWqe;
  while (s != ReqState::kDone) {
    switch (s) {
      case ReqState::kGetWqe:
        // A run of short requests (a small message stream's whole round)
        // goes from WQE to WQE here, without the switch between steps.
        s = ReqGetWqe(c);
        while (s == ReqState::kShortRequest) {
          s = ReqShortRequest(c);
          if (s == ReqState::kGetWqe) s = ReqGetWqe(c);
        }
        break;
      case ReqState::kShortRequest: s = ReqShortRequest(c); break;
      case ReqState::kCheckLimits: s = ReqCheckLimits(c); break;
      case ReqState::kStartWqe: s = ReqStartWqe(c); break;
      case ReqState::kCheckWindow: s = ReqCheckWindow(c); break;
      case ReqState::kCheckLength: s = ReqCheckLength(c); break;
      case ReqState::kCheckSges: s = ReqCheckSges(c); break;
      case ReqState::kBuildPacket: s = ReqBuildPacket(c); break;
      case ReqState::kUpdate: s = ReqUpdate(c); break;
      case ReqState::kDone:
      case ReqState::kCount: s = ReqState::kDone; break;
    }
  }
  if (sr_) sr_->NoteDrained(req_.sq_next == sq_.tail() && Outstanding(), now_ns);
  return c.used;
}

DROCE_STEP ReqState Qp::ReqGetWqe(SendCtx& c) {
  if (c.used >= c.n || req_.sq_next == sq_.tail()) return ReqState::kDone;
  if (Paced(c.now_ns)) return ReqState::kDone;
  c.w = &sq_.at(req_.sq_next);
  if (c.w->started) return ReqState::kCheckWindow;
  if (state_ == QpState::kSqd) return ReqState::kDone;  // SQD: drained
  return ShortStart(*c.w, c.short_qp) ? ReqState::kShortRequest : ReqState::kCheckLimits;
}

// ShortRequest's and ShortStart's conditions on the QP: RC, neither selective
// repeat, congestion control nor INT, short requests on.
[[gnu::always_inline]] inline bool Qp::ShortQp() const {
  return reliable() && sr_ == nullptr && cc_.ops() == nullptr && !int_requests_ && short_requests_;
}

// A new WQE that ShortRequest's build will send whole, whose limits and
// window let it start: no fence behind an outstanding READ/atomic, room in
// the window, its first PSN the next one ever sent.
[[gnu::always_inline]] inline bool Qp::ShortStart(const SendWqe& w, bool short_qp) const {
  return short_qp && (w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kSend) && w.total_len <= mtu_ &&
         w.total_len < kFusedGatherMin && ((w.flags & kSendInline) || w.num_sge <= 1) &&
         req_.psn_next == req_.psn_high && !((w.flags & kSendFence) && req_.rd_atomic_outstanding > 0) &&
         WindowRoom(PsnDiff(req_.psn_next, req_.psn_una)) != 0;
}

// check_limits, start_wqe, check_window, check_length, check_sges and
// build_packet for ShortStart's WQEs, with only the effects they have on
// such a WQE; update follows. An L_Key the MR table does not grant takes
// the full steps (which fail the WQE), nothing changed here.
DROCE_STEP ReqState Qp::ReqShortRequest(SendCtx& c) {
  SendWqe& w = *c.w;
  if (!(w.flags & kSendInline)) {
    if (w.num_sge == 1) {
      const auto r = ResolveLocal(Sge{w.local_addr, w.total_len, w.lkey}, /*needs_write=*/false);
      if (r.result != mem::AccessResult::kOk) return ReqState::kCheckLimits;
      w.local_host = r.host;
    }
    SendWqeEpoch(w) = env_.mrs->epoch();
  }
  const uint32_t psn = req_.psn_next;
  w.first_psn = w.last_psn = w.next_psn = psn;
  req_.psn_next = PsnAdd(psn, 1);
  w.started = true;
  c.frames[c.used].len = BuildShortRequest(w, c.frames[c.used].data, c.ack_every);
  return ReqUpdate<true>(c);
}

DROCE_STEP ReqState Qp::ReqCheckLimits(SendCtx& c) {
  return MayStart(*c.w) ? ReqState::kStartWqe : ReqState::kDone;  // wait for completions
}

DROCE_STEP ReqState Qp::ReqStartWqe(SendCtx& c) {
  StartWqe(*c.w);
  if (state_ == QpState::kErr) return ReqState::kDone;  // a local error flushed the queue
  if (c.w->done) {  // LOCAL_INV, BIND_MW: no packet
    ++req_.sq_next;
    CompleteHead();
    return ReqState::kGetWqe;
  }
  return ReqState::kCheckWindow;
}

DROCE_STEP ReqState Qp::ReqCheckWindow(SendCtx& c) {
  const bool full = WindowRoom(PsnDiff(c.w->next_psn, req_.psn_una)) == 0;
  if (sr_) sr_->NoteWindow(full, c.now_ns);
  return full ? ReqState::kDone : ReqState::kCheckLength;
}

DROCE_STEP ReqState Qp::ReqCheckLength(SendCtx& c) {
  if (ud() && c.w->total_len > mtu_) {  // never on the wire (ud_qp.cc)
    SkipOversizeUd(*c.w);
    ++req_.sq_next;
    CompleteHead();
    return ReqState::kGetWqe;
  }
  return ReqState::kCheckSges;
}

DROCE_STEP ReqState Qp::ReqCheckSges(SendCtx& c) {
  if (SgesStillLent(*c.w)) return ReqState::kBuildPacket;
  FailWqe(*c.w, WcStatus::kLocProtErr);  // the payload's region was deregistered meanwhile
  return ReqState::kDone;
}

DROCE_STEP ReqState Qp::ReqBuildPacket(SendCtx& c) {
  const uint32_t len = ShortRequest(*c.w, c.short_qp)
                           ? BuildShortRequest(*c.w, c.frames[c.used].data, c.ack_every)
                           : BuildRequest(*c.w, c.frames[c.used], c.now_ns);
  if (len == 0) return ReqState::kDone;
  c.frames[c.used].len = len;
  return ReqState::kUpdate;
}

// kShortQp: the caller has seen ShortQp() (RC, no selective repeat).
template <bool kShortQp>
DROCE_STEP ReqState Qp::ReqUpdate(SendCtx& c) {
  SendWqe& w = *c.w;
  const uint32_t len = c.frames[c.used].len;
  ++counters_.tx_packets;
  counters_.tx_bytes += len;
  NoteSent(len, c.now_ns);
  ++c.used;
  if (!kShortQp && !reliable()) {
    // UC: a WR is complete once its last packet is on the wire (9.8.1).
    if (w.fully_sent) {
      w.done = true;
      req_.psn_una = w.next_psn;
      ++req_.sq_next;
      CompleteHead();
    }
    return ReqState::kGetWqe;
  }
  if (req_.retransmit_deadline == 0) {
    req_.retry_clock_ns = c.now_ns;  // nothing was outstanding: the IBTA timeout starts now
    req_.retransmit_deadline = ArmRetransmitTimer(c.now_ns);
  }
  if (!kShortQp && sr_) sr_->OnPacketSent(c.now_ns);
  req_.tail_sent_ns = c.now_ns;
  if (req_.tail_unsolicited && req_.ack_solicit_deadline == 0) {
    req_.ack_solicit_deadline = c.now_ns + env_.ack_solicit_ns;
  }
  if (w.fully_sent) ++req_.sq_next;
  return ReqState::kGetWqe;
}

// Go-back-N's retry probe (OnTimer): the packet at psn_una once more, with
// AckReq, the send cursor left where it is. A READ is asked again from its
// first missing response, an atomic whole. Nothing when the cursor is to
// send it anyway.
uint32_t Qp::SendRetryProbe(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns) {
  if (used >= n || Paced(now_ns)) return used;
  req_.retry_probe_pending = false;
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (w.done) continue;
    if (!w.started) return used;
    if (PsnLess(w.last_psn, req_.psn_una)) continue;
    uint32_t psn = PsnLess(req_.psn_una, w.first_psn) ? w.first_psn : req_.psn_una;
    if (w.opcode == WrOpcode::kRdmaRead) {
      psn = PsnAdd(w.first_psn, Ext(w).read_done_bytes / mtu_);
    } else if (IsReadOrAtomic(w)) {
      psn = w.first_psn;
    }
    const bool cursor_sends_it = static_cast<int32_t>(req_.sq_next - i) < 0 ||
                                 (req_.sq_next == i && !w.fully_sent && !PsnLess(psn, w.next_psn));
    if (cursor_sends_it) return used;
    if (!SgesStillLent(w)) {
      FailWqe(w, WcStatus::kLocProtErr);
      return used;
    }
    const uint32_t len = BuildResend(w, psn, frames[used], now_ns);
    if (len == 0) return used;
    req_.retry_probe_sent = true;
    req_.retry_probe_psn = psn;
    frames[used].len = len;
    ++counters_.tx_packets;
    counters_.tx_bytes += len;
    NoteSent(len, now_ns);
    return used + 1;
  }
  return used;
}

// The packet at `psn` of a started WQE once more, asking for an ACK, the
// WQE's cursor (next_psn, fully_sent) left as it was: a one-off resend
// (selective repeat's, go-back-N's retry probe). 0: nothing built.
uint32_t Qp::BuildResend(SendWqe& w, uint32_t psn, pktio::Frame& frame, uint64_t now_ns, uint32_t read_len) {
  const uint32_t saved_next = w.next_psn;
  const bool saved_sent = w.fully_sent;
  w.next_psn = psn;
  req_.force_ack_req = true;
  req_.resend_read_len = read_len;
  const uint32_t len = BuildRequest(w, frame, now_ns);
  req_.force_ack_req = false;
  req_.resend_read_len = 0;
  w.next_psn = saved_next;
  w.fully_sent = saved_sent;
  return len;
}

// Calls span(host, n) for each piece of [offset, offset+len) of a WQE's
// message, walking its SGEs in order (resolved host addresses).
template <typename Span>
[[gnu::always_inline]] inline void Qp::ForEachSgeSpan(const SendWqe& w, uint32_t offset, uint32_t len,
                                                      Span&& span) const {
  if (w.num_sge == 1) {
    if (len > 0) span(w.local_host + offset, len);
    return;
  }
  const SendWqeExt& x = Ext(w);
  for (uint32_t i = 0; i < w.num_sge && len > 0; ++i) {
    const uint32_t sge_len = x.sges[i].length;
    if (offset >= sge_len) {
      offset -= sge_len;
      continue;
    }
    const uint32_t n = std::min(len, sge_len - offset);
    span(x.sge_host[i] + offset, n);
    len -= n;
    offset = 0;
  }
}

// GatherPayload's work, inline in the request builds. Inline data and a
// single SGE are one copy from local_host.
[[gnu::always_inline]] inline void Qp::GatherSges(const SendWqe& w, uint32_t offset, uint32_t len,
                                                  uint8_t* out) const {
  if ((w.flags & kSendInline) || w.num_sge == 1) {
    if (len > 0) std::memcpy(out, w.local_host + offset, len);
    return;
  }
  ForEachSgeSpan(w, offset, len, [&out](const uint8_t* host, uint32_t n) {
    std::memcpy(out, host, n);
    out += n;
  });
}

void Qp::GatherPayload(const SendWqe& w, uint32_t offset, uint32_t len, uint8_t* out) const {
  GatherSges(w, offset, len, out);
}

uint32_t Qp::GatherPayloadCrc(const SendWqe& w, uint32_t offset, uint32_t len, uint8_t* out,
                                uint32_t crc) const {
  if (w.flags & kSendInline) return Crc32CopyUpdate(crc, out, w.local_host + offset, len);
  ForEachSgeSpan(w, offset, len, [&out, &crc](const uint8_t* host, uint32_t n) {
    crc = Crc32CopyUpdate(crc, out, host, n);
    out += n;
  });
  return crc;
}

void Qp::ScatterToSges(const SendWqe& w, uint32_t offset, const uint8_t* data,
                         uint32_t len) const {
  ForEachSgeSpan(w, offset, len, [&data](uint8_t* host, uint32_t n) {
    std::memcpy(host, data, n);
    data += n;
  });
}

uint32_t Qp::ScatterToSgesCrc(const SendWqe& w, uint32_t offset, const uint8_t* data, uint32_t len, uint32_t crc,
                              bool lent) const {
  ForEachSgeSpan(w, offset, len, [&data, &crc, lent](uint8_t* host, uint32_t n) {
    crc = lent ? Crc32CopyOnceUpdate(crc, host, data, n) : Crc32CopyUpdate(crc, host, data, n);
    data += n;
  });
  return crc;
}

// BuildRequest's effects for a packet it would build from these inputs only:
// the first transmission of an RC SEND or WRITE without immediate that fits
// one packet (an ONLY opcode) and the short gather, on a QP without
// selective repeat, congestion control or INT, not a resend asking for its
// ACK. Every other packet takes BuildRequest; the equivalence test
// (transport_short_request) feeds both the same streams.
[[gnu::always_inline]] inline bool Qp::ShortRequest(const SendWqe& w, bool short_qp) const {
  return short_qp && (w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kSend) && w.total_len <= mtu_ &&
         w.total_len < kFusedGatherMin && w.next_psn == req_.psn_high && w.next_psn == w.first_psn &&
         !req_.force_ack_req;
}

// Inline in its two callers (ReqShortRequest, ReqBuildPacket): as a call,
// the requester's loop saves and restores its registers around every packet.
// `ack_every`: min(unsignaled_ack_every, AckReqEvery()), or 1 with
// sq_sig_all, read by the caller once per call.
[[gnu::always_inline]] inline uint32_t Qp::BuildShortRequest(SendWqe& w, uint8_t* frame, uint32_t ack_every) {
  ++counters_.short_requests;
  const uint32_t psn = w.next_psn;
  const uint32_t next = PsnAdd(psn, 1);
  req_.psn_high = next;
  w.next_psn = next;
  w.fully_sent = true;
  // AckReq as BuildRequest decides it for a message's last packet sent once.
  const uint32_t since = req_.packets_since_ack_req + 1;
  const bool ack_req = (w.flags & kSendSignaled) != 0 || since >= ack_every;
  req_.packets_since_ack_req = ack_req ? 0 : since;
  req_.tail_unsolicited = !ack_req;
  uint8_t* bth_p = WriteHeaderTemplate(frame, headers_);
  const bool write = w.opcode == WrOpcode::kRdmaWrite;
  bth_p[0] = write ? kRcWriteOnly : kRcSendOnly;
  if (w.flags & kSendSolicited) bth_p[1] |= 0x80;  // SE; MigReq and the pad count are the template's
  StoreBe32(bth_p + 8, (uint32_t{ack_req} << 31) | psn);  // AckReq, reserved 7 bits, PSN
  uint32_t headers = kBthBytes;
  if (write) {
    RethWriter reth(bth_p + kBthBytes);
    reth.set_va(w.remote_addr);
    reth.set_rkey(w.rkey);
    reth.set_dma_length(w.total_len);
    headers += kRethBytes;
  }
  if ((w.flags & kSendInline) || w.num_sge == 1) {
    CopyShortPayload(bth_p + headers, w.local_host, w.total_len);
  } else {
    GatherSges(w, 0, w.total_len, bth_p + headers);
  }
  return FinishShortFrame(frame, headers_, headers + w.total_len);
}

uint32_t Qp::FinishGatherFrame(pktio::Frame& f, uint8_t* payload, uint32_t headers, uint32_t seg,
                               const uint8_t* host) {
  uint8_t* frame = f.data;
  const uint32_t icrc_offset = FinishHeaders(frame, route_, headers + seg);
  const uint32_t pad = icrc_offset - static_cast<uint32_t>(payload + seg - frame);
  uint32_t crc = IcrcTemplateBegin(frame, headers_, headers - kBthBytes);
  crc = Crc32Update(crc, host, seg);
  std::memset(payload, 0, pad);
  crc = Crc32Update(crc, payload, pad);
  StoreLe32(payload + pad, Crc32Final(crc));
  f.gather = host;
  f.gather_len = seg;
  f.gather_at = static_cast<uint32_t>(payload - frame);
  return f.gather_at + seg + pad + kIcrcBytes;
}

uint32_t Qp::BuildRequest(SendWqe& w, pktio::Frame& f, uint64_t now_ns) {
  uint8_t* frame = f.data;
  if (ud()) return BuildUdRequest(w, frame);
  const uint32_t psn = w.next_psn;
  const bool retransmission = PsnLess(psn, req_.psn_high);
  if (retransmission) {
    ++counters_.retransmitted_packets;
  } else {
    req_.psn_high = PsnAdd(psn, 1);
  }
  if (sr_) sr_->OnRequestBuilt(psn, retransmission, !IsReadOrAtomic(w), now_ns);
  // cc_hooks.cc: true when this packet is the one timed (it asks for its ACK).
  const bool cc_timed = cc_.ops() != nullptr && CcNoteSent(psn, retransmission, now_ns);
  const uint32_t index = static_cast<uint32_t>(PsnDiff(psn, w.first_psn));
  // WriteHeaders(frame, 0, psn, false, false, &ext) without the call: every
  // path below sets the opcode and AckReq.
  uint8_t* bth_p = WriteHeaderTemplate(frame, headers_);
  uint8_t* ext = bth_p + kBthBytes;
  BthWriter bth(bth_p);
  bth.set_psn(psn);
  uint32_t transport_len = kBthBytes;

  switch (w.opcode) {
    case WrOpcode::kRdmaRead: {
      // A retried READ asks only for what has not arrived (9.7.4.1.4).
      const uint32_t offset = index * mtu_;
      bth.set_opcode(OpcodeFor(Transport::kRc, Operation::kReadRequest, Position::kOnly));
      bth.set_ack_req(true);
      if (!retransmission) req_.tail_unsolicited = false;  // its response answers
      RethWriter reth(ext);
      reth.set_va(w.remote_addr + offset);
      reth.set_rkey(w.rkey);
      reth.set_dma_length(req_.resend_read_len != 0 ? std::min(req_.resend_read_len, w.total_len - offset)
                                                    : w.total_len - offset);
      transport_len += kRethBytes;
      w.next_psn = PsnAdd(w.last_psn, 1);
      w.fully_sent = true;
      return FinishTemplateFrame(frame, headers_, transport_len);
    }
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd: {
      const bool cas = w.opcode == WrOpcode::kAtomicCmpAndSwp;
      bth.set_opcode(OpcodeFor(Transport::kRc, cas ? Operation::kCompareSwap : Operation::kFetchAdd,
                               Position::kOnly));
      bth.set_ack_req(true);
      if (!retransmission) req_.tail_unsolicited = false;  // its response answers
      AtomicEthWriter a(ext);
      a.set_va(w.remote_addr);
      a.set_rkey(w.rkey);
      const SendWqeExt& x = Ext(w);
      a.set_swap_add(cas ? x.swap : x.compare_add);
      a.set_compare(cas ? x.compare_add : 0);
      transport_len += kAtomicEthBytes;
      w.next_psn = PsnAdd(psn, 1);
      w.fully_sent = true;
      return FinishTemplateFrame(frame, headers_, transport_len);
    }
    default:
      break;
  }

  // SEND and WRITE families: segment by path MTU.
  const uint32_t offset = index * mtu_;
  const uint32_t seg = std::min(mtu_, w.total_len - offset);
  const bool first = offset == 0;
  const bool last = offset + seg == w.total_len;
  const bool is_write =
      w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kRdmaWriteWithImm;
  const bool imm =
      w.opcode == WrOpcode::kRdmaWriteWithImm || w.opcode == WrOpcode::kSendWithImm;
  const bool inv = w.opcode == WrOpcode::kSendWithInv;
  const Extra extra = imm ? Extra::kImmediate : inv ? Extra::kInvalidate : Extra::kNone;
  const uint8_t ibta_opcode = OpcodeFor(reliable() ? Transport::kRc : Transport::kUc,
                                        is_write ? Operation::kWrite : Operation::kSend,
                                        PositionOf(first, last), extra);
  // Selective repeat sends the opcode's SR twin (an SRETH instead of the RETH).
  const uint8_t opcode = sr_ ? SrOpcode(ibta_opcode) : ibta_opcode;
  const OpcodeInfo& op = OpInfo(opcode);
  bth.set_opcode(opcode);
  ++req_.packets_since_ack_req;
  // AckReq (doc/transport.md "Requester"): a message's last packet asks when
  // the WR will complete (signaled), under selective repeat, when resent,
  // or once unsignaled_ack_every packets went without; an unsignaled WR's
  // ACK only frees its slot, and one cumulative ACK frees many (ConnectX's
  // log_ack_req_freq). What is left unasked at the tail is solicited later.
  const bool signaled = (w.flags & kSendSignaled) != 0 || caps_.sq_sig_all;
  const bool ask_at_end = signaled || sr_ || retransmission ||
                          req_.packets_since_ack_req >= env_.unsignaled_ack_every;
  const bool ack_req =
      reliable() && ((last && ask_at_end) || req_.packets_since_ack_req >= AckReqEvery() ||
                     req_.force_ack_req || cc_timed || (retransmission && PsnAdd(psn, 1) == req_.psn_high));
  if (ack_req) req_.packets_since_ack_req = 0;
  if (!retransmission && reliable()) req_.tail_unsolicited = last && !ack_req;
  if (sr_ && ack_req) sr_->OnAckRequested(psn);
  bth.set_ack_req(ack_req);
  if (ack_req && cc_.ops() != nullptr) {
    cc_timing_.ack_req_psn = psn;
    cc_timing_.ack_req_sent = true;
  }
  if (last && (w.flags & kSendSolicited)) bth.set_flags(true, true, 0, 0);
  if (op.Has(kHdrSrEth)) {
    SelectiveRepeat::WriteSrEth(bth_p + op.sreth_offset, w, Ext(w).recv_seq, offset, is_write);
  }
  if (op.Has(kHdrReth)) {
    RethWriter reth(bth_p + op.reth_offset);
    reth.set_va(w.remote_addr);
    reth.set_rkey(w.rkey);
    reth.set_dma_length(w.total_len);
  }
  // Immediate data is a __be32 already: its bytes go on the wire as they are.
  if (op.Has(kHdrImmDt)) ImmDtWriter(bth_p + op.immdt_offset).set_wire_order(Ext(w).imm_data);
  if (op.Has(kHdrIeth)) IethWriter(bth_p + op.ieth_offset).set_value(Ext(w).invalidate_rkey);
  const uint32_t headers = op.header_bytes + (int_requests_ ? CcWriteIntRequest(bth_p, op.header_bytes) : 0);
  transport_len = headers + seg;
  w.next_psn = PsnAdd(psn, 1);
  if (last) w.fully_sent = true;
  uint8_t* payload = bth_p + headers;
  if (seg < kFusedGatherMin) {
    // Short payloads: gathered, then one CRC pass over what follows the BTH
    // (the template's register covers the headers) beats two reductions.
    GatherSges(w, offset, seg, payload);
    return FinishTemplateFrame(frame, headers_, transport_len);
  }
  if (env_.gather_tx && seg >= kGatherTxMin && w.num_sge == 1 && !(w.flags & kSendInline)) {
    // The SGE was checked still lent (ReqCheckSges) just before this build.
    return FinishGatherFrame(f, payload, headers, seg, w.local_host + offset);
  }
  // The payload is read once: gathered into the frame while it is CRCed.
  const uint32_t icrc_offset = FinishHeaders(frame, route_, transport_len);
  uint32_t crc = IcrcTemplateBegin(frame, headers_, headers - kBthBytes);
  crc = GatherPayloadCrc(w, offset, seg, payload, crc);
  crc = Crc32Update(crc, payload + seg, frame + icrc_offset - (payload + seg));  // pad
  StoreLe32(frame + icrc_offset, Crc32Final(crc));
  return icrc_offset + kIcrcBytes;
}

}  // namespace droce::transport
