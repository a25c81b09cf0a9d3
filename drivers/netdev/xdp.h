// The steering of a netdev-bound device's frames (doc/netdev.md): droce's
// XDP program on the interface (droce_xdp.bpf.c) and, where XDP is not
// available, a classic BPF filter on a packet socket. Both take only RoCEv2
// (UDP 4791) frames addressed to the interface's own addresses; the kernel
// keeps everything else.
#ifndef DROCE_DRIVERS_NETDEV_XDP_H_
#define DROCE_DRIVERS_NETDEV_XDP_H_

#include <linux/filter.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wire/gid.h"

namespace droce::netdev {

using Gid = wire::Gid;

// The name the kernel gives droce's XDP program (its function's name).
inline constexpr char kXdpProgramName[] = "droce_xdp";

// droce_xdp.bpf.c's droce_stats indices.
struct XdpStats {
  uint64_t redirected = 0;  // RoCEv2 for us, into the AF_XDP socket
  uint64_t no_socket = 0;   // ... on a queue without a socket: dropped
  uint64_t passed = 0;      // everything else: to the kernel
};

// droce's XDP program as the kernel runs it on an interface (DPDK's
// net_af_xdp attached it from the object file; we reach its maps by id).
class XdpProgram {
 public:
  // The program attached to ifindex; NotFound if none, FailedPrecondition
  // if it is another program (not droce's).
  static absl::StatusOr<std::unique_ptr<XdpProgram>> Attached(int ifindex);
  ~XdpProgram();
  XdpProgram(const XdpProgram&) = delete;
  XdpProgram& operator=(const XdpProgram&) = delete;

  // The addresses whose RoCEv2 frames are redirected: exactly these.
  absl::Status SetAddresses(const std::vector<Gid>& addrs);
  XdpStats ReadStats() const;
  // Frames for us on RX queue `queue` go to the AF_XDP socket xsk_fd
  // (bound to that queue of the interface).
  absl::Status SetQueueSocket(uint32_t queue, int xsk_fd);
  // "native" (in the driver), "generic" (on the kernel's skb path) or "offload".
  const std::string& mode() const { return mode_; }
  uint32_t prog_id() const { return prog_id_; }

 private:
  XdpProgram() = default;
  int addrs_fd_ = -1;
  int stats_fd_ = -1;
  int xsks_fd_ = -1;
  std::vector<Gid> addrs_;
  std::string mode_;
  uint32_t prog_id_ = 0;
};

// A droce XDP program left on ifindex by a droced that died (the caller holds
// the interface's binding lock, so no live droced owns it): detached. True if
// there was one; another program on the interface is left alone.
absl::StatusOr<bool> DetachStaleProgram(int ifindex);

// The object file of droce's XDP program: $DROCED_XDP_PROG, else the build
// tree's (for a droced run from it), else the installed one. Empty if none
// exists.
std::string XdpObjectPath();
// The same search for any of droce's BPF objects (`file` in the build
// tree's drivers/netdev, fabric::BuildTreeRoot, or the installed directory,
// <libdir>/droce).
std::string BpfObjectPath(const char* env_var, const std::string& file);

// Makes a BPF hash map of GIDs (droce_addrs of the XDP and TC programs) hold
// exactly `addrs`, adding before removing: an address in both sets is never
// missing.
absl::Status SyncAddressMap(int fd, const std::vector<Gid>& addrs);

// Adds entry k (k < n) of a BPF per-CPU array of counters, summed over the
// CPUs, to *fields[k] (the programs' stats maps). Nothing if fd < 0.
void SumPerCpuCounters(int fd, uint64_t* const* fields, uint32_t n);

// The classic BPF filter of the packet-socket fallback: accepts frames to the
// host (PACKET_HOST: not outgoing or broadcast) or to a group the interface joined
// (PACKET_MULTICAST) that are IPv4 (not
// a fragment) or IPv6 (UDP right after the fixed header), UDP to port 4791,
// to one of `addrs`; drops everything else. At most kMaxFilterAddrs
// addresses (more are left out: InvalidArgument).
inline constexpr size_t kMaxFilterAddrs = 32;
absl::StatusOr<std::vector<sock_filter>> RoceFilter(const std::vector<Gid>& addrs);
// Attaches it to a packet socket (replacing the one it had, atomically).
absl::Status AttachFilter(int fd, const std::vector<sock_filter>& filter);

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_XDP_H_
