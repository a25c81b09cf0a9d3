// Per-QP counters: the data path counts, it does not log.
#ifndef DROCE_LIB_TRANSPORT_COUNTERS_H_
#define DROCE_LIB_TRANSPORT_COUNTERS_H_

#include <cstdint>

namespace droce::transport {

struct QpCounters {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t retransmitted_packets = 0;
  uint64_t timeouts = 0;
  uint64_t naks_sent = 0;
  uint64_t naks_received = 0;
  uint64_t rnr_naks_sent = 0;
  uint64_t rnr_naks_received = 0;
  uint64_t seq_naks_sent = 0;
  uint64_t duplicates_received = 0;
  uint64_t expected_requests = 0;  // WRITE packets the responder placed in one step (Qp::PlaceExpected)
  uint64_t recv_warm_bytes = 0;  // bytes of next receive buffers fetched ahead (Qp::WarmNextRecv)
  uint64_t short_requests = 0;  // request packets built in fewer steps (Qp::BuildShortRequest)
  uint64_t out_of_sequence = 0;
  uint64_t dropped_wrong_state = 0;
  uint64_t dropped_bad_response = 0;
  uint64_t uc_messages_dropped = 0;  // UC: sequence gap, no receive, or access error
  uint64_t rd_atomic_overflows = 0;     // READ/atomic beyond max_dest_rd_atomic: NAKed invalid request
  uint64_t dropped_bad_duplicates = 0;  // duplicate READs asking for more than the original: ignored
  uint64_t responses_refused = 0;  // a READ, atomic, NAK or replayed response that found the response queue
                                   // full (its last slot is an ACK's): not queued, the requester's timer recovers
  uint64_t cnps_sent = 0;
  uint64_t cnps_received = 0;
  uint64_t ce_marked_received = 0;
  uint64_t acks_sent = 0;
  uint64_t acks_received = 0;
  uint64_t ack_solicits = 0;  // tails sent without AckReq whose last packet went again to ask (doc/transport.md)
  // Selective repeat (lib/transport/sr/, doc/transport.md).
  uint64_t sr_sacks_sent = 0;             // SACKs sent (responder)
  uint64_t sr_sacks_received = 0;         // SACKs received (requester)
  uint64_t sr_retransmitted_packets = 0;  // selective retransmissions (SACK- or timeout-driven)
  uint64_t sr_out_of_order_placed = 0;    // packets placed ahead of the expected PSN
  uint64_t sr_dropped = 0;                // SR packets not placed: beyond the window, a READ/atomic
                                          // ahead, no receive WQE, or an SR opcode to a non-SR QP
  uint64_t sr_fallbacks = 0;              // SR QPs that fell back to go-back-N (a peer without SR)
  uint64_t tlp_probes = 0;                // SR tail-loss probes sent (doc/transport.md)
  uint64_t sr_rack_resent = 0;            // SR retransmissions found lost again by a later packet's SACK
  uint64_t sr_spurious_timeouts = 0;      // SR timeouts found spurious (F-RTO) and undone
  // Where an SR requester's time and retransmissions go (doc/loss-experiment.md's breakdown).
  uint64_t sr_timeout_resent = 0;    // retransmissions a timeout asked for (psn_una, then the rest)
  uint64_t sr_timeouts_low = 0;      // timeouts that fired on RTO_low (few packets in flight)
  uint64_t sr_timeouts_backoff = 0;  // timeouts that fired on a backed-off (doubled) RTO
  uint64_t sr_window_full_ns = 0;    // time new packets waited at sr_max_inflight_packets
  uint64_t sr_sq_drained_ns = 0;     // time every posted WR had been sent while some were unacknowledged:
                                     // the program's outstanding WRs, not the transport, held the sender
  uint64_t sr_rtt_max_ns = 0;        // the largest RTT sample
  // RTT samples by size: < 32, 64, 128, 256, 512, 1024, 2048 us, and above.
  static constexpr int kSrRttBuckets = 8;
  uint64_t sr_rtt_hist[kSrRttBuckets] = {};
  uint64_t sr_rtt_min_ns = 0;          // the smallest RTT sample (0: none yet)
  uint64_t sr_rtt_inflight_sum = 0;    // packets in flight ([psn_una, psn_high)) at each RTT sample, summed
  // A repair's time (doc/loss-experiment.md "What explains the numbers"): from a SACK showing
  // a hole to its first resend being built (the requester's own wait), and
  // from one resend (timed one at a time, as the RTT) to the hole's
  // acknowledgement (cumulative or SACKed; a resend lost again counts until
  // the later one arrives). Buckets as sr_rtt_hist.
  uint64_t sr_repair_waits = 0;
  uint64_t sr_repair_wait_ns = 0;      // summed
  uint64_t sr_repair_wait_max_ns = 0;
  uint64_t sr_repairs_timed = 0;
  uint64_t sr_repair_ns = 0;           // summed
  uint64_t sr_repair_hist[kSrRttBuckets] = {};
  // UD (ud_qp.cc).
  uint64_t ud_dropped_qkey = 0;      // DETH Q_Key not the QP's (IBTA 10.2.5): silently dropped
  uint64_t ud_dropped_no_recv = 0;   // no receive WQE posted: the datagram is dropped (9.8.4)
  uint64_t ud_oversize_sends = 0;    // sends longer than the port MTU: no packet, success (C10-93.1.1)
};

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_COUNTERS_H_
