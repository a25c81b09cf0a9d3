// Selective repeat between droce peers that agreed on it (doc/transport.md
// "Selective repeat", after IRN, SIGCOMM 2018): the responder places SR
// SEND/WRITE packets out of order inside a window and says what it holds
// (SR_SACK); the requester resends only what is missing, keeps at most a
// bandwidth-delay product in flight, measures its RTOs, and falls back to
// go-back-N toward a peer that never answers as SR.
//
// A component of its QP: the QP allocates one when selective repeat is
// chosen (Qp::SetSelectiveRepeat) and reaches it through the hooks below,
// each called under `if (sr_)` from the IBTA files (qp.cc, requester.cc,
// completer.cc, responder.cc), which carry no selective-repeat state or
// rules of their own. Its files:
//   sr/requester.cc  what to resend and the resending, the window, RTT
//                    samples and the RTOs, RACK, the tail-loss probe, the
//                    fallback;
//   sr/completer.cc  what an ACK or SACK acknowledges, READ responses
//                    placed ahead of a lost one, F-RTO;
//   sr/responder.cc  requests placed out of order, the receive WQEs held
//                    for them, the SACK;
//   sr/timers.cc     its share of a timeout.
#ifndef DROCE_LIB_TRANSPORT_SR_SELECTIVE_REPEAT_H_
#define DROCE_LIB_TRANSPORT_SR_SELECTIVE_REPEAT_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "transport/qp.h"
#include "transport/sr/state.h"
#include "transport/step_contexts.h"
#include "wire/psn.h"

namespace droce::transport {

class SelectiveRepeat {
 public:
  explicit SelectiveRepeat(Qp& qp) : qp_(qp) {}

  // --- the connection (qp.cc)
  void Reset() {  // a move to RESET: nothing of the old connection remains
    req_ = {};
    resp_ = {};
  }
  void SetSendPsn(uint32_t psn) { req_.sack_base = req_.retx_next = req_.retx_end = psn; }

  // --- the requester: what to send next (sr/requester.cc)
  // What the SACKs or a timeout showed lost, into frames[used, n), before
  // any new packet; returns the new `used`.
  uint32_t Retransmit(pktio::Frame* frames, uint32_t used, uint32_t n, uint64_t now_ns);
  uint32_t PendingRetransmits() const {
    const int32_t n = wire::PsnDiff(req_.retx_end, req_.retx_next);
    return n > 0 ? static_cast<uint32_t>(n) : 0;
  }
  // Request packets the window lets out with `span` PSNs past psn_una: at
  // most the in-flight cap still in the path (sent, neither acknowledged
  // nor SACKed), and the span inside the per-PSN state (kSrWindow).
  uint32_t WindowRoom(int32_t span) const;
  // Its in-flight cap: the path's bandwidth-delay product (the device's
  // setting, inside the per-PSN state), or congestion control's window.
  uint32_t inflight_cap() const {
    return qp_.InflightCap(std::min(qp_.env_.sr_max_inflight_packets, kSrWindow - 1));
  }
  // AckReq at least every this many packets of a long message: also four
  // times per in-flight cap, or a cap below ack_req_every would stall until
  // the tail-loss probe with nothing asked.
  uint32_t ack_req_every() const { return std::min(qp_.env_.ack_req_every, std::max(1u, inflight_cap() / 4)); }
  // A message that consumes a receive gets its receive sequence number.
  void OnWqeStarted(Qp::SendWqe& w) {
    const WrOpcode op = w.opcode;
    if (op == WrOpcode::kSend || op == WrOpcode::kSendWithImm || op == WrOpcode::kSendWithInv ||
        op == WrOpcode::kRdmaWriteWithImm) {
      qp_.Ext(w).recv_seq = req_.recv_seq++;  // which receive WQE of the peer it consumes
    }
  }
  // Every request packet built (`data`: a SEND/WRITE packet): RACK's send
  // order, Karn's rule, the RTT timing.
  void OnRequestBuilt(uint32_t psn, bool retransmission, bool data, uint64_t now);
  void OnAckRequested(uint32_t psn);  // a SEND/WRITE packet asks for an ACK (F-RTO)
  // The SRETH of an SR SEND/WRITE packet (it replaces the RETH): where the
  // packet's payload goes, so that it can be placed on its own.
  static void WriteSrEth(uint8_t* sreth, const Qp::SendWqe& w, uint32_t recv_seq, uint32_t offset,
                         bool write);
  // After a request packet left: the high RTO once more than a few are in
  // flight; the tail-loss probe re-armed.
  void OnPacketSent(uint64_t now);
  void NoteWindow(bool full, uint64_t now);  // counters: time at the cap
  void NoteDrained(bool drained, uint64_t now);  // counters: time with everything posted sent

