// N-to-1 incast (sim/ns3/incast.h) on sim/ns3's ns-3 hosts and switch
// (sim/ns3/nodes.h). C++17: ns-3 3.37's headers are not C++20-clean.
#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>

#include "sim/ns3/incast.h"
#include "sim/ns3/nodes.h"

namespace droce::ns3glue {

IncastResult RunIncast(const IncastConfig& cfg) {
  IncastResult r;
  if (cfg.senders == 0 || cfg.line_rate_bps == 0 || cfg.poll_ns == 0 || cfg.sample_ns == 0) {
    r.error = "senders, line rate, poll and sample periods must be positive";
    return r;
  }
  const uint32_t n = cfg.senders + 1;  // hosts 0..senders-1 send, host `senders` receives
  SwitchPortConfig pc = cfg.port;
  pc.line_rate_bps = cfg.line_rate_bps;
  if (cfg.int_stamp_auto) pc.int_stamp = cfg.cc == "hpcc";

  // Whatever happens, the nodes and pending events go before the hosts and switch.
  struct Destroy {
    ~Destroy() { ns3::Simulator::Destroy(); }
  };
  DroceSwitch sw;
  std::vector<std::unique_ptr<DroceHost>> hosts;
  const Destroy destroy_first;
  ns3::Ptr<ns3::Node> sw_node = ns3::CreateObject<ns3::Node>();
  for (uint32_t h = 0; h < n; ++h) {
    HostModelConfig hc;
    hc.mac[4] = static_cast<uint8_t>(h >> 8);
    hc.mac[5] = static_cast<uint8_t>(h + 1);
    hc.ipv4 = 0x0A000001 + h;
    hc.line_rate_bps = cfg.line_rate_bps;
    hc.cc = cfg.cc;
    hc.cc_params = cfg.cc_params;
    hc.mem_bytes = std::max<uint32_t>(1u << 20, cfg.msg_bytes * cfg.depth);
    const auto devs =
        LinkToSwitch(ns3::CreateObject<ns3::Node>(), sw_node, cfg.line_rate_bps, cfg.link_delay_ns, hc.mac, false);
    hosts.push_back(std::make_unique<DroceHost>(devs.first, cfg.poll_ns));
    if (!hosts.back()->Open(hc, &r.error)) return r;
    SwitchPortConfig port = pc;
    port.seed = pc.seed + h;
    sw.AddRoute(hc.mac, {sw.AddPort(devs.second, port)});
  }
  sw.Finish();

  // One RC QP pair per sender; the flows start together after a microsecond.
  HostModel& rx = hosts[cfg.senders]->model();
  std::vector<uint32_t> sender_qpn(cfg.senders);
  for (uint32_t s = 0; s < cfg.senders; ++s) {
    HostModel& tx = hosts[s]->model();
    const uint32_t a = tx.CreateQp(&r.error);
    const uint32_t b = a != 0 ? rx.CreateQp(&r.error) : 0;
    if (b == 0 || !tx.ConnectQp(a, rx, b, cfg.mtu, &r.error) || !rx.ConnectQp(b, tx, a, cfg.mtu, &r.error)) return r;
    sender_qpn[s] = a;
  }
  const uint64_t start_ns = 1000;
  std::vector<int> flow_id(cfg.senders, -1);
  std::string start_error;
  ns3::Simulator::Schedule(ns3::NanoSeconds(start_ns), [&] {
    for (uint32_t s = 0; s < cfg.senders; ++s) {
      flow_id[s] = hosts[s]->model().StartFlow(sender_qpn[s], rx, cfg.flow_bytes, cfg.msg_bytes, cfg.depth, NowNs(),
                                               &start_error);
      hosts[s]->Wake();
    }
  });

  // Samples every period; stops once every flow is done.
  SwitchPortModel& bottleneck = sw.port(cfg.senders);
  std::vector<uint64_t> last_acked(cfg.senders, 0);
  std::function<void()> sample = [&] {
    const uint64_t now = NowNs();
    IncastSample smp;
    smp.t_ns = now - start_ns;
    smp.queue_bytes = bottleneck.QueueBytes(now);
    bool all = true;
    for (uint32_t s = 0; s < cfg.senders; ++s) {
      HostModel& m = hosts[s]->model();
      const CcView c = m.Cc(sender_qpn[s]);
      smp.rate_bps.push_back(c.rate_limited ? static_cast<double>(c.rate_bps) : static_cast<double>(cfg.line_rate_bps));
      smp.window.push_back(c.window_packets);
      const uint64_t acked = flow_id[s] >= 0 ? m.Flow(flow_id[s]).bytes_acked : 0;
      smp.goodput_bps.push_back((acked - last_acked[s]) * 8e9 / cfg.sample_ns);
      last_acked[s] = acked;
      all = all && flow_id[s] >= 0 && m.Flow(flow_id[s]).done;
    }
    r.samples.push_back(std::move(smp));
    if (all || !start_error.empty()) {
      ns3::Simulator::Stop();
      return;
    }
    ns3::Simulator::Schedule(ns3::NanoSeconds(cfg.sample_ns), sample);
  };
  ns3::Simulator::Schedule(ns3::NanoSeconds(start_ns), sample);
  ns3::Simulator::Stop(ns3::NanoSeconds(start_ns + cfg.max_ns));
  ns3::Simulator::Run();
  r.events = ns3::Simulator::GetEventCount();

  const uint64_t end = NowNs();
  r.error = start_error;
  r.all_done = start_error.empty();
  r.end_ns = 0;
  for (uint32_t s = 0; s < cfg.senders; ++s) {
    IncastFlow f;
    f.sender = s;
    if (flow_id[s] >= 0) f.progress = hosts[s]->model().Flow(flow_id[s]);
    f.cc = hosts[s]->model().Cc(sender_qpn[s]);
    f.qp = hosts[s]->model().Qp(sender_qpn[s]);
    r.all_done = r.all_done && f.progress.done && !f.progress.failed;
    if (f.progress.done) r.end_ns = std::max(r.end_ns, f.progress.finish_ns - start_ns);
    r.flows.push_back(f);
  }
  if (!r.all_done) r.end_ns = end - start_ns;
  r.bottleneck = bottleneck.Stats(end);
  for (const auto& h : hosts) r.host_counters.push_back(h->model().DescribeCounters());
  return r;
}

void WriteSamplesCsv(const IncastResult& r, std::ostream& out) {
  const size_t n = r.flows.size();
  out << "t_us,queue_bytes";
  for (const char* col : {"rate_gbps_", "window_", "goodput_gbps_"}) {
    for (size_t i = 0; i < n; ++i) out << ',' << col << i;
  }
  out << '\n';
  for (const IncastSample& s : r.samples) {
    out << s.t_ns / 1e3 << ',' << s.queue_bytes;
    for (size_t i = 0; i < n; ++i) out << ',' << s.rate_bps[i] / 1e9;
    for (size_t i = 0; i < n; ++i) out << ',' << s.window[i];
    for (size_t i = 0; i < n; ++i) out << ',' << s.goodput_bps[i] / 1e9;
    out << '\n';
  }
}

void WriteFlowsCsv(const IncastResult& r, std::ostream& out) {
  out << "flow,sender,bytes,fct_us,done,failed,algorithm,rtt_samples,min_rtt_us,cnps,telemetry_acks,rate_decreases,"
         "tx_packets,retransmitted,timeouts,naks_received\n";
  for (size_t i = 0; i < r.flows.size(); ++i) {
    const IncastFlow& f = r.flows[i];
    const FlowProgress& p = f.progress;
    out << i << ',' << f.sender << ',' << p.bytes << ',' << (p.done ? (p.finish_ns - p.start_ns) / 1e3 : -1.0) << ','
        << p.done << ',' << p.failed << ',' << f.cc.algorithm << ',' << f.cc.rtt_samples << ','
        << f.cc.min_rtt_ns / 1e3 << ',' << f.cc.cnps << ',' << f.cc.telemetry_acks << ',' << f.cc.rate_decreases
        << ',' << f.qp.tx_packets << ',' << f.qp.retransmitted_packets << ',' << f.qp.timeouts << ','
        << f.qp.naks_received << '\n';
  }
}

std::string Summary(const IncastConfig& cfg, const IncastResult& r) {
  std::vector<double> fct;
  for (const IncastFlow& f : r.flows) {
    if (f.progress.done) fct.push_back((f.progress.finish_ns - f.progress.start_ns) / 1e3);
  }
  std::sort(fct.begin(), fct.end());
  uint64_t timeouts = 0, retransmitted = 0;
  for (const IncastFlow& f : r.flows) {
    timeouts += f.qp.timeouts;
    retransmitted += f.qp.retransmitted_packets;
  }
  const double ideal_us = cfg.flow_bytes * 8e6 * cfg.senders / cfg.line_rate_bps;  // all bytes at the line rate
  std::ostringstream s;
  s << "senders=" << cfg.senders << " cc=" << cfg.cc << " cc_params=\"" << cfg.cc_params << "\""
    << " rate_gbps=" << cfg.line_rate_bps / 1e9 << " flow_bytes=" << cfg.flow_bytes << " mtu=" << cfg.mtu
    << " kmin=" << cfg.port.kmin_bytes << " kmax=" << cfg.port.kmax_bytes << " pmax=" << cfg.port.pmax
    << " buffer=" << cfg.port.buffer_bytes << " all_done=" << r.all_done << " end_us=" << r.end_ns / 1e3
    << " ideal_us=" << ideal_us;
  if (!fct.empty()) {
    s << " fct_min_us=" << fct.front() << " fct_p50_us=" << fct[fct.size() / 2] << " fct_max_us=" << fct.back();
  }
  s << " queue_max=" << r.bottleneck.max_queue_bytes << " queue_mean=" << static_cast<uint64_t>(r.bottleneck.mean_queue_bytes)
    << " queue_p50=" << r.bottleneck.p50_queue_bytes << " queue_p99=" << r.bottleneck.p99_queue_bytes
    << " drops=" << r.bottleneck.dropped << " marks=" << r.bottleneck.marked << " int_stamped=" << r.bottleneck.stamped
    << " timeouts=" << timeouts << " retransmitted=" << retransmitted << " events=" << r.events;
  return s.str();
}

}  // namespace droce::ns3glue
