#include "cm/connection.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "wire/byte_order.h"

namespace droce::cm {
namespace {

template <size_t N>
void CopyPd(std::array<uint8_t, N>& dst, std::span<const uint8_t> src) {
  if (src.empty()) return;  // an empty span's data() may be null: memcpy's arguments must not be
  std::memcpy(dst.data(), src.data(), std::min(N, src.size()));
}

absl::Status BadState(std::string_view what, State s) {
  std::string msg(what);
  msg += " in state ";
  msg += StateName(s);
  return absl::FailedPreconditionError(msg);
}

absl::Status CheckPd(std::span<const uint8_t> pd, size_t max) {
  if (pd.size() > max) {
    return absl::InvalidArgumentError(absl::StrCat("private data of ", pd.size(), " bytes, at most ", max));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view StateName(State s) {
  static constexpr std::string_view kNames[] = {
      "IDLE",        "REQ_SENT",  "REQ_RCVD",  "MRA_REQ_SENT", "MRA_REQ_RCVD",
      "REP_SENT",    "REP_RCVD",  "MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED",
      "DREQ_SENT",   "DREQ_RCVD", "TIMEWAIT",  "SIDR_REQ_SENT", "SIDR_REQ_RCVD",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(State::kCount));
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "UNKNOWN";
}

std::string_view UpcallName(Upcall u) {
  static constexpr std::string_view kNames[] = {
      "none",          "req_received",      "req_error",     "rep_received", "rep_error",
      "rtu_received",  "user_established",  "mra_received",  "rej_received", "dreq_received",
      "dreq_error",    "drep_received",     "timewait_exit", "sidr_req_received",
      "sidr_req_error", "sidr_rep_received",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(Upcall::kCount));
  const auto i = static_cast<size_t>(u);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

CmMessage Connection::Message(CmBody body) const {
  CmMessage m;
  m.header.tid = tid_;
  m.header.attr_id = AttrOf(body);
  m.body = std::move(body);
  return m;
}

Step Connection::Sent(CmMessage m, uint64_t timeout_ms, int retries, uint64_t now_ms) {
  last_sent_ = m;
  timeout_ms_ = timeout_ms;
  retries_left_ = retries;
  deadline_ms_ = now_ms + timeout_ms;
  return Step{.send = std::move(m)};
}

Step Connection::SendOnce(CmMessage m) {
  last_sent_ = m;
  deadline_ms_.reset();
  retries_left_ = 0;
  return Step{.send = std::move(m)};
}

void Connection::EnterTimewait(uint64_t now_ms) {
  state_ = State::kTimewait;
  retries_left_ = 0;
  deadline_ms_ = now_ms + CmTimeoutMs(static_cast<uint8_t>(std::min(config_.packet_life_time + 1, 31)));
}

void Connection::ResetToIdle() {
  state_ = State::kIdle;
  retries_left_ = 0;
  deadline_ms_.reset();
}

absl::StatusOr<Step> Connection::SendReq(const Req& req, uint64_t tid, uint64_t now_ms, uint32_t attr_mod) {
  if (state_ != State::kIdle) return BadState("REQ", state_);
  Req r = req;
  r.local_comm_id = local_comm_id_;
  tid_ = tid;
  local_qpn_ = r.local_qpn;
  local_ca_guid_ = r.local_ca_guid;
  max_cm_retries_ = r.max_cm_retries;
  state_ = State::kReqSent;
  CmMessage m = Message(r);
  m.header.attr_mod = attr_mod;
  return Sent(std::move(m), PathMs() + CmTimeoutMs(r.remote_cm_response_timeout), max_cm_retries_, now_ms);
}

absl::StatusOr<Step> Connection::SendRtu(const Rtu& rtu) {
  if (state_ != State::kRepRcvd && state_ != State::kMraRepSent) return BadState("RTU", state_);
  Rtu r = rtu;
  r.local_comm_id = local_comm_id_;
  r.remote_comm_id = remote_comm_id_;
  state_ = State::kEstablished;
  return SendOnce(Message(r));
}

absl::StatusOr<Step> Connection::SendMra(uint8_t service_timeout, std::span<const uint8_t> pd) {
  if (auto s = CheckPd(pd, kMraPrivateDataSize); !s.ok()) return s;
  Mra m;
  m.local_comm_id = local_comm_id_;
  m.remote_comm_id = remote_comm_id_;
  m.service_timeout = service_timeout;
  CopyPd(m.private_data, pd);
  if (state_ == State::kReqRcvd) {
    m.message_mraed = MsgRef::kReq;
    state_ = State::kMraReqSent;
  } else if (state_ == State::kRepRcvd) {
    m.message_mraed = MsgRef::kRep;
    state_ = State::kMraRepSent;
  } else {
    return BadState("MRA", state_);
  }
  return SendOnce(Message(m));
}

absl::StatusOr<Step> Connection::SendRep(const Rep& rep, uint64_t now_ms, uint32_t attr_mod) {
  if (state_ != State::kReqRcvd && state_ != State::kMraReqSent) return BadState("REP", state_);
  Rep r = rep;
  r.local_comm_id = local_comm_id_;
  r.remote_comm_id = remote_comm_id_;
  local_qpn_ = r.local_qpn;
  state_ = State::kRepSent;
  CmMessage m = Message(r);
  m.header.attr_mod = attr_mod;
  return Sent(std::move(m), PathMs() + response_timeout_ms_, max_cm_retries_, now_ms);
}

Rej Connection::MakeRej(uint16_t reason, std::span<const uint8_t> pd, std::span<const uint8_t> ari) const {
  Rej r;
  r.local_comm_id = local_comm_id_;
  r.remote_comm_id = remote_comm_id_;
  r.reason = reason;
  switch (state_) {
    case State::kReqRcvd:
      r.local_comm_id = 0;  // as Linux's cm_format_rej: no id was given to the peer yet
      r.message_rejected = MsgRef::kReq;
      break;
    case State::kMraReqSent:
      r.message_rejected = MsgRef::kReq;
      break;
    case State::kRepRcvd:
    case State::kMraRepSent:
      r.message_rejected = MsgRef::kRep;
      break;
    default:
      r.message_rejected = MsgRef::kOther;
      break;
  }
  CopyPd(r.private_data, pd);
  r.ari_length = static_cast<uint8_t>(std::min<size_t>(ari.size(), kRejAriSize));
  CopyPd(r.ari, ari.first(r.ari_length));
  return r;
}

absl::StatusOr<Step> Connection::SendRej(uint16_t reason, uint64_t now_ms, std::span<const uint8_t> pd,
                                         std::span<const uint8_t> ari) {
  if (auto s = CheckPd(pd, kRejPrivateDataSize); !s.ok()) return s;
  if (auto s = CheckPd(ari, kRejAriSize); !s.ok()) return s;
  const Rej r = MakeRej(reason, pd, ari);
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kReqRcvd:
    case State::kMraReqSent:
    case State::kRepRcvd:
    case State::kMraRepSent: {
      Step step = SendOnce(Message(r));
      ResetToIdle();
      return step;
    }
    case State::kRepSent:
    case State::kMraRepRcvd: {
      Step step = SendOnce(Message(r));
      EnterTimewait(now_ms);
      return step;
    }
    default:
      return BadState("REJ", state_);
  }
}

Dreq Connection::MakeDreq(std::span<const uint8_t> pd) const {
  Dreq d;
  d.local_comm_id = local_comm_id_;
  d.remote_comm_id = remote_comm_id_;
  d.remote_qpn = remote_qpn_;
  CopyPd(d.private_data, pd);
  return d;
}

Drep Connection::MakeDrep(std::span<const uint8_t> pd) const {
  Drep d;
  d.local_comm_id = local_comm_id_;
  d.remote_comm_id = remote_comm_id_;
  CopyPd(d.private_data, pd);
  return d;
}

absl::StatusOr<Step> Connection::SendDreq(uint64_t tid, uint64_t now_ms, std::span<const uint8_t> pd) {
  if (auto s = CheckPd(pd, kDreqPrivateDataSize); !s.ok()) return s;
  if (state_ != State::kEstablished) return BadState("DREQ", state_);
  tid_ = tid;
  state_ = State::kDreqSent;
  return Sent(Message(MakeDreq(pd)), PathMs() + response_timeout_ms_, max_cm_retries_, now_ms);
}

absl::StatusOr<Step> Connection::SendDrep(uint64_t now_ms, std::span<const uint8_t> pd) {
  if (auto s = CheckPd(pd, kDrepPrivateDataSize); !s.ok()) return s;
  if (state_ != State::kDreqRcvd) return BadState("DREP", state_);
  Step step = SendOnce(Message(MakeDrep(pd)));
  EnterTimewait(now_ms);
  return step;
}

Step Connection::CommEstablished() {
  if (state_ != State::kRepSent && state_ != State::kMraRepRcvd) return Step{.ignored = Ignored::kWrongState};
  state_ = State::kEstablished;
  deadline_ms_.reset();
  retries_left_ = 0;
  return Step{.upcall = Upcall::kUserEstablished};
}

absl::StatusOr<Step> Connection::SendSidrReq(const SidrReq& req, uint64_t tid, uint8_t timeout,
                                             uint8_t max_retries, uint64_t now_ms) {
  if (state_ != State::kIdle) return BadState("SIDR_REQ", state_);
  SidrReq r = req;
  r.request_id = local_comm_id_;
  sidr_request_id_ = local_comm_id_;
  tid_ = tid;
  state_ = State::kSidrReqSent;
  return Sent(Message(r), PathMs() + CmTimeoutMs(timeout), max_retries, now_ms);
}

absl::StatusOr<Step> Connection::SendSidrRep(const SidrRep& rep) {
  if (state_ != State::kSidrReqRcvd) return BadState("SIDR_REP", state_);
  SidrRep r = rep;
  r.request_id = sidr_request_id_;
  Step step = SendOnce(Message(r));
  ResetToIdle();
  return step;
}

Step Connection::Destroy(uint64_t now_ms) {
  Step step;
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd: {
      // Linux's cm_destroy_id: REJ "timeout" with the local CA GUID as ARI.
      uint8_t guid[8];
      wire::StoreBe64(guid, local_ca_guid_);
      step = SendOnce(Message(MakeRej(static_cast<uint16_t>(RejReason::kTimeout), {}, guid)));
      ResetToIdle();
      break;
    }
    case State::kReqRcvd:
    case State::kMraReqSent:
    case State::kRepRcvd:
    case State::kMraRepSent:
      step = SendOnce(Message(MakeRej(static_cast<uint16_t>(RejReason::kConsumerDefined), {}, {})));
      ResetToIdle();
      break;
    case State::kRepSent:
    case State::kMraRepRcvd:
      step = SendOnce(Message(MakeRej(static_cast<uint16_t>(RejReason::kConsumerDefined), {}, {})));
      EnterTimewait(now_ms);
      break;
    case State::kEstablished:
      step = SendOnce(Message(MakeDreq({})));
      EnterTimewait(now_ms);
      break;
    case State::kDreqSent:
      EnterTimewait(now_ms);
      break;
    case State::kDreqRcvd:
      step = SendOnce(Message(MakeDrep({})));
      EnterTimewait(now_ms);
      break;
    case State::kTimewait:
      if (!deadline_ms_) EnterTimewait(now_ms);
      break;
    case State::kSidrReqSent:
    case State::kSidrReqRcvd:
    case State::kIdle:
    case State::kCount:
      ResetToIdle();
      break;
  }
  return step;
}

Step Connection::OnMad(const CmMessage& m, uint64_t now_ms) {
  struct Dispatch {
    Connection* c;
    const CmMessage& m;
    uint64_t now;
    Step operator()(const Req& r) const { return c->OnReq(m, r, now); }
    Step operator()(const Mra& r) const { return c->OnMra(r, now); }
    Step operator()(const Rej& r) const { return c->OnRej(r, now); }
    Step operator()(const Rep& r) const { return c->OnRep(r); }
    Step operator()(const Rtu& r) const { return c->OnRtu(r); }
    Step operator()(const Dreq& r) const { return c->OnDreq(m, r); }
    Step operator()(const Drep& r) const { return c->OnDrep(r, now); }
    Step operator()(const SidrReq& r) const { return c->OnSidrReq(m, r); }
    Step operator()(const SidrRep& r) const { return c->OnSidrRep(r); }
  };
  return std::visit(Dispatch{this, m, now_ms}, m.body);
}

Step Connection::OnReq(const CmMessage& m, const Req& req, uint64_t now_ms) {
  (void)now_ms;
  if (state_ == State::kIdle) {
    remote_comm_id_ = req.local_comm_id;
    remote_ca_guid_ = req.local_ca_guid;
    remote_qpn_ = req.local_qpn;
    tid_ = m.header.tid;
    max_cm_retries_ = req.max_cm_retries;
    // What we send next (REP) waits for the active side's response time.
    response_timeout_ms_ = CmTimeoutMs(req.local_cm_response_timeout);
    state_ = State::kReqRcvd;
    return Step{.upcall = Upcall::kReqReceived};
  }
  if (req.local_comm_id != remote_comm_id_ || req.local_ca_guid != remote_ca_guid_) {
    return Step{.ignored = Ignored::kWrongCommId};
  }
  switch (state_) {
    case State::kMraReqSent:  // the peer missed our MRA
      return Step{.send = last_sent_, .ignored = Ignored::kDuplicate};
    case State::kTimewait: {
      // A REQ for a connection in time wait: stale (IBTA 12.9.8.3.1, Linux cm_dup_req_handler).
      Rej r;
      r.local_comm_id = local_comm_id_;
      r.remote_comm_id = remote_comm_id_;
      r.message_rejected = MsgRef::kReq;
      r.reason = static_cast<uint16_t>(RejReason::kStaleConn);
      return Step{.send = Message(r), .ignored = Ignored::kDuplicate};
    }
    default:
      return Step{.ignored = Ignored::kDuplicate};
  }
}

Step Connection::OnMra(const Mra& mra, uint64_t now_ms) {
  if (mra.remote_comm_id != local_comm_id_) return Step{.ignored = Ignored::kWrongCommId};
  const bool for_req = mra.message_mraed == MsgRef::kReq &&
                       (state_ == State::kReqSent || state_ == State::kMraReqRcvd);
  const bool for_rep = mra.message_mraed == MsgRef::kRep &&
                       (state_ == State::kRepSent || state_ == State::kMraRepRcvd);
  if (!for_req && !for_rep) return Step{.ignored = Ignored::kWrongState};
  const bool repeated = state_ == State::kMraReqRcvd || state_ == State::kMraRepRcvd;
  if (for_req) remote_comm_id_ = mra.local_comm_id;
  state_ = for_req ? State::kMraReqRcvd : State::kMraRepRcvd;
  // The peer asks for more time: the outstanding message waits for its
  // service timeout before it is sent again (Linux cm_mra_handler).
  timeout_ms_ = PathMs() + CmTimeoutMs(mra.service_timeout);
  deadline_ms_ = now_ms + timeout_ms_;
  return Step{.upcall = repeated ? Upcall::kNone : Upcall::kMraReceived,
              .ignored = repeated ? Ignored::kDuplicate : Ignored::kNo};
}

Step Connection::OnRej(const Rej& rej, uint64_t now_ms) {
  // A REJ "timeout" from an active side that gave up (or died) names the
  // connection by its sender's id and CA GUID (the ARI), as it never learnt
  // ours (Linux cm_acquire_rejected_id); any other REJ carries our id.
  if (rej.reason == static_cast<uint16_t>(RejReason::kTimeout) && rej.ari_length >= 8) {
    if (rej.local_comm_id != remote_comm_id_ || wire::LoadBe64(rej.ari.data()) != remote_ca_guid_) {
      return Step{.ignored = Ignored::kWrongCommId};
    }
  } else if (rej.remote_comm_id != local_comm_id_) {
    return Step{.ignored = Ignored::kWrongCommId};
  }
  const bool stale = rej.reason == static_cast<uint16_t>(RejReason::kStaleConn);
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kReqRcvd:
    case State::kMraReqSent:
      if (stale) {
        EnterTimewait(now_ms);
      } else {
        ResetToIdle();
      }
      return Step{.upcall = Upcall::kRejReceived};
    case State::kDreqSent:
    case State::kRepRcvd:
    case State::kMraRepSent:
    case State::kEstablished:
      EnterTimewait(now_ms);
      return Step{.upcall = Upcall::kRejReceived};
    default:
      return Step{.ignored = Ignored::kWrongState};
  }
}

Step Connection::OnRep(const Rep& rep) {
  if (rep.remote_comm_id != local_comm_id_) return Step{.ignored = Ignored::kWrongCommId};
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
      remote_comm_id_ = rep.local_comm_id;
      remote_ca_guid_ = rep.local_ca_guid;
      remote_qpn_ = rep.local_qpn;
      state_ = State::kRepRcvd;
      deadline_ms_.reset();
      retries_left_ = 0;
      return Step{.upcall = Upcall::kRepReceived};
    case State::kEstablished:  // the peer missed our RTU
      if (last_sent_ && AttrOf(last_sent_->body) == AttrId::kRtu) {
        return Step{.send = last_sent_, .ignored = Ignored::kDuplicate};
      }
      return Step{.ignored = Ignored::kDuplicate};
    case State::kMraRepSent:  // the peer missed our MRA
      return Step{.send = last_sent_, .ignored = Ignored::kDuplicate};
    case State::kRepRcvd:
      return Step{.ignored = Ignored::kDuplicate};
    default:
      return Step{.ignored = Ignored::kWrongState};
  }
}

Step Connection::OnRtu(const Rtu& rtu) {
  if (rtu.remote_comm_id != local_comm_id_ || rtu.local_comm_id != remote_comm_id_) {
    return Step{.ignored = Ignored::kWrongCommId};
  }
  if (state_ != State::kRepSent && state_ != State::kMraRepRcvd) return Step{.ignored = Ignored::kWrongState};
  state_ = State::kEstablished;
  deadline_ms_.reset();
  retries_left_ = 0;
  return Step{.upcall = Upcall::kRtuReceived};
}

Step Connection::OnDreq(const CmMessage& m, const Dreq& dreq) {
  if (dreq.remote_comm_id != local_comm_id_ || dreq.local_comm_id != remote_comm_id_ ||
      dreq.remote_qpn != local_qpn_) {
    return Step{.ignored = Ignored::kWrongCommId};
  }
  switch (state_) {
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kEstablished:
    case State::kDreqSent:  // both sides disconnect at once: answer theirs, ours is moot
      tid_ = m.header.tid;
      state_ = State::kDreqRcvd;
      deadline_ms_.reset();
      retries_left_ = 0;
      return Step{.upcall = Upcall::kDreqReceived};
    case State::kTimewait:  // the peer missed our DREP
      if (last_sent_ && AttrOf(last_sent_->body) == AttrId::kDrep) {
        CmMessage again = *last_sent_;
        again.header.tid = m.header.tid;
        return Step{.send = again, .ignored = Ignored::kDuplicate};
      }
      return Step{.ignored = Ignored::kDuplicate};
    case State::kDreqRcvd:
      return Step{.ignored = Ignored::kDuplicate};
    default:
      return Step{.ignored = Ignored::kWrongState};
  }
}

Step Connection::OnDrep(const Drep& drep, uint64_t now_ms) {
  if (drep.remote_comm_id != local_comm_id_ || drep.local_comm_id != remote_comm_id_) {
    return Step{.ignored = Ignored::kWrongCommId};
  }
  if (state_ != State::kDreqSent && state_ != State::kDreqRcvd) return Step{.ignored = Ignored::kWrongState};
  EnterTimewait(now_ms);
  return Step{.upcall = Upcall::kDrepReceived};
}

Step Connection::OnSidrReq(const CmMessage& m, const SidrReq& req) {
  if (state_ != State::kIdle) return Step{.ignored = Ignored::kWrongState};
  sidr_request_id_ = req.request_id;
  tid_ = m.header.tid;
  state_ = State::kSidrReqRcvd;
  return Step{.upcall = Upcall::kSidrReqReceived};
}

Step Connection::OnSidrRep(const SidrRep& rep) {
  if (rep.request_id != sidr_request_id_) return Step{.ignored = Ignored::kWrongCommId};
  if (state_ != State::kSidrReqSent) return Step{.ignored = Ignored::kWrongState};
  ResetToIdle();
  return Step{.upcall = Upcall::kSidrRepReceived};
}

Step Connection::OnTimer(uint64_t now_ms) {
  if (!deadline_ms_ || now_ms < *deadline_ms_) return Step{};
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
    case State::kRepSent:
    case State::kMraRepRcvd:
    case State::kDreqSent:
    case State::kSidrReqSent:
      if (retries_left_ > 0 && last_sent_) {
        --retries_left_;
        deadline_ms_ = now_ms + timeout_ms_;
        return Step{.send = last_sent_};
      }
      break;
    case State::kTimewait:
      ResetToIdle();
      return Step{.upcall = Upcall::kTimewaitExit};
    default:
      deadline_ms_.reset();
      return Step{};
  }
  // Out of retries (Linux cm_process_send_error: no REJ is sent).
  switch (state_) {
    case State::kReqSent:
    case State::kMraReqRcvd:
      ResetToIdle();
      return Step{.upcall = Upcall::kReqError};
    case State::kRepSent:
    case State::kMraRepRcvd:
      ResetToIdle();
      return Step{.upcall = Upcall::kRepError};
    case State::kDreqSent:
      EnterTimewait(now_ms);
      return Step{.upcall = Upcall::kDreqError};
    default:  // kSidrReqSent
      ResetToIdle();
      return Step{.upcall = Upcall::kSidrReqError};
  }
}

CmMessage RejectUnmatchedReq(const CmMessage& req_msg, RejReason reason) {
  CmMessage m;
  m.header.tid = req_msg.header.tid;
  m.header.attr_id = AttrId::kRej;
  Rej r;
  if (const Req* req = std::get_if<Req>(&req_msg.body)) r.remote_comm_id = req->local_comm_id;
  r.local_comm_id = 0;
  r.message_rejected = MsgRef::kReq;
  r.reason = static_cast<uint16_t>(reason);
  m.body = r;
  return m;
}

}  // namespace droce::cm
