// Fixed-capacity FIFO ring used for send, receive and shared receive queues.
// Owned by one thread at a time (the engine's): it pushes, reads and pops
// with plain loads and stores. A Ring<T, /*kShared=*/true> may also take
// entries from one producer that does not own it (a verbs thread posting
// without the device lock, doc/verbs.md "Posting without the device lock"):
// the producer fills ProducerSlot() and Publish()es it; the owner appends
// what was published with TakePublished(). Such a ring is filled only that
// way (never Push or Reserve/Commit, whose slot could be one a producer has
// filled). A plain ring (CQs, the responder's actions) pays nothing for it.
// Indices are free-running 32-bit counters; the slot is index & mask.
#ifndef DROCE_LIB_QUEUE_RING_H_
#define DROCE_LIB_QUEUE_RING_H_

#include <atomic>
#include <bit>
#include <type_traits>
#include <utility>
#include <cstdint>
#include <vector>

namespace droce::queue {

template <typename T, bool kShared = false>
class Ring {
 public:
  // Capacity is rounded up to a power of two; `limit` is the usable depth
  // (what the user asked for), so a ring of 100 accepts exactly 100.
  explicit Ring(uint32_t depth = 0) { Reset(depth); }
  // Moves are the owner's (a resize, under its lock): no producer runs.
  Ring(Ring&& o) noexcept { *this = std::move(o); }
  Ring& operator=(Ring&& o) noexcept {
    slots_ = std::move(o.slots_);
    mask_ = o.mask_;
    limit_ = o.limit_;
    head_ = o.head_;
    tail_ = o.tail_;
    if constexpr (kShared) {
      shared_.published.store(o.shared_.published.load(std::memory_order_relaxed), std::memory_order_relaxed);
      shared_.retired.store(o.shared_.retired.load(std::memory_order_relaxed), std::memory_order_relaxed);
    }
    return *this;
  }

  // Owner only, with no producer running (a QP's reset holds its post locks).
  void Reset(uint32_t depth) {
    const uint32_t cap = std::bit_ceil(depth < 1 ? 1u : depth);
    slots_.assign(cap, T{});
    mask_ = cap - 1;
    limit_ = depth;
    head_ = tail_ = 0;
    if constexpr (kShared) {
      shared_.published.store(0, std::memory_order_relaxed);
      shared_.retired.store(0, std::memory_order_relaxed);
    }
  }

  // Owner only, not a shared ring: `depth` (if larger) with the entries
  // kept in order. Allocates; a control-path step, or one a queue takes a
  // bounded number of times as it reaches new highs (doubling).
  void Grow(uint32_t depth) requires(!kShared) {
    if (depth <= limit_) return;
    const uint32_t cap = std::bit_ceil(depth);
    if (cap > slots_.size()) {
      std::vector<T> bigger(cap);
      for (uint32_t i = head_; i != tail_; ++i) bigger[i & (cap - 1)] = std::move(slots_[i & mask_]);
      slots_ = std::move(bigger);
      mask_ = cap - 1;
    }
    limit_ = depth;
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
  // Slots: the ring's storage holds capacity() entries; an entry's slot
  // (its index & mask, SlotOf) indexes arrays kept beside the ring (a
  // queue's side arrays for what its entries need only sometimes).
  uint32_t capacity() const { return mask_ + 1; }
  uint32_t SlotOf(const T* entry) const { return static_cast<uint32_t>(entry - slots_.data()); }

  // Returns the slot to fill, or nullptr when full; Commit() publishes it.
  T* Reserve() { return full() ? nullptr : &slots_[tail_ & mask_]; }
  void Commit() {
    ++tail_;
    // A shared ring filled by its owner (an SRQ's) keeps published() at 0.
    if constexpr (kShared) shared_.published.store(tail_, std::memory_order_relaxed);
  }
  bool Push(const T& v) {
    T* slot = Reserve();
    if (slot == nullptr) return false;
    *slot = v;
    Commit();
    return true;
  }
  // Pops the oldest `n`. A shared ring's release store tells the producer
  // the slots are free again: the owner reads an entry before it pops it
  // and never after.
  void Pop(uint32_t n = 1) {
    head_ += n;
    if constexpr (kShared) shared_.retired.store(head_, std::memory_order_release);
  }

  // Producer side of a shared ring (one producer at a time; the owner may
  // run meanwhile). The next slot to fill (`ahead` > 0: the one that many
  // after it, for a batch published at once), or nullptr when the ring
  // would then hold more than `depth` entries queued, published and not
  // yet popped.
  T* ProducerSlot(uint32_t ahead = 0) requires kShared {
    const uint32_t p = shared_.published.load(std::memory_order_relaxed) + ahead;
    if (p - shared_.retired.load(std::memory_order_acquire) >= limit_) return nullptr;
    return &slots_[p & mask_];
  }
  // Makes the next `n` filled producer slots visible to the owner.
  void Publish(uint32_t n = 1) requires kShared {
    shared_.published.store(shared_.published.load(std::memory_order_relaxed) + n, std::memory_order_release);
  }

  // Owner side: how many published entries are not yet in [head, tail);
  // TakePublished() appends the oldest of them (it becomes at(tail() - 1)).
  uint32_t published() const requires kShared {
    return shared_.published.load(std::memory_order_acquire) - tail_;
  }
  T& TakePublished() requires kShared { return slots_[tail_++ & mask_]; }
  // The owner fills ProducerSlot() itself (nothing published is waiting:
  // published() is 0) and appends it: published and tail move together.
  void PublishOwn() requires kShared {
    ++tail_;
    shared_.published.store(tail_, std::memory_order_relaxed);
  }
  // Appends every published entry at once; how many.
  uint32_t TakeAllPublished() requires kShared {
    const uint32_t n = published();
    tail_ += n;
    return n;
  }

 private:
  std::vector<T> slots_;
  uint32_t mask_ = 0;
  uint32_t limit_ = 0;
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
  struct NoProducer {};
  struct Producer {
    std::atomic<uint32_t> published{0};  // written by the producer, read by the owner
    std::atomic<uint32_t> retired{0};    // head_ as the owner published it, for the producer
  };
  [[no_unique_address]] std::conditional_t<kShared, Producer, NoProducer> shared_;
};

}  // namespace droce::queue

#endif  // DROCE_LIB_QUEUE_RING_H_
