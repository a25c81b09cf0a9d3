// 24-bit packet sequence number arithmetic (IBTA 9.7.1: PSNs wrap modulo 2^24;
// a PSN is "ahead" of another if it lies in the half window after it).
#ifndef DROCE_LIB_WIRE_PSN_H_
#define DROCE_LIB_WIRE_PSN_H_

#include <cstdint>

namespace droce::wire {

inline constexpr uint32_t kPsnMask = 0xFFFFFF;
inline constexpr uint32_t kPsnHalfWindow = 1u << 23;

constexpr uint32_t PsnAdd(uint32_t psn, int64_t delta) {
  return static_cast<uint32_t>(static_cast<int64_t>(psn) + delta) & kPsnMask;
}

// Signed distance b - a in (-2^23, 2^23]: positive when b is after a.
constexpr int32_t PsnDiff(uint32_t b, uint32_t a) {
  // Shift the 24-bit difference into the top of an int32 and back to sign-extend it.
  return static_cast<int32_t>(((b - a) & kPsnMask) << 8) >> 8;
}

constexpr bool PsnLess(uint32_t a, uint32_t b) { return PsnDiff(b, a) > 0; }
constexpr bool PsnLessEq(uint32_t a, uint32_t b) { return PsnDiff(b, a) >= 0; }

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_PSN_H_
