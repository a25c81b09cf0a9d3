// QP creation, the verbs state machine, posting, and the per-QP scheduler.
#include "transport/qp.h"

#include <bit>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_format.h"
#include "transport/sr/selective_repeat.h"
#include "wire/icrc.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcStatus;

Qp::Qp(uint32_t qpn, const QpCaps& caps, const QpEnv& env)
    : qpn_(qpn),
      caps_(caps),
      env_(env),
      sq_(caps.max_send_wr),
      rq_(env.srq ? 1 : caps.max_recv_wr),
      resources_(kMaxRdAtomic),
      // Responses queued between transmit rounds: ACKs coalesce, so this
      // bounds READ/atomic responses in flight plus NAKs.
      actions_(kMaxRdAtomic * 2 + 8) {
  cc_.Start(env.cc, env.cc_params);
  int_requests_ = env.cc != nullptr && env.cc->needs_int;
  if (caps.type == QpType::kUd) {
    mtu_ = caps.port_mtu;
    ud_src_port_ = UdSourcePort(qpn);
  }
  if (env.selective_repeat && caps.type == QpType::kRc) (void)SetSelectiveRepeat(true);
  SizeSendQueueArrays();
}

Qp::~Qp() = default;

void Qp::SizeSendQueueArrays() {
  const uint32_t n = sq_.capacity();
  if (n == sq_arrays_size_) return;
  sq_ext_ = NewSlotArray<SendWqeExt>(n);
  sq_epoch_ = NewSlotArray<uint64_t>(n);
  sq_staged_ = NewSlotArray<SendWr>(n);
  sq_arrays_size_ = n;
}

// Selective repeat is a property of the connection, chosen before it is
// made (RESET/INIT): the device's default at creation, or what ECE agreed
// (doc/transport.md "Selective repeat", doc/cm.md).
absl::Status Qp::SetSelectiveRepeat(bool on) {
  if (on && !reliable()) return absl::InvalidArgumentError("selective repeat is for RC QPs only");
  if (state_ != QpState::kReset && state_ != QpState::kInit) {
    return absl::FailedPreconditionError("selective repeat is chosen before RTR");
  }
  if (!on) {
    sr_chosen_.reset();
  } else if (!sr_chosen_) {
    sr_chosen_ = std::make_unique<SelectiveRepeat>(*this);  // control path
  }
  sr_ = sr_chosen_.get();
  return absl::OkStatus();
}

absl::Status Qp::SetCongestionControl(const cc::Ops* ops, const void* params) {
  if (state_ != QpState::kReset && state_ != QpState::kInit) {
    return absl::FailedPreconditionError("congestion control is chosen before RTR");
  }
  if (ops != nullptr && params == nullptr) return absl::InvalidArgumentError("an algorithm needs its parameters");
  cc_.Start(ops, params);
  int_requests_ = ops != nullptr && ops->needs_int;
  cc_timing_ = CcTiming{};
  cc_timing_.acked_una = req_.psn_una;
  return absl::OkStatus();
}

