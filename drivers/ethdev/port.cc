#include "drivers/ethdev/port.h"

#include <setjmp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_format.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/memif_listener.h"
#include "drivers/ethdev/memif_rx.h"
#include "drivers/ethdev/memif_tx.h"
#include "drivers/ethdev/unmap_guard.h"

namespace droce::ethdev {

namespace {
// Data room: room for a 9000-byte jumbo frame (net_af_packet refuses a
// receive ring whose frames exceed the mbuf; memif's bsize is 10240) plus
// DPDK's headroom. droce's own frames never exceed pktio::kMaxFrameBytes.
constexpr uint16_t kDataRoom = 10240 + RTE_PKTMBUF_HEADROOM;

}  // namespace

// net_af_xdp (DPDK 22.11 built with libxdp) registers its receive pool's
// memory as the AF_XDP UMEM, one chunk per mempool object, and the kernel
// takes no chunk larger than a page from memory not backed by huge pages:
// with kDataRoom the port fails to start ("xdp_umem_configure(): Failed to
// create umem", EINVAL). Its receive pool gets the largest data room whose
// object (header, mbuf, data room, padded by the mempool) fits one page.
uint16_t AfXdpDataRoom() {
  const uint32_t page = static_cast<uint32_t>(getpagesize());
  for (uint32_t room = page; room > RTE_PKTMBUF_HEADROOM + 1024; room -= RTE_CACHE_LINE_SIZE) {
    if (rte_mempool_calc_obj_size(sizeof(rte_mbuf) + room, 0, nullptr) <= page) return static_cast<uint16_t>(room);
  }
  return 0;
}

uint32_t AfXdpMaxFrame() {
  const uint16_t room = AfXdpDataRoom();
  return room > RTE_PKTMBUF_HEADROOM + kXdpPacketHeadroom ? room - RTE_PKTMBUF_HEADROOM - kXdpPacketHeadroom : 0;
}

absl::StatusOr<std::unique_ptr<EthdevPort>> EthdevPort::Open(const PortConfig& c) {
  uint16_t port;
  if (rte_eth_dev_get_port_by_name(c.name.c_str(), &port) != 0) {
    return absl::NotFoundError(absl::StrFormat("no DPDK port named %s (is its --vdev given?)", c.name));
  }
  const std::string pool_name = "droce_pool_" + std::to_string(port);
  rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), c.mbufs, c.mempool_cache, 0, kDataRoom,
                                              rte_eth_dev_socket_id(port));
  if (pool == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat("mbuf pool for %s: %s", c.name, rte_strerror(rte_errno)));
  }
  // net_af_xdp: page-sized receive buffers in a pool of their own; transmit
  // buffers stay in `pool` (capacity >= pktio::kMaxFrameBytes, as BurstIo
  // promises) and the PMD copies each into a UMEM chunk. The largest frame is
  // then what a chunk receives (the PMD's copy does not check the length).
  rte_mempool* rx_pool = nullptr;
  uint32_t max_frame = pktio::kMaxFrameBytes;
  rte_eth_dev_info info{};
  const char* driver = rte_eth_dev_info_get(port, &info) == 0 && info.driver_name ? info.driver_name : "";
  if (std::strcmp(driver, "net_af_xdp") == 0) {
    const uint16_t room = AfXdpDataRoom();
    const std::string rx_name = "droce_rxpool_" + std::to_string(port);
    rx_pool = room ? rte_pktmbuf_pool_create(rx_name.c_str(), c.mbufs, c.mempool_cache, 0, room,
                                             rte_eth_dev_socket_id(port))
                   : nullptr;
    if (rx_pool == nullptr) {
      rte_mempool_free(pool);
      return absl::ResourceExhaustedError(absl::StrFormat("receive pool for %s: %s", c.name, rte_strerror(rte_errno)));
    }
    max_frame = AfXdpMaxFrame();
  }
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc == 0) {
    rc = rte_eth_rx_queue_setup(port, 0, c.rx_ring, rte_eth_dev_socket_id(port), nullptr, rx_pool ? rx_pool : pool);
  }
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
    rte_mempool_free(rx_pool);
    return absl::UnavailableError(absl::StrFormat("setting up port %s: %s", c.name, rte_strerror(-rc)));
  }
  rte_eth_promiscuous_enable(port);
  // net_tap drops (counting an error) every frame longer than the port's MTU
  // + 22 bytes (Ethernet header, VLAN tag, CRC), and DPDK 22.11 refuses it
  // an MTU above 1500 (max_rx_pktlen 1522: "Frame size (4018) > device max
  // frame size (1522)", EINVAL). Its path MTU is 1024 at most.
  if (std::strcmp(driver, "net_tap") == 0) {
    uint16_t mtu = RTE_ETHER_MTU;
    rte_eth_dev_get_mtu(port, &mtu);
    max_frame = std::min<uint32_t>(max_frame, mtu + RTE_ETHER_HDR_LEN + RTE_VLAN_HLEN + RTE_ETHER_CRC_LEN);
  }
  auto opened = std::unique_ptr<EthdevPort>(new EthdevPort(port, pool, rx_pool));
  opened->start_failed_ = start_failed;
  opened->rx_ring_ = c.rx_ring;
  opened->guard_ = c.guard_peer_unmap && InstallUnmapGuard();
  opened->tx_ring_ = c.tx_ring;
  opened->listener_path_ = c.memif_listener_path;
  opened->max_frame_bytes_ = max_frame;
  if (c.memif_direct_tx && (opened->direct_ = MemifTx::For(port, nullptr)) != nullptr) {
    opened->tx_buffers_ = std::make_unique<pktio::FramePool>(c.direct_tx_buffers, pktio::kMaxFrameBytes);
    opened->want_direct_rx_ = c.memif_direct_rx;
    if (c.memif_direct_rx) opened->direct_rx_ = MemifRx::For(port, nullptr);
  }
  return opened;
}

