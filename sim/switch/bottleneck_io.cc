#include "sim/switch/bottleneck_io.h"

#include "wire/packet.h"

namespace droce::sim {

namespace {
// CE on an ECN-capable RoCEv2 frame (Not-ECT frames and non-RoCE frames are
// left alone, as a switch leaves them). True if the frame was changed.
bool MarkCe(Frame& f) {
  const wire::ParsedPacket p = wire::ParsePacket(f.data, f.len);
  return p.ok() && wire::MarkCe(f.data, f.len);
}
}  // namespace

BottleneckIo::BottleneckIo(BurstIo* port, const BottleneckConfig& config, Clock clock, void* clock_ctx,
                           uint32_t max_held_frames)
    : port_(port), bn_(config), clock_(clock), clock_ctx_(clock_ctx), max_held_(max_held_frames) {
  out_.reserve(64);
}

BottleneckIo::~BottleneckIo() {
  while (!held_.empty()) {
    port_->Release(&held_.front(), 1);
    held_.pop_front();
  }
}

uint16_t BottleneckIo::RxBurst(Frame* frames, uint16_t n) {
  Flush();
  return port_->RxBurst(frames, n);
}

uint16_t BottleneckIo::TxBurst(Frame* frames, uint16_t n) {
  const uint64_t t = now();
  for (uint16_t i = 0; i < n; ++i) {
    Frame& f = frames[i];
    if (held_.size() >= max_held_) {
      ++counters_.dropped;
      port_->Release(&f, 1);
      continue;
    }
    const EnqueueResult r = bn_.Enqueue(f.len, t);
    if (r.dropped) {
      ++counters_.dropped;
      port_->Release(&f, 1);
      continue;
    }
    if (r.ce_marked && MarkCe(f)) ++counters_.ce_marked;  // marking at enqueue
    ++counters_.accepted;
    held_.push_back(f);
  }
  Flush();
  return n;  // every frame is the bottleneck's now: queued, or lost as a switch loses it
}

void BottleneckIo::Flush() {
  if (held_.empty()) return;
  const uint64_t t = now();
  out_.clear();
  Departure d;
  while (!held_.empty() && bn_.Dequeue(t, &d)) {
    if (d.ce_marked && MarkCe(held_.front())) ++counters_.ce_marked;  // marking at dequeue
    out_.push_back(held_.front());
    held_.pop_front();
  }
  if (out_.empty()) return;
  const uint16_t total = static_cast<uint16_t>(out_.size());
  const uint16_t sent = port_->TxBurst(out_.data(), total);
  counters_.forwarded += sent;
  if (sent < total) {
    counters_.port_refused += total - sent;
    port_->Release(out_.data() + sent, static_cast<uint16_t>(total - sent));
  }
}

}  // namespace droce::sim
