// droce's NIC and a switch egress port as models another simulator drives:
// the header the ns-3 glue (sim/ns3/nodes.h) includes. It is C++17 and
// names nothing of lib/ or absl, because ns-3 3.37's headers do not compile
// as C++20 with GCC 12 and the glue that includes them is built as C++17;
// host_model.cc (C++20) holds the real core::Device, transport and cc.
//
// HostModel: one core::Device (the real transport and lib/cc's algorithms)
// on a burst port whose frames come from Receive() and leave through a
// TransmitFn; time is whatever the caller passes to Poll. A flow is RDMA
// WRITEs of one RC QP into a peer's memory, kept `depth` messages deep,
// counted done when its last WRITE completes (its last ACK arrived).
//
// SwitchPortModel: sim::EgressPort (FIFO at line rate, RED/ECN, tail drop,
// INT) holding the frames themselves; a frame leaves CE-marked and stamped
// as EgressPortIo edits it.
#ifndef DROCE_SIM_NS3_HOST_MODEL_H_
#define DROCE_SIM_NS3_HOST_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace droce::ns3glue {

// Hands one frame to the host's link; false when the link's queue is full
// (the device keeps it and retries on a later Poll).
using TransmitFn = bool (*)(void* ctx, const uint8_t* frame, uint32_t len);

struct HostModelConfig {
  uint8_t mac[6] = {0x02, 0, 0, 0, 0, 1};
  uint32_t ipv4 = 0x0A000001;
  uint64_t line_rate_bps = 100'000'000'000ull;
  std::string cc = "none";  // cc= of a device file: dcqcn, timely, hpcc, swift, none
  std::string cc_params;    // cc_params=: "name=value ..."
  uint32_t mem_bytes = 1u << 20;  // registered memory a flow writes from and into
};

struct FlowProgress {
  uint64_t bytes = 0;         // the flow's size
  uint64_t bytes_acked = 0;   // of its WRITEs that completed
  uint64_t start_ns = 0;
  uint64_t finish_ns = 0;     // its last WRITE's completion (0 while running)
  bool done = false;
  bool failed = false;        // a completion with an error status
};

// What a QP's congestion control shows (doc/cc.md "Per QP").
struct CcView {
  const char* algorithm = "none";
  bool rate_limited = false;
  uint64_t rate_bps = 0;
  uint32_t window_packets = 0;
  uint64_t rtt_samples = 0, last_rtt_ns = 0, min_rtt_ns = 0;
  uint64_t telemetry_acks = 0, cnps = 0, rate_decreases = 0;
};

// A QP's transport counters that say how its data got through.
struct QpView {
  uint64_t tx_packets = 0, retransmitted_packets = 0, timeouts = 0;
  uint64_t naks_received = 0, out_of_sequence = 0, duplicates_received = 0;
};

struct HostCounters {
  uint64_t frames_in = 0, frames_out = 0;
  uint64_t tx_refused = 0;  // frames the link did not take (retried later)
  uint64_t rx_dropped = 0;  // arrivals beyond the receive ring (a NIC's rx overrun)
};

class HostModel {
 public:
  // Null with *error set when the configuration is refused (an unknown cc=, a bad parameter).
  static std::unique_ptr<HostModel> Create(const HostModelConfig& cfg, TransmitFn tx, void* tx_ctx,
                                           std::string* error);
  ~HostModel();
  HostModel(const HostModel&) = delete;
  HostModel& operator=(const HostModel&) = delete;

  // A frame from the link; the next Poll receives it.
  void Receive(const uint8_t* frame, uint32_t len);
  // One round of the device's poll loop at now_ns, then the flows' completions
  // and their next WRITEs. Returns packets received + sent.
  uint32_t Poll(uint64_t now_ns);
  // When the poll loop next has something to do, after a Poll at now_ns:
  // now_ns + busy_period while it moved packets, has QPs with transmit work
  // or frames the link refused; else the earliest QP deadline (retransmit,
  // pacer release, the algorithm's timer); UINT64_MAX when only an arriving
  // frame can give it work. A host's busy poll loop is modelled by
  // busy_period; the rest of the time it would spin without effect.
  uint64_t NextPollNs(uint64_t now_ns, uint64_t busy_period_ns) const;

