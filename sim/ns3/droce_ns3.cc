// The ns-3 side of sim/ns3 (C++17: ns-3 3.37's headers are not C++20-clean).
// A DroceHost owns a HostModel (droce's core::Device) behind a
// PointToPointNetDevice: frames the channel delivers go to the model, frames
// the model transmits go to the device's queue, and the model's poll loop
// runs as ns-3 events — at once when a frame arrives at an idle host, then
// every poll period while it has work or timers. A DroceSwitch forwards by
// destination MAC into one SwitchPortModel per port, which serializes at the
// line rate; the switch side of each link runs far faster than the line
// rate, so the port model alone sets the departure times and the channel
// adds the propagation delay.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "ns3/data-rate.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/mac48-address.h"
#include "ns3/node.h"
#include "ns3/packet.h"
#include "ns3/point-to-point-channel.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/simulator.h"
#include "sim/ns3/incast.h"

namespace droce::ns3glue {
namespace {

using ns3::Ptr;

constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kHostTxQueuePackets = 64;  // the NIC's transmit ring toward the link
constexpr uint64_t kSwitchSideSpeedup = 64;   // the switch side of a link: the port model serializes
constexpr uint16_t kIpv4 = 0x0800;            // the p2p device carries the whole Ethernet frame

uint64_t NowNs() { return static_cast<uint64_t>(ns3::Simulator::Now().GetNanoSeconds()); }

uint64_t MacKey(const uint8_t* mac) {
  uint64_t k = 0;
  for (int i = 0; i < 6; ++i) k = k << 8 | mac[i];
  return k;
}

class DroceHost {
 public:
  DroceHost(Ptr<ns3::PointToPointNetDevice> dev, uint64_t poll_ns) : dev_(dev), poll_ns_(poll_ns) {
    dev_->SetReceiveCallback(ns3::MakeCallback(&DroceHost::OnReceive, this));
  }
  bool Open(const HostModelConfig& cfg, std::string* error) {
    model_ = HostModel::Create(cfg, &DroceHost::Transmit, this, error);
    return model_ != nullptr;
  }
  HostModel& model() { return *model_; }

  // A frame arrived or work was posted: a busy loop (next round within a
  // period) sees it on that round; a loop spinning idle or for a far
  // deadline sees it now.
  void Wake() {
    const uint64_t now = NowNs();
    if (poll_at_ <= now + poll_ns_) return;
    if (poll_.IsRunning()) ns3::Simulator::Cancel(poll_);
    poll_at_ = now;
    poll_ = ns3::Simulator::ScheduleNow(&DroceHost::PollEvent, this);
  }

 private:
  static bool Transmit(void* ctx, const uint8_t* frame, uint32_t len) {
    DroceHost* h = static_cast<DroceHost*>(ctx);
    if (h->dev_->GetQueue()->GetNPackets() >= kHostTxQueuePackets) return false;
    ns3::Mac48Address dst;
    dst.CopyFrom(frame);
    return h->dev_->Send(ns3::Create<ns3::Packet>(frame, len), dst, kIpv4);
  }

  bool OnReceive(Ptr<ns3::NetDevice>, Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&) {
    const uint32_t len = p->GetSize();
    if (len > sizeof(buf_)) return false;
    p->CopyData(buf_, len);
    model_->Receive(buf_, len);
    Wake();
    return true;
  }

  void PollEvent() {
    const uint64_t now = NowNs();
    model_->Poll(now);
    poll_at_ = model_->NextPollNs(now, poll_ns_);
    if (poll_at_ != kNever) poll_ = ns3::Simulator::Schedule(ns3::NanoSeconds(poll_at_ - now), &DroceHost::PollEvent, this);
  }

  Ptr<ns3::PointToPointNetDevice> dev_;
  uint64_t poll_ns_;
  std::unique_ptr<HostModel> model_;
  ns3::EventId poll_;
  uint64_t poll_at_ = kNever;
  uint8_t buf_[9216];
};

class DroceSwitch {
 public:
  // A port toward `mac` on `dev`.
  void AddPort(Ptr<ns3::PointToPointNetDevice> dev, const uint8_t* mac, const SwitchPortConfig& cfg) {
    Port p;
    p.dev = dev;
    p.model = SwitchPortModel::Create(cfg);
    by_mac_[MacKey(mac)] = static_cast<uint32_t>(ports_.size());
    ports_.push_back(std::move(p));
    dev->SetReceiveCallback(ns3::MakeCallback(&DroceSwitch::OnReceive, this));
  }
  SwitchPortModel& port(uint32_t i) { return *ports_[i].model; }
  uint64_t unknown_destination() const { return unknown_destination_; }

