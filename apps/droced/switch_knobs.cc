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
  if (k.pfc_xoff_bytes > (1u << 30)) return absl::InvalidArgumentError("pfc xoff above 1 GiB");
  if (k.pfc_xon_bytes > k.pfc_xoff_bytes) return absl::InvalidArgumentError("pfc xon above xoff");
  if ((k.port_flags & ~fabric::kPortFlagsAll) != 0) return absl::InvalidArgumentError("unknown port flags");
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

namespace {
SwitchKnobs::FrameFree g_frame_free = nullptr;
}  // namespace

void SwitchKnobs::set_frame_free(FrameFree f) { g_frame_free = f; }

PfcBoard& SwitchKnobs::process_board() {
  static PfcBoard board;
  return board;
}

void SwitchKnobs::DropQueued() {
  for (; !held_.empty(); held_.Pop()) {
    const Held& h = held_.front();
    if (g_frame_free != nullptr) g_frame_free(h.frame);
    if (pfc_ != nullptr && h.ingress < PfcBoard::kIds && pfc_->Remove(h.ingress, h.bytes) == sim::PfcIngress::kResume &&
        board_ != nullptr) {
      board_->Release(h.ingress);
    }
  }
  held_bytes_ = 0;
}

void SwitchKnobs::Apply(const fabric::KnobRequest& k, PfcBoard* board) {
  if ((k.set & fabric::kKnobSeed) != 0) {
    seed_ = k.seed;
    rng_.seed(seed_);
  }
  if ((k.set & fabric::kKnobLoss) != 0) loss_ppm_ = k.loss_ppm;
  if ((k.set & fabric::kKnobReorder) != 0) reorder_ppm_ = k.reorder_ppm;
  if ((k.set & fabric::kKnobBottleneck) != 0) {
    DropQueued();  // a new port starts empty; what waited in the old one is lost, as at a switch reset
    port_.reset();
    pfc_.reset();
    board_ = board != nullptr ? board : &process_board();
    if (k.rate_bps != 0) {
      port_cfg_ = sim::EgressPortConfig{};
      port_cfg_.line_rate_bps = k.rate_bps;
      port_cfg_.kmin_bytes = k.kmin_bytes;
      port_cfg_.kmax_bytes = k.kmax_bytes;
      port_cfg_.pmax = k.pmax_ppm / 1e6;
      port_cfg_.buffer_bytes = k.limit_bytes;
      port_cfg_.mark_at = (k.port_flags & fabric::kPortMarkAtDequeue) ? sim::MarkAt::kDequeue : sim::MarkAt::kEnqueue;
      port_cfg_.int_stamp = (k.port_flags & fabric::kPortInt) != 0;
      port_cfg_.seed = seed_;
      port_cfg_.max_packets = kMaxQueuedFrames;  // as held_: the port drops what held_ has no room for
      if (held_.depth() < kMaxQueuedFrames) held_.Reset(kMaxQueuedFrames);  // empty (DropQueued)
      port_ = std::make_unique<sim::EgressPort>(port_cfg_);
      pfc_xoff_ = k.pfc_xoff_bytes;
      pfc_xon_ = k.pfc_xon_bytes;
      if (pfc_xoff_ != 0) pfc_ = std::make_unique<sim::PfcIngress>(PfcBoard::kIds, pfc_xoff_, pfc_xon_);
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
  if (port_ != nullptr) {
    const sim::EnqueueResult r = port_->Enqueue(bytes, now_ns);
    if (r.dropped) {
      ++counters_.queue_dropped;
      v.drop = true;
      return v;
    }
    if (r.ce_marked) {
      ++counters_.ce_marked;
      v.mark = true;
    }
    v.queue = true;
    return v;
  }
  v.hold = HoldBack();
  return v;
}

void SwitchKnobs::Hold(void* frame, uint32_t bytes, uint32_t port, uint32_t port_tag, uint32_t ingress) {
  held_.Push(Held{frame, bytes, port, port_tag, ingress});  // Egress queued it: the port had room, so has held_
  held_bytes_ += bytes;
  if (pfc_ != nullptr && ingress < PfcBoard::kIds && pfc_->Add(ingress, bytes) == sim::PfcIngress::kPause) {
    ++counters_.pfc_pauses;
    if (board_ != nullptr) board_->Hold(ingress);
  }
}

bool SwitchKnobs::Release(uint64_t now_ns, Released* out) {
  sim::Departure d;
  if (port_ == nullptr || held_.empty() || !port_->Dequeue(now_ns, &d)) return false;
  const Held h = held_.front();
  held_.Pop();
  held_bytes_ -= h.bytes;
  if (pfc_ != nullptr && h.ingress < PfcBoard::kIds && pfc_->Remove(h.ingress, h.bytes) == sim::PfcIngress::kResume &&
      board_ != nullptr) {
    board_->Release(h.ingress);
  }
  out->frame = h.frame;
  out->port = h.port;
  out->port_tag = h.port_tag;
  out->mark = d.ce_marked && port_cfg_.mark_at == sim::MarkAt::kDequeue;
  counters_.ce_marked += out->mark;
  out->stamp = port_cfg_.int_stamp;
  out->hop = d.int_hop;
  return true;
}

std::string SwitchKnobs::Describe() const {
  std::string s;
  if (loss_ppm_ != 0) absl::StrAppendFormat(&s, " loss=%g", loss_ppm_ / 1e6);
  if (reorder_ppm_ != 0) absl::StrAppendFormat(&s, " reorder=%g", reorder_ppm_ / 1e6);
  if (loss_ppm_ != 0 || reorder_ppm_ != 0) absl::StrAppendFormat(&s, " seed=%lu", seed_);
  if (port_ != nullptr) {
    absl::StrAppendFormat(&s, " bottleneck rate=%lu kmin=%lu kmax=%lu pmax=%g limit=%lu mark=%s", port_cfg_.line_rate_bps,
                          port_cfg_.kmin_bytes, port_cfg_.kmax_bytes, port_cfg_.pmax, port_cfg_.buffer_bytes,
                          port_cfg_.mark_at == sim::MarkAt::kDequeue ? "dequeue" : "enqueue");
    if (port_cfg_.int_stamp) s += " int=on";
    if (pfc_xoff_ != 0) absl::StrAppendFormat(&s, " pfc=%u,%u", pfc_xoff_, pfc_xon_);
    absl::StrAppendFormat(&s, " (queued %zu frames %lu B, max %lu B)", held_.size(), held_bytes_,
                          port_->max_queue_bytes());
  }
  if (!mirror_.empty()) absl::StrAppendFormat(&s, " mirror=%s", mirror_);
  if (s.empty()) return "";
  absl::StrAppendFormat(&s,
                        " (loss_dropped %lu queue_dropped %lu ce_marked %lu int_stamped %lu pfc_pauses %lu reordered %lu "
                        "mirrored %lu)",
                        counters_.loss_dropped, counters_.queue_dropped, counters_.ce_marked, counters_.int_stamped,
                        counters_.pfc_pauses, counters_.reordered, counters_.mirrored);
  return "  switch port:" + s + "\n";
}

}  // namespace droce::droced
