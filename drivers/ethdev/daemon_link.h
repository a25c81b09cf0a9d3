// The link between a process and droced (doc/droced.md "The link to the
// daemon"): a memfd holding two pktio::FrameRings, one per direction, and an
// eventfd per direction, the same mechanism as the direct paths between
// processes (direct_io.h), with droced as the other party. droced creates
// the memory at attach and keeps its own mapping; the process gets the
// memfd and both eventfds over its control connection (SCM_RIGHTS, a
// LinkMessage right after the attach reply). No DPDK on either side of the
// link: the process's frames live in a pktio::FramePool of its own, so a
// fabric device needs no EAL, no mbuf pool and no ethdev port, and droced
// serves as many processes as it has port slots (not DPDK's
// RTE_MAX_ETHPORTS).
//
// Trust: droced maps the rings as one party and the process as the other;
// neither trusts the other's indices or lengths (FrameRing bounds them), and
// droced checks what a process sends as it checked it on memif (the
// switch's rules). A third process gets no descriptor. When the process
// leaves, droced unmaps its side; when droced goes, the process's mapping
// stays valid until it unbinds: no unmap under a burst on either side.
//
// Not thread-safe: the verbs runtime calls it under its device mutex.
#ifndef DROCE_DRIVERS_ETHDEV_DAEMON_LINK_H_
#define DROCE_DRIVERS_ETHDEV_DAEMON_LINK_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "pktio/burst_io.h"
#include "pktio/frame_pool.h"
#include "pktio/frame_ring.h"

namespace droce::ethdev {

// droced -> process, unasked, right after a successful attach reply on the
// control connection, with three descriptors (SCM_RIGHTS): the memfd, the
// eventfd the process sleeps on (droced writes it) and the one droced
// sleeps on (the process writes it). The memfd holds ring kToProcess at 0
// and ring kToDaemon behind it.
inline constexpr uint32_t kLinkMagic = 0x644c4e4b;  // "dLNK"
inline constexpr uint16_t kLinkVersion = 1;
inline constexpr uint32_t kLinkRingToProcess = 0;
inline constexpr uint32_t kLinkRingToDaemon = 1;
struct LinkMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t size;        // sizeof(LinkMessage)
  uint32_t link_id;     // the port's id in droced (status and logs)
  uint32_t slots;       // each ring's geometry (FrameRing::ValidGeometry)
  uint32_t slot_bytes;
  uint8_t reserved[12];  // zero
};
static_assert(sizeof(LinkMessage) == 32);

// A memfd of `bytes` (zeroed memory: empty rings) sealed against shrinking
// and growing, named `name` for /proc/PID/maps. -1 with errno on failure.
int CreateRingMemfd(const std::string& name, size_t bytes);
// Maps a ring memfd another process made, after checking that it is exactly
// `bytes` long and sealed against shrinking (nobody truncates it under us:
// SIGBUS). Leaves the descriptor open.
absl::StatusOr<void*> MapRingMemfd(int fd, size_t bytes);

struct DaemonLinkCounters {
  uint64_t rx_packets = 0, tx_packets = 0;
  uint64_t tx_ring_full = 0;   // transmit bursts a full ring stopped (the device retries)
  uint64_t rx_no_buffer = 0;   // receive bursts the pool could not serve (frames stay in the ring)
  uint64_t wakeups_sent = 0;   // eventfd writes (droced slept)
  uint64_t binds = 0;
  uint64_t tx_flattened = 0;   // gather frames handed back unsent: copied whole
};

class DaemonLink final : public pktio::BurstIo {
 public:
  // `buffers` frame buffers of pktio::kMaxFrameBytes: the frames the device
  // holds (its loopback ring) and a burst each way.
  explicit DaemonLink(uint32_t buffers);
  ~DaemonLink() override;
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // droced's LinkMessage with its descriptors (taken: kept or closed). A
  // link bound before (a daemon that went) is replaced; the pool stays, so
  // frames the device holds stay valid.
  absl::Status Bind(const LinkMessage& m, const int* fds, int nfds);
  // The daemon is gone: the rings are unmapped, bursts do nothing.
  void Unbind();
  bool bound() const { return map_ != nullptr; }

  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override;
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override { return pool_.Alloc(frames, n); }
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override;
  // A gather frame is copied into the ring's slot in its pieces
  // (FrameRing::Produce); those the ring refuses are flattened before
  // TxBurst returns.
  bool TakesGather() const override { return true; }
  void Release(pktio::Frame* frames, uint16_t n) override { pool_.Free(frames, n); }
  // The inbound ring holds no frame (an unbound link: cannot tell).
  bool KnownEmpty() override;

  // Sleeping until droced sends a frame: the inbound ring's wake-up request
  // and eventfd, as an RxWakeup (the runtime's progress thread and event
  // waits use it as they use memif's). Valid while this link lives; a new
  // Bind needs a new one (the eventfd changes).
  std::unique_ptr<RxWakeup> MakeWakeup();

  const DaemonLinkCounters& counters() const { return counters_; }
  const pktio::FramePool& pool() const { return pool_; }
  size_t map_bytes() const { return map_bytes_; }
  uint32_t link_id() const { return link_id_; }

 private:
  class Wakeup;
  pktio::FramePool pool_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  pktio::FrameRing rx_, tx_;
  int rx_efd_ = -1, tx_efd_ = -1;
  uint32_t link_id_ = 0;
  DaemonLinkCounters counters_;
};

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_DAEMON_LINK_H_