 private:
  struct Port {
    Ptr<ns3::PointToPointNetDevice> dev;
    std::unique_ptr<SwitchPortModel> model;
    ns3::EventId departure;
    uint64_t departure_at = kNever;
  };

  bool OnReceive(Ptr<ns3::NetDevice>, Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&) {
    const uint32_t len = p->GetSize();
    if (len < 14 || len > sizeof(buf_)) return false;
    p->CopyData(buf_, len);
    const auto it = by_mac_.find(MacKey(buf_));
    if (it == by_mac_.end()) {
      ++unknown_destination_;
      return true;
    }
    if (ports_[it->second].model->Enqueue(buf_, len, NowNs())) ScheduleDeparture(it->second);
    return true;
  }

  void ScheduleDeparture(uint32_t i) {
    Port& p = ports_[i];
    const uint64_t t = p.model->NextDepartureNs();
    if (t == kNever || t >= p.departure_at) return;
    if (p.departure.IsRunning()) ns3::Simulator::Cancel(p.departure);
    p.departure_at = t;
    const uint64_t now = NowNs();
    p.departure = ns3::Simulator::Schedule(ns3::NanoSeconds(t > now ? t - now : 0), &DroceSwitch::Depart, this, i);
  }

  void Depart(uint32_t i) {
    Port& p = ports_[i];
    p.departure_at = kNever;
    uint32_t len = 0;
    for (const uint8_t* f; (f = p.model->Dequeue(NowNs(), &len)) != nullptr;) {
      ns3::Mac48Address dst;
      dst.CopyFrom(f);
      p.dev->Send(ns3::Create<ns3::Packet>(f, len), dst, kIpv4);
    }
    ScheduleDeparture(i);
  }

  std::vector<Port> ports_;
  std::unordered_map<uint64_t, uint32_t> by_mac_;
  uint64_t unknown_destination_ = 0;
  uint8_t buf_[9216];
};

// A point-to-point link between a host and the switch: the host's side at the line rate, the switch's faster.
std::pair<Ptr<ns3::PointToPointNetDevice>, Ptr<ns3::PointToPointNetDevice>> Link(Ptr<ns3::Node> host,
                                                                                 Ptr<ns3::Node> sw,
                                                                                 const IncastConfig& cfg,
                                                                                 const uint8_t* host_mac) {
  Ptr<ns3::PointToPointChannel> ch = ns3::CreateObject<ns3::PointToPointChannel>();
  ch->SetAttribute("Delay", ns3::TimeValue(ns3::NanoSeconds(cfg.link_delay_ns)));
  Ptr<ns3::PointToPointNetDevice> d[2];
  const Ptr<ns3::Node> nodes[2] = {host, sw};
  for (int i = 0; i < 2; ++i) {
    d[i] = ns3::CreateObject<ns3::PointToPointNetDevice>();
    d[i]->SetDataRate(ns3::DataRate(cfg.line_rate_bps * (i == 0 ? 1 : kSwitchSideSpeedup)));
    d[i]->SetMtu(9000);
    Ptr<ns3::Queue<ns3::Packet>> q = ns3::CreateObject<ns3::DropTailQueue<ns3::Packet>>();
    q->SetMaxSize(ns3::QueueSize("1000p"));
    d[i]->SetQueue(q);
    uint8_t mac[6];
    std::memcpy(mac, host_mac, 6);
    if (i == 1) mac[1] = 0xFE;  // the switch port's own address, never a destination
    ns3::Mac48Address a;
    a.CopyFrom(mac);
    d[i]->SetAddress(a);
    nodes[i]->AddDevice(d[i]);
    d[i]->Attach(ch);
  }
  return {d[0], d[1]};
}

}  // namespace

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
  Ptr<ns3::Node> sw_node = ns3::CreateObject<ns3::Node>();
  for (uint32_t h = 0; h < n; ++h) {
    HostModelConfig hc;
    hc.mac[4] = static_cast<uint8_t>(h >> 8);
    hc.mac[5] = static_cast<uint8_t>(h + 1);
    hc.ipv4 = 0x0A000001 + h;
    hc.line_rate_bps = cfg.line_rate_bps;
    hc.cc = cfg.cc;
    hc.cc_params = cfg.cc_params;
    hc.mem_bytes = std::max<uint32_t>(1u << 20, cfg.msg_bytes * cfg.depth);
    const auto devs = Link(ns3::CreateObject<ns3::Node>(), sw_node, cfg, hc.mac);
    hosts.push_back(std::make_unique<DroceHost>(devs.first, cfg.poll_ns));
    if (!hosts.back()->Open(hc, &r.error)) return r;
    SwitchPortConfig port = pc;
    port.seed = pc.seed + h;
    sw.AddPort(devs.second, hc.mac, port);
  }

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
