#include "drivers/netdev/udp_port.h"

#include <unistd.h>

#include <algorithm>

#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "absl/strings/str_cat.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "pktio/burst_io.h"

namespace droce::netdev {
namespace {

constexpr uint32_t kRingSlots = 1024;
constexpr uint32_t kMbufs = 2047;
// The largest frame droce builds, with room for the headers in front of a
// received payload.
constexpr uint16_t kDataRoom = static_cast<uint16_t>(pktio::kMaxFrameBytes + RTE_PKTMBUF_HEADROOM);

}  // namespace

absl::StatusOr<std::unique_ptr<UdpSocketPort>> UdpSocketPort::Open(const std::string& name, int fd,
                                                                   const std::array<uint8_t, 6>& mac) {
  std::unique_ptr<UdpSocketPort> p(new UdpSocketPort());
  p->fd_ = fd;
  p->mac_ = mac;
  const std::string pool = absl::StrCat("nd_udp_", name);
  p->pool_ = rte_pktmbuf_pool_create(pool.c_str(), kMbufs, 128, 0, kDataRoom, SOCKET_ID_ANY);
  if (p->pool_ == nullptr) return absl::ResourceExhaustedError(absl::StrCat("UDP port pool: ", rte_strerror(rte_errno)));
  p->rx_ring_ = rte_ring_create(absl::StrCat("nd_urx_", name).c_str(), kRingSlots, SOCKET_ID_ANY,
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
  p->tx_ring_ = rte_ring_create(absl::StrCat("nd_utx_", name).c_str(), kRingSlots, SOCKET_ID_ANY,
                                RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (p->rx_ring_ == nullptr || p->tx_ring_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("UDP port rings: ", rte_strerror(rte_errno)));
  }
  const int port = rte_eth_from_rings(name.c_str(), &p->rx_ring_, 1, &p->tx_ring_, 1, SOCKET_ID_ANY);
  if (port < 0) return absl::UnavailableError(absl::StrCat("UDP port: ", rte_strerror(rte_errno)));
  p->vdev_ = absl::StrCat("net_ring_", name);
  p->port_ = port;
  const uint16_t id = static_cast<uint16_t>(port);
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(id, 1, 1, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(id, 0, kRingSlots, SOCKET_ID_ANY, nullptr, p->pool_);
  if (rc == 0) rc = rte_eth_tx_queue_setup(id, 0, kRingSlots, SOCKET_ID_ANY, nullptr);
  if (rc == 0) rc = rte_eth_dev_start(id);
  if (rc != 0) return absl::UnavailableError(absl::StrCat("starting the UDP port: ", rte_strerror(-rc)));
  p->rx_cb_ = rte_eth_add_rx_callback(id, 0, &UdpSocketPort::OnRx, p.get());
  p->tx_cb_ = rte_eth_add_tx_callback(id, 0, &UdpSocketPort::OnTx, p.get());
  if (p->rx_cb_ == nullptr || p->tx_cb_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("UDP port callbacks: ", rte_strerror(rte_errno)));
  }
  ethdev::RegisterWakeupSocket(id, fd, "UDP socket");
  return p;
}

UdpSocketPort::~UdpSocketPort() {
  if (port_ >= 0) {
    const uint16_t id = static_cast<uint16_t>(port_);
    ethdev::UnregisterWakeupSocket(id);
    // Nothing bursts the port now (droced's loop removed it from the switch
    // first): the callbacks can go at once.
    if (rx_cb_ != nullptr) rte_eth_remove_rx_callback(id, 0, rx_cb_);
    if (tx_cb_ != nullptr) rte_eth_remove_tx_callback(id, 0, tx_cb_);
    rte_eth_dev_stop(id);
    rte_eth_dev_close(id);
    (void)ethdev::RemoveVdev(vdev_);
  }
  rte_mbuf* m = nullptr;
  for (rte_ring* r : {rx_ring_, tx_ring_}) {
    if (r == nullptr) continue;
    while (rte_ring_dequeue(r, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
    rte_ring_free(r);
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
  if (fd_ >= 0) close(fd_);
}

void UdpSocketPort::DrainSent() {
  rte_mbuf* sent[64];
  unsigned n;
  while ((n = rte_ring_dequeue_burst(tx_ring_, reinterpret_cast<void**>(sent), 64, nullptr)) > 0) {
    rte_pktmbuf_free_bulk(sent, n);
  }
}

uint16_t UdpSocketPort::OnRx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, uint16_t max, void* self) {
  auto* p = static_cast<UdpSocketPort*>(self);
  p->DrainSent();
  if (n >= max) return n;
  const uint16_t want = std::min<uint16_t>(static_cast<uint16_t>(max - n), udp::RecvBatch::kMax);
  rte_mbuf* m[udp::RecvBatch::kMax];
  if (rte_pktmbuf_alloc_bulk(p->pool_, m, want) != 0) return n;
  uint8_t* bufs[udp::RecvBatch::kMax];
  uint32_t caps[udp::RecvBatch::kMax];
  for (uint16_t i = 0; i < want; ++i) {
    bufs[i] = rte_pktmbuf_mtod(m[i], uint8_t*);
    caps[i] = rte_pktmbuf_tailroom(m[i]) - udp::kHeadroom;
  }
  udp::RecvBatch::Frame got[udp::RecvBatch::kMax];
  const int r = p->recv_.Receive(p->fd_, bufs, caps, want, p->mac_, got, &p->counters_);
  for (int i = 0; i < r; ++i) {
    if (got[i].data == nullptr) {
      rte_pktmbuf_free(m[i]);
      continue;
    }
    m[i]->data_off = static_cast<uint16_t>(got[i].data - static_cast<uint8_t*>(m[i]->buf_addr));
    m[i]->data_len = static_cast<uint16_t>(got[i].len);
    m[i]->pkt_len = got[i].len;
    pkts[n++] = m[i];
  }
  if (r < want) rte_pktmbuf_free_bulk(m + r, static_cast<unsigned>(want - r));
  return n;
}

// Sends the burst, then lets the PMD queue it on the TX ring (drained by the
// next callback): the caller's count of what the port took stays right.
// What the socket cannot send (no datagram, or its buffer full) is dropped
// and counted, as a NIC's full queue drops.
uint16_t UdpSocketPort::OnTx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, void* self) {
  auto* p = static_cast<UdpSocketPort*>(self);
  p->DrainSent();
  const auto flush = [p] {
    const int queued = p->send_.size();
    p->counters_.tx_dropped += static_cast<uint64_t>(queued - p->send_.Send(p->fd_, &p->counters_));
  };
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    if (m->nb_segs != 1 || !p->send_.Add(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, udp::kRoceV2Port, &p->counters_)) {
      ++p->counters_.tx_dropped;
    }
    if (p->send_.full()) flush();
  }
  if (p->send_.size() > 0) flush();
  return n;
}

}  // namespace droce::netdev
