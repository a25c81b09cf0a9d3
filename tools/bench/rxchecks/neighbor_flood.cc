// The receive path's cost under an ARP flood from distinct senders: each
// frame teaches the neighbour table a new address, evicting the oldest
// learnt one once the table is full. Prints CSV rows
// senders,ns_per_frame,key_compares_per_frame for a small and a large flood
// in the same run: a bounded table costs the same per frame at both sizes.
//
//   droce-neighbor-flood [LARGE=50000]
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/arp.h"

namespace {

using namespace droce;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::vector<uint8_t> ArpRequestFrom(uint32_t sender_ip, const core::Mac& sender_mac, uint32_t target_ip) {
  wire::ArpPacket a;
  a.op = wire::kArpRequest;
  a.sender_ip = sender_ip;
  a.sender_mac = sender_mac;
  a.target_ip = target_ip;
  a.target_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  std::vector<uint8_t> f(wire::kArpFrameBytes + wire::kVlanTagBytes);
  f.resize(wire::BuildArp(a, false, 0, f.data()));
  return f;
}

void Flood(uint32_t senders) {
  constexpr uint32_t kOwnIp = 0x0A000001;
  sim::ScriptedIo io;
  core::DeviceConfig cfg;
  cfg.ipv4 = kOwnIp;
  core::Device dev(cfg, &io);
  // Frames are built before the clock starts: only the device's work counts.
  std::vector<std::vector<uint8_t>> frames;
  frames.reserve(senders);
  for (uint32_t i = 0; i < senders; ++i) {
    const core::Mac m = {0x02, 0xee, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8),
                         static_cast<uint8_t>(i), 1};
    frames.push_back(ArpRequestFrom(0x0B000000 + i, m, kOwnIp));
  }
  const uint64_t compares_before = dev.neighbor_key_compares();
  uint64_t busy_ns = 0;
  for (uint32_t i = 0; i < senders; i += 32) {
    for (uint32_t k = i; k < senders && k < i + 32; ++k) io.rx.push_back(std::move(frames[k]));
    const uint64_t t0 = NowNs();
    while (!io.rx.empty()) dev.Poll(i);
    busy_ns += NowNs() - t0;
    io.sent.clear();  // the ARP replies
  }
  std::printf("%u,%.1f,%.2f\n", senders, double(busy_ns) / senders,
              double(dev.neighbor_key_compares() - compares_before) / senders);
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t large = argc > 1 ? static_cast<uint32_t>(std::strtoul(argv[1], nullptr, 10)) : 50'000;
  std::printf("senders,ns_per_frame,key_compares_per_frame\n");
  Flood(1'000);
  Flood(large);
  return 0;
}