namespace {

struct Transition {
  QpState from, to;
  uint32_t required, optional;
};

constexpr uint32_t kAlwaysOk = kAttrState | kAttrCurState;

// IBTA 10.3.1 / Table 91 (RC columns), as ib_modify_qp_is_ok enforces it.
constexpr Transition kTransitions[] = {
    {QpState::kReset, QpState::kInit, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0},
    {QpState::kInit, QpState::kInit, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
    {QpState::kInit, QpState::kRtr,
     kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer,
     kAttrAltPath | kAttrAccessFlags | kAttrPkeyIndex},
    {QpState::kRtr, QpState::kRts,
     kAttrSqPsn | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic,
     kAttrAltPath | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState},
    {QpState::kRts, QpState::kRts, 0,
     kAttrAccessFlags | kAttrMinRnrTimer | kAttrAltPath | kAttrPathMigState},
    {QpState::kRts, QpState::kSqd, 0, kAttrEnSqdAsyncNotify},
    {QpState::kSqd, QpState::kRts, 0,
     kAttrAccessFlags | kAttrMinRnrTimer | kAttrAltPath | kAttrPathMigState},
    {QpState::kSqd, QpState::kSqd, 0,
     kAttrAv | kAttrTimeout | kAttrRetryCnt | kAttrRnrRetry | kAttrMaxQpRdAtomic |
         kAttrMaxDestRdAtomic | kAttrAccessFlags | kAttrMinRnrTimer | kAttrPathMigState |
         kAttrAltPath | kAttrPkeyIndex},
};

// UC (Table 91's UC columns): no retry, RNR or RDMA-atomic attributes.
constexpr Transition kUcTransitions[] = {
    {QpState::kReset, QpState::kInit, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags, 0},
    {QpState::kInit, QpState::kInit, 0, kAttrPkeyIndex | kAttrPort | kAttrAccessFlags},
    {QpState::kInit, QpState::kRtr, kAttrAv | kAttrPathMtu | kAttrDestQpn | kAttrRqPsn,
     kAttrAltPath | kAttrAccessFlags | kAttrPkeyIndex},
    {QpState::kRtr, QpState::kRts, kAttrSqPsn, kAttrAltPath | kAttrAccessFlags | kAttrPathMigState},
    {QpState::kRts, QpState::kRts, 0, kAttrAccessFlags | kAttrAltPath | kAttrPathMigState},
    {QpState::kRts, QpState::kSqd, 0, kAttrEnSqdAsyncNotify},
    {QpState::kSqd, QpState::kRts, 0, kAttrAccessFlags | kAttrAltPath | kAttrPathMigState},
    {QpState::kSqd, QpState::kSqd, 0,
     kAttrAv | kAttrAccessFlags | kAttrPathMigState | kAttrAltPath | kAttrPkeyIndex},
    {QpState::kSqe, QpState::kRts, 0, kAttrAccessFlags},
};

// UD (Table 91's UD columns, as ib_modify_qp_is_ok): a Q_Key instead of a
// path; no access flags, AV, PSN for the receive side or retry attributes.
constexpr Transition kUdTransitions[] = {
    {QpState::kReset, QpState::kInit, kAttrPkeyIndex | kAttrPort | kAttrQkey, 0},
    {QpState::kInit, QpState::kInit, 0, kAttrPkeyIndex | kAttrPort | kAttrQkey},
    {QpState::kInit, QpState::kRtr, 0, kAttrPkeyIndex | kAttrQkey},
    {QpState::kRtr, QpState::kRts, kAttrSqPsn, kAttrQkey},
    {QpState::kRts, QpState::kRts, 0, kAttrQkey},
    {QpState::kRts, QpState::kSqd, 0, kAttrEnSqdAsyncNotify},
    {QpState::kSqd, QpState::kRts, 0, kAttrQkey},
    {QpState::kSqd, QpState::kSqd, 0, kAttrPkeyIndex | kAttrQkey},
    {QpState::kSqe, QpState::kRts, 0, kAttrQkey},
};

// A WRITE or SEND of one SGE without inline data: the WR that PostSend's
// and PublishSend's kOneSge steps take (valid on any RC or UC QP whose SGE
// limit and max_msg_sz allow it: OneSgeFits).
[[gnu::always_inline]] inline bool IsOneSgeWriteOrSend(const SendWr& wr) {
  static_assert(static_cast<int>(WrOpcode::kRdmaWrite) == 0 && static_cast<int>(WrOpcode::kSend) == 2);
  return wr.num_sge == 1 && (static_cast<uint8_t>(wr.opcode) & ~uint8_t{2}) == 0 && !(wr.flags & kSendInline);
}

}  // namespace

// The transition's attribute mask against IBTA's tables (or, for a move to
// RESET or ERR, the state alone).
absl::Status Qp::CheckTransition(QpState cur, QpState next, uint32_t mask) const {
  if ((mask & kAttrState) && (next == QpState::kReset || next == QpState::kErr)) {
    if (mask & ~kAlwaysOk) {
      return absl::InvalidArgumentError("only the state may be given for a move to RESET or ERR");
    }
    return absl::OkStatus();
  }
  const Transition* t = nullptr;
  const auto find = [&](const auto& table) {
    for (const Transition& x : table) {
      if (x.from == cur && x.to == next) t = &x;
    }
  };
  if (reliable()) {
    find(kTransitions);
  } else if (ud()) {
    find(kUdTransitions);
  } else {
    find(kUcTransitions);
  }
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("no transition %s -> %s", QpStateName(cur), QpStateName(next)));
  }
  if ((mask & t->required) != t->required) {
    return absl::InvalidArgumentError(absl::StrFormat("%s -> %s requires attribute mask 0x%x (missing 0x%x)",
                                                      QpStateName(cur), QpStateName(next), t->required,
                                                      t->required & ~mask));
  }
  if (mask & ~(t->required | t->optional | kAlwaysOk)) {
    return absl::InvalidArgumentError(absl::StrFormat("attribute mask 0x%x not allowed for %s -> %s",
                                                      mask & ~(t->required | t->optional | kAlwaysOk),
                                                      QpStateName(cur), QpStateName(next)));
  }
  return absl::OkStatus();
}

// The values the mask selects, each in its range; nothing changes yet.
absl::Status Qp::CheckAttributeValues(const QpAttr& a, uint32_t mask) {
  if ((mask & kAttrPathMtu) && MtuBytesToEnum(a.path_mtu) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("path MTU %u is not 256..4096", a.path_mtu));
  }
  if ((mask & kAttrRetryCnt) && a.retry_cnt > 7) return absl::InvalidArgumentError("retry_cnt > 7");
  if ((mask & kAttrRnrRetry) && a.rnr_retry > 7) return absl::InvalidArgumentError("rnr_retry > 7");
  if ((mask & kAttrMinRnrTimer) && a.min_rnr_timer > 31) {
    return absl::InvalidArgumentError("min_rnr_timer > 31");
  }
  if ((mask & kAttrTimeout) && a.timeout > 31) return absl::InvalidArgumentError("timeout > 31");
  if ((mask & kAttrMaxQpRdAtomic) && a.max_rd_atomic > kMaxRdAtomic) {
    return absl::InvalidArgumentError(absl::StrFormat("max_rd_atomic > %u", kMaxRdAtomic));
  }
  if ((mask & kAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > kMaxRdAtomic) {
    return absl::InvalidArgumentError(absl::StrFormat("max_dest_rd_atomic > %u", kMaxRdAtomic));
  }
  if ((mask & kAttrDestQpn) && a.dest_qp_num > wire::kPsnMask) {
    return absl::InvalidArgumentError("dest QPN exceeds 24 bits");
  }
  if ((mask & kAttrPort) && a.port_num != 1) return absl::InvalidArgumentError("port must be 1");
  if ((mask & kAttrAccessFlags) &&
      (a.qp_access_flags & ~(mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic))) {
    return absl::InvalidArgumentError("unknown access flags");
  }
  return absl::OkStatus();
}

