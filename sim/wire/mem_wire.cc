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

Frame MemWire::FrameFor(uint32_t slot, uint32_t len) {
  return Frame{storage_.get() + size_t{slot} * kMaxFrameBytes, len, kMaxFrameBytes,
               reinterpret_cast<void*>(uintptr_t{slot})};
}

bool MemWire::Enqueue(int from, uint32_t slot) {
  Direction& d = dir_[from];
  if (d.count == d.queue.size()) {
    ++d.counters.queue_full;
    free_.push_back(slot);
    return false;
  }
  d.queue[(d.head + d.count) % d.queue.size()] = slot;
  ++d.count;
  ++d.counters.delivered;
  if (tap_ != nullptr) tap_(tap_ctx_, from, storage_.get() + size_t{slot} * kMaxFrameBytes, lengths_[slot]);
  return true;
}

void MemWire::Deliver(int from, uint32_t slot) {
  Direction& d = dir_[from];
  Enqueue(from, slot);
  // Frames held back for reordering go out once enough others have passed.
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

void MemWire::Transmit(int from, uint32_t slot) {
  Direction& d = dir_[from];
  const Impairments& imp = d.impair;
  ++d.counters.sent;
  uint8_t* data = storage_.get() + size_t{slot} * kMaxFrameBytes;
  const uint32_t len = lengths_[slot];
  const bool any = imp.drop > 0 || imp.duplicate > 0 || imp.reorder > 0 || imp.corrupt > 0 ||
                   imp.ecn_mark > 0;
  if (!any || (imp.roce_only && !wire::ParsePacket(data, len).ok())) {
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
    std::memcpy(storage_.get() + size_t{copy} * kMaxFrameBytes, data, len);
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
  uint16_t i = 0;
  for (; i < n && d.count > 0; ++i) {
    const uint32_t slot = d.queue[d.head];
    d.head = (d.head + 1) % d.queue.size();
    --d.count;
    frames[i] = wire_->FrameFor(slot, wire_->lengths_[slot]);
  }
  return i;
}

uint16_t MemWire::End::AllocTx(Frame* frames, uint16_t n) {
  uint16_t i = 0;
  for (; i < n && !wire_->free_.empty(); ++i) {
    const uint32_t slot = wire_->free_.back();
    wire_->free_.pop_back();
    frames[i] = wire_->FrameFor(slot, 0);
  }
  return i;
}

uint16_t MemWire::End::TxBurst(Frame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    const auto slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle));
    wire_->lengths_[slot] = frames[i].len;
    wire_->Transmit(side_, slot);
  }
  return n;  // never refuses: a full queue tail-drops, as a switch port would
}

void MemWire::End::Release(Frame* frames, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) {
    wire_->free_.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle)));
  }
}

}  // namespace droce::sim
