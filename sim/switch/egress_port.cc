#include "sim/switch/egress_port.h"

#include <algorithm>

namespace droce::sim {

EgressPort::EgressPort(const EgressPortConfig& cfg)
    : cfg_(cfg), rng_(cfg.seed), fifo_(cfg.max_packets != 0 ? cfg.max_packets : kInitialPackets) {
  if (cfg_.stats_bin_bytes == 0) cfg_.stats_bin_bytes = 1;
  if (cfg_.kmax_bytes < cfg_.kmin_bytes) cfg_.kmax_bytes = cfg_.kmin_bytes;
}

double EgressPort::MarkProbability(uint64_t q) const {
  if (!cfg_.ecn || q <= cfg_.kmin_bytes) return 0.0;
  if (q > cfg_.kmax_bytes) return 1.0;
  return cfg_.pmax * static_cast<double>(q - cfg_.kmin_bytes) /
         static_cast<double>(cfg_.kmax_bytes - cfg_.kmin_bytes);
}

void EgressPort::Record(uint64_t t_ns) {
  if (t_ns <= last_record_ns_) return;
  const size_t bin = queue_bytes_ / cfg_.stats_bin_bytes;
  if (bin >= hist_ns_.size()) hist_ns_.resize(bin + 1, 0);
  hist_ns_[bin] += t_ns - last_record_ns_;
  last_record_ns_ = t_ns;
}

bool EgressPort::Mark(uint64_t q) {
  const double p = MarkProbability(q);
  bool m = false;
  if (p >= 1.0) {
    m = true;
  } else if (p > 0.0) {
    const double u = static_cast<double>(rng_() >> 11) * 0x1p-53;  // [0, 1)
    m = u < p;
  }
  marked_ += m;
  return m;
}

void EgressPort::Drain(uint64_t now_ns) {
  const uint32_t rate_mbps = static_cast<uint32_t>(std::min<uint64_t>(cfg_.line_rate_bps / 1'000'000, UINT32_MAX));
  while (in_port_ < scheduled_ && At(in_port_).d.depart_ns <= now_ns) {
    Departure& d = At(in_port_).d;
    Record(d.depart_ns);
    queue_bytes_ -= d.bytes;
    tx_bytes_ += d.bytes;
    if (cfg_.mark_at == MarkAt::kDequeue) d.ce_marked = Mark(queue_bytes_);
    d.int_hop = wire::IntHop{static_cast<uint32_t>(d.depart_ns), static_cast<uint32_t>(tx_bytes_),
                             static_cast<uint32_t>(std::min<uint64_t>(queue_bytes_, UINT32_MAX)), rate_mbps};
    ++in_port_;
  }
  Record(now_ns);
}

void EgressPort::Schedule(Entry& e, uint64_t not_before_ns) {
  link_.OnSent(e.d.bytes, not_before_ns, cfg_.line_rate_bps);  // starts at max(not_before, port free)
  e.start_ns = link_.last_start_ns();
  e.d.depart_ns = link_.next_send_ns();
}

EnqueueResult EgressPort::Enqueue(uint32_t bytes, uint64_t now_ns, uint64_t tag) {
  Drain(now_ns);
  EnqueueResult r;
  if (fifo_.full()) {
    if (cfg_.max_packets == 0) fifo_.Grow(fifo_.depth() * 2);
  }
  if ((cfg_.buffer_bytes != 0 && queue_bytes_ + bytes > cfg_.buffer_bytes) || fifo_.full()) {
    ++dropped_;
    r.dropped = true;
    return r;
  }
  if (cfg_.mark_at == MarkAt::kEnqueue) r.ce_marked = Mark(queue_bytes_);
  ++enqueued_;
  Entry e;
  e.d.bytes = bytes;
  e.d.tag = tag;
  e.d.ce_marked = r.ce_marked;
  e.d.enqueue_ns = now_ns;
  e.d.depart_ns = kWaiting;
  fifo_.Push(e);
  if (!paused_) {
    Schedule(fifo_.at(fifo_.tail() - 1), now_ns);
    scheduled_ = fifo_.size();
  }
  queue_bytes_ += bytes;
  max_queue_ = std::max(max_queue_, queue_bytes_);
  return r;
}

uint64_t EgressPort::next_departure_ns() const {
  return fifo_.empty() ? UINT64_MAX : fifo_.at(fifo_.head()).d.depart_ns;
}

void EgressPort::Pause(uint64_t now_ns) {
  if (paused_) return;
  Drain(now_ns);
  paused_ = true;
  paused_since_ = now_ns;
  ++pauses_;
  // The packet in transmission (if any) finishes; those after it wait.
  uint32_t i = in_port_;
  while (i < scheduled_ && At(i).start_ns <= now_ns) ++i;
  link_free_ns_ = i > in_port_ ? At(i - 1).d.depart_ns : now_ns;
  for (uint32_t k = i; k < scheduled_; ++k) {
    At(k).start_ns = kWaiting;
    At(k).d.depart_ns = kWaiting;
  }
  scheduled_ = i;
}

void EgressPort::Resume(uint64_t now_ns) {
  if (!paused_) return;
  Drain(now_ns);
  paused_ = false;
  paused_ns_ += now_ns - paused_since_;
  link_ = cc::Pacer{};
  const uint64_t start = std::max(now_ns, link_free_ns_);
  for (uint32_t k = scheduled_; k < fifo_.size(); ++k) Schedule(At(k), start);
  scheduled_ = fifo_.size();
}

bool EgressPort::Dequeue(uint64_t now_ns, Departure* out) {
  if (fifo_.empty() || fifo_.front().d.depart_ns > now_ns) return false;
  Drain(now_ns);  // the front has left the port: in_port_ > 0
  *out = fifo_.front().d;
  fifo_.Pop();
  --in_port_;
  --scheduled_;
  departed_bytes_ += out->bytes;
  return true;
}

void EgressPort::ResetStats(uint64_t now_ns) {
  Drain(now_ns);
  hist_ns_.assign(hist_ns_.size(), 0);
  last_record_ns_ = now_ns;
  max_queue_ = queue_bytes_;
  enqueued_ = dropped_ = marked_ = departed_bytes_ = pauses_ = 0;
  paused_ns_ = 0;
  if (paused_) paused_since_ = now_ns;
}

uint64_t EgressPort::QueuePercentile(double q, uint64_t now_ns) {
  Drain(now_ns);
  uint64_t total = 0;
  for (uint64_t ns : hist_ns_) total += ns;
  if (total == 0) return queue_bytes_;
  const double want = q * static_cast<double>(total);
  uint64_t acc = 0;
  for (size_t i = 0; i < hist_ns_.size(); ++i) {
    acc += hist_ns_[i];
    if (static_cast<double>(acc) >= want && acc > 0) return i * cfg_.stats_bin_bytes;
  }
  return (hist_ns_.size() - 1) * cfg_.stats_bin_bytes;
}

double EgressPort::MeanQueueBytes(uint64_t now_ns) {
  Drain(now_ns);
  double sum = 0, total = 0;
  for (size_t i = 0; i < hist_ns_.size(); ++i) {
    sum += static_cast<double>(hist_ns_[i]) * (static_cast<double>(i) + 0.5) * cfg_.stats_bin_bytes;
    total += static_cast<double>(hist_ns_[i]);
  }
  return total > 0 ? sum / total : 0.0;
}

PfcIngress::PfcIngress(uint32_t ingresses, uint64_t xoff_bytes, uint64_t xon_bytes)
    : state_(ingresses), xoff_(xoff_bytes), xon_(std::min(xon_bytes, xoff_bytes)) {}

PfcIngress::Signal PfcIngress::Add(uint32_t ingress, uint32_t bytes) {
  Ingress& s = state_[ingress];
  s.bytes += bytes;
  if (s.paused || s.bytes <= xoff_) return kNone;
  s.paused = true;
  ++pause_frames_;
  return kPause;
}

PfcIngress::Signal PfcIngress::Remove(uint32_t ingress, uint32_t bytes) {
  Ingress& s = state_[ingress];
  s.bytes -= std::min<uint64_t>(bytes, s.bytes);
  if (!s.paused || s.bytes > xon_) return kNone;
  s.paused = false;
  return kResume;
}

}  // namespace droce::sim
