// droce-testpmd: droce on a DPDK port, testpmd style.
//
//   droce-testpmd [EAL options] -- [app options]
//
// The server side is passive (it answers and verifies); the client drives
// the selected traffic engine for --duration seconds and prints throughput,
// message rate, latency percentiles and verification results.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <ctime>
#include <optional>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/testpmd/port_tap.h"
#include "apps/testpmd/prompt.h"
#include "apps/testpmd/session.h"
#include "pktio/bottleneck_io.h"
#include "drivers/ethdev/eal.h"

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

constexpr const char kUsage[] =
    "usage: droce-testpmd [EAL options] -- [options]\n"
    "  --role server|client   server answers and verifies; client drives the engine (server)\n"
    "  --port NAME            DPDK port name, e.g. net_memif0 (net_memif0)\n"
    "  --fwd ENGINE           write_bw | read_bw | send_bw | atomic_bw | write_lat, or the raw-wire\n"
    "                         baselines raw_lat | raw_stream (write_bw)\n"
    "  --ip A.B.C.D           own IPv4 address (10.0.0.1 server, 10.0.0.2 client)\n"
    "  --peer-ip A.B.C.D      peer's IPv4 address\n"
    "  --mac MAC              own MAC (02:00:00:00:00:01 server, :02 client)\n"
    "  --peer-mac MAC         static next hop; without it the peer is resolved by ARP\n"
    "                         (raw engines use 02:00:00:00:00:02 / :01)\n"
    "  --mtu BYTES            256..4096 (4096)\n"
    "  --size BYTES           message size (65536; write_lat: at least 8)\n"
    "  --outstanding N        messages in flight, 2..4096 (16)\n"
    "  --qps N                QPs (write_bw, read_bw), 1..1024; slots spread over them (1)\n"
    "  --duration SECONDS     client run time (3)\n"
    "  --iterations N         stop after N messages instead\n"
    "  --idle-spins N         empty polls before yielding the CPU (64)\n"
    "  --drop-rate P          drop transmitted frames with probability P, 0..0.5 (0)\n"
    "  --seed N               seed for --drop-rate (1)\n"
    "  --pcap-out FILE        write every frame sent and received to a pcap file\n"
    "  --stats-period S       print a stats line every S seconds while running (0: off)\n"
    "  -i, --interactive      a prompt: show port stats, show qp, set fwd E, set mtu N, start,\n"
    "                         clear stats, quit (start runs the engine once per connection)\n"
    "  --dcqcn off|paper|mlx5 DCQCN reaction point profile (off)\n"
    "  --line-rate-gbps G     the reaction point's line rate (100)\n"
    "  --bottleneck-gbps G    emulated congestion point on the transmit path at G Gb/s (none)\n"
    "  --kmin-kb K --kmax-kb K --pmax P --buffer-kb B   its RED/ECN marking and buffer (5, 200, 0.01, unlimited)\n";

[[noreturn]] void Fail(const std::string& msg) {
  std::fprintf(stderr, "droce-testpmd: %s\n", msg.c_str());
  std::exit(2);
}

uint32_t ParseIp(const std::string& s) {
  std::vector<std::string> parts = absl::StrSplit(s, '.');
  if (parts.size() != 4) Fail("bad IPv4 address '" + s + "'");
  uint32_t ip = 0;
  for (const std::string& p : parts) {
    char* end;
    const long v = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end || v < 0 || v > 255) Fail("bad IPv4 address '" + s + "'");
    ip = ip << 8 | static_cast<uint32_t>(v);
  }
  return ip;
}

