#include "pktio/loopback_io.h"

#include <cstring>

#include "wire/steer.h"

namespace droce::pktio {

LoopbackIo::LoopbackIo(BurstIo* inner, const std::array<uint8_t, 6>& own_mac, uint32_t ring_frames)
    : inner_(inner), mac_(own_mac), ring_(ring_frames) {}

LoopbackIo::~LoopbackIo() {
  // Frames still in the ring go back to their owner.
  while (count_ > 0) {
    inner_->Release(&ring_[head_], 1);
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
}

namespace {
// Out of line: a frame for another MAC, the common case on a port, is
// rejected without the registers the parse needs.
[[gnu::noinline]] bool DestQpIsOwn(const Frame& f, uint32_t first, uint32_t count) {
  if (count >= (1u << 24)) return true;
  const int64_t qpn = wire::RoceDestQp(f.data, f.len);
  return qpn >= 0 && static_cast<uint32_t>(qpn) - first < count;
}
}  // namespace

// Inline in TxBurst: asked once per frame sent.
[[gnu::always_inline]] inline bool LoopbackIo::IsOwn(const Frame& f) const {
  if (f.len < 6 || std::memcmp(f.data, mac_.data(), 6) != 0) return false;
  return DestQpIsOwn(f, own_qpn_first_, own_qpn_count_);
}

uint16_t LoopbackIo::RxBurst(Frame* frames, uint16_t n) {
  uint16_t got = 0;
  while (got < n && count_ > 0) {
    frames[got++] = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --count_;
  }
  if (got < n) got = static_cast<uint16_t>(got + inner_->RxBurst(frames + got, static_cast<uint16_t>(n - got)));
  return got;
}

// Accepts a prefix of frames[0..n): runs of wire frames go to the inner port
// in one burst each, own-MAC frames into the ring. Stops at the first frame
// either side refuses, so the caller keeps the rest in order.
uint16_t LoopbackIo::TxBurst(Frame* frames, uint16_t n) {
  uint16_t i = 0;
  while (i < n) {
    if (IsOwn(frames[i])) {
      if (count_ == ring_.size()) {
        ++counters_.ring_full;
        return i;
      }
      // The receive side reads the frame's own bytes: a gather frame's
      // payload is copied in (its memory may change once the burst is done).
      if (!Flatten(frames[i])) {
        ++counters_.dropped;
        inner_->Release(&frames[i], 1);
        ++i;
        continue;
      }
      ring_[(head_ + count_) % ring_.size()] = frames[i];
      ++count_;
      ++counters_.looped;
      ++i;
      continue;
    }
    uint16_t run = 1;
    while (i + run < n && !IsOwn(frames[i + run])) ++run;
    const uint16_t sent = inner_->TxBurst(frames + i, run);
    i = static_cast<uint16_t>(i + sent);
    if (sent < run) return i;
  }
  return i;
}

}  // namespace droce::pktio
