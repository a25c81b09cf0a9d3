// memif_tx::CopyFrames, the copy MemifTx runs into a memif ring, against a
// ring and region laid out in plain memory (no EAL): frames arrive whole,
// in one descriptor when they fit its buffer and chained with
// MEMIF_DESC_FLAG_NEXT when not, across the ring's wrap, on the client's
// C2S ring (buffers of one size) and the server's S2C ring (each
// descriptor's length its buffer's); a descriptor the peer wrote out of
// range drops its frame (counted) and nothing outside the region is
// written (the region ends at a page that is not mapped: a write past it
// faults); a chain that finds no free slot leaves its frame untaken. The
// C2S buffers the transmit prefetches are computed from the client's
// layout and never lie outside the region, whatever the peer wrote. A
// streamed burst's frames (non-temporal stores) arrive the same, and the
// stream writes nothing past the frame's last line or its buffer.
#include "drivers/ethdev/memif_tx.h"

#include <emmintrin.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/guarded_region.h"

namespace droce::ethdev {
namespace {

using dpdk_private::kMemifDescFlagNext;
using dpdk_private::MemifDesc;

using droce::testing::GuardedRegion;

constexpr uint16_t kRing = 16;
constexpr uint16_t kRegion = 2;

struct Fixture {
  // A C2S ring (buffers of `buffer` bytes laid out one after another) or
  // an S2C ring whose descriptors the caller fills (Set).
  Fixture(bool c2s, uint32_t buffer) : region(size_t{kRing} * buffer), desc(kRing) {
    view = {desc.data(), kRing - 1, region.base(), region.size(), kRegion, c2s, c2s ? buffer : 0};
    for (uint16_t i = 0; i < kRing; ++i) desc[i] = MemifDesc{0, kRegion, buffer, i * buffer, 0};
  }
  void Set(uint16_t slot, uint16_t reg, uint32_t length, uint32_t offset) {
    desc[slot % kRing] = MemifDesc{0, reg, length, offset, 0};
  }
  // Frames of the given lengths, each byte a function of the frame's number and position.
  void Build(const std::vector<uint32_t>& lens) {
    storage.clear();
    frames.clear();
    for (size_t k = 0; k < lens.size(); ++k) {
      storage.emplace_back(lens[k]);
      for (uint32_t i = 0; i < lens[k]; ++i) storage.back()[i] = Byte(static_cast<uint32_t>(k), i);
    }
    // An empty frame still points at memory, as the device's frames do
    // (memcpy's source may not be null, even for no bytes).
    static uint8_t empty_frame_byte = 0;
    for (auto& s : storage) {
      frames.push_back({s.empty() ? &empty_frame_byte : s.data(), static_cast<uint32_t>(s.size()), 0, nullptr});
    }
  }
  static uint8_t Byte(uint32_t k, uint32_t i) { return static_cast<uint8_t>(k * 131 + i * 7 + (i >> 8) + 1); }
  uint16_t Copy(uint16_t* slot, uint16_t free_slots) {
    return memif_tx::CopyFrames(view, slot, free_slots, frames.data(), static_cast<uint16_t>(frames.size()), &bytes,
                                &counters);
  }
  // The frame read back from the descriptors at *slot on, as a receiver
  // does; moves *slot past its chain.
  std::vector<uint8_t> Read(uint16_t* slot) const {
    std::vector<uint8_t> out;
    for (;;) {
      const MemifDesc& d = desc[*slot % kRing];
      ++*slot;
      out.insert(out.end(), region.base() + d.offset, region.base() + d.offset + d.length);
      if ((d.flags & kMemifDescFlagNext) == 0) return out;
    }
  }
  GuardedRegion region;
  std::vector<MemifDesc> desc;
  memif_tx::RingView view;
  std::vector<std::vector<uint8_t>> storage;
  std::vector<pktio::Frame> frames;
  uint64_t bytes = 0;
  MemifTxCounters counters;
};

// Frames of 0..1,300 bytes in 512-byte buffers, from slot 10 of 16 (the
// wrap comes mid-burst, and inside a chain): one descriptor for those that
// fit, two or three chained for the rest, every byte where it belongs.
TEST(MemifTxCopy, FramesArriveWholeInOneDescriptorOrAChainBothRings) {
  for (const bool c2s : {true, false}) {
    Fixture x(c2s, 512);
    x.Build({138, 512, 0, 513, 1300, 60});
    const uint16_t start = 10;
    uint16_t slot = start;
    ASSERT_EQ(x.Copy(&slot, kRing), 6) << c2s;
    EXPECT_EQ(slot, start + 1 + 1 + 1 + 2 + 3 + 1) << c2s;
    EXPECT_EQ(x.bytes, 138u + 512 + 0 + 513 + 1300 + 60);
    EXPECT_EQ(x.counters.bad_descriptors, 0u);
    uint16_t at = start;
    for (size_t k = 0; k < x.storage.size(); ++k) {
      const uint16_t first = at;
      EXPECT_EQ(x.Read(&at), x.storage[k]) << "frame " << k << (c2s ? " C2S" : " S2C");
      EXPECT_EQ(at - first, x.storage[k].empty() ? 1 : (x.storage[k].size() + 511) / 512) << "frame " << k;
    }
  }
}

// The S2C ring's buffers are each descriptor's length: a frame that fits
// one takes it alone, the same frame after a shorter buffer takes a chain.
TEST(MemifTxCopy, AnS2cFrameFillsEachBufferToTheLengthItsDescriptorGives) {
  Fixture x(/*c2s=*/false, 512);
  x.Set(0, kRegion, 200, 0);
  x.Set(1, kRegion, 100, 512);
  x.Set(2, kRegion, 512, 1024);
  x.Build({200, 200});
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 3), 2);
  EXPECT_EQ(slot, 3);
  EXPECT_EQ(x.desc[0].length, 200u);
  EXPECT_EQ(x.desc[0].flags, 0);
  EXPECT_EQ(x.desc[1].length, 100u);
  EXPECT_EQ(x.desc[1].flags, kMemifDescFlagNext);
  EXPECT_EQ(x.desc[2].length, 100u);
  uint16_t at = 0;
  EXPECT_EQ(x.Read(&at), x.storage[0]);
  EXPECT_EQ(x.Read(&at), x.storage[1]);
}

