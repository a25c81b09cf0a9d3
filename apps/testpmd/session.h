// One droce-testpmd endpoint: a device on a DPDK port, connected RC QPs (the
// data QPs and one control QP), one registered buffer (data slots plus a
// control area), and the progress loop every engine runs on.
//
// Threads: one thread owns a Session (its device, QPs and buffer) and calls
// everything below except the "any thread" members. Other threads (the
// prompt, DPDK's telemetry thread) ask the owner for a Snapshot or a stop
// through atomics the owner checks once per poll round; they never touch
// the device.
#ifndef DROCE_APPS_TESTPMD_SESSION_H_
#define DROCE_APPS_TESTPMD_SESSION_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "apps/testpmd/control_channel.h"
#include "apps/testpmd/options.h"
#include "apps/testpmd/pattern.h"
#include "core/device.h"
#include "drivers/ethdev/port.h"

namespace droce::testpmd {

struct Stats {
  uint64_t messages = 0, bytes = 0, errors = 0, verify_failures = 0;
  std::vector<double> latencies_us;
};

// What another thread may see of a session: copies the owner makes.
struct QpSnapshot {
  uint32_t qpn = 0;
  transport::QpState state = transport::QpState::kReset;
  transport::QpCounters counters;
  uint64_t memory_bytes = 0;
  bool control = false;  // the control QP
  // Its congestion control (doc/cc.md): the algorithm, what it decided, what it saw.
  const char* cc_name = "none";
  cc::Output cc_output;
  cc::Stats cc_stats;
};
struct Snapshot {
  bool link_up = false;
  ethdev::PortStats port;
  core::DeviceCounters dev;
  std::vector<QpSnapshot> qps;
  bool running = false;
  uint64_t messages = 0, bytes = 0, errors = 0, verify_failures = 0;
};

class Session {
 public:
  // `io` carries the frames (the port itself, or a tap around it).
  Session(const Options& opt, ethdev::EthdevPort* port, pktio::BurstIo* io);
  absl::Status Connect();     // resolve the peer, QPs to RTS, hello exchange
  uint32_t Progress();         // one poll round, with idle back-off (and periodic stats)
  uint64_t NowNs() const;
  // The client's loop condition: the deadline passed or a stop was asked for.
  bool Expired(uint64_t deadline_ns) {
    return stop_requested_.load(std::memory_order_relaxed) || NowNs() >= deadline_ns;
  }
  bool StopRequested() const { return stop_requested_.load(std::memory_order_relaxed); }
  // Serves other threads' requests (snapshot, clear stats); Progress calls it.
  void ServeRequests() {
    if (requests_.load(std::memory_order_relaxed) != served_.load(std::memory_order_relaxed)) ServeSlow();
  }

  void SendCtrl(CtrlType type, uint64_t value);
  // Polls until a control message of `type` arrives (or the deadline passes).
  bool WaitCtrl(CtrlType type, uint64_t deadline_ns, CtrlMsg* out);
  bool HasCtrl(CtrlType type) const;
  CtrlMsg TakeCtrl(CtrlType type);  // HasCtrl(type) must be true
  // Drains completions: control ones are consumed here, the rest returned.
  uint32_t PollCompletions(queue::Completion* out, uint32_t n);

  // --- any thread
  void RequestStop(bool stop) { stop_requested_.store(stop, std::memory_order_relaxed); }
  // Asks the owner for a copy of its counters; false if it did not answer
  // within timeout_ms (it is not polling).
  bool RequestSnapshot(Snapshot* out, int timeout_ms);
  void RequestClearStats();
  void set_running(bool r) { running_.store(r, std::memory_order_release); }

  const Options& opt;
  ethdev::EthdevPort* port;
  std::unique_ptr<core::Device> dev;
  uint32_t pd = 0, cq = 0, qpn = 0;  // qpn: the first data QP (single-QP engines)
  uint32_t ctrl_qpn = 0;             // control messages
  std::vector<uint32_t> qpns;        // data QPs; slot k travels on qpns[k % qps]
  std::vector<uint64_t> qp_memory;   // per data QP, then the control QP: bytes its creation left allocated
  uint8_t sgid_index = 1;
  core::Gid peer_gid{};
  uint32_t QpnForSeq(uint64_t seq) const {
    return qpns[(seq % opt.outstanding) % qpns.size()];  // one QP per slot keeps its writes ordered
  }
  std::vector<uint8_t> buf;  // slots (outstanding x size) then the control area (kCtrlAreaBytes)
  uint64_t va = 0;
  mem::MrKeys keys{};
  uint64_t peer_va = 0;
  uint32_t peer_rkey = 0;
  Stats stats;
  uint32_t data_recvs_posted = 0;  // send_bw server: receives on the data QP (kept across runs)

  uint8_t* slot(uint32_t i) { return buf.data() + uint64_t{i % opt.outstanding} * opt.size; }
  uint64_t slot_va(uint32_t i) const { return va + uint64_t{i % opt.outstanding} * opt.size; }
  uint64_t peer_slot_va(uint32_t i) const { return peer_va + uint64_t{i % opt.outstanding} * opt.size; }

 private:
  void MaybePrintStats(uint64_t now);
  void ServeSlow();
  uint64_t next_stats_ns_ = 0, last_stats_ns_ = 0, last_stats_bytes_ = 0;
  uint32_t idle_ = 0;
  std::optional<ControlChannel> ctrl_;  // on ctrl_qpn, in the buffer's control area
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> running_{false};
  // Requests from other threads: a requester (one at a time, under mu_)
  // fills in what it wants, bumps requests_ (release); the owner serves and
  // sets served_ = requests_ (release).
  std::mutex mu_;
  std::atomic<uint64_t> requests_{0}, served_{0};
  std::atomic<bool> want_snapshot_{false}, want_clear_{false};  // relaxed: ordered by requests_
  Snapshot snapshot_;
};

// A traffic engine: what the client drives and what the passive side does.
struct Engine {
  const char* name;
  const char* description;
  void (*client)(Session& s, uint64_t deadline_ns);
  void (*server)(Session& s);
  void (*prepare)(Session& s);  // server, before it says ready (may be null)
};

const Engine* FindEngine(const std::string& name);
const std::vector<const Engine*>& AllEngines();

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_SESSION_H_
