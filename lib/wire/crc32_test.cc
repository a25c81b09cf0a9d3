#include "wire/crc32.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace droce::wire {
namespace {

// Bit-at-a-time reference, independent of the table construction.
uint32_t ReferenceCrc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

TEST(Crc32, KnownVector) {
  const char* s = "123456789";
  EXPECT_EQ(Crc32(reinterpret_cast<const uint8_t*>(s), 9), 0xCBF43926u);
}

class Crc32ImplTest : public ::testing::TestWithParam<Crc32Impl> {};

TEST_P(Crc32ImplTest, MatchesReferenceAtEveryLengthAndOffset) {
  if (!Crc32ImplSupported(GetParam())) GTEST_SKIP() << "CPU lacks " << Crc32ImplName(GetParam());
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(5000 + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t len = 0; len <= 1100; ++len) {
    for (size_t off : {0, 1, 7, 13}) {
      const uint8_t* p = buf.data() + off;
      ASSERT_EQ(Crc32Final(Crc32UpdateWith(GetParam(), kCrc32Init, p, len)),
                ReferenceCrc32(p, len))
          << "len " << len << " off " << off;
    }
  }
  for (size_t len : {2048, 4096, 4099, 4351, 5000}) {
    ASSERT_EQ(Crc32Final(Crc32UpdateWith(GetParam(), kCrc32Init, buf.data() + 3, len)),
              ReferenceCrc32(buf.data() + 3, len))
        << "len " << len;
  }
}

TEST_P(Crc32ImplTest, SeededContinuationEqualsOneShot) {
  if (!Crc32ImplSupported(GetParam())) GTEST_SKIP() << "CPU lacks " << Crc32ImplName(GetParam());
  std::vector<uint8_t> buf(4200);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t split : {0, 1, 48, 64, 300, 4000, 4200}) {
    uint32_t s = Crc32UpdateWith(GetParam(), kCrc32Init, buf.data(), split);
    s = Crc32UpdateWith(GetParam(), s, buf.data() + split, buf.size() - split);
    EXPECT_EQ(Crc32Final(s), ReferenceCrc32(buf.data(), buf.size())) << "split " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(All, Crc32ImplTest,
                         ::testing::Values(Crc32Impl::kTable, Crc32Impl::kPclmul,
                                           Crc32Impl::kVpclmulAvx512),
                         [](const auto& info) { return std::string(Crc32ImplName(info.param)) == "vpclmul-avx512" ? std::string("vpclmul") : std::string(Crc32ImplName(info.param)); });

}  // namespace
}  // namespace droce::wire
