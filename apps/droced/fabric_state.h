// droced's state without DPDK: the fabric devices of the run directory, the
// attached processes (one memif port each) and their QPN ranges, the control
// protocol's request handling, and the switch's forwarding rules. The DPDK
// side (droced.cc) supplies ports through PortBackend and moves the frames;
// everything here is testable in memory (fabric_state_test.cc).
#ifndef DROCE_APPS_DROCED_FABRIC_STATE_H_
#define DROCE_APPS_DROCED_FABRIC_STATE_H_

#include <sys/types.h>

#include <bitset>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/status/statusor.h"
#include "apps/droced/switch_knobs.h"
#include "core/device.h"
#include "drivers/verbs/device_config.h"
#include "drivers/fabric/protocol.h"

namespace droce::droced {

inline constexpr uint32_t kMaxPorts = 256;  // attached processes, all devices together
inline constexpr uint32_t kSlots = fabric::kQpnSpace / fabric::kQpnsPerProcess;

// Creates and destroys a process's link to the switch (droced.cc): its
// shared-memory rings (`rings`, fabric::kLinkRings), or a memif server
// interface on the daemon's memif socket (fabric::kLinkMemif: rte_dev_probe).
// Returns an opaque handle, per kind.
class PortBackend {
 public:
  virtual ~PortBackend() = default;
  virtual absl::StatusOr<int> OpenPort(uint32_t memif_id, const std::string& secret, bool rings) = 0;
  virtual void ClosePort(int handle, bool rings) = 0;
};

struct PortCounters {
  uint64_t rx_packets = 0, rx_bytes = 0, tx_packets = 0, tx_bytes = 0;
  uint64_t tx_dropped = 0;  // the process's receive ring was full: dropped, as a switch port does
  // Receive bursts with frames, and those that came back full (the process's
  // transmit ring held more than a burst: a queue before the switch).
  uint64_t rx_bursts = 0, rx_bursts_full = 0;
};

struct DeviceCounters {
  uint64_t rx_no_owner = 0;   // RoCEv2 for a QPN no live process of the device owns
  uint64_t arp_replies = 0;   // answered by the daemon
  uint64_t nd_replies = 0;
  uint64_t rx_roce = 0;       // RoCEv2 frames steered to a process of the device
  uint64_t rx_gsi = 0;        // RoCEv2 frames for QP 1: to the daemon's CM (doc/cm.md)
  // netdev-bound devices (doc/netdev.md):
  uint64_t to_netdev = 0;       // frames of the device's processes out of its interface
  uint64_t netdev_dropped = 0;  // ... dropped instead: the interface is down or unbound
  uint64_t rx_not_roce = 0;     // frames from the interface that were not RoCEv2 unicast to us
};

struct FabricDevice {
  std::string name;
  core::Mac mac{};
  uint32_t ipv4 = 0;
  std::vector<core::Gid> gids;  // core::GidTable
  bool vlan = false;
  uint16_t vlan_tci = 0;
  std::vector<int16_t> slot_owner;  // QPN / kQpnsPerProcess -> port index, -1: none
  uint32_t next_slot = 1;           // ranges rotate: a freed one is reused last
  DeviceCounters counters;
  bool registered = true;           // still has a device file
  // A netdev-bound device (doc/netdev.md). Its MAC and GIDs come from the
  // kernel (SetNetdevState), not the file: gids then has 16 entries, those
  // whose bit in gid_valid is clear being holes (the zero GID).
  bool netdev_bound = false;
  std::string netdev;             // the interface
  std::string steering;           // the file's netdev_steering
  core::Mac file_mac{};           // the MAC the file says (the interface's at link add)
  int iface_port = -1;            // its port on the interface (ports_ index), -1: not bound
  std::string bind_error;         // why it is not bound
  std::string iface_describe;     // how it is bound (droced: "AF_XDP, XDP native on veth0")
  bool port_active = false;       // the interface is up with carrier
  uint32_t gid_valid = 0;
  uint8_t active_mtu = 3;         // IBV_MTU_1024
  uint32_t generation = 0;        // of the state processes were sent
  // Multicast groups its processes joined (kOpMcast): group -> member ports.
  std::map<core::Gid, std::vector<int>> groups;
  std::unique_ptr<SwitchKnobs> knobs = std::make_unique<SwitchKnobs>();  // its switch port's (egress)
};

inline constexpr uint32_t kUplinkDevice = UINT32_MAX;  // Port::device of the uplink

struct Port {
  bool in_use = false;
  bool uplink = false;  // the port to other hosts (another droced): device kUplinkDevice, no connection
  bool iface = false;   // a netdev-bound device's port on its interface: no connection
  // An interface's port whose steering has a DPDK port per RX queue (XDP on
  // several queues): those ports, handle being queue 0's; else empty.
  std::vector<uint16_t> queue_ports;
  uint16_t next_queue = 0;  // ... the queue its next receive starts at
  int conn_fd = -1;
  pid_t pid = 0;
  uint32_t device = 0;
  uint32_t slot = 0;
  uint32_t memif_id = 0;  // the attachment's id (never reused): its memif interface's, or its rings'
  bool rings = false;     // linked by shared-memory rings (fabric::kLinkRings), else by memif
  int handle = -1;        // PortBackend's
  std::string secret;     // memif only
  PortCounters counters;
  uint32_t peer_generation = 0;  // direct-path messages sent to this port (ethdev::PeerMessage)
};

// A direct path (doc/droced.md "Direct rings"): two attached ports whose
// processes exchange frames through rings of their own; the switch sees none
// of those frames. Ports are named by index and attachment id (an index is
// reused, an attachment id never).
struct DirectPath {
  uint64_t id = 0;
  uint64_t marker_key = 0;  // random, never 0: only the two processes learn it (fabric/path_marker.h)
  int port[2] = {-1, -1};
  uint32_t attachment_id[2] = {0, 0};  // the ports' memif_id: an attachment id, never reused
};

// What SyncDirectPaths decided: set up a path (tell both sides), or take one
// down (tell the sides in `notify`: a side that left is not told).
struct PathChange {
  bool add = false;
  DirectPath path;
  bool notify[2] = {false, false};
};

struct GlobalCounters {
  uint64_t rx_unknown_dst = 0;   // unicast to a MAC that is no fabric device (no uplink yet)
  uint64_t rx_no_route = 0;      // broadcast RoCEv2 to an IP that is no fabric device
  uint64_t rx_malformed = 0;     // too short, multi-segment, or a bad ARP/ND
  uint64_t flooded = 0;          // broadcast/multicast frames copied to other ports
  uint64_t to_uplink = 0;        // unicast for MACs (broadcast RoCEv2 for IPs) not on this segment
  uint64_t unmap_faults = 0;     // bursts a leaving process's memif teardown ended (ethdev/unmap_guard.h)
  // Frames with the path marker's opcode that are not the marker of a path
  // from the port they came from to the port they go to: dropped.
  uint64_t forged_markers = 0;
  uint64_t requests = 0, requests_rejected = 0;
};

// What the switch does with one frame that arrived on port `src`.
struct Decision {
  enum Kind : uint8_t {
    kDrop,
    kToPort,     // port
    kFlood,      // every port but src and interfaces (of device `device` if device >= 0, else all); and port if >= 0
    kReplyHere,  // the frame was rewritten in place (ARP/NA answer): send it back to src, new length len
    kToGsi,      // for QP 1 (GSI) of device `device`: the daemon's CM takes it
  } kind = kDrop;
  int port = -1;
  int device = -1;
  uint32_t len = 0;
};

// A kOpResolve request that passed its checks: droced asks the kernel.
struct ResolveQuery {
  uint32_t device = 0;
  core::Gid dgid{}, sgid{};
  uint32_t timeout_ms = 0;
};

class FabricState {
 public:
  FabricState(std::string run_dir, PortBackend* backend);

