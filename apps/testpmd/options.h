// droce-testpmd's options (what follows EAL's `--`): one table, each entry an
// option's name, the name of its value, its help and how it sets Options.
// The usage text is printed from the table and the parser walks it; the
// checks that involve several options follow the walk. No DPDK here: the
// unit test parses without EAL.
#ifndef DROCE_APPS_TESTPMD_OPTIONS_H_
#define DROCE_APPS_TESTPMD_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/config.h"

namespace droce::testpmd {

struct Options {
  std::string role = "server";  // server (passive side) or client (drives the engine)
  std::string port = "net_memif0";
  std::string fwd = "write_bw";
  // Own and peer address as GIDs: IPv4-mapped (::ffff:a.b.c.d) or IPv6.
  core::Gid ip{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  core::Gid peer_ip{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  core::Mac mac{0x02, 0, 0, 0, 0, 1}, peer_mac{0x02, 0, 0, 0, 0, 2};
  bool peer_mac_static = false;  // --peer-mac given: no ARP/ND (RDMA engines resolve the peer)
  uint32_t mtu = 4096;
  uint32_t size = 65536;
  uint32_t outstanding = 16;
  uint32_t qps = 1;          // write_bw/read_bw spread slots over this many QPs
  double duration = 3;
  bool duration_set = false;  // --duration or --iterations given (-i: otherwise run until stop)
  bool interactive = false;  // a prompt instead of one run
  bool auto_start = false;   // -i: start forwarding before giving the prompt
  bool telemetry = false;    // DPDK telemetry socket with /droce/ commands
  double start_at = 0;       // client: connect, then start the run at this CLOCK_MONOTONIC second (0: at once)
  double stats_period = 0;   // print a stats line this often while running (0: only at the end)
  uint32_t iterations = 0;  // 0: run for `duration`
  uint32_t idle_spins = 64;  // empty polls before yielding the CPU
  // raw_stream: frames per TxBurst, and whether the server answers every
  // receive burst with one small frame (as droce's coalesced ACK answers a burst).
  uint32_t burst = 1;
  bool raw_ack = false;
  // A net_memif port's frames copied straight into and out of the ring
  // (ethdev::MemifTx / MemifRx), as the verbs runtime's memif devices do.
  bool memif_direct = false;
  double drop_rate = 0;      // transmitted frames dropped on purpose
  uint64_t seed = 1;
  std::string pcap_out;      // write sent and received frames here
  // Traffic class: DSCP and ECN codepoint of data packets, 802.1Q tag.
  uint8_t dscp = 0;
  uint8_t ecn = 2;           // wire::kEcnEct0
  int vlan = -1;             // -1: untagged; 0 with --pcp alone (priority tag)
  uint8_t pcp = 0;
  // Congestion control: the reaction point's profile and line rate,
  // and an emulated congestion point on this side's transmit path.
  std::string dcqcn = "off";  // off | paper | mlx5
  std::string cc = "none";    // --cc: dcqcn | timely | hpcc | swift | none (doc/cc.md)
  std::string cc_params;      // --cc-params name=value,...
  double line_rate_gbps = 100;
  double bottleneck_gbps = 0;  // 0: none
  double kmin_kb = 5, kmax_kb = 200, pmax = 0.01, buffer_kb = 0;
  // A device of the host fabric (--device): the process attaches to droced
  // (fabric_port.h); its QPNs start at qpn_base, the peer's at peer_qpn_base.
  // Off the fabric both are core::Device::kFirstQpn.
  std::string device;
  bool ip_set = false;       // --ip given (on the fabric: one of the device's addresses)
  bool peer_ip_set = false;
  uint32_t qpn_range = 1, peer_qpn_range = 0;  // --qpn-range, --peer-qpn-range (0: as qpn_range)
  uint32_t qpn_base = 0x11, peer_qpn_base = 0x11;
};

// The usage text, generated from the option table.
std::string Usage();

// True if `args` asks for the usage (-h or --help anywhere).
bool WantsHelp(const std::vector<std::string>& args);

// Parses the options; `engines` are the names --fwd accepts. An error says
// which option and why (the caller prints it and exits 2).
absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args, const std::vector<std::string>& engines);

// The raw-wire baselines (raw_lat, raw_stream) bypass droce's transport.
bool IsRaw(const std::string& fwd);

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_OPTIONS_H_