// Descriptors a peer wrote out of range (another region, an offset past
// the end, a buffer that ends past it, a length of 0, an offset+length
// that wraps 32 bits): the frame is taken and dropped, counted, its slot
// not published, and nothing is written outside the region.
TEST(MemifTxCopy, OutOfRangeDescriptorsDropTheFrameAndWriteNothing) {
  struct Bad {
    uint16_t reg;
    uint32_t length, offset;
  };
  for (const Bad& b : {Bad{kRegion + 1, 512, 0}, Bad{kRegion, 64, kRing * 512 + 1},
                       Bad{kRegion, 513, kRing * 512 - 512}, Bad{kRegion, 0, 0}, Bad{kRegion, 0x200, 0xffffff00u}}) {
    Fixture x(/*c2s=*/false, 512);
    x.Set(1, b.reg, b.length, b.offset);
    x.Build({64, 64, 64});
    uint16_t slot = 0;
    // Frame 0 in slot 0; frame 1 meets the bad slot 1 and is dropped;
    // frame 2 finds slot 1 again, still bad.
    EXPECT_EQ(x.Copy(&slot, 4), 3) << b.offset;
    EXPECT_EQ(slot, 1) << b.offset;
    EXPECT_EQ(x.counters.bad_descriptors, 2u) << b.offset;
    EXPECT_EQ(x.bytes, 64u) << b.offset;
  }
  // On the C2S ring the buffers are where the layout puts them, each of the
  // ring's buffer size: a first offset (the peer can write descriptor 0,
  // which Send reads it from) that leaves less than a buffer before the
  // region's end makes slot 0 bad.
  Fixture x(/*c2s=*/true, 512);
  x.view.c2s_first_offset = kRing * 512 - 511;
  x.Build({60});
  uint16_t slot = 0;
  EXPECT_EQ(x.Copy(&slot, 1), 1);
  EXPECT_EQ(slot, 0);
  EXPECT_EQ(x.counters.bad_descriptors, 1u);
}

// The C2S ring's descriptors are the client's: whatever a peer wrote into
// them (another region, an offset anywhere), a frame goes to its slot's
// buffer as laid out, and the descriptor is written whole to say so.
TEST(MemifTxCopy, C2sDescriptorsAreWrittenWholeNotRead) {
  Fixture x(/*c2s=*/true, 512);
  x.Set(1, kRegion + 1, 7, 0xffffff00u);
  x.Set(2, kRegion, 0, 0);
  x.Set(3, kRegion, 512, 5 * 512);
  x.Build({138, 600, 60});
  uint16_t slot = 1;
  ASSERT_EQ(x.Copy(&slot, 4), 3);
  EXPECT_EQ(slot, 5);
  EXPECT_EQ(x.counters.bad_descriptors, 0u);
  for (uint16_t s = 1; s < 5; ++s) {
    EXPECT_EQ(x.desc[s].region, kRegion) << s;
    EXPECT_EQ(x.desc[s].offset, s * 512u) << s;
  }
  EXPECT_EQ(x.desc[2].flags, kMemifDescFlagNext);
  uint16_t at = 1;
  for (size_t k = 0; k < x.storage.size(); ++k) EXPECT_EQ(x.Read(&at), x.storage[k]) << k;
}

