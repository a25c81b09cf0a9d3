// The parts of transmitting one 8,256-byte SEND at path MTU 4096 (UCX's
// rc_verbs bcopy segment: a FIRST, a MIDDLE and a 64-byte LAST frame) over a
// direct ring (pktio::FrameRing, 64 slots as droced makes them), timed apart:
//   memcpy, crc, copy_crc   8,256 B, hot buffers: memcpy, Crc32Update,
//                           Crc32CopyUpdate (the build's payload part)
//   ring_produce            Produce of the three frames, consumed on the same thread
// and with the consumer on the other CPU (the two processes of a direct
// path), each op timed alone once the consumer has drained the ring, so the
// slots were last read by the other CPU, as in a ping-pong:
//   ring_produce_xcpu       Produce alone
//   ring_produce_fence_xcpu Produce and TakeWakeupRequest (its fence waits for
//                           the copy's stores to leave the CPU)
//   ring_produce_seen_xcpu  Produce, a look at the consumer's wake-up request
//                           without the fence, and the fenced look at the next
//                           op (tried as branch stacks16-wake: the drain is then
//                           paid by the stores after the copy instead)
//   build_then_produce_xcpu copy_crc into frame buffers, Produce, TakeWakeupRequest
//   copy_crc_slot_xcpu      copy_crc straight into the slots and the fence: what
//                           building frames in the ring would cost
//   consume_*_per_frame     the consumer's Consume per frame meanwhile
//
// Usage: droce-tx-parts-bench [iterations] [cpu_producer cpu_consumer]
// DROCE_TX_PARTS_SLOTS: the ring's slots (default 64).
// Prints CSV: what,ns_per_fragment
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "pktio/frame_ring.h"
#include "tools/bench/icrc/two_cpus.h"
#include "wire/crc32.h"

