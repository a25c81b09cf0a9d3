// libFuzzer target: arbitrary SACKs, ACKs and responses against a
// selective-repeat requester (tests/support/sack_fuzz_body.h). A request
// outside the assigned PSNs, a frame that does not verify, or a WR completed
// twice or out of order aborts.
#include <cstddef>
#include <cstdint>

#include "tests/support/sack_fuzz_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  droce::core::fuzz::SackedRequester requester;
  requester.Run(data, size);
  return 0;
}
