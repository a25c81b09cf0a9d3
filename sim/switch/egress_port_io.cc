#include "sim/switch/egress_port_io.h"

#include "wire/packet.h"

namespace droce::sim {

EgressEdits EditLeavingFrame(uint8_t* frame, uint32_t len, bool mark, const wire::IntHop* stamp) {
  EgressEdits e;
  if (!mark && stamp == nullptr) return e;
  const wire::ParsedPacket p = wire::ParsePacket(frame, len);
  if (!p.ok()) return e;  // not RoCEv2: a switch forwards it untouched
  if (mark) e.marked = wire::MarkCe(frame, len);
  if (stamp != nullptr) e.stamped = wire::StampInt(frame, p, *stamp);
  return e;
}

namespace {
EgressPortConfig WithMaxPackets(EgressPortConfig c, uint32_t n) {
  c.max_packets = n;
  return c;
}
}  // namespace

EgressPortIo::EgressPortIo(BurstIo* port, const EgressPortConfig& config, Clock clock, void* clock_ctx,
                           uint32_t max_held_frames)
    : port_(port),
      port_model_(WithMaxPackets(config, max_held_frames)),
      clock_(clock),
      clock_ctx_(clock_ctx),
      held_(max_held_frames) {
  out_.reserve(max_held_frames);
}

EgressPortIo::~EgressPortIo() {
  while (!held_.empty()) {
    port_->Release(&held_.front(), 1);
    held_.Pop();
  }
}

uint16_t EgressPortIo::RxBurst(Frame* frames, uint16_t n) {
  Flush();
  return port_->RxBurst(frames, n);
}

uint16_t EgressPortIo::TxBurst(Frame* frames, uint16_t n) {
  const uint64_t t = now();
  for (uint16_t i = 0; i < n; ++i) {
    Frame& f = frames[i];
    const EnqueueResult r = port_model_.Enqueue(f.len, t);
    if (r.dropped) {
      ++counters_.dropped;
      port_->Release(&f, 1);
      continue;
    }
    if (r.ce_marked && EditLeavingFrame(f.data, f.len, true, nullptr).marked) ++counters_.ce_marked;  // at enqueue
    ++counters_.accepted;
    held_.Push(f);  // the port took it: it has room, as this ring (same size)
  }
  Flush();
  return n;  // every frame is the port's now: queued, or lost as a switch loses it
}

void EgressPortIo::Flush() {
  if (held_.empty()) return;
  const uint64_t t = now();
  out_.clear();
  Departure d;
  const bool stamp = port_model_.config().int_stamp;
  while (!held_.empty() && port_model_.Dequeue(t, &d)) {
    Frame& f = held_.front();
    const EgressEdits e = EditLeavingFrame(f.data, f.len, d.ce_marked && port_model_.config().mark_at == MarkAt::kDequeue,
                                           stamp ? &d.int_hop : nullptr);
    counters_.ce_marked += e.marked;
    counters_.int_stamped += e.stamped;
    out_.push_back(f);
    held_.Pop();
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