  // --- the completer: what an ACK or SACK acknowledges (sr/completer.cc)
  void OnAck(uint32_t psn, uint64_t now);  // a plain ACK at or past psn_una
  CompState OnSack(Qp::RespCtx& c);
  // The oldest READ's response (the IBTA completer's `read` state, placing
  // past a lost response at its offset).
  CompState OnReadResponse(Qp::RespCtx& c);
  // A response of a later READ while the oldest misses one: placed at its
  // offset and remembered, not dropped.
  CompState OnLaterReadResponse(Qp::RespCtx& c);
  // The oldest READ/atomic completed: the READs after it take what was placed for them.
  void OnReadOrAtomicDone(uint64_t now) { CatchUpReads(now); }
  void OnImpliedNak(uint32_t missing_psn);  // that READ/atomic alone is asked again
  void OnPeerAnswered() { req_.peer_answered = true; }  // an SR SEND/WRITE packet acknowledged
  // A NAK or a READ/atomic response: F-RTO decides on ACKs and SACKs only;
  // anything else after a timeout resends the rest.
  void OnOtherResponse() {
    if (req_.frto) FrtoRelease();
  }
  // psn_una moved (before the timer is re-armed): the SACK bits below it
  // go, the backoff ends, a tail-loss probe may be armed again.
  void OnProgress();
  // The tail-loss probe, max(floor, 2 SRTT) ahead when that comes before the RTO.
  void ArmTlp(uint64_t now);

  // --- timers (sr/timers.cc, sr/requester.cc)
  // The retransmission timeout to arm now (IRN's RTO_low while little is in
  // flight, RTO_high otherwise, backed off); remembers which.
  uint64_t ArmTimeoutNs() {
    const uint64_t t = RetransmitTimeoutNs();
    req_.rto_low_armed = t != 0 && t < RtoHighNs();
    return t;
  }
  uint64_t tlp_deadline() const { return req_.tlp_deadline; }
  void OnTimer(uint64_t now_ns);  // the tail-loss probe
  // A retransmission timeout, before the retry budget is looked at: the
  // fallback toward a peer that never answered as SR, F-RTO's undo state.
  void OnTimeout(uint64_t now_ns, uint64_t ibta_timeout);
  void ResendAfterTimeout();  // what is neither acknowledged nor SACKed, psn_una first

  // --- the responder (sr/responder.cc)
  void OnRequest(const uint8_t* frame, const wire::ParsedPacket& p, uint64_t now_ns);
  // A receive WQE selective repeat took before a fallback: the IBTA
  // responder consumes these first, in posting order.
  bool TakeHeldRecv(RecvWr* out) {
    if (resp_.recv_taken == 0) return false;
    *out = recvs_[resp_.recv_base % kSrMaxHeldRecvs].wr;
    ++resp_.recv_base;
    --resp_.recv_taken;
    return true;
  }
  uint32_t held_receives() const { return resp_.recv_taken; }
  void FlushReceives();
  uint32_t BuildSack(uint8_t* frame);  // the queued SACK (or ACK) as it leaves

  // --- observation (tests, DROCE_STATS)
  const RttEstimator& rtt() const { return req_.rtt; }
  uint64_t rto_low_ns() const { return RtoLowNs(); }
  uint64_t rto_high_ns() const { return RtoHighNs(); }
  uint64_t rtt_high_ns() const { return req_.rtt_high_ns; }
  // Packets sent and neither acknowledged nor SACKed (IRN's "in flight":
  // a hole behind SACKed packets is one, however far psn_high has gone):
  // [psn_una, psn_high) less the SACKed PSNs in it, a running count, O(1).
  uint32_t unsacked_in_flight() const {
    const int32_t sent = wire::PsnDiff(qp_.req_.psn_high, qp_.req_.psn_una);
    return sent > static_cast<int32_t>(req_.sacked_count) ? static_cast<uint32_t>(sent) - req_.sacked_count : 0;
  }
  // The same counted by walking the SACK bitmap (tests check the running
  // count against it; O(window)).
  uint32_t UnsackedInFlightByWalk() const;

 private:
  using SendWqe = Qp::SendWqe;
  using RespCtx = Qp::RespCtx;
  using ReqCtx = Qp::ReqCtx;
  using Action = Qp::Action;
  using ActionKind = Qp::ActionKind;

