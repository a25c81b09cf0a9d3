// A rendezvous ping-pong over two direct rings (pktio::FrameRing, one per
// direction, as droced sets up between two processes) with nothing else: two
// threads on two CPUs, each with a message buffer of its own (the rank's, sent
// from and received into), a few frame buffers reused LIFO (the process's
// frame pool), and per direction one ring of `slots` slots of
// kDefaultSlotBytes. A message of M bytes goes as READ response frames of
// 4096 payload bytes: the sender builds each (its headers, the payload copied
// from its message buffer with the ICRC fused), Produces them 4 at a time (the
// device's 16 KiB transmit flush), the receiver Consumes up to 32 at once into
// its frame buffers and copies each payload into its message buffer (CRC fused,
// the placement). Then the other side sends the message back.
//
// What it isolates is the memory the rings add to each CPU's working set:
// per direction slots x 4416 bytes, cycled in order, against 2 MiB of L2 per
// core here. Arms (ring sizes) alternate batch by batch so they share the load.
//
// DROCE_RING_FOOTPRINT_MODES picks what each side does with the ICRC and how
// the receiver reads a slot (arms, alternated with the ring sizes):
//   copied      the above (Consume copies the frame out, then the fused placement)
//   lent        the receiver copies the headers (128 B) and places the payload
//               from the slot with the fused CRC (Crc32CopyOnceUpdate), as a
//               lent frame; the sender as above: two CRC passes
//   rx_trusted  lent, the receiver places with a plain copy (no ICRC check)
//   none        rx_trusted, and the sender copies the payload without the CRC
// So lent - rx_trusted is the receiver's CRC pass, rx_trusted - none the sender's.
//
// Usage: droce-ring-footprint-bench [round_trips_per_batch batches] [cpu_a cpu_b]
// DROCE_RING_FOOTPRINT_SIZES: message bytes, comma-separated (262144,524288,786432,1048576)
// DROCE_RING_FOOTPRINT_SLOTS: ring sizes, comma-separated (32,64,128,256)
// DROCE_RING_FOOTPRINT_MODES: comma-separated (copied)
// Prints CSV: bytes,slots,mode,ns_per_frame (median over batches of the one-way
// time per 4 KiB frame),ns_one_way (median)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "pktio/frame_ring.h"
#include "tools/bench/icrc/two_cpus.h"
#include "wire/crc32.h"

