// DCQCN reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
// Deployments", SIGCOMM 2015, Fig. 7) and a per-QP pacer, with parameters
// named after the mlx5 firmware knobs. Time is injected: every call takes
// now_ns (any monotonic nanosecond clock, real or virtual); nothing here reads
// a clock, allocates or locks. The per-packet calls (Pacer::MaySend/OnSent,
// ReactionPoint::OnBytesSent/Advance) are a few compares and adds; the
// floating-point rate arithmetic runs only at CNPs and timer/byte events.
//
// doc/cc-experiments.md describes the algorithm, the profiles and experiments.
#ifndef DROCE_LIB_CC_DCQCN_H_
#define DROCE_LIB_CC_DCQCN_H_

#include <cstdint>

#include "cc/congestion_control.h"
#include "cc/pacer.h"

namespace droce::cc {

// Units are those of mlx5's knobs (mlxconfig/sysfs): µs, bytes, Mb/s, % and
// 1/1024 fixed point. line_rate_bps is the port speed and the ceiling of RC/RT.
struct DcqcnParams {
  uint64_t line_rate_bps = 0;

  // Rate increase (reaction point generator).
  uint32_t rpg_time_reset_us = 0;   // timer T: one increase event per period
  uint64_t rpg_byte_reset = 0;      // byte counter B: one increase event per B bytes sent
  uint32_t rpg_threshold = 0;       // F: fast-recovery stages before additive increase
  uint32_t rpg_ai_rate_mbps = 0;    // R_AI
  uint32_t rpg_hai_rate_mbps = 0;   // R_HAI

  // Rate decrease.
  uint32_t rpg_gd = 11;              // log2(Gd) over alpha in 1/1024: RC *= 1 - alpha*1024/2^rpg_gd
                                     // (11: RC *= 1 - alpha/2, the paper's cut)
  uint32_t rpg_min_dec_fac = 50;     // %: one decrease keeps RC >= rpg_min_dec_fac% of RC
  uint32_t rpg_min_rate_mbps = 1;    // RC never below this
  uint32_t rate_to_set_on_first_cnp_mbps = 0;  // 0: off; else RC=RT=this on a CNP at line rate
  uint32_t rate_reduce_monitor_period_us = 0;  // at most one decrease per period (0: every CNP)

  // Congestion estimate alpha.
  uint32_t dce_tcp_g = 1020;           // alpha keeps dce_tcp_g/1024 per update: 1-g (1020: g=1/256)
  uint32_t dce_tcp_rtt_us = 0;         // alpha period: decay once per period without a CNP
  uint32_t initial_alpha_value = 1023; // alpha (1/1024) set at a QP's first CNP

  // Notification point (receiver side; carried here so one struct holds a profile).
  uint32_t min_time_between_cnps_us = 0;
  uint8_t cnp_dscp = 48;
  uint8_t cnp_802p_prio = 6;
};

// The SIGCOMM 2015 paper's parameters (Fig. 7): g=1/256,
// alpha period K=55 us, T=55 us, B=10 MB, F=5, R_AI=40 Mb/s, R_HAI=400 Mb/s
// (10 x R_AI as in QCN), CNP interval 50 us, alpha starting at 1.
DcqcnParams PaperProfile(uint64_t line_rate_bps);

// mlx5 (ConnectX-4 and later) firmware defaults: dce_tcp_g=1019 (g=5/1024),
// alpha period 1 us, rate_reduce_monitor_period 4 us, rpg_time_reset 300 us,
// rpg_byte_reset 32767 B, F=1, R_AI=5 Mb/s, R_HAI=50 Mb/s, rpg_gd=11,
// min_dec_fac 50 %, min rate 1 Mb/s, initial alpha 1023/1024, CNPs at most
// every 4 us, CNP DSCP 48 / PCP 6. See dcqcn.cc for the source of each value.
DcqcnParams Mlx5Profile(uint64_t line_rate_bps);

// One QP's reaction point. Before its first CNP a QP sends at line rate and
// no timer runs. After a CNP the rate-increase machinery (timer T and byte
// counter B) runs until RC is back at line rate; alpha keeps decaying.
//
// Call Advance(now) before using current_rate_bps() (the transmit scheduler
// does it per packet; it returns after one compare when no timer is due).
// Timers fire at their own deadlines even if Advance is called late, so the
// result does not depend on how often Advance runs.
class ReactionPoint {
 public:
  explicit ReactionPoint(const DcqcnParams& p);

