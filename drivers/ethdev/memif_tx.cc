// rte_intr_fd_get() is still marked experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "drivers/ethdev/memif_tx.h"

#include <cpuid.h>
#include <emmintrin.h>
#include <tmmintrin.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cstring>

#include <rte_ethdev.h>
#include <rte_interrupts.h>

#include "drivers/ethdev/dpdk_private.h"

namespace droce::ethdev {

using namespace dpdk_private;  // NOLINT: the layouts this file reads

std::unique_ptr<MemifTx> MemifTx::For(uint16_t port, std::string* why_not) {
  const uint8_t* dev = MemifEthDev(port, /*rx=*/false, why_not);
  return dev != nullptr ? std::unique_ptr<MemifTx>(new MemifTx(port, dev)) : nullptr;
}

namespace memif_tx {

namespace {

// Where a slot's buffer lies. On the C2S ring, where the client laid it
// out (the view's first offset, one buffer per slot); its descriptor's
// region and offset are then written with the frame, not read: the
// client owns them, and a load of a line the peer's CPU read last waits
// for it (with 4 descriptors to a line, a wait per 4 frames of a stream).
// On the S2C ring, where the descriptor says (read once: the peer shares
// it). False where the buffer does not lie wholly within the region.
struct SlotBuffer {
  uint32_t offset = 0;
  uint32_t capacity = 0;
};

inline bool Locate(const RingView& r, MemifDesc* d, uint16_t slot, SlotBuffer* b) {
  if (r.c2s) {
    const uint8_t* buffer = C2sBuffer(r, slot, r.c2s_buffer);
    if (buffer == nullptr || static_cast<uint64_t>(buffer - r.base) > UINT32_MAX) return false;
    b->capacity = r.c2s_buffer;
    b->offset = static_cast<uint32_t>(buffer - r.base);
    return true;
  }
  if (__atomic_load_n(&d->region, __ATOMIC_RELAXED) != r.region_index) return false;
  b->capacity = __atomic_load_n(&d->length, __ATOMIC_RELAXED);
  const uint32_t offset = __atomic_load_n(&d->offset, __ATOMIC_RELAXED);
  if (b->capacity == 0 || offset > r.region_size || b->capacity > r.region_size - offset) return false;
  b->offset = offset;
  return true;
}

// The descriptor of a buffer Locate found: on the C2S ring its place too.
inline void Describe(const RingView& r, MemifDesc* d, const SlotBuffer& b, uint32_t length, uint16_t flags) {
  if (r.c2s) {
    __atomic_store_n(&d->region, r.region_index, __ATOMIC_RELAXED);
    __atomic_store_n(&d->offset, b.offset, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&d->length, length, __ATOMIC_RELAXED);
  __atomic_store_n(&d->flags, flags, __ATOMIC_RELAXED);
}

// pshufb controls that move a vector's bytes down by d (0..15): the 16 at
// kShiftDown + d select bytes d..15, then zeros (a control byte with its
// top bit set).
alignas(32) constexpr uint8_t kShiftDown[32] = {0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,
                                                11,   12,   13,   14,   15,   0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                                0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

}  // namespace

uint16_t CopyFrames(const RingView& r, uint16_t* slot_io, uint16_t free_slots, const pktio::Frame* frames, uint16_t n,
                    uint64_t* bytes_out, MemifTxCounters* counters) {
  uint16_t slot = *slot_io;
  uint16_t taken = 0;
  uint64_t bytes = 0;
  while (taken < n && free_slots > 0) {
    const pktio::Frame& f = frames[taken];
    {
      // A frame that fits its slot's buffer (every frame but a 4 KiB
      // MTU's in 2 KiB buffers): one descriptor, one copy, no chain.
      MemifDesc* d = &r.desc[slot & r.mask];
      SlotBuffer b;
      if (Locate(r, d, slot, &b) && f.len <= b.capacity) [[likely]] {
        uint8_t* dst = r.base + b.offset;
        if (r.stream && f.len <= kStreamFrameBytes && (reinterpret_cast<uintptr_t>(dst) & 63) == 0 &&
            ((f.len + 63) & ~63u) <= b.capacity) {
          StreamCopy(dst, f.data, f.len);
        } else {
          std::memcpy(dst, f.data, f.len);
        }
        Describe(r, d, b, f.len, 0);
        ++slot, --free_slots, ++taken;
        bytes += f.len;
        continue;
      }
    }
    // A chain, or a bad buffer (the first, located again, or one further on).
    uint16_t s = slot, used = 0;
    uint32_t done = 0;
    bool bad = false, room = true;
    for (;;) {
      MemifDesc* d = &r.desc[s & r.mask];
      SlotBuffer b;
      if (!Locate(r, d, s, &b)) {
        bad = true;
        break;
      }
      const uint32_t chunk = std::min(b.capacity, f.len - done);
      std::memcpy(r.base + b.offset, f.data + done, chunk);
      ++used, ++s, done += chunk;
      if (done == f.len) {
        Describe(r, d, b, chunk, 0);
        break;
      }
      Describe(r, d, b, chunk, kMemifDescFlagNext);
      if (used == free_slots) {
        room = false;
        break;
      }
    }
    if (!room) break;  // the frame's rest finds no slot: it waits, unpublished
    ++taken;
    if (bad) {
      ++counters->bad_descriptors;  // dropped; its slots stay unpublished
      continue;
    }
    slot = s;
    free_slots = static_cast<uint16_t>(free_slots - used);
    bytes += f.len;
  }
  *slot_io = slot;
  *bytes_out = bytes;
  return taken;
}

void StreamCopy(uint8_t* dst, const uint8_t* src, uint32_t len) {
  uint32_t i = 0;
  for (; i + 16 <= len; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
  if (i < len) {
    // The source may end here: no load reaches past it. A frame of 16
    // bytes or more takes its last 16 and shifts them down over the bytes
    // already stored, zeros coming in behind (pshufb with a control from
    // kShiftDown). Not through a stack buffer filled by memcpy: its narrow
    // stores cannot forward to the 16-byte load, which waits for them to
    // retire, on every 64 B WRITE's frame (138 bytes: a 10-byte tail).
    __m128i tail;
    if (len >= 16) {
      const __m128i last = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + len - 16));
      const uint32_t drop = 16 - (len - i);  // bytes of `last` already stored
      tail = _mm_shuffle_epi8(last, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kShiftDown + drop)));
    } else {
      alignas(16) uint8_t bytes[16] = {};
      std::memcpy(bytes, src, len);
      tail = _mm_load_si128(reinterpret_cast<const __m128i*>(bytes));
    }
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), tail);
    i += 16;
  }
  // Whole lines: a line the stores fill leaves the write-combining buffer
  // at once; a partial one waits and goes out as a partial write.
  for (; (i & 63) != 0; i += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_setzero_si128());
}

