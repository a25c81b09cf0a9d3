#include "cc/swift.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <new>

namespace droce::cc {

SwiftParams SwiftPaperParams(uint64_t line_rate_bps) {
  SwiftParams p;
  p.line_rate_bps = line_rate_bps;
  p.min_rate_bps = std::min<uint64_t>(10'000'000, line_rate_bps);
  p.base_target_ns = 25'000;
  p.hop_scale_ns = 1'000;
  p.fs_range_ns = 5 * p.base_target_ns;
  p.max_rtt_ns = 10'000'000;
  p.fs_min_cwnd = 0.1;
  p.fs_max_cwnd = 100;
  p.ai = 1;
  p.beta = 0.8;
  p.max_mdf = 0.5;
  p.min_cwnd = 0.001;
  p.mtu_bytes = 1024;
  p.max_cwnd = 0;   // one bandwidth-delay product at base_target
  p.init_cwnd = 0;  // max_cwnd
  p.retx_reset_threshold = 5;
  return p;
}

namespace {

static_assert(sizeof(SwiftState) <= kPrivateBytes && alignof(SwiftState) <= 8);
static_assert(sizeof(SwiftParams) <= kParamBytes);

SwiftState& St(void* priv) { return *static_cast<SwiftState*>(priv); }

// max_cwnd 0: one bandwidth-delay product at base_target (at least one packet).
double MaxCwnd(const SwiftParams& p) {
  if (p.max_cwnd > 0) return std::max(p.max_cwnd, 1e-6);
  const double bdp = static_cast<double>(p.line_rate_bps) * static_cast<double>(p.base_target_ns) * 1e-9 / 8 /
                     std::max<uint32_t>(1, p.mtu_bytes);
  return std::max(1.0, bdp);
}
double MinCwnd(const SwiftParams& p) { return std::clamp(p.min_cwnd, 1e-6, MaxCwnd(p)); }

double Rtt(const SwiftState& s) {
  return s.srtt_ns > 0 ? s.srtt_ns : static_cast<double>(std::max<uint64_t>(1, s.p.base_target_ns));
}

Output Decided(const SwiftState& s) {
  const SwiftParams& p = s.p;
  Output o;
  if (s.cwnd >= 1) {
    o.window_packets = static_cast<uint32_t>(std::min(s.cwnd, 1e9));
    return o;
  }
  // Below one packet: one packet in flight, sent every RTT / cwnd.
  o.window_packets = 1;
  const double rate = s.cwnd * p.mtu_bytes * 8 / (Rtt(s) * 1e-9);
  const uint64_t floor = std::min(p.min_rate_bps, p.line_rate_bps);
  o.rate_bps = std::clamp<uint64_t>(static_cast<uint64_t>(std::min(rate, 1e13)), floor, p.line_rate_bps);
  o.rate_limited = o.rate_bps < p.line_rate_bps;
  return o;
}

double TargetDelay(const SwiftState& s) {
  const SwiftParams& p = s.p;
  const double fs = std::clamp(s.fs_alpha / std::sqrt(s.cwnd) + s.fs_beta, 0.0, static_cast<double>(p.fs_range_ns));
  return static_cast<double>(p.base_target_ns) + s.hops * static_cast<double>(p.hop_scale_ns) + fs;
}

bool CanDecrease(const SwiftState& s, uint64_t now_ns) {
  return !s.decreased || now_ns < s.last_decrease_ns || static_cast<double>(now_ns - s.last_decrease_ns) >= Rtt(s);
}

void Decrease(SwiftState& s, double factor, uint64_t now_ns) {
  s.cwnd *= factor;
  s.last_decrease_ns = now_ns;
  s.decreased = true;
  ++s.decreases;
}

void Clamp(SwiftState& s) { s.cwnd = std::clamp(s.cwnd, MinCwnd(s.p), MaxCwnd(s.p)); }

Output SwiftInit(void* priv, const void* params) {
  SwiftState& s = *new (priv) SwiftState();
  s.p = *static_cast<const SwiftParams*>(params);
  const SwiftParams& p = s.p;
  const double lo = std::max(p.fs_min_cwnd, 1e-6), hi = std::max(p.fs_max_cwnd, lo * 2);
  s.fs_alpha = static_cast<double>(p.fs_range_ns) / (1 / std::sqrt(lo) - 1 / std::sqrt(hi));
  s.fs_beta = -s.fs_alpha / std::sqrt(hi);
  s.cwnd = p.init_cwnd > 0 ? p.init_cwnd : MaxCwnd(p);
  Clamp(s);
  return Decided(s);
}

Output SwiftAck(void* priv, const AckSample& ack, uint64_t now_ns) {
  SwiftState& s = St(priv);
  const SwiftParams& p = s.p;
  s.retransmits = 0;
  if (ack.telemetry != nullptr) s.hops = std::min<uint8_t>(ack.telemetry->hops, wire::kIntMaxHops);
  s.acked_unsampled += ack.acked_packets;
  if (ack.rtt_ns == 0) return Decided(s);
  const uint64_t max_rtt = p.max_rtt_ns != 0 ? p.max_rtt_ns : UINT64_MAX;
  const double delay = static_cast<double>(std::min(ack.rtt_ns, max_rtt));
  s.srtt_ns = s.srtt_ns > 0 ? 0.875 * s.srtt_ns + 0.125 * delay : delay;
  const double acked = std::max<uint32_t>(1, s.acked_unsampled);
  s.acked_unsampled = 0;
  const double target = TargetDelay(s);
  if (delay < target) {
    s.cwnd += s.cwnd >= 1 ? p.ai * acked / s.cwnd : p.ai * acked;
  } else if (CanDecrease(s, now_ns)) {
    Decrease(s, std::max(1 - p.beta * (delay - target) / delay, 1 - p.max_mdf), now_ns);
  }
  Clamp(s);
  return Decided(s);
}

Output SwiftTimeout(void* priv, uint64_t now_ns) {
  SwiftState& s = St(priv);
  ++s.retransmits;
  if (s.retransmits >= s.p.retx_reset_threshold) {
    s.cwnd = MinCwnd(s.p);
  } else if (CanDecrease(s, now_ns)) {
    Decrease(s, 1 - s.p.max_mdf, now_ns);
  }
  Clamp(s);
  return Decided(s);
}

#define SWIFT_PARAM(field, type, lo, hi, help) \
  Param{#field, Param::Type::type, offsetof(SwiftParams, field), lo, hi, help}
const Param kSwiftParams[] = {
    SWIFT_PARAM(line_rate_bps, kU64, 1e6, 1e13, "the port's rate, b/s: the pacing ceiling"),
    SWIFT_PARAM(min_rate_bps, kU64, 1e3, 1e13, "the pacing floor below one packet, b/s (10 Mb/s)"),
    SWIFT_PARAM(base_target_ns, kU64, 1, 1e10, "base target delay, ns (25 us; set the fabric's)"),
    SWIFT_PARAM(hop_scale_ns, kU64, 0, 1e9, "h: target added per switch hop, ns (1 us)"),
    SWIFT_PARAM(fs_range_ns, kU64, 0, 1e10, "flow scaling's range, ns (5 x base_target)"),
    SWIFT_PARAM(max_rtt_ns, kU64, 1, 1e11, "samples above it count as it, ns (10 ms)"),
    SWIFT_PARAM(fs_min_cwnd, kDouble, 1e-6, 1e6, "flow scaling's smallest window, packets (paper 0.1)"),
    SWIFT_PARAM(fs_max_cwnd, kDouble, 1e-6, 1e9, "flow scaling's largest window, packets (paper 100)"),
    SWIFT_PARAM(ai, kDouble, 0, 1e6, "additive increase, packets per RTT (paper 1)"),
    SWIFT_PARAM(beta, kDouble, 0, 1, "multiplicative decrease factor (paper 0.8)"),
    SWIFT_PARAM(max_mdf, kDouble, 0, 1, "largest decrease per RTT (paper 0.5)"),
    SWIFT_PARAM(min_cwnd, kDouble, 1e-6, 1e9, "smallest window, packets (0.001)"),
    SWIFT_PARAM(max_cwnd, kDouble, 0, 1e9, "largest window, packets (0: one BDP at base_target)"),
    SWIFT_PARAM(init_cwnd, kDouble, 0, 1e9, "the window a QP starts with, packets (0: max_cwnd)"),
    SWIFT_PARAM(retx_reset_threshold, kU32, 1, 1e6, "timeouts in a row that reset cwnd to min_cwnd (paper 5)"),
    SWIFT_PARAM(mtu_bytes, kU32, 1, 1e5, "bytes per packet, for pacing below one packet"),
};
#undef SWIFT_PARAM

void SwiftDefaults(void* params, uint64_t line_rate_bps) { new (params) SwiftParams(SwiftPaperParams(line_rate_bps)); }

}  // namespace

const Ops kSwiftOps = {
    .name = "swift",
    .init = SwiftInit,
    .destroy = nullptr,
    .on_sent = nullptr,
    .on_ack = SwiftAck,
    .on_cnp = nullptr,  // delay only
    .on_timeout = SwiftTimeout,
    .on_timer = nullptr,
    .params_size = sizeof(SwiftParams),
    .params = kSwiftParams,
    .nparams = sizeof kSwiftParams / sizeof kSwiftParams[0],
    .defaults = SwiftDefaults,
    .needs_int = false,
};

const SwiftState* SwiftStateOf(const CongestionControl& cc) {
  return cc.ops() == &kSwiftOps ? static_cast<const SwiftState*>(cc.state()) : nullptr;
}

}  // namespace droce::cc
