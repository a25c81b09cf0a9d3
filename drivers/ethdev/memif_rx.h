// A net_memif port's receive without the PMD: each frame is copied once,
// straight from the memif ring's buffer into a buffer of the port's own
// (pktio::FramePool), and the ring's slots are returned with one index
// store per burst. DPDK's eth_memif_rx does the same copy into an mbuf it
// allocates per frame (then freed into the mempool when the frame is
// released), behind rte_eth_rx_burst's per-call checks.
//
// The frames are copies, not pointers into the ring: the peer shares the
// ring's buffers and could change a frame while the engine checks and
// parses it, and a frame chained over several descriptors needs one
// contiguous buffer anyway. A 64 B frame's copy is a few instructions.
//
// Shared memory is untrusted: each descriptor is read once, and a frame
// whose descriptor names a region that is not mapped, or a buffer outside
// its region, is dropped (counted) without reading it; so is a frame longer
// than the buffer it is copied into. Its slots are returned all the same.
//
// The ring's protocol is eth_memif_rx's (DPDK 22.11): the server reads the
// client's C2S ring from the queue's last_head up to the ring's head and
// returns the slots by storing the ring's tail; the client reads the
// server's S2C ring from last_tail up to the ring's tail, then refills: it
// gives the server back every free slot by setting its descriptor's length
// to the buffer size and storing the ring's head. The queue's last_head /
// last_tail (DPDK's own, reset by a reconnection) are read and written
// every burst, so RxWakeup::KnownEmpty and the PMD see the same cursor; and
// while the ring asks for interrupts each burst reads its eventfd, as the
// PMD does.
#ifndef DROCE_DRIVERS_ETHDEV_MEMIF_RX_H_
#define DROCE_DRIVERS_ETHDEV_MEMIF_RX_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "drivers/ethdev/dpdk_private.h"
#include "pktio/burst_io.h"
#include "pktio/frame_pool.h"

