#include "cc/timely.h"

#include <algorithm>
#include <cstddef>
#include <new>

namespace droce::cc {

TimelyParams TimelyPaperParams(uint64_t line_rate_bps) {
  TimelyParams p;
  p.line_rate_bps = line_rate_bps;
  p.min_rate_bps = std::min<uint64_t>(10'000'000, line_rate_bps);
  p.t_low_ns = 50'000;
  p.t_high_ns = 500'000;
  p.min_rtt_ns = 20'000;
  p.max_rtt_ns = 10'000'000;
  p.delta_bps = 10'000'000;
  p.alpha = 0.875;
  p.beta = 0.8;
  p.hai_threshold = 5;
  p.hai_factor = 5;
  p.segment_bytes = 16 * 1024;
  p.mtu_bytes = 1024;
  return p;
}

namespace {

static_assert(sizeof(TimelyState) <= kPrivateBytes && alignof(TimelyState) <= 8);
static_assert(sizeof(TimelyParams) <= kParamBytes);

TimelyState& St(void* priv) { return *static_cast<TimelyState*>(priv); }

Output Decided(const TimelyState& s) {
  Output o;
  o.rate_bps = static_cast<uint64_t>(s.rate_bps + 0.5);
  o.rate_limited = o.rate_bps < s.p.line_rate_bps;
  return o;
}

// One completion event with RTT `rtt` (already in (0, max_rtt]).
void Update(TimelyState& s, uint64_t rtt) {
  const TimelyParams& p = s.p;
  const double line = static_cast<double>(p.line_rate_bps);
  const double floor = std::min(line, static_cast<double>(p.min_rate_bps));
  if (s.prev_rtt_ns == 0) {
    s.prev_rtt_ns = rtt;
    return;
  }
  ++s.updates;
  const double new_diff = static_cast<double>(rtt) - static_cast<double>(s.prev_rtt_ns);
  s.prev_rtt_ns = rtt;
  s.rtt_diff_ns = (1 - p.alpha) * s.rtt_diff_ns + p.alpha * new_diff;
  const double gradient = s.rtt_diff_ns / static_cast<double>(std::max<uint64_t>(1, p.min_rtt_ns));
  double r = s.rate_bps;
  if (rtt < p.t_low_ns) {
    s.negative_gradients = 0;
    r += static_cast<double>(p.delta_bps);
  } else if (rtt > p.t_high_ns) {
    s.negative_gradients = 0;
    r *= 1 - p.beta * (1 - static_cast<double>(p.t_high_ns) / static_cast<double>(rtt));
  } else if (gradient <= 0) {
    ++s.negative_gradients;
    const uint32_t n = s.negative_gradients >= p.hai_threshold ? p.hai_factor : 1;
    r += n * static_cast<double>(p.delta_bps);
  } else {
    s.negative_gradients = 0;
    r *= std::max(0.0, 1 - p.beta * gradient);
  }
  s.rate_bps = std::clamp(r, floor, line);
}

Output TimelyInit(void* priv, const void* params) {
  TimelyState& s = *new (priv) TimelyState();
  s.p = *static_cast<const TimelyParams*>(params);
  s.rate_bps = static_cast<double>(s.p.line_rate_bps);
  return Decided(s);
}

Output TimelyAck(void* priv, const AckSample& ack, uint64_t) {
  TimelyState& s = St(priv);
  if (ack.rtt_ns != 0) {
    const uint64_t max_rtt = s.p.max_rtt_ns != 0 ? s.p.max_rtt_ns : UINT64_MAX;
    s.last_rtt_ns = std::min(ack.rtt_ns, max_rtt);
  }
  s.acked_bytes += uint64_t{ack.acked_packets} * s.p.mtu_bytes;
  if (s.last_rtt_ns != 0 && (s.acked_bytes >= s.p.segment_bytes || s.prev_rtt_ns == 0)) {
    s.acked_bytes = 0;
    Update(s, s.last_rtt_ns);
    s.last_rtt_ns = 0;
  }
  return Decided(s);
}

#define TIMELY_PARAM(field, type, lo, hi, help) \
  Param{#field, Param::Type::type, offsetof(TimelyParams, field), lo, hi, help}
const Param kTimelyParams[] = {
    TIMELY_PARAM(line_rate_bps, kU64, 1e6, 1e13, "the port's rate, b/s: the rate's ceiling and start"),
    TIMELY_PARAM(min_rate_bps, kU64, 1e3, 1e13, "the rate's floor, b/s (10 Mb/s: one delta)"),
    TIMELY_PARAM(t_low_ns, kU64, 0, 1e10, "below it, additive increase regardless of the gradient, ns (paper 50 us)"),
    TIMELY_PARAM(t_high_ns, kU64, 1, 1e10, "above it, decrease by beta (1 - t_high/rtt), ns (paper 500 us)"),
    TIMELY_PARAM(min_rtt_ns, kU64, 1, 1e10, "the gradient's normaliser, ns (paper 20 us)"),
    TIMELY_PARAM(max_rtt_ns, kU64, 1, 1e11, "samples above it count as it, ns (10 ms)"),
    TIMELY_PARAM(delta_bps, kU64, 0, 1e12, "additive increment, b/s (paper 10 Mb/s)"),
    TIMELY_PARAM(alpha, kDouble, 0, 1, "EWMA weight of a new RTT difference (paper 0.875)"),
    TIMELY_PARAM(beta, kDouble, 0, 1, "multiplicative decrease factor (paper 0.8)"),
    TIMELY_PARAM(hai_threshold, kU32, 1, 1e6, "completion events with gradient <= 0 before HAI (paper 5)"),
    TIMELY_PARAM(hai_factor, kU32, 1, 1e3, "HAI's N (paper 5)"),
    TIMELY_PARAM(segment_bytes, kU32, 1, 1e9, "bytes acknowledged per completion event (paper 16 KB)"),
    TIMELY_PARAM(mtu_bytes, kU32, 1, 1e5, "payload bytes per packet"),
};
#undef TIMELY_PARAM

void TimelyDefaults(void* params, uint64_t line_rate_bps) {
  new (params) TimelyParams(TimelyPaperParams(line_rate_bps));
}

}  // namespace

const Ops kTimelyOps = {
    .name = "timely",
    .init = TimelyInit,
    .destroy = nullptr,
    .on_sent = nullptr,
    .on_ack = TimelyAck,
    .on_cnp = nullptr,      // RTT only
    .on_timeout = nullptr,  // the paper leaves loss to the transport
    .on_timer = nullptr,
    .params_size = sizeof(TimelyParams),
    .params = kTimelyParams,
    .nparams = sizeof kTimelyParams / sizeof kTimelyParams[0],
    .defaults = TimelyDefaults,
    .needs_int = false,
};

const TimelyState* TimelyStateOf(const CongestionControl& cc) {
  return cc.ops() == &kTimelyOps ? static_cast<const TimelyState*>(cc.state()) : nullptr;
}

}  // namespace droce::cc
