// The ns-3 side of sim/ns3's hosts and switches (sim/ns3/nodes.h).
#include "sim/ns3/nodes.h"

#include <cstring>

#include "ns3/data-rate.h"
#include "ns3/drop-tail-queue.h"
#include "ns3/mac48-address.h"
#include "ns3/packet.h"
#include "ns3/point-to-point-channel.h"

namespace droce::ns3glue {
namespace {

using ns3::Ptr;

constexpr uint32_t kHostTxQueuePackets = 64;  // the NIC's transmit ring toward the link
constexpr uint64_t kSwitchSideSpeedup = 64;   // a switch's side of a link: the port model serializes
constexpr uint16_t kIpv4 = 0x0800;            // the p2p device carries the whole Ethernet frame

// ECMP's hash of a RoCEv2 frame's flow: IPv4 addresses, UDP source port (per
// QP) and the destination QP. Frames too short for them hash on what is there.
uint64_t FlowHash(const uint8_t* f, uint32_t len) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  const auto mix = [&](uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to && i < len; ++i) h = (h ^ f[i]) * 0x100000001b3ull;
  };
  mix(26, 34);  // IPv4 source, destination
  mix(34, 36);  // UDP source port
  mix(47, 50);  // BTH destination QP
  return h ^ (h >> 29);
}

}  // namespace

uint64_t MacKey(const uint8_t* mac) {
  uint64_t k = 0;
  for (int i = 0; i < 6; ++i) k = k << 8 | mac[i];
  return k;
}

DroceHost::DroceHost(Ptr<ns3::PointToPointNetDevice> dev, uint64_t poll_ns) : dev_(dev), poll_ns_(poll_ns) {
  dev_->SetReceiveCallback(ns3::MakeCallback(&DroceHost::OnReceive, this));
}

bool DroceHost::Open(const HostModelConfig& cfg, std::string* error) {
  model_ = HostModel::Create(cfg, &DroceHost::Transmit, this, error);
  return model_ != nullptr;
}

void DroceHost::Wake() {
  const uint64_t now = NowNs();
  if (poll_at_ <= now + poll_ns_) return;
  if (poll_.IsRunning()) ns3::Simulator::Cancel(poll_);
  poll_at_ = now;
  poll_ = ns3::Simulator::ScheduleNow(&DroceHost::PollEvent, this);
}

void DroceHost::SetPaused(bool paused) {
  if (paused && !paused_) ++pauses_;
  paused_ = paused;
  if (!paused) Wake();
}

bool DroceHost::Transmit(void* ctx, const uint8_t* frame, uint32_t len) {
  DroceHost* h = static_cast<DroceHost*>(ctx);
  if (h->paused_ || h->dev_->GetQueue()->GetNPackets() >= kHostTxQueuePackets) return false;
  ns3::Mac48Address dst;
  dst.CopyFrom(frame);
  return h->dev_->Send(ns3::Create<ns3::Packet>(frame, len), dst, kIpv4);
}

bool DroceHost::OnReceive(Ptr<ns3::NetDevice>, Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&) {
  const uint32_t len = p->GetSize();
  if (len > sizeof(buf_)) return false;
  p->CopyData(buf_, len);
  model_->Receive(buf_, len);
  Wake();
  return true;
}

void DroceHost::PollEvent() {
  const uint64_t now = NowNs();
  model_->Poll(now);
  poll_at_ = model_->NextPollNs(now, poll_ns_);
  if (poll_at_ != kNever) {
    poll_ = ns3::Simulator::Schedule(ns3::NanoSeconds(poll_at_ - now), &DroceHost::PollEvent, this);
  }
}

uint32_t DroceSwitch::AddPort(Ptr<ns3::PointToPointNetDevice> dev, const SwitchPortConfig& cfg) {
  Port p;
  p.dev = dev;
  p.model = SwitchPortModel::Create(cfg);
  const uint32_t i = static_cast<uint32_t>(ports_.size());
  by_dev_[ns3::PeekPointer(dev)] = i;
  ports_.push_back(std::move(p));
  dev->SetReceiveCallback(ns3::MakeCallback(&DroceSwitch::OnReceive, this));
  return i;
}

void DroceSwitch::AddRoute(const uint8_t* mac, std::vector<uint32_t> ports) { routes_[MacKey(mac)] = std::move(ports); }

void DroceSwitch::SetUpstream(uint32_t port, PauseFn pause, uint64_t delay_ns) {
  ports_[port].upstream = std::move(pause);
  ports_[port].upstream_delay_ns = delay_ns;
}

void DroceSwitch::Finish() {
  if (pfc_cfg_.enabled) pfc_ = std::make_unique<PfcModel>(ports(), pfc_cfg_.xoff_bytes, pfc_cfg_.xon_bytes);
}

