#include "drivers/ethdev/port.h"

#include <time.h>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_format.h"

namespace droce::ethdev {

namespace {
// Data room: room for a 9000-byte jumbo frame (net_af_packet refuses a
// receive ring whose frames exceed the mbuf; memif's bsize is 10240) plus
// DPDK's headroom. droce's own frames never exceed pktio::kMaxFrameBytes.
constexpr uint16_t kDataRoom = 10240 + RTE_PKTMBUF_HEADROOM;
}  // namespace

absl::StatusOr<std::unique_ptr<EthdevPort>> EthdevPort::Open(const PortConfig& c) {
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(c.name.c_str(), &port) != 0) {
    return absl::NotFoundError(absl::StrFormat("no DPDK port named %s (is its --vdev given?)", c.name));
  }
  const std::string pool_name = "droce_pool_" + std::to_string(port);
  rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), c.mbufs, 256, 0, kDataRoom,
                                              rte_eth_dev_socket_id(port));
  if (pool == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat("mbuf pool for %s: %s", c.name, rte_strerror(rte_errno)));
  }
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, c.rx_ring, rte_eth_dev_socket_id(port), nullptr, pool);
  if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, c.tx_ring, rte_eth_dev_socket_id(port), nullptr);
  bool start_failed = false;
  if (rc == 0) {
    rc = rte_eth_dev_start(port);
    // A memif client whose server is not listening yet fails to start; its
    // owner restarts it later (Reconnect) instead of giving up.
    if (rc != 0 && c.start_may_fail) rc = 0, start_failed = true;
  }
  if (rc != 0) {
    rte_mempool_free(pool);
    return absl::UnavailableError(absl::StrFormat("setting up port %s: %s", c.name, rte_strerror(-rc)));
  }
  rte_eth_promiscuous_enable(port);
  auto opened = std::unique_ptr<EthdevPort>(new EthdevPort(port, pool));
  opened->start_failed_ = start_failed;
  return opened;
}

EthdevPort::~EthdevPort() {
  Stop();
  rte_mempool_free(pool_);
}

void EthdevPort::Stop(bool close) {
  if (!started_) return;
  started_ = false;
  rte_eth_dev_stop(port_);
  if (close) rte_eth_dev_close(port_);
}

bool EthdevPort::Reconnect() {
  if (!started_) return false;
  link_up_ = false;
  rte_eth_dev_stop(port_);
  start_failed_ = rte_eth_dev_start(port_) != 0;
  return !start_failed_;
}

bool EthdevPort::LinkUp() const {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

bool EthdevPort::WaitLinkUp(int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (RefreshLink()) return true;
    const timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

uint16_t EthdevPort::RxBurst(pktio::Frame* frames, uint16_t n) {
  if (!started_ || !link_up_) return 0;
  rte_mbuf* mbufs[64];
  if (n > 64) n = 64;
  const uint16_t got = rte_eth_rx_burst(port_, 0, mbufs, n);
  uint16_t out = 0;
  for (uint16_t i = 0; i < got; ++i) {
    rte_mbuf* m = mbufs[i];
    if (m->nb_segs != 1) {
      ++stats_.rx_multi_segment;
      rte_pktmbuf_free(m);
      continue;
    }
    frames[out++] = {rte_pktmbuf_mtod(m, uint8_t*), m->data_len, static_cast<uint32_t>(m->buf_len - m->data_off), m};
    stats_.rx_bytes += m->data_len;
  }
  stats_.rx_packets += out;
  return out;
}

uint16_t EthdevPort::AllocTx(pktio::Frame* frames, uint16_t n) {
  rte_mbuf* mbufs[64];
  if (n > 64) n = 64;
  if (rte_pktmbuf_alloc_bulk(pool_, mbufs, n) != 0) {
    ++stats_.alloc_failures;
    return 0;
  }
  for (uint16_t i = 0; i < n; ++i) {
    frames[i] = {rte_pktmbuf_mtod(mbufs[i], uint8_t*), 0, rte_pktmbuf_tailroom(mbufs[i]), mbufs[i]};
  }
  return n;
}

uint16_t EthdevPort::TxBurst(pktio::Frame* frames, uint16_t n) {
  rte_mbuf* mbufs[64];
  if (n > 64) n = 64;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(frames[i].handle);
    m->data_len = static_cast<uint16_t>(frames[i].len);
    m->pkt_len = frames[i].len;
    mbufs[i] = m;
    stats_.tx_bytes += frames[i].len;
  }
  const uint16_t sent = started_ && link_up_ ? rte_eth_tx_burst(port_, 0, mbufs, n) : 0;
  stats_.tx_packets += sent;
  stats_.tx_full += n - sent;
  return sent;
}

void EthdevPort::Release(pktio::Frame* frames, uint16_t n) {
  rte_mbuf* mbufs[64];
  for (uint16_t done = 0; done < n;) {
    const uint16_t k = static_cast<uint16_t>(n - done > 64 ? 64 : n - done);
    for (uint16_t i = 0; i < k; ++i) mbufs[i] = static_cast<rte_mbuf*>(frames[done + i].handle);
    rte_pktmbuf_free_bulk(mbufs, k);
    done += k;
  }
}

}  // namespace droce::ethdev
