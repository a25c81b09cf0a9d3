// Shared by the lib/core tests of long messages over the in-memory wire
// (gather_tx_test.cc, lent_rx_test.cc): a wire with room for a long
// message's frames, and the bytes the messages carry.
#ifndef DROCE_TESTS_SUPPORT_LONG_MESSAGES_H_
#define DROCE_TESTS_SUPPORT_LONG_MESSAGES_H_

#include <cstdint>
#include <vector>

#include "sim/wire/mem_wire.h"

namespace droce::core::testing {

// 4096 frames of pool and queue each way: a 256 KiB message at MTU 1024
// fits in flight at once, so no test depends on the wire dropping.
inline sim::MemWireConfig RoomyWire() {
  sim::MemWireConfig wc;
  wc.pool_frames = 4096;
  wc.queue_frames = 4096;
  return wc;
}

// Bytes that differ from their neighbours and from one 512-byte block to the
// next (a misplaced block shows), a function of the position and the seed.
inline void Pattern(std::vector<uint8_t>& m, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) m[off + i] = static_cast<uint8_t>(i * 7 + seed + (i >> 9));
}

}  // namespace droce::core::testing

#endif  // DROCE_TESTS_SUPPORT_LONG_MESSAGES_H_
