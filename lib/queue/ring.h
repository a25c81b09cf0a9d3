// Fixed-capacity FIFO ring used for send, receive and shared receive queues
// and for completion queues.
//
// Single producer, single consumer, across threads: the producer fills
// at(tail()) and publishes it with Commit() (a release store of the tail);
// the consumer reads from head() after an acquire load of the tail and hands
// slots back with Pop() (a release store of the head), which the producer's
// full() reads with an acquire load. On x86 these are plain movs: no locked
// instruction, no fence. Several producers (or consumers) need their own
// lock around their side (CompletionQueue's consumer lock); a ring used by
// one thread, or handed over under one lock, pays nothing for this.
// Indices are free-running 32-bit counters; the slot is index & mask.
// Reset() and the copies are not concurrent with anything.
#ifndef DROCE_LIB_QUEUE_RING_H_
#define DROCE_LIB_QUEUE_RING_H_

#include <atomic>
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
  Ring(const Ring& o) { *this = o; }
  Ring& operator=(const Ring& o) {
    if (this != &o) {
      slots_ = o.slots_;
      mask_ = o.mask_;
      limit_ = o.limit_;
      head_.store(o.head(), std::memory_order_relaxed);
      tail_.store(o.tail(), std::memory_order_relaxed);
    }
    return *this;
  }

  void Reset(uint32_t depth) {
    const uint32_t cap = std::bit_ceil(depth < 1 ? 1u : depth);
    slots_.assign(cap, T{});
    mask_ = cap - 1;
    limit_ = depth;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_release);
  }

  uint32_t size() const { return tail() - head(); }
  uint32_t depth() const { return limit_; }
  bool empty() const { return head() == tail(); }
  bool full() const { return size() >= limit_; }

  // Absolute indices: head() is the oldest element, tail() one past the newest.
  uint32_t head() const { return head_.load(std::memory_order_acquire); }
  uint32_t tail() const { return tail_.load(std::memory_order_acquire); }
  T& at(uint32_t index) { return slots_[index & mask_]; }
  const T& at(uint32_t index) const { return slots_[index & mask_]; }
  T& front() { return at(head_.load(std::memory_order_relaxed)); }

  // Producer: the slot to fill, or nullptr when full; Commit() publishes it.
  T* Reserve() { return full() ? nullptr : &slots_[tail_.load(std::memory_order_relaxed) & mask_]; }
  void Commit() { tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  bool Push(const T& v) {
    T* slot = Reserve();
    if (slot == nullptr) return false;
    *slot = v;
    Commit();
    return true;
  }
  // Consumer: hands the oldest `n` slots back to the producer.
  void Pop(uint32_t n = 1) { head_.store(head_.load(std::memory_order_relaxed) + n, std::memory_order_release); }

 private:
  std::vector<T> slots_;
  uint32_t mask_ = 0;
  uint32_t limit_ = 0;
  std::atomic<uint32_t> head_{0};  // written by the consumer
  std::atomic<uint32_t> tail_{0};  // written by the producer
};

}  // namespace droce::queue

#endif  // DROCE_LIB_QUEUE_RING_H_
