// Random requests against a fenced responder, deterministic seeds: the same
// checks as the libFuzzer target, runnable in every build (and under ASan).
#include <random>

#include <gtest/gtest.h>

#include "tests/support/responder_fuzz_body.h"

namespace droce::core::fuzz {
namespace {

TEST(ResponderFuzz, RandomRequestsNeverEscapeTheirRegions) {
  std::mt19937_64 rng(20261122);
  uint64_t errors = 0, responses = 0, accepted = 0;
  for (int round = 0; round < 400; ++round) {
    std::vector<uint8_t> input(64 + rng() % 2048);
    for (auto& b : input) b = static_cast<uint8_t>(rng());
    FencedResponder responder;
    responder.Run(input.data(), input.size());  // aborts on any violation
    errors += responder.errors();
    responses += responder.counters().tx_packets;
    accepted += responder.counters().acks_sent;
  }
  // The inputs must reach the interesting paths: accepted requests and NAKed ones.
  EXPECT_GT(errors, 100u);
  EXPECT_GT(responses, 1000u);
  EXPECT_GT(accepted, 100u);
}

}  // namespace
}  // namespace droce::core::fuzz