// A chain that finds no free slot for its rest leaves its frame untaken
// (the caller keeps it), the frames before it published.
TEST(MemifTxCopy, AChainWithoutRoomForItsRestIsNotTaken) {
  Fixture x(/*c2s=*/true, 512);
  x.Build({100, 1000, 100});
  uint16_t slot = 0;
  EXPECT_EQ(x.Copy(&slot, 2), 1);
  EXPECT_EQ(slot, 1);
  EXPECT_EQ(x.bytes, 100u);
  EXPECT_EQ(x.counters.bad_descriptors, 0u);
}

// Random descriptors on the S2C ring (a peer writing anything) and frames
// of random lengths: nothing outside the region is written (the guard
// page), and what the copy publishes is the frames it took, whole, in order.
TEST(MemifTxCopy, FuzzedDescriptorsNeverWriteOutsideTheRegion) {
  Fixture x(/*c2s=*/false, 512);
  const uint64_t size = x.region.size();
  std::mt19937 rng(4321);
  const auto pick = [&](uint32_t mod) { return static_cast<uint32_t>(rng() % mod); };
  int checked = 0, dropping = 0;  // rounds whose frames were read back; rounds that dropped some
  for (int round = 0; round < 5000; ++round) {
    for (uint16_t i = 0; i < kRing; ++i) {
      // Mostly a buffer within the slot's own 512 bytes; now and then
      // anything, or anywhere in (or just past) the region.
      const uint16_t reg = pick(16) == 0 ? static_cast<uint16_t>(rng()) : kRegion;
      const uint32_t length = pick(16) == 0 ? static_cast<uint32_t>(rng()) : pick(16) == 0 ? pick(1025) : pick(449);
      const uint32_t offset = pick(16) == 0   ? static_cast<uint32_t>(rng())
                              : pick(16) == 0 ? pick(static_cast<uint32_t>(size) + 2)
                                              : i * 512u + pick(64);
      x.Set(i, reg, length, offset);
    }
    std::vector<uint32_t> lens;
    for (uint32_t k = pick(6) + 1; k > 0; --k) lens.push_back(pick(1500));
    x.Build(lens);
    const MemifTxCounters before = x.counters;
    const uint16_t start = static_cast<uint16_t>(rng());
    uint16_t slot = start;
    const uint16_t free_slots = static_cast<uint16_t>(1 + pick(kRing));
    const uint16_t taken = x.Copy(&slot, free_slots);
    ASSERT_LE(taken, lens.size());
    const uint64_t dropped = x.counters.bad_descriptors - before.bad_descriptors;
    // Dropped frames publish nothing: the published chains are the taken
    // frames that were not dropped, read back whole (this order only when
    // nothing was dropped), unless two of the free slots' buffers overlap
    // (a later frame's bytes over an earlier one's, published or not: the
    // peer's doing).
    uint16_t at = start;
    uint64_t published_bytes = 0;
    std::vector<std::vector<uint8_t>> got;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (uint16_t i = 0; i < free_slots; ++i) {
      const MemifDesc& d = x.desc[(start + i) % kRing];
      spans.emplace_back(d.offset, uint64_t{d.offset} + d.length);
    }
    for (uint16_t k = 0; dropped == 0 && k < taken; ++k) {
      got.push_back(x.Read(&at));
      published_bytes += got.back().size();
    }
    bool overlap = false;
    for (size_t i = 0; i < spans.size(); ++i) {
      for (size_t j = 0; j < i; ++j) overlap |= spans[i].first < spans[j].second && spans[j].first < spans[i].second;
    }
    for (size_t k = 0; !overlap && k < got.size(); ++k) {
      ASSERT_EQ(got[k], x.storage[k]) << "round " << round << " frame " << k;
    }
    checked += !overlap && taken > 0 && dropped == 0;
    dropping += dropped != 0;
    if (dropped == 0) {
      ASSERT_EQ(at, slot) << "round " << round;
      ASSERT_EQ(x.bytes, published_bytes) << "round " << round;
    }
  }
  // The draw gives both kinds of round often enough to mean something.
  EXPECT_GT(checked, 200);
  EXPECT_GT(dropping, 200);
  std::printf("rounds read back %d, with drops %d\n", checked, dropping);
}