// The checked attributes into the QP; `route` is the new path's when the
// mask has kAttrAv.
void Qp::ApplyAttributes(const QpAttr& a, uint32_t mask, const wire::Route& route) {
  if (mask & kAttrAccessFlags) {
    attr_.qp_access_flags = a.qp_access_flags;
    ForgetExpectedRegion();  // resolved under the old flags
  }
  if (mask & kAttrPkeyIndex) attr_.pkey_index = a.pkey_index;
  if (mask & kAttrPort) attr_.port_num = a.port_num;
  if (mask & kAttrQkey) attr_.qkey = a.qkey;
  if (mask & kAttrAv) {
    attr_.ah = a.ah;
    route_ = route;
    cnp_route_ = wire::WithTrafficClass(route, static_cast<uint8_t>(env_.cnp_dscp << 2));
  }
  if (mask & kAttrPathMtu) {
    attr_.path_mtu = a.path_mtu;
    mtu_ = a.path_mtu;
    mtu_log2_ = static_cast<uint32_t>(std::countr_zero(a.path_mtu));
  }
  if (mask & kAttrTimeout) attr_.timeout = a.timeout;
  if (mask & kAttrRetryCnt) attr_.retry_cnt = req_.retry_left = a.retry_cnt;
  if (mask & kAttrRnrRetry) attr_.rnr_retry = req_.rnr_retry_left = a.rnr_retry;
  if (mask & kAttrRqPsn) attr_.rq_psn = resp_.epsn = a.rq_psn & wire::kPsnMask;
  if (mask & kAttrSqPsn) {
    attr_.sq_psn = a.sq_psn & wire::kPsnMask;
    req_.psn_next = req_.psn_una = req_.psn_high = attr_.sq_psn;
    cc_timing_ = CcTiming{};
    cc_timing_.acked_una = attr_.sq_psn;
    if (sr_chosen_) sr_chosen_->SetSendPsn(attr_.sq_psn);
  }
  if (mask & kAttrMaxQpRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & kAttrMaxDestRdAtomic) attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kAttrMinRnrTimer) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & kAttrDestQpn) attr_.dest_qp_num = a.dest_qp_num;
  if ((mask & (kAttrAv | kAttrDestQpn)) && route_.len != 0) {
    headers_ = wire::MakeHeaderTemplate(route_, 0xFFFF, attr_.dest_qp_num);
  }
}

// Back to a freshly created QP: queues emptied without completions.
void Qp::ResetToFresh() {
  state_ = QpState::kReset;
  sq_.Reset(caps_.max_send_wr);
  SizeSendQueueArrays();
  rq_.Reset(env_.srq ? 1 : caps_.max_recv_wr);
  actions_.Reset(kMaxRdAtomic * 2 + 8);
  for (Resource& r : resources_) r = Resource{};
  // Nothing of the old connection may act on the next one (PSNs, MSN,
  // a message half received, a CNP owed, an implied NAK or RNR NAK being
  // waited out): the per-connection state is value-initialised.
  req_ = {};
  resp_ = {};
  cnp_ = {};
  cc_timing_ = {};
  cc_.Restart();
  int_echo_pending_ = false;
  if (sr_chosen_) sr_chosen_->Reset();
  sr_ = sr_chosen_.get();  // a fallback to go-back-N lasts one connection
  error_event_ = QpEvent::kNone;
}

absl::Status Qp::Modify(const QpAttr& a, uint32_t mask) {
  const QpState cur = state_;
  if ((mask & kAttrCurState) && a.cur_qp_state != cur) {
    return absl::InvalidArgumentError(absl::StrFormat("cur_qp_state %s does not match the QP's state %s",
                                                      QpStateName(a.cur_qp_state), QpStateName(cur)));
  }
  const QpState next = (mask & kAttrState) ? a.qp_state : cur;
  if (absl::Status s = CheckTransition(cur, next, mask); !s.ok()) return s;
  if (absl::Status s = CheckAttributeValues(a, mask); !s.ok()) return s;
  wire::Route route = route_;
  if (mask & kAttrAv) {
    if (env_.make_route == nullptr) return absl::FailedPreconditionError("device cannot route");
    const uint32_t dqpn = (mask & kAttrDestQpn) ? a.dest_qp_num : attr_.dest_qp_num;
    absl::Status s = env_.make_route(env_.route_ctx, a.ah, qpn_, dqpn, &route);
    if (!s.ok()) return s;
  }
  ApplyAttributes(a, mask, route);
  if (next == QpState::kErr && cur != QpState::kErr) {
    EnterError();
  } else if (next == QpState::kReset) {
    ResetToFresh();
  } else {
    state_ = next;
  }
  attr_.qp_state = state_;
  return absl::OkStatus();
}

