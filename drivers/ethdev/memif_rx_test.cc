// memif_rx::CopyFrames, the copy MemifRx runs on a memif ring, against a
// ring and region laid out in plain memory (no EAL): frames whole across
// chained descriptors and the ring's wrap; a descriptor the peer filled
// with a region, offset or length out of range is dropped and counted, and
// nothing outside the region is read (the region ends at a page that is
// not mapped: a read past it faults).
#include "drivers/ethdev/memif_rx.h"

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/guarded_region.h"

namespace droce::ethdev {
namespace {

using dpdk_private::kMemifDescFlagNext;
using dpdk_private::MemifDesc;

using droce::testing::GuardedRegion;

struct Fixture {
  static constexpr uint16_t kRing = 64;
  static constexpr uint32_t kCapacity = 4352;
  explicit Fixture(size_t region_bytes) : region(region_bytes), desc(kRing), buffers(kRing * size_t{kCapacity}) {
    for (uint16_t i = 0; i < kRing; ++i) out[i] = {buffers.data() + size_t{i} * kCapacity, 0, kCapacity, nullptr};
  }
  // Region 3 is the only one mapped.
  memif_rx::RegionView operator()(uint16_t i) const {
    return i == 3 ? memif_rx::RegionView{region.base(), region.size()} : memif_rx::RegionView{};
  }
  void Set(uint16_t slot, uint16_t flags, uint16_t reg, uint32_t length, uint32_t offset) {
    desc[slot % kRing] = MemifDesc{flags, reg, length, offset, 0};
  }
  uint16_t Copy(uint16_t* slot, uint16_t avail, uint16_t n = kRing) {
    return memif_rx::CopyFrames(desc.data(), kRing - 1, slot, avail, *this, out, n, &bytes, &counters);
  }
  bool Holds(const pktio::Frame& f, uint32_t offset) const {
    return std::memcmp(f.data, region.base() + offset, f.len) == 0;
  }
  GuardedRegion region;
  std::vector<MemifDesc> desc;
  std::vector<uint8_t> buffers;
  pktio::Frame out[kRing];
  uint64_t bytes = 0;
  MemifRxCounters counters;
};

TEST(MemifRxCopy, FramesArriveWholeAcrossChainsAndTheRingsWrap) {
  Fixture x(1 << 20);
  // Frames of 60..4352 bytes in buffers of 1024: up to five descriptors
  // each, the chain of a frame contiguous in the ring but not in the region.
  uint16_t slot = 60, published = 60;
  uint32_t want_bytes = 0;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> sent;
  for (uint32_t k = 0; k < 12; ++k) {
    const uint32_t len = 60 + (k * 977) % 4293;
    std::vector<uint8_t> frame;
    for (uint32_t done = 0; done < len;) {
      const uint32_t chunk = std::min<uint32_t>(1024, len - done);
      const uint32_t offset = (published * 1536u) % (1u << 19);
      x.Set(published, done + chunk < len ? kMemifDescFlagNext : 0, 3, chunk, offset);
      frame.insert(frame.end(), x.region.base() + offset, x.region.base() + offset + chunk);
      done += chunk;
      ++published;
    }
    want_bytes += len;
    sent.emplace_back(len, std::move(frame));
  }
  const uint16_t avail = static_cast<uint16_t>(published - slot);
  ASSERT_LE(avail, Fixture::kRing);
  const uint16_t got = x.Copy(&slot, avail);
  ASSERT_EQ(got, sent.size());
  EXPECT_EQ(slot, published);
  EXPECT_EQ(x.bytes, want_bytes);
  for (uint16_t i = 0; i < got; ++i) {
    ASSERT_EQ(x.out[i].len, sent[i].first) << i;
    EXPECT_EQ(std::memcmp(x.out[i].data, sent[i].second.data(), sent[i].first), 0) << "frame " << i;
  }
  EXPECT_EQ(x.counters.bad_descriptors, 0u);
  EXPECT_EQ(x.counters.too_long, 0u);
}

TEST(MemifRxCopy, OutOfRangeDescriptorsAreDroppedAndCountedNotRead) {
  const uint64_t size = 8192;
  Fixture x(size);
  // Between good frames: an unmapped region, a region number past any
  // table, an offset past the end, a length past the end, an offset+length
  // that wraps 32 bits, a buffer ending one byte past the region, and a
  // chain whose second descriptor is bad (the whole frame goes).
  x.Set(0, 0, 3, 64, 0);
  x.Set(1, 0, 2, 64, 0);
  x.Set(2, 0, 0xffff, 64, 0);
  x.Set(3, 0, 3, 1, size + 1);
  x.Set(4, 0, 3, size + 1, 0);
  x.Set(5, 0, 3, 0x200, 0xffffff00u);
  x.Set(6, 0, 3, 65, size - 64);
  x.Set(7, kMemifDescFlagNext, 3, 100, 0);
  x.Set(8, 0, 3, 100, size);  // offset == size with length 100: past the end
  x.Set(9, 0, 3, 64, size - 64);  // the last 64 bytes: good
  uint16_t slot = 0;
  const uint16_t got = x.Copy(&slot, 10);
  EXPECT_EQ(slot, 10);  // every frame's slots go back, the dropped ones' too
  ASSERT_EQ(got, 2);
  EXPECT_EQ(x.counters.bad_descriptors, 7u);
  EXPECT_EQ(x.out[0].len, 64u);
  EXPECT_TRUE(x.Holds(x.out[0], 0));
  EXPECT_EQ(x.out[1].len, 64u);
  EXPECT_TRUE(x.Holds(x.out[1], size - 64));
  EXPECT_EQ(x.bytes, 128u);
}

TEST(MemifRxCopy, FramesLongerThanTheBufferAreDroppedAndCounted) {
  Fixture x(1 << 16);
  x.Set(0, kMemifDescFlagNext, 3, 4000, 0);
  x.Set(1, 0, 3, Fixture::kCapacity - 4000 + 1, 4096);  // one byte too many
  x.Set(2, kMemifDescFlagNext, 3, 4000, 0);
  x.Set(3, 0, 3, Fixture::kCapacity - 4000, 4096);  // exactly full
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 4), 1);
  EXPECT_EQ(slot, 4);
  EXPECT_EQ(x.counters.too_long, 1u);
  EXPECT_EQ(x.out[0].len, Fixture::kCapacity);
}

