#include "apps/testpmd/pattern.h"

#include <vector>

#include "gtest/gtest.h"

namespace droce::testpmd {
namespace {

TEST(Pattern, EveryMessageChecksAgainstItsOwnSequenceOnly) {
  for (uint32_t n : {0u, 1u, 7u, 8u, 9u, 4095u, 4096u, 65536u, 65537u, 1u << 20}) {
    std::vector<uint8_t> buf(n);
    FillPattern(buf.data(), n, 42);
    EXPECT_TRUE(CheckPattern(buf.data(), n, 42)) << n;
    if (n >= 8) {
      EXPECT_FALSE(CheckPattern(buf.data(), n, 43)) << n;
    }
  }
}

// Any single corrupted byte, and a stale word from the message that used the
// slot before, is caught wherever it lands (first word, middle, tail, the
// second 64 KiB block).
TEST(Pattern, CorruptionAndStaleWordsAnywhereAreCaught) {
  const uint32_t n = 2 * 65536 + 13;
  std::vector<uint8_t> msg(n), old(n);
  FillPattern(msg.data(), n, 1000);
  FillPattern(old.data(), n, 1000 - 16);
  for (uint32_t off : {0u, 3u, 8u, 4096u, 65535u, 65536u, 65536u + 8u, n - 14, n - 1}) {
    std::vector<uint8_t> bad = msg;
    bad[off] ^= 0x01;
    EXPECT_FALSE(CheckPattern(bad.data(), n, 1000)) << "flipped byte at " << off;
    bad = msg;
    const uint32_t word = off & ~7u;
    for (uint32_t i = word; i < word + 8 && i < n; ++i) bad[i] = old[i];
    EXPECT_FALSE(CheckPattern(bad.data(), n, 1000)) << "stale word at " << word;
  }
}

TEST(Pattern, AWordAtTheWrongOffsetIsCaught) {
  const uint32_t n = 4096;
  std::vector<uint8_t> msg(n);
  FillPattern(msg.data(), n, 7);
  std::vector<uint8_t> bad = msg;
  for (uint32_t i = 0; i < 8; ++i) bad[64 + i] = msg[72 + i];
  EXPECT_FALSE(CheckPattern(bad.data(), n, 7));
}

}  // namespace
}  // namespace droce::testpmd