int Qp::PostRecv(const RecvWr& wr) {
  if (env_.srq != nullptr) return EINVAL;  // receives go to the SRQ
  if (state_ == QpState::kReset) return EINVAL;
  if (wr.num_sge > caps_.max_recv_sge) return EINVAL;
  if (rq_.published() != 0) TakePublishedRecvs();  // posts published earlier go first
  RecvWr* slot = NextRecvSlot();
  if (slot == nullptr) {
    // Verbs: posting to a QP in ERR completes the WR with a flush error,
    // even with the queue full.
    if (state_ != QpState::kErr) return ENOMEM;
    queue::Completion c;
    c.wr_id = wr.wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = queue::WcOpcode::kRecv;
    c.qp_num = qpn_;
    env_.recv_cq->Push(c);
    return 0;
  }
  *slot = wr;
  rq_.PublishOwn();
  if (state_ == QpState::kErr) TakePublishedRecvs();  // flushes it (and what is queued)
  return 0;
}

RecvWr* Qp::NextRecvSlot() { return rq_.ProducerSlot(); }

int Qp::PublishRecv() {
  if (rq_.ProducerSlot()->num_sge > caps_.max_recv_sge) return EINVAL;
  rq_.Publish();
  return 0;
}

void Qp::TakePublishedRecvs() {
  rq_.TakeAllPublished();
  if (state_ == QpState::kErr) FlushReceiveQueue();  // posted into ERR (or while the QP went there)
}

// FillSendWqe past the fields every WR has: the SGEs, inline data and the
// operands of the opcodes other than WRITE and SEND.
template <bool kCommon>
[[gnu::always_inline]] inline void Qp::FillSendWqeRest(SendWqe& w, const SendWr& wr) {
  w.num_sge = static_cast<uint8_t>(wr.num_sge);
  if (wr.num_sge == 1) {
    w.local_addr = wr.sg_list[0].addr;
    w.lkey = wr.sg_list[0].lkey;
  } else if (wr.num_sge > 1) {
    SendWqeExt& x = Ext(w);
    for (uint32_t i = 0; i < wr.num_sge; ++i) x.sges[i] = wr.sg_list[i];
  }
  if (!kCommon && (wr.flags & kSendInline)) {
    // Inline data is copied now; the application may reuse its buffers at once.
    // Data a batch wrote in place (InlineBufferAhead) stays where it is.
    uint8_t* const to = Ext(w).inline_data;
    uint32_t off = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i) {
      const auto* from = reinterpret_cast<const uint8_t*>(wr.sg_list[i].addr);
      if (from != to + off) std::memcpy(to + off, from, wr.sg_list[i].length);
      off += wr.sg_list[i].length;
    }
    w.local_host = to;
  }
  // The operands only their opcode reads.
  if (wr.opcode == WrOpcode::kRdmaWrite || wr.opcode == WrOpcode::kSend) [[likely]] return;
  switch (wr.opcode) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kSend:
      break;
    case WrOpcode::kRdmaWriteWithImm:
    case WrOpcode::kSendWithImm:
      Ext(w).imm_data = wr.imm_data;
      break;
    case WrOpcode::kSendWithInv:
    case WrOpcode::kLocalInv:
      Ext(w).invalidate_rkey = wr.invalidate_rkey;
      break;
    case WrOpcode::kRdmaRead:
      Ext(w).read_done_bytes = 0;
      break;
    case WrOpcode::kAtomicCmpAndSwp:
    case WrOpcode::kAtomicFetchAndAdd: {
      SendWqeExt& x = Ext(w);
      x.compare_add = wr.compare_add;
      x.swap = wr.swap;
      x.read_done_bytes = 0;
      w.total_len = 8;
      break;
    }
    case WrOpcode::kBindMw:
      Ext(w).bind = wr.bind;
      break;
  }
}

// The checks every send WR passes (SGE count, max_msg_sz, opcode, an
// atomic's one 8-byte SGE, inline size); inline in ValidateForQp, its one
// caller. *total: the SGE bytes.
[[gnu::always_inline]] inline int Qp::ValidateSend(const SendWr& wr, uint64_t* total_out) const {
  if (wr.num_sge > caps_.max_send_sge) return EINVAL;
  const uint64_t total = SgeBytes(wr);
  *total_out = total;
  if (total > kMaxMessageBytes) return EINVAL;  // max_msg_sz
  const bool read_or_atomic = wr.opcode == WrOpcode::kRdmaRead ||
                              wr.opcode == WrOpcode::kAtomicCmpAndSwp ||
                              wr.opcode == WrOpcode::kAtomicFetchAndAdd;
  // WrOpcode's values are 0..kSendWithInv, all valid; an atomic has one 8-byte SGE.
  if (static_cast<uint8_t>(wr.opcode) > static_cast<uint8_t>(WrOpcode::kSendWithInv)) return EINVAL;
  if ((wr.opcode == WrOpcode::kAtomicCmpAndSwp || wr.opcode == WrOpcode::kAtomicFetchAndAdd) &&
      (wr.num_sge != 1 || wr.sg_list[0].length != 8)) {
    return EINVAL;
  }
  if (wr.flags & kSendInline) {
    if (read_or_atomic || total > caps_.max_inline_data) return EINVAL;
  }
  return 0;
}

[[gnu::always_inline]] inline int Qp::ValidateForQp(const SendWr& wr, uint64_t* total) const {
  if (const int err = ValidateSend(wr, total); err != 0) return err;
  // WRITE, WRITE_WITH_IMM, SEND, SEND_WITH_IMM are WrOpcode's values 0..3.
  static_assert(static_cast<int>(WrOpcode::kSendWithImm) == 3 && static_cast<int>(WrOpcode::kRdmaWrite) == 0);
  if (!reliable() && static_cast<uint8_t>(wr.opcode) > static_cast<uint8_t>(WrOpcode::kSendWithImm)) {
    return EINVAL;  // UC has no READ, atomics or SEND with invalidate (9.8.2)
  }
  if (ud() && wr.opcode != WrOpcode::kSend && wr.opcode != WrOpcode::kSendWithImm) {
    return EINVAL;  // UD sends datagrams only (9.8.4)
  }
  return 0;
}

