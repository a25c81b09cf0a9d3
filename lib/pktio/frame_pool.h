// Fixed-size frame buffers for a BurstIo that owns its storage (the link
// between a process and droced: drivers/ethdev/daemon_link.h). No EAL: one
// allocation at construction, whose pages the kernel maps only as buffers
// are first used, and a LIFO free list, so the buffers in use are always
// the same few hot ones and the resident memory is the most ever in use at
// once, not the pool's size.
#ifndef DROCE_LIB_PKTIO_FRAME_POOL_H_
#define DROCE_LIB_PKTIO_FRAME_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "pktio/burst_io.h"

namespace droce::pktio {

class FramePool {
 public:
  // `count` buffers of `buffer_bytes` (rounded up to 64) each.
  FramePool(uint32_t count, uint32_t buffer_bytes);
  ~FramePool();
  FramePool(const FramePool&) = delete;
  FramePool& operator=(const FramePool&) = delete;

  // Up to n empty buffers (len 0, capacity buffer_bytes, handle the buffer).
  uint16_t Alloc(Frame* frames, uint16_t n);
  // Buffers back; a handle that is not one of ours is ignored (counted).
  void Free(const Frame* frames, uint16_t n);

  // Whether `handle` is one of this pool's buffers (a range check: for an
  // owner whose frames come from this pool and from elsewhere).
  bool Owns(const void* handle) const {
    // Unsigned: a handle below the pool wraps to a large offset.
    return reinterpret_cast<uintptr_t>(handle) - reinterpret_cast<uintptr_t>(base_) < size_t{count_} * buffer_bytes_;
  }
  // Takes back one buffer Owns() said is ours, as Alloc handed it out (the
  // handle unchanged: a buffer's start). Inline, for the paths that free
  // every frame they received or sent; it stores the handle as it is, with
  // no division to find its buffer (Free checks the alignment).
  void FreeOwned(const void* handle) {
    if (top_ >= count_) {  // freed twice: the stack never grows past the pool
      ++foreign_frees_;
      return;
    }
    free_[top_++] = static_cast<uint8_t*>(const_cast<void*>(handle));
  }
  uint32_t count() const { return count_; }
  uint32_t available() const { return top_; }
  uint32_t buffer_bytes() const { return buffer_bytes_; }
  // The most buffers ever out at once: what of the pool is resident.
  uint32_t high_water() const { return high_water_; }
  uint64_t foreign_frees() const { return foreign_frees_; }

 private:
  uint8_t* base_ = nullptr;
  uint32_t count_;
  uint32_t buffer_bytes_;
  // A stack of the free buffers' starts, free_[0, top_): the last freed
  // goes out first. Pointers, not indices: taking and giving back a buffer
  // is a load or a store, with no multiplication or division by the
  // buffer size.
  std::unique_ptr<uint8_t*[]> free_;
  uint32_t top_ = 0;
  uint32_t high_water_ = 0;
  uint64_t foreign_frees_ = 0;
};

}  // namespace droce::pktio

#endif  // DROCE_LIB_PKTIO_FRAME_POOL_H_
