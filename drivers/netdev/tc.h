// droce's TC ingress program on an interface whose device steers to its
// processes' own UDP sockets (droce_tc.bpf.c, doc/netdev.md "UDP sockets"):
// loaded from its object file and attached as a tcx link (Linux 6.6+), which
// the kernel detaches when droced's descriptor closes, a dead droced's
// included: no stale steering outlives its daemon.
#ifndef DROCE_DRIVERS_NETDEV_TC_H_
#define DROCE_DRIVERS_NETDEV_TC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wire/gid.h"

namespace droce::netdev {

// droce_tc.bpf.c's droce_tc_stats indices.
struct TcStats {
  uint64_t steered = 0;    // to a process's socket
  uint64_t to_daemon = 0;  // RoCEv2 for us left at 4791 (QP 1, no owner)
  uint64_t marked = 0;     // IPv4 identification/flags carried in the mark
};

class TcProgram {
 public:
  // Loads the program and attaches it to ifindex's ingress.
  static absl::StatusOr<std::unique_ptr<TcProgram>> Attach(int ifindex);
  ~TcProgram();  // detaches
  TcProgram(const TcProgram&) = delete;
  TcProgram& operator=(const TcProgram&) = delete;

  // The addresses whose RoCEv2 packets are steered: exactly these.
  absl::Status SetAddresses(const std::vector<wire::Gid>& addrs);
  // QPNs [slot * 1024, slot * 1024 + 1024) go to UDP port `port` (0: to
  // droced's socket at 4791).
  absl::Status SetPort(uint32_t slot, uint16_t port);
  TcStats ReadStats() const;

 private:
  TcProgram() = default;
  void* object_ = nullptr;  // bpf_object
  int link_fd_ = -1;
  int addrs_fd_ = -1, ports_fd_ = -1, stats_fd_ = -1;
};

// Where droce_tc.o is: $DROCED_TC_PROG, else the build tree's (droced run
// from it), else the installed one. Empty if none exists.
std::string TcObjectPath();

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_TC_H_