EthdevPort::~EthdevPort() {
  Stop();
  rte_mempool_free(pool_);
  rte_mempool_free(rx_pool_);
}

void EthdevPort::Stop(bool close) {
  if (!started_) return;
  started_ = false;
  // On EAL's interrupt thread, in turn with memif's connection events
  // (eal.h): a peer's disconnect handled there while this thread closed
  // the port freed and used memif's control channel at once.
  // A memif server's listener, found before the close frees memif's record
  // of it (memif_listener.h), retired right after it on the same thread:
  // no listener callback can run in between.
  struct Job {
    uint16_t port;
    bool close;
    int listener;
    const std::string* listener_path;
  } job{port_, close, close ? FindUnixListener(listener_path_) : -1, &listener_path_};
  RunOnInterruptThread(
      [](void* p) {
        const auto* j = static_cast<const Job*>(p);
        rte_eth_dev_stop(j->port);
        if (!j->close) return;
        rte_eth_dev_close(j->port);
        RetireOrphanedUnixListener(j->listener, *j->listener_path);
      },
      &job);
}

absl::Status EthdevPort::Rebind(const std::string& name, bool start_may_fail) {
  uint16_t port;
  if (started_) return absl::FailedPreconditionError("rebinding a port that still runs");
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    return absl::NotFoundError(absl::StrFormat("no DPDK port named %s", name));
  }
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc == 0) {
    rc = rte_eth_rx_queue_setup(port, 0, rx_ring_, rte_eth_dev_socket_id(port), nullptr, rx_pool_ ? rx_pool_ : pool_);
  }
  if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, tx_ring_, rte_eth_dev_socket_id(port), nullptr);
  if (rc != 0) return absl::UnavailableError(absl::StrFormat("setting up port %s: %s", name, rte_strerror(-rc)));
  rc = rte_eth_dev_start(port);
  if (rc != 0 && !start_may_fail) {
    return absl::UnavailableError(absl::StrFormat("starting port %s: %s", name, rte_strerror(-rc)));
  }
  rte_eth_promiscuous_enable(port);
  if (tx_buffers_ != nullptr) {
    // Frames of the transmit pool may be out: only MemifTx can send them.
    std::string why_not;
    std::unique_ptr<MemifTx> direct = MemifTx::For(port, &why_not);
    if (direct == nullptr) {
      return absl::FailedPreconditionError(absl::StrFormat("port %s: no direct memif transmit: %s", name, why_not));
    }
    direct_ = std::move(direct);
    // Receiving goes back to the PMD if the new port has no MemifRx: the
    // pool's frames out are freed by owner either way.
    direct_rx_ = want_direct_rx_ ? MemifRx::For(port, nullptr) : nullptr;
  }
  port_ = port;
  started_ = true;
  start_failed_ = rc != 0;
  link_up_ = false;
  return absl::OkStatus();
}