uint8_t* C2sBuffer(const RingView& r, uint16_t slot, uint32_t bytes) {
  const uint64_t offset = r.c2s_first_offset + uint64_t{static_cast<uint16_t>(slot & r.mask)} * r.c2s_buffer;
  return r.c2s_buffer != 0 && bytes <= r.c2s_buffer && offset <= r.region_size && bytes <= r.region_size - offset
             ? r.base + offset
             : nullptr;
}

__attribute__((target("prfchw"))) void PrefetchForWrite(const RingView& r, uint16_t from, uint16_t count,
                                                        uint32_t lines) {
  constexpr uint32_t kLine = 64;
  lines = std::min(lines, kPrefetchLines);
  for (uint16_t s = from; s != static_cast<uint16_t>(from + count); ++s) {
    const MemifDesc* d = &r.desc[s & r.mask];
    if ((reinterpret_cast<uintptr_t>(d) & (kLine - 1)) == 0) __builtin_prefetch(d, 1, 3);
    const uint8_t* b = C2sBuffer(r, s, lines * kLine);
    if (b == nullptr) continue;
    for (uint32_t i = 0; i < lines; ++i) __builtin_prefetch(b + i * kLine, 1, 3);
  }
}

bool HavePrefetchW() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 8)) != 0;
}

}  // namespace memif_tx

