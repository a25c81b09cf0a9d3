// A switch egress port: a FIFO drained at the port's line rate, so packets
// wait and the queue adds delay; RED/ECN marking (Kmin/Kmax/Pmax, as DCQCN's
// switches); tail drop at a buffer size; PFC-style pause from downstream (the
// port finishes the packet it is sending, then holds the rest); and INT (the
// values a port stamps into a leaving packet for HPCC: its clock, the bytes it
// has sent, its queue, its line rate). One model for every congestion point
// droce has: droced's switch ports (apps/droced/switch_knobs.h), a port in
// front of any BurstIo (EgressPortIo: droce-testpmd, the in-memory wire
// tests) and the ns-3 switches (sim/ns3). Virtual time: every call takes
// now_ns and nothing reads a clock, so a run replays exactly for a given seed
// and call sequence.
//
// Marking:
//   q <= kmin: never; kmin < q <= kmax: pmax (q - kmin) / (kmax - kmin); q > kmax: always.
// q is measured when the packet arrives (kEnqueue: bytes ahead of it;
// EnqueueResult::ce_marked says) or when it leaves (kDequeue: bytes behind
// it; Departure::ce_marked says, as the DCQCN/HPCC ns-3 models mark).
//
// A packet's departure time is fixed when it can start (at once when the
// port is not paused: FIFO at line rate); the caller collects departed
// packets with Dequeue(now) whenever it likes — the queue the next arrival
// sees does not depend on that.
#ifndef DROCE_SIM_SWITCH_EGRESS_PORT_H_
#define DROCE_SIM_SWITCH_EGRESS_PORT_H_

#include <cstdint>
#include <random>
#include <vector>

#include "cc/pacer.h"
#include "queue/ring.h"
#include "wire/int.h"

namespace droce::sim {

enum class MarkAt : uint8_t { kEnqueue, kDequeue };

struct EgressPortConfig {
  uint64_t line_rate_bps = 0;
  uint64_t kmin_bytes = 5 * 1000;
  uint64_t kmax_bytes = 200 * 1000;
  double pmax = 0.01;
  bool ecn = true;            // false: never mark (a drop-tail FIFO)
  MarkAt mark_at = MarkAt::kEnqueue;
  uint64_t buffer_bytes = 0;  // 0: unlimited; else a packet that does not fit is dropped
  // The FIFO's size in packets. 0: as many as the buffer takes (it starts
  // at kInitialPackets and doubles when full: a bounded number of
  // allocations, as the queue reaches new highs). Else it is allocated for
  // this many at construction, never again, and a packet beyond them is
  // dropped: what a caller that holds the frames in a fixed ring of its own
  // sets (droced, EgressPortIo), so its hot path never allocates.
  uint32_t max_packets = 0;
  bool int_stamp = false;     // Departure::int_hop is meant to be written into INT requests
  uint64_t seed = 1;
  uint32_t stats_bin_bytes = 64;  // resolution of the queue-length histogram
};

struct EnqueueResult {
  bool dropped = false;
  bool ce_marked = false;  // kEnqueue only; with kDequeue see Departure::ce_marked
};

struct Departure {
  uint32_t bytes = 0;
  uint64_t tag = 0;         // the caller's, e.g. flow id or ingress port
  bool ce_marked = false;
  uint64_t enqueue_ns = 0;
  uint64_t depart_ns = 0;   // when its last bit left the port
  // What the port stamps into the packet's INT request as it leaves: its
  // clock (depart_ns), the bytes it has transmitted with this packet, the
  // bytes still queued behind it, its line rate.
  wire::IntHop int_hop;
};

class EgressPort {
 public:
  explicit EgressPort(const EgressPortConfig& cfg);

  EnqueueResult Enqueue(uint32_t bytes, uint64_t now_ns, uint64_t tag = 0);

  // Hands out the oldest packet that has left the port by now; false if none.
  bool Dequeue(uint64_t now_ns, Departure* out);

  // Departure time of the oldest packet not yet dequeued (UINT64_MAX if
  // none, or if it waits for a pause to end).
  uint64_t next_departure_ns() const;

  // PFC from downstream: after the packet being sent (if any), nothing
  // starts until Resume. Both are idempotent.
  void Pause(uint64_t now_ns);
  void Resume(uint64_t now_ns);
  bool paused() const { return paused_; }