  // requester (sr/requester.cc)
  void Slide();  // the SACK bitmap follows psn_una
  void ScheduleRetransmit(uint32_t from, uint32_t end);
  // `psn` acknowledged (cumulatively or selectively): the RTT sample if it
  // is the timed packet (also congestion control's), RACK's newest delivered.
  void NoteDelivered(uint32_t psn, uint64_t now, bool selective = false);
  void NoteRttMax(uint64_t rtt_ns, uint64_t now);
  void NoteRttHigh(uint64_t rtt_ns);
  void NoteRepaired(uint64_t now);  // the timed resend's PSN acknowledged or SACKed (counters)
  void CountRtt(uint64_t rtt_ns);
  void RackScan();
  void Probe();
  uint64_t RetransmitTimeoutNs() const;
  uint64_t RtoLowNs() const;
  uint64_t RtoHighNs() const;
  uint64_t RttMaxNs() const { return std::max(req_.rtt_max_cur_ns, req_.rtt_max_prev_ns); }
  // The measured RTO both short RTOs start from: SRTT + 4 RTTVAR (at least
  // sr_rto_min_ns), the recent high percentile, and the windowed maximum
  // while no loss is known.
  uint64_t MeasuredRtoNs() const {
    return std::max({req_.rtt.Rto(qp_.env_.sr_rto_min_ns), req_.rtt_high_ns, RttFloorNs()});
  }
  // The RTO's floor: the recent maximum RTT while no loss is known (nothing
  // SACKed, nothing resent or to resend: a timeout then is most likely a
  // delay); none once one is (a timeout then is most likely a lost
  // retransmission, and waiting the recent maximum for it cost the
  // fabric's 5 % row).
  uint64_t RttFloorNs() const {
    return req_.sacked_count == 0 && req_.resent_count == 0 && PendingRetransmits() == 0 ? RttMaxNs() : 0;
  }
  bool Sacked(uint32_t psn) const { return BitTest(req_.sacked, psn); }
  void MarkSacked(uint32_t psn) {
    if (BitTest(req_.sacked, psn)) return;
    BitSet(req_.sacked, psn);
    ++req_.sacked_count;
  }
  bool LostAgain(uint32_t psn) const {  // RACK: resent, still missing, something sent later arrived
    return BitTest(req_.resent, psn) && !Sacked(psn) &&
           static_cast<int32_t>(req_.sent_seq[psn % kSrWindow] - req_.rack_seq) < 0;
  }
  bool OldestIsSendOrWrite() const;
  // The peer does not use selective repeat (it sent IBTA SEND/WRITE
  // requests, or never answered an SR one for a whole IBTA timeout): the
  // QP uses go-back-N from now on, resending from psn_una as IBTA packets.
  void FallBack(uint64_t now_ns);

  // completer (sr/completer.cc)
  // The responses placed ahead for `w` that now follow its in-order ones
  // count as received.
  void TakePlacedResponses(SendWqe& w);
  // A later READ's response, placed at its offset and remembered (read_got).
  CompState PlaceLaterRead(RespCtx& c, SendWqe& w);
  void CatchUpReads(uint64_t now);
  // F-RTO (RFC 5682, adapted; doc/transport.md "Spurious timeouts"): the
  // first acknowledgement after a timeout's resend of psn_una decides
  // whether the timeout was spurious (undone) or the rest is resent
  // (FrtoRelease). `acked`: the cumulative PSN it acknowledges
  // (inclusive); `holds_more`: it SACKs a PSN past that.
  void FrtoDecide(uint32_t acked, bool holds_more);
  void FrtoRelease();

  // responder (sr/responder.cc)
  bool PlaceData(ReqCtx& c, int32_t ahead, RespError* error);
  void Advance();  // the expected PSN over what arrived; receives complete in order
  void ContinueAsIbta();  // a fallback inside a message: the IBTA responder takes it over
  void RespondErrorAtExpected(RespError e, uint32_t psn);
  void Duplicate(ReqCtx& c);  // a duplicate READ/atomic: re-executed, replayed
  void QueueSack();
  bool Received(uint32_t psn) const { return BitTest(resp_.received, psn); }

  Qp& qp_;
  SrRequesterState req_;   // a move to RESET value-initialises it
  SrResponderState resp_;  // likewise
  std::vector<SrRecv> recvs_ = std::vector<SrRecv>(kSrMaxHeldRecvs);
  std::vector<SrMsg> msgs_ = std::vector<SrMsg>(kSrWindow);
};

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_SR_SELECTIVE_REPEAT_H_
