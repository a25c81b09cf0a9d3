// The leaf-spine fabric (sim/ns3/fabric.h) on sim/ns3's ns-3 hosts and
// switches (sim/ns3/nodes.h). C++17: ns-3 3.37's headers are not C++20-clean.
#include "sim/ns3/fabric.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>

#include "sim/ns3/nodes.h"

namespace droce::ns3glue {
namespace {

constexpr uint32_t kDataHeaderBytes = 14 + 20 + 8 + 12 + 4;  // Ethernet, IPv4, UDP, BTH, ICRC
constexpr uint32_t kAckBytes = kDataHeaderBytes + 4;         // + AETH
constexpr uint64_t kStartNs = 1000;                          // the workload's time 0

void MacOf(uint32_t kind, uint32_t id, uint8_t* mac) {
  mac[0] = 0x02;
  mac[1] = 0;
  mac[2] = static_cast<uint8_t>(kind);
  mac[3] = static_cast<uint8_t>(id >> 16);
  mac[4] = static_cast<uint8_t>(id >> 8);
  mac[5] = static_cast<uint8_t>(id);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

}  // namespace

uint64_t PortClassStats::QueuePercentile(double q) const {
  uint64_t total = 0;
  for (uint64_t t : histogram_ns) total += t;
  if (total == 0) return 0;
  uint64_t acc = 0;
  for (size_t i = 0; i < histogram_ns.size(); ++i) {
    acc += histogram_ns[i];
    if (acc >= q * total) return i * uint64_t{bin_bytes};
  }
  return (histogram_ns.size() - 1) * uint64_t{bin_bytes};
}

uint64_t IdealFctNs(const FabricConfig& cfg, uint64_t bytes, uint32_t switches) {
  const uint64_t packets = (bytes + cfg.mtu - 1) / cfg.mtu;
  const uint64_t last = bytes - (packets - 1) * cfg.mtu + kDataHeaderBytes;
  const double host_ns_per_byte = 8e9 / cfg.host_rate_bps, spine_ns_per_byte = 8e9 / cfg.spine_rate_bps;
  double ns = (bytes + packets * kDataHeaderBytes) * host_ns_per_byte;  // the sender's link
  // Each switch's egress: the host-facing one at the host rate, the others at the spine rate.
  const double per_byte_through_switches = host_ns_per_byte + (switches - 1) * spine_ns_per_byte;
  ns += last * per_byte_through_switches;
  ns += kAckBytes * (host_ns_per_byte + per_byte_through_switches);  // the ACK back
  ns += 2.0 * (switches + 1) * cfg.link_delay_ns;
  return static_cast<uint64_t>(ns);
}

FabricResult RunFabric(const FabricConfig& cfg) {
  FabricResult r;
  const uint32_t hosts = cfg.leaves * cfg.hosts_per_leaf;
  if (cfg.leaves == 0 || cfg.hosts_per_leaf == 0 || (cfg.leaves > 1 && cfg.spines == 0) || hosts < 2 ||
      cfg.host_rate_bps == 0 || cfg.spine_rate_bps == 0 || cfg.poll_ns == 0 || cfg.mtu == 0) {
    r.error = "leaves, hosts per leaf, spines (with more than one leaf), rates, MTU and poll period must be positive";
    return r;
  }
  for (const FlowSpec& f : cfg.flows) {
    if (f.src >= hosts || f.dst >= hosts || f.src == f.dst || f.bytes == 0) {
      r.error = "a flow needs two different hosts of the fabric and bytes > 0";
      return r;
    }
  }
  const bool int_stamp = cfg.int_stamp_auto ? cfg.cc == "hpcc" : cfg.int_stamp;
  const auto port_config = [&](uint64_t rate, uint64_t seed) {
    SwitchPortConfig p;
    p.line_rate_bps = rate;
    p.ecn = cfg.ecn;
    p.kmin_bytes = static_cast<uint64_t>(cfg.kmin_per_100g * (rate / 1e11));
    p.kmax_bytes = static_cast<uint64_t>(cfg.kmax_per_100g * (rate / 1e11));
    p.pmax = cfg.pmax;
    p.mark_at_dequeue = cfg.mark_at_dequeue;
    p.buffer_bytes = cfg.buffer_bytes;
    p.int_stamp = int_stamp;
    p.seed = cfg.seed * 1000003 + seed;
    return p;
  };
  PfcConfig pfc;
  pfc.enabled = cfg.pfc;
  pfc.xoff_bytes = cfg.pfc_xoff_bytes;
  pfc.xon_bytes = cfg.pfc_xon_bytes;

  // The nodes and pending events go before the hosts and switches, whatever happens.
  struct Destroy {
    ~Destroy() { ns3::Simulator::Destroy(); }
  };
  std::vector<std::unique_ptr<DroceSwitch>> leaf, spine;
  std::vector<std::unique_ptr<DroceHost>> host;
  const Destroy destroy_first;
  std::vector<ns3::Ptr<ns3::Node>> leaf_node, spine_node;
  for (uint32_t l = 0; l < cfg.leaves; ++l) {
    leaf.push_back(std::make_unique<DroceSwitch>(pfc));
    leaf_node.push_back(ns3::CreateObject<ns3::Node>());
  }
  const uint32_t spines = cfg.leaves > 1 ? cfg.spines : 0;
  for (uint32_t s = 0; s < spines; ++s) {
    spine.push_back(std::make_unique<DroceSwitch>(pfc));
    spine_node.push_back(ns3::CreateObject<ns3::Node>());
  }
  uint64_t port_seed = 0;
  // Hosts: leaf l's port j is host l * hosts_per_leaf + j.
  for (uint32_t h = 0; h < hosts; ++h) {
    const uint32_t l = h / cfg.hosts_per_leaf;
    HostModelConfig hc;
    MacOf(0, h + 1, hc.mac);
    hc.ipv4 = 0x0A000001 + h;
    hc.line_rate_bps = cfg.host_rate_bps;
    hc.cc = cfg.cc;
    hc.cc_params = cfg.cc_params;
    hc.mem_bytes = std::max<uint32_t>(1u << 20, cfg.msg_bytes * cfg.depth);
    const auto devs = LinkToSwitch(ns3::CreateObject<ns3::Node>(), leaf_node[l], cfg.host_rate_bps,
                                   cfg.link_delay_ns, hc.mac, false);
    host.push_back(std::make_unique<DroceHost>(devs.first, cfg.poll_ns));
    if (!host.back()->Open(hc, &r.error)) return r;
    const uint32_t port = leaf[l]->AddPort(devs.second, port_config(cfg.host_rate_bps, ++port_seed));
    DroceHost* hp = host.back().get();
    leaf[l]->SetUpstream(port, [hp](bool pause) { hp->SetPaused(pause); }, cfg.link_delay_ns);
  }
  // Leaf l's uplink s and spine s's port l.
  std::vector<std::vector<uint32_t>> uplink(cfg.leaves), downlink(spines);
  for (uint32_t l = 0; l < cfg.leaves; ++l) {
    for (uint32_t s = 0; s < spines; ++s) {
      uint8_t mac[6];
      MacOf(1, l << 8 | s, mac);
      const auto devs = LinkToSwitch(leaf_node[l], spine_node[s], cfg.spine_rate_bps, cfg.link_delay_ns, mac, true);
      uplink[l].push_back(leaf[l]->AddPort(devs.first, port_config(cfg.spine_rate_bps, ++port_seed)));
      downlink[s].push_back(spine[s]->AddPort(devs.second, port_config(cfg.spine_rate_bps, ++port_seed)));
      DroceSwitch* lp = leaf[l].get();
      DroceSwitch* sp = spine[s].get();
      const uint32_t up = uplink[l].back(), down = downlink[s].back();
      leaf[l]->SetUpstream(up, [sp, down](bool pause) { sp->PausePort(down, pause); }, cfg.link_delay_ns);
      spine[s]->SetUpstream(down, [lp, up](bool pause) { lp->PausePort(up, pause); }, cfg.link_delay_ns);
    }
  }
  for (uint32_t h = 0; h < hosts; ++h) {
    uint8_t mac[6];
    MacOf(0, h + 1, mac);
    const uint32_t hl = h / cfg.hosts_per_leaf;
    for (uint32_t l = 0; l < cfg.leaves; ++l) {
      leaf[l]->AddRoute(mac, l == hl ? std::vector<uint32_t>{h % cfg.hosts_per_leaf} : uplink[l]);
    }
    for (uint32_t s = 0; s < spines; ++s) spine[s]->AddRoute(mac, {downlink[s][hl]});
  }
  for (auto& sw : leaf) sw->Finish();
  for (auto& sw : spine) sw->Finish();

  // Each flow: an RC QP pair of its own, set up when it starts.
  const size_t n = cfg.flows.size();
  std::vector<int> flow_id(n, -1);
  std::vector<uint32_t> flow_qpn(n, 0);
  std::string start_error;
  size_t started = 0;
  std::vector<size_t> running;  // flows started and not yet seen done
  std::function<void(size_t)> start = [&](size_t i) {
    const FlowSpec& f = cfg.flows[i];
    HostModel& tx = host[f.src]->model();
    HostModel& rx = host[f.dst]->model();
    std::string err;
    // The sender's queue holds the flow's `depth` WRITEs (twice, for slack); the receiver's posts nothing.
    const uint32_t a = tx.CreateQp(&err, 2 * cfg.depth);
    const uint32_t b = a != 0 ? rx.CreateQp(&err, 16) : 0;
    if (b == 0 || !tx.ConnectQp(a, rx, b, cfg.mtu, &err) || !rx.ConnectQp(b, tx, a, cfg.mtu, &err)) {
      start_error = err;
      ns3::Simulator::Stop();
      return;
    }
    flow_qpn[i] = a;
    flow_id[i] = tx.StartFlow(a, rx, f.bytes, cfg.msg_bytes, cfg.depth, NowNs(), &err);
    if (flow_id[i] < 0) {
      start_error = err;
      ns3::Simulator::Stop();
      return;
    }
    ++started;
    running.push_back(i);
    host[f.src]->Wake();
  };
  for (size_t i = 0; i < n; ++i) {
    ns3::Simulator::Schedule(ns3::NanoSeconds(kStartNs + cfg.flows[i].start_ns), [&start, i] { start(i); });
  }

  // Stops once every flow has started and finished (checked every 10 us over the flows still running).
  std::function<void()> check = [&] {
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [&](size_t i) { return host[cfg.flows[i].src]->model().Flow(flow_id[i]).done; }),
                  running.end());
    if (started == n && running.empty()) {
      ns3::Simulator::Stop();
      return;
    }
    ns3::Simulator::Schedule(ns3::MicroSeconds(10), check);
  };
  // A port class's queue lengths (histogram, mean, max) and/or its counters (drops, marks, pauses) now.
  const auto collect = [&](const char* name, DroceSwitch& sw, const std::vector<uint32_t>& ports, bool queues, bool counts) {
    PortClassStats* c = nullptr;
    for (PortClassStats& p : r.ports) c = p.name == name ? &p : c;
    if (c == nullptr) {
      r.ports.emplace_back();
      c = &r.ports.back();
      c->name = name;
    }
    for (uint32_t i : ports) {
      SwitchPortModel& m = sw.port(i);
      const SwitchPortStats s = m.Stats(NowNs());
      if (queues) {
        const std::vector<uint64_t>& h = m.QueueHistogramNs(NowNs());
        c->bin_bytes = m.histogram_bin_bytes();
        if (c->histogram_ns.size() < h.size()) c->histogram_ns.resize(h.size());
        for (size_t b = 0; b < h.size(); ++b) c->histogram_ns[b] += h[b];
        c->max_queue_bytes = std::max(c->max_queue_bytes, s.max_queue_bytes);
        c->mean_queue_bytes += s.mean_queue_bytes;
        ++c->ports;
      }
      if (!counts) continue;
      c->dropped += s.dropped;
      c->marked += s.marked;
      c->stamped += s.stamped;
      c->pauses += s.pauses;
      c->paused_ns += s.paused_ns;
      c->departed_bytes.push_back(s.departed_bytes);
    }
  };
  const auto collect_all = [&](bool queues, bool counts) {
    for (uint32_t l = 0; l < cfg.leaves; ++l) {
      std::vector<uint32_t> down(cfg.hosts_per_leaf);
      for (uint32_t j = 0; j < cfg.hosts_per_leaf; ++j) down[j] = j;
      collect("leaf_down", *leaf[l], down, queues, counts);
      if (spines > 0) collect("leaf_up", *leaf[l], uplink[l], queues, counts);
    }
    for (uint32_t s = 0; s < spines; ++s) {
      collect("spine_down", *spine[s], downlink[s], queues, counts);
    }
  };
  if (cfg.queue_until_ns > 0) {
    ns3::Simulator::Schedule(ns3::NanoSeconds(kStartNs + cfg.queue_until_ns), [&] { collect_all(true, false); });
  }
  ns3::Simulator::Schedule(ns3::NanoSeconds(kStartNs), check);
  ns3::Simulator::Stop(ns3::NanoSeconds(kStartNs + cfg.max_ns));
  ns3::Simulator::Run();
  r.events = ns3::Simulator::GetEventCount();
  const uint64_t end = NowNs();