core::Mac ParseMac(const std::string& s) {
  core::Mac m;
  unsigned v[6];
  char extra;
  if (std::sscanf(s.c_str(), "%x:%x:%x:%x:%x:%x%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &extra) != 6) {
    Fail("bad MAC address '" + s + "'");
  }
  for (int i = 0; i < 6; ++i) {
    if (v[i] > 255) Fail("bad MAC address '" + s + "'");
    m[i] = static_cast<uint8_t>(v[i]);
  }
  return m;
}

double ParseNumber(const std::string& name, const std::string& s, double lo, double hi) {
  char* end;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || errno || v < lo || v > hi) {
    Fail(absl::StrFormat("%s must be a number in [%g, %g], not '%s'", name, lo, hi, s));
  }
  return v;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  bool ip_set = false, peer_ip_set = false, mac_set = false, peer_mac_set = false;
  std::vector<std::pair<std::string, std::string>> kv;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "-i" || a == "--interactive") {  // the one option without a value
      o.interactive = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) Fail("unexpected argument '" + a + "'\n" + kUsage);
    if (i + 1 >= argc) Fail("missing value for " + a);
    kv.emplace_back(a, argv[++i]);
  }
  for (auto& [k, v] : kv) {
    if (k == "--role") {
      if (v != "server" && v != "client") Fail("--role must be server or client");
      o.role = v;
    }
  }
  if (o.role == "client") {
    std::swap(o.ip, o.peer_ip);
    std::swap(o.mac, o.peer_mac);
  }
  for (auto& [k, v] : kv) {
    if (k == "--role") continue;
    else if (k == "--port") o.port = v;
    else if (k == "--fwd") {
      if (!FindEngine(v)) Fail("unknown engine '" + v + "' (write_bw, read_bw, send_bw, atomic_bw, write_lat, raw_lat, raw_stream)");
      o.fwd = v;
    } else if (k == "--ip") o.ip = ParseIp(v), ip_set = true;
    else if (k == "--peer-ip") o.peer_ip = ParseIp(v), peer_ip_set = true;
    else if (k == "--mac") o.mac = ParseMac(v), mac_set = true;
    else if (k == "--peer-mac") o.peer_mac = ParseMac(v), peer_mac_set = true;
    else if (k == "--mtu") {
      o.mtu = static_cast<uint32_t>(ParseNumber(k, v, 256, 4096));
      if (transport::MtuBytesToEnum(o.mtu) == 0) Fail("--mtu must be 256, 512, 1024, 2048 or 4096");
    } else if (k == "--size") o.size = static_cast<uint32_t>(ParseNumber(k, v, 1, 1 << 24));
    else if (k == "--outstanding") o.outstanding = static_cast<uint32_t>(ParseNumber(k, v, 2, 4096));
    else if (k == "--qps") o.qps = static_cast<uint32_t>(ParseNumber(k, v, 1, 1024));
    else if (k == "--duration") o.duration = ParseNumber(k, v, 0.01, 3600);
    else if (k == "--iterations") o.iterations = static_cast<uint32_t>(ParseNumber(k, v, 1, 1e9));
    else if (k == "--idle-spins") o.idle_spins = static_cast<uint32_t>(ParseNumber(k, v, 0, 1e9));
    else if (k == "--drop-rate") o.drop_rate = ParseNumber(k, v, 0, 0.5);
    else if (k == "--seed") o.seed = static_cast<uint64_t>(ParseNumber(k, v, 0, 1e18));
    else if (k == "--pcap-out") o.pcap_out = v;
    else if (k == "--dcqcn") {
      if (v != "off" && v != "paper" && v != "mlx5") Fail("--dcqcn: expected off, paper or mlx5, got '" + v + "'");
      o.dcqcn = v;
    }
    else if (k == "--stats-period") o.stats_period = ParseNumber(k, v, 0, 3600);
    else if (k == "--line-rate-gbps") o.line_rate_gbps = ParseNumber(k, v, 0.01, 1000);
    else if (k == "--bottleneck-gbps") o.bottleneck_gbps = ParseNumber(k, v, 0.001, 1000);
    else if (k == "--kmin-kb") o.kmin_kb = ParseNumber(k, v, 0, 1e6);
    else if (k == "--kmax-kb") o.kmax_kb = ParseNumber(k, v, 0, 1e6);
    else if (k == "--pmax") o.pmax = ParseNumber(k, v, 0, 1);
    else if (k == "--buffer-kb") o.buffer_kb = ParseNumber(k, v, 0, 1e7);
    else Fail("unknown option " + k + "\n" + kUsage);
  }
  o.peer_mac_static = peer_mac_set;
  (void)ip_set, (void)peer_ip_set, (void)mac_set;
  if (o.ip == o.peer_ip) Fail("--ip and --peer-ip must differ");
  if (o.kmax_kb < o.kmin_kb) Fail("--kmax-kb must not be below --kmin-kb");
  if (o.fwd == "write_lat" && o.size < 8) Fail("write_lat needs --size of at least 8");
  if (o.qps > 1 && o.fwd != "write_bw" && o.fwd != "read_bw") Fail("--qps > 1 works with write_bw and read_bw");
  if (o.qps > o.outstanding) Fail("--qps must not exceed --outstanding (each QP carries at least one slot)");
  return o;
}