void DroceSwitch::PausePort(uint32_t i, bool pause) {
  Port& p = ports_[i];
  if (pause) {
    p.model->Pause(NowNs());
    if (p.departure.IsRunning()) ns3::Simulator::Cancel(p.departure);
    p.departure_at = kNever;
    // The frame on the wire when the pause came still leaves.
    ScheduleDeparture(i);
  } else {
    p.model->Resume(NowNs());
    ScheduleDeparture(i);
  }
}

bool DroceSwitch::OnReceive(Ptr<ns3::NetDevice> dev, Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&) {
  const uint32_t len = p->GetSize();
  if (len < 14 || len > sizeof(buf_)) return false;
  p->CopyData(buf_, len);
  const auto it = routes_.find(MacKey(buf_));
  if (it == routes_.end() || it->second.empty()) {
    ++unknown_destination_;
    return true;
  }
  const std::vector<uint32_t>& out = it->second;
  const uint32_t egress = out.size() == 1 ? out[0] : out[FlowHash(buf_, len) % out.size()];
  Port& e = ports_[egress];
  if (!e.model->Enqueue(buf_, len, NowNs())) return true;  // tail drop
  if (pfc_) {
    const uint32_t ingress = by_dev_.at(ns3::PeekPointer(dev));
    e.ingress.push_back(ingress);
    Signal(ingress, pfc_->Add(ingress, len));
  }
  ScheduleDeparture(egress);
  return true;
}

void DroceSwitch::Signal(uint32_t ingress, int signal) {
  if (signal == PfcModel::kNone) return;
  const Port& p = ports_[ingress];
  if (!p.upstream) return;
  ns3::Simulator::Schedule(ns3::NanoSeconds(p.upstream_delay_ns),
                           [pause = p.upstream, on = signal == PfcModel::kPause] { pause(on); });
}

void DroceSwitch::ScheduleDeparture(uint32_t i) {
  Port& p = ports_[i];
  const uint64_t t = p.model->NextDepartureNs();
  if (t == kNever || t >= p.departure_at) return;
  if (p.departure.IsRunning()) ns3::Simulator::Cancel(p.departure);
  p.departure_at = t;
  const uint64_t now = NowNs();
  p.departure = ns3::Simulator::Schedule(ns3::NanoSeconds(t > now ? t - now : 0), &DroceSwitch::Depart, this, i);
}

void DroceSwitch::Depart(uint32_t i) {
  Port& p = ports_[i];
  p.departure_at = kNever;
  uint32_t len = 0;
  for (const uint8_t* f; (f = p.model->Dequeue(NowNs(), &len)) != nullptr;) {
    ns3::Mac48Address dst;
    dst.CopyFrom(f);
    p.dev->Send(ns3::Create<ns3::Packet>(f, len), dst, kIpv4);
    if (pfc_) {
      const uint32_t ingress = p.ingress.front();
      p.ingress.pop_front();
      Signal(ingress, pfc_->Remove(ingress, len));
    }
  }
  ScheduleDeparture(i);
}

std::pair<Ptr<ns3::PointToPointNetDevice>, Ptr<ns3::PointToPointNetDevice>> LinkToSwitch(
    Ptr<ns3::Node> a, Ptr<ns3::Node> b, uint64_t rate_bps, uint64_t delay_ns, const uint8_t* mac_a,
    bool a_is_switch) {
  Ptr<ns3::PointToPointChannel> ch = ns3::CreateObject<ns3::PointToPointChannel>();
  ch->SetAttribute("Delay", ns3::TimeValue(ns3::NanoSeconds(delay_ns)));
  Ptr<ns3::PointToPointNetDevice> d[2];
  const Ptr<ns3::Node> nodes[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    d[i] = ns3::CreateObject<ns3::PointToPointNetDevice>();
    const bool fast = i == 1 || a_is_switch;
    d[i]->SetDataRate(ns3::DataRate(rate_bps * (fast ? kSwitchSideSpeedup : 1)));
    d[i]->SetMtu(9000);
    Ptr<ns3::Queue<ns3::Packet>> q = ns3::CreateObject<ns3::DropTailQueue<ns3::Packet>>();
    q->SetMaxSize(ns3::QueueSize("1000p"));
    d[i]->SetQueue(q);
    uint8_t mac[6];
    std::memcpy(mac, mac_a, 6);
    if (i == 1) mac[1] ^= 0xFE;  // the far side's own address, never a destination
    ns3::Mac48Address addr;
    addr.CopyFrom(mac);
    d[i]->SetAddress(addr);
    nodes[i]->AddDevice(d[i]);
    d[i]->Attach(ch);
  }
  return {d[0], d[1]};
}

}  // namespace droce::ns3glue
