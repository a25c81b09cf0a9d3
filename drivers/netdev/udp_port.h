// droced's port on an interface whose device steers to its processes' own
// UDP sockets (`steering udp`, doc/netdev.md): a DPDK port like the others
// of droced's switch, whose frames are datagrams of droced's socket at UDP
// 4791 on the interface. That socket receives what droce's TC program left
// at 4791 (QP 1 for the CM, QPNs nobody owns) and sends what the switch
// puts out of the interface (the CM's MADs).
//
// The port is DPDK's ring PMD (net_ring) with an RX and a TX callback on its
// queue: the RX callback appends the datagrams recvmmsg finds to the burst
// (headers rebuilt, drivers/udp/roce_udp.h), the TX callback sends the burst
// with sendmmsg before the PMD queues it on its TX ring, which the callbacks
// drain (those frames are sent: their mbufs are freed). The socket wakes
// droced's loop (ethdev::RegisterWakeupSocket). One thread (droced's loop)
// bursts the port.
#ifndef DROCE_DRIVERS_NETDEV_UDP_PORT_H_
#define DROCE_DRIVERS_NETDEV_UDP_PORT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "drivers/udp/roce_udp.h"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;
struct rte_eth_rxtx_callback;

namespace droce::netdev {

class UdpSocketPort {
 public:
  // `fd`: droced's socket at 4791 (taken). `mac`: the device's (the
  // interface's), the destination of the frames it rebuilds.
  static absl::StatusOr<std::unique_ptr<UdpSocketPort>> Open(const std::string& name, int fd,
                                                            const std::array<uint8_t, 6>& mac);
  ~UdpSocketPort();
  UdpSocketPort(const UdpSocketPort&) = delete;
  UdpSocketPort& operator=(const UdpSocketPort&) = delete;

  uint16_t port_id() const { return port_; }
  void SetMac(const std::array<uint8_t, 6>& mac) { mac_ = mac; }
  const udp::UdpCounters& counters() const { return counters_; }
  int fd() const { return fd_; }

 private:
  UdpSocketPort() = default;
  static uint16_t OnRx(uint16_t port, uint16_t queue, rte_mbuf** pkts, uint16_t n, uint16_t max, void* self);
  static uint16_t OnTx(uint16_t port, uint16_t queue, rte_mbuf** pkts, uint16_t n, void* self);
  void DrainSent();

  std::string vdev_;
  int port_ = -1;
  int fd_ = -1;
  std::array<uint8_t, 6> mac_{};
  rte_mempool* pool_ = nullptr;
  rte_ring* rx_ring_ = nullptr;
  rte_ring* tx_ring_ = nullptr;
  const rte_eth_rxtx_callback* rx_cb_ = nullptr;
  const rte_eth_rxtx_callback* tx_cb_ = nullptr;
  udp::RecvBatch recv_;
  udp::SendBatch send_;
  udp::UdpCounters counters_;
};

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_UDP_PORT_H_
