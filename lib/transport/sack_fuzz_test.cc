// The SACK fuzz body (tests/support/sack_fuzz_body.h) on deterministic
// random inputs, so every unit run exercises it without libFuzzer.
#include <random>

#include <gtest/gtest.h>

#include "tests/support/sack_fuzz_body.h"

namespace droce::core {
namespace {

TEST(SackFuzz, RandomSacksNeverBreakTheRequester) {
  std::mt19937 rng(16);
  uint64_t completed = 0;
  for (int run = 0; run < 300; ++run) {
    std::vector<uint8_t> in(64 + rng() % 1024);
    for (auto& b : in) b = static_cast<uint8_t>(rng());
    fuzz::SackedRequester r;
    ASSERT_TRUE(r.selective_repeat());
    r.Run(in.data(), in.size());  // aborts on a broken invariant
    completed += r.completions();
  }
  EXPECT_GT(completed, 0u);  // some inputs acknowledge something
}

}  // namespace
}  // namespace droce::core