bool EthdevPort::Reconnect() {
  if (!started_) return false;
  link_up_ = false;
  // On EAL's interrupt thread, like Stop: a memif peer's "device closed" (or
  // its socket's end) disconnects this port there, and the link reads down
  // as soon as that disconnect begins; a stop on this thread then ran a
  // second disconnect beside it and freed memif's regions twice.
  struct Job {
    uint16_t port;
    bool start_failed;
  } job{port_, false};
  RunOnInterruptThread(
      [](void* p) {
        auto* j = static_cast<Job*>(p);
        rte_eth_dev_stop(j->port);
        j->start_failed = rte_eth_dev_start(j->port) != 0;
      },
      &job);
  start_failed_ = job.start_failed;
  return !start_failed_;
}

bool EthdevPort::LinkUp() const {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

bool EthdevPort::WaitLinkUp(int timeout_ms) {
  // By the clock, not by counted sleeps: on a loaded host each 10-ms sleep
  // and link query can take far longer than asked.
  const auto now_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1'000'000;
  };
  const int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    if (RefreshLink()) return true;
    if (now_ms() >= deadline) return false;
    const timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
}

uint16_t EthdevPort::RxBurst(pktio::Frame* frames, uint16_t n) {
  if (!started_ || !link_up_) return 0;
  rte_mbuf* mbufs[64];
  if (n > 64) n = 64;
  if (direct_rx_ != nullptr) return DirectRxBurst(frames, n);
  bool faulted = false;
  const uint16_t got = guard_ ? GuardedRxBurst(port_, mbufs, n, &faulted) : rte_eth_rx_burst(port_, 0, mbufs, n);
  if (faulted) {
    link_up_ = false;
    ++stats_.unmap_faults;
  }
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
  if (tx_buffers_ != nullptr && direct_ != nullptr) {
    const uint16_t got = tx_buffers_->Alloc(frames, n);
    if (got == n) return n;  // else mbufs for the rest (TxBurst takes both)
    frames += got, n = static_cast<uint16_t>(n - got);
    if (rte_pktmbuf_alloc_bulk(pool_, mbufs, n) != 0) {
      ++stats_.alloc_failures;
      return got;
    }
    for (uint16_t i = 0; i < n; ++i) {
      frames[i] = {rte_pktmbuf_mtod(mbufs[i], uint8_t*), 0, rte_pktmbuf_tailroom(mbufs[i]), mbufs[i]};
    }
    return static_cast<uint16_t>(got + n);
  }
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
  if (direct_ != nullptr) return DirectTxBurst(frames, n);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = static_cast<rte_mbuf*>(frames[i].handle);
    m->data_len = static_cast<uint16_t>(frames[i].len);
    m->pkt_len = frames[i].len;
    mbufs[i] = m;
  }
  bool faulted = false;
  const uint16_t sent = !started_ || !link_up_ ? 0
                        : guard_             ? GuardedTxBurst(port_, mbufs, n, &faulted)
                                             : rte_eth_tx_burst(port_, 0, mbufs, n);
  if (faulted) {
    link_up_ = false;
    ++stats_.unmap_faults;
  }
  for (uint16_t i = 0; i < sent; ++i) stats_.tx_bytes += frames[i].len;  // not the refused ones
  stats_.tx_packets += sent;
  stats_.tx_full += n - sent;
  return sent;
}

