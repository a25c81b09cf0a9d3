// libFuzzer target: sequences of frames (and of the program's own verbs
// calls) against a whole device with two RC QPs at RTS and guarded memory
// (lib/tests/support/device_fuzz_body.h). Any write outside a permitted range, any
// change to a region a peer may not write, or any invalid frame sent aborts.
#include <cstddef>
#include <cstdint>

#include "tests/support/device_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return 0;
  droce::core::fuzz::DeviceFuzz device;
  device.Run(data, size);
  return 0;
}