// PostSend's steps. kCommon: the caller has seen the common case (an RC or
// UC QP in RTS, nothing published waiting, no inline data), whose steps
// make no call, so its instance needs no saved registers. kOneSge: moreover
// a WRITE or SEND of one SGE, valid on any RC or UC QP whose SGE limit and
// max_msg_sz allow it (ValidateForQp's other checks pass for it).
template <bool kCommon, bool kOneSge>
[[gnu::always_inline]] inline int Qp::PostSendSteps(const SendWr& wr) {
  static_assert(kCommon || !kOneSge);
  if (!kCommon && state_ != QpState::kRts && state_ != QpState::kSqd && state_ != QpState::kErr) {
    return EINVAL;
  }
  uint64_t total;
  if (kOneSge) {
    total = wr.sg_list[0].length;
    if (!OneSgeFits(caps_.max_send_sge, total)) return EINVAL;
  } else if (const int err = ValidateForQp(wr, &total); err != 0) {
    return err;
  }
  if (!kCommon && sq_.published() != 0) TakePostedSends();  // posts published earlier go first
  SendWqe* w = sq_.ProducerSlot();
  if (w == nullptr) return ENOMEM;
  if (!kCommon && ud()) {
    if (const int err = PostUdSend(wr, w); err != 0) return err;  // nothing published
  }
  static_assert(sizeof(SendWr) == 240, "a new SendWr field must be copied in FillSendWqe too");
  FillSendWqe<kCommon, kOneSge>(*w, wr, total);
  sq_.PublishOwn();
  if (!kCommon && state_ == QpState::kErr) {
    w->done = true;
    w->status = WcStatus::kWrFlushErr;
    CompleteHead();
  }
  return 0;
}

[[gnu::noinline]] int Qp::PostSendOther(const SendWr& wr) { return PostSendSteps<false, false>(wr); }
[[gnu::noinline]] int Qp::PostSendCommon(const SendWr& wr) { return PostSendSteps<true, false>(wr); }

// The common case's most common WR (a WRITE or SEND of one SGE) takes the
// steps without a loop or a call, so without saved registers; the rest of
// the common case and everything else go out of line, as tail calls.
int Qp::PostSend(const SendWr& wr) {
  if (state_ == QpState::kRts && !ud() && sq_.published() == 0 && !(wr.flags & kSendInline)) [[likely]] {
    if (IsOneSgeWriteOrSend(wr)) [[likely]] {
      return PostSendSteps<true, true>(wr);
    }
    return PostSendCommon(wr);
  }
  return PostSendOther(wr);
}

SendWr* Qp::NextSendSlot() { return SendSlotAhead(0); }

SendWr* Qp::SendSlotAhead(uint32_t ahead) {
  SendWqe* w = sq_.ProducerSlot(ahead);
  return w == nullptr ? nullptr : &sq_staged_[sq_.SlotOf(w)];
}

uint8_t* Qp::InlineBufferAhead(uint32_t ahead) {
  SendWqe* w = sq_.ProducerSlot(ahead);
  return w == nullptr ? nullptr : Ext(*w).inline_data;
}

// One staged WR: any WR the verbs post does not write straight into its
// WQE (PublishOneSge takes the one-SGE WRITE or SEND), validated whole.
int Qp::PublishSend() {
  SendWqe* w = sq_.ProducerSlot();
  if (ud()) return EINVAL;  // the address handle is the engine's to resolve (PostSend)
  const SendWr& wr = sq_staged_[sq_.SlotOf(w)];
  uint64_t total;
  if (const int err = ValidateForQp(wr, &total); err != 0) return err;
  FillSendWqe<false, false>(*w, wr, total);
  sq_.Publish();
  return 0;
}

int Qp::PublishSends(uint32_t n) {
  if (ud()) return EINVAL;  // the address handle is the engine's to resolve (PostSend)
  for (uint32_t i = 0; i < n; ++i) {
    const SendWqe* w = sq_.ProducerSlot(i);
    if (w == nullptr) return ENOMEM;
    uint64_t total;
    if (const int err = ValidateForQp(sq_staged_[sq_.SlotOf(w)], &total); err != 0) return err;
  }
  for (uint32_t i = 0; i < n; ++i) {
    SendWqe& w = *sq_.ProducerSlot(i);
    const SendWr& wr = sq_staged_[sq_.SlotOf(&w)];
    FillSendWqe<false, false>(w, wr, SgeBytes(wr));
  }
  sq_.Publish(n);
  return 0;
}

void Qp::TakePostedSends() {
  if (state_ != QpState::kErr) {
    sq_.TakeAllPublished();
    return;
  }
  while (sq_.published() != 0) {
    // Posted into ERR (or while the QP went there): completes flushed.
    SendWqe& w = sq_.TakePublished();
    w.done = true;
    w.status = WcStatus::kWrFlushErr;
    CompleteHead();
  }
}