  // A CNP for this QP arrived. Reacts at once, or at the end of the current
  // rate_reduce_monitor_period if a decrease already happened in it (several
  // CNPs in one period make one decrease).
  void OnCnp(uint64_t now_ns);

  // bytes of this QP left the NIC: drives the byte counter B.
  void OnBytesSent(uint32_t bytes, uint64_t now_ns) {
    if (!limited_) return;
    byte_count_ += bytes;
    if (byte_count_ >= byte_reset_) ByteStage(now_ns);
  }

  // Runs every timer due at or before now: a pending decrease, alpha decay,
  // timer-T increase events.
  void Advance(uint64_t now_ns) {
    if (now_ns >= next_deadline_ns_) RunTimers(now_ns);
  }

  uint64_t current_rate_bps() const { return static_cast<uint64_t>(rc_ + 0.5); }  // RC
  uint64_t target_rate_bps() const { return static_cast<uint64_t>(rt_ + 0.5); }   // RT
  double alpha() const { return alpha_; }
  bool rate_limited() const { return limited_; }  // from a decrease until RC is back at line rate

  // Stage counters since the last decrease (the paper's T and BC) and the
  // number of increase events of each kind since construction.
  uint32_t timer_stage() const { return t_stage_; }
  uint32_t byte_stage() const { return bc_stage_; }
  uint64_t cnps_received() const { return cnps_received_; }
  uint64_t rate_decreases() const { return decreases_; }
  uint64_t fast_recovery_events() const { return fr_events_; }
  uint64_t additive_increase_events() const { return ai_events_; }
  uint64_t hyper_increase_events() const { return hai_events_; }

  // Earliest time at which Advance has work to do (UINT64_MAX if none).
  uint64_t next_deadline_ns() const { return next_deadline_ns_; }
  // A CNP's decrease waits for the end of the monitor period.
  bool decrease_pending() const { return decrease_pending_; }

  const DcqcnParams& params() const { return p_; }

 private:
  static constexpr uint64_t kNever = UINT64_MAX;

  void RunTimers(uint64_t now_ns);
  void Decrease(uint64_t at_ns);
  void IncreaseEvent();
  void ByteStage(uint64_t now_ns);
  void DecayAlpha(uint64_t periods);
  void UpdateDeadline();

  DcqcnParams p_;
  // Derived once.
  double line_;           // bps
  double min_rate_;       // bps
  double first_cnp_rate_; // bps, 0 = off
  double r_ai_;           // bps
  double r_hai_;          // bps
  double one_minus_g_;    // dce_tcp_g / 1024
  double g_;              // 1 - one_minus_g_
  double gd_scale_;       // 2^(10 - rpg_gd): decrease factor = alpha * gd_scale_
  double max_cut_;        // 1 - rpg_min_dec_fac/100
  uint64_t t_period_ns_;
  uint64_t alpha_period_ns_;
  uint64_t monitor_ns_;
  uint64_t byte_reset_;

  double rc_;
  double rt_;
  double alpha_;
  bool limited_ = false;
  bool seen_cnp_ = false;
  bool decrease_pending_ = false;
  uint64_t byte_count_ = 0;
  uint32_t t_stage_ = 0;
  uint32_t bc_stage_ = 0;

  uint64_t last_decrease_ns_ = 0;
  uint64_t decrease_due_ns_ = kNever;
  uint64_t alpha_due_ns_ = kNever;
  uint64_t t_due_ns_ = kNever;
  uint64_t next_deadline_ns_ = kNever;

  uint64_t cnps_received_ = 0;
  uint64_t decreases_ = 0;
  uint64_t fr_events_ = 0;
  uint64_t ai_events_ = 0;
  uint64_t hai_events_ = 0;
};


// DCQCN behind the congestion-control interface (congestion_control.h):
// kDcqcnOps runs a ReactionPoint in the QP's private area, with a
// DcqcnParams as its parameters; its rate is RC while rate limited.
extern const Ops kDcqcnOps;
// The reaction point of a QP that runs DCQCN, or null.
const ReactionPoint* DcqcnReactionPoint(const CongestionControl& cc);

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_DCQCN_H_
