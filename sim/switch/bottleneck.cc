#include "sim/switch/bottleneck.h"

#include <algorithm>

namespace droce::sim {

Bottleneck::Bottleneck(const BottleneckConfig& cfg) : cfg_(cfg), rng_(cfg.seed) {
  if (cfg_.stats_bin_bytes == 0) cfg_.stats_bin_bytes = 1;
  if (cfg_.kmax_bytes < cfg_.kmin_bytes) cfg_.kmax_bytes = cfg_.kmin_bytes;
}

double Bottleneck::MarkProbability(uint64_t q) const {
  if (!cfg_.ecn || q <= cfg_.kmin_bytes) return 0.0;
  if (q > cfg_.kmax_bytes) return 1.0;
  return cfg_.pmax * static_cast<double>(q - cfg_.kmin_bytes) /
         static_cast<double>(cfg_.kmax_bytes - cfg_.kmin_bytes);
}

void Bottleneck::Record(uint64_t t_ns) {
  if (t_ns <= last_record_ns_) return;
  const size_t bin = queue_bytes_ / cfg_.stats_bin_bytes;
  if (bin >= hist_ns_.size()) hist_ns_.resize(bin + 1, 0);
  hist_ns_[bin] += t_ns - last_record_ns_;
  last_record_ns_ = t_ns;
}

bool Bottleneck::Mark(uint64_t q) {
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

void Bottleneck::Drain(uint64_t now_ns) {
  while (in_port_ < fifo_.size() && fifo_[in_port_].depart_ns <= now_ns) {
    Departure& d = fifo_[in_port_];
    Record(d.depart_ns);
    queue_bytes_ -= d.bytes;
    if (cfg_.mark_at == MarkAt::kDequeue) d.ce_marked = Mark(queue_bytes_);
    ++in_port_;
  }
  Record(now_ns);
}

EnqueueResult Bottleneck::Enqueue(uint32_t bytes, uint64_t now_ns, uint64_t tag) {
  Drain(now_ns);
  EnqueueResult r;
  if (cfg_.buffer_bytes != 0 && queue_bytes_ + bytes > cfg_.buffer_bytes) {
    ++dropped_;
    r.dropped = true;
    return r;
  }
  if (cfg_.mark_at == MarkAt::kEnqueue) r.ce_marked = Mark(queue_bytes_);
  ++enqueued_;

  link_.OnSent(bytes, now_ns, cfg_.line_rate_bps);  // starts at max(now, port free)
  Departure d;
  d.bytes = bytes;
  d.tag = tag;
  d.ce_marked = r.ce_marked;
  d.enqueue_ns = now_ns;
  d.depart_ns = link_.next_send_ns();
  fifo_.push_back(d);
  queue_bytes_ += bytes;
  max_queue_ = std::max(max_queue_, queue_bytes_);
  return r;
}

bool Bottleneck::Dequeue(uint64_t now_ns, Departure* out) {
  if (fifo_.empty() || fifo_.front().depart_ns > now_ns) return false;
  Drain(now_ns);  // the front has left the port: in_port_ > 0
  *out = fifo_.front();
  fifo_.pop_front();
  --in_port_;
  departed_bytes_ += out->bytes;
  return true;
}

void Bottleneck::ResetStats(uint64_t now_ns) {
  Drain(now_ns);
  hist_ns_.assign(hist_ns_.size(), 0);
  last_record_ns_ = now_ns;
  max_queue_ = queue_bytes_;
  enqueued_ = dropped_ = marked_ = departed_bytes_ = 0;
}

uint64_t Bottleneck::QueuePercentile(double q, uint64_t now_ns) {
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

double Bottleneck::MeanQueueBytes(uint64_t now_ns) {
  Drain(now_ns);
  double sum = 0, total = 0;
  for (size_t i = 0; i < hist_ns_.size(); ++i) {
    sum += static_cast<double>(hist_ns_[i]) * (static_cast<double>(i) + 0.5) * cfg_.stats_bin_bytes;
    total += static_cast<double>(hist_ns_[i]);
  }
  return total > 0 ? sum / total : 0.0;
}

}  // namespace droce::sim
