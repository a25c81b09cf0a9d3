#include "apps/testpmd/options.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "apps/common/option_table.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cc/congestion_control.h"
#include "drivers/verbs/device_config.h"
#include "transport/types.h"
#include "wire/gid.h"
#include "wire/headers.h"

namespace droce::testpmd {
namespace {

// What the walk sets besides Options: which options were given.
struct Parse {
  Options o;
  bool port_set = false, mac_set = false, peer_mac_set = false;
  const std::vector<std::string>* engines = nullptr;  // what --fwd accepts
};

using OptionSpec = apps::OptionSpec<Parse>;
using apps::Integer;
using apps::Number;

absl::Status Bad(const std::string& what) { return apps::BadOption(what); }

// An IPv4 address as an IPv4-mapped GID, or an IPv6 address.
absl::Status Ip(const std::string& name, const std::string& s, core::Gid* out) {
  core::Gid g{};
  if (s.find(':') != std::string::npos) {
    if (inet_pton(AF_INET6, s.c_str(), g.data()) != 1) return Bad("bad IPv6 address '" + s + "' for " + name);
    if (g[0] == 0xff) return Bad(name + " must not be a multicast address");
    if (g == core::Gid{} || wire::IsIpv4MappedGid(g)) return Bad(name + ": '" + s + "' is not a usable IPv6 address");
    *out = g;
    return absl::OkStatus();
  }
  std::vector<std::string> parts = absl::StrSplit(s, '.');
  if (parts.size() != 4) return Bad("bad IPv4 address '" + s + "' for " + name);
  g[10] = g[11] = 0xFF;
  for (int i = 0; i < 4; ++i) {
    const std::string& part = parts[i];
    char* end;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end || v < 0 || v > 255) return Bad("bad IPv4 address '" + s + "' for " + name);
    g[12 + i] = static_cast<uint8_t>(v);
  }
  *out = g;
  return absl::OkStatus();
}

absl::Status Mac(const std::string& name, const std::string& s, core::Mac* out) {
  absl::StatusOr<core::Mac> m = verbs::ParseMac(s);  // the device file's form: 6 groups of 2 hex digits, unicast
  if (!m.ok()) return Bad(name + ": " + std::string(m.status().message()));
  *out = *m;
  return absl::OkStatus();
}

// The table. --role is applied before the others (the client's defaults
// swap own and peer address), the rest in the order given.
const std::vector<OptionSpec>& Table() {
  static const std::vector<OptionSpec> table = {
      {"--role", nullptr, "server|client|pair",
       "server answers and verifies; client drives the engine; pair:\nboth in one process on a net_ring pair, no "
       "--vdev needed (server)",
       [](Parse& p, const std::string&, const std::string& v) {
         if (v != "server" && v != "client" && v != "pair") return Bad("--role must be server, client or pair");
         p.o.role = v;
         return absl::OkStatus();
       }},
      {"--port", nullptr, "NAME", "DPDK port name, e.g. net_memif0 (net_memif0)",
       [](Parse& p, const std::string&, const std::string& v) {
         p.o.port = v;
         p.port_set = true;
         return absl::OkStatus();
       }},
      {"--device", nullptr, "NAME",
       "a device of the host fabric instead of a port: attach to droced\n($DROCE_RUN_DIR), its MAC and addresses; "
       "needs --peer-ip",
       [](Parse& p, const std::string&, const std::string& v) {
         if (!verbs::IsValidDeviceName(v)) return Bad("--device: bad device name '" + v + "'");
         p.o.device = v;
         return absl::OkStatus();
       }},
      {"--qpn-range", nullptr, "K", "on the fabric: QPNs K*1024 up, 1..16383 (1)",
       [](Parse& p, const std::string& k, const std::string& v) { return Integer(k, v, 1, 16383, &p.o.qpn_range); }},
      {"--peer-qpn-range", nullptr, "K", "on the fabric: the peer's range (as --qpn-range)",
       [](Parse& p, const std::string& k, const std::string& v) {
         return Integer(k, v, 1, 16383, &p.o.peer_qpn_range);
       }},
      {"--fwd", nullptr, "ENGINE",
       "write_bw | read_bw | send_bw | atomic_bw | write_lat, or the raw-wire\nbaselines raw_lat | raw_stream "
       "(write_bw)",
       [](Parse& p, const std::string&, const std::string& v) {
         if (std::find(p.engines->begin(), p.engines->end(), v) == p.engines->end()) {
           return Bad("unknown engine '" + v + "' (" + absl::StrJoin(*p.engines, ", ") + ")");
         }
         p.o.fwd = v;
         return absl::OkStatus();
       }},
      {"--ip", nullptr, "ADDR", "own IPv4 or IPv6 address (10.0.0.1 server, 10.0.0.2 client)",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.o.ip_set = true;
         return Ip(k, v, &p.o.ip);
       }},
      {"--peer-ip", nullptr, "ADDR",
       "peer's address, same family as --ip (IPv6: resolved by neighbour discovery)",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.o.peer_ip_set = true;
         return Ip(k, v, &p.o.peer_ip);
       }},
      {"--mac", nullptr, "MAC", "own MAC (02:00:00:00:00:01 server, :02 client)",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.mac_set = true;
         return Mac(k, v, &p.o.mac);
       }},
      {"--peer-mac", nullptr, "MAC",
       "static next hop; without it the peer is resolved by ARP or ND\n(raw engines use 02:00:00:00:00:02 / :01)",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.peer_mac_set = true;
         return Mac(k, v, &p.o.peer_mac);
       }},
      {"--mtu", nullptr, "BYTES", "256..4096 (4096)",
       [](Parse& p, const std::string& k, const std::string& v) {
         if (absl::Status s = Number(k, v, 256, 4096, &p.o.mtu); !s.ok()) return s;
         if (transport::MtuBytesToEnum(p.o.mtu) == 0) return Bad("--mtu must be 256, 512, 1024, 2048 or 4096");
         return absl::OkStatus();
       }},
      {"--size", nullptr, "BYTES", "message size (65536; write_lat: at least 8)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 1, 1 << 24, &p.o.size); }},
      {"--outstanding", nullptr, "N", "messages in flight, 2..4096 (16)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 2, 4096, &p.o.outstanding); }},
      {"--qps", nullptr, "N", "QPs (write_bw, read_bw), 1..1024; slots spread over them (1)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 1, 1024, &p.o.qps); }},
      {"--duration", nullptr, "SECONDS", "client run time (3; with -i: until stop)",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.o.duration_set = true;
         return Number(k, v, 0.01, 3600, &p.o.duration);
       }},
      {"--iterations", nullptr, "N", "stop after N messages instead",
       [](Parse& p, const std::string& k, const std::string& v) {
         p.o.duration_set = true;
         return Number(k, v, 1, 1e9, &p.o.iterations);
       }},
      {"--idle-spins", nullptr, "N", "empty polls before yielding the CPU (64)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e9, &p.o.idle_spins); }},
      {"--burst", nullptr, "N", "raw_stream: frames per transmit burst, 1..32 (1)",
       [](Parse& p, const std::string& k, const std::string& v) { return Integer(k, v, 1, 32, &p.o.burst); }},
      {"--raw-ack", nullptr, nullptr,
       "raw_stream: the server answers every receive burst with one 64 B\nframe, as droce's coalesced ACK does",
       [](Parse& p, const std::string&, const std::string&) {
         p.o.raw_ack = true;
         return absl::OkStatus();
       }},
      {"--memif-direct", nullptr, nullptr,
       "a net_memif port's frames are copied straight into and out of the\nring (MemifTx/MemifRx), as verbs devices "
       "do (off: the PMD)",
       [](Parse& p, const std::string&, const std::string&) {
         p.o.memif_direct = true;
         return absl::OkStatus();
       }},
      {"--drop-rate", nullptr, "P", "drop transmitted frames with probability P, 0..0.5 (0)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 0.5, &p.o.drop_rate); }},
      {"--seed", nullptr, "N", "seed for --drop-rate (1)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e18, &p.o.seed); }},
      {"--pcap-out", nullptr, "FILE", "write every frame sent and received to a pcap file",
       [](Parse& p, const std::string&, const std::string& v) {
         p.o.pcap_out = v;
         return absl::OkStatus();
       }},
      {"--stats-period", nullptr, "S", "print a stats line every S seconds while running (0: off)",
       [](Parse& p, const std::string& k, const std::string& v) {
         return Number(k, v, 0, 3600, &p.o.stats_period);
       }},
      {"--start-at", nullptr, "T",
       "client: connect, then start the run when CLOCK_MONOTONIC reaches\nT seconds (several senders join one after "
       "another, connected early)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e12, &p.o.start_at); }},
      {"--dscp", nullptr, "N", "DSCP of data packets, 0..63 (0)",
       [](Parse& p, const std::string& k, const std::string& v) { return Integer(k, v, 0, 63, &p.o.dscp); }},
      {"--ecn", nullptr, "not-ect|ect0|ect1", "ECN codepoint of data packets (ect0)",
       [](Parse& p, const std::string&, const std::string& v) {
         if (v == "not-ect") p.o.ecn = wire::kEcnNotEct;
         else if (v == "ect0") p.o.ecn = wire::kEcnEct0;
         else if (v == "ect1") p.o.ecn = wire::kEcnEct1;
         else return Bad("--ecn: expected not-ect, ect0 or ect1, got '" + v + "'");
         return absl::OkStatus();
       }},
      {"--vlan", nullptr, "ID", "802.1Q tag with VLAN ID 1..4094 (untagged)",
       [](Parse& p, const std::string& k, const std::string& v) { return Integer(k, v, 1, 4094, &p.o.vlan); }},
      {"--pcp", nullptr, "P", "802.1Q priority 0..7 (0; without --vlan: a priority tag, VLAN 0)",
       [](Parse& p, const std::string& k, const std::string& v) {
         if (p.o.vlan < 0) p.o.vlan = 0;  // a priority tag unless --vlan says otherwise
         return Integer(k, v, 0, 7, &p.o.pcp);
       }},
      {"--interactive", "-i", nullptr,
       "a prompt: start, stop, show port stats, show qp [N], set fwd E,\nset mtu N, clear stats, quit; the engine "
       "runs in the background",
       [](Parse& p, const std::string&, const std::string&) {
         p.o.interactive = true;
         return absl::OkStatus();
       }},
      {"--auto-start", nullptr, nullptr, "with -i: start forwarding at once, then give the prompt",
       [](Parse& p, const std::string&, const std::string&) {
         p.o.auto_start = true;
         return absl::OkStatus();
       }},
      {"--telemetry", nullptr, nullptr,
       "DPDK telemetry socket with /droce/port and /droce/qp (off:\n--no-telemetry is passed to EAL)",
       [](Parse& p, const std::string&, const std::string&) {
         p.o.telemetry = true;
         return absl::OkStatus();
       }},
      {"--dcqcn", nullptr, "off|paper|mlx5", "DCQCN reaction point profile (off)",
       [](Parse& p, const std::string& k, const std::string& v) {
         return apps::ParseWord(k, v, {"off", "paper", "mlx5"}, &p.o.dcqcn);
       }},
      {"--cc", nullptr, "ALGORITHM",
       "congestion control of every QP: dcqcn, timely, hpcc, swift or none\n(none; doc/cc.md), with the paper's "
       "parameters at --line-rate-gbps",
       [](Parse& p, const std::string&, const std::string& v) {
         p.o.cc = v;  // checked with --cc-params and the line rate after the walk
         return absl::OkStatus();
       }},
      {"--cc-params", nullptr, "N=V,...", "the algorithm's parameters by name (an unknown name lists them)",
       [](Parse& p, const std::string&, const std::string& v) {
         p.o.cc_params = v;
         return absl::OkStatus();
       }},
      {"--line-rate-gbps", nullptr, "G", "the reaction point's line rate (100)",
       [](Parse& p, const std::string& k, const std::string& v) {
         return Number(k, v, 0.01, 1000, &p.o.line_rate_gbps);
       }},
      {"--bottleneck-gbps", nullptr, "G", "emulated congestion point on the transmit path at G Gb/s (none)",
       [](Parse& p, const std::string& k, const std::string& v) {
         return Number(k, v, 0.001, 1000, &p.o.bottleneck_gbps);
       }},
      {"--kmin-kb", nullptr, "K", "its RED/ECN marking: no marks below K KB (5)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e6, &p.o.kmin_kb); }},
      {"--kmax-kb", nullptr, "K", "marking probability --pmax at K KB (200)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e6, &p.o.kmax_kb); }},
      {"--pmax", nullptr, "P", "marking probability at --kmax-kb (0.01)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1, &p.o.pmax); }},
      {"--buffer-kb", nullptr, "B", "its buffer (unlimited)",
       [](Parse& p, const std::string& k, const std::string& v) { return Number(k, v, 0, 1e7, &p.o.buffer_kb); }},
  };
  return table;
}

// What involves several options, once all are set.
absl::Status CheckTogether(const Parse& p) {
  const Options& o = p.o;
  if (!o.device.empty()) {
    // The device gives the MAC and the addresses; the daemon's switch the wire.
    if (p.port_set || p.mac_set) return Bad("--device takes the port and MAC from the fabric: no --port or --mac");
    if (o.role == "pair") return Bad("--role pair joins two net_ring ports in one process: not with --device");
    if (IsRaw(o.fwd)) return Bad("the raw baselines bypass droce (fixed MACs, no QPN): not on the fabric (--device)");
    if (!o.peer_ip_set) return Bad("--device needs --peer-ip (the peer device's address)");
  } else if (o.qpn_range != 1 || o.peer_qpn_range != 1) {
    return Bad("--qpn-range and --peer-qpn-range go with --device");
  }
  if (wire::IsIpv4MappedGid(o.ip) != wire::IsIpv4MappedGid(o.peer_ip)) {
    return Bad("--ip and --peer-ip must both be IPv4 or both IPv6");
  }
  if (o.ip == o.peer_ip && o.device.empty()) return Bad("--ip and --peer-ip must differ");
  if (o.kmax_kb < o.kmin_kb) return Bad("--kmax-kb must not be below --kmin-kb");
  if (o.cc != "none" && o.dcqcn != "off") return Bad("--cc and --dcqcn both given: use --cc dcqcn (--cc-params for its knobs)");
  if (auto c = cc::ParseConfig(o.cc, o.cc_params, static_cast<uint64_t>(o.line_rate_gbps * 1e9)); !c.ok()) {
    return Bad("--cc " + o.cc + ": " + std::string(c.status().message()));
  }
  if (o.fwd == "write_lat" && o.size < 8) return Bad("write_lat needs --size of at least 8");
  if (o.qps > 1 && o.fwd != "write_bw" && o.fwd != "read_bw") return Bad("--qps > 1 works with write_bw and read_bw");
  if (o.qps > o.outstanding) return Bad("--qps must not exceed --outstanding (each QP carries at least one slot)");
  if ((o.burst != 1 || o.raw_ack) && o.fwd != "raw_stream") return Bad("--burst and --raw-ack go with raw_stream");
  if (o.memif_direct && !o.device.empty()) return Bad("--memif-direct is for a port of its own (not --device)");
  if (o.auto_start && !o.interactive) return Bad("--auto-start goes with -i (without -i the engine starts anyway)");
  if (o.role == "pair" && (o.interactive || o.telemetry || !o.pcap_out.empty() || IsRaw(o.fwd))) {
    return Bad("--role pair runs one RDMA engine once: no -i, --telemetry, --pcap-out or raw baseline");
  }
  return absl::OkStatus();
}

}  // namespace

bool IsRaw(const std::string& fwd) { return fwd.rfind("raw_", 0) == 0; }

std::string Usage() { return "usage: droce-testpmd [EAL options] -- [options]\n" + apps::FormatUsage(Table()); }

bool WantsHelp(const std::vector<std::string>& args) { return apps::WantsHelp(args); }

absl::StatusOr<Options> ParseOptions(const std::vector<std::string>& args, const std::vector<std::string>& engines) {
  absl::StatusOr<std::vector<apps::GivenOption<Parse>>> given =
      apps::SplitOptions(Table(), args, "-- --help lists the options");
  if (!given.ok()) return given.status();
  Parse p;
  p.engines = &engines;
  const auto is_role = [](const apps::GivenOption<Parse>& g) { return std::string_view(g.spec->name) == "--role"; };
  for (const apps::GivenOption<Parse>& g : *given) {
    if (!is_role(g)) continue;
    if (absl::Status s = g.spec->set(p, g.spec->name, g.value); !s.ok()) return s;
  }
  if (p.o.role == "client") {
    std::swap(p.o.ip, p.o.peer_ip);
    std::swap(p.o.mac, p.o.peer_mac);
  }
  for (const apps::GivenOption<Parse>& g : *given) {
    if (is_role(g)) continue;
    if (absl::Status s = g.spec->set(p, g.spec->name, g.value); !s.ok()) return s;
  }
  p.o.peer_mac_static = p.peer_mac_set;
  if (p.o.peer_qpn_range == 0) p.o.peer_qpn_range = p.o.qpn_range;
  if (absl::Status s = CheckTogether(p); !s.ok()) return s;
  return p.o;
}

}  // namespace droce::testpmd