namespace {

using namespace droce;
using bench::NowNs;
using bench::Pin;

constexpr uint32_t kSeg = 8256, kMtu = 4096, kHeaders = 54, kIcrc = 4;
uint32_t ring_slots = 64;  // droced's ring_slots default (DROCE_TX_PARTS_SLOTS)
constexpr uint32_t kFrames = 3;
constexpr uint32_t kLen[kFrames] = {kHeaders + kMtu + kIcrc, kHeaders + kMtu + kIcrc,
                                    kHeaders + (kSeg - 2 * kMtu) + kIcrc};

// The median over batches of 16 ops, per op: a preemption on the shared
// host spoils a batch, not the measure.
template <typename F>
double NsPer(uint64_t iters, F&& f) {
  std::vector<double> v;
  for (uint64_t i = 0; i < iters; i += 16) {
    const uint64_t start = NowNs();
    for (uint64_t k = i; k < i + 16; ++k) f(k);
    v.push_back(double(NowNs() - start) / 16);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per fragment, the op timed alone after the consumer drained the ring
// (`drained`): the slots were last read by the other CPU, as in a ping-pong
// where each side sends once the other's frames are in. Median of the ops.
template <typename D, typename F>
double NsPerDrained(uint64_t iters, D&& drained, F&& f) {
  std::vector<double> v;
  v.reserve(iters);
  for (uint64_t i = 0; i < iters; ++i) {
    while (!drained()) {
    }
    const uint64_t start = NowNs();
    f(i);
    v.push_back(double(NowNs() - start));
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A consumer thread on `cpu` draining `ring` into buffers of its own and
// reading every frame's first and last bytes, until `stop`.
struct Consumer {
  std::atomic<bool> stop{false};
  std::thread t;
  std::vector<double> ns_per_frame;  // each Consume that took frames
  void Start(pktio::FrameRing* ring, int cpu) {
    t = std::thread([this, ring, cpu] {
      Pin(cpu);
      std::vector<uint8_t> mem(kFrames * pktio::kMaxFrameBytes * 8);
      pktio::Frame f[kFrames * 8];
      volatile uint32_t sink = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint32_t i = 0; i < kFrames * 8; ++i) f[i] = {mem.data() + i * pktio::kMaxFrameBytes, 0, pktio::kMaxFrameBytes};
        const uint64_t t0 = NowNs();
        const uint16_t n = ring->Consume(f, kFrames * 8);
        if (n > 0 && ns_per_frame.size() < 4'000'000) ns_per_frame.push_back(double(NowNs() - t0) / n);
        for (uint16_t i = 0; i < n; ++i) sink = sink + f[i].data[0] + f[i].data[f[i].len - 1];
      }
    });
  }
  double Stop() {
    stop = true;
    t.join();
    std::sort(ns_per_frame.begin(), ns_per_frame.end());
    return ns_per_frame.empty() ? 0 : ns_per_frame[ns_per_frame.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  const uint64_t iters = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 200'000;
  if (const char* e = std::getenv("DROCE_TX_PARTS_SLOTS")) ring_slots = static_cast<uint32_t>(std::atoi(e));
  if (!pktio::FrameRing::ValidGeometry(ring_slots, pktio::FrameRing::kDefaultSlotBytes)) {
    std::fprintf(stderr, "DROCE_TX_PARTS_SLOTS: a power of two in [2, 65536]\n");
    return 2;
  }
  const int cpu_p = argc > 3 ? std::atoi(argv[2]) : 0;
  const int cpu_c = argc > 3 ? std::atoi(argv[3]) : 1;
  Pin(cpu_p);
  std::vector<uint8_t> src(kSeg, 0x5A), dst(kSeg);
  std::vector<uint8_t> frames(kFrames * pktio::kMaxFrameBytes, 0xA5);
  volatile uint32_t sink = 0;
  std::printf("what,ns_per_fragment\n");
  std::printf("memcpy,%.1f\n", NsPer(iters, [&](uint64_t) {
                std::memcpy(dst.data(), src.data(), kSeg);
                asm volatile("" : : "r"(dst.data()) : "memory");
              }));
  std::printf("crc,%.1f\n", NsPer(iters, [&](uint64_t) { sink = sink + wire::Crc32Update(~0u, src.data(), kSeg); }));
  std::printf("copy_crc,%.1f\n", NsPer(iters, [&](uint64_t) {
                sink = sink + wire::Crc32CopyUpdate(~0u, dst.data(), src.data(), kSeg);
                asm volatile("" : : "r"(dst.data()) : "memory");
              }));
  const size_t ring_bytes = pktio::FrameRing::Bytes(ring_slots, pktio::FrameRing::kDefaultSlotBytes);
  auto* mem = static_cast<uint8_t*>(std::aligned_alloc(64, ring_bytes));
  std::memset(mem, 0, ring_bytes);
  pktio::Frame fr[kFrames];
  for (uint32_t i = 0; i < kFrames; ++i) fr[i] = {frames.data() + i * pktio::kMaxFrameBytes, kLen[i], pktio::kMaxFrameBytes};
  {
    pktio::FrameRing ring(mem, ring_slots, pktio::FrameRing::kDefaultSlotBytes);
    std::vector<uint8_t> out(kFrames * pktio::kMaxFrameBytes);
    pktio::Frame o[kFrames];
    std::printf("ring_produce,%.1f\n", NsPer(iters, [&](uint64_t) {
                  (void)ring.Produce(fr, kFrames);
                  for (uint32_t i = 0; i < kFrames; ++i) o[i] = {out.data() + i * pktio::kMaxFrameBytes, 0, pktio::kMaxFrameBytes};
                  (void)ring.Consume(o, kFrames);
                }));
  }
  std::memset(mem, 0, ring_bytes);
  {
    pktio::FrameRing ring(mem, ring_slots, pktio::FrameRing::kDefaultSlotBytes), rx(mem, ring_slots, pktio::FrameRing::kDefaultSlotBytes);
    Consumer c;
    c.Start(&rx, cpu_c);
    auto drained = [&] { return *reinterpret_cast<std::atomic<uint32_t>*>(mem + 64) == *reinterpret_cast<std::atomic<uint32_t>*>(mem); };
    std::printf("ring_produce_xcpu,%.1f\n", NsPerDrained(iters, drained, [&](uint64_t) {
                  for (uint32_t d = 0; d < kFrames;) d += ring.Produce(fr + d, static_cast<uint16_t>(kFrames - d));
                }));
    std::printf("ring_produce_fence_xcpu,%.1f\n", NsPerDrained(iters, drained, [&](uint64_t) {
                  for (uint32_t d = 0; d < kFrames;) d += ring.Produce(fr + d, static_cast<uint16_t>(kFrames - d));
                  sink = sink + ring.TakeWakeupRequest();
                }));
    // The fenced look deferred to the next op, by then the stores are out.
    bool due = false;
    auto& sleeping = *reinterpret_cast<std::atomic<uint32_t>*>(mem + 128);
    std::printf("ring_produce_seen_xcpu,%.1f\n", NsPerDrained(iters, drained, [&](uint64_t) {
                  if (due) sink = sink + ring.TakeWakeupRequest();
                  for (uint32_t d = 0; d < kFrames;) d += ring.Produce(fr + d, static_cast<uint16_t>(kFrames - d));
                  due = sleeping.load(std::memory_order_relaxed) == 0;
                }));
    std::printf("build_then_produce_xcpu,%.1f\n", NsPerDrained(iters, drained, [&](uint64_t) {
                  uint32_t crc = ~0u;
                  for (uint32_t i = 0; i < kFrames; ++i) {
                    const uint32_t n = kLen[i] - kHeaders - kIcrc;
                    crc = wire::Crc32CopyUpdate(crc, fr[i].data + kHeaders, src.data() + i * kMtu, n);
                  }
                  sink = sink + crc;
                  for (uint32_t d = 0; d < kFrames;) d += ring.Produce(fr + d, static_cast<uint16_t>(kFrames - d));
                  sink = sink + ring.TakeWakeupRequest();
                }));
    std::printf("consume_xcpu_per_frame,%.1f\n", c.Stop());
  }
  std::free(mem);
  // Building in the slots: the frame written where the consumer reads it.
  // The ring is driven by hand here (slot address and head store), as a
  // producer API that hands out slots would.
  {
    auto* m2 = static_cast<uint8_t*>(std::aligned_alloc(64, ring_bytes));
    std::memset(m2, 0, ring_bytes);
    pktio::FrameRing rx(m2, ring_slots, pktio::FrameRing::kDefaultSlotBytes);
    Consumer c;
    c.Start(&rx, cpu_c);
    auto& head = *reinterpret_cast<std::atomic<uint32_t>*>(m2);
    auto& tail = *reinterpret_cast<std::atomic<uint32_t>*>(m2 + 64);
    uint32_t my_head = 0;
    auto drained = [&] { return tail.load(std::memory_order_acquire) == my_head; };
    std::printf("copy_crc_slot_xcpu,%.1f\n", NsPerDrained(iters, drained, [&](uint64_t) {
                  uint32_t crc = ~0u;
                  for (uint32_t i = 0; i < kFrames; ++i) {
                    uint8_t* s = m2 + pktio::FrameRing::kHeaderBytes +
                                 size_t{(my_head + i) & (ring_slots - 1)} * pktio::FrameRing::kDefaultSlotBytes;
                    std::memcpy(s, &kLen[i], 4);
                    std::memcpy(s + pktio::FrameRing::kSlotHeader, frames.data(), kHeaders);
                    const uint32_t n = kLen[i] - kHeaders - kIcrc;
                    crc = wire::Crc32CopyUpdate(crc, s + pktio::FrameRing::kSlotHeader + kHeaders, src.data() + i * kMtu, n);
                  }
                  sink = sink + crc;
                  my_head += kFrames;
                  head.store(my_head, std::memory_order_release);
                  std::atomic_thread_fence(std::memory_order_seq_cst);  // TakeWakeupRequest's
                }));
    std::printf("consume_slot_xcpu_per_frame,%.1f\n", c.Stop());
    std::free(m2);
  }
  std::printf("# crc implementation: %s\n", wire::Crc32ImplName(wire::ActiveCrc32Impl()));
  return 0;
}
