#include "apps/droced/switch_knobs.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace droce::droced {

absl::Status SwitchKnobs::Validate(const fabric::KnobRequest& k) {
  if ((k.set & ~fabric::kKnobAll) != 0) return absl::InvalidArgumentError("unknown knob bits");
  if (k.rate_bps > 1'000'000'000'000ull) return absl::InvalidArgumentError("rate above 1 Tb/s");
  if ((k.set & fabric::kKnobBottleneck) != 0 && k.rate_bps != 0 && k.rate_bps < 1'000'000) {
    return absl::InvalidArgumentError("rate below 1 Mb/s");
  }
  if (k.kmin_bytes > k.kmax_bytes) return absl::InvalidArgumentError("kmin above kmax");
  if (k.kmax_bytes > (1u << 30) || k.limit_bytes > (1u << 30)) return absl::InvalidArgumentError("queue above 1 GiB");
  if (k.pmax_ppm > 1'000'000 || k.loss_ppm > 1'000'000 || k.reorder_ppm > 1'000'000) {
    return absl::InvalidArgumentError("a probability above 1");
  }
  if (std::memchr(k.mirror, 0, sizeof k.mirror) == nullptr) return absl::InvalidArgumentError("mirror path not terminated");
  if (k.mirror[0] != 0 && k.mirror[0] != '/') return absl::InvalidArgumentError("mirror path not absolute");
  if (k.reserved0 != 0 || std::any_of(std::begin(k.reserved), std::end(k.reserved), [](uint8_t b) { return b != 0; })) {
    return absl::InvalidArgumentError("reserved knob bytes are not zero");
  }
  return absl::OkStatus();
}

void SwitchKnobs::Apply(const fabric::KnobRequest& k) {
  if ((k.set & fabric::kKnobSeed) != 0) {
    seed_ = k.seed;
    rng_.seed(seed_);
  }
  if ((k.set & fabric::kKnobLoss) != 0) loss_ppm_ = k.loss_ppm;
  if ((k.set & fabric::kKnobReorder) != 0) reorder_ppm_ = k.reorder_ppm;
  if ((k.set & fabric::kKnobBottleneck) != 0) {
    if (k.rate_bps == 0) {
      bottleneck_.reset();
    } else {
      bn_cfg_ = sim::BottleneckConfig{};
      bn_cfg_.line_rate_bps = k.rate_bps;
      bn_cfg_.kmin_bytes = k.kmin_bytes;
      bn_cfg_.kmax_bytes = k.kmax_bytes;
      bn_cfg_.pmax = k.pmax_ppm / 1e6;
      bn_cfg_.buffer_bytes = k.limit_bytes;
      bn_cfg_.seed = seed_;
      bottleneck_ = std::make_unique<sim::Bottleneck>(bn_cfg_);
    }
  }
  if ((k.set & fabric::kKnobMirror) != 0) mirror_ = k.mirror;
}

EgressVerdict SwitchKnobs::Egress(uint32_t bytes, uint64_t now_ns) {
  EgressVerdict v;
  if (Chance(loss_ppm_)) {
    ++counters_.loss_dropped;
    v.drop = true;
    return v;
  }
  if (bottleneck_ != nullptr) {
    const sim::EnqueueResult r = bottleneck_->Enqueue(bytes, now_ns);
    sim::Departure gone;
    while (bottleneck_->Dequeue(now_ns, &gone)) {
    }  // a phantom queue: only its length matters
    if (r.dropped) {
      ++counters_.queue_dropped;
      v.drop = true;
      return v;
    }
    if (r.ce_marked) {
      ++counters_.ce_marked;
      v.mark = true;
    }
  }
  if (Chance(reorder_ppm_)) {
    ++counters_.reordered;
    v.hold = true;
  }
  return v;
}

std::string SwitchKnobs::Describe() const {
  std::string s;
  if (loss_ppm_ != 0) absl::StrAppendFormat(&s, " loss=%g", loss_ppm_ / 1e6);
  if (reorder_ppm_ != 0) absl::StrAppendFormat(&s, " reorder=%g", reorder_ppm_ / 1e6);
  if (loss_ppm_ != 0 || reorder_ppm_ != 0) absl::StrAppendFormat(&s, " seed=%lu", seed_);
  if (bottleneck_ != nullptr) {
    absl::StrAppendFormat(&s, " bottleneck rate=%lu kmin=%lu kmax=%lu pmax=%g limit=%lu", bn_cfg_.line_rate_bps,
                          bn_cfg_.kmin_bytes, bn_cfg_.kmax_bytes, bn_cfg_.pmax, bn_cfg_.buffer_bytes);
  }
  if (!mirror_.empty()) absl::StrAppendFormat(&s, " mirror=%s", mirror_);
  if (s.empty()) return "";
  absl::StrAppendFormat(&s, " (loss_dropped %lu queue_dropped %lu ce_marked %lu reordered %lu mirrored %lu)",
                        counters_.loss_dropped, counters_.queue_dropped, counters_.ce_marked, counters_.reordered,
                        counters_.mirrored);
  return "  switch port:" + s + "\n";
}

}  // namespace droce::droced
