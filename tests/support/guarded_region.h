// Test memory that ends where an inaccessible page begins: a read or write
// one byte past it faults. For the copies in and out of shared rings
// (memif_rx_test, memif_tx_test), whose bounds checks it proves.
#ifndef DROCE_TESTS_SUPPORT_GUARDED_REGION_H_
#define DROCE_TESTS_SUPPORT_GUARDED_REGION_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include <gtest/gtest.h>

namespace droce::testing {

// `size` bytes, filled with a pattern of their offsets, that end where an
// inaccessible page begins.
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t size) : size_(size) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    span_ = (size + page_ - 1) / page_ * page_ + page_;
    map_ = static_cast<uint8_t*>(mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    EXPECT_NE(map_, MAP_FAILED);
    EXPECT_EQ(mprotect(map_ + span_ - page_, page_, PROT_NONE), 0);
    base_ = map_ + span_ - page_ - size;
    for (size_t i = 0; i < size; ++i) base_[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
  }
  ~GuardedRegion() { munmap(map_, span_); }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }

 private:
  size_t size_, page_, span_;
  uint8_t* map_;
  uint8_t* base_;
};

}  // namespace droce::testing

#endif  // DROCE_TESTS_SUPPORT_GUARDED_REGION_H_
