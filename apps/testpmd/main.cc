// droce-testpmd: droce on a DPDK port, testpmd style.
//
//   droce-testpmd [EAL options] -- [app options]
//
// The server side is passive (it answers and verifies the client's runs);
// the client drives the selected traffic engine for --duration seconds (or,
// with -i, from start to stop) and prints throughput, message rate, latency
// percentiles and verification results.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "apps/testpmd/fabric_port.h"
#include "apps/testpmd/port_tap.h"
#include "apps/testpmd/prompt.h"
#include "apps/testpmd/ring_pair.h"
#include "apps/testpmd/runner.h"
#include "apps/testpmd/session.h"
#include "sim/switch/egress_port_io.h"
#include "drivers/ethdev/eal.h"
#include "drivers/verbs/device_config.h"
#include "drivers/fabric/protocol.h"
#include "wire/gid.h"
#include "wire/headers.h"
#include "wire/opcode.h"

namespace droce::testpmd {

extern const Engine kWriteBw, kReadBw, kSendBw, kWriteLat, kAtomicBw, kRawLat, kRawStream;

const std::vector<const Engine*>& AllEngines() {
  static const std::vector<const Engine*> engines = {&kWriteBw, &kReadBw, &kSendBw, &kAtomicBw, &kWriteLat,
                                                      &kRawLat, &kRawStream};
  return engines;
}

const Engine* FindEngine(const std::string& name) {
  for (const Engine* e : AllEngines()) {
    if (name == e->name) return e;
  }
  return nullptr;
}

namespace {

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "droce-testpmd: %s\n", msg.c_str());
  std::exit(2);
}

// The largest path MTU whose frames fit the port (tagged, IPv6, RETH and
// ImmDt: the most header bytes a droce data packet carries). Every port but
// net_af_xdp (4 KiB receive buffers: 2048) takes 4096.
uint32_t LargestMtu(uint32_t max_frame_bytes) {
  constexpr uint32_t kHeaders = wire::kEthBytes + wire::kVlanTagBytes + wire::kIpv6Bytes + wire::kUdpBytes +
                                wire::kBthBytes + wire::kRethBytes + wire::kImmDtBytes + wire::kIcrcBytes;
  uint32_t mtu = 4096;
  while (mtu > 256 && mtu + kHeaders > max_frame_bytes) mtu /= 2;
  return mtu;
}

int EngineIndex(const std::string& name) {
  const auto& all = AllEngines();
  for (size_t i = 0; i < all.size(); ++i) {
    if (name == all[i]->name) return static_cast<int>(i);
  }
  return -1;
}

// The prompt's view of the program (apps/testpmd/prompt.c calls these). It
// runs on the main thread; the dataplane thread owns the session.
struct PromptState {
  Options* opt;
  Session* session;
  Dataplane* dp;
  uint32_t largest_mtu;
  bool raw_ran = false;
};

bool Snap(PromptState* p, Snapshot* s) {
  if (p->session->RequestSnapshot(s, 2000)) return true;
  std::printf("the dataplane did not answer (busy connecting?)\n");
  return false;
}

void PrintQp(const QpSnapshot& q) {
  const transport::QpCounters& k = q.counters;
  std::printf("qp 0x%06x %s%s: tx_packets=%llu rx_packets=%llu retransmitted=%llu timeouts=%llu naks_rx=%llu "
              "rnr_rx=%llu naks_tx=%llu cnps_tx=%llu cnps_rx=%llu qp_memory_bytes=%llu\n",
              q.qpn, transport::QpStateName(q.state), q.control ? " (control)" : "",
              (unsigned long long)k.tx_packets, (unsigned long long)k.rx_packets,
              (unsigned long long)k.retransmitted_packets, (unsigned long long)k.timeouts,
              (unsigned long long)k.naks_received, (unsigned long long)k.rnr_naks_received,
              (unsigned long long)k.naks_sent, (unsigned long long)k.cnps_sent, (unsigned long long)k.cnps_received,
              (unsigned long long)q.memory_bytes);
}

