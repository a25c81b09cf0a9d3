// One DPDK ethdev port (queue 0) as a droce BurstIo: mbufs stay in drivers/,
// lib/ sees only Frames (data, length, capacity, the mbuf as handle).
#ifndef DROCE_DRIVERS_ETHDEV_PORT_H_
#define DROCE_DRIVERS_ETHDEV_PORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "drivers/ethdev/memif_rx.h"
#include "drivers/ethdev/memif_tx.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "pktio/burst_io.h"
#include "pktio/frame_pool.h"

struct rte_mempool;
struct rte_mbuf;

namespace droce::ethdev {

struct PortConfig {
  std::string name;          // ethdev name, e.g. "net_memif0" (the vdev's name)
  uint32_t mbufs = 8191;     // pool size: rx + tx rings + frames in flight
  uint32_t mempool_cache = 256;  // mbufs each lcore keeps to itself (up to 1.5x this)
  uint16_t rx_ring = 1024;
  uint16_t tx_ring = 1024;
  bool start_may_fail = false;  // open anyway (link down) if starting fails
  // Bursts under ethdev/unmap_guard.h: a memif peer that vanishes mid-burst
  // ends the burst (link down) instead of the process.
  bool guard_peer_unmap = false;
  // A memif server's socket path (MemifListenerPath): its listener is
  // retired after the close that freed it (memif_listener.h).
  std::string memif_listener_path;
  // net_memif only (not zero-copy=yes): frames are built in plain buffers
  // of the port's own (`direct_tx_buffers`, pktio::FramePool) and copied
  // once, straight into the memif ring (MemifTx), instead of in mbufs the
  // PMD copies and frees. Ignored (the PMD transmits) where MemifTx's
  // layout checks fail.
  bool memif_direct_tx = false;
  // With memif_direct_tx (so that a received frame can be sent on): frames
  // are received by copying each once from the memif ring into a buffer of
  // the same pool (MemifRx) instead of into an mbuf by the PMD. Ignored
  // (the PMD receives) where MemifRx's layout checks fail.
  bool memif_direct_rx = false;
  uint32_t direct_tx_buffers = 1024;  // the pool, for both directions
};

struct PortStats {
  uint64_t rx_packets = 0, tx_packets = 0, rx_bytes = 0, tx_bytes = 0;
  uint64_t tx_full = 0;             // frames the PMD did not take
  uint64_t rx_multi_segment = 0;    // frames dropped: not one contiguous buffer
  uint64_t alloc_failures = 0;
  uint64_t unmap_faults = 0;        // bursts the peer's unmap ended (guard_peer_unmap)
  uint64_t tx_direct = 0;           // frames MemifTx copied into the ring (memif_direct_tx)
  uint64_t tx_bad_descriptors = 0;  // frames MemifTx dropped: the peer's descriptor out of its region
  uint64_t rx_direct = 0;           // frames MemifRx copied out of the ring (memif_direct_rx)
  uint64_t rx_bad_descriptors = 0;  // frames MemifRx dropped: a descriptor outside its region
  uint64_t rx_too_long = 0;         // frames MemifRx dropped: longer than the pool's buffers
  uint64_t rx_no_buffers = 0;       // MemifRx bursts cut short by an empty pool
};

// net_af_xdp (DPDK 22.11 built with libxdp) registers its receive pool's
// memory as the AF_XDP UMEM, one chunk per mempool object, and the kernel
// takes no chunk larger than a page from memory not backed by huge pages.
// The largest data room whose mempool object fits one page (0 if none), and
// the largest frame such a chunk receives: the kernel puts it
// kXdpPacketHeadroom (XDP_PACKET_HEADROOM) behind the chunk headroom the PMD
// asks for (mempool header, mbuf, RTE_PKTMBUF_HEADROOM).
inline constexpr uint32_t kXdpPacketHeadroom = 256;
uint16_t AfXdpDataRoom();
uint32_t AfXdpMaxFrame();

class EthdevPort final : public pktio::BurstIo {
 public:
  // EAL must be running. Configures and starts the port.
  static absl::StatusOr<std::unique_ptr<EthdevPort>> Open(const PortConfig& config);
  ~EthdevPort() override;

  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override;
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override;
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override;
  void Release(pktio::Frame* frames, uint16_t n) override;

