// Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion
// Control in the Datacenter", SIGCOMM 2020, Algorithm 1): a congestion window
// (in packets, fractional) held to a target delay, and pacing when the
// window is below one packet. On an ACK with an RTT sample `delay`:
//   target = base_target + hops h + clamp(fs_alpha / sqrt(cwnd) + fs_beta, 0, fs_range)
//     (flow scaling: fs_alpha = fs_range / (1/sqrt(fs_min_cwnd) - 1/sqrt(fs_max_cwnd)),
//      fs_beta = -fs_alpha / sqrt(fs_max_cwnd))
//   delay < target:  cwnd += ai acked / cwnd  (cwnd >= 1), ai acked (cwnd < 1)
//   otherwise, at most once per RTT:
//                    cwnd *= max(1 - beta (delay - target) / delay, 1 - max_mdf)
// A retransmission timeout cuts cwnd by max_mdf (once per RTT), and to
// min_cwnd after retx_reset_threshold timeouts in a row; an ACK ends the
// run. cwnd stays in [min_cwnd, max_cwnd]; below one packet the QP sends
// one packet per RTT / cwnd (rate cwnd x mtu / RTT, at least min_rate).
// `hops` is the INT echo's hop count when the QP has one (the paper counts
// hops from the IP TTL), else 0. The delay is the whole RTT sample: droce's
// software NIC has no separate NIC/host delay to subtract (the paper's
// endpoint delay), so base_target must cover the hosts' part.
#ifndef DROCE_LIB_CC_SWIFT_H_
#define DROCE_LIB_CC_SWIFT_H_

#include <cstdint>

#include "cc/congestion_control.h"

namespace droce::cc {

struct SwiftParams {
  uint64_t line_rate_bps = 0;
  uint64_t min_rate_bps = 0;     // pacing floor below one packet
  uint64_t base_target_ns = 0;
  uint64_t hop_scale_ns = 0;     // h
  uint64_t fs_range_ns = 0;
  uint64_t max_rtt_ns = 0;       // samples beyond it (or 0) count as it
  double fs_min_cwnd = 0;
  double fs_max_cwnd = 0;
  double ai = 0;                 // packets per RTT
  double beta = 0;
  double max_mdf = 0;
  double min_cwnd = 0;           // packets
  double max_cwnd = 0;           // packets; 0: one bandwidth-delay product at base_target
  double init_cwnd = 0;          // packets; 0: max_cwnd
  uint32_t retx_reset_threshold = 0;
  uint32_t mtu_bytes = 0;
};

// The paper's rules and constants: ai 1 packet per RTT, beta 0.8, max_mdf
// 0.5, flow scaling over cwnd 0.1 .. 100 packets with fs_range 5 x
// base_target, retx_reset_threshold 5. base_target 25 us and h 1 us are
// chosen for a network of 1..5 switch hops (the paper sets them per
// fabric); set them to the path (and fs_range with base_target). min_cwnd
// 0.001 packets; max_cwnd and the initial window one bandwidth-delay
// product at base_target.
SwiftParams SwiftPaperParams(uint64_t line_rate_bps);

struct SwiftState {
  SwiftParams p;
  double cwnd = 0;
  double fs_alpha = 0, fs_beta = 0;
  double srtt_ns = 0;            // smoothed RTT (pacing below one packet, once per RTT)
  uint64_t last_decrease_ns = 0;
  bool decreased = false;        // last_decrease_ns is valid
  uint32_t retransmits = 0;      // timeouts in a row
  uint32_t acked_unsampled = 0;  // packets acknowledged since the last RTT sample
  uint8_t hops = 0;
  uint64_t decreases = 0;
};

extern const Ops kSwiftOps;
const SwiftState* SwiftStateOf(const CongestionControl& cc);

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_SWIFT_H_
