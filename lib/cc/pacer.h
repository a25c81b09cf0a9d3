// The pacer that enforces a congestion-control algorithm's rate.
#ifndef DROCE_LIB_CC_PACER_H_
#define DROCE_LIB_CC_PACER_H_

#include <cstdint>

namespace droce::cc {

// Next-send-time pacer: a packet may leave when now >= next_send_ns(); after
// it leaves, the next one may leave bytes*8/rate later. Idle time earns no
// credit (next = max(next, now) + cost), so there is never a burst of more
// than one packet. The cost per byte is recomputed only when the rate
// changes (rounded up, so the pacer is never faster than the rate); the
// per-packet path is a multiply and adds, with 32 fractional bits of
// nanoseconds carried between packets so long runs keep the exact rate.
class Pacer {
 public:
  bool MaySend(uint64_t now_ns) const { return now_ns >= next_send_ns_; }

  void OnSent(uint32_t bytes, uint64_t now_ns, uint64_t rate_bps) {
    if (rate_bps != rate_bps_) SetRate(rate_bps);
    if (now_ns > next_send_ns_) {
      next_send_ns_ = now_ns;
      frac_q32_ = 0;
    }
    last_start_ns_ = next_send_ns_;
    last_frac_q32_ = frac_q32_;
    last_bytes_ = bytes;
    const uint64_t cost_q32 = bytes * ns_per_byte_q32_ + frac_q32_;
    next_send_ns_ += cost_q32 >> 32;
    frac_q32_ = cost_q32 & 0xFFFFFFFFu;
  }

  // The rate changed while waiting for the next send (a CNP, an increase
  // event): re-space the last packet at the new rate, as a hardware rate
  // limiter applies a new rate to the gap in progress. next_send_ns() may move
  // earlier (rate up) or later (rate down). Not per packet: one division.
  void Retime(uint64_t rate_bps) {
    if (rate_bps == rate_bps_) return;
    SetRate(rate_bps);
    if (last_bytes_ == 0) return;
    const uint64_t cost_q32 = last_bytes_ * ns_per_byte_q32_ + last_frac_q32_;
    next_send_ns_ = last_start_ns_ + (cost_q32 >> 32);
    frac_q32_ = cost_q32 & 0xFFFFFFFFu;
  }

  uint64_t next_send_ns() const { return next_send_ns_; }
  uint64_t last_start_ns() const { return last_start_ns_; }  // when the last packet went
  uint64_t rate_bps() const { return rate_bps_; }

 private:
  void SetRate(uint64_t rate_bps);

  uint64_t next_send_ns_ = 0;
  uint64_t frac_q32_ = 0;
  uint64_t last_start_ns_ = 0;  // when the last packet started
  uint64_t last_frac_q32_ = 0;
  uint32_t last_bytes_ = 0;
  uint64_t rate_bps_ = 0;
  uint64_t ns_per_byte_q32_ = 0;  // ceil(8e9 * 2^32 / rate), at most 8e3 ns (1 Mb/s) per byte
};

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_PACER_H_
