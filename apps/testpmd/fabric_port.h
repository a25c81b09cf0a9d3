// droce-testpmd on a device of the host fabric (doc/testpmd.md "On the
// fabric"): the process attaches to the run directory's droced as a verbs
// program does (fabric::Attach, drivers/fabric/protocol.h, which the verbs
// runtime uses too), and gets a memif interface on the daemon's socket,
// the device's MAC and GIDs, and a QPN range. droce-testpmd asks for a
// given range (`--qpn-range K`: QPNs K*1024 up) because its two ends derive
// each other's QPNs without an exchange.
//
// FabricIo is the port as the session sees it: the direct rings to the
// other processes of the fabric in front of the memif port
// (ethdev::DirectIo), and the daemon's unasked messages (paths added and
// withdrawn) read from the control socket once every 1024 receive bursts
// (one non-blocking recvmsg: no system call per frame).
#ifndef DROCE_APPS_TESTPMD_FABRIC_PORT_H_
#define DROCE_APPS_TESTPMD_FABRIC_PORT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "drivers/ethdev/direct_io.h"
#include "pktio/burst_io.h"

namespace droce::testpmd {

struct FabricAttachment {
  int fd = -1;            // the attachment lives as long as this socket
  std::string vdev;       // the memif client vdev to probe
  std::string port_name;  // its ethdev name
  core::Mac mac{};
  std::vector<core::Gid> gids;  // the device's GIDs (0: link-local, then IPv4, IPv6)
  uint32_t qpn_base = 0, qpn_count = 0;
};

// Attaches this process to device `device` of the droced of `run_dir`,
// asking for QPN range `range` (QPNs range * 1024 up; 1..16383). Errors say
// what to do (daemon not running, not a fabric device, range taken).
absl::StatusOr<FabricAttachment> AttachToFabric(const std::string& run_dir, const std::string& device,
                                                uint32_t range);

class FabricIo final : public pktio::BurstIo {
 public:
  // `port`: the memif port to the daemon; `fd`: the attachment's socket
  // (not owned).
  FabricIo(pktio::BurstIo* port, int fd, const core::Mac& mac, uint32_t qpn_first, uint32_t qpn_count)
      : direct_(port, mac, qpn_first, qpn_count), fd_(fd) {}

  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override {
    if ((++rounds_ & 1023) == 1) ReadMessages();
    return direct_.RxBurst(frames, n);
  }
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override { return direct_.AllocTx(frames, n); }
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override { return direct_.TxBurst(frames, n); }
  void Release(pktio::Frame* frames, uint16_t n) override { direct_.Release(frames, n); }

  // Applies what droced sent (ethdev::PeerMessage); false once the daemon
  // closed the connection.
  bool ReadMessages();
  bool daemon_gone() const { return gone_; }
  size_t paths() const { return direct_.paths(); }
  const ethdev::DirectCounters& counters() const { return direct_.counters(); }

 private:
  ethdev::DirectIo direct_;
  int fd_;
  uint64_t rounds_ = 0;
  bool gone_ = false;
};

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_FABRIC_PORT_H_
