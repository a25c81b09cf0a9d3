// Capture replay against a droce responder: feed the requester's packets of
// a reference capture (real rxe traffic) to a droce device configured from
// the capture, and compare droce's responses with the ones rxe sent.
//
// Equivalence rules (doc/replay.md):
//  - READ responses, atomic ACKs and NAKs (PSN-sequence, RNR, errors) match
//    one for one, in order: opcode, PSN, AETH syndrome (credits ignored), MSN,
//    payload length; READ data where the capture wrote those bytes first;
//    atomic original values.
//  - Plain ACKs may be coalesced differently: between two of the responses
//    above, both sides must acknowledge up to the same PSN, and where both
//    sent an ACK for the same PSN its MSN must agree.
#ifndef DROCE_SIM_REPLAY_REPLAY_H_
#define DROCE_SIM_REPLAY_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace droce::sim {

struct CapturedFrame {
  std::vector<uint8_t> bytes;  // as captured (caplen bytes)
  uint32_t wire_len = 0;       // length on the wire (len); > bytes.size() if cut by snaplen
};

struct ReplayResult {
  std::string direction;         // "10.0.0.1 -> 10.0.0.2" (requester -> responder)
  bool skipped = false;
  std::string skip_reason;
  uint32_t mtu = 0;
  uint32_t requests_fed = 0;
  uint32_t reference_responses = 0;
  uint32_t droce_responses = 0;
  uint32_t immediates_checked = 0;  // responder: immediates that reached a completion byte for byte
  std::vector<std::string> mismatches;
  bool equivalent() const { return !skipped && mismatches.empty(); }
};

// One result per direction that carries RC requests.
std::vector<ReplayResult> ReplayResponder(const std::vector<CapturedFrame>& frames);

// The other way round: a droce requester posts the work requests the
// capture's requester evidently posted (one per message, reconstructed from
// its first transmissions: opcode, length, payload, RETH/AtomicETH, ImmDt,
// IETH, solicited bit), receives rxe's responses, and must emit the same
// request packets — opcode, PSN, headers, payload bytes, AckReq on each
// message's last packet — and complete every work request successfully.
// Retransmissions on either side are ignored (their timing is the VM's).
std::vector<ReplayResult> ReplayRequester(const std::vector<CapturedFrame>& frames);

// UD captures (replay_ud.cc), one result per direction. Receiver mode (what
// ReplayResponder does for them): a droce UD QP with the receiver's MAC,
// address, QPN and Q_Key is fed the datagrams and must deliver each one as
// rxe did: in order, 40 + payload bytes with the GRH area (20 zero bytes,
// then the IPv4 header as received), the payload, src_qp, the immediate.
// Sender mode (ReplayRequester): a droce UD QP with the sender's MAC,
// address, QPN, Q_Key and first PSN posts one send per datagram and must
// emit the same frames, byte for byte but for the IPv4 identification and
// checksum and the ICRC (which covers the identification; droce's must
// verify). "Responses" are the datagrams: reference_responses counts the
// capture's, droce_responses what droce delivered or sent.
bool IsUdCapture(const std::vector<CapturedFrame>& frames);
std::vector<ReplayResult> ReplayUd(const std::vector<CapturedFrame>& frames, bool sender);

}  // namespace droce::sim

#endif  // DROCE_SIM_REPLAY_REPLAY_H_