// The view with the C2S ring's first buffer at `first` (what a peer's
// write of the first descriptor's offset makes of it).
memif_tx::RingView FirstAt(memif_tx::RingView v, uint32_t first) {
  v.c2s_first_offset = first;
  return v;
}

// The C2S buffer of a slot as the client lays the ring out (buffer 0 at the
// first descriptor's offset, one buffer size apart), the slot taken modulo
// the ring: the same bytes CopyFrames writes the slot's frame to.
TEST(MemifTxPrefetch, C2sBufferIsTheSlotsBufferAsLaidOut) {
  Fixture x(/*c2s=*/true, 512);
  for (const uint16_t slot : {0, 1, 7, 15, 16, 23, 65535}) {
    EXPECT_EQ(memif_tx::C2sBuffer(x.view, slot, 256), x.region.base() + (slot % kRing) * 512) << slot;
    EXPECT_EQ(memif_tx::C2sBuffer(x.view, slot, 512), x.region.base() + (slot % kRing) * 512) << slot;
  }
  // Where CopyFrames puts a frame is where C2sBuffer points.
  x.Build({138, 60});
  uint16_t slot = 14;
  ASSERT_EQ(x.Copy(&slot, 2), 2);
  EXPECT_EQ(std::memcmp(memif_tx::C2sBuffer(x.view, 14, 138), x.storage[0].data(), 138), 0);
  EXPECT_EQ(std::memcmp(memif_tx::C2sBuffer(x.view, 15, 60), x.storage[1].data(), 60), 0);
}

// What a peer can write into the first two descriptors (the first offset,
// and with the second the step) never yields a span outside the region:
// an offset past its end, a step of 0 or beyond 32 bits' wrap, more bytes
// than a buffer; and at random, every span returned is written whole (the
// guard page faults a write past the region's end) and lies in the region.
TEST(MemifTxPrefetch, C2sBufferNeverPointsOutsideTheRegion) {
  Fixture x(/*c2s=*/true, 512);
  const uint64_t size = x.region.size();
  EXPECT_EQ(memif_tx::C2sBuffer(FirstAt(x.view, kRing * 512 - 511), 0, 512), nullptr);
  EXPECT_EQ(memif_tx::C2sBuffer(FirstAt(x.view, kRing * 512), 0, 1), nullptr);
  EXPECT_EQ(memif_tx::C2sBuffer(x.view, 0, 513), nullptr);
  EXPECT_EQ(memif_tx::C2sBuffer(FirstAt(x.view, 0xffffff00u), 1, 64), nullptr);
  EXPECT_NE(memif_tx::C2sBuffer(FirstAt(x.view, kRing * 512 - 512), 0, 512), nullptr);
  memif_tx::RingView v = x.view;
  v.c2s_buffer = 0;
  EXPECT_EQ(memif_tx::C2sBuffer(v, 0, 0), nullptr);
  v.c2s_buffer = 0xfffffe00u;  // desc[1].offset - desc[0].offset wrapped
  EXPECT_EQ(memif_tx::C2sBuffer(FirstAt(v, 512), 1, 64), nullptr);
  std::mt19937 rng(99);
  int inside = 0;
  for (int round = 0; round < 20000; ++round) {
    v.c2s_buffer = rng() % 4 == 0 ? static_cast<uint32_t>(rng()) : 1 + rng() % 1024;
    const uint32_t first = rng() % 4 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % (size + 2));
    const uint16_t slot = static_cast<uint16_t>(rng());
    const uint32_t bytes = rng() % 300;
    uint8_t* b = memif_tx::C2sBuffer(FirstAt(v, first), slot, bytes);
    if (b == nullptr) continue;
    ASSERT_GE(b, x.region.base()) << round;
    ASSERT_LE(b + bytes, x.region.base() + size) << round;
    std::memset(b, 0xa5, bytes);
    ++inside;
  }
  EXPECT_GT(inside, 2000);
}

