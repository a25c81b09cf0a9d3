#include "apps/droced/ring_ports.h"

#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_format.h"
#include "drivers/ethdev/direct_io.h"

namespace droce::droced {

RingPorts::~RingPorts() {
  for (size_t h = 0; h < links_.size(); ++h) Close(static_cast<int>(h));
}

absl::StatusOr<int> RingPorts::Open(uint32_t link_id) {
  const uint32_t slot_bytes = pktio::FrameRing::kDefaultSlotBytes;
  const size_t ring_bytes = pktio::FrameRing::Bytes(slots_, slot_bytes);
  Link l;
  l.id = link_id;
  l.bytes = 2 * ring_bytes;
  l.memfd = ethdev::CreateRingMemfd(absl::StrFormat("droce-link-%u", link_id), l.bytes);
  l.to_process_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  l.to_daemon_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  void* map = l.memfd < 0 ? MAP_FAILED : mmap(nullptr, l.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, l.memfd, 0);
  if (map == MAP_FAILED || l.to_process_efd < 0 || l.to_daemon_efd < 0) {
    const int err = errno;
    for (int fd : {l.memfd, l.to_process_efd, l.to_daemon_efd}) {
      if (fd >= 0) close(fd);
    }
    if (map != MAP_FAILED) munmap(map, l.bytes);
    return absl::ResourceExhaustedError(absl::StrFormat("link %u: %s", link_id, std::strerror(err)));
  }
  l.map = map;
  uint8_t* base = static_cast<uint8_t*>(map);
  l.to_process = pktio::FrameRing(base + ethdev::kLinkRingToProcess * ring_bytes, slots_, slot_bytes);
  l.to_daemon = pktio::FrameRing(base + ethdev::kLinkRingToDaemon * ring_bytes, slots_, slot_bytes);
  l.in_use = true;
  auto free_entry = std::find_if(links_.begin(), links_.end(), [](const Link& x) { return !x.in_use; });
  if (free_entry != links_.end()) {
    *free_entry = l;
    return static_cast<int>(free_entry - links_.begin());
  }
  links_.push_back(l);
  return static_cast<int>(links_.size() - 1);
}

int RingPorts::SendToProcess(int handle, int conn_fd) {
  Link& l = links_[handle];
  if (l.memfd < 0) return EBADF;
  ethdev::LinkMessage m{};
  m.magic = ethdev::kLinkMagic;
  m.version = ethdev::kLinkVersion;
  m.size = sizeof m;
  m.link_id = l.id;
  m.slots = slots_;
  m.slot_bytes = pktio::FrameRing::kDefaultSlotBytes;
  const int fds[3] = {l.memfd, l.to_process_efd, l.to_daemon_efd};
  const int err = ethdev::SendWithFds(conn_fd, &m, sizeof m, fds, 3);
  close(l.memfd);  // our mapping keeps the memory; nobody else gets the descriptor
  l.memfd = -1;
  return err;
}

void RingPorts::Close(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= links_.size()) return;
  Link& l = links_[handle];
  if (!l.in_use) return;
  for (int fd : {l.memfd, l.to_process_efd, l.to_daemon_efd}) {
    if (fd >= 0) close(fd);
  }
  munmap(l.map, l.bytes);
  l = Link{};
}

uint16_t RingPorts::RxBurst(int handle, rte_mbuf** mbufs, uint16_t n) {
  Link& l = links_[handle];
  const uint32_t avail = l.to_daemon.Available();
  if (avail == 0) return 0;
  n = static_cast<uint16_t>(std::min<uint32_t>({avail, n, 64}));
  if (rte_pktmbuf_alloc_bulk(pool_, mbufs, n) != 0) {
    ++counters_.rx_no_mbuf;
    return 0;
  }
  pktio::Frame f[64];
  for (uint16_t i = 0; i < n; ++i) {
    f[i].data = rte_pktmbuf_mtod(mbufs[i], uint8_t*);
    f[i].capacity = rte_pktmbuf_tailroom(mbufs[i]);
  }
  const uint64_t bad_before = l.to_daemon.counters().bad_length;
  const uint16_t filled = l.to_daemon.Consume(f, n);
  counters_.rx_bad_length += l.to_daemon.counters().bad_length - bad_before;
  for (uint16_t i = 0; i < filled; ++i) {
    mbufs[i]->data_len = static_cast<uint16_t>(f[i].len);
    mbufs[i]->pkt_len = f[i].len;
  }
  if (filled < n) rte_pktmbuf_free_bulk(mbufs + filled, n - filled);
  return filled;
}

uint16_t RingPorts::TxBurst(int handle, rte_mbuf** mbufs, uint16_t n) {
  Link& l = links_[handle];
  pktio::Frame f[64];
  n = std::min<uint16_t>(n, 64);
  for (uint16_t i = 0; i < n; ++i) {
    f[i].data = rte_pktmbuf_mtod(mbufs[i], uint8_t*);
    f[i].len = mbufs[i]->data_len;  // one segment: the switch forwards no chained frame
  }
  uint16_t took = 0;
  while (took < n) {
    took = static_cast<uint16_t>(took + l.to_process.Produce(f + took, static_cast<uint16_t>(n - took)));
    // A frame longer than a slot (a jumbo frame from an uplink) is no
    // process's: dropped here, so the frames behind it still go.
    if (took == n || f[took].len <= l.to_process.max_frame()) break;
    ++counters_.tx_too_long;
    ++took;
  }
  if (took > 0) {
    rte_pktmbuf_free_bulk(mbufs, took);  // copied (or too long)
    if (l.to_process.TakeWakeupRequest()) {
      const uint64_t one = 1;
      if (write(l.to_process_efd, &one, sizeof one) == sizeof one) ++counters_.wakeups_sent;
    }
  }
  return took;
}

int RingPorts::Arm(int handle) {
  Link& l = links_[handle];
  (void)l.to_daemon.Arm();  // frames there already: the loop's poll after arming takes them
  return l.to_daemon_efd;
}

void RingPorts::Disarm(int handle) {
  if (handle < 0 || static_cast<size_t>(handle) >= links_.size() || !links_[handle].in_use) return;
  Link& l = links_[handle];
  l.to_daemon.Disarm();
  uint64_t v;
  (void)!read(l.to_daemon_efd, &v, sizeof v);
}

}  // namespace droce::droced
