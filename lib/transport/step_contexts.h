// The contexts the responder's and the completer's steps pass along (one
// request, one response on its way through them): shared by the IBTA steps
// (responder.cc, completer.cc) and selective repeat's (sr/).
#ifndef DROCE_LIB_TRANSPORT_STEP_CONTEXTS_H_
#define DROCE_LIB_TRANSPORT_STEP_CONTEXTS_H_

#include "transport/qp.h"
#include "wire/opcode.h"

namespace droce::transport {

// One request on its way through the steps.
struct Qp::ReqCtx {
  const uint8_t* frame;
  const wire::ParsedPacket& p;
  const wire::OpcodeInfo& op;
  const uint8_t* bth_p;
  uint32_t psn;
  uint32_t len;            // payload bytes
  bool payload_placed;     // OnUnverifiedPacket already copied the payload
  RespError error = RespError::kCount;
  mem::MrTable::Resolved target{};  // CheckRkeyStep's resolution (READ, atomic, WRITE FIRST)
  bool first() const { return (op.roles & wire::kRoleFirst) != 0; }
  bool last() const { return (op.roles & wire::kRoleLast) != 0; }
  bool is_send() const { return (op.roles & wire::kRoleSend) != 0; }
  bool is_write() const { return (op.roles & wire::kRoleWrite) != 0; }
  bool is_read() const { return (op.roles & wire::kRoleReadRequest) != 0; }
  bool is_atomic() const { return (op.roles & wire::kRoleAtomic) != 0; }
  RespState Fail(RespError e) {
    error = e;
    return RespState::kError;
  }
};

// One response on its way through the completer's steps.
struct Qp::RespCtx {
  const uint8_t* frame;
  const wire::ParsedPacket& p;
  const wire::OpcodeInfo& op;
  const uint8_t* bth_p;
  uint32_t psn;
  uint64_t now;
  bool payload_placed = false;  // OnUnverifiedPacket already copied the READ response's payload
  uint8_t syndrome = 0;
  SendWqe* wqe = nullptr;  // the READ/atomic a response answers
};

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_STEP_CONTEXTS_H_