// The prompt's view of the program (apps/testpmd/prompt.c calls these).
struct PromptState {
  Options* opt;
  Session* session;
  bool* connected;
  std::function<int()> run;
  ethdev::EthdevPort* port;
};

droce_prompt_ops MakePromptOps(PromptState* ps) {
  droce_prompt_ops ops{};
  ops.ctx = ps;
  ops.show_port_stats = [](void* c) {
    auto* p = static_cast<PromptState*>(c);
    const ethdev::PortStats& ps_ = p->port->stats();
    const core::DeviceCounters& d = p->session->dev->counters();
    std::printf("port %s: link %s rx_packets=%llu rx_bytes=%llu tx_packets=%llu tx_bytes=%llu tx_full=%llu\n",
                p->opt->port.c_str(), p->port->LinkUp() ? "up" : "down", (unsigned long long)ps_.rx_packets,
                (unsigned long long)ps_.rx_bytes, (unsigned long long)ps_.tx_packets,
                (unsigned long long)ps_.tx_bytes, (unsigned long long)ps_.tx_full);
    std::printf("device: rx_packets=%llu tx_packets=%llu rx_foreign=%llu rx_unknown_qp=%llu rx_bad_icrc=%llu "
                "rx_arp=%llu rx_cnp=%llu tx_dropped=%llu\n",
                (unsigned long long)d.rx_packets, (unsigned long long)d.tx_packets,
                (unsigned long long)d.rx_foreign, (unsigned long long)d.rx_unknown_qp,
                (unsigned long long)d.rx_bad_icrc(), (unsigned long long)d.rx_arp, (unsigned long long)d.rx_cnp,
                (unsigned long long)d.tx_dropped);
  };
  ops.show_qp = [](void* c) {
    auto* p = static_cast<PromptState*>(c);
    for (uint32_t q : p->session->qpns) {
      const transport::RcQp* qp = p->session->dev->qp(q);
      const transport::QpCounters& k = qp->counters();
      std::printf("qp 0x%06x %s: tx_packets=%llu rx_packets=%llu retransmitted=%llu timeouts=%llu naks_rx=%llu "
                  "rnr_rx=%llu naks_tx=%llu cnps_tx=%llu cnps_rx=%llu\n",
                  q, transport::QpStateName(qp->state()), (unsigned long long)k.tx_packets,
                  (unsigned long long)k.rx_packets, (unsigned long long)k.retransmitted_packets,
                  (unsigned long long)k.timeouts, (unsigned long long)k.naks_received,
                  (unsigned long long)k.rnr_naks_received, (unsigned long long)k.naks_sent,
                  (unsigned long long)k.cnps_sent, (unsigned long long)k.cnps_received);
    }
  };
  ops.clear_stats = [](void* c) { static_cast<PromptState*>(c)->session->stats = Stats{}; };
  ops.set_fwd = [](void* c, const char* engine) {
    static_cast<PromptState*>(c)->opt->fwd = engine;
    return 0;
  };
  ops.set_mtu = [](void* c, unsigned mtu) {
    auto* p = static_cast<PromptState*>(c);
    if (mtu < 256 || mtu > 4096 || (mtu & (mtu - 1)) != 0) {
      std::printf("mtu must be 256, 512, 1024, 2048 or 4096\n");
      return -1;
    }
    if (*p->connected) {
      std::printf("the QPs are connected: set mtu before the first start\n");
      return -1;
    }
    p->opt->mtu = mtu;
    return 0;
  };
  ops.start = [](void* c) { static_cast<PromptState*>(c)->run(); };
  return ops;
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace
}  // namespace droce::testpmd