  // (Re)reads the run directory's fabric devices. New ones are added;
  // removed ones stay while processes are attached.
  void Rescan();

  // One control request (`n` bytes as received) on connection `fd` whose
  // peer is pid/uid (SO_PEERCRED). Never trusts a field it did not check.
  // A kOpResolve that passed its checks fills *resolve (if given) and
  // answers EINPROGRESS: the caller replies once the kernel answered.
  fabric::Reply Handle(int fd, const void* buf, ssize_t n, pid_t peer_pid, uid_t peer_uid, std::string* text,
                       ResolveQuery* resolve = nullptr);
  // The connection closed: its attachment (if any) goes.
  void ConnectionClosed(int fd);
  bool shutdown_requested() const { return shutdown_requested_; }
  // The uplink (droced's --uplink): a port that takes the frames for other
  // hosts; what arrives on it is switched like a process's frames but never
  // sent back to it. Returns its port index.
  int AddUplink(int handle, std::string describe);
  int uplink() const { return uplink_; }

  // netdev-bound devices (doc/netdev.md): the interface's port, added when
  // droced bound it, removed when it unbinds; the kernel's view of the
  // interface (MAC, GID table of 16 with its valid bits, carrier, path MTU).
  int AddInterfacePort(uint32_t device, int handle, const std::vector<uint16_t>& queue_ports = {});
  void RemoveInterfacePort(uint32_t device);
  // True if anything processes see changed (then send NetdevStateOf).
  bool SetNetdevState(uint32_t device, const core::Mac& mac, const std::vector<core::Gid>& gids, uint32_t valid,
                      bool active, uint8_t active_mtu);
  fabric::NetdevState NetdevStateOf(uint32_t device) const;
  // The multicast groups some process of the device is a member of.
  std::vector<core::Gid> GroupsOf(uint32_t device) const;
  static constexpr size_t kMaxGroupsPerDevice = 16;  // with 16 GIDs: what the af_packet filter holds
  FabricDevice& device(uint32_t i) { return devices_[i]; }

