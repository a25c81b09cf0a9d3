// Congestion control's hooks into the IBTA paths (doc/cc.md "What the
// transport reports"): the requester calls CcNoteSent for every request
// packet it builds and the completer CcOnResponse for every response, both
// only while the QP runs an algorithm. The algorithm sees events, never the
// IBTA state: packets newly acknowledged (psn_una's advance), an RTT sample
// from the transport's own clock, and the INT echo a response carries.
#include <algorithm>

#include "transport/qp.h"
#include "transport/step_contexts.h"
#include "wire/psn.h"

namespace droce::transport {

using wire::PsnAdd;
using wire::PsnDiff;
using wire::PsnLess;

// One packet in flight is timed at a time, from its first transmission; a
// resend of it (Karn) or of anything before it ends the timing without a
// sample, since the acknowledgement may then be the resend's. True when
// `psn` is now the timed packet: it asks for an ACK (AckReq), so the sample
// is the path's RTT and not the time until the next AckReq.
bool Qp::CcNoteSent(uint32_t psn, bool retransmission, uint64_t now_ns) {
  if (retransmission) {
    if (cc_timing_.timing && !PsnLess(cc_timing_.psn, psn)) cc_timing_.timing = false;
    return false;
  }
  if (cc_timing_.timing) return false;
  cc_timing_.timing = true;
  cc_timing_.psn = psn;
  cc_timing_.sent_ns = now_ns;
  return true;
}

void Qp::CcOnResponse(const RespCtx& c) {
  cc::AckSample ack;
  const int32_t acked = PsnDiff(req_.psn_una, cc_timing_.acked_una);
  if (acked > 0) {
    ack.acked_packets = static_cast<uint32_t>(acked);
    cc_timing_.acked_una = req_.psn_una;
    if (cc_timing_.timing && PsnLess(cc_timing_.psn, req_.psn_una)) {
      cc_timing_.timing = false;
      if (c.now >= cc_timing_.sent_ns) ack.rtt_ns = std::max<uint64_t>(1, c.now - cc_timing_.sent_ns);
    }
  } else if (acked < 0) {
    cc_timing_.acked_una = req_.psn_una;  // a rewind (RESET, a new sq_psn): start counting from here
  }
  wire::IntStack echo;
  if (c.p.int_offset != 0 &&
      wire::ParseInt(c.frame + c.p.int_offset, c.p.payload_offset - c.p.int_offset, &echo) != 0 && echo.echo) {
    ack.telemetry = &echo;
  }
  if (ack.acked_packets == 0 && ack.telemetry == nullptr) return;
  cc_.OnAck(ack, c.now);
  if (ack.acked_packets > 0) CcAskWhenWindowStalls();
}

void Qp::CcAskWhenWindowStalls() {
  if (sr_ || cc_.output().window_packets == 0 || !Outstanding()) return;
  if (cc_timing_.ack_req_sent && !PsnLess(cc_timing_.ack_req_psn, req_.psn_una)) return;  // an ACK is coming
  if (req_.sq_next == sq_.tail() || RequestRoom() > 0) return;  // nothing waits, or the window has room
  // Go-back-N's retry probe (SendRetryProbe): psn_una once more with AckReq, outside the window; the
  // responder acknowledges everything it holds, and CheckProbeAnswer resends what it does not.
  ++counters_.ack_solicits;
  req_.retry_probe_pending = true;
  req_.retry_probe_sent = false;
}

uint32_t Qp::CcWriteIntRequest(uint8_t* bth_p, uint32_t header_bytes) {
  bth_p[4] |= wire::kBthIntFlag;
  return wire::WriteIntRequest(bth_p + header_bytes, wire::kIntMaxHops);
}

// A request with INT (ParsePacket checked the header): the newest records
// are echoed, an echo (a confused peer) is not.
void Qp::CcNoteInt(const ReqCtx& c) {
  wire::IntStack s;
  if (wire::ParseInt(c.frame + c.p.int_offset, c.p.payload_offset - c.p.int_offset, &s) == 0 || s.echo) return;
  int_echo_ = s;
  int_echo_pending_ = true;
}

uint32_t Qp::CcWriteIntEcho(uint8_t* bth_p, uint32_t header_bytes) {
  int_echo_pending_ = false;
  bth_p[4] |= wire::kBthIntFlag;
  return wire::WriteIntEcho(bth_p + header_bytes, int_echo_);
}

}  // namespace droce::transport
