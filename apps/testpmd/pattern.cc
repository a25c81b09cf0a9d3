#include "apps/testpmd/pattern.h"

#include <algorithm>
#include <cstring>

namespace droce::testpmd {

// Message `seq`'s pattern: word 0 is seq, every later 8-byte word is a fixed
// random word for its offset XOR a mask derived from (seq, 64 KiB block), so
// a word that landed at the wrong offset, in the wrong message or corrupted
// does not match. Unlike a running PRNG there is no chain from word to word:
// fill and check run at memory speed instead of capping the benchmark's
// goodput (a serial xorshift stream would take most of a 64 KiB client's time).
namespace {
constexpr uint32_t kBlockBytes = 64 * 1024;
constexpr uint32_t kBlockWords = kBlockBytes / 8;

const uint64_t* PatternWords() {
  static const uint64_t* words = [] {
    auto* w = new uint64_t[kBlockWords];
    uint64_t x = 0x243F6A8885A308D3ull;
    for (uint32_t i = 0; i < kBlockWords; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w[i] = x;
    }
    return w;
  }();
  return words;
}

uint64_t BlockMask(uint64_t seq, uint64_t block) {
  uint64_t z = seq * 0x9E3779B97F4A7C15ull + block * 0xBF58476D1CE4E5B9ull + 1;
  z ^= z >> 31;
  return z * 0x94D049BB133111EBull;
}

}  // namespace

// Plain loops over one 64 KiB block at a time, so the compiler vectorises
// them (a per-word callback did not, and filling took 44% of a 64 KiB
// write_bw client's core).
void FillPattern(uint8_t* p, uint32_t n, uint64_t seq) {
  const uint64_t* base = PatternWords();
  const uint32_t words_end = n & ~7u;
  for (uint32_t start = 0; start < words_end; start += kBlockBytes) {
    const uint64_t mask = BlockMask(seq, start / kBlockBytes);
    const uint32_t count = (std::min(words_end, start + kBlockBytes) - start) / 8;
    uint8_t* block = p + start;
    for (uint32_t w = 0; w < count; ++w) {
      const uint64_t v = base[w] ^ mask;
      std::memcpy(block + 8 * w, &v, 8);
    }
  }
  if (n >= 8) std::memcpy(p, &seq, 8);  // word 0 names the message
  for (uint32_t i = words_end; i < n; ++i) p[i] = static_cast<uint8_t>(seq + i);
}

bool CheckPattern(const uint8_t* p, uint32_t n, uint64_t seq) {
  if (n >= 8 && std::memcmp(p, &seq, 8) != 0) return false;
  const uint32_t words_end = n & ~7u;
  for (uint32_t i = words_end; i < n; ++i) {
    if (p[i] != static_cast<uint8_t>(seq + i)) return false;
  }
  const uint64_t* base = PatternWords();
  uint64_t diff = 0;  // accumulated, not branched on per word: the loop vectorises
  for (uint32_t start = 0; start < words_end; start += kBlockBytes) {
    const uint64_t mask = BlockMask(seq, start / kBlockBytes);
    const uint32_t count = (std::min(words_end, start + kBlockBytes) - start) / 8;
    const uint8_t* block = p + start;
    for (uint32_t w = start == 0 ? 1 : 0; w < count; ++w) {  // word 0 was compared above
      uint64_t got;
      std::memcpy(&got, block + 8 * w, 8);
      diff |= got ^ base[w] ^ mask;
    }
  }
  return diff == 0;
}

}  // namespace droce::testpmd
