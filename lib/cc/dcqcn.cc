#include "cc/dcqcn.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <new>

namespace droce::cc {

DcqcnParams PaperProfile(uint64_t line_rate_bps) {
  // Zhu et al., SIGCOMM 2015, the recommended parameters: Kmin=5 KB, Kmax=200 KB,
  // Pmax=1 % (switch side, see Bottleneck), g=1/256, N (CNP interval)=50 us,
  // K (alpha timer)=55 us, T (rate-increase timer)=55 us, B=10 MB, F=5,
  // R_AI=40 Mb/s. The paper does not list R_HAI; QCN's (802.1Qau) default is
  // 10 x R_AI, used here. Alpha starts at 1 (Fig. 7). The paper reacts to
  // every CNP (no monitor period) and has no min_dec_fac or min rate; 50 % is
  // mlx5's default and never binds with Gd=2 (a cut is at most alpha/2 <= 50 %),
  // 1 Mb/s is mlx5's minimum.
  DcqcnParams p;
  p.line_rate_bps = line_rate_bps;
  p.rpg_time_reset_us = 55;
  p.rpg_byte_reset = 10'000'000;
  p.rpg_threshold = 5;
  p.rpg_ai_rate_mbps = 40;
  p.rpg_hai_rate_mbps = 400;
  p.rpg_gd = 11;  // cut by alpha/2
  p.rpg_min_dec_fac = 50;
  p.rpg_min_rate_mbps = 1;
  p.rate_to_set_on_first_cnp_mbps = 0;
  p.rate_reduce_monitor_period_us = 0;
  p.dce_tcp_g = 1020;  // 1 - 1/256 = 1020/1024
  p.dce_tcp_rtt_us = 55;
  p.initial_alpha_value = 1024;  // alpha = 1
  p.min_time_between_cnps_us = 50;
  p.cnp_dscp = 48;
  p.cnp_802p_prio = 6;
  return p;
}

DcqcnParams Mlx5Profile(uint64_t line_rate_bps) {
  // Firmware defaults of ConnectX-4 and later, as listed by NVIDIA's "DCQCN CC
  // Parameters" table (DOCA / MLNX_OFED docs: dce_tcp_g 1019, dce_tcp_rtt 1 us,
  // initial_alpha_value 1023, rate_to_set_on_first_cnp 0, rpg_min_dec_fac 50,
  // rpg_min_rate 1, rpg_gd 11, rate_reduce_monitor_period 4 us) and by
  // `mlxconfig query` of a ConnectX NIC (RPG_TIME_RESET 300, RPG_BYTE_RESET
  // 32767, RPG_THRESHOLD 1, RPG_AI_RATE 5, RPG_HAI_RATE 50, MIN_TIME_BETWEEN_CNPS 4,
  // CNP_802P_PRIO 6, CNP_DSCP 48; mstflint's mlxconfig describes RPG_BYTE_RESET
  // as "given in bytes" and RPG_TIME_RESET in microseconds). Not modelled:
  // clamp_tgt_rate / clamp_tgt_rate_after_time_inc (RT is always set to RC on a
  // decrease, as in the paper) and rpg_max_rate (0 = line rate).
  DcqcnParams p;
  p.line_rate_bps = line_rate_bps;
  p.rpg_time_reset_us = 300;
  p.rpg_byte_reset = 32767;
  p.rpg_threshold = 1;
  p.rpg_ai_rate_mbps = 5;
  p.rpg_hai_rate_mbps = 50;
  p.rpg_gd = 11;
  p.rpg_min_dec_fac = 50;
  p.rpg_min_rate_mbps = 1;
  p.rate_to_set_on_first_cnp_mbps = 0;
  p.rate_reduce_monitor_period_us = 4;
  p.dce_tcp_g = 1019;  // g = 5/1024
  p.dce_tcp_rtt_us = 1;
  p.initial_alpha_value = 1023;
  p.min_time_between_cnps_us = 4;
  p.cnp_dscp = 48;
  p.cnp_802p_prio = 6;
  return p;
}

ReactionPoint::ReactionPoint(const DcqcnParams& p) : p_(p) {
  line_ = static_cast<double>(p.line_rate_bps);
  min_rate_ = std::min(line_, p.rpg_min_rate_mbps * 1e6);
  first_cnp_rate_ = std::min(line_, p.rate_to_set_on_first_cnp_mbps * 1e6);
  r_ai_ = p.rpg_ai_rate_mbps * 1e6;
  r_hai_ = p.rpg_hai_rate_mbps * 1e6;
  one_minus_g_ = std::min(p.dce_tcp_g, 1024u) / 1024.0;
  g_ = 1.0 - one_minus_g_;
  gd_scale_ = std::ldexp(1.0, 10 - static_cast<int>(p.rpg_gd));
  max_cut_ = 1.0 - std::min(p.rpg_min_dec_fac, 100u) / 100.0;
  t_period_ns_ = std::max<uint64_t>(1, uint64_t{p.rpg_time_reset_us} * 1000);
  alpha_period_ns_ = std::max<uint64_t>(1, uint64_t{p.dce_tcp_rtt_us} * 1000);
  monitor_ns_ = uint64_t{p.rate_reduce_monitor_period_us} * 1000;
  byte_reset_ = std::max<uint64_t>(1, p.rpg_byte_reset);
  rc_ = line_;
  rt_ = line_;
  alpha_ = std::min(p.initial_alpha_value, 1024u) / 1024.0;
}

void ReactionPoint::OnCnp(uint64_t now_ns) {
  ++cnps_received_;
  // Timers due up to now run first, so the order of events does not depend on
  // how often the caller calls Advance.
  Advance(now_ns);
  // A period with a CNP in it does not decay alpha.
  if (alpha_due_ns_ != kNever) alpha_due_ns_ = now_ns + alpha_period_ns_;
  if (!decrease_pending_) {  // else coalesced into the pending decrease
    if (monitor_ns_ == 0 || decreases_ == 0 || now_ns >= last_decrease_ns_ + monitor_ns_) {
      Decrease(now_ns);
    } else {
      decrease_pending_ = true;
      decrease_due_ns_ = last_decrease_ns_ + monitor_ns_;
    }
  }
  UpdateDeadline();
}

void ReactionPoint::Decrease(uint64_t at_ns) {
  if (!seen_cnp_) {
    seen_cnp_ = true;
    alpha_ = std::min(p_.initial_alpha_value, 1024u) / 1024.0;
  }
  if (first_cnp_rate_ > 0 && rc_ >= line_) {
    // rate_to_set_on_first_cnp: a QP at line rate jumps to the configured rate.
    rc_ = first_cnp_rate_;
    rt_ = first_cnp_rate_;
  } else {
    rt_ = rc_;
    const double cut = std::min(alpha_ * gd_scale_, max_cut_);
    rc_ = std::max(min_rate_, rc_ * (1.0 - cut));
  }
  alpha_ = one_minus_g_ * alpha_ + g_;

  ++decreases_;
  limited_ = true;
  decrease_pending_ = false;
  decrease_due_ns_ = kNever;
  last_decrease_ns_ = at_ns;
  t_stage_ = 0;
  bc_stage_ = 0;
  byte_count_ = 0;
  t_due_ns_ = at_ns + t_period_ns_;
  alpha_due_ns_ = at_ns + alpha_period_ns_;
}

void ReactionPoint::IncreaseEvent() {
  // Stage counts include the event being handled: fast recovery for the first
  // F events of either counter (max(T, BC) <= F; the paper's max < F counted
  // before the event), hyper increase once both counters passed F, additive
  // increase in between.
  const uint32_t f = p_.rpg_threshold;
  if (std::max(t_stage_, bc_stage_) <= f) {
    ++fr_events_;
  } else if (std::min(t_stage_, bc_stage_) > f) {
    rt_ = std::min(line_, rt_ + r_hai_);
    ++hai_events_;
  } else {
    rt_ = std::min(line_, rt_ + r_ai_);
    ++ai_events_;
  }
  rc_ = (rt_ + rc_) * 0.5;
  // Back at line rate (within 1e-9, i.e. 0.1 kb/s at 100 Gb/s): stop the
  // increase machinery until the next CNP.
  if (rt_ >= line_ && line_ - rc_ <= line_ * 1e-9) {
    rc_ = line_;
    limited_ = false;
    t_due_ns_ = kNever;
    byte_count_ = 0;
  }
}

void ReactionPoint::ByteStage(uint64_t now_ns) {
  Advance(now_ns);  // timers due before these bytes come first
  while (limited_ && byte_count_ >= byte_reset_) {
    byte_count_ -= byte_reset_;
    ++bc_stage_;
    IncreaseEvent();
  }
  UpdateDeadline();
}

void ReactionPoint::DecayAlpha(uint64_t periods) {
  if (periods <= 16) {
    for (uint64_t i = 0; i < periods; ++i) alpha_ *= one_minus_g_;
  } else {
    alpha_ *= std::pow(one_minus_g_, static_cast<double>(periods));
  }
  // Below 2^-40 alpha no longer changes any rate; stop its timer until the
  // next CNP so an idle QP costs nothing.
  if (alpha_ < 0x1p-40) {
    alpha_ = 0;
    alpha_due_ns_ = kNever;
  }
}

void ReactionPoint::RunTimers(uint64_t now_ns) {
  for (;;) {
    const uint64_t next = std::min({decrease_due_ns_, alpha_due_ns_, t_due_ns_});
    if (next > now_ns) break;
    if (next == decrease_due_ns_) {
      Decrease(decrease_due_ns_);
    } else if (next == alpha_due_ns_) {
      // Every alpha tick up to now (or up to a pending decrease, which uses alpha).
      const uint64_t limit = std::min(now_ns, decrease_due_ns_);
      const uint64_t ticks = (limit - alpha_due_ns_) / alpha_period_ns_ + 1;
      alpha_due_ns_ += ticks * alpha_period_ns_;
      DecayAlpha(ticks);
    } else {
      ++t_stage_;
      t_due_ns_ += t_period_ns_;
      IncreaseEvent();
    }
  }
  UpdateDeadline();
}

void ReactionPoint::UpdateDeadline() {
  next_deadline_ns_ = std::min({decrease_due_ns_, alpha_due_ns_, t_due_ns_});
}

namespace {

static_assert(sizeof(ReactionPoint) <= kPrivateBytes && alignof(ReactionPoint) <= 8);

ReactionPoint& Rp(void* priv) { return *static_cast<ReactionPoint*>(priv); }

// The reaction point's timers matter while they can change the rate; an
// unlimited QP's alpha decay waits for the next CNP (which runs it first).
Output Decided(const ReactionPoint& rp) {
  Output o;
  o.rate_limited = rp.rate_limited();
  o.rate_bps = rp.current_rate_bps();
  const uint64_t due = rp.next_deadline_ns();
  if ((rp.rate_limited() || rp.decrease_pending()) && due != UINT64_MAX) o.next_deadline_ns = due;
  return o;
}

Output DcqcnInit(void* priv, const void* params) {
  return Decided(*new (priv) ReactionPoint(*static_cast<const DcqcnParams*>(params)));
}
void DcqcnDestroy(void* priv) { Rp(priv).~ReactionPoint(); }
Output DcqcnSent(void* priv, uint32_t bytes, uint64_t now_ns) {
  Rp(priv).OnBytesSent(bytes, now_ns);
  return Decided(Rp(priv));
}
Output DcqcnCnp(void* priv, uint64_t now_ns) {
  Rp(priv).OnCnp(now_ns);
  return Decided(Rp(priv));
}
Output DcqcnTimer(void* priv, uint64_t now_ns) {
  Rp(priv).Advance(now_ns);
  return Decided(Rp(priv));
}

static_assert(sizeof(DcqcnParams) <= kParamBytes);

#define DCQCN_PARAM(field, type, lo, hi, help) \
  Param{#field, Param::Type::type, offsetof(DcqcnParams, field), lo, hi, help}
const Param kDcqcnParams[] = {
    DCQCN_PARAM(line_rate_bps, kU64, 1e6, 1e13, "the port's rate, b/s: RC's ceiling"),
    DCQCN_PARAM(rpg_time_reset_us, kU32, 1, 1e7, "timer T, us (paper 55, mlx5 300)"),
    DCQCN_PARAM(rpg_byte_reset, kU64, 1, 1e12, "byte counter B, bytes (paper 10 MB, mlx5 32767)"),
    DCQCN_PARAM(rpg_threshold, kU32, 0, 1000, "F: fast-recovery stages (paper 5, mlx5 1)"),
    DCQCN_PARAM(rpg_ai_rate_mbps, kU32, 0, 1e6, "R_AI, Mb/s (paper 40, mlx5 5)"),
    DCQCN_PARAM(rpg_hai_rate_mbps, kU32, 0, 1e6, "R_HAI, Mb/s (400: 10 x R_AI as QCN, mlx5 50)"),
    DCQCN_PARAM(rpg_gd, kU32, 1, 30, "log2 Gd over alpha in 1/1024 (11: cut alpha/2)"),
    DCQCN_PARAM(rpg_min_dec_fac, kU32, 0, 100, "%: one decrease keeps at least this much of RC (mlx5 50)"),
    DCQCN_PARAM(rpg_min_rate_mbps, kU32, 1, 1e6, "RC's floor, Mb/s (mlx5 1)"),
    DCQCN_PARAM(rate_to_set_on_first_cnp_mbps, kU32, 0, 1e6, "RC on a first CNP at line rate, Mb/s (0: off)"),
    DCQCN_PARAM(rate_reduce_monitor_period_us, kU32, 0, 1e7, "at most one decrease per period, us (paper 0, mlx5 4)"),
    DCQCN_PARAM(dce_tcp_g, kU32, 0, 1024, "alpha keeps g/1024 per update (paper 1020 = 1 - 1/256, mlx5 1019)"),
    DCQCN_PARAM(dce_tcp_rtt_us, kU32, 1, 1e7, "alpha period K, us (paper 55, mlx5 1)"),
    DCQCN_PARAM(initial_alpha_value, kU32, 0, 1024, "alpha at the first CNP, 1/1024 (paper 1024, mlx5 1023)"),
    DCQCN_PARAM(min_time_between_cnps_us, kU32, 0, 1e6, "notification point: CNP interval, us (paper 50, mlx5 4)"),
};
#undef DCQCN_PARAM

void DcqcnDefaults(void* params, uint64_t line_rate_bps) { new (params) DcqcnParams(PaperProfile(line_rate_bps)); }

}  // namespace

const Ops kDcqcnOps = {
    .name = "dcqcn",
    .init = DcqcnInit,
    .destroy = DcqcnDestroy,
    .on_sent = DcqcnSent,
    .on_ack = nullptr,      // DCQCN reacts to CNPs, not to RTTs
    .on_cnp = DcqcnCnp,
    .on_timeout = nullptr,  // nor to timeouts
    .on_timer = DcqcnTimer,
    .params_size = sizeof(DcqcnParams),
    .params = kDcqcnParams,
    .nparams = sizeof kDcqcnParams / sizeof kDcqcnParams[0],
    .defaults = DcqcnDefaults,
    .needs_int = false,
};

const ReactionPoint* DcqcnReactionPoint(const CongestionControl& cc) {
  return cc.ops() == &kDcqcnOps ? static_cast<const ReactionPoint*>(cc.state()) : nullptr;
}

}  // namespace droce::cc
