// A host interface bound to a droce device (doc/netdev.md): droced's port
// on it, which receives only RoCEv2 frames for the interface's addresses and
// sends the device's frames out of it, while the kernel keeps its IP stack on
// the interface. Owned by droced, the host's "kernel part".
//
// Steering:
//  - udp (chosen explicitly): no port of droced's carries the device's
//    data. Each process of the device gets a UDP socket of its own from
//    droced (OpenProcessSocket), and droce's TC program (droce_tc.bpf.c)
//    steers each RoCEv2 packet for the interface's addresses to the socket
//    of the process that owns its destination QP; droced's own socket at
//    4791 takes QP 1 and QPNs nobody owns, and is the switch's port on the
//    interface (udp_port.h).
//  - XDP (auto's choice where the TC program cannot attach): DPDK's
//    net_af_xdp opens an AF_XDP socket on every RX queue in use and attaches
//    droce's XDP program (droce_xdp.bpf.c) from its object file; the program
//    redirects RoCEv2 for our addresses into its queue's socket and passes
//    everything else. droced keeps the program's address map equal to the
//    interface's addresses.
//  - af_packet (where XDP is not available): DPDK's net_af_packet, with a
//    classic BPF filter on its packet socket so only RoCEv2 for our addresses
//    is copied into its ring. The kernel still sees those frames too.
// XDP and af_packet: a UDP socket bound to port 4791 on the interface (its
// receive filter drops everything) holds the port, as Linux rxe's tunnel socket does:
// the kernel never answers a RoCEv2 frame with ICMP port unreachable, and no
// other RoCE stack takes the port on the same interface. An abstract socket
// named after the interface index is the binding's lock: one binding per
// interface and network namespace (a second droced is refused, a dead one's
// lock goes with it).
#ifndef DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_
#define DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "drivers/netdev/tc.h"
#include "drivers/netdev/udp_port.h"
#include "drivers/netdev/xdp.h"

struct rte_mempool;

namespace droce::netdev {

// The XDP program's socket map holds this many RX queues (droce_xdp.bpf.c).
constexpr uint32_t kMaxXdpQueues = 64;
// The UMEM memory an AF_XDP socket of the XDP steering takes from droced's
// DPDK memory, per RX queue.
uint64_t XdpUmemBytesPerQueue();

enum class Steering : uint8_t { kAuto, kXdp, kAfPacket, kUdp };
const char* SteeringName(Steering s);
bool ParseSteering(const std::string& s, Steering* out);

struct InterfaceConfig {
  std::string device;  // the droce device (names the DPDK port)
  std::string ifname;
  int ifindex = 0;
  Steering steering = Steering::kAuto;  // auto: udp, else XDP, else af_packet
  uint16_t ring = 1024;
  std::array<uint8_t, 6> mac{};  // the interface's (udp: the frames droced's socket receives are rebuilt for it)
};

// A process's socket (steering udp): its descriptor for the process and
// the UDP port it is bound to.
struct ProcessSocket {
  int fd = -1;
  uint16_t port = 0;
};

class InterfacePort {
 public:
  // Binds the interface: the lock, the UDP 4791 guard, the port (started)
  // with its steering for `addrs`. On failure nothing is left behind.
  static absl::StatusOr<std::unique_ptr<InterfacePort>> Open(const InterfaceConfig& c,
                                                             const std::vector<Gid>& addrs);
  ~InterfacePort();
  InterfacePort(const InterfacePort&) = delete;
  InterfacePort& operator=(const InterfacePort&) = delete;