int main(int argc, char** argv) {
  using namespace droce;
  using namespace droce::testpmd;
  int sep = 1;
  while (sep < argc && std::strcmp(argv[sep], "--") != 0) ++sep;
  for (int i = sep + 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) ParseOptions(argc - i, argv + i);
  }
  Options opt = ParseOptions(sep < argc ? argc - sep - 1 : 0, argv + sep + 1);  // the prompt may change fwd/mtu
  const Engine* engine = FindEngine(opt.fwd);
  int consumed = 0;
  if (absl::Status s = ethdev::StartEalFromArgs(sep, argv, &consumed); !s.ok()) Fail(std::string(s.message()));
  auto port = ethdev::EthdevPort::Open({opt.port});
  if (!port.ok()) Fail(std::string(port.status().message()));
  std::printf("droce-testpmd: %s on %s, engine %s, %u-byte messages, MTU %u; waiting for the link\n",
              opt.role.c_str(), opt.port.c_str(), engine->name, opt.size, opt.mtu);
  std::fflush(stdout);
  if (!(*port)->WaitLinkUp(60'000)) Fail("link did not come up within 60 s (is the peer running?)");
  std::optional<pcapio::PcapWriter> pcap;
  if (!opt.pcap_out.empty()) {
    auto w = pcapio::PcapWriter::Create(opt.pcap_out);
    if (!w.ok()) Fail(std::string(w.status().message()));
    pcap.emplace(std::move(*w));
  }
  // Transmit path: session -> tap (loss injection, capture) -> emulated
  // congestion point (if any) -> port.
  std::optional<pktio::BottleneckIo> bottleneck;
  if (opt.bottleneck_gbps > 0) {
    cc::BottleneckConfig bc;
    bc.line_rate_bps = static_cast<uint64_t>(opt.bottleneck_gbps * 1e9);
    bc.kmin_bytes = static_cast<uint64_t>(opt.kmin_kb * 1000);
    bc.kmax_bytes = static_cast<uint64_t>(opt.kmax_kb * 1000);
    bc.pmax = opt.pmax;
    bc.buffer_bytes = static_cast<uint64_t>(opt.buffer_kb * 1000);
    bc.seed = opt.seed;
    bottleneck.emplace(port->get(), bc, [](void*) { return MonotonicNs(); }, nullptr);
  }
  PortTap tap(bottleneck ? static_cast<pktio::BurstIo*>(&*bottleneck) : port->get(), opt.drop_rate, opt.seed,
              std::move(pcap));
  Session session(opt, port->get(), &tap);
  if (opt.role == "server") {
    // READ targets: slot k holds message k's pattern for the whole run.
    for (uint32_t k = 0; k < opt.outstanding; ++k) FillPattern(session.slot(k), opt.size, k);
    // atomic_bw's counter must be zero before the peer can reach it: the
    // client's first atomics may arrive before this side's engine starts.
    if (opt.fwd == "atomic_bw") std::memset(session.slot(0), 0, 8);
  }
  bool connected = false;
  // One run of the engine: connect (once), run, print the result line.
  auto run_once = [&]() -> int {
    engine = FindEngine(opt.fwd);
    const bool raw = opt.fwd.rfind("raw_", 0) == 0;  // baselines bypass droce: no QP to connect
    if (!raw && !connected) {
      if (absl::Status s = session.Connect(); !s.ok()) Fail(std::string(s.message()));
      connected = true;
    }
    const uint64_t start = session.NowNs();
    if (opt.role == "client") {
      engine->client(session, start + static_cast<uint64_t>(opt.duration * 1e9));
    } else {
      engine->server(session);
    }
    const double secs = double(session.NowNs() - start) / 1e9;
    // Let the last ACKs and the bye drain before the port goes away.
    const uint64_t drain_until = session.NowNs() + 200'000'000;
    while (!raw && session.NowNs() < drain_until) session.Progress();
    Stats& st = session.stats;
    std::printf("%s %s: messages=%llu bytes=%llu seconds=%.3f gbps=%.3f mmsgps=%.4f errors=%llu verify_failures=%llu",
                opt.role.c_str(), engine->name, (unsigned long long)st.messages, (unsigned long long)st.bytes,
                secs, st.bytes * 8 / secs / 1e9, st.messages / secs / 1e6, (unsigned long long)st.errors,
                (unsigned long long)st.verify_failures);
    if (!st.latencies_us.empty()) {
      std::printf(" lat_us_p50=%.2f p99=%.2f p999=%.2f", Percentile(st.latencies_us, 0.5),
                  Percentile(st.latencies_us, 0.99), Percentile(st.latencies_us, 0.999));
    }
    transport::QpCounters qc;
    for (uint32_t q : session.qpns) {
      const auto& c = session.dev->qp(q)->counters();
      qc.retransmitted_packets += c.retransmitted_packets;
      qc.timeouts += c.timeouts;
      qc.naks_received += c.naks_received;
      qc.rnr_naks_received += c.rnr_naks_received;
    }
    std::printf(" retransmitted=%llu timeouts=%llu naks_rx=%llu rnr_rx=%llu dropped_on_purpose=%llu captured=%llu",
                (unsigned long long)qc.retransmitted_packets, (unsigned long long)qc.timeouts,
                (unsigned long long)qc.naks_received, (unsigned long long)qc.rnr_naks_received,
                (unsigned long long)tap.dropped(), (unsigned long long)tap.captured());
    {  // congestion control: CNPs both ways, the first QP's reaction point, the bottleneck
      uint64_t cnps_tx = 0, cnps_rx = 0, ce_rx = 0;
      for (uint32_t q : session.qpns) {
        const auto& c = session.dev->qp(q)->counters();
        cnps_tx += c.cnps_sent;
        cnps_rx += c.cnps_received;
        ce_rx += c.ce_marked_received;
      }
      std::printf(" ce_rx=%llu cnps_tx=%llu cnps_rx=%llu", (unsigned long long)ce_rx, (unsigned long long)cnps_tx,
                  (unsigned long long)cnps_rx);
      if (const cc::ReactionPoint* rp = session.dev->qp(session.qpn)->reaction_point()) {
        std::printf(" rc_gbps=%.3f rt_gbps=%.3f alpha=%.4f", rp->current_rate_bps() / 1e9,
                    rp->target_rate_bps() / 1e9, rp->alpha());
      }
      if (bottleneck) {
        const auto& b = bottleneck->counters();
        std::printf(" cp_marked=%llu cp_dropped=%llu cp_port_refused=%llu cp_queue_max_kb=%.1f",
                    (unsigned long long)b.ce_marked, (unsigned long long)b.dropped,
                    (unsigned long long)b.port_refused, bottleneck->bottleneck().max_queue_bytes() / 1e3);
      }
      std::printf("\n");
    }
    return (st.errors == 0 && st.verify_failures == 0 && st.messages > 0) ? 0 : 1;
  };
  int rc = 0;
  if (opt.interactive) {
    PromptState ps{&opt, &session, &connected, run_once, port->get()};
    const droce_prompt_ops ops = MakePromptOps(&ps);
    droce_prompt_run(&ops);
  } else {
    rc = run_once();
  }
  (*port)->Stop();
  port->reset();
  ethdev::StopEal();
  return rc;
}
