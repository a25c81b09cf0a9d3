// A single-producer single-consumer ring of frames in memory two parties
// share (a memfd mapped by two processes: droced's direct paths,
// doc/droced.md "Direct rings"). Compute only: no EAL, no system call; the
// owner moves the frames in and out and does the notifying.
//
// Layout, at the start of the region given (zeroed memory is an empty ring):
//   [0, 64)    head: slots the producer has published (free-running u32)
//   [64, 128)  tail: slots the consumer has released (free-running u32)
//   [128, 192) sleeping (u32 at 128): the consumer asks for a wake-up (memif's
//              interrupt mode); producer_waiting (u32 at 160): the producer,
//              held back by a full ring, asks for one when slots are freed
//   then `slots` slots of `slot_bytes`: a u32 length, the frame at +kSlotHeader.
//
// The other party may be buggy or hostile and writes the same memory: each
// side keeps its own index privately and only reads the other's, bounds
// every value it reads (a head more than `slots` ahead is taken as `slots`,
// a length beyond the slot is dropped and counted), so no index or length
// from the shared memory ever makes it read or write outside the region.
#ifndef DROCE_LIB_PKTIO_FRAME_RING_H_
#define DROCE_LIB_PKTIO_FRAME_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "pktio/burst_io.h"

namespace droce::pktio {

struct FrameRingCounters {
  uint64_t produced = 0;    // frames published (producer side)
  uint64_t full = 0;        // frames refused: no free slot (producer side)
  uint64_t too_long = 0;    // frames refused: longer than a slot (producer side)
  uint64_t consumed = 0;    // frames copied out (consumer side)
  uint64_t bad_length = 0;  // slots whose length exceeded the slot or the buffer: skipped (consumer side)
};

class FrameRing {
 public:
  static constexpr uint32_t kHeaderBytes = 192;
  static constexpr uint32_t kSlotHeader = 64;  // frame data starts cache-aligned
  // A slot that carries every frame droce emits.
  static constexpr uint32_t kDefaultSlotBytes = kSlotHeader + kMaxFrameBytes;

  // Geometry check: slots a power of two in [2, 65536], slot_bytes a
  // multiple of 64 in [kSlotHeader + 64, 64 KiB].
  static bool ValidGeometry(uint32_t slots, uint32_t slot_bytes);
  // Bytes one ring occupies (a multiple of 64).
  static size_t Bytes(uint32_t slots, uint32_t slot_bytes) {
    return kHeaderBytes + size_t{slots} * slot_bytes;
  }

  FrameRing() = default;
  // `mem` (64-byte aligned, Bytes(slots, slot_bytes) long) holds the ring;
  // zeroed memory is an empty one. The geometry must be valid.
  FrameRing(void* mem, uint32_t slots, uint32_t slot_bytes);

  bool valid() const { return base_ != nullptr; }
  uint32_t slots() const { return slots_; }
  uint32_t max_frame() const { return slot_bytes_ - kSlotHeader; }

  // --- Producer.
  // Copies a prefix of frames[0..n) into free slots and publishes them with
  // one release store. The consumer's tail is read only when the free
  // slots seen at the last read are fewer than n (a cached tail). Stops at the first frame that finds no slot (counted
  // `full`) or is longer than a slot (`too_long`); returns how many it took.
  // A gather frame (Frame::gather) is copied in its three pieces, its
  // payload straight from where it points: the slot holds the whole frame,
  // and nothing of the gathered memory is read after Produce returns.
  uint16_t Produce(const Frame* frames, uint16_t n);
  // After Produce: true if the consumer sleeps and asked for a wake-up (the
  // request is consumed: one wake-up per sleep). The caller then notifies.
  bool TakeWakeupRequest();
  // Before sleeping while the ring refused frames (full): asks the consumer
  // for a wake-up once it frees slots. Poll (Produce) once more after it: a
  // slot freed before the request was seen is found then. Disarm after
  // waking (or on finding room).
  void ArmProducer();
  void DisarmProducer();

  // --- Consumer.
  // Frames published and not yet consumed (at most slots()).
  uint32_t Available() const;
  // Copies up to n frames into the caller's buffers dst[i].data (capacity
  // dst[i].capacity), sets dst[i].len, releases their slots with one store.
  // A slot whose length exceeds the slot or the buffer is skipped
  // (`bad_length`) without being copied. Returns the frames filled.
  uint16_t Consume(Frame* dst, uint16_t n);
  // In place, for a forwarder that copies each frame once, straight into
  // another ring: up to n published frames as views into their slots
  // (views[i].data, .len; .capacity = .len), their slots kept until
  // Release. Each length is read once and bounded by the slot (a bad one:
  // the view has len 0, counted `bad_length`). The producer can still write
  // a viewed slot (hostile): read its bytes as untrusted and never twice for
  // the same decision. Peek again only after Release.
  uint16_t Peek(Frame* views, uint16_t n);
  // Frees the first n slots of the last Peek (at most as many as it viewed,
  // in one store); the rest are viewed again by the next Peek.
  void Release(uint16_t n);
  // Slots the last Peek viewed and Release has not freed.
  uint32_t peeked() const { return peeked_; }
  // Asks for a wake-up before sleeping; returns false if frames are already
  // there (then do not sleep). Disarm after waking.
  bool Arm();
  void Disarm();
  // After freeing slots (Consume, Release): true if the producer sleeps on
  // a full ring and asked for a wake-up (consumed: one per sleep). The
  // caller then notifies it. Its fence pairs with ArmProducer's (Dekker's
  // pattern): either the producer's next Produce sees the freed slots, or
  // this sees its request.
  bool TakeProducerWakeup();

  const FrameRingCounters& counters() const { return counters_; }

 private:
  std::atomic<uint32_t>& head() const { return *reinterpret_cast<std::atomic<uint32_t>*>(base_); }
  std::atomic<uint32_t>& tail() const { return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + 64); }
  std::atomic<uint32_t>& sleeping() const { return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + 128); }
  std::atomic<uint32_t>& producer_waiting() const { return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + 160); }
  uint8_t* slot(uint32_t pos) const { return base_ + kHeaderBytes + size_t{pos & (slots_ - 1)} * slot_bytes_; }

  uint8_t* base_ = nullptr;
  uint32_t slots_ = 0;
  uint32_t slot_bytes_ = 0;
  uint32_t my_head_ = 0;  // producer: its own head, never re-read from the shared memory
  uint32_t my_tail_ = 0;  // consumer: its own tail
  uint32_t peeked_ = 0;   // consumer: slots the last Peek viewed, freed by Release
  uint32_t cached_tail_ = 0;  // producer: the consumer's tail as last read (Produce)
  FrameRingCounters counters_;
};

static_assert(std::atomic<uint32_t>::is_always_lock_free, "the ring's indices are shared between processes");

}  // namespace droce::pktio

#endif  // DROCE_LIB_PKTIO_FRAME_RING_H_
