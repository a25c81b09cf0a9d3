// Fixed-capacity FIFO ring used for send, receive and shared receive queues.
// Owned by one lcore (no atomics): the verbs layer posts and the poll loop
// consumes on the same thread, or hands over under the provider's own lock.
// Indices are free-running 32-bit counters; the slot is index & mask.
#ifndef DROCE_LIB_QUEUE_RING_H_
#define DROCE_LIB_QUEUE_RING_H_

#include <bit>
#include <cstdint>
#include <vector>

namespace droce::queue {

template <typename T>
class Ring {
 public:
  // Capacity is rounded up to a power of two; `limit` is the usable depth
  // (what the user asked for), so a ring of 100 accepts exactly 100.
  explicit Ring(uint32_t depth = 0) { Reset(depth); }

  void Reset(uint32_t depth) {
    const uint32_t cap = std::bit_ceil(depth < 1 ? 1u : depth);
    slots_.assign(cap, T{});
    mask_ = cap - 1;
    limit_ = depth;
    head_ = tail_ = 0;
  }

  uint32_t size() const { return tail_ - head_; }
  uint32_t depth() const { return limit_; }
  bool empty() const { return head_ == tail_; }
  bool full() const { return size() >= limit_; }

  // Absolute indices: head() is the oldest element, tail() one past the newest.
  uint32_t head() const { return head_; }
  uint32_t tail() const { return tail_; }
  T& at(uint32_t index) { return slots_[index & mask_]; }
  const T& at(uint32_t index) const { return slots_[index & mask_]; }
  T& front() { return at(head_); }

  // Returns the slot to fill, or nullptr when full; Commit() publishes it.
  T* Reserve() { return full() ? nullptr : &slots_[tail_ & mask_]; }
  void Commit() { ++tail_; }
  bool Push(const T& v) {
    T* slot = Reserve();
    if (slot == nullptr) return false;
    *slot = v;
    Commit();
    return true;
  }
  void Pop() { ++head_; }

 private:
  std::vector<T> slots_;
  uint32_t mask_ = 0;
  uint32_t limit_ = 0;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
};

}  // namespace droce::queue

#endif  // DROCE_LIB_QUEUE_RING_H_