void DoStart(PromptState* p) {
  if (p->opt->role == "server") {
    std::printf("the server serves the client's runs by itself\n");
    return;
  }
  if (IsRaw(p->opt->fwd) && p->raw_ran) {
    std::printf("a raw baseline runs once per process (the server ends after it)\n");
    return;
  }
  if (!p->dp->Start(EngineIndex(p->opt->fwd))) {
    std::printf("already running: stop first\n");
    return;
  }
  p->raw_ran |= IsRaw(p->opt->fwd);
  std::printf("started %s%s\n", p->opt->fwd.c_str(),
              p->opt->duration_set ? " (ends by itself: --duration/--iterations)" : "; stop ends it");
}

droce_prompt_ops MakePromptOps(PromptState* ps) {
  droce_prompt_ops ops{};
  ops.ctx = ps;
  ops.show_port_stats = [](void* c) {
    auto* p = static_cast<PromptState*>(c);
    Snapshot s;
    if (!Snap(p, &s)) return;
    const core::DeviceCounters& d = s.dev;
    std::printf("port %s: link %s rx_packets=%llu rx_bytes=%llu tx_packets=%llu tx_bytes=%llu tx_full=%llu\n",
                p->opt->port.c_str(), s.link_up ? "up" : "down", (unsigned long long)s.port.rx_packets,
                (unsigned long long)s.port.rx_bytes, (unsigned long long)s.port.tx_packets,
                (unsigned long long)s.port.tx_bytes, (unsigned long long)s.port.tx_full);
    std::printf("device:");
    core::ForEachDeviceCounter(d, [](const char* name, uint64_t v) {
      std::printf(" %s=%llu", name, static_cast<unsigned long long>(v));
    });
    std::printf("\n");
    std::printf("run: %s messages=%llu bytes=%llu errors=%llu verify_failures=%llu\n",
                s.running ? "running" : "stopped", (unsigned long long)s.messages, (unsigned long long)s.bytes,
                (unsigned long long)s.errors, (unsigned long long)s.verify_failures);
  };
  ops.show_qp = [](void* c, int qpn) {
    auto* p = static_cast<PromptState*>(c);
    Snapshot s;
    if (!Snap(p, &s)) return;
    bool found = false;
    for (const QpSnapshot& q : s.qps) {
      if (qpn < 0 || q.qpn == static_cast<uint32_t>(qpn)) {
        PrintQp(q);
        found = true;
      }
    }
    if (!found) std::printf("no QP %d (QPs are 0x%x..0x%x)\n", qpn, s.qps.front().qpn, s.qps.back().qpn);
  };
  ops.clear_stats = [](void* c) { static_cast<PromptState*>(c)->session->RequestClearStats(); };
  ops.set_fwd = [](void* c, const char* engine) {
    auto* p = static_cast<PromptState*>(c);
    if (p->dp->running() && p->opt->role == "client") {
      std::printf("running: stop first\n");
      return -1;
    }
    if (IsRaw(engine) != IsRaw(p->opt->fwd)) {
      std::printf("the raw baselines and the RDMA engines do not mix in one process: give --fwd at start-up\n");
      return -1;
    }
    p->opt->fwd = engine;
    return 0;
  };
  ops.set_mtu = [](void* c, unsigned mtu) {
    auto* p = static_cast<PromptState*>(c);
    if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0) {
      std::printf("mtu must be 256, 512, 1024, 2048 or 4096\n");
      return -1;
    }
    if (p->dp->ever_started() || p->opt->role == "server") {
      std::printf("the QPs are connected: set mtu before the first start\n");
      return -1;
    }
    if (mtu > p->largest_mtu) {
      std::printf("port %s carries path MTU %u at most\n", p->opt->port.c_str(), p->largest_mtu);
      return -1;
    }
    p->opt->mtu = mtu;
    return 0;
  };
  ops.start = [](void* c) { DoStart(static_cast<PromptState*>(c)); };
  ops.stop = [](void* c) {
    auto* p = static_cast<PromptState*>(c);
    if (p->opt->role == "server") {
      std::printf("the server follows the client's start and stop\n");
    } else if (!p->dp->Stop()) {
      std::printf("not running\n");
    }
  };
  return ops;
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// One endpoint: its options, port, transmit path (tap, emulated congestion
// point), session and runner. A process has one, or two with --role pair.
struct Side {
  explicit Side(const Options& o) : opt(o) {}
  Options opt;  // the prompt may change fwd/mtu
  std::unique_ptr<ethdev::EthdevPort> port;
  std::optional<FabricAttachment> fabric;  // --device: the attachment to droced
  std::unique_ptr<FabricIo> fabric_io;     // its direct rings in front of the port
  uint32_t largest_mtu = 4096;
  std::optional<sim::EgressPortIo> bottleneck;
  std::optional<PortTap> tap;
  std::optional<Session> session;
  std::optional<Runner> runner;

