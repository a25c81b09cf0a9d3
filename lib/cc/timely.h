// TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the
// Datacenter", SIGCOMM 2015, Algorithm 1): a rate-based controller on the
// gradient of the RTT. Once per completion event (a segment of
// `segment_bytes` acknowledged) with an RTT sample:
//   rtt_diff = (1 - alpha) rtt_diff + alpha (rtt - prev_rtt); prev_rtt = rtt
//   gradient = rtt_diff / min_rtt
//   rtt < t_low:        rate += delta                    (additive increase)
//   rtt > t_high:       rate *= 1 - beta (1 - t_high / rtt)
//   gradient <= 0:      rate += N delta, N = hai_factor after hai_threshold
//                       such events in a row (hyperactive increase), else 1
//   otherwise:          rate *= 1 - beta gradient
// and the rate is kept in [min_rate, line rate]. RTT samples are the
// transport's send-to-ACK times (doc/cc.md "RTT samples"); a sample outside
// (0, max_rtt] is taken as max_rtt, so a forged or wrapped one can cut the
// rate at most as a long queue does.
#ifndef DROCE_LIB_CC_TIMELY_H_
#define DROCE_LIB_CC_TIMELY_H_

#include <cstdint>

#include "cc/congestion_control.h"

namespace droce::cc {

struct TimelyParams {
  uint64_t line_rate_bps = 0;
  uint64_t min_rate_bps = 0;
  uint64_t t_low_ns = 0;
  uint64_t t_high_ns = 0;
  uint64_t min_rtt_ns = 0;      // the gradient's normaliser (the path's propagation RTT)
  uint64_t max_rtt_ns = 0;      // samples beyond it (or 0) count as it
  uint64_t delta_bps = 0;       // additive step
  double alpha = 0;             // EWMA weight of a new RTT difference
  double beta = 0;              // multiplicative decrease factor
  uint32_t hai_threshold = 0;   // completion events with gradient <= 0 in a row before HAI
  uint32_t hai_factor = 0;      // N
  uint32_t segment_bytes = 0;   // a completion event: this many bytes acknowledged
  uint32_t mtu_bytes = 0;       // bytes per acknowledged packet
};

// The paper's parameters (Section 5 / Table 1): delta 10 Mb/s, beta 0.8,
// alpha 0.875, t_low 50 us, t_high 500 us, min_rtt 20 us, segments of 16 KB,
// HAI after 5 events with N = 5. min_rate 10 Mb/s (one delta; the paper
// has none), max_rtt 10 ms.
TimelyParams TimelyPaperParams(uint64_t line_rate_bps);

// One QP's TIMELY state (in the congestion-control private area).
struct TimelyState {
  TimelyParams p;
  double rate_bps = 0;
  double rtt_diff_ns = 0;
  uint64_t prev_rtt_ns = 0;     // 0: no sample yet
  uint64_t last_rtt_ns = 0;     // the newest sample, waiting for its completion event
  uint64_t acked_bytes = 0;     // since the last completion event
  uint32_t negative_gradients = 0;  // completion events in a row with gradient <= 0
  uint64_t updates = 0;
};

extern const Ops kTimelyOps;
const TimelyState* TimelyStateOf(const CongestionControl& cc);

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_TIMELY_H_
