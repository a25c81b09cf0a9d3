// Selective repeat's per-connection state (doc/transport.md "Selective
// repeat"): the fields of the SelectiveRepeat component
// (sr/selective_repeat.h), which a QP allocates only once selective repeat
// is chosen for it. The IBTA requester, responder and completer never
// touch it.
#ifndef DROCE_LIB_TRANSPORT_SR_STATE_H_
#define DROCE_LIB_TRANSPORT_SR_STATE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "queue/completion.h"
#include "transport/types.h"

namespace droce::transport {

// RFC 6298's smoothed round-trip time and its variation (alpha 1/8, beta 1/4).
struct RttEstimator {
  uint64_t srtt_ns = 0;
  uint64_t rttvar_ns = 0;
  bool valid = false;
  void Sample(uint64_t r) {
    if (!valid) {
      srtt_ns = r;
      rttvar_ns = r / 2;
      valid = true;
      return;
    }
    const uint64_t err = srtt_ns > r ? srtt_ns - r : r - srtt_ns;
    rttvar_ns = (3 * rttvar_ns + err) / 4;
    srtt_ns = (7 * srtt_ns + r) / 8;
  }
  // SRTT + 4 RTTVAR, at least `floor`.
  uint64_t Rto(uint64_t floor) const { return std::max(floor, srtt_ns + 4 * rttvar_ns); }
};

// Selective repeat's RTO floor: the largest RTT seen recently (a windowed
// maximum over two periods of this length, 50-100 ms), so that the host's
// scheduling tail, which RFC 6298's SRTT + 4 RTTVAR follows only for a few
// samples, does not fire spurious timeouts every time it recurs.
inline constexpr uint64_t kSrRttMaxPeriodNs = 50'000'000;
// Selective repeat's RTO also covers a high percentile of the recent RTT
// samples, loss or not: the kSrRttRank-th largest of the last kSrRttRing
// (the 3rd of 64, ~p95). RFC 6298's SRTT + 4 RTTVAR misses a tail that
// recurs in a few percent of the samples (on the fabric ~10 % above 512 us
// with SRTT 114 us, RTTVAR 19 us: an RTO of 317 us, most timeouts spurious);
// the windowed maximum above holds only while no loss is known.
inline constexpr uint32_t kSrRttRing = 64;
inline constexpr uint32_t kSrRttRank = 3;

// Selective repeat: the PSNs the responder's and the requester's bitmaps
// cover past the oldest missing/unacknowledged one.
inline constexpr uint32_t kSrWindow = 1024;
// A timeout resends at most this many PSNs from psn_una.
inline constexpr uint32_t kSrTimeoutResendSpan = 129;
// The SR retransmission timeout grows at most 2^kSrMaxBackoff times by
// backoff (16 x: e.g. 320 us to 5 ms), never past the QP's IBTA timeout.
inline constexpr uint8_t kSrMaxBackoff = 4;
// Receive WQEs an SR responder holds for messages that arrive ahead of
// earlier ones (a SEND further ahead waits for its retransmission).
inline constexpr uint32_t kSrMaxHeldRecvs = 256;

using SrBits = std::array<uint64_t, kSrWindow / 64>;

// A PSN's bit in one of the per-PSN rings (bit psn % kSrWindow).
inline bool BitTest(const SrBits& b, uint32_t psn) {
  const uint32_t i = psn % kSrWindow;
  return (b[i / 64] >> (i % 64)) & 1;
}
inline void BitSet(SrBits& b, uint32_t psn) { b[(psn % kSrWindow) / 64] |= uint64_t{1} << (psn % 64); }
inline void BitClear(SrBits& b, uint32_t psn) { b[(psn % kSrWindow) / 64] &= ~(uint64_t{1} << (psn % 64)); }
// The 64 bits of PSNs psn, psn + 1, ... psn + 63 (bit i: psn + i), across
// the ring's word boundaries: a SACK's bitmap words, built and read a word
// at a time (1024 bits per SACK).
inline uint64_t BitWord(const SrBits& b, uint32_t psn) {
  const uint32_t i = psn % kSrWindow, w = i / 64, s = i % 64;
  const uint64_t lo = b[w] >> s;
  return s == 0 ? lo : lo | (b[(w + 1) % b.size()] << (64 - s));
}

struct SrRequesterState {
  // Selective repeat: PSNs the responder reported holding (sacked, for
  // PSNs from sack_base on), the retransmissions still to send
  // [retx_next, retx_end) (unsacked ones only), the next receive
  // sequence number.
  uint32_t sack_base = 0;
  SrBits sacked{};
  uint32_t sacked_count = 0;  // bits set in sacked (all in [psn_una, psn_high))
  SrBits read_got{};  // READ responses placed ahead of the first missing one
  uint32_t retx_next = 0;
  uint32_t retx_end = 0;
  uint32_t recv_seq = 0;
  bool timeout_probe = false;  // resend psn_una even if SACKed (after a timeout)
  bool rto_low_armed = false;  // the retransmit timer runs with the low RTO
  // The peer answered an SR SEND/WRITE packet (an ACK of one, or a SACK):
  // it uses selective repeat, and this QP never falls back.
  bool peer_answered = false;
  // Measured timers: the RTT estimate, one packet timed at a time (sent
  // once: Karn's rule), the retransmission backoff (doubling per timeout
  // without progress).
  RttEstimator rtt;
  bool rtt_timing = false;
  uint32_t rtt_psn = 0;
  uint64_t rtt_sent_ns = 0;
  uint8_t backoff = 0;
  // The windowed maximum RTT (SrNoteRttMax): the largest sample of the
  // current period and of the one before, and when the current began.
  // Only clean samples feed it: the timed packet was sent with no hole
  // known (nothing SACKed, nothing to resend) and nothing but tail-loss
  // probes (which a delay itself sends) was resent until it was
  // acknowledged (rtt_retx: that count when timing began). A sample
  // taken across a loss measures its repair too (the packet's
  // acknowledgement waits for the hole, past the SACK's reach), and a
  // floor fed with those grew with every repair.
  bool rtt_clean = false;
  uint64_t rtt_retx = 0;
  uint64_t rtt_max_cur_ns = 0;
  uint64_t rtt_max_prev_ns = 0;
  uint64_t rtt_max_start_ns = 0;
  // The last kSrRttRing samples that did not wait for a repair (delivered
  // by a SACK, or nothing was resent while the packet was in flight), and
  // their kSrRttRank-th largest (SrNoteRttHigh).
  std::array<uint32_t, kSrRttRing> rtt_ring{};
  uint32_t rtt_ring_n = 0;
  uint64_t rtt_high_ns = 0;
  // RACK: every packet's place in the send order (sent_seq), the newest
  // place known delivered (rack_seq), the SEND/WRITE PSNs sent again
  // (resent). A retransmission still missing while something sent after
  // it arrived is lost again: [retx_next, rack_limit) is then a
  // region where only such PSNs are resent.
  uint32_t tx_seq = 0;
  std::array<uint32_t, kSrWindow> sent_seq{};
  SrBits resent{};
  uint32_t resent_count = 0;
  uint32_t rack_seq = 0;
  bool rack_active = false;
  uint32_t rack_limit = 0;
  // Tail-loss probe: its deadline (0: none), and whether it may be armed
  // (once per progress).
  uint64_t tlp_deadline = 0;
  bool tlp_armable = true;
  // A probe borrows the retransmission cursor for one PSN; it goes back to
  // where it was (probe_return) once the probe is sent, so the holes
  // the probe's SACK shows are scheduled from there.
  bool probe_pending = false;
  uint32_t probe_return = 0;
  // F-RTO: a timeout resends psn_una (frto_una) alone; the rest of
  // what it would resend, up to frto_end, waits for the first
  // acknowledgement after it (SrFrtoDecide). The retry state before the
  // timeout, restored if it was spurious; then the doubled RTO is kept
  // until a fresh RTT sample (Karn: backoff_hold).
  bool frto = false;
  uint32_t frto_una = 0;
  uint32_t frto_end = 0;
  uint8_t frto_retry_left = 0;
  bool frto_progress = false;
  uint64_t frto_retry_clock_ns = 0;
  bool backoff_hold = false;
  // The PSNs sent with AckReq (originals and retransmissions, not the
  // timeout's own resend): an ACK past psn_una that one of them asked
  // for was sent before the timeout's resend arrived.
  SrBits ackreq{};
  // Counters only: the end of what the last timeout asked to resend
  // (timeout_resent), the start of a wait at the in-flight cap.
  uint32_t tmo_end = 0;
  uint64_t cap_since_ns = 0;
  uint64_t drained_since_ns = 0;  // (counter sr_sq_drained_ns)
  // Counters only (a repair's time): when a SACK showed a hole not yet
  // resent (0: none waiting), and the one resend being timed.
  uint64_t hole_seen_ns = 0;
  bool repair_timing = false;
  uint32_t repair_psn = 0;
  uint64_t repair_sent_ns = 0;
};

struct SrResponderState {
  // Selective repeat: PSNs past epsn that arrived (and those of them that
  // end a message), the receive WQEs taken for messages in the window
  // (recvs_[seq % kSrMaxHeldRecvs] for seq in [recv_base, +recv_taken)).
  SrBits received{};
  SrBits last{};
  uint32_t recv_base = 0;
  uint32_t recv_taken = 0;
  // The PSN before epsn was an SR SEND/WRITE packet that did not end its
  // message: a message is in progress at epsn.
  bool in_message = false;
};

// A receive WQE an SR responder holds, and how its message ended.
struct SrRecv {
  RecvWr wr;
  bool ended = false;
  uint32_t end_psn = 0;
  uint32_t byte_len = 0;
  uint8_t flags = 0;
  uint32_t imm_or_inv = 0;
  bool solicited = false;
  bool invalidate = false;
  queue::WcOpcode opcode = queue::WcOpcode::kRecv;
};
// What the SRETH of each SR SEND/WRITE packet placed (not a message's
// last) said of its message, by PSN (sr_msgs_[psn % kSrWindow], kSrWindow
// entries once SR is on): after a fallback, the message in progress at
// the expected PSN continues as IBTA packets (SrContinueAsIbta).
struct SrMsg {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_length = 0;
  uint32_t first_psn = 0;
  bool write = false;
  bool consumes_recv = false;
};

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_SR_STATE_H_