// One-descriptor frames (the run the copy takes without chains): one a
// byte longer than its buffer, between frames that fit, is dropped and
// counted, and the run goes on after it.
TEST(MemifRxCopy, AOneDescriptorFrameLongerThanItsBufferIsDroppedMidRun) {
  Fixture x(1 << 16);
  x.Set(0, 0, 3, 64, 0);
  x.Set(1, 0, 3, Fixture::kCapacity, 128);  // exactly full
  x.Set(2, 0, 3, Fixture::kCapacity + 1, 128);  // one byte too many
  x.Set(3, 0, 3, 100, 8192);
  x.Set(4, 0, 3, 60, 9000);
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 5), 4);
  EXPECT_EQ(slot, 5);
  EXPECT_EQ(x.counters.too_long, 1u);
  EXPECT_EQ(x.counters.bad_descriptors, 0u);
  EXPECT_EQ(x.out[1].len, Fixture::kCapacity);
  EXPECT_TRUE(x.Holds(x.out[1], 128));
  EXPECT_EQ(x.out[2].len, 100u);
  EXPECT_TRUE(x.Holds(x.out[2], 8192));
  EXPECT_EQ(x.out[3].len, 60u);
  EXPECT_TRUE(x.Holds(x.out[3], 9000));
  EXPECT_EQ(x.bytes, 64u + Fixture::kCapacity + 100 + 60);
}

TEST(MemifRxCopy, AChainNotYetPublishedWholeStaysInTheRing) {
  Fixture x(1 << 16);
  x.Set(0, 0, 3, 64, 0);
  x.Set(1, kMemifDescFlagNext, 3, 64, 64);
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 2), 1);
  EXPECT_EQ(slot, 1);  // the chain waits for its end
  x.Set(2, 0, 3, 64, 128);
  ASSERT_EQ(x.Copy(&slot, 2), 1);
  EXPECT_EQ(slot, 3);
  EXPECT_EQ(x.out[0].len, 128u);
}

// A sender that sets NEXT but never clears it on a frame's first
// descriptor (DPDK 22.11's eth_memif_tx) finds the slots clear again.
TEST(MemifRxCopy, ChainedSlotsComeBackWithNextCleared) {
  Fixture x(1 << 16);
  x.Set(0, kMemifDescFlagNext, 3, 64, 0);
  x.Set(1, kMemifDescFlagNext, 3, 64, 64);
  x.Set(2, 0, 3, 64, 128);
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 3), 1);
  for (uint16_t i = 0; i < 3; ++i) EXPECT_EQ(x.desc[i].flags, 0) << i;
  // The sender reuses slot 0 for a one-descriptor frame, writing its length only.
  x.desc[0].length = 32;
  x.desc[1].length = 16;
  x.desc[1].flags = 0;
  slot = 0;
  ASSERT_EQ(x.Copy(&slot, 2), 2);
  EXPECT_EQ(x.out[0].len, 32u);
  EXPECT_EQ(x.out[1].len, 16u);
}

TEST(MemifRxCopy, TakesNoMoreFramesThanBuffersGiven) {
  Fixture x(1 << 16);
  for (uint16_t i = 0; i < 5; ++i) x.Set(i, 0, 3, 64, i * 64u);
  uint16_t slot = 0;
  ASSERT_EQ(x.Copy(&slot, 5, 3), 3);
  EXPECT_EQ(slot, 3);
  ASSERT_EQ(x.Copy(&slot, 2, 3), 2);
  EXPECT_TRUE(x.Holds(x.out[1], 4 * 64));
}