  // Tears down in dependency order: the session's device hands frames still
  // queued for the port (a TX backlog, e.g. after the peer vanished with the
  // ring full) back to the port's pool, so it must go before the port.
  void Close() {
    runner.reset();
    session.reset();
    tap.reset();
    bottleneck.reset();
    fabric_io.reset();  // unmaps the direct rings
    if (port) port->Stop();
    port.reset();
    // After the interface closed: droced then frees it and the QPN range.
    if (fabric && fabric->fd >= 0) close(fabric->fd);
    fabric.reset();
  }
};

// Opens side.opt.port, checks that its frames take the MTU, waits for the link.
void OpenSide(Side& side) {
  const Options& opt = side.opt;
  ethdev::PortConfig pc;
  pc.name = opt.port;
  // A fabric port is a memif client of droced: a daemon that goes away
  // unmaps its rings, so bursts run under the unmap guard.
  pc.guard_peer_unmap = side.fabric.has_value();
  // --memif-direct: the verbs runtime's memif port (MemifTx/MemifRx), its
  // bursts under the unmap guard as the runtime runs them.
  if (opt.memif_direct) pc.memif_direct_tx = pc.memif_direct_rx = pc.guard_peer_unmap = true;
  auto port = ethdev::EthdevPort::Open(pc);
  if (!port.ok()) Fail(std::string(port.status().message()));
  side.port = std::move(*port);
  if (opt.memif_direct && !(side.port->direct_tx() && side.port->direct_rx())) {
    side.port.reset();
    Fail("--memif-direct: port " + opt.port + " is not a net_memif port its own receive and transmit can drive");
  }
  side.largest_mtu = LargestMtu(side.port->max_frame_bytes());
  if (opt.mtu > side.largest_mtu) {
    const std::string msg = absl::StrFormat("--mtu %u: port %s carries %u-byte frames, path MTU %u at most",
                                            opt.mtu, opt.port, side.port->max_frame_bytes(), side.largest_mtu);
    side.port.reset();  // closes the port (net_af_xdp: detaches its XDP program)
    Fail(msg);
  }
  const std::string where =
      side.fabric ? absl::StrFormat("fabric device %s (QPNs 0x%x.., peer's 0x%x..)", opt.device, opt.qpn_base,
                                    opt.peer_qpn_base)
                  : opt.port;
  std::printf("droce-testpmd: %s on %s, engine %s, %u-byte messages, MTU %u, %s -> %s; waiting for the link\n",
              opt.role.c_str(), where.c_str(), opt.fwd.c_str(), opt.size, opt.mtu, wire::GidAddressText(opt.ip).c_str(),
              wire::GidAddressText(opt.peer_ip).c_str());
  std::fflush(stdout);
  if (!side.port->WaitLinkUp(60'000)) Fail("link did not come up within 60 s (is the peer running?)");
}

// Transmit path: session -> tap (loss injection, capture) -> emulated
// congestion point (if any) -> port.
void StartSide(Side& side, std::optional<pcapio::PcapWriter> pcap) {
  const Options& opt = side.opt;
  pktio::BurstIo* wire = side.port.get();
  if (side.fabric) {
    side.fabric_io = std::make_unique<FabricIo>(side.port.get(), side.fabric->fd, side.fabric->mac,
                                                side.fabric->qpn_base, side.fabric->qpn_count);
    wire = side.fabric_io.get();
  }
  if (opt.bottleneck_gbps > 0) {
    sim::EgressPortConfig bc;
    bc.line_rate_bps = static_cast<uint64_t>(opt.bottleneck_gbps * 1e9);
    bc.kmin_bytes = static_cast<uint64_t>(opt.kmin_kb * 1000);
    bc.kmax_bytes = static_cast<uint64_t>(opt.kmax_kb * 1000);
    bc.pmax = opt.pmax;
    bc.buffer_bytes = static_cast<uint64_t>(opt.buffer_kb * 1000);
    bc.seed = opt.seed;
    side.bottleneck.emplace(wire, bc, [](void*) { return MonotonicNs(); }, nullptr);
  }
  side.tap.emplace(side.bottleneck ? static_cast<pktio::BurstIo*>(&*side.bottleneck) : wire,
                   opt.drop_rate, opt.seed, std::move(pcap));
  side.session.emplace(side.opt, side.port.get(), &*side.tap);
  side.runner.emplace(side.opt, *side.session, *side.tap, side.bottleneck ? &*side.bottleneck : nullptr);
}

// --device: attach to the fabric's daemon, take the device's MAC and
// address, and the QPN ranges (own and peer's). Exits with a message if the
// daemon refuses.
FabricAttachment AttachDevice(Options& opt) {
  absl::StatusOr<FabricAttachment> a = AttachToFabric(verbs::DefaultRunDir(), opt.device, opt.qpn_range);
  if (!a.ok()) Fail(std::string(a.status().message()));
  opt.mac = a->mac;
  bool found = false;
  for (const core::Gid& g : a->gids) {
    if (opt.ip_set) {
      found |= g == opt.ip;
    } else if (core::IsIpv4MappedGid(g) == core::IsIpv4MappedGid(opt.peer_ip) && g[0] != 0xfe) {
      opt.ip = g;  // the device's address of the peer's family (not the link-local GID)
      found = true;
      break;
    }
  }
  if (!found) {
    close(a->fd);
    Fail(opt.ip_set ? "--ip " + wire::GidAddressText(opt.ip) + " is not an address of " + opt.device
                    : opt.device + " has no address of --peer-ip's family");
  }
  opt.qpn_base = a->qpn_base;
  opt.peer_qpn_base = opt.peer_qpn_range * fabric::kQpnsPerProcess;
  if (opt.qps + 1 > a->qpn_count) {
    close(a->fd);
    Fail(absl::StrFormat("--qps %u: a fabric process owns %u QPNs", opt.qps, a->qpn_count));
  }
  if (opt.ip == opt.peer_ip && opt.qpn_base == opt.peer_qpn_base) {
    close(a->fd);
    Fail("a peer on the same device (--peer-ip is its address) needs another --peer-qpn-range");
  }
  return std::move(*a);
}

// --role pair: a server and a client in one process, each on its own thread
// and its own end of a net_ring pair (ring_pair.h). Options are the server's;
// the client takes --ip/--peer-ip and --mac/--peer-mac the other way round.
int RunPair(const Options& opt, const Engine* engine) {
  auto names = CreateRingPair("droce_pair_");
  if (!names.ok()) Fail(std::string(names.status().message()));
  Side server(opt), client(opt);
  server.opt.role = "server";
  server.opt.port = names->first;
  client.opt.role = "client";
  client.opt.port = names->second;
  std::swap(client.opt.ip, client.opt.peer_ip);
  std::swap(client.opt.mac, client.opt.peer_mac);
  OpenSide(server);
  OpenSide(client);
  StartSide(server, std::nullopt);
  StartSide(client, std::nullopt);
  std::atomic<bool> server_done{false};
  int server_rc = 1;
  std::thread server_thread([&] {
    const bool registered = ethdev::RegisterThread();  // mempool caches for this thread
    server_rc = server.runner->Serve();
    if (registered) ethdev::UnregisterThread();
    server_done.store(true, std::memory_order_release);
  });
  const int client_rc = client.runner->ClientRun(engine);
  client.runner->ClientFinish();
  // The server ends at the client's quit; one that never got it (the client
  // failed to connect) is stopped after 3 s.
  for (int i = 0; i < 300 && !server_done.load(std::memory_order_acquire); ++i) {
    const timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  server.session->RequestStop(true);
  server_thread.join();
  for (Side* side : {&client, &server}) side->Close();  // EAL is left to the exit (eal.h)
  return client_rc != 0 ? client_rc : server_rc;
}

}  // namespace
}  // namespace droce::testpmd

int main(int argc, char** argv) {
  using namespace droce;
  using namespace droce::testpmd;
  int sep = 1;
  while (sep < argc && std::strcmp(argv[sep], "--") != 0) ++sep;
  const std::vector<std::string> args(argv + std::min(sep + 1, argc), argv + argc);
  if (WantsHelp(args)) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  std::vector<std::string> engines;
  for (const Engine* e : AllEngines()) engines.push_back(e->name);
  absl::StatusOr<Options> parsed = ParseOptions(args, engines);
  if (!parsed.ok()) Fail(std::string(parsed.status().message()));
  Options opt = *parsed;  // the prompt may change fwd/mtu
  const Engine* engine = FindEngine(opt.fwd);
  std::optional<FabricAttachment> fabric;
  if (!opt.device.empty()) fabric = AttachDevice(opt);
  // EAL's telemetry thread only when asked for (--telemetry).
  std::vector<char*> eal_args(argv, argv + sep);
  // On the fabric the port is a memif client the program hot-plugs: without
  // EAL options, no hugepages, no PCI scan and a file prefix of its own.
  std::string fabric_prefix = absl::StrCat("--file-prefix=droce-testpmd-", getpid());
  char no_huge[] = "--no-huge", mem_opt[] = "-m", mem_mb[] = "512", no_pci[] = "--no-pci";
  if (fabric && sep == 1) {
    for (char* a : {no_huge, mem_opt, mem_mb, no_pci, fabric_prefix.data()}) eal_args.push_back(a);
  }
  char no_telemetry[] = "--no-telemetry";
  bool eal_has_telemetry_arg = false;
  for (char* a : eal_args) eal_has_telemetry_arg |= !std::strcmp(a, "--no-telemetry") || !std::strcmp(a, "--telemetry");
  if (!opt.telemetry && !eal_has_telemetry_arg) eal_args.insert(eal_args.begin() + 1, no_telemetry);
  int consumed = 0;
  if (absl::Status s = ethdev::StartEalFromArgs(static_cast<int>(eal_args.size()), eal_args.data(), &consumed);
      !s.ok()) {
    Fail(std::string(s.message()));
  }
  if (opt.role == "pair") return RunPair(opt, engine);
  Side side(opt);
  if (fabric) {
    if (absl::Status s = ethdev::ProbeVdev(fabric->vdev); !s.ok()) Fail(std::string(s.message()));
    side.opt.port = fabric->port_name;
    side.fabric = std::move(fabric);
  }
  OpenSide(side);
  std::optional<pcapio::PcapWriter> pcap;
  if (!opt.pcap_out.empty()) {
    auto w = pcapio::PcapWriter::Create(opt.pcap_out);
    if (!w.ok()) Fail(std::string(w.status().message()));
    pcap.emplace(std::move(*w));
  }
  StartSide(side, std::move(pcap));
  Session& session = *side.session;
  Runner& runner = *side.runner;
  if (opt.telemetry) RegisterTelemetry(&session);
  int rc = 0;
  if (opt.interactive) {
    // The dataplane thread owns the session from here; this thread runs the prompt.
    Dataplane dp(runner, session, opt.role == "server");
    PromptState ps{&side.opt, &session, &dp, side.largest_mtu};
    if (opt.auto_start) DoStart(&ps);
    const droce_prompt_ops ops = MakePromptOps(&ps);
    droce_prompt_run(&ops);
    rc = dp.Quit();
  } else if (IsRaw(opt.fwd)) {
    rc = runner.RawRun(engine);  // baselines bypass droce: no QP to connect
  } else if (opt.role == "client") {
    rc = runner.ClientRun(engine);
    runner.ClientFinish();
  } else {
    rc = runner.Serve();
  }
  UnregisterTelemetry();
  side.Close();  // EAL is left to the exit (eal.h)
  return rc;
}
