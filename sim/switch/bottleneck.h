// An emulated congestion point: one switch egress port as a FIFO drained at a
// configured line rate, marking ECN CE with RED probabilities on the
// instantaneous queue (as DCQCN's switches do) and optionally tail-dropping
// at a buffer size. Virtual time: every call takes now_ns and nothing reads a
// clock, so a run replays exactly for a given seed and call sequence.
//
// Marking (the RED/ECN profile of Zhu et al., SIGCOMM 2015):
//   q <= kmin: never; kmin < q <= kmax: pmax * (q - kmin) / (kmax - kmin); q > kmax: always.
// q is measured either when the packet arrives (kEnqueue, the default: bytes
// ahead of it; EnqueueResult::ce_marked says) or when it leaves (kDequeue:
// bytes behind it; Departure::ce_marked says). kDequeue is egress marking as
// in the DCQCN/HPCC ns-3 models: the mark reflects the queue when the packet
// leaves rather than one queueing delay earlier, so feedback is fresher.
//
// A packet's departure time is fixed when it is accepted (FIFO at line rate);
// the caller collects departed packets with Dequeue(now) whenever it likes —
// the queue length the next arrival sees does not depend on that.
#ifndef DROCE_SIM_SWITCH_BOTTLENECK_H_
#define DROCE_SIM_SWITCH_BOTTLENECK_H_

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "cc/dcqcn.h"

namespace droce::sim {

enum class MarkAt : uint8_t { kEnqueue, kDequeue };

struct BottleneckConfig {
  uint64_t line_rate_bps = 0;
  uint64_t kmin_bytes = 5 * 1000;
  uint64_t kmax_bytes = 200 * 1000;
  double pmax = 0.01;
  bool ecn = true;            // false: never mark (a drop-tail FIFO)
  MarkAt mark_at = MarkAt::kEnqueue;
  uint64_t buffer_bytes = 0;  // 0: unlimited; else a packet that does not fit is dropped
  uint64_t seed = 1;
  uint32_t stats_bin_bytes = 64;  // resolution of the queue-length histogram
};

struct EnqueueResult {
  bool dropped = false;
  bool ce_marked = false;  // kEnqueue only; with kDequeue see Departure::ce_marked
};

struct Departure {
  uint32_t bytes = 0;
  uint64_t tag = 0;         // the caller's, e.g. flow id
  bool ce_marked = false;
  uint64_t enqueue_ns = 0;
  uint64_t depart_ns = 0;   // when its last bit left the port
};

class Bottleneck {
 public:
  explicit Bottleneck(const BottleneckConfig& cfg);

  EnqueueResult Enqueue(uint32_t bytes, uint64_t now_ns, uint64_t tag = 0);

  // Hands out the oldest packet that has left the port by now; false if none.
  bool Dequeue(uint64_t now_ns, Departure* out);

  // Departure time of the oldest packet not yet dequeued (UINT64_MAX if none).
  uint64_t next_departure_ns() const {
    return fifo_.empty() ? UINT64_MAX : fifo_.front().depart_ns;
  }

  // Bytes in the port at now: packets accepted whose last bit has not left.
  uint64_t queue_bytes(uint64_t now_ns) {
    Drain(now_ns);
    return queue_bytes_;
  }

  double MarkProbability(uint64_t queue_bytes) const;

  // Statistics since construction or the last ResetStats. Queue-length
  // percentiles are time-weighted (fraction of time at or below the value) at
  // stats_bin_bytes resolution (the bin's lower edge is returned).
  void ResetStats(uint64_t now_ns);
  uint64_t QueuePercentile(double q, uint64_t now_ns);
  double MeanQueueBytes(uint64_t now_ns);
  uint64_t max_queue_bytes() const { return max_queue_; }
  uint64_t enqueued_packets() const { return enqueued_; }
  uint64_t dropped_packets() const { return dropped_; }
  uint64_t marked_packets() const { return marked_; }
  uint64_t departed_bytes() const { return departed_bytes_; }

  const BottleneckConfig& config() const { return cfg_; }

 private:
  // The port's own view: packets leave at depart_ns whether or not the caller
  // has dequeued them yet.
  void Drain(uint64_t now_ns);
  void Record(uint64_t t_ns);  // time-weight the current queue length up to t
  bool Mark(uint64_t queue_bytes);

  BottleneckConfig cfg_;
  std::mt19937_64 rng_;
  cc::Pacer link_;  // next time the port is free
  std::deque<Departure> fifo_;  // accepted, not yet dequeued by the caller
  size_t in_port_ = 0;          // fifo_[in_port_..] have not left the port
  uint64_t queue_bytes_ = 0;

  std::vector<uint64_t> hist_ns_;  // time spent per bin of stats_bin_bytes
  uint64_t last_record_ns_ = 0;
  uint64_t max_queue_ = 0;
  uint64_t enqueued_ = 0;
  uint64_t dropped_ = 0;
  uint64_t marked_ = 0;
  uint64_t departed_bytes_ = 0;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_SWITCH_BOTTLENECK_H_
