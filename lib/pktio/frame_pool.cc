#include "pktio/frame_pool.h"

#include <new>

namespace droce::pktio {

FramePool::FramePool(uint32_t count, uint32_t buffer_bytes)
    : count_(count), buffer_bytes_((buffer_bytes + 63) & ~63u) {
  // Not value-initialised: large allocations come from fresh anonymous
  // pages, which stay unmapped until a buffer is first written.
  base_ = static_cast<uint8_t*>(::operator new(size_t{count_} * buffer_bytes_, std::align_val_t{64}));
  free_ = std::make_unique<uint8_t*[]>(count_);
  for (uint32_t i = count_; i-- > 0;) free_[top_++] = base_ + size_t{i} * buffer_bytes_;  // buffer 0 goes out first
}

FramePool::~FramePool() { ::operator delete(base_, std::align_val_t{64}); }

uint16_t FramePool::Alloc(Frame* frames, uint16_t n) {
  const uint16_t got = n < top_ ? n : static_cast<uint16_t>(top_);
  uint8_t* const* from = free_.get() + top_;
  for (uint16_t i = 0; i < got; ++i) {
    uint8_t* b = *--from;
    frames[i] = Frame{b, 0, buffer_bytes_, b};
  }
  top_ -= got;
  const uint32_t out = count_ - top_;
  if (out > high_water_) high_water_ = out;
  return got;
}

void FramePool::Free(const Frame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    const void* h = frames[i].handle;
    if (!Owns(h) || (reinterpret_cast<uintptr_t>(h) - reinterpret_cast<uintptr_t>(base_)) % buffer_bytes_ != 0) {
      ++foreign_frees_;
      continue;
    }
    FreeOwned(h);
  }
}

}  // namespace droce::pktio
