// rte_intr_fd_get() is still marked experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "drivers/ethdev/memif_tx.h"

#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_version.h>

#include "drivers/ethdev/dpdk_private.h"

namespace droce::ethdev {

using namespace dpdk_private;  // NOLINT: the layouts this file reads

std::unique_ptr<MemifTx> MemifTx::For(uint16_t port, std::string* why_not) {
  std::string unused;
  if (why_not == nullptr) why_not = &unused;
  if (std::strncmp(rte_version(), "DPDK 22.11", 10) != 0) {
    *why_not = std::string("built for DPDK 22.11's PMD layouts, running ") + rte_version();
    return nullptr;
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port, &info) != 0 || info.driver_name == nullptr) {
    *why_not = "no such port";
    return nullptr;
  }
  if (std::strcmp(info.driver_name, "net_memif") != 0) {
    *why_not = std::string(info.driver_name) + " is not net_memif";
    return nullptr;
  }
  const void* queue = ::rte_eth_fp_ops[port].txq.data[0];
  if (queue == nullptr) {
    *why_not = "TX queue 0 is not set up";
    return nullptr;
  }
  const uint8_t* dev = EthDev(port, why_not);
  if (dev == nullptr) return nullptr;
  if (Load<uint32_t>(queue, kMemifQueueTypeOffset) > kMemifRingS2C ||
      Load<uint16_t>(queue, kMemifQueueInPortOffset) != port) {
    *why_not = "memif queue layout differs from DPDK 22.11's";
    return nullptr;
  }
  return std::unique_ptr<MemifTx>(new MemifTx(port, dev));
}

uint16_t MemifTx::Send(const pktio::Frame* frames, uint16_t n) {
  uint8_t* queue = static_cast<uint8_t*>(::rte_eth_fp_ops[port_].txq.data[0]);
  if (queue == nullptr || n == 0) return 0;
  uint16_t region_index = 0;
  const uint8_t* region = MemifQueueRegion(dev_, queue, &region_index);
  if (region == nullptr) return 0;
  uint8_t* const base = Load<uint8_t*>(region, 0);
  const uint64_t region_size = Load<uint64_t>(region, kMemifRegionSizeOffset);
  const uint32_t ring_offset = Load<uint32_t>(queue, kMemifQueueRingOffsetOffset);
  const uint8_t log2_size = Load<uint8_t>(queue, kMemifQueueLog2RingSizeOffset);
  if (base == nullptr || log2_size == 0 || log2_size > 15) return 0;
  const uint32_t ring_size = 1u << log2_size;
  if (uint64_t{ring_offset} + kMemifRingHeaderBytes + uint64_t{ring_size} * sizeof(MemifDesc) > region_size) return 0;
  uint8_t* const ring = base + ring_offset;
  auto* const head = reinterpret_cast<uint16_t*>(ring + kMemifRingHeadOffset);
  auto* const tail = reinterpret_cast<uint16_t*>(ring + kMemifRingTailOffset);
  auto* const desc = reinterpret_cast<MemifDesc*>(ring + kMemifRingHeaderBytes);
  const uint16_t mask = static_cast<uint16_t>(ring_size - 1);
  // The client sends on its C2S ring at the head, into the buffers it laid
  // out (contiguous, so the buffer size is the step between two); the
  // server on its S2C ring at the tail, into buffers whose size the client
  // wrote in each descriptor when it refilled the ring.
  const bool c2s = Load<uint32_t>(queue, kMemifQueueTypeOffset) == kMemifRingC2S;
  uint16_t slot, free_slots;
  if (c2s) {
    slot = __atomic_load_n(head, __ATOMIC_RELAXED);
    free_slots = static_cast<uint16_t>(ring_size - slot + __atomic_load_n(tail, __ATOMIC_ACQUIRE));
  } else {
    slot = __atomic_load_n(tail, __ATOMIC_RELAXED);
    free_slots = static_cast<uint16_t>(__atomic_load_n(head, __ATOMIC_ACQUIRE) - slot);
  }
  if (free_slots > ring_size) free_slots = 0;  // a peer's index out of range: nothing is free
  const uint32_t c2s_buffer = c2s ? __atomic_load_n(&desc[1 & mask].offset, __ATOMIC_RELAXED) -
                                        __atomic_load_n(&desc[0].offset, __ATOMIC_RELAXED)
                                  : 0;
  const uint16_t first = slot;
  uint16_t taken = 0;
  uint64_t bytes = 0, published = 0;
  while (taken < n && free_slots > 0) {
    const pktio::Frame& f = frames[taken];
    uint16_t s = slot, used = 0;
    uint32_t done = 0;
    bool bad = false, room = true;
    for (;;) {
      MemifDesc* d = &desc[s & mask];
      // Read once: the peer shares this memory.
      const uint16_t d_region = __atomic_load_n(&d->region, __ATOMIC_RELAXED);
      const uint32_t offset = __atomic_load_n(&d->offset, __ATOMIC_RELAXED);
      const uint32_t capacity = c2s ? c2s_buffer : __atomic_load_n(&d->length, __ATOMIC_RELAXED);
      if (d_region != region_index || capacity == 0 || offset > region_size || capacity > region_size - offset) {
        bad = true;
        break;
      }
      const uint32_t chunk = std::min(capacity, f.len - done);
      std::memcpy(base + offset, f.data + done, chunk);
      __atomic_store_n(&d->length, chunk, __ATOMIC_RELAXED);
      ++used, ++s, done += chunk;
      if (done == f.len) {
        __atomic_store_n(&d->flags, uint16_t{0}, __ATOMIC_RELAXED);
        break;
      }
      if (used == free_slots) {
        room = false;
        break;
      }
      __atomic_store_n(&d->flags, kMemifDescFlagNext, __ATOMIC_RELAXED);
    }
    if (!room) break;  // the frame's rest finds no slot: it waits, unpublished
    ++taken;
    if (bad) {
      ++counters_.bad_descriptors;  // dropped; its slots stay unpublished
      continue;
    }
    slot = s;
    free_slots = static_cast<uint16_t>(free_slots - used);
    bytes += f.len;
    ++published;
  }
  if (slot != first) {
    __atomic_store_n(c2s ? head : tail, slot, __ATOMIC_RELEASE);
    // The receiver stores its flag, fences, then reads the index
    // (RxWakeup::Arm); we store the index, then read its flag: without a
    // fence here too (DPDK's sender has none) both can miss the other's
    // store and the sleeper is not woken until its timer.
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    // The peer sleeps on the queue's eventfd when it cleared MASK_INT (its
    // interrupt mode); DPDK's own receiver never does.
    if ((__atomic_load_n(reinterpret_cast<uint16_t*>(ring + kMemifRingFlagsOffset), __ATOMIC_RELAXED) &
         kMemifRingFlagMaskInt) == 0) {
      auto* handle = Load<rte_intr_handle*>(queue, kMemifQueueIntrHandleOffset);
      const int fd = handle != nullptr ? rte_intr_fd_get(handle) : -1;
      // eventfd_write: glibc's own write, not the write() a preloaded
      // library may interpose (droce's rdmacm preload looks at every fd).
      if (fd >= 0 && eventfd_write(fd, 1) == 0) ++counters_.wakeups;
    }
    // The PMD's queue counters (rte_eth_stats_get), as its own burst keeps them.
    auto* pkts = reinterpret_cast<uint64_t*>(queue + kMemifQueuePacketsOffset);
    auto* qbytes = reinterpret_cast<uint64_t*>(queue + kMemifQueueBytesOffset);
    *pkts += published;
    *qbytes += bytes;
  }
  return taken;
}

}  // namespace droce::ethdev
