// The ns-3 nodes of sim/ns3 (C++17, includes ns-3's headers; only the glue
// includes it). A DroceHost owns a HostModel (droce's core::Device) behind a
// PointToPointNetDevice: frames the channel delivers go to the model, frames
// the model transmits go to the device's queue, and the model's poll loop
// runs as ns-3 events — at once when a frame arrives at an idle host, then
// every poll period while it has work or timers. A DroceSwitch forwards by
// destination MAC (one port, or several chosen by a hash of the flow: ECMP)
// into one SwitchPortModel per port, which serializes at the port's line
// rate; the switch side of each link runs far faster than the line rate, so
// the port model alone sets the departure times and the channel adds the
// propagation delay. With PFC on, a switch counts each ingress port's bytes
// in its egress queues (sim::PfcIngress) and pauses the sender at the other
// end of that link above xoff, resuming it at xon; the pause reaches it one
// propagation delay later.
#ifndef DROCE_SIM_NS3_NODES_H_
#define DROCE_SIM_NS3_NODES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ns3/node.h"
#include "ns3/point-to-point-net-device.h"
#include "ns3/simulator.h"
#include "sim/ns3/host_model.h"

namespace droce::ns3glue {

inline constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

inline uint64_t NowNs() { return static_cast<uint64_t>(ns3::Simulator::Now().GetNanoSeconds()); }

uint64_t MacKey(const uint8_t* mac);

// PFC at every switch ingress (one priority, IEEE 802.1Qbb style).
struct PfcConfig {
  bool enabled = false;
  uint64_t xoff_bytes = 0;  // an ingress holding more than this in the switch pauses its sender
  uint64_t xon_bytes = 0;   // ... and resumes it at or below this
};

// Whatever sends into a link and can be told to pause: a host's NIC or a switch port.
using PauseFn = std::function<void(bool pause)>;

class DroceHost {
 public:
  DroceHost(ns3::Ptr<ns3::PointToPointNetDevice> dev, uint64_t poll_ns);
  bool Open(const HostModelConfig& cfg, std::string* error);
  HostModel& model() { return *model_; }
  // A frame arrived or work was posted: a busy loop (next round within a
  // period) sees it on that round; a loop spinning idle or for a far
  // deadline sees it now.
  void Wake();
  // PFC from the switch: while paused the NIC hands the link nothing (frames
  // already in the link's queue still leave).
  void SetPaused(bool paused);
  uint64_t pauses() const { return pauses_; }

 private:
  static bool Transmit(void* ctx, const uint8_t* frame, uint32_t len);
  bool OnReceive(ns3::Ptr<ns3::NetDevice>, ns3::Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&);
  void PollEvent();

  ns3::Ptr<ns3::PointToPointNetDevice> dev_;
  uint64_t poll_ns_;
  std::unique_ptr<HostModel> model_;
  ns3::EventId poll_;
  uint64_t poll_at_ = kNever;
  bool paused_ = false;
  uint64_t pauses_ = 0;
  uint8_t buf_[9216];
};

class DroceSwitch {
 public:
  explicit DroceSwitch(const PfcConfig& pfc = {}) : pfc_cfg_(pfc) {}
  // A port on `dev` with its own egress model; returns its index.
  uint32_t AddPort(ns3::Ptr<ns3::PointToPointNetDevice> dev, const SwitchPortConfig& cfg);
  // Frames to `mac` leave by one of `ports` (more than one: chosen by the flow's hash).
  void AddRoute(const uint8_t* mac, std::vector<uint32_t> ports);
  // Who sends into port i's link from the other end (PFC pauses it).
  void SetUpstream(uint32_t port, PauseFn pause, uint64_t delay_ns);
  // PFC toward port i's egress from the other end of its link.
  void PausePort(uint32_t port, bool pause);
  // Call once every port is added (sizes the PFC accounting).
  void Finish();

  uint32_t ports() const { return static_cast<uint32_t>(ports_.size()); }
  SwitchPortModel& port(uint32_t i) { return *ports_[i].model; }
  uint64_t unknown_destination() const { return unknown_destination_; }
  uint64_t pause_frames() const { return pfc_ ? pfc_->pause_frames() : 0; }

 private:
  struct Port {
    ns3::Ptr<ns3::PointToPointNetDevice> dev;
    std::unique_ptr<SwitchPortModel> model;
    std::deque<uint32_t> ingress;  // each queued frame's ingress port, in FIFO order (PFC)
    ns3::EventId departure;
    uint64_t departure_at = kNever;
    PauseFn upstream;
    uint64_t upstream_delay_ns = 0;
  };

  bool OnReceive(ns3::Ptr<ns3::NetDevice> dev, ns3::Ptr<const ns3::Packet> p, uint16_t, const ns3::Address&);
  void ScheduleDeparture(uint32_t i);
  void Depart(uint32_t i);
  void Signal(uint32_t ingress, int signal);

  PfcConfig pfc_cfg_;
  std::unique_ptr<PfcModel> pfc_;
  std::vector<Port> ports_;
  std::unordered_map<const ns3::NetDevice*, uint32_t> by_dev_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> routes_;
  uint64_t unknown_destination_ = 0;
  uint8_t buf_[9216];
};

// A point-to-point link between a (host or switch) `a` and a switch `b`
// (`delay_ns` each way): a's side at `rate_bps`, b's much faster (its port
// model serializes). The devices get `mac_a` and a switch-port address derived
// from it.
std::pair<ns3::Ptr<ns3::PointToPointNetDevice>, ns3::Ptr<ns3::PointToPointNetDevice>> LinkToSwitch(
    ns3::Ptr<ns3::Node> a, ns3::Ptr<ns3::Node> b, uint64_t rate_bps, uint64_t delay_ns, const uint8_t* mac_a,
    bool a_is_switch);

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_NODES_H_
