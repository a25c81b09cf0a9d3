#include "transport/types.h"

namespace droce::transport {

const char* QpStateName(QpState s) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  const auto i = static_cast<unsigned>(s);
  return i < 7 ? kNames[i] : "?";
}

uint32_t MtuEnumToBytes(uint32_t mtu_enum) {
  return (mtu_enum >= 1 && mtu_enum <= 5) ? 128u << mtu_enum : 0;
}

uint32_t MtuBytesToEnum(uint32_t bytes) {
  for (uint32_t e = 1; e <= 5; ++e) {
    if (MtuEnumToBytes(e) == bytes) return e;
  }
  return 0;
}

uint64_t RnrTimerNs(uint8_t code) {
  // Microseconds x 100 for codes 0..31 (code 0 is the longest, 655.36 ms).
  static constexpr uint32_t kCentiMicros[32] = {
      65536,   1,    2,    3,    4,    6,    8,     12,    16,    24,    32,
      48,      64,   96,   128,  192,  256,  384,   512,   768,   1024,  1536,
      2048,    3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
  return uint64_t{kCentiMicros[code & 31]} * 10000;  // 1/100 ms = 10 us = 10000 ns
}

}  // namespace droce::transport
