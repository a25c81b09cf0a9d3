#include "cc/pacer.h"

#include <algorithm>

namespace droce::cc {

void Pacer::SetRate(uint64_t rate_bps) {
  rate_bps_ = rate_bps;
  // Below 1 Mb/s (DCQCN's smallest rpg_min_rate) the product bytes x cost
  // could overflow for jumbo frames; such rates pace as 1 Mb/s.
  const unsigned __int128 bit_ns_q32 = static_cast<unsigned __int128>(8'000'000'000) << 32;
  const uint64_t rate = std::max<uint64_t>(1'000'000, rate_bps);
  ns_per_byte_q32_ = static_cast<uint64_t>((bit_ns_q32 + rate - 1) / rate);
}

}  // namespace droce::cc