  r.error = start_error;
  r.all_done = start_error.empty() && started == n;
  for (size_t i = 0; i < n; ++i) {
    FabricFlow f;
    f.spec = cfg.flows[i];
    f.switches = f.spec.src / cfg.hosts_per_leaf == f.spec.dst / cfg.hosts_per_leaf ? 1 : 3;
    f.ideal_ns = IdealFctNs(cfg, f.spec.bytes, f.switches);
    if (flow_id[i] >= 0) {
      f.progress = host[f.spec.src]->model().Flow(flow_id[i]);
      f.qp = host[f.spec.src]->model().Qp(flow_qpn[i]);
    }
    r.all_done = r.all_done && f.progress.done && !f.progress.failed;
    if (f.progress.done) r.end_ns = std::max(r.end_ns, f.progress.finish_ns - kStartNs);
    r.flows.push_back(f);
  }
  if (!r.all_done) r.end_ns = end - kStartNs;

  // The run may end before queue_until.
  const bool queues_taken = !r.ports.empty();
  collect_all(!queues_taken, true);
  for (auto& sw : leaf) {
    r.pause_frames += sw->pause_frames();
    r.unknown_destination += sw->unknown_destination();
  }
  for (auto& sw : spine) {
    r.pause_frames += sw->pause_frames();
    r.unknown_destination += sw->unknown_destination();
  }
  for (PortClassStats& c : r.ports) c.mean_queue_bytes /= std::max<uint32_t>(1, c.ports);
  for (const auto& h : host) r.host_pauses += h->pauses();
  return r;
}