  // Bytes in the port at now: packets accepted whose last bit has not left.
  uint64_t queue_bytes(uint64_t now_ns) {
    Drain(now_ns);
    return queue_bytes_;
  }
  size_t queue_packets() const { return fifo_.size(); }
  static constexpr uint32_t kInitialPackets = 1024;

  double MarkProbability(uint64_t queue_bytes) const;

  // Statistics since construction or the last ResetStats. Queue-length
  // percentiles are time-weighted (fraction of time at or below the value) at
  // stats_bin_bytes resolution (the bin's lower edge is returned).
  void ResetStats(uint64_t now_ns);
  uint64_t QueuePercentile(double q, uint64_t now_ns);
  double MeanQueueBytes(uint64_t now_ns);
  // The time-weighted histogram: ns spent with [i, i+1) x stats_bin_bytes queued.
  const std::vector<uint64_t>& queue_histogram_ns(uint64_t now_ns) {
    Drain(now_ns);
    return hist_ns_;
  }
  uint64_t max_queue_bytes() const { return max_queue_; }
  uint64_t enqueued_packets() const { return enqueued_; }
  uint64_t dropped_packets() const { return dropped_; }
  uint64_t marked_packets() const { return marked_; }
  uint64_t departed_bytes() const { return departed_bytes_; }
  uint64_t pauses() const { return pauses_; }
  uint64_t paused_ns(uint64_t now_ns) const { return paused_ns_ + (paused_ ? now_ns - paused_since_ : 0); }

  const EgressPortConfig& config() const { return cfg_; }

 private:
  static constexpr uint64_t kWaiting = UINT64_MAX;  // depart_ns of a packet held by a pause
  struct Entry {
    Departure d;
    uint64_t start_ns = kWaiting;  // its first bit leaves
  };

  // The port's own view: packets leave at depart_ns whether or not the caller
  // has dequeued them yet.
  void Drain(uint64_t now_ns);
  void Schedule(Entry& e, uint64_t not_before_ns);
  void Record(uint64_t t_ns);  // time-weight the current queue length up to t
  bool Mark(uint64_t queue_bytes);

  EgressPortConfig cfg_;
  std::mt19937_64 rng_;
  cc::Pacer link_;              // next time the port is free (while not paused)
  uint64_t link_free_ns_ = 0;   // after a pause: when the packet in transmission ends
  // The k-th oldest packet not yet dequeued.
  Entry& At(uint32_t k) { return fifo_.at(fifo_.head() + k); }
  queue::Ring<Entry> fifo_;     // accepted, not yet dequeued by the caller
  uint32_t in_port_ = 0;        // At(in_port_..) have not left the port
  uint32_t scheduled_ = 0;      // At(..scheduled_) have their departure times
  uint64_t queue_bytes_ = 0;
  uint64_t tx_bytes_ = 0;       // bytes that have left, for INT
  bool paused_ = false;
  uint64_t paused_since_ = 0;

  std::vector<uint64_t> hist_ns_;  // time spent per bin of stats_bin_bytes
  uint64_t last_record_ns_ = 0;
  uint64_t max_queue_ = 0;
  uint64_t enqueued_ = 0;
  uint64_t dropped_ = 0;
  uint64_t marked_ = 0;
  uint64_t departed_bytes_ = 0;
  uint64_t pauses_ = 0;
  uint64_t paused_ns_ = 0;
};

// PFC at a switch's ingress (IEEE 802.1Qbb, one priority): the bytes of
// each ingress port buffered in the switch's egress queues. An ingress that
// holds more than xoff asks its upstream to pause; once it is back at xon or
// below, to resume. The switch calls Add when a packet from `ingress` is
// queued and Remove when it leaves (or is dropped after Add).
class PfcIngress {
 public:
  enum Signal : int8_t { kNone = 0, kPause = 1, kResume = -1 };
  PfcIngress(uint32_t ingresses, uint64_t xoff_bytes, uint64_t xon_bytes);
  Signal Add(uint32_t ingress, uint32_t bytes);
  Signal Remove(uint32_t ingress, uint32_t bytes);
  bool paused(uint32_t ingress) const { return state_[ingress].paused; }
  uint64_t bytes(uint32_t ingress) const { return state_[ingress].bytes; }
  uint64_t pause_frames() const { return pause_frames_; }

 private:
  struct Ingress {
    uint64_t bytes = 0;
    bool paused = false;
  };
  std::vector<Ingress> state_;
  uint64_t xoff_, xon_;
  uint64_t pause_frames_ = 0;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_SWITCH_EGRESS_PORT_H_
