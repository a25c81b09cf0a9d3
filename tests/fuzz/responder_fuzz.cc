// libFuzzer target: arbitrary request sequences against a responder whose
// memory is fenced by canaries (lib/tests/support/responder_fuzz_body.h). Any write
// outside a permitted range, or any change to a read-only or foreign-PD
// region, aborts.
#include <cstddef>
#include <cstdint>

#include "tests/support/responder_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  droce::core::fuzz::FencedResponder responder;
  responder.Run(data, size);
  return 0;
}