// PrefetchForWrite is a hint: over fuzzed first offsets and steps, across
// the wrap and past the region's end, it faults on nothing and leaves the
// ring and region as they were; frames copied after it arrive whole.
TEST(MemifTxPrefetch, PrefetchingChangesNothingAndFramesStillArriveWhole) {
  Fixture x(/*c2s=*/true, 512);
  const std::vector<uint8_t> region_before(x.region.base(), x.region.base() + x.region.size());
  const std::vector<MemifDesc> desc_before = x.desc;
  std::mt19937 rng(7);
  memif_tx::RingView v = x.view;
  for (int round = 0; round < 2000; ++round) {
    v.c2s_buffer = rng() % 2 ? 512 : static_cast<uint32_t>(rng());
    memif_tx::PrefetchForWrite(FirstAt(v, static_cast<uint32_t>(rng() % 2 ? rng() % 1024 : rng())),
                               static_cast<uint16_t>(rng()), static_cast<uint16_t>(rng() % (2 * kRing)),
                               static_cast<uint32_t>(rng() % 64));
  }
  EXPECT_EQ(std::memcmp(x.region.base(), region_before.data(), region_before.size()), 0);
  for (uint16_t i = 0; i < kRing; ++i) EXPECT_EQ(std::memcmp(&x.desc[i], &desc_before[i], sizeof(MemifDesc)), 0) << i;
  memif_tx::PrefetchForWrite(x.view, 12, memif_tx::kPrefetchSlots, 3);
  x.Build({138, 138, 1000, 60, 138, 138});
  uint16_t slot = 12, at = 12;
  ASSERT_EQ(x.Copy(&slot, kRing), 6);
  for (size_t k = 0; k < x.storage.size(); ++k) EXPECT_EQ(x.Read(&at), x.storage[k]) << k;
}

// StreamCopy of every length up to 300 bytes: the bytes arrive, the last
// line is zero past the frame, and nothing after the 64-byte rounding is
// written (a source that ends at a guard page: no read past its end).
TEST(MemifTxStream, StreamCopyWritesTheFrameAndItsPaddingOnly) {
  GuardedRegion dst_region(512), src_region(304);
  for (uint32_t len = 0; len <= 300; ++len) {
    std::memset(dst_region.base(), 0xee, 512);
    uint8_t* src = src_region.base() + src_region.size() - len;  // ends at the guard page
    for (uint32_t i = 0; i < len; ++i) src[i] = Fixture::Byte(len, i);
    memif_tx::StreamCopy(dst_region.base(), src, len);
    _mm_sfence();
    const uint32_t rounded = (len + 63) & ~63u;
    ASSERT_EQ(std::memcmp(dst_region.base(), src, len), 0) << len;
    for (uint32_t i = len; i < rounded; ++i) ASSERT_EQ(dst_region.base()[i], 0) << len << " at " << i;
    for (uint32_t i = rounded; i < 512; ++i) ASSERT_EQ(dst_region.base()[i], 0xee) << len << " at " << i;
  }
}

// A streamed burst on both rings: small frames take the stream, a frame
// over kStreamFrameBytes, a buffer that is not 64-byte aligned and one
// too short for the rounding take memcpy; every frame arrives whole and
// nothing is written past a frame's buffer.
TEST(MemifTxStream, AStreamedBurstArrivesWholeOnBothRingsAndStaysInItsBuffers) {
  for (const bool c2s : {true, false}) {
    Fixture x(c2s, 512);
    if (!c2s) {
      x.Set(3, kRegion, 190, 12 * 512);       // 138 rounds to 192: memcpy
      x.Set(4, kRegion, 200, 13 * 512 + 16);  // not 64-byte aligned: memcpy
      x.Set(5, kRegion, 192, 14 * 512);       // just room for the rounding: stream
    }
    std::memset(x.region.base(), 0xee, x.region.size());
    x.view.stream = true;
    x.Build({138, 60, 300, 138, 138, 138, 0, 256, 1000});
    uint16_t slot = 0;
    ASSERT_EQ(x.Copy(&slot, kRing), 9) << c2s;
    _mm_sfence();
    uint16_t at = 0;
    for (size_t k = 0; k < x.storage.size(); ++k) EXPECT_EQ(x.Read(&at), x.storage[k]) << k << (c2s ? " C2S" : " S2C");
    if (!c2s) {
      EXPECT_EQ(x.region.base()[12 * 512 + 138], 0xee);      // memcpy: nothing past the frame
      EXPECT_EQ(x.region.base()[13 * 512 + 16 + 138], 0xee);  // the same
      EXPECT_EQ(x.region.base()[14 * 512 + 191], 0x00);       // the stream's padding
      EXPECT_EQ(x.region.base()[14 * 512 + 192], 0xee);
    }
    EXPECT_EQ(x.region.base()[0 * 512 + 191], 0x00);  // 138 bytes streamed: padded to 192
    EXPECT_EQ(x.region.base()[0 * 512 + 192], 0xee);
    EXPECT_EQ(x.region.base()[1 * 512 + 63], 0x00);  // 60 bytes streamed: padded to 64
    EXPECT_EQ(x.region.base()[1 * 512 + 64], 0xee);
    EXPECT_EQ(x.region.base()[2 * 512 + 300], 0xee);  // 300 bytes: memcpy, no padding
  }
}

}  // namespace
}  // namespace droce::ethdev