// Copies a prefix into the memif ring (MemifTx) and frees what it took:
// buffers of the port's own pool back to it, mbufs (frames received and
// sent on, or from AllocTx when the pool ran dry) to their mempool.
uint16_t EthdevPort::DirectTxBurst(pktio::Frame* frames, uint16_t n) {
  uint16_t sent = 0;
  uint64_t bytes = 0;  // of the frames published (MemifTx::Send)
  const uint64_t bad_before = direct_->counters().bad_descriptors;
  if (started_ && link_up_) {
    if (guard_) {
      struct Call {
        MemifTx* tx;
        pktio::Frame* frames;
        uint16_t n;
        uint64_t* bytes;
      } call{direct_.get(), frames, n, &bytes};
      bool faulted = false;
      // A fault: the peer's regions went; the frames are lost as on a wire.
      sent = GuardedCall(
          port_, [](void* p) { auto* c = static_cast<Call*>(p); return c->tx->Send(c->frames, c->n, c->bytes); },
          &call, n, &faulted);
      if (faulted) {
        link_up_ = false;
        ++stats_.unmap_faults;
        bytes = 0;
        for (uint16_t i = 0; i < sent; ++i) bytes += frames[i].len;
      }
    } else {
      sent = direct_->Send(frames, n, &bytes);
    }
  }
  const uint64_t bad = direct_->counters().bad_descriptors - bad_before;
  if (bad != 0) stats_.tx_bad_descriptors += bad;
  stats_.tx_bytes += bytes;
  stats_.tx_packets += sent - bad;
  stats_.tx_direct += sent - bad;
  stats_.tx_full += n - sent;
  if (sent != 0) FreeFrames(frames, sent);
  return sent;
}

// Copies frames out of the memif ring into the pool's buffers (MemifRx),
// under the unmap guard in this frame (unmap_guard.h's EnterGuard).
uint16_t EthdevPort::DirectRxBurst(pktio::Frame* frames, uint16_t n) {
  const MemifRxCounters before = direct_rx_->counters();
  uint64_t bytes = 0;  // of the frames received (Receive adds them after its last touch of the ring)
  uint16_t got;
  if (guard_) {
    sigjmp_buf env;
    if (sigsetjmp(env, 0) == 0) {
      EnterGuard(port_, &env);
      got = direct_rx_->Receive(tx_buffers_.get(), frames, n, &bytes);
      LeaveGuard();
    } else {
      // A fault: the peer's regions went; what was in the ring is lost as
      // on a wire, the buffers the burst had taken go back to the pool.
      got = 0;
      bytes = 0;
      link_up_ = false;
      ++stats_.unmap_faults;
      tx_buffers_->Free(frames, direct_rx_->TakeInFlight());
    }
  } else {
    got = direct_rx_->Receive(tx_buffers_.get(), frames, n, &bytes);
  }
  const MemifRxCounters& after = direct_rx_->counters();
  if (after.bad_descriptors != before.bad_descriptors || after.too_long != before.too_long ||
      after.no_buffers != before.no_buffers) {
    stats_.rx_bad_descriptors += after.bad_descriptors - before.bad_descriptors;
    stats_.rx_too_long += after.too_long - before.too_long;
    stats_.rx_no_buffers += after.no_buffers - before.no_buffers;
  }
  stats_.rx_bytes += bytes;
  stats_.rx_packets += got;
  stats_.rx_direct += got;
  return got;
}

void EthdevPort::FreeFrames(const pktio::Frame* frames, uint16_t n) {
  rte_mbuf* mbufs[64];
  uint16_t k = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (tx_buffers_->Owns(frames[i].handle)) {
      tx_buffers_->FreeOwned(frames[i].handle);
      continue;
    }
    mbufs[k++] = static_cast<rte_mbuf*>(frames[i].handle);
    if (k == 64) rte_pktmbuf_free_bulk(mbufs, k), k = 0;
  }
  if (k > 0) rte_pktmbuf_free_bulk(mbufs, k);
}

void EthdevPort::Release(pktio::Frame* frames, uint16_t n) {
  if (tx_buffers_ != nullptr) return FreeFrames(frames, n);
  rte_mbuf* mbufs[64];
  for (uint16_t done = 0; done < n;) {
    const uint16_t k = static_cast<uint16_t>(n - done > 64 ? 64 : n - done);
    for (uint16_t i = 0; i < k; ++i) mbufs[i] = static_cast<rte_mbuf*>(frames[done + i].handle);
    rte_pktmbuf_free_bulk(mbufs, k);
    done += k;
  }
}

}  // namespace droce::ethdev