void Qp::OnPacket(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns) {
  ++counters_.rx_packets;
  counters_.rx_bytes += p.payload_len;
  if (state_ == QpState::kReset || state_ == QpState::kInit || state_ == QpState::kErr) {
    ++counters_.dropped_wrong_state;
    return;
  }
  if (reliable() != (p.op().transport == wire::Transport::kRc)) {
    ++counters_.dropped_wrong_state;  // RC packet to a UC QP or the reverse
    return;
  }
  if ((p.op().roles & wire::kRoleSr) && !sr_) {
    ++counters_.sr_dropped;  // selective repeat was not agreed for this QP
    return;
  }
  Deliver(frame, p, now_ns, (p.op().roles & wire::kRoleRequest) != 0);
}

void Qp::OnPacketAs(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns, PacketRole role) {
  ++counters_.rx_packets;
  counters_.rx_bytes += p.payload_len;
  if (state_ == QpState::kReset || state_ == QpState::kInit || state_ == QpState::kErr) {
    ++counters_.dropped_wrong_state;
    return;
  }
  Deliver(frame, p, now_ns, role == kAsRequest);
}

inline void Qp::Deliver(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns, bool request) {
  if (request) {
    if (sr_) {
      sr_->OnRequest(frame, p, now_ns);  // out of order inside its window
      return;
    }
    OnRequest(frame, p);  // RC and UC: one pipeline (responder.cc)
  } else {
    OnResponse(frame, p, now_ns);
  }
}

uint32_t Qp::WriteHeaders(uint8_t* frame, uint8_t opcode, uint32_t psn, bool ack_req,
                            bool solicited, uint8_t** ext) const {
  // P_Key, MigReq and the destination QP come with the template.
  uint8_t* bth_p = wire::WriteHeaderTemplate(frame, headers_);
  wire::BthWriter bth(bth_p);
  bth.set_opcode(opcode);
  if (solicited) bth.set_flags(true, true, 0, 0);
  bth.set_ack_req(ack_req);
  bth.set_psn(psn);
  *ext = bth_p + wire::kBthBytes;
  return route_.len;
}

uint32_t Qp::Transmit(pktio::Frame* frames, uint32_t n, uint64_t now_ns) {
  uint32_t used = 0;
  // An ERR QP still sends what is queued (the NAK that put it there).
  if (state_ == QpState::kReset || state_ == QpState::kInit) return 0;
  while (cnp_.cnps_pending > 0 && used < n) {
    --cnp_.cnps_pending;
    uint8_t* bth_p = wire::WriteRoute(frames[used].data, cnp_route_);
    wire::BthWriter bth(bth_p);
    bth.set_opcode(wire::kCnp);
    bth.set_flags(false, false, 0, 0);
    bth.set_pkey(0xFFFF);
    bth.set_ecn_bits(false, /*becn=*/true);
    bth.set_dest_qp(attr_.dest_qp_num);
    bth.set_ack_req(false);
    bth.set_psn(0);
    std::memset(bth_p + wire::kBthBytes, 0, wire::kCnpPadBytes);  // 16 reserved bytes
    frames[used].len =
        wire::FinalizeFrame(frames[used].data, cnp_route_, wire::kBthBytes + wire::kCnpPadBytes);
    ++counters_.cnps_sent;
    ++counters_.tx_packets;
    counters_.tx_bytes += frames[used].len;
    ++used;
  }
  // Responses first: they unblock the peer's requester. Everything but CNPs
  // leaves no faster than the reaction point's rate (pacing, not bursts).
  while (used < n && !actions_.empty()) {
    if (Paced(now_ns)) return used;
    bool finished = false;
    const uint32_t len = BuildResponse(actions_.front(), frames[used], &finished);
    if (finished) {
      if (actions_.front().holds_resource) --resp_.rd_atomic_active;
      actions_.Pop();
    }
    if (len == 0) continue;
    frames[used].len = len;
    ++counters_.tx_packets;
    counters_.tx_bytes += len;
    NoteSent(len, now_ns);
    ++used;
  }
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return used;
  if (req_.rnr_resume_at != 0) {
    if (now_ns < req_.rnr_resume_at) return used;
    req_.rnr_resume_at = 0;
  }
  return TransmitRequests(frames, used, n, now_ns);
}

void Qp::OnTimer(uint64_t now_ns) {
  cc_.OnTimer(now_ns);
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return;
  if (sr_) sr_->OnTimer(now_ns);  // the tail-loss probe
  if (req_.ack_solicit_deadline != 0 && now_ns >= req_.ack_solicit_deadline) SolicitAck(now_ns);
  if (req_.retransmit_deadline == 0 || now_ns < req_.retransmit_deadline) return;
  if (!Outstanding()) {
    req_.retransmit_deadline = 0;
    return;
  }
  ++counters_.timeouts;
  cc_.OnTimeout(now_ns);
  // retry_cnt bounds consecutive retries without forward progress (IBTA
  // 9.7.6.1.3); an ACK that advances restores it. An SR QP's timer runs on
  // IRN's short RTOs: it spends a retry only per whole IBTA timeout without
  // progress, so retry-exceeded comes after the time the QP's attributes say.
  const uint64_t ibta_timeout = IbtaTimeoutNs();
  if (sr_) sr_->OnTimeout(now_ns, ibta_timeout);  // may fall back to go-back-N (sr_ null then)
  const bool spends_retry =
      !sr_ || (ibta_timeout != 0 && now_ns - req_.retry_clock_ns >= ibta_timeout);
  if (spends_retry && req_.retry_left == 0) {
    FailWqe(sq_.front(), WcStatus::kRetryExcErr);
    return;
  }
  if (spends_retry) {
    --req_.retry_left;
    req_.retry_clock_ns = now_ns;
  }
  req_.progress_since_retry = false;
  req_.implied_nak_pending = false;
  if (sr_) {
    sr_->ResendAfterTimeout();
  } else {
    // Go-back-N: the packet at psn_una alone, asking for an ACK (the retry
    // probe, SendRetryProbe); its answer decides the rest (CheckProbeAnswer).
    // A timeout does not tell a lost packet from a responder slower than
    // the window (rxe in an emulated guest can take longer than a timeout
    // for the 64 packets between two ACKs), which may still be working
    // through the window, or through a sequence NAK's retry, silently (it
    // drops what follows a gap until the gap is filled): a copy of the
    // window per timeout would queue behind it, one more each timeout.
    req_.retry_probe_pending = true;
    req_.retry_probe_sent = false;
  }
  req_.retransmit_deadline = ArmRetransmitTimer(now_ns);
}