  // Known empty by `probe`'s look at the RX ring (RxWakeup::KnownEmpty:
  // memif's ring indices; sockets cannot tell); null: never known empty.
  // The owner sets its current wake-up of this port, and clears it before
  // that wake-up goes or turns stale (a reconnection moved the ring).
  void set_rx_probe(RxWakeup* probe) { rx_probe_ = probe; }
  bool KnownEmpty() override { return rx_probe_ != nullptr && rx_probe_->KnownEmpty(); }

  bool LinkUp() const;
  // Re-reads the link state; RxBurst/TxBurst do nothing while it is down
  // (memif unmaps its rings when the peer leaves: polling then would crash).
  bool RefreshLink() { return link_up_ = LinkUp(); }
  // Stops and restarts the port, on EAL's interrupt thread (where memif's
  // own disconnects run). A memif client connects to its server only when
  // started, so one that started before the server listened stays down
  // until restarted.
  bool Reconnect();
  // The last start (Open's or Reconnect's) failed: a memif client whose
  // server was not listening. One that started waits for its handshake.
  bool start_failed() const { return start_failed_; }
  // Bursts do nothing until the next RefreshLink (the owner knows the peer
  // is gone before the PMD does, e.g. a fabric daemon's control socket).
  void MarkLinkDown() { link_up_ = false; }
  // The port's vdev was removed (Stop(false), then ethdev::RemoveVdev) and a
  // new one probed as `name`: this object drives it from now on, with the
  // same pools (frames the owner still holds stay valid) and rings. With
  // memif_direct_tx the new port must take MemifTx too (FailedPrecondition
  // otherwise: the pool's frames have no mbuf for the PMD).
  absl::Status Rebind(const std::string& name, bool start_may_fail);
  // Waits up to timeout_ms for the link (memif: the peer connected).
  bool WaitLinkUp(int timeout_ms);
  uint16_t port_id() const { return port_; }
  // Whether frames go straight into the memif ring (PortConfig::memif_direct_tx).
  bool direct_tx() const { return direct_ != nullptr; }
  // Whether frames are copied straight out of the memif ring (PortConfig::memif_direct_rx).
  bool direct_rx() const { return direct_rx_ != nullptr; }
  // The largest frame (Ethernet header to ICRC) the port carries both ways:
  // pktio::kMaxFrameBytes unless the PMD takes less (net_af_xdp: one 4 KiB
  // UMEM chunk per receive buffer; net_tap: 1522 bytes).
  uint32_t max_frame_bytes() const { return max_frame_bytes_; }
  const PortStats& stats() const { return stats_; }
  // MemifTx's eventfd writes: the peer slept armed on its ring (0 without memif_direct_tx).
  uint64_t tx_wakeups() const { return direct_ != nullptr ? direct_->counters().wakeups : 0; }
  // Stops the port and closes it; close=false leaves closing to whoever
  // removes the vdev (hot-unplug closes it; closing twice frees twice).
  void Stop(bool close = true);

 private:
  EthdevPort(uint16_t port, rte_mempool* pool, rte_mempool* rx_pool)
      : port_(port), pool_(pool), rx_pool_(rx_pool) {}
  uint16_t DirectTxBurst(pktio::Frame* frames, uint16_t n);
  uint16_t DirectRxBurst(pktio::Frame* frames, uint16_t n);
  void FreeFrames(const pktio::Frame* frames, uint16_t n);
  uint16_t port_;
  rte_mempool* pool_;     // transmit buffers (and receive buffers unless rx_pool_)
  rte_mempool* rx_pool_;  // net_af_xdp only: page-sized receive buffers, the UMEM
  uint32_t max_frame_bytes_ = pktio::kMaxFrameBytes;
  bool started_ = true;
  bool link_up_ = false;
  bool start_failed_ = false;
  uint16_t rx_ring_ = 1024, tx_ring_ = 1024;
  bool guard_ = false;
  std::string listener_path_;  // PortConfig::memif_listener_path
  PortStats stats_;
  std::unique_ptr<MemifTx> direct_;               // memif_direct_tx
  std::unique_ptr<MemifRx> direct_rx_;            // memif_direct_rx
  bool want_direct_rx_ = false;
  std::unique_ptr<pktio::FramePool> tx_buffers_;  // with direct_: what AllocTx hands out first, and MemifRx fills
  RxWakeup* rx_probe_ = nullptr;
};

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_PORT_H_
