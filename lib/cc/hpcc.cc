#include "cc/hpcc.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <new>

namespace droce::cc {

HpccParams HpccPaperParams(uint64_t line_rate_bps) {
  HpccParams p;
  p.line_rate_bps = line_rate_bps;
  p.base_rtt_ns = 10'000;
  p.ai_rate_bps = std::max<uint64_t>(1, line_rate_bps / 2000);
  p.min_rate_bps = std::min<uint64_t>(100'000'000, line_rate_bps);
  p.eta = 0.95;
  p.max_stage = 5;
  p.mtu_bytes = 1024;
  return p;
}

namespace {

static_assert(sizeof(HpccState) <= kPrivateBytes && alignof(HpccState) <= 8);
static_assert(sizeof(HpccParams) <= kParamBytes);

HpccState& St(void* priv) { return *static_cast<HpccState*>(priv); }

double TSeconds(const HpccParams& p) { return static_cast<double>(std::max<uint64_t>(1, p.base_rtt_ns)) * 1e-9; }
double MinWindow(const HpccParams& p) {
  return static_cast<double>(std::min(p.min_rate_bps, p.line_rate_bps)) * TSeconds(p) / 8;
}
double MaxWindow(const HpccParams& p) { return static_cast<double>(p.line_rate_bps) * TSeconds(p) / 8; }

Output Decided(const HpccState& s) {
  const HpccParams& p = s.p;
  Output o;
  o.rate_limited = true;  // paced at W / T, and on_sent counts the packets for the per-RTT update
  o.rate_bps = std::clamp<uint64_t>(static_cast<uint64_t>(s.w * 8 / TSeconds(p)),
                                    std::min(p.min_rate_bps, p.line_rate_bps), p.line_rate_bps);
  const double packets = std::ceil(s.w / std::max<uint32_t>(1, p.mtu_bytes));
  o.window_packets = static_cast<uint32_t>(std::clamp(packets, 1.0, 1e9));
  return o;
}

// MeasureInflight: folds the echo into U; false if it carries nothing usable
// (no hops, another path's hop count: the echo becomes the reference).
bool Measure(HpccState& s, const wire::IntStack& t) {
  const uint8_t hops = std::min<uint8_t>(t.hops, wire::kIntMaxHops);
  if (hops == 0) return false;
  if (hops != s.ref_hops) {
    s.ref_hops = hops;
    std::copy(t.hop, t.hop + hops, s.ref);
    return false;
  }
  const double T = TSeconds(s.p);
  double u_max = -1, tau_max = 0;
  for (uint32_t i = 0; i < hops; ++i) {
    const wire::IntHop& h = t.hop[i];
    const wire::IntHop& l = s.ref[i];
    const uint32_t tau_ns = h.timestamp_ns - l.timestamp_ns;  // modulo 2^32
    if (h.line_rate_mbps == 0 || tau_ns == 0) continue;
    const double b = h.line_rate_mbps * 1e6;
    const double tau = tau_ns * 1e-9;
    const double tx_rate = static_cast<uint32_t>(h.tx_bytes - l.tx_bytes) * 8.0 / tau;
    const double qlen = std::min(h.qlen_bytes, l.qlen_bytes);
    const double u = std::min(qlen * 8 / (b * T) + tx_rate / b, kHpccMaxU);
    if (u > u_max) {
      u_max = u;
      tau_max = tau;
    }
  }
  std::copy(t.hop, t.hop + hops, s.ref);
  if (u_max < 0) return false;
  tau_max = std::min(tau_max, T);
  s.u = (1 - tau_max / T) * s.u + (tau_max / T) * u_max;
  return true;
}

// ComputeWind.
void Compute(HpccState& s, bool update_wc) {
  const HpccParams& p = s.p;
  const double w_ai = static_cast<double>(p.ai_rate_bps) * TSeconds(p) / 8;
  double w;
  if (s.u >= p.eta || s.inc_stage >= p.max_stage) {
    w = s.wc / std::max(s.u / p.eta, 1e-9) + w_ai;
    if (update_wc) s.inc_stage = 0;
  } else {
    w = s.wc + w_ai;
    if (update_wc) ++s.inc_stage;
  }
  s.w = std::clamp(w, MinWindow(p), MaxWindow(p));
  if (update_wc) s.wc = s.w;
}

Output HpccInit(void* priv, const void* params) {
  HpccState& s = *new (priv) HpccState();
  s.p = *static_cast<const HpccParams*>(params);
  s.w = s.wc = MaxWindow(s.p);
  return Decided(s);
}

Output HpccSent(void* priv, uint32_t, uint64_t) {
  HpccState& s = St(priv);
  ++s.sent_packets;
  return Decided(s);
}

Output HpccAck(void* priv, const AckSample& ack, uint64_t) {
  HpccState& s = St(priv);
  s.acked_packets += ack.acked_packets;
  if (ack.telemetry == nullptr) return Decided(s);
  if (s.last_update_seq == 0) {  // the first RTT: the echo is the reference
    s.last_update_seq = std::max<uint64_t>(1, s.sent_packets);
    Measure(s, *ack.telemetry);
    return Decided(s);
  }
  if (!Measure(s, *ack.telemetry)) return Decided(s);
  if (s.acked_packets > s.last_update_seq) {
    Compute(s, true);
    s.last_update_seq = std::max(s.last_update_seq, s.sent_packets);
    ++s.updates;
  } else {
    Compute(s, false);
    ++s.fast_reactions;
  }
  return Decided(s);
}

#define HPCC_PARAM(field, type, lo, hi, help) \
  Param{#field, Param::Type::type, offsetof(HpccParams, field), lo, hi, help}
const Param kHpccParams[] = {
    HPCC_PARAM(line_rate_bps, kU64, 1e6, 1e13, "the port's rate, b/s: W_init = line rate x T"),
    HPCC_PARAM(base_rtt_ns, kU64, 100, 1e9, "T, the network's base RTT, ns (10 us; set the path's)"),
    HPCC_PARAM(ai_rate_bps, kU64, 1, 1e12, "W_AI / T, b/s (line rate / 2000: 50 Mb/s at 100 Gb/s)"),
    HPCC_PARAM(min_rate_bps, kU64, 1e3, 1e13, "the rate's floor, b/s (100 Mb/s)"),
    HPCC_PARAM(eta, kDouble, 0.01, 1, "target utilisation (paper 0.95)"),
    HPCC_PARAM(max_stage, kU32, 0, 1e6, "additive steps before a multiplicative one (paper 5)"),
    HPCC_PARAM(mtu_bytes, kU32, 1, 1e5, "bytes per packet, for the window in packets"),
};
#undef HPCC_PARAM

void HpccDefaults(void* params, uint64_t line_rate_bps) { new (params) HpccParams(HpccPaperParams(line_rate_bps)); }

}  // namespace

const Ops kHpccOps = {
    .name = "hpcc",
    .init = HpccInit,
    .destroy = nullptr,
    .on_sent = HpccSent,
    .on_ack = HpccAck,
    .on_cnp = nullptr,      // telemetry only
    .on_timeout = nullptr,  // the paper leaves loss to the transport (PFC)
    .on_timer = nullptr,
    .params_size = sizeof(HpccParams),
    .params = kHpccParams,
    .nparams = sizeof kHpccParams / sizeof kHpccParams[0],
    .defaults = HpccDefaults,
    .needs_int = true,
};

const HpccState* HpccStateOf(const CongestionControl& cc) {
  return cc.ops() == &kHpccOps ? static_cast<const HpccState*>(cc.state()) : nullptr;
}

}  // namespace droce::cc
