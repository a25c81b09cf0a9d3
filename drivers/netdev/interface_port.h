// A host interface bound to a droce device (doc/netdev.md): droced's port
// on it, which receives only RoCEv2 frames for the interface's addresses and
// sends the device's frames out of it, while the kernel keeps its IP stack on
// the interface. Owned by droced, the host's "kernel part".
//
// Steering:
//  - XDP (the default): DPDK's net_af_xdp opens an AF_XDP socket on queue 0
//    and attaches droce's XDP program (droce_xdp.bpf.c) from its object
//    file; the program redirects RoCEv2 for our addresses into the socket
//    and passes everything else. droced keeps the program's address map equal
//    to the interface's addresses.
//  - af_packet (where XDP is not available): DPDK's net_af_packet, with a
//    classic BPF filter on its packet socket so only RoCEv2 for our addresses
//    is copied into its ring. The kernel still sees those frames too.
// Either way a UDP socket bound to port 4791 on the interface (its receive
// filter drops everything) holds the port, as Linux rxe's tunnel socket does:
// the kernel never answers a RoCEv2 frame with ICMP port unreachable, and no
// other RoCE stack takes the port on the same interface. An abstract socket
// named after the interface index is the binding's lock: one binding per
// interface and network namespace (a second droced is refused, a dead one's
// lock goes with it).
#ifndef DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_
#define DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "drivers/netdev/xdp.h"

struct rte_mempool;

namespace droce::netdev {

enum class Steering : uint8_t { kAuto, kXdp, kAfPacket };
const char* SteeringName(Steering s);
bool ParseSteering(const std::string& s, Steering* out);

struct InterfaceConfig {
  std::string device;  // the droce device (names the DPDK port)
  std::string ifname;
  int ifindex = 0;
  Steering steering = Steering::kAuto;  // auto: XDP, else af_packet
  uint16_t ring = 1024;
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
  // The largest frame the port receives whole.
  uint32_t max_frame_bytes() const { return max_frame_; }
  XdpStats xdp_stats() const { return xdp_ ? xdp_->ReadStats() : XdpStats{}; }
  // e.g. "XDP native + AF_XDP on veth0", "af_packet + BPF filter on veth0"
  std::string Describe() const;
  // Why XDP was not used (auto steering that fell back), else empty.
  const std::string& xdp_refused() const { return xdp_refused_; }

 private:
  InterfacePort() = default;
  absl::Status OpenXdp(const InterfaceConfig& c, const std::vector<Gid>& addrs);
  absl::Status OpenAfPacket(const InterfaceConfig& c, const std::vector<Gid>& addrs);
  void ClosePort();

  std::string ifname_;
  int ifindex_ = 0;
  int lock_fd_ = -1;
  int guard_fd_ = -1;
  int port_ = -1;
  std::string vdev_name_;
  rte_mempool* pool_ = nullptr;
  Steering steering_ = Steering::kXdp;
  std::unique_ptr<XdpProgram> xdp_;
  int packet_fd_ = -1;  // af_packet: the PMD's socket (not ours to close)
  // net_af_xdp's AF_XDP sockets, by descriptor and inode: DPDK 22.11's
  // close never releases the UMEM (its reference count is tested one too
  // low), whose descriptor is the socket's, so the queue stays bound and the
  // next binding of the interface fails with EBUSY. ClosePort closes them.
  std::vector<std::pair<int, uint64_t>> xsk_fds_;
  uint32_t max_frame_ = 0;
  std::string xdp_refused_;
};

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_INTERFACE_PORT_H_