  // The forwarding rules. `frame` may be rewritten (replies).
  Decision Classify(int src, uint8_t* frame, uint32_t len, uint32_t capacity);

  std::string StatusText(const std::string& only_device) const;

  // Direct paths: two attached processes get one when the switch first
  // forwards a frame between them (NoteSwitched), unless a switch knob is
  // set on either's device (its frames must cross the switch) or direct
  // rings are off (droced --no-direct). Call SyncDirectPaths after anything
  // that changes ports or knobs, and when paths_asked(); it returns what to
  // do, in order (removals first).
  void set_direct_rings(bool on) { direct_rings_ = on; }
  bool direct_rings() const { return direct_rings_; }
  bool DirectAllowed(uint32_t device) const;
  // The switch forwarded a frame from port src to port dst. A bit test
  // once the pair has asked (the hot path's cost).
  void NoteSwitched(int src, int dst) {
    if (!asked_[static_cast<uint32_t>(src)].test(static_cast<uint32_t>(dst))) AskPath(src, dst);
  }
  bool paths_asked() const { return !asked_pairs_.empty(); }
  std::vector<PathChange> SyncDirectPaths();
  // Setting a path up failed (a side could not be told): forget it.
  void ForgetDirectPath(uint64_t id);
  const std::vector<DirectPath>& direct_paths() const { return paths_; }

  std::vector<Port>& ports() { return ports_; }
  // Indices of the ports in use, ascending: the loop walks these, not all
  // kMaxPorts slots (a scan of the 256 slots was most of the loop's own time).
  const std::vector<uint32_t>& active_ports() const { return active_ports_; }
  const std::vector<FabricDevice>& devices() const { return devices_; }
  SwitchKnobs& knobs(uint32_t device) { return *devices_[device].knobs; }
  GlobalCounters& counters() { return counters_; }
  std::string memif_socket() const { return fabric::MemifSocketPath(run_dir_); }
  // The device whose MAC a frame's destination is, or -1.
  int FindDeviceByMac(const uint8_t* mac) const;

 private:
  int FindDevice(const std::string& name) const;
  int FindDeviceByGid(const uint8_t* gid) const;
  Decision FromInterface(uint32_t device, const uint8_t* frame, uint32_t len, int64_t qpn);
  Decision SteerByQpn(int device, int64_t qpn);
  // A frame with the path marker's opcode from port src: forwarded only if it
  // is the marker of a path from src to the port its MAC and QPN steer to.
  Decision SteerMarker(int src, const uint8_t* frame, uint32_t len, int64_t qpn);
  fabric::Reply Attach(const fabric::Request& req, int fd, pid_t pid, std::string* message, int* error);
  void Detach(int port);
  bool AnswerArp(int dev, uint8_t* frame, uint32_t len, uint32_t capacity, uint32_t* out_len);
  bool AnswerNd(int dev_hint, uint8_t* frame, uint32_t len, uint32_t capacity, uint32_t* out_len);

  std::string run_dir_;
  PortBackend* backend_;
  std::vector<FabricDevice> devices_;
  std::vector<Port> ports_;  // kMaxPorts entries; index = port
  uint32_t next_memif_id_ = 1;  // 0: the daemon's own pinned interface
  uint64_t start_ns_;
  GlobalCounters counters_;
  bool shutdown_requested_ = false;
  int uplink_ = -1;
  std::vector<uint32_t> active_ports_;
  void RefreshActivePorts();
  std::string uplink_describe_;
  bool direct_rings_ = true;
  // A pair that asked for a path (or has one): bit dst of asked_[src] and
  // bit src of asked_[dst]; cleared when either port goes and when a path
  // is withdrawn from two ports that stay (a knob), so they may ask again.
  std::vector<std::bitset<kMaxPorts>> asked_ = std::vector<std::bitset<kMaxPorts>>(kMaxPorts);
  std::vector<DirectPath> asked_pairs_;  // asked since the last SyncDirectPaths
  void AskPath(int src, int dst);
  bool QualifiesForPath(int port) const;
  void ForgetAsked(int a, int b) {
    asked_[static_cast<uint32_t>(a)].reset(static_cast<uint32_t>(b));
    asked_[static_cast<uint32_t>(b)].reset(static_cast<uint32_t>(a));
  }
  void ForgetAskedBy(int port);
  std::vector<DirectPath> paths_;
  uint64_t next_path_id_ = 1;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_FABRIC_STATE_H_