// The newest packet, a message's last, went without AckReq (an unsignaled
// WR, doc/transport.md "Requester") and nothing was sent after it for
// ack_solicit_ns: ask for the ACK by sending it again with AckReq. The
// responder acknowledges a duplicate with everything it has (IBTA 9.7.5);
// had it been lost, the resend repairs it (or draws a sequence NAK).
void Qp::SolicitAck(uint64_t now_ns) {
  req_.ack_solicit_deadline = 0;
  if (!req_.tail_unsolicited || !Outstanding() || !wire::PsnLess(req_.psn_una, req_.psn_high)) return;
  const uint64_t quiet_since = req_.tail_sent_ns + env_.ack_solicit_ns;
  if (now_ns < quiet_since || req_.sq_next != sq_.tail()) {
    // Still sending (or more is queued, held by the pacer or an RNR wait).
    req_.ack_solicit_deadline = std::max(quiet_since, now_ns + 1);
    return;
  }
  ++counters_.ack_solicits;
  req_.tail_unsolicited = false;
  RetryFrom(wire::PsnAdd(req_.psn_high, -1));
}

void Qp::OnCongestionMark(uint64_t now_ns) {
  ++counters_.ce_marked_received;
  if (!env_.cnp_enabled || state_ == QpState::kReset || state_ == QpState::kInit) return;
  if (cnp_.cnp_ever_sent && now_ns - cnp_.last_cnp_ns < env_.min_time_between_cnps_ns) return;
  cnp_.cnp_ever_sent = true;
  cnp_.last_cnp_ns = now_ns;
  ++cnp_.cnps_pending;
}

void Qp::OnCnp(uint64_t now_ns) {
  ++counters_.cnps_received;
  cc_.OnCnp(now_ns);
}

// How many request packets the send queue could put on the wire now: none
// while the next WQE waits to start (fence, rd_atomic limit, SQD) or the
// in-flight window is full. The poll loop allocates frames by this, so a QP
// whose window is full costs no frame allocation and release per round.
uint32_t Qp::RequestRoom() const {
  if (req_.sq_next == sq_.tail() || (state_ != QpState::kRts && state_ != QpState::kSqd)) return 0;
  const SendWqe& w = sq_.at(req_.sq_next);
  uint32_t next_psn = w.next_psn;
  if (!w.started) {
    if (state_ == QpState::kSqd || !MayStart(w)) return 0;
    if (IsLocalOp(w)) return 1;
    next_psn = req_.psn_next;
  }
  return WindowRoom(wire::PsnDiff(next_psn, req_.psn_una));
}

uint32_t Qp::SrWindowRoom(int32_t in_flight) const { return sr_->WindowRoom(in_flight); }

uint32_t Qp::PendingRetransmits() const {
  if (sr_) return sr_->PendingRetransmits();
  return req_.retry_probe_pending ? 1 : 0;
}

uint32_t Qp::posted_receives() const {
  return rq_.size() + rq_.published() + (resp_.recv_wqe_held ? 1 : 0) +
         (sr_chosen_ ? sr_chosen_->held_receives() : 0);
}

// Request packets queued from sq_next on, counted up to `cap` (an upper
// bound: a READ or atomic counts its one request packet, a local operation
// one). Without it the demand was the whole window's room: one 64 B WRITE's
// doorbell took a burst of buffers and the device moved the 31 it did not
// use aside on every flush (a fifth of ib_write_bw -s 64's posting thread).
uint32_t Qp::QueuedRequestPackets(uint32_t cap) const {
  // Every WQE counts at least one: with `cap` of them queued, no walk.
  if (sq_.tail() - req_.sq_next >= cap) return cap;
  // READ, atomics and the local ops count one each (IsReadOrAtomic,
  // IsLocalOp): one bit test per WQE, asked on every transmit call.
  constexpr uint32_t kOneEach = 1u << static_cast<uint32_t>(WrOpcode::kRdmaRead) |
                                1u << static_cast<uint32_t>(WrOpcode::kAtomicCmpAndSwp) |
                                1u << static_cast<uint32_t>(WrOpcode::kAtomicFetchAndAdd) |
                                1u << static_cast<uint32_t>(WrOpcode::kLocalInv) |
                                1u << static_cast<uint32_t>(WrOpcode::kBindMw);
  const bool ud_qp = ud();
  uint32_t n = 0;
  for (uint32_t i = req_.sq_next; i != sq_.tail() && n < cap; ++i) {
    const SendWqe& w = sq_.at(i);
    if ((kOneEach >> static_cast<uint32_t>(w.opcode)) & 1) {
      n += 1;
    } else if (!w.started) {
      n += ud_qp ? 1 : PacketsForLength(w.total_len);  // PacketsFor(w), w neither READ nor atomic
    } else {
      const int32_t left = wire::PsnDiff(w.last_psn, w.next_psn) + 1;
      n += left > 0 ? static_cast<uint32_t>(left) : 1;
    }
  }
  return std::min(n, cap);
}

