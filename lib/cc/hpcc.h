// HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
// Algorithm 1): a window (and the rate W/T) computed from the switches'
// in-band telemetry that the responder echoes in its ACKs (wire/int.h).
// Per ACK, for every hop i on the path against the records of the previous
// ACK (L):
//   txRate_i = (tx_bytes_i - L.tx_bytes_i) / (ts_i - L.ts_i)
//   u_i = min(qlen_i, L.qlen_i) / (B_i T) + txRate_i / B_i
// the most utilised hop's u and its tau = ts_i - L.ts_i (at most T) move the
// estimate U = (1 - tau/T) U + (tau/T) u. Then
//   U >= eta or incStage >= max_stage:  W = Wc / (U / eta) + W_AI
//   otherwise:                          W = Wc + W_AI
// with Wc and incStage updated (reset to 0, or +1) only once per RTT (the
// first ACK of a packet sent after the last such update) and the other ACKs
// reacting from the same Wc ("fast reaction"). W_AI = ai_rate T; the rate is
// W / T; W stays in [min_rate T, line rate T] (W_init = line rate T).
// Records with a zero line rate or no time elapsed are skipped; wrapped
// timestamps and byte counts are used modulo 2^32, as the wire carries them;
// a hop's u is capped (kHpccMaxU), so forged telemetry can only drive W to
// one of its bounds.
#ifndef DROCE_LIB_CC_HPCC_H_
#define DROCE_LIB_CC_HPCC_H_

#include <cstdint>

#include "cc/congestion_control.h"
#include "wire/int.h"

namespace droce::cc {

inline constexpr double kHpccMaxU = 1e6;

struct HpccParams {
  uint64_t line_rate_bps = 0;
  uint64_t base_rtt_ns = 0;   // T
  uint64_t ai_rate_bps = 0;   // W_AI / T
  uint64_t min_rate_bps = 0;
  double eta = 0;             // target utilisation
  uint32_t max_stage = 0;     // additive steps before a multiplicative one
  uint32_t mtu_bytes = 0;     // bytes per packet, for the window in packets
};

// The paper's parameters: eta 95 %, max_stage 5, W_init = line rate x T.
// T is the network's base RTT, which the paper does not fix: 10 us here,
// set it to the path's (the ns-3 runner uses its topology's largest, as the
// HPCC authors' simulator does). W_AI: ai_rate = line rate / 2000 (50 Mb/s at
// 100 Gb/s, as the authors' simulator runs it); min_rate 100 Mb/s (its
// MIN_RATE).
HpccParams HpccPaperParams(uint64_t line_rate_bps);

struct HpccState {
  HpccParams p;
  double w = 0;         // bytes
  double wc = 0;        // the reference window, updated once per RTT
  double u = 0;         // U
  uint32_t inc_stage = 0;
  uint64_t sent_packets = 0;
  uint64_t acked_packets = 0;
  uint64_t last_update_seq = 0;  // sent_packets at the last per-RTT update (0: none yet)
  uint8_t ref_hops = 0;          // hops in `ref` (0: no reference yet)
  wire::IntHop ref[wire::kIntMaxHops];
  uint64_t updates = 0;          // per-RTT updates
  uint64_t fast_reactions = 0;
};

extern const Ops kHpccOps;
const HpccState* HpccStateOf(const CongestionControl& cc);

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_HPCC_H_
