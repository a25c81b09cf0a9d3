// What a gather frame a full direct ring refused costs the sender in
// instructions (callgrind): a 4 KiB READ response built as a gather frame
// (pktio::Frame::gather) and Produced into a 64-slot FrameRing (its payload
// copied from the "MR" into the slot), against the same frame flattened
// first (pktio::Flatten, what DirectIo::TxBurst does to a frame a full ring
// refused) and Produced flat. The consumer frees each slot at once.
//   b=build-relg/tools/bench/stacks/droce-flatten-cost-bench
//   for m in gather flatten; do for n in 1000 11000; do
//     valgrind --tool=callgrind --callgrind-out-file=/dev/null $b $m $n; done; done
// Per frame: (instructions at 11000 - at 1000) / 10000, per mode.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "pktio/frame_ring.h"
using namespace droce::pktio;
int main(int argc, char** argv) {
  const bool flatten = argc > 1 && std::strcmp(argv[1], "flatten") == 0;
  const int n = argc > 2 ? std::atoi(argv[2]) : 10000;
  constexpr uint32_t slots = 64, sb = FrameRing::kDefaultSlotBytes;
  std::vector<uint8_t> mem(FrameRing::Bytes(slots, sb) + 64);
  uint8_t* at = mem.data() + (64 - reinterpret_cast<uintptr_t>(mem.data()) % 64) % 64;
  FrameRing prod(at, slots, sb), cons(at, slots, sb);
  std::vector<uint8_t> mr(4096, 0x5a), buf(kMaxFrameBytes);
  uint64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    Frame f{buf.data(), 0, kMaxFrameBytes, nullptr};
    std::memset(buf.data(), i, 64);  // headers (the build writes them either way)
    std::memcpy(buf.data() + 64, "ICRC", 4);
    f.gather = mr.data();
    f.gather_len = 4096;
    f.gather_at = 64;
    f.len = 64 + 4096 + 4;
    if (flatten) Flatten(f);
    sum += prod.Produce(&f, 1);
    Frame v[1];
    if (cons.Peek(v, 1) == 1) { sum += v[0].data[100]; cons.Release(1); }
  }
  std::printf("%llu\n", static_cast<unsigned long long>(sum));
}