uint16_t MemifTx::Send(const pktio::Frame* frames, uint16_t n, uint64_t* bytes) {
  *bytes = 0;
  uint8_t* queue = static_cast<uint8_t*>(::rte_eth_fp_ops[port_].txq.data[0]);
  if (queue == nullptr || n == 0) return 0;
  MemifRing q;
  if (!MemifQueueRing(dev_, queue, &q)) return 0;
  const uint16_t mask = static_cast<uint16_t>(q.ring_size - 1);
  // The client sends on its C2S ring at the head, into the buffers it laid
  // out (contiguous, so the buffer size is the step between two); the
  // server on its S2C ring at the tail, into buffers whose size the client
  // wrote in each descriptor when it refilled the ring.
  const bool c2s = Load<uint32_t>(queue, kMemifQueueTypeOffset) == kMemifRingC2S;
  uint16_t slot, free_slots;
  if (c2s) {
    slot = __atomic_load_n(q.head, __ATOMIC_RELAXED);
    free_slots = static_cast<uint16_t>(q.ring_size - slot + __atomic_load_n(q.tail, __ATOMIC_ACQUIRE));
  } else {
    slot = __atomic_load_n(q.tail, __ATOMIC_RELAXED);
    free_slots = static_cast<uint16_t>(__atomic_load_n(q.head, __ATOMIC_ACQUIRE) - slot);
  }
  if (free_slots > q.ring_size) free_slots = 0;  // a peer's index out of range: nothing is free
  // A C2S ring whose first buffer is not in the ring's region (a zero-copy
  // client's mbufs, or a peer's write) or whose first two offsets give no
  // step reads as buffers of 0 bytes: every slot is bad.
  const bool laid_out = c2s && __atomic_load_n(&q.desc[0].region, __ATOMIC_RELAXED) == q.region_index;
  const uint32_t first_offset = laid_out ? __atomic_load_n(&q.desc[0].offset, __ATOMIC_RELAXED) : 0;
  const uint32_t c2s_buffer =
      laid_out ? __atomic_load_n(&q.desc[1 & mask].offset, __ATOMIC_RELAXED) - first_offset : 0;
  // A burst of large frames (its first one large) is copied and prefetched as before.
  const bool stream = n >= memif_tx::kStreamBurstFrames && frames[0].len <= memif_tx::kStreamFrameBytes;
  const memif_tx::RingView view{q.desc, mask, q.base, q.region_size, q.region_index, c2s, c2s_buffer, first_offset,
                                stream};
  const uint16_t first = slot;
  const uint64_t bad_before = counters_.bad_descriptors;
  const uint16_t taken = memif_tx::CopyFrames(view, &slot, free_slots, frames, n, bytes, &counters_);
  const uint64_t published = taken - (counters_.bad_descriptors - bad_before);
  if (slot != first) {
    if (stream) _mm_sfence();  // the streamed frames before the index that publishes them
    __atomic_store_n(c2s ? q.head : q.tail, slot, __ATOMIC_RELEASE);
    // The receiver stores its flag, fences, then reads the index
    // (RxWakeup::Arm); we store the index, then read its flag: without a
    // fence here too (DPDK's sender has none) both can miss the other's
    // store and the sleeper is not woken until its timer.
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    // The peer sleeps on the queue's eventfd when it cleared MASK_INT (its
    // interrupt mode); DPDK's own receiver never does.
    if ((__atomic_load_n(reinterpret_cast<uint16_t*>(q.ring + kMemifRingFlagsOffset), __ATOMIC_RELAXED) &
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
    *qbytes += *bytes;
    if (c2s && prefetch_ && taken != 0 && !stream) {
      // The next kPrefetchSlots free slots past the head, from where the
      // last burst's prefetch stopped; as many lines as this burst's last
      // frame took.
      const uint16_t free_after = static_cast<uint16_t>(free_slots - static_cast<uint16_t>(slot - first));
      const uint16_t end = static_cast<uint16_t>(slot + std::min(free_after, memif_tx::kPrefetchSlots));
      const uint16_t from =
          static_cast<uint16_t>(prefetched_ - slot) <= static_cast<uint16_t>(end - slot) ? prefetched_ : slot;
      const uint32_t lines = (frames[taken - 1].len + 63) / 64;
      memif_tx::PrefetchForWrite(view, from, static_cast<uint16_t>(end - from), lines);
      prefetched_ = end;
    }
  }
  return taken;
}

}  // namespace droce::ethdev
