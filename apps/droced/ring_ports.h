// The processes' links to the switch as shared-memory rings
// (ethdev::LinkMessage, drivers/ethdev/daemon_link.h; doc/droced.md "The
// link to the daemon"): per attached process a memfd with a FrameRing each
// way and an eventfd each way. droced maps the memory for as long as the
// process is attached and moves frames between the rings and its mbufs: a
// burst from a process is copied into mbufs of droced's pool (the switch's
// rules then read and forward them as they did memif's), a burst to a
// process is copied into its ring and the mbufs freed. No DPDK port per
// process, so no bound but droced's own port table (kMaxPorts).
#ifndef DROCE_APPS_DROCED_RING_PORTS_H_
#define DROCE_APPS_DROCED_RING_PORTS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "drivers/ethdev/daemon_link.h"
#include "pktio/frame_ring.h"

struct rte_mbuf;
struct rte_mempool;

namespace droce::droced {

struct RingPortCounters {
  uint64_t rx_no_mbuf = 0;     // receive bursts droced's pool could not serve (frames stay in the ring)
  uint64_t rx_bad_length = 0;  // slots with a bad length (a process writing garbage): skipped
  uint64_t wakeups_sent = 0;   // eventfd writes (the process slept)
  uint64_t tx_too_long = 0;    // frames longer than a ring slot (a jumbo frame from an uplink): dropped
};

class RingPorts {
 public:
  // `slots` per direction (FrameRing::ValidGeometry with kDefaultSlotBytes).
  RingPorts(rte_mempool* pool, uint32_t slots) : pool_(pool), slots_(slots) {}
  ~RingPorts();

  // A new link (memfd named for /proc/PID/maps); returns its handle.
  absl::StatusOr<int> Open(uint32_t link_id);
  // Sends the process its side (LinkMessage with the memfd and both
  // eventfds) on its control connection, then closes droced's memfd (its
  // mapping stays). 0 or an errno.
  int SendToProcess(int handle, int conn_fd);
  // The process left: droced's mapping and descriptors go.
  void Close(int handle);

  // What the process sent, copied into mbufs of droced's pool (as
  // rte_eth_rx_burst fills them). No system call.
  uint16_t RxBurst(int handle, rte_mbuf** mbufs, uint16_t n);
  // Copies a prefix of mbufs[0..n) into the process's ring (as much as it
  // has room for; a frame longer than a slot is dropped and counted), frees
  // those mbufs and returns how many; the caller keeps the rest
  // (rte_eth_tx_burst's contract). Wakes a sleeping process.
  uint16_t TxBurst(int handle, rte_mbuf** mbufs, uint16_t n);

  // Sleeping: asks the process to write the link's eventfd after its next
  // burst and returns that eventfd (poll it, after polling the ring once
  // more). Disarm after waking.
  int Arm(int handle);
  void Disarm(int handle);

  const RingPortCounters& counters() const { return counters_; }

 private:
  struct Link {
    bool in_use = false;
    uint32_t id = 0;
    void* map = nullptr;
    size_t bytes = 0;
    pktio::FrameRing to_process, to_daemon;
    int memfd = -1;            // until sent
    int to_process_efd = -1;   // droced writes it (the process sleeps on it)
    int to_daemon_efd = -1;    // droced sleeps on it
  };
  rte_mempool* pool_;
  uint32_t slots_;
  std::vector<Link> links_;  // by handle; a closed one's entry is reused
  RingPortCounters counters_;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_RING_PORTS_H_