// A run of one-descriptor frames longer than the copy checks at once
// (kRunChunk) goes on chunk after chunk, each frame its own bytes.
TEST(MemifRxCopy, ARunLongerThanOneChunkIsCopiedWhole) {
  constexpr uint16_t kRing = 256, kFrames = 2 * memif_rx::kRunChunk + 22;
  GuardedRegion region(kRing * 256);
  std::vector<MemifDesc> desc(kRing);
  std::vector<uint8_t> buffers(size_t{kFrames} * 512);
  std::vector<pktio::Frame> out(kFrames);
  for (uint16_t i = 0; i < kFrames; ++i) out[i] = {buffers.data() + size_t{i} * 512, 0, 512, nullptr};
  for (uint16_t i = 0; i < kRing; ++i) region.base()[i * 256] = static_cast<uint8_t>(i);
  const uint16_t start = 200;  // across the wrap
  for (uint16_t i = 0; i < kFrames; ++i) {
    const uint16_t s = static_cast<uint16_t>(start + i) % kRing;
    desc[s] = MemifDesc{0, 3, 60u + i % 100, s * 256u, 0};
  }
  const auto regions = [&](uint16_t i) {
    return i == 3 ? memif_rx::RegionView{region.base(), region.size()} : memif_rx::RegionView{};
  };
  uint16_t slot = start;
  uint64_t bytes = 0;
  MemifRxCounters counters;
  ASSERT_EQ(memif_rx::CopyFrames(desc.data(), kRing - 1, &slot, kFrames, regions, out.data(), kFrames, &bytes,
                                 &counters),
            kFrames);
  EXPECT_EQ(slot, static_cast<uint16_t>(start + kFrames));
  uint64_t want_bytes = 0;
  for (uint16_t i = 0; i < kFrames; ++i) {
    const uint16_t s = static_cast<uint16_t>(start + i) % kRing;
    ASSERT_EQ(out[i].len, 60u + i % 100) << i;
    EXPECT_EQ(std::memcmp(out[i].data, region.base() + s * 256u, out[i].len), 0) << i;
    want_bytes += out[i].len;
  }
  EXPECT_EQ(bytes, want_bytes);
}

// Random descriptors (a peer writing anything): nothing outside the region
// is read (the guard page), every frame delivered is the bytes its
// descriptors name, and each whole chain is delivered or counted once.
TEST(MemifRxCopy, FuzzedDescriptorsNeverReadOutsideTheRegion) {
  const uint64_t size = 3 * 4096 + 100;
  Fixture x(size);
  std::mt19937 rng(12345);
  const auto pick = [&](uint32_t mod) { return static_cast<uint32_t>(rng() % mod); };
  for (int round = 0; round < 20000; ++round) {
    const uint16_t avail = static_cast<uint16_t>(1 + pick(Fixture::kRing));
    const uint16_t start = static_cast<uint16_t>(rng());
    for (uint16_t i = 0; i < avail; ++i) {
      const uint16_t flags = pick(3) == 0 ? kMemifDescFlagNext : static_cast<uint16_t>(pick(4) == 0 ? rng() : 0);
      const uint16_t reg = pick(4) == 0 ? static_cast<uint16_t>(rng()) : 3;
      const uint32_t length = pick(4) == 0 ? static_cast<uint32_t>(rng()) : pick(static_cast<uint32_t>(size) + 2);
      const uint32_t offset = pick(4) == 0 ? static_cast<uint32_t>(rng()) : pick(static_cast<uint32_t>(size) + 2);
      x.Set(static_cast<uint16_t>(start + i), flags, reg, length, offset);
    }
    // What it should do, descriptor by descriptor.
    uint32_t chains = 0, good = 0;
    std::vector<std::vector<uint8_t>> want;
    uint16_t expect_slot = start;
    {
      std::vector<uint8_t> frame;
      bool ok = true;
      for (uint16_t i = 0; i < avail; ++i) {
        const MemifDesc& d = x.desc[static_cast<uint16_t>(start + i) % Fixture::kRing];
        if (d.region != 3 || d.offset > size || d.length > size - d.offset ||
            frame.size() + d.length > Fixture::kCapacity) {
          ok = false;
        } else if (ok) {
          frame.insert(frame.end(), x.region.base() + d.offset, x.region.base() + d.offset + d.length);
        }
        if ((d.flags & kMemifDescFlagNext) == 0) {
          ++chains;
          if (ok) ++good, want.push_back(frame);
          frame.clear();
          ok = true;
          expect_slot = static_cast<uint16_t>(start + i + 1);
        }
      }
    }
    const MemifRxCounters before = x.counters;
    uint16_t slot = start;
    const uint16_t got = x.Copy(&slot, avail);
    ASSERT_EQ(slot, expect_slot) << "round " << round;
    ASSERT_EQ(got, good) << "round " << round;
    ASSERT_EQ(x.counters.bad_descriptors - before.bad_descriptors + x.counters.too_long - before.too_long,
              chains - good);
    for (uint16_t i = 0; i < got; ++i) {
      // As vectors: a zero-length frame's want[i].data() may be null, which memcmp may not take.
      ASSERT_EQ(std::vector<uint8_t>(x.out[i].data, x.out[i].data + x.out[i].len), want[i]) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace droce::ethdev