  // An RC QP running the host's cc=, its send queue `max_send_wr` deep (a flow
  // keeps `depth` WRITEs posted; a send queue entry holds 256 bytes of inline
  // data, so thousands of QPs stay small only with short queues); 0 with
  // *error on failure.
  uint32_t CreateQp(std::string* error, uint32_t max_send_wr = 1024);
  // RESET -> RTS toward `peer_qpn` on `peer`, PSNs 0.
  bool ConnectQp(uint32_t qpn, const HostModel& peer, uint32_t peer_qpn, uint32_t mtu, std::string* error);
  // `bytes` of WRITEs of at most msg_bytes each from qpn into the peer's memory, `depth` outstanding.
  // Returns the flow's id (for Flow()), or -1 with *error.
  int StartFlow(uint32_t qpn, const HostModel& peer, uint64_t bytes, uint32_t msg_bytes, uint32_t depth,
                uint64_t now_ns, std::string* error);
  const FlowProgress& Flow(int id) const;
  CcView Cc(uint32_t qpn) const;
  QpView Qp(uint32_t qpn) const;
  const HostCounters& counters() const;
  // "name=value ..." of this host's non-zero counters: the device's, then the link's.
  std::string DescribeCounters() const;

 private:
  struct Impl;
  explicit HostModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SwitchPortConfig {
  uint64_t line_rate_bps = 100'000'000'000ull;
  bool ecn = true;
  uint64_t kmin_bytes = 100'000;
  uint64_t kmax_bytes = 400'000;
  double pmax = 0.2;
  bool mark_at_dequeue = false;
  uint64_t buffer_bytes = 0;  // 0: unlimited
  bool int_stamp = false;
  uint64_t seed = 1;
};

struct SwitchPortStats {
  uint64_t queue_bytes = 0;
  uint64_t max_queue_bytes = 0;
  double mean_queue_bytes = 0;
  uint64_t p50_queue_bytes = 0, p99_queue_bytes = 0;
  uint64_t enqueued = 0, dropped = 0, marked = 0, stamped = 0;
  uint64_t departed_bytes = 0;
  uint64_t pauses = 0;      // PFC pauses from downstream
  uint64_t paused_ns = 0;
};

class SwitchPortModel {
 public:
  static std::unique_ptr<SwitchPortModel> Create(const SwitchPortConfig& cfg);
  ~SwitchPortModel();
  SwitchPortModel(const SwitchPortModel&) = delete;
  SwitchPortModel& operator=(const SwitchPortModel&) = delete;

  // False: tail-dropped.
  bool Enqueue(const uint8_t* frame, uint32_t len, uint64_t now_ns);
  // When the oldest frame's last bit leaves (UINT64_MAX: empty).
  uint64_t NextDepartureNs() const;
  // The oldest frame that has left by now_ns, edited as it leaves; null if none. Valid until the next call.
  const uint8_t* Dequeue(uint64_t now_ns, uint32_t* len);
  uint64_t QueueBytes(uint64_t now_ns);
  SwitchPortStats Stats(uint64_t now_ns);
  // PFC from downstream: after the frame being sent, nothing leaves until Resume.
  void Pause(uint64_t now_ns);
  void Resume(uint64_t now_ns);
  // Time-weighted queue-length histogram: ns spent with [i, i+1) x bin_bytes queued.
  const std::vector<uint64_t>& QueueHistogramNs(uint64_t now_ns);
  uint32_t histogram_bin_bytes() const;

 private:
  struct Impl;
  explicit SwitchPortModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// PFC accounting at a switch's ingress ports (sim::PfcIngress): the bytes
// each ingress has in the switch's egress queues.
class PfcModel {
 public:
  enum Signal : int { kNone = 0, kPause = 1, kResume = -1 };
  PfcModel(uint32_t ingresses, uint64_t xoff_bytes, uint64_t xon_bytes);
  ~PfcModel();
  PfcModel(const PfcModel&) = delete;
  PfcModel& operator=(const PfcModel&) = delete;
  Signal Add(uint32_t ingress, uint32_t bytes);     // a frame from `ingress` was queued
  Signal Remove(uint32_t ingress, uint32_t bytes);  // ... and has left
  uint64_t pause_frames() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_HOST_MODEL_H_