uint32_t Qp::TransmitDemand(uint64_t now_ns, uint32_t burst) const {
  uint32_t n = cnp_.cnps_pending;  // CNPs leave even while the pacer holds the rest
  if (Paced(now_ns)) return std::min(n, burst);
  for (uint32_t i = actions_.head(); i != actions_.tail() && n < burst; ++i) {
    if (actions_.at(i).kind == ActionKind::kReadResponse) return burst;  // many packets
    ++n;
  }
  if (req_.rnr_resume_at == 0 || now_ns >= req_.rnr_resume_at) {
    const uint32_t room = RequestRoom();
    const uint32_t requests = room == 0 ? 0 : std::min(room, QueuedRequestPackets(burst));
    n += std::min(requests + PendingRetransmits(), burst);
  }
  return std::min(n, burst);
}

uint64_t Qp::NextDeadline() const {
  uint64_t d = UINT64_MAX;
  const auto take = [&d](uint64_t t) {
    if (t != 0 && t < d) d = t;
  };
  take(cc_.next_deadline_ns());
  // The pacer's release, for what it holds back (CNPs it never holds).
  const uint64_t pace = cc_.paced_until_ns();
  if (state_ == QpState::kReset || state_ == QpState::kInit) return d == UINT64_MAX ? 0 : d;
  if (!actions_.empty()) take(pace);
  if (state_ == QpState::kRts || state_ == QpState::kSqd) {
    take(req_.retransmit_deadline);
    take(req_.ack_solicit_deadline);
    if (sr_) take(sr_->tlp_deadline());
    // Requests waiting for the RNR timer and the pacer: the later of the two.
    const uint64_t hold = std::max(req_.rnr_resume_at, pace);
    if (hold != 0 && (RequestRoom() > 0 || PendingRetransmits() > 0)) take(hold);
  }
  return d == UINT64_MAX ? 0 : d;
}

bool Qp::HasTransmitWork(uint64_t now_ns) const {
  if (state_ == QpState::kReset || state_ == QpState::kInit) return false;
  if (cnp_.cnps_pending > 0) return true;
  if (Paced(now_ns)) return false;
  if (!actions_.empty()) return true;
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return false;
  if (req_.rnr_resume_at != 0 && now_ns < req_.rnr_resume_at) return false;
  return RequestRoom() > 0 || PendingRetransmits() > 0;
}

bool Qp::HasWork() const {
  return cnp_.cnps_pending > 0 || !actions_.empty() || (req_.sq_next != sq_.tail() && state_ == QpState::kRts) ||
         (PendingRetransmits() > 0 && state_ == QpState::kRts) ||
         req_.retransmit_deadline != 0 || req_.rnr_resume_at != 0 || cc_.rate_limited();
}

void Qp::EnterError() {
  // What was accepted is acknowledged before the QP stops (the ACK leaves in
  // ERR: responses go before the state test of the transmit round).
  if (resp_.ack_owed && reliable()) QueueAck(wire::PsnAdd(resp_.epsn, -1));
  state_ = QpState::kErr;
  attr_.qp_state = state_;
  req_.retransmit_deadline = 0;
  req_.ack_solicit_deadline = 0;
  req_.rnr_resume_at = 0;
  FlushAll();
}

void Qp::FlushAll() {
  TakePosted();  // what was published but not yet taken flushes too
  // Every outstanding send WR completes with FLUSH_ERR (signaled or not),
  // in order, after any that already failed with a real status.
  for (uint32_t i = sq_.head(); i != sq_.tail(); ++i) {
    SendWqe& w = sq_.at(i);
    if (!w.done) {
      w.done = true;
      w.status = WcStatus::kWrFlushErr;
    }
  }
  req_.sq_next = sq_.tail();
  CompleteHead();
  if (resp_.recv_wqe_held) {
    resp_.recv_wqe_held = false;
    queue::Completion c;
    c.wr_id = resp_.recv_wqe.wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = queue::WcOpcode::kRecv;
    c.qp_num = qpn_;
    env_.recv_cq->Push(c);
  }
  if (sr_chosen_) sr_chosen_->FlushReceives();  // receives held for messages in its window
  FlushReceiveQueue();
  resp_.in_message = InMessage::kNone;
}

void Qp::FlushReceiveQueue() {
  while (!rq_.empty()) {
    queue::Completion c;
    c.wr_id = rq_.front().wr_id;
    c.status = WcStatus::kWrFlushErr;
    c.opcode = queue::WcOpcode::kRecv;
    c.qp_num = qpn_;
    env_.recv_cq->Push(c);
    rq_.Pop();
  }
}

}  // namespace droce::transport
