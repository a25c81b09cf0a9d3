#include "pktio/frame_ring.h"

#include <algorithm>
#include <cstring>

namespace droce::pktio {

bool FrameRing::ValidGeometry(uint32_t slots, uint32_t slot_bytes) {
  return slots >= 2 && slots <= 65536 && (slots & (slots - 1)) == 0 && slot_bytes % 64 == 0 &&
         slot_bytes >= kSlotHeader + 64 && slot_bytes <= 65536;
}

FrameRing::FrameRing(void* mem, uint32_t slots, uint32_t slot_bytes)
    : base_(static_cast<uint8_t*>(mem)), slots_(slots), slot_bytes_(slot_bytes) {
  my_head_ = head().load(std::memory_order_acquire);
  my_tail_ = tail().load(std::memory_order_acquire);
  cached_tail_ = my_tail_;
}

uint16_t FrameRing::Produce(const Frame* frames, uint16_t n) {
  // Free slots as of the tail last read. The consumer's tail only moves
  // forward, so a stale one undercounts and never lets a frame overwrite an
  // unconsumed one; it is read again only when it is short for this burst.
  // That cache line is the one the consumer writes on every Consume: reading
  // it on every burst was a cross-CPU miss per burst.
  uint32_t used = my_head_ - cached_tail_;
  uint32_t free = used > slots_ ? 0 : slots_ - used;  // a tail ahead of our head: the consumer lies, stop
  if (free < n) {
    cached_tail_ = tail().load(std::memory_order_acquire);
    used = my_head_ - cached_tail_;
    free = used > slots_ ? 0 : slots_ - used;
  }
  uint16_t done = 0;
  for (; done < n; ++done) {
    const Frame& f = frames[done];
    // A gather frame whose pieces do not add up to its length is refused
    // as too long: none of its bytes is read.
    if (f.len > max_frame() || !f.GatherAddsUp()) {
      ++counters_.too_long;
      break;
    }
    if (free == 0) {
      ++counters_.full;
      break;
    }
    uint8_t* s = slot(my_head_);
    const uint32_t len = f.len;
    std::memcpy(s, &len, sizeof len);
    uint8_t* out = s + kSlotHeader;
    if (f.gather_len == 0) {
      std::memcpy(out, f.data, len);
    } else {
      // A gather frame in its three pieces: the payload is copied once,
      // from where it is, into the slot.
      const uint32_t tail = len - f.gather_len - f.gather_at;
      std::memcpy(out, f.data, f.gather_at);
      std::memcpy(out + f.gather_at, f.gather, f.gather_len);
      std::memcpy(out + f.gather_at + f.gather_len, f.data + f.gather_at, tail);
    }
    ++my_head_;
    --free;
  }
  if (done > 0) {
    head().store(my_head_, std::memory_order_release);
    counters_.produced += done;
  }
  return done;
}

bool FrameRing::TakeWakeupRequest() {
  // Pairs with Arm's fence: either the consumer sees our head, or we see
  // its request (Dekker's pattern).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleeping().load(std::memory_order_relaxed) == 0) return false;
  return sleeping().exchange(0, std::memory_order_acq_rel) != 0;
}

void FrameRing::ArmProducer() {
  producer_waiting().store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void FrameRing::DisarmProducer() {
  if (producer_waiting().load(std::memory_order_relaxed) != 0) producer_waiting().store(0, std::memory_order_relaxed);
}

bool FrameRing::TakeProducerWakeup() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (producer_waiting().load(std::memory_order_relaxed) == 0) return false;
  return producer_waiting().exchange(0, std::memory_order_acq_rel) != 0;
}

uint32_t FrameRing::Available() const {
  const uint32_t avail = head().load(std::memory_order_acquire) - my_tail_;
  return avail > slots_ ? slots_ : avail;
}

uint16_t FrameRing::Consume(Frame* dst, uint16_t n) {
  uint32_t avail = Available();
  uint16_t filled = 0;
  bool moved = false;
  while (avail > 0 && filled < n) {
    const uint8_t* s = slot(my_tail_);
    uint32_t len;
    std::memcpy(&len, s, sizeof len);
    if (len > max_frame() || len > dst[filled].capacity) {
      ++counters_.bad_length;
    } else {
      std::memcpy(dst[filled].data, s + kSlotHeader, len);
      dst[filled].len = len;
      ++filled;
    }
    ++my_tail_;
    --avail;
    moved = true;
  }
  if (moved) tail().store(my_tail_, std::memory_order_release);
  counters_.consumed += filled;
  return filled;
}

uint16_t FrameRing::Peek(Frame* views, uint16_t n) {
  const uint32_t avail = Available();
  uint16_t k = 0;
  for (; k < n && k < avail; ++k) {
    uint8_t* s = slot(my_tail_ + k);
    uint32_t len;
    std::memcpy(&len, s, sizeof len);
    if (len > max_frame()) {
      ++counters_.bad_length;
      len = 0;
    }
    views[k] = Frame{s + kSlotHeader, len, len, nullptr};  // no gather fields: Produce copies a view whole
  }
  peeked_ = k;
  return k;
}

void FrameRing::Release(uint16_t n) {
  const uint32_t k = std::min<uint32_t>(n, peeked_);
  peeked_ = 0;
  if (k == 0) return;
  my_tail_ += k;
  counters_.consumed += k;
  tail().store(my_tail_, std::memory_order_release);
}

bool FrameRing::Arm() {
  sleeping().store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (Available() == 0) return true;
  sleeping().store(0, std::memory_order_relaxed);
  return false;
}

void FrameRing::Disarm() { sleeping().store(0, std::memory_order_relaxed); }

}  // namespace droce::pktio
