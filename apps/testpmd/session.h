// One droce-testpmd endpoint: a device on a DPDK port, one connected RC QP,
// one registered buffer (data slots plus a control area), and the progress
// loop every engine runs on.
#ifndef DROCE_APPS_TESTPMD_SESSION_H_
#define DROCE_APPS_TESTPMD_SESSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "drivers/ethdev/port.h"

namespace droce::testpmd {

struct Options {
  std::string role = "server";  // server (passive side) or client (drives the engine)
  std::string port = "net_memif0";
  std::string fwd = "write_bw";
  uint32_t ip = 0x0A000001, peer_ip = 0x0A000002;  // 10.0.0.1 / 10.0.0.2
  core::Mac mac{0x02, 0, 0, 0, 0, 1}, peer_mac{0x02, 0, 0, 0, 0, 2};
  bool peer_mac_static = false;  // --peer-mac given: no ARP (RDMA engines resolve the peer by ARP)
  uint32_t mtu = 4096;
  uint32_t size = 65536;
  uint32_t outstanding = 16;
  uint32_t qps = 1;          // write_bw/read_bw spread slots over this many QPs
  double duration = 3;
  bool interactive = false;  // a prompt instead of one run
  double stats_period = 0;   // print a stats line this often while running (0: only at the end)
  uint32_t iterations = 0;  // 0: run for `duration`
  uint32_t idle_spins = 64;  // empty polls before yielding the CPU
  double drop_rate = 0;      // transmitted frames dropped on purpose
  uint64_t seed = 1;
  std::string pcap_out;      // write sent and received frames here
  // Congestion control (issue 6): the reaction point's profile and line rate,
  // and an emulated congestion point on this side's transmit path.
  std::string dcqcn = "off";  // off | paper | mlx5
  double line_rate_gbps = 100;
  double bottleneck_gbps = 0;  // 0: none
  double kmin_kb = 5, kmax_kb = 200, pmax = 0.01, buffer_kb = 0;
};

struct Stats {
  uint64_t messages = 0, bytes = 0, errors = 0, verify_failures = 0;
  std::vector<double> latencies_us;
};

// Control messages travel as small SENDs in the buffer's control area.
enum class CtrlType : uint32_t { kHello = 1, kBye = 2 };
struct CtrlMsg {
  uint64_t magic;  // kCtrlMagic
  uint32_t type;
  uint32_t rkey;
  uint64_t va;
  uint64_t value;  // bye: messages sent (lets the passive side verify)
};
inline constexpr uint64_t kCtrlMagic = 0x64726F6365637472ull;  // "droce ctr"
inline constexpr uint64_t kCtrlWrIdBase = 1ull << 62;

class Session {
 public:
  // `io` carries the frames (the port itself, or a tap around it).
  Session(const Options& opt, ethdev::EthdevPort* port, pktio::BurstIo* io);
  absl::Status Connect();     // QP to RTS, hello exchange (peer's buffer address and key)
  uint32_t Progress();         // one poll round, with idle back-off (and periodic stats)
  uint64_t NowNs() const;

  // Posts a receive for a control message.
  void PostCtrlRecv();
  void SendCtrl(CtrlType type, uint64_t value);
  // Polls until a control message of `type` arrives (or the deadline passes).
  bool WaitCtrl(CtrlType type, uint64_t deadline_ns, CtrlMsg* out);
  // Drains completions: control ones are consumed here, the rest returned.
  uint32_t PollCompletions(queue::Completion* out, uint32_t n);

  const Options& opt;
  ethdev::EthdevPort* port;
  std::unique_ptr<core::Device> dev;
  uint32_t pd = 0, cq = 0, qpn = 0;  // qpn: the first QP (control messages, single-QP engines)
  std::vector<uint32_t> qpns;        // all QPs; slot k travels on qpns[k % qps]
  uint32_t QpnForSeq(uint64_t seq) const {
    return qpns[(seq % opt.outstanding) % qpns.size()];  // one QP per slot keeps its writes ordered
  }
  std::vector<uint8_t> buf;  // slots (outstanding x size) then a 4 KiB control area
  uint64_t va = 0;
  mem::MrKeys keys{};
  uint64_t peer_va = 0;
  uint32_t peer_rkey = 0;
  Stats stats;
  std::vector<CtrlMsg> ctrl_inbox;

  uint8_t* slot(uint32_t i) { return buf.data() + uint64_t{i % opt.outstanding} * opt.size; }
  uint64_t slot_va(uint32_t i) const { return va + uint64_t{i % opt.outstanding} * opt.size; }
  uint64_t peer_slot_va(uint32_t i) const { return peer_va + uint64_t{i % opt.outstanding} * opt.size; }

 private:
  void MaybePrintStats(uint64_t now);
  uint64_t next_stats_ns_ = 0, last_stats_ns_ = 0, last_stats_bytes_ = 0;
  uint64_t ctrl_offset() const { return uint64_t{opt.outstanding} * opt.size; }
  uint32_t idle_ = 0;
  uint64_t ctrl_recv_id_ = 0;
};

// Fills `n` bytes with the pattern of message `seq` (its first 8 bytes are seq).
void FillPattern(uint8_t* p, uint32_t n, uint64_t seq);
bool CheckPattern(const uint8_t* p, uint32_t n, uint64_t seq);

// A traffic engine: what the client drives and what the passive side does.
struct Engine {
  const char* name;
  const char* description;
  void (*client)(Session& s, uint64_t deadline_ns);
  void (*server)(Session& s);
};

const Engine* FindEngine(const std::string& name);
const std::vector<const Engine*>& AllEngines();

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_SESSION_H_
