// ICRC throughput beside single-core hot memcpy of the same sizes, measured
// in the same run: full ICRC computation of a RoCEv2 frame (masked headers
// plus payload, ComputeIcrc) and raw CRC-32 per implementation; then a
// direct ring's two passes per 4 KiB frame with and without the CRC
// (ring_pair_*: copy, copy_crc, copy_crc_rx_once, rx_trusted).
//
// Prints CSV: size,what,gbytes_per_s,ns_per_packet
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "wire/crc32.h"
#include "wire/fields.h"
#include "wire/packet.h"

namespace {

using namespace droce::wire;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

template <typename F>
double MedianNsPerOp(F&& op, uint64_t iters, int trials) {
  std::vector<double> v;
  for (int t = 0; t < trials; ++t) {
    const uint64_t start = NowNs();
    for (uint64_t i = 0; i < iters; ++i) op(i);
    v.push_back(double(NowNs() - start) / double(iters));
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 9;
  std::printf("size,what,gbytes_per_s,ns_per_packet\n");
  for (uint32_t size : {64u, 1024u, 4096u}) {
    // A RoCEv2 RDMA WRITE ONLY frame whose whole length (Eth..ICRC) is `size`
    // when possible; the payload fills the rest.
    const uint32_t headers = 14 + 20 + 8 + 12 + 16 + 4;
    const uint32_t payload_len = size > headers ? size - headers : 0;
    std::vector<uint8_t> payload(payload_len, 0x5A);
    PacketFields f;
    f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
    f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
    f.bth.opcode = kRcWriteOnly;
    f.reth_length = payload_len;
    f.payload = payload;
    std::vector<uint8_t> frame(8192);
    const uint32_t frame_len = *SerializeFields(f, frame.data(), 8192);
    const ParsedPacket p = ParsePacket(frame.data(), frame_len);
    const uint64_t iters = 400'000'000ull / std::max(size, 256u);
    volatile uint32_t sink = 0;

    std::vector<uint8_t> src(size, 1), dst(size);
    const double memcpy_ns = MedianNsPerOp(
        [&](uint64_t i) {
          (void)i;
          std::memcpy(dst.data(), src.data(), size);
          asm volatile("" : : "r"(dst.data()), "r"(src.data()) : "memory");  // keep every copy
        },
        iters, trials);
    const double icrc_ns = MedianNsPerOp(
        [&](uint64_t i) {
          (void)i;
          sink = sink + ComputeIcrc(frame.data() + p.l3_offset, p.icrc_offset - p.l3_offset, false);
          asm volatile("" : : "r"(frame.data()) : "memory");
        },
        iters, trials);
    std::printf("%u,memcpy,%.2f,%.1f\n", size, size / memcpy_ns, memcpy_ns);
    std::printf("%u,icrc_frame,%.2f,%.1f\n", size, size / icrc_ns, icrc_ns);
    for (Crc32Impl impl :
         {Crc32Impl::kTable, Crc32Impl::kPclmul, Crc32Impl::kPclmulAvx, Crc32Impl::kVpclmulAvx512}) {
      if (!Crc32ImplSupported(impl)) continue;
      const double ns = MedianNsPerOp(
          [&](uint64_t i) {
            (void)i;
            sink = sink + Crc32UpdateWith(impl, kCrc32Init, src.data(), size);
            asm volatile("" : : "r"(src.data()) : "memory");
          },
          impl == Crc32Impl::kTable ? iters / 8 : iters, trials);
      std::printf("%u,crc32_%s,%.2f,%.1f\n", size, Crc32ImplName(impl), size / ns, ns);
    }
    std::printf("%u,icrc_vs_memcpy_time,%.2f,\n", size, icrc_ns / memcpy_ns);
  }
  // A 768 KiB message as 4 KiB payloads through 64 slots of 4416 bytes (a
  // direct ring), on one CPU: per frame the sender's pass (message to slot)
  // and the receiver's (slot to its message), each a plain copy or the fused
  // copy and CRC. Out of L1 (the message and the ring are 1 MiB together),
  // as in the MPI ping-pong; the two-CPU pipeline is
  // droce-ring-footprint-bench's DROCE_RING_FOOTPRINT_MODES.
  {
    constexpr size_t kMsg = 786432, kSlots = 64, kSlotBytes = 4416, kPay = 4096;
    std::vector<uint8_t> a(kMsg, 0x5A), ring(kSlots * kSlotBytes, 0x11), b(kMsg, 0);
    volatile uint32_t sink = 0;
    const char* names[] = {"ring_pair_copy", "ring_pair_copy_crc", "ring_pair_copy_crc_rx_once", "ring_pair_rx_trusted"};
    std::vector<double> v[4];
    for (int t = 0; t < 4 * trials + 1; ++t) {
      for (int m = 0; m < 4; ++m) {
        const uint64_t t0 = NowNs();
        for (size_t off = 0, k = 0; off < kMsg; off += kPay, ++k) {
          uint8_t* slot = ring.data() + (k % kSlots) * kSlotBytes + 64;
          if (m == 0) {
            std::memcpy(slot, a.data() + off, kPay);
          } else {
            sink = sink + Crc32CopyUpdate(kCrc32Init, slot, a.data() + off, kPay);
          }
          if (m == 1) {
            sink = sink + Crc32CopyUpdate(kCrc32Init, b.data() + off, slot, kPay);
          } else if (m == 2) {
            sink = sink + Crc32CopyOnceUpdate(kCrc32Init, b.data() + off, slot, kPay);
          } else {
            std::memcpy(b.data() + off, slot, kPay);
          }
          asm volatile("" : : "r"(slot), "r"(b.data()) : "memory");
        }
        v[m].push_back(double(NowNs() - t0) / double(kMsg / kPay));
      }
    }
    for (int m = 0; m < 4; ++m) {
      std::sort(v[m].begin(), v[m].end());
      const double ns = v[m][v[m].size() / 2];
      std::printf("4096,%s,%.2f,%.1f\n", names[m], 4096 / ns, ns);
    }
  }
  std::printf("# active CRC implementation: %s\n", Crc32ImplName(ActiveCrc32Impl()));
  return 0;
}
