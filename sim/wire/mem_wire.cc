#include "sim/wire/mem_wire.h"

#include <cstring>

#include "wire/packet.h"

namespace droce::sim {

MemWire::MemWire(const MemWireConfig& config)
    : config_(config),
      storage_(new uint8_t[size_t{config.pool_frames} * kMaxFrameBytes]),
      lengths_(config.pool_frames, 0),
      ends_{End(this, 0), End(this, 1)} {
  free_.reserve(config.pool_frames);
  for (uint32_t i = config.pool_frames; i-- > 0;) free_.push_back(i);
  for (int d = 0; d < 2; ++d) {
    dir_[d].impair = config.impair[d];
    dir_[d].impaired = Impaired(config.impair[d]);
    dir_[d].queue.assign(config.queue_frames, 0);
  }
  // splitmix64 seeding of xoshiro128+-style state (two words suffice here).
  uint64_t s = config.seed;
  for (uint64_t& w : rng_) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    w = z ^ (z >> 31);
  }
}

uint64_t MemWire::Next() {  // xorshift128+
  uint64_t a = rng_[0];
  const uint64_t b = rng_[1];
  rng_[0] = b;
  a ^= a << 23;
  rng_[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
  return rng_[1] + b;
}

double MemWire::Uniform() { return double(Next() >> 11) * (1.0 / 9007199254740992.0); }

bool MemWire::Impaired(const Impairments& imp) {
  return imp.drop > 0 || imp.duplicate > 0 || imp.reorder > 0 || imp.corrupt > 0 || imp.ecn_mark > 0;
}

// Out of line: the per-frame path below carries no call that needs saved
// registers unless a queue is full, a tap is set or frames are held back.
[[gnu::noinline]] bool MemWire::TailDrop(Direction& d, uint32_t slot) {
  ++d.counters.queue_full;
  free_.push_back(slot);
  return false;
}

[[gnu::noinline]] void MemWire::CallTap(int from, uint32_t slot) {
  tap_(tap_ctx_, from, SlotData(slot), lengths_[slot]);
}

inline bool MemWire::Enqueue(int from, uint32_t slot) {
  Direction& d = dir_[from];
  const uint32_t size = static_cast<uint32_t>(d.queue.size());
  if (d.count == size) [[unlikely]] return TailDrop(d, slot);
  const uint32_t tail = d.head + d.count;
  d.queue[tail < size ? tail : tail - size] = slot;
  ++d.count;
  ++d.counters.delivered;
  if (tap_ != nullptr) [[unlikely]] CallTap(from, slot);
  return true;
}

// Frames held back for reordering go out once enough others have passed.
[[gnu::noinline]] void MemWire::PassHeld(int from) {
  Direction& d = dir_[from];
  for (size_t i = 0; i < d.held.size();) {
    if (--d.held[i].countdown == 0) {
      const uint32_t s = d.held[i].slot;
      d.held[i] = d.held.back();
      d.held.pop_back();
      Enqueue(from, s);
    } else {
      ++i;
    }
  }
}

inline void MemWire::Deliver(int from, uint32_t slot) {
  Enqueue(from, slot);
  if (!dir_[from].held.empty()) [[unlikely]] PassHeld(from);
}

inline void MemWire::Transmit(int from, uint32_t slot) {
  ++dir_[from].counters.sent;
  if (!dir_[from].impaired) [[likely]] {  // a perfect wire: no draws, no parse
    Deliver(from, slot);
    return;
  }
  TransmitImpaired(from, slot);
}

[[gnu::noinline]] void MemWire::TransmitImpaired(int from, uint32_t slot) {
  Direction& d = dir_[from];
  const Impairments& imp = d.impair;
  uint8_t* data = SlotData(slot);
  const uint32_t len = lengths_[slot];
  if (imp.roce_only && !wire::ParsePacket(data, len).ok()) {
    Deliver(from, slot);
    return;
  }
  if (imp.drop > 0 && Uniform() < imp.drop) {
    ++d.counters.dropped;
    free_.push_back(slot);
    return;
  }
  if (imp.corrupt > 0 && len > 0 && Uniform() < imp.corrupt) {
    data[Next() % len] ^= static_cast<uint8_t>(1u << (Next() % 8));
    ++d.counters.corrupted;
  }
  if (imp.ecn_mark > 0 && Uniform() < imp.ecn_mark && wire::MarkCe(data, len)) ++d.counters.ecn_marked;
  if (imp.duplicate > 0 && !free_.empty() && Uniform() < imp.duplicate) {
    const uint32_t copy = free_.back();
    free_.pop_back();
    std::memcpy(SlotData(copy), data, len);
    lengths_[copy] = len;
    ++d.counters.duplicated;
    Deliver(from, copy);
  }
  if (imp.reorder > 0 && Uniform() < imp.reorder) {
    ++d.counters.reordered;
    d.held.push_back({slot, 1 + static_cast<uint32_t>(Next() % (imp.reorder_depth ? imp.reorder_depth : 1))});
    return;
  }
  Deliver(from, slot);
}

uint16_t MemWire::End::RxBurst(Frame* frames, uint16_t n) {
  Direction& d = wire_->dir_[1 - side_];  // frames travelling towards this end
  if (d.count == 0 && !d.held.empty()) {
    // The link went quiet: frames held back for reordering arrive now
    // instead of waiting for traffic that may never come.
    for (const Held& h : d.held) wire_->Enqueue(1 - side_, h.slot);
    d.held.clear();
  }
  // The ring's state in locals: the stores into frames[] would otherwise
  // make the compiler reload it for every frame.
  const uint16_t take = static_cast<uint16_t>(d.count < n ? d.count : n);
  const uint32_t* queue = d.queue.data();
  const uint32_t size = static_cast<uint32_t>(d.queue.size());
  const uint32_t* lengths = wire_->lengths_.data();
  uint8_t* storage = wire_->storage_.get();
  uint32_t head = d.head;
  for (uint16_t i = 0; i < take; ++i) {
    const uint32_t slot = queue[head];
    if (++head == size) head = 0;
    frames[i] = Frame{storage + size_t{slot} * kMaxFrameBytes, lengths[slot], kMaxFrameBytes,
                      reinterpret_cast<void*>(uintptr_t{slot})};
  }
  d.head = head;
  d.count -= take;
  return take;
}

uint16_t MemWire::End::AllocTx(Frame* frames, uint16_t n) {
  std::vector<uint32_t>& free = wire_->free_;
  const uint16_t take = static_cast<uint16_t>(free.size() < n ? free.size() : n);
  const uint32_t* top = free.data() + free.size();
  for (uint16_t i = 0; i < take; ++i) frames[i] = wire_->FrameFor(top[-1 - i], 0);
  free.resize(free.size() - take);
  return take;
}

uint16_t MemWire::End::TxBurst(Frame* frames, uint16_t n) {
  MemWire& w = *wire_;
  Direction& d = w.dir_[side_];
  if (!d.impaired && w.tap_ == nullptr && d.held.empty()) [[likely]] {
    // A perfect wire without a tap or held frames: Transmit's per-frame
    // steps for the whole burst with the ring's state in locals (the
    // stores into lengths_ would otherwise make the compiler reload it for
    // every frame), as a ring PMD enqueues a burst.
    uint32_t* const queue = d.queue.data();
    uint32_t* const lengths = w.lengths_.data();
    const uint32_t size = static_cast<uint32_t>(d.queue.size());
    const uint32_t room = size - d.count;
    const uint16_t take = static_cast<uint16_t>(room < n ? room : n);
    uint32_t tail = d.head + d.count;
    if (tail >= size) tail -= size;
    for (uint16_t i = 0; i < take; ++i) {
      const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle));
      lengths[slot] = frames[i].len;
      queue[tail] = slot;
      if (++tail == size) tail = 0;
    }
    d.count += take;
    d.counters.sent += n;
    d.counters.delivered += take;
    for (uint16_t i = take; i < n; ++i) {  // the rest finds the queue full
      const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle));
      lengths[slot] = frames[i].len;
      w.TailDrop(d, slot);
    }
    return n;
  }
  for (uint16_t i = 0; i < n; ++i) {
    const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle));
    wire_->lengths_[slot] = frames[i].len;
    wire_->Transmit(side_, slot);
  }
  return n;  // never refuses: a full queue tail-drops, as a switch port would
}

void MemWire::End::Release(Frame* frames, uint16_t n) {
  // One size change for the burst instead of a push_back per frame (the
  // free list's capacity is the pool's: it never reallocates).
  std::vector<uint32_t>& free = wire_->free_;
  const size_t old = free.size();
  free.resize(old + n);
  uint32_t* const top = free.data() + old;
  for (uint16_t i = 0; i < n; ++i) top[i] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle));
}

}  // namespace droce::sim
