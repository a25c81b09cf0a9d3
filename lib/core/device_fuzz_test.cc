// Random frame sequences against a whole device with live RC QPs and guarded
// memory, deterministic seeds: the checks of the libFuzzer target
// (tests/fuzz/device_fuzz.cc), runnable in every build (and under ASan).
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "tests/support/device_fuzz_body.h"

namespace droce::core::fuzz {
namespace {

TEST(DeviceFuzz, RandomFrameSequencesNeverEscapeTheirRegions) {
  std::mt19937_64 rng(20261201);
  uint64_t frames = 0, reached = 0, errors = 0, drops = 0, predicted = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<uint8_t> input(64 + rng() % 4096);
    for (auto& b : input) b = static_cast<uint8_t>(rng());
    DeviceFuzz f;
    f.Run(input.data(), input.size());  // aborts on any violation
    frames += f.frames();
    reached += f.qp_rx_packets();
    errors += f.errors();
    const DeviceCounters& c = f.counters();
    predicted += f.predicted();
    drops += c.rx_drop_pkey + c.rx_drop_path + c.rx_drop_dst_mac + c.rx_drop_vlan + c.rx_drop_dst_ip;
  }
  std::printf("frames %lu reached %lu errors %lu drops %lu predicted %lu\n", frames, reached, errors, drops, predicted);
  // The sequences must reach the QPs (not only the receive checks), drive
  // some into errors, and exercise the checks too.
  EXPECT_GT(frames, 10000u);
  EXPECT_GT(reached, frames / 2);
  EXPECT_GT(errors, 10u);
  EXPECT_GT(drops, 10u);
  // Many of them take the header-prediction path (learnt from an earlier frame of the sequence).
  EXPECT_GT(predicted, frames / 4);
}

}  // namespace
}  // namespace droce::core::fuzz