namespace droce::ethdev {

struct MemifRxCounters {
  uint64_t bad_descriptors = 0;  // frames dropped: a descriptor outside its region, or its region unmapped
  uint64_t too_long = 0;         // frames dropped: longer than the buffer they are copied into
  uint64_t no_buffers = 0;       // bursts cut short: the pool had no buffer (the frames wait in the ring)
};

namespace memif_rx {

// One region as the copy sees it: its mapping and size (nullptr: absent).
struct RegionView {
  const uint8_t* base = nullptr;
  uint64_t size = 0;
};

// A run checks at most this many descriptors before it copies (the
// buffers' addresses wait on the stack between its two passes).
inline constexpr uint16_t kRunChunk = 64;

// Copies whole frames from desc[*slot & mask] on, through `avail` published
// slots, into out[0..n) (buffers with their capacity); returns how many
// frames it filled, in order from out[0]. *slot moves past every frame it
// took, dropped ones included, and their descriptors' NEXT flags are
// cleared; a chain whose last descriptor is not yet published stays in the
// ring. `regions(index)` maps a descriptor's region
// number (any 16-bit value) to its view. bytes += the frames' lengths.
template <typename Regions>
uint16_t CopyFrames(dpdk_private::MemifDesc* desc, uint16_t mask, uint16_t* slot, uint16_t avail,
                    const Regions& regions, pktio::Frame* out, uint16_t n, uint64_t* bytes,
                    MemifRxCounters* counters) {
  uint16_t filled = 0;
  uint16_t cur = *slot;
  uint64_t sum = 0;  // a local: the copies below may write anywhere, *bytes included as far as the compiler knows
  while (avail > 0 && filled < n) {
    {
      // A run of frames in one descriptor each (every droce frame with
      // memif's default buffers) takes these two passes; a chain, a bad
      // descriptor or a frame too long ends the run and takes the general
      // way below, which reads the descriptor again (as a new read: it
      // checks what it reads). The first pass reads and checks each
      // descriptor once and starts loading its buffer (the first four
      // lines: memif's buffers are line-aligned, a 64 B WRITE's frame is
      // 138 bytes), the second copies: the ring's lines were written last
      // by the peer's CPU, and a copy that waited for its own descriptor
      // and then its own buffer would wait twice per frame, where the
      // run's misses overlap.
      const uint16_t run = std::min<uint16_t>({avail, static_cast<uint16_t>(n - filled), kRunChunk});
      const uint8_t* src[kRunChunk];
      uint16_t k = 0;
      for (; k < run; ++k) {
        const dpdk_private::MemifDesc* d = &desc[static_cast<uint16_t>(cur + k) & mask];
        const uint16_t flags = __atomic_load_n(&d->flags, __ATOMIC_RELAXED);
        const uint16_t region = __atomic_load_n(&d->region, __ATOMIC_RELAXED);
        const uint32_t length = __atomic_load_n(&d->length, __ATOMIC_RELAXED);
        const uint32_t offset = __atomic_load_n(&d->offset, __ATOMIC_RELAXED);
        if ((flags & dpdk_private::kMemifDescFlagNext) != 0) break;
        const RegionView r = regions(region);
        pktio::Frame& f = out[filled + k];
        if (r.base == nullptr || offset > r.size || length > r.size - offset || length > f.capacity) break;
        const uint8_t* const p = r.base + offset;
        __builtin_prefetch(p);
        if (length > 64) __builtin_prefetch(p + 64);
        if (length > 128) __builtin_prefetch(p + 128);
        if (length > 192) __builtin_prefetch(p + 192);
        src[k] = p;
        f.len = length;
      }
      for (uint16_t j = 0; j < k; ++j) {
        pktio::Frame& f = out[filled + j];
        std::memcpy(f.data, src[j], f.len);
        sum += f.len;
      }
      filled = static_cast<uint16_t>(filled + k);
      cur = static_cast<uint16_t>(cur + k);
      avail = static_cast<uint16_t>(avail - k);
      if (k == run) {
        if (avail > 0 && filled < n) continue;  // a run longer than kRunChunk: its next chunk
        break;  // the ring is drained or out[] is full
      }
    }
    pktio::Frame& f = out[filled];
    uint16_t used = 0;
    uint32_t len = 0;
    bool bad = false, too_long = false, whole = false;
    while (used < avail) {
      dpdk_private::MemifDesc* d = &desc[static_cast<uint16_t>(cur + used) & mask];
      ++used;
      // Read once: the peer may rewrite the descriptor at any time.
      const uint16_t flags = __atomic_load_n(&d->flags, __ATOMIC_RELAXED);
      const uint16_t region = __atomic_load_n(&d->region, __ATOMIC_RELAXED);
      const uint32_t length = __atomic_load_n(&d->length, __ATOMIC_RELAXED);
      const uint32_t offset = __atomic_load_n(&d->offset, __ATOMIC_RELAXED);
      if (!bad && !too_long) {
        const RegionView r = regions(region);
        if (r.base == nullptr || offset > r.size || length > r.size - offset) {
          bad = true;
        } else if (length > f.capacity - len) {
          too_long = true;
        } else {
          std::memcpy(f.data + len, r.base + offset, length);
          len += length;
        }
      }
      if ((flags & dpdk_private::kMemifDescFlagNext) == 0) {
        whole = true;
        break;
      }
    }
    if (!whole) break;  // the chain's end is not published yet
    // DPDK 22.11's eth_memif_tx sets NEXT on a chain's descriptors but
    // never clears it on the first descriptor of a frame, so a slot that
    // once held a chain's head or middle comes back from it flagged, and
    // its receiver (the PMD too) joins that frame to the next. The slots
    // are ours until the index store: their flags go back clear.
    for (uint16_t i = 0; i + 1 < used; ++i) {
      __atomic_store_n(&desc[static_cast<uint16_t>(cur + i) & mask].flags, uint16_t{0}, __ATOMIC_RELAXED);
    }
    cur = static_cast<uint16_t>(cur + used);
    avail = static_cast<uint16_t>(avail - used);
    if (bad) {
      ++counters->bad_descriptors;
    } else if (too_long) {
      ++counters->too_long;
    } else {
      f.len = len;
      sum += len;
      ++filled;
    }
  }
  *slot = cur;
  *bytes += sum;
  return filled;
}

}  // namespace memif_rx

class MemifRx {
 public:
  // The receive path of `port`'s RX queue 0, or nullptr with the reason
  // (not net_memif, not DPDK 22.11, a layout check failed). The queue must
  // be set up; the connection may come later.
  static std::unique_ptr<MemifRx> For(uint16_t port, std::string* why_not);

  // Receives up to n frames into buffers of `pool` (0 while the port is not
  // connected or the pool is empty). The frames are the caller's, to give
  // back to the pool. *bytes += the frames' lengths.
  uint16_t Receive(pktio::FramePool* pool, pktio::Frame* frames, uint16_t n, uint64_t* bytes);

  const MemifRxCounters& counters() const { return counters_; }

  // After a Receive that did not return (the unmap guard ended it): how
  // many buffers of frames[0..) it had taken from the pool, to give back.
  uint16_t TakeInFlight() { return std::exchange(in_flight_, uint16_t{0}); }

 private:
  MemifRx(uint16_t port, const uint8_t* dev) : port_(port), dev_(dev) {}
  uint16_t port_;
  const uint8_t* dev_;  // rte_eth_devices[port_]
  uint16_t in_flight_ = 0;
  MemifRxCounters counters_;
};

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_MEMIF_RX_H_