namespace {

using namespace droce;
using bench::NowNs;
using bench::Pin;

constexpr uint32_t kMtu = 4096, kHeaders = 58, kIcrc = 4;  // Eth+IP+UDP+BTH+AETH
constexpr uint16_t kFlush = 4, kRxBurst = 32, kPool = 64;
constexpr uint32_t kLentHead = 128;  // ethdev::DirectIo::kLendHeadBytes

enum class Mode { kCopied, kLent, kRxTrusted, kNone };
constexpr const char* kModeNames[] = {"copied", "lent", "rx_trusted", "none"};

std::vector<uint32_t> List(const char* env, const char* dflt) {
  std::vector<uint32_t> v;
  std::string s = std::getenv(env) != nullptr ? std::getenv(env) : dflt;
  for (size_t pos = 0; pos <= s.size();) {
    const size_t comma = s.find(',', pos);
    v.push_back(static_cast<uint32_t>(std::strtoul(s.substr(pos, comma - pos).c_str(), nullptr, 10)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return v;
}

// One side: its message buffer, its frame pool, its two ring ends.
struct Side {
  Mode mode;
  uint8_t head[kLentHead];  // a lent frame's private headers
  std::vector<uint8_t> msg;
  std::vector<uint8_t> pool_mem;
  std::vector<uint8_t*> free_list;  // LIFO, as pktio::FramePool
  pktio::FrameRing tx, rx;
  volatile uint32_t sink = 0;

  Side(size_t bytes, Mode m, pktio::FrameRing t, pktio::FrameRing r)
      : mode(m), msg(bytes, 0x5A), pool_mem(size_t{kPool} * pktio::kMaxFrameBytes, 0xA5), tx(t), rx(r) {
    for (uint32_t i = 0; i < kPool; ++i) free_list.push_back(pool_mem.data() + size_t{i} * pktio::kMaxFrameBytes);
  }
  uint8_t* Alloc() {
    uint8_t* b = free_list.back();
    free_list.pop_back();
    return b;
  }
  void Free(uint8_t* b) { free_list.push_back(b); }

  void Send(size_t bytes) {
    const uint32_t frames = static_cast<uint32_t>((bytes + kMtu - 1) / kMtu);
    pktio::Frame f[kFlush];
    for (uint32_t i = 0; i < frames;) {
      const uint16_t n = static_cast<uint16_t>(std::min<uint32_t>(kFlush, frames - i));
      for (uint16_t k = 0; k < n; ++k) {
        const size_t off = size_t{i + k} * kMtu;
        const uint32_t pay = static_cast<uint32_t>(std::min<size_t>(kMtu, bytes - off));
        uint8_t* b = Alloc();
        std::memset(b, 0x11, kHeaders);
        uint32_t crc = 0;
        if (mode == Mode::kNone) {
          std::memcpy(b + kHeaders, msg.data() + off, pay);
        } else {
          crc = wire::Crc32CopyUpdate(~0u, b + kHeaders, msg.data() + off, pay);
        }
        std::memcpy(b + kHeaders + pay, &crc, kIcrc);
        f[k] = {b, kHeaders + pay + kIcrc, pktio::kMaxFrameBytes};
      }
      uint16_t done = 0;
      while (done < n) done = static_cast<uint16_t>(done + tx.Produce(f + done, static_cast<uint16_t>(n - done)));
      for (uint16_t k = 0; k < n; ++k) Free(f[k].data);
      i += n;
    }
  }

  void Receive(size_t bytes) {
    if (mode != Mode::kCopied) return ReceiveLent(bytes);
    const uint32_t frames = static_cast<uint32_t>((bytes + kMtu - 1) / kMtu);
    pktio::Frame f[kRxBurst];
    for (uint32_t got = 0; got < frames;) {
      for (uint16_t k = 0; k < kRxBurst; ++k) f[k] = {Alloc(), 0, pktio::kMaxFrameBytes};
      const uint16_t n = rx.Consume(f, kRxBurst);
      for (uint16_t k = 0; k < n; ++k) {
        const size_t off = size_t{got + k} * kMtu;
        const uint32_t pay = f[k].len - kHeaders - kIcrc;
        sink = sink + wire::Crc32CopyUpdate(~0u, msg.data() + off, f[k].data + kHeaders, pay);
      }
      for (int k = kRxBurst - 1; k >= 0; --k) Free(f[k].data);
      got += n;
    }
  }

  // As ethdev::DirectIo and core::Device with a lent frame: the headers
  // copied, the payload read once in the slot by the placement.
  void ReceiveLent(size_t bytes) {
    const uint32_t frames = static_cast<uint32_t>((bytes + kMtu - 1) / kMtu);
    pktio::Frame v[kRxBurst];
    for (uint32_t got = 0; got < frames;) {
      const uint16_t n = rx.Peek(v, kRxBurst);
      for (uint16_t k = 0; k < n; ++k) {
        const size_t off = size_t{got + k} * kMtu;
        std::memcpy(head, v[k].data, kLentHead);
        const uint32_t pay = v[k].len - kHeaders - kIcrc;
        if (mode == Mode::kLent) {
          uint32_t stored;
          const uint32_t crc = wire::Crc32CopyOnceUpdate(~0u, msg.data() + off, v[k].data + kHeaders, pay);
          std::memcpy(&stored, v[k].data + kHeaders + pay, kIcrc);
          sink = sink + (crc == stored);
        } else {
          std::memcpy(msg.data() + off, v[k].data + kHeaders, pay);
          sink = sink + head[k & 63];
        }
      }
      rx.Release(n);
      got += n;
    }
  }
};

// Median one-way ns of `trips` round trips of `bytes` over rings of `slots`.
double Batch(size_t bytes, uint32_t slots, Mode mode, uint32_t trips, int cpu_a, int cpu_b) {
  const uint32_t sb = pktio::FrameRing::kDefaultSlotBytes;
  const size_t ring_bytes = pktio::FrameRing::Bytes(slots, sb);
  auto* ab = static_cast<uint8_t*>(std::aligned_alloc(64, ring_bytes));
  auto* ba = static_cast<uint8_t*>(std::aligned_alloc(64, ring_bytes));
  std::memset(ab, 0, ring_bytes);
  std::memset(ba, 0, ring_bytes);
  std::vector<double> rt;
  std::thread b([&] {
    Pin(cpu_b);
    Side s(bytes, mode, pktio::FrameRing(ba, slots, sb), pktio::FrameRing(ab, slots, sb));
    for (uint32_t i = 0; i < trips + 2; ++i) {
      s.Receive(bytes);
      s.Send(bytes);
    }
  });
  Pin(cpu_a);
  {
    Side s(bytes, mode, pktio::FrameRing(ab, slots, sb), pktio::FrameRing(ba, slots, sb));
    for (uint32_t i = 0; i < trips + 2; ++i) {
      const uint64_t t0 = NowNs();
      s.Send(bytes);
      s.Receive(bytes);
      if (i >= 2) rt.push_back(double(NowNs() - t0) / 2);  // the first two warm the buffers
    }
  }
  b.join();
  std::free(ab);
  std::free(ba);
  std::sort(rt.begin(), rt.end());
  return rt[rt.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t trips = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[1])) : 200;
  const uint32_t batches = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 9;
  const int cpu_a = argc > 4 ? std::atoi(argv[3]) : 0;
  const int cpu_b = argc > 4 ? std::atoi(argv[4]) : 1;
  const std::vector<uint32_t> sizes = List("DROCE_RING_FOOTPRINT_SIZES", "262144,524288,786432,1048576");
  const std::vector<uint32_t> slots = List("DROCE_RING_FOOTPRINT_SLOTS", "32,64,128,256");
  for (uint32_t s : slots) {
    if (!pktio::FrameRing::ValidGeometry(s, pktio::FrameRing::kDefaultSlotBytes) || s < kFlush) {
      std::fprintf(stderr, "DROCE_RING_FOOTPRINT_SLOTS: powers of two in [4, 65536]\n");
      return 2;
    }
  }
  std::vector<Mode> modes;
  {
    std::string m = std::getenv("DROCE_RING_FOOTPRINT_MODES") != nullptr ? std::getenv("DROCE_RING_FOOTPRINT_MODES")
                                                                          : "copied";
    for (size_t pos = 0; pos <= m.size();) {
      const size_t comma = m.find(',', pos);
      const std::string name = m.substr(pos, comma - pos);
      size_t i = 0;
      while (i < 4 && name != kModeNames[i]) ++i;
      if (i == 4) {
        std::fprintf(stderr, "DROCE_RING_FOOTPRINT_MODES: copied, lent, rx_trusted, none\n");
        return 2;
      }
      modes.push_back(static_cast<Mode>(i));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  }
  std::printf("bytes,slots,mode,ns_per_frame,ns_one_way\n");
  const size_t arms = slots.size() * modes.size();
  for (uint32_t bytes : sizes) {
    std::vector<std::vector<double>> v(arms);
    for (uint32_t k = 0; k < batches; ++k) {
      for (size_t j = 0; j < arms; ++j) {
        v[j].push_back(Batch(bytes, slots[j / modes.size()], modes[j % modes.size()], trips, cpu_a, cpu_b));
      }
    }
    for (size_t j = 0; j < arms; ++j) {
      std::sort(v[j].begin(), v[j].end());
      const double ns = v[j][v[j].size() / 2];
      std::printf("%u,%u,%s,%.1f,%.0f\n", bytes, slots[j / modes.size()],
                  kModeNames[static_cast<int>(modes[j % modes.size()])], ns / ((bytes + kMtu - 1) / kMtu), ns);
    }
    std::fflush(stdout);
  }
  std::printf("# crc implementation: %s\n", wire::Crc32ImplName(wire::ActiveCrc32Impl()));
  return 0;
}
