// rte_intr_fd_get() is still marked experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "drivers/ethdev/memif_rx.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include <rte_ethdev.h>
#include <rte_interrupts.h>

#include "drivers/ethdev/dpdk_private.h"

namespace droce::ethdev {

using namespace dpdk_private;  // NOLINT: the layouts this file reads

std::unique_ptr<MemifRx> MemifRx::For(uint16_t port, std::string* why_not) {
  const uint8_t* dev = MemifEthDev(port, /*rx=*/true, why_not);
  return dev != nullptr ? std::unique_ptr<MemifRx>(new MemifRx(port, dev)) : nullptr;
}

uint16_t MemifRx::Receive(pktio::FramePool* pool, pktio::Frame* frames, uint16_t n, uint64_t* bytes_out) {
  uint8_t* queue = static_cast<uint8_t*>(::rte_eth_fp_ops[port_].rxq.data[0]);
  if (queue == nullptr || n == 0) return 0;
  MemifRing q;
  if (!MemifQueueRing(dev_, queue, &q)) return 0;
  const uint16_t mask = static_cast<uint16_t>(q.ring_size - 1);
  // While a thread sleeps on the ring's eventfd (RxWakeup::Arm cleared
  // MASK_INT) every burst consumes the notification, as eth_memif_rx does:
  // a second sleeper that re-arms would otherwise find it readable at once
  // until the last one disarms.
  if ((__atomic_load_n(reinterpret_cast<uint16_t*>(q.ring + kMemifRingFlagsOffset), __ATOMIC_RELAXED) &
       kMemifRingFlagMaskInt) == 0) {
    auto* handle = Load<rte_intr_handle*>(queue, kMemifQueueIntrHandleOffset);
    const int fd = handle != nullptr ? rte_intr_fd_get(handle) : -1;
    eventfd_t count;
    if (fd >= 0) (void)eventfd_read(fd, &count);  // non-blocking (DPDK's): nothing to read is fine
  }
  const bool c2s = Load<uint32_t>(queue, kMemifQueueTypeOffset) == kMemifRingC2S;
  // DPDK's cursor, in its heap (never shared with the peer).
  auto* const last = reinterpret_cast<uint16_t*>(queue + (c2s ? kMemifQueueLastHeadOffset : kMemifQueueLastTailOffset));
  uint16_t cur = *last;
  uint16_t avail = static_cast<uint16_t>(__atomic_load_n(c2s ? q.head : q.tail, __ATOMIC_ACQUIRE) - cur);
  if (avail > q.ring_size) avail = 0;  // the peer's index out of range: nothing is readable
  uint16_t got = 0;
  uint64_t bytes = 0;
  if (avail > 0) {
    const uint16_t want = std::min(n, avail);
    const uint16_t have = pool->Alloc(frames, want);
    if (have < want) ++counters_.no_buffers;
    in_flight_ = have;
    // Buffers are in the ring's region unless the peer is a zero-copy
    // client (its mbufs' memory, regions 1 and up).
    // The ring's own region by value: the copies may write anywhere as far
    // as the compiler knows, and q (address taken) would be read again
    // after each one.
    const memif_rx::RegionView own{q.base, q.region_size};
    const uint16_t own_index = q.region_index;
    const auto regions = [&, own, own_index](uint16_t i) -> memif_rx::RegionView {
      if (i == own_index) return own;
      const uint8_t* r = nullptr;
      if (!MemifRegionAt(dev_, i, &r) || r == nullptr) return {};
      return {Load<const uint8_t*>(r, 0), Load<uint64_t>(r, kMemifRegionSizeOffset)};
    };
    got = memif_rx::CopyFrames(q.desc, mask, &cur, avail, regions, frames, have, &bytes, &counters_);
    in_flight_ = 0;
    if (got < have) pool->Free(frames + got, static_cast<uint16_t>(have - got));
    if (c2s) __atomic_store_n(q.tail, cur, __ATOMIC_RELEASE);
    *last = cur;
  }
  if (!c2s) {
    // The client hands the server every slot it has read back, each with a
    // whole buffer's length (the buffers lie in slot order, one buffer
    // size apart; the descriptors' offsets are the client's own).
    uint16_t h = __atomic_load_n(q.head, __ATOMIC_RELAXED);
    const uint16_t refill = static_cast<uint16_t>(q.ring_size - static_cast<uint16_t>(h - cur));
    if (refill > 0 && refill <= q.ring_size) {
      const uint32_t buffer = __atomic_load_n(&q.desc[1].offset, __ATOMIC_RELAXED) -
                              __atomic_load_n(&q.desc[0].offset, __ATOMIC_RELAXED);
      for (uint16_t i = 0; i < refill; ++i, ++h) __atomic_store_n(&q.desc[h & mask].length, buffer, __ATOMIC_RELAXED);
      __atomic_store_n(q.head, h, __ATOMIC_RELEASE);
    }
  }
  if (got > 0) {
    // The PMD's queue counters (rte_eth_stats_get), as its own burst keeps them.
    *reinterpret_cast<uint64_t*>(queue + kMemifQueuePacketsOffset) += got;
    *reinterpret_cast<uint64_t*>(queue + kMemifQueueBytesOffset) += bytes;
    *bytes_out += bytes;
  }
  return got;
}

}  // namespace droce::ethdev
