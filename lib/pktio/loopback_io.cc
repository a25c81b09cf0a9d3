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

// Inline in TxBurst: asked once per frame sent, with the device's MAC as
// two words TxBurst holds in registers (read from mac_ inside the loop, they
// are loaded again for every frame: a frame's bytes may alias them).
[[gnu::always_inline]] inline bool LoopbackIo::IsOwn(const Frame& f, uint32_t mac_lo, uint16_t mac_hi) const {
  if (f.len < 6) return false;
  uint32_t lo;
  uint16_t hi;
  std::memcpy(&lo, f.data, 4);
  std::memcpy(&hi, f.data + 4, 2);
  if (lo != mac_lo || hi != mac_hi) return false;
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

namespace {
// Out of line, for the bursts stopped early: what goes back to the caller is
// flat (BurstIo::TakesGather), the frames behind a refused run too, which the
// inner port never saw. Returns `took`.
[[gnu::noinline, gnu::cold]] uint16_t HandBack(Frame* frames, uint32_t took, uint16_t n) {
  (void)FlattenEach(frames + took, n - took);
  return static_cast<uint16_t>(took);
}
}  // namespace

// Accepts a prefix of frames[0..n): runs of wire frames go to the inner port
// in one burst each, own-MAC frames into the ring. Stops at the first frame
// either side refuses, so the caller keeps the rest in order.
uint16_t LoopbackIo::TxBurst(Frame* frames, uint16_t n) {
  uint32_t mac_lo;
  uint16_t mac_hi;
  std::memcpy(&mac_lo, mac_.data(), 4);
  std::memcpy(&mac_hi, mac_.data() + 4, 2);
  uint32_t i = 0;
  while (i < n) {
    if (IsOwn(frames[i], mac_lo, mac_hi)) {
      if (count_ == ring_.size()) {
        ++counters_.ring_full;
        return HandBack(frames, i, n);
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
    uint32_t end = i + 1;
    while (end < n && !IsOwn(frames[end], mac_lo, mac_hi)) ++end;
    const auto run = static_cast<uint16_t>(end - i);
    const uint16_t sent = inner_->TxBurst(frames + i, run);
    i += sent;
    if (sent < run) return HandBack(frames, i, n);
  }
  return static_cast<uint16_t>(i);
}

}  // namespace droce::pktio