  uint16_t port_id() const { return port_; }
  Steering steering() const { return steering_; }
  // The interface's addresses changed: the steering follows them.
  absl::Status SetAddresses(const std::vector<Gid>& addrs);
  // The multicast groups the device's processes joined: the interface is a
  // member of each (droced's socket at 4791 joins it, so the kernel sends
  // IGMP/MLD reports and the interface accepts the group's MAC), and the
  // steering takes the group's RoCEv2 frames as it takes the addresses'.
  absl::Status SetGroups(const std::vector<Gid>& groups);
  void SetMac(const std::array<uint8_t, 6>& mac);
  // steering udp: a new socket for the process that owns QPNs [slot * 1024,
  // slot * 1024 + 1024), and the steering of those QPNs to it. The returned
  // descriptor is the caller's to send and close; the port keeps a
  // duplicate until CloseProcessSocket (after the steering went), so the
  // socket's UDP port is never free while packets may still be steered to
  // it. A slot that had one gets a new one.
  absl::StatusOr<ProcessSocket> OpenProcessSocket(uint32_t slot);
  void CloseProcessSocket(uint32_t slot);
  // XDP steering: a DPDK port per RX queue of the interface (an AF_XDP
  // socket each, bound to that queue; port_id() is queue 0's), else empty.
  const std::vector<uint16_t>& queue_ports() const { return queue_ports_; }
  // XDP steering: the frames each RX queue's socket received.
  std::vector<uint64_t> QueueRxFrames() const;
  // The largest frame the port receives whole.
  uint32_t max_frame_bytes() const { return max_frame_; }
  XdpStats xdp_stats() const { return xdp_ ? xdp_->ReadStats() : XdpStats{}; }
  // steering udp: the TC program's counters and droced's socket's.
  TcStats tc_stats() const { return tc_ ? tc_->ReadStats() : TcStats{}; }
  udp::UdpCounters udp_counters() const { return udp_ ? udp_->counters() : udp::UdpCounters{}; }
  // e.g. "XDP native + AF_XDP on veth0", "af_packet + BPF filter on veth0"
  std::string Describe() const;
  // Why the UDP sockets and XDP were not used (auto steering that fell
  // back: udp, then xdp, then af_packet), else empty.
  const std::string& udp_refused() const { return udp_refused_; }
  const std::string& xdp_refused() const { return xdp_refused_; }

 private:
  InterfacePort() = default;
  absl::Status OpenXdp(const InterfaceConfig& c, const std::vector<Gid>& addrs);
  // XDP: the port of RX queue `queue`, with its AF_XDP socket, the program
  // attached (replacing the previous queue's).
  absl::StatusOr<uint16_t> StartXdpQueue(const InterfaceConfig& c, const std::string& object, uint32_t queue);
  absl::Status OpenAfPacket(const InterfaceConfig& c, const std::vector<Gid>& addrs);
  absl::Status OpenUdp(const InterfaceConfig& c, const std::vector<Gid>& addrs);
  void ClosePort();
  absl::Status ApplySteering();
  // The socket whose group memberships are the interface's: droced's at 4791.
  int membership_fd() const;

  std::string ifname_;
  int ifindex_ = 0;
  int lock_fd_ = -1;
  int guard_fd_ = -1;
  int port_ = -1;
  std::vector<uint16_t> queue_ports_;     // XDP steering: RX queue q's port
  std::vector<std::string> vdev_names_;   // the ports' DPDK devices
  std::vector<rte_mempool*> pools_;       // XDP: RX queue q's UMEM; af_packet: its one pool
  Steering steering_ = Steering::kXdp;
  std::unique_ptr<XdpProgram> xdp_;
  int packet_fd_ = -1;  // af_packet: the PMD's socket (not ours to close)
  // net_af_xdp's AF_XDP sockets, by descriptor and inode: DPDK 22.11's
  // close never releases the UMEM (its reference count is tested one too
  // low), whose descriptor is the socket's, so the queue stays bound and the
  // next binding of the interface fails with EBUSY. ClosePort closes them.
  std::vector<std::pair<int, uint64_t>> xsk_fds_;
  uint32_t max_frame_ = 0;
  std::string udp_refused_;
  std::string xdp_refused_;
  // steering udp:
  std::unique_ptr<TcProgram> tc_;
  std::unique_ptr<UdpSocketPort> udp_;
  std::vector<std::pair<uint32_t, int>> process_sockets_;  // slot -> droced's duplicate
  std::string device_;
  std::vector<Gid> addrs_;   // the interface's addresses the steering takes
  std::vector<Gid> groups_;  // the groups joined and steered
};

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_
