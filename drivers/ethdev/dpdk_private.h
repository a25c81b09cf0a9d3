// DPDK 22.11's private layouts (x86-64) that drivers/ethdev reads where no
// public API reaches: the ethdev's process-private data and net_memif's
// queue, region and ring structures (drivers/net/memif/{memif.h,
// rte_eth_memif.h}, lib/ethdev/ethdev_driver.h). Every user checks them at
// run time (DPDK version, driver name, back-pointers, the ring cookie) and
// falls back to the public API when a check fails.
#ifndef DROCE_DRIVERS_ETHDEV_DPDK_PRIVATE_H_
#define DROCE_DRIVERS_ETHDEV_DPDK_PRIVATE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace droce::ethdev::dpdk_private {

inline constexpr size_t kEthDevDataOffset = 48;            // rte_eth_dev::data
inline constexpr size_t kEthDevProcessPrivateOffset = 56;  // rte_eth_dev::process_private

inline constexpr size_t kMemifQueueTypeOffset = 16;        // memif_queue::type (enum)
inline constexpr size_t kMemifQueueRegionOffset = 20;      // memif_queue::region (u16)
inline constexpr size_t kMemifQueueInPortOffset = 22;      // memif_queue::in_port (u16)
inline constexpr size_t kMemifQueueRingOffsetOffset = 24;  // memif_queue::ring_offset (u32)
inline constexpr size_t kMemifQueueLastHeadOffset = 28;    // memif_queue::last_head (u16)
inline constexpr size_t kMemifQueueLastTailOffset = 30;    // memif_queue::last_tail (u16)
inline constexpr size_t kMemifQueuePacketsOffset = 40;     // memif_queue::n_pkts (u64)
inline constexpr size_t kMemifQueueBytesOffset = 48;       // memif_queue::n_bytes (u64)
inline constexpr size_t kMemifQueueIntrHandleOffset = 56;  // memif_queue::intr_handle
inline constexpr size_t kMemifQueueLog2RingSizeOffset = 64;  // memif_queue::log2_ring_size (u8)
inline constexpr size_t kMemifMaxRegions = 256;            // pmd_process_private::regions[]
inline constexpr size_t kMemifRegionSizeOffset = 8;        // memif_region::region_size (u64)
inline constexpr size_t kMemifRegionFdOffset = 16;         // memif_region::fd (int)
inline constexpr uint32_t kMemifCookie = 0x3E31F20;        // memif_ring_t::cookie
inline constexpr size_t kMemifRingFlagsOffset = 4;         // memif_ring_t::flags (u16)
inline constexpr size_t kMemifRingHeadOffset = 6;          // memif_ring_t::head (u16)
inline constexpr size_t kMemifRingTailOffset = 64;         // memif_ring_t::tail (u16), its own cache line
inline constexpr uint32_t kMemifRingC2S = 0;               // memif_ring_type_t
inline constexpr uint32_t kMemifRingS2C = 1;
inline constexpr size_t kMemifRingHeaderBytes = 128;       // memif_ring_t::desc[] starts here
inline constexpr uint16_t kMemifRingFlagMaskInt = 1;
inline constexpr uint16_t kMemifDescFlagNext = 1;

// memif_desc_t.
struct MemifDesc {
  uint16_t flags;
  uint16_t region;
  uint32_t length;
  uint32_t offset;
  uint32_t metadata;
};
static_assert(sizeof(MemifDesc) == 16);

template <typename T>
T Load(const void* base, size_t offset) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + offset, sizeof v);
  return v;
}

// The memif_region a net_memif queue's ring lies in (memif_get_ring_from_
// queue's first step: the device's pmd_process_private::regions[queue's
// region]), nullptr while not connected; *index is its number.
// The device's memif_region number `index` (pmd_process_private::regions[]):
// false when there is no such slot; *region nullptr while it is not mapped.
inline bool MemifRegionAt(const uint8_t* dev, uint16_t index, const uint8_t** region) {
  const auto* const* regions = Load<const uint8_t* const*>(dev, kEthDevProcessPrivateOffset);
  if (regions == nullptr || index >= kMemifMaxRegions) return false;
  *region = regions[index];
  return true;
}

inline const uint8_t* MemifQueueRegion(const uint8_t* dev, const void* queue, uint16_t* index) {
  const uint16_t i = Load<uint16_t>(queue, kMemifQueueRegionOffset);
  const uint8_t* region = nullptr;
  if (!MemifRegionAt(dev, i, &region)) return nullptr;
  *index = i;
  return region;
}

// A net_memif queue's ring as its current connection maps it.
struct MemifRing {
  uint8_t* base;           // the ring's region
  uint64_t region_size;
  uint16_t region_index;
  uint32_t ring_size;      // descriptors, a power of two
  uint8_t* ring;           // memif_ring_t
  uint16_t* head;
  uint16_t* tail;
  MemifDesc* desc;
};

// False while the queue has no ring (not connected) or its ring does not
// lie within its region.
inline bool MemifQueueRing(const uint8_t* dev, const void* queue, MemifRing* q) {
  const uint8_t* region = MemifQueueRegion(dev, queue, &q->region_index);
  if (region == nullptr) return false;
  q->base = Load<uint8_t*>(region, 0);
  q->region_size = Load<uint64_t>(region, kMemifRegionSizeOffset);
  const uint32_t ring_offset = Load<uint32_t>(queue, kMemifQueueRingOffsetOffset);
  const uint8_t log2_size = Load<uint8_t>(queue, kMemifQueueLog2RingSizeOffset);
  if (q->base == nullptr || log2_size == 0 || log2_size > 15) return false;
  q->ring_size = 1u << log2_size;
  if (uint64_t{ring_offset} + kMemifRingHeaderBytes + uint64_t{q->ring_size} * sizeof(MemifDesc) > q->region_size) {
    return false;
  }
  q->ring = q->base + ring_offset;
  q->head = reinterpret_cast<uint16_t*>(q->ring + kMemifRingHeadOffset);
  q->tail = reinterpret_cast<uint16_t*>(q->ring + kMemifRingTailOffset);
  q->desc = reinterpret_cast<MemifDesc*>(q->ring + kMemifRingHeaderBytes);
  return true;
}

// rte_eth_devices[port] (exported, version INTERNAL, declared only in a
// header Debian does not ship), checked against the public fast-path table;
// nullptr with the reason if the layout is not DPDK 22.11's.
const uint8_t* EthDev(uint16_t port, std::string* why_not);

// EthDev of a net_memif port whose queue 0 (RX or TX) is set up and looks
// like DPDK 22.11's memif_queue, running on DPDK 22.11; nullptr with the
// reason otherwise (why_not may be null).
const uint8_t* MemifEthDev(uint16_t port, bool rx, std::string* why_not);

}  // namespace droce::ethdev::dpdk_private

#endif  // DROCE_DRIVERS_ETHDEV_DPDK_PRIVATE_H_