void WriteFabricFlowsCsv(const FabricResult& r, std::ostream& out) {
  out << "flow,src,dst,bytes,start_us,fct_us,ideal_us,slowdown,switches,done,failed,retransmitted,timeouts\n";
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const FabricFlow& f = r.flows[i];
    const FlowProgress& p = f.progress;
    const double fct = p.done ? (p.finish_ns - p.start_ns) / 1e3 : -1.0;
    out << i << ',' << f.spec.src << ',' << f.spec.dst << ',' << f.spec.bytes << ',' << f.spec.start_ns / 1e3 << ','
        << fct << ',' << f.ideal_ns / 1e3 << ',' << (p.done ? fct * 1e3 / f.ideal_ns : -1.0) << ',' << f.switches
        << ',' << p.done << ',' << p.failed << ',' << f.qp.retransmitted_packets << ',' << f.qp.timeouts << '\n';
  }
}

void WriteQueueCdfCsv(const FabricResult& r, std::ostream& out) {
  out << "class,queue_bytes,cdf\n";
  for (const PortClassStats& c : r.ports) {
    uint64_t total = 0, acc = 0;
    for (uint64_t t : c.histogram_ns) total += t;
    if (total == 0) continue;
    for (size_t b = 0; b < c.histogram_ns.size(); ++b) {
      if (c.histogram_ns[b] == 0) continue;
      acc += c.histogram_ns[b];
      out << c.name << ',' << b * uint64_t{c.bin_bytes} << ',' << static_cast<double>(acc) / total << '\n';
    }
  }
}

