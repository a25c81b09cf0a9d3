// The responder's states, and every way a request can fail at it as one
// table (doc/transport.md draws both). Each error: the NAK it
// is answered with (IBTA 9.7.5.2.x, Table 43 AETH codes), the status the
// receive WQE it held completes with, the status the requester's WQE
// completes with when that NAK comes back (9.9.2, as rxe's check_ack), the
// affiliated asynchronous event (11.6.3.1), and the counter it moves. The
// responder (responder.cc) and the completer (completer.cc) both read it;
// nothing else restates a syndrome or a status.
#ifndef DROCE_LIB_TRANSPORT_STATES_H_
#define DROCE_LIB_TRANSPORT_STATES_H_

#include <array>
#include <cstdint>

#include "queue/completion.h"
#include "transport/counters.h"
#include "wire/headers.h"

// A state machine's step: one function per state, inlined into the loop
// that runs them (the per-packet path pays no call per step). Defined in,
// and used only by, the .cc of its state machine.
#define DROCE_STEP [[gnu::always_inline]] inline

namespace droce::transport {

// The affiliated asynchronous event a transport error raises when it moves a
// QP to ERR (IBTA 11.6.3.1, ibv_event_type): a responder that detected an
// access violation (NAK remote access error) raises "Local Access Violation
// Work Queue Error" (IBV_EVENT_QP_ACCESS_ERR), one that detected an invalid
// request (NAK invalid request) "Invalid Request Local Work Queue Error"
// (IBV_EVENT_QP_REQ_ERR); everything else "Local Work Queue Catastrophic
// Error" (IBV_EVENT_QP_FATAL). kNone while no transport error happened (a
// move to ERR the program asked for raises nothing).
enum class QpEvent : uint8_t { kNone, kFatal, kRequestError, kAccessError };

// The requester's steps (requester.cc, Qp::TransmitRequests), as
// rxe_req.c: each call walks the send queue from its next WQE, one packet
// per pass through kBuildPacket, until the burst is full or a step says
// wait (kDone). RC, UC and UD run the same steps; UD's WQEs are one packet.
enum class ReqState : uint8_t {
  kGetWqe,       // the WQE at sq_next (none: done); the pacer may hold the burst
  kShortRequest,  // a new one-packet SEND/WRITE that may go now: started and built in one step
  kCheckLimits,  // a new WQE: SQD starts nothing; fence (10.8.3.3), max_rd_atomic (9.9.3.1.3)
  kStartWqe,     // LOCAL_INV / BIND_MW run here (10.6.7.2); lkeys checked, PSNs assigned (9.7.1)
  kCheckWindow,  // at most max_inflight_packets unacknowledged PSNs
  kCheckLength,  // UD: a message longer than the path MTU never goes out (C10-93.1.1)
  kCheckSges,    // the payload's regions are still registered (else LOC_PROT_ERR)
  kBuildPacket,  // opcode from the opcode table (wire::OpcodeFor), headers, payload, ICRC
  kUpdate,       // count and pace the packet; UC completes at its last packet (9.8.1), RC arms the timer
  kDone,
  kCount,
};

inline constexpr std::array<const char*, static_cast<size_t>(ReqState::kCount)> kReqStateNames = {
    "get_wqe",     "short_request", "check_limits", "start_wqe",    "check_window", "check_length",
    "check_sges",  "build_packet", "update",       "done"};
constexpr const char* ReqStateName(ReqState s) { return kReqStateNames[static_cast<size_t>(s)]; }

// The responder's steps (responder.cc), in rxe's manner: each step is one
// function that returns the next state. Requests of RC and UC QPs run the
// same pipeline; the steps ask reliable() where IBTA 9.7.5 (RC) and 9.8.3
// (UC) differ.
enum class RespState : uint8_t {
  // The expected next request of a WRITE stream, placed in one step
  // (Qp::PlaceExpected); anything else goes on to check_psn.
  kPlaceExpected,
  kCheckPsn,         // 9.7.5.1.2 (RC) / 9.8.3 (UC: resynchronise on a gap)
  kCheckOpSequence,  // 9.7.5.1.3
  kCheckLength,      // 9.7.5.1.4: MTU-sized FIRST/MIDDLE, LAST up to the MTU
  kCheckResource,    // a receive WQE (9.7.5.2.8 RNR) or a READ/atomic resource (9.7.5.1.3)
  kCheckRkey,        // 9.7.5.1.5 C9-88 / 10.6.3: R_Key, PD, bounds, access, DMA length
  kExecute,          // place SEND/WRITE data, run READ or atomic (9.7.5.2.x)
  kAcknowledge,      // advance the expected PSN, coalesced ACK (9.7.5.1.1)
  kDuplicate,        // 9.7.5.1.2: re-ACK, re-execute a READ, replay an atomic
  kError,            // the request's error (RespError): NAK or UC drop
  kDone,
  kCount,
};

inline constexpr std::array<const char*, static_cast<size_t>(RespState::kCount)> kRespStateNames = {
    "place_expected", "check_psn", "check_op_sequence", "check_length", "check_resource", "check_rkey",
    "execute",   "acknowledge",       "duplicate",    "error",          "done"};
constexpr const char* RespStateName(RespState s) { return kRespStateNames[static_cast<size_t>(s)]; }

// The completer's steps (completer.cc), as rxe_comp.c: a response is
// checked against the PSNs in flight, then by kind; ACKs and NAKs act on
// the send queue, READ responses and atomic acknowledgements on the
// WQE they answer.
enum class CompState : uint8_t {
  kCheckPsn,     // stale (already acknowledged: duplicate) or never sent (bad)
  kCheckAck,     // ACKNOWLEDGE by AETH type, or a READ/atomic response
  kAck,          // 9.7.5.2.1: acknowledge up to the PSN
  kRnrNak,       // 9.7.5.2.8: wait the RNR timer, resend; rnr_retry
  kNak,          // 9.7.5.2.5 / 9.9.2: resend (PSN sequence) or complete in error
  kGetWqe,       // 9.7.5.1.6: the oldest outstanding READ/atomic, implied ACKs before it
  kAtomic,       // 9.7.5.2.2: the original value into the local buffer
  kRead,         // 9.7.5.2.3: in-order READ response segments; a gap is an implied NAK
  kComplete,     // the WQE is done: completions in order (10.8.3)
  kBadResponse,  // counted in dropped_bad_response, otherwise ignored (9.7.5.2: silently dropped)
  kSack,         // selective repeat: cumulative ACK, PSNs the responder holds, what to resend
  kDone,
  kCount,
};

inline constexpr std::array<const char*, static_cast<size_t>(CompState::kCount)> kCompStateNames = {
    "check_psn", "check_ack", "ack",      "rnr_nak",      "nak", "get_wqe",
    "atomic",    "read",      "complete", "bad_response", "sack", "done"};
constexpr const char* CompStateName(CompState s) { return kCompStateNames[static_cast<size_t>(s)]; }

// The responder's error states. RC answers each with its NAK (class B
// ones leave the QP as it is, the others move it to ERR: 9.9.3.1); UC drops
// the message silently (9.8.3).
enum class RespError : uint8_t {
  kPsnSequence,      // PSN ahead of the expected one (9.7.5.1.2): class B
  kRnr,              // no receive WQE for a SEND / WRITE with immediate (9.7.5.2.8): class B
  kOpcodeSequence,   // MIDDLE/LAST without a FIRST, FIRST inside a message (9.7.5.1.3)
  kLength,           // payload not MTU-sized where it must be, or not what the RETH said
  kMessageTooLong,   // RETH DMA length above 2^31 (9.4.x, as rxe's check_length)
  kRdAtomicOverflow, // READ/atomic beyond max_dest_rd_atomic (9.9.3.1.3)
  kAtomicAlignment,  // atomic VA not 8-byte aligned (9.4.5)
  kInvalidate,       // SEND with invalidate of a key it may not invalidate (10.6.7)
  kRecvTooSmall,     // SEND longer than the receive WQE (9.7.5.2.4 / 10.8.3.4)
  kRemoteAccess,     // R_Key, PD, bounds or access rights (9.7.5.1.5 C9-88)
  kRecvNotWritable,  // the receive WQE's buffer is not writable (remote operational)
  kCount,
};

struct RespErrorInfo {
  const char* name;
  wire::AethType nak_type;  // kNak, or kRnrNak (whose value is the RNR timer)
  uint8_t nak_code;         // AETH NAK code (kNak)
  bool fatal;               // class C/D: the responder moves to ERR after the NAK
  queue::WcStatus recv_status;  // a receive WQE the failed request held
  QpEvent event;
  uint64_t QpCounters::*counter;  // what the responder counts, besides naks_sent
  // The fault is the local receive WQE's (its buffer): UC completes it in
  // error and moves to ERR as RC does; every other UC error drops the
  // message silently.
  bool receive_fault;
  // What the requester's WQE completes with when this NAK comes back, or
  // when its retries of it run out (PSN sequence: retry_cnt; RNR: rnr_retry).
  queue::WcStatus send_status;
};

inline constexpr std::array<RespErrorInfo, static_cast<size_t>(RespError::kCount)> kRespErrors = {{
    {"psn_sequence", wire::AethType::kNak, wire::kNakPsnSequenceError, false,
     queue::WcStatus::kSuccess, QpEvent::kNone, &QpCounters::seq_naks_sent, false,
     queue::WcStatus::kRetryExcErr},
    {"rnr", wire::AethType::kRnrNak, 0, false, queue::WcStatus::kSuccess, QpEvent::kNone,
     &QpCounters::rnr_naks_sent, false, queue::WcStatus::kRnrRetryExcErr},
    {"opcode_sequence", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, nullptr, false,
     queue::WcStatus::kRemInvReqErr},
    {"length", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, nullptr, false,
     queue::WcStatus::kRemInvReqErr},
    {"message_too_long", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, nullptr, false,
     queue::WcStatus::kRemInvReqErr},
    {"rd_atomic_overflow", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, &QpCounters::rd_atomic_overflows,
     false, queue::WcStatus::kRemInvReqErr},
    {"atomic_alignment", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, nullptr, false,
     queue::WcStatus::kRemInvReqErr},
    {"invalidate", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kRemInvReqErr, QpEvent::kRequestError, nullptr, false,
     queue::WcStatus::kRemInvReqErr},
    {"recv_too_small", wire::AethType::kNak, wire::kNakInvalidRequest, true,
     queue::WcStatus::kLocLenErr, QpEvent::kRequestError, nullptr, true,
     queue::WcStatus::kRemInvReqErr},
    {"remote_access", wire::AethType::kNak, wire::kNakRemoteAccessError, true,
     queue::WcStatus::kRemAccessErr, QpEvent::kAccessError, nullptr, false,
     queue::WcStatus::kRemAccessErr},
    {"recv_not_writable", wire::AethType::kNak, wire::kNakRemoteOperationalError, true,
     queue::WcStatus::kLocProtErr, QpEvent::kFatal, nullptr, true, queue::WcStatus::kRemOpErr},
}};

constexpr const RespErrorInfo& Info(RespError e) { return kRespErrors[static_cast<size_t>(e)]; }

// What a requester's WQE completes with when the responder NAKs it with
// `code` (9.9.2): the table's row for that code. The RD-only code 4 and the
// reserved codes complete REM_OP_ERR, as rxe's check_ack does.
constexpr queue::WcStatus RequesterStatusForNak(uint8_t code) {
  for (const RespErrorInfo& e : kRespErrors) {
    if (e.nak_type == wire::AethType::kNak && e.nak_code == code) return e.send_status;
  }
  return Info(RespError::kRecvNotWritable).send_status;
}

// Every row naming one NAK code gives the requester the same status.
constexpr bool NakCodesAgree() {
  for (const RespErrorInfo& a : kRespErrors) {
    for (const RespErrorInfo& b : kRespErrors) {
      if (a.nak_type == b.nak_type && a.nak_code == b.nak_code && a.send_status != b.send_status) {
        return false;
      }
    }
  }
  return true;
}
static_assert(NakCodesAgree(), "one NAK code, one requester status");
static_assert(RequesterStatusForNak(wire::kNakInvalidRdRequest) == queue::WcStatus::kRemOpErr);

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_STATES_H_