std::string FabricSummary(const FabricConfig& cfg, const FabricResult& r) {
  std::vector<double> all, small;
  uint64_t done = 0, timeouts = 0, retransmitted = 0;
  for (const FabricFlow& f : r.flows) {
    timeouts += f.qp.timeouts;
    retransmitted += f.qp.retransmitted_packets;
    if (!f.progress.done) continue;
    ++done;
    const double s = static_cast<double>(f.progress.finish_ns - f.progress.start_ns) / f.ideal_ns;
    all.push_back(s);
    if (f.spec.bytes <= 100'000) small.push_back(s);
  }
  std::ostringstream o;
  o << "hosts=" << cfg.leaves * cfg.hosts_per_leaf << " leaves=" << cfg.leaves << " spines=" << cfg.spines
    << " host_gbps=" << cfg.host_rate_bps / 1e9 << " spine_gbps=" << cfg.spine_rate_bps / 1e9 << " cc=" << cfg.cc
    << " cc_params=\"" << cfg.cc_params << "\" pfc=" << cfg.pfc << " buffer=" << cfg.buffer_bytes
    << " flows=" << r.flows.size() << " done=" << done << " all_done=" << r.all_done << " end_us=" << r.end_ns / 1e3;
  for (const auto& [name, v] : {std::pair<const char*, const std::vector<double>*>{"", &all}, {"small_", &small}}) {
    o << ' ' << name << "slowdown_p50=" << Percentile(*v, 0.5) << ' ' << name << "slowdown_p95=" << Percentile(*v, 0.95)
      << ' ' << name << "slowdown_p99=" << Percentile(*v, 0.99);
  }
  for (const PortClassStats& c : r.ports) {
    o << ' ' << c.name << "_queue_mean=" << static_cast<uint64_t>(c.mean_queue_bytes) << ' ' << c.name
      << "_queue_p99=" << c.QueuePercentile(0.99) << ' ' << c.name << "_queue_max=" << c.max_queue_bytes << ' '
      << c.name << "_drops=" << c.dropped << ' ' << c.name << "_marks=" << c.marked;
  }
  o << " pause_frames=" << r.pause_frames << " host_pauses=" << r.host_pauses << " timeouts=" << timeouts
    << " retransmitted=" << retransmitted << " unknown_destination=" << r.unknown_destination << " events=" << r.events;
  return o.str();
}

}  // namespace droce::ns3glue
