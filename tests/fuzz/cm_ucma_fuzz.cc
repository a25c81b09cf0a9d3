// libFuzzer target for droced's connection manager (apps/droced/cm_service):
// the input is a script of ucma commands from three event channels, MADs
// from the wire, time steps and channel closes; the CM's own MADs are looped
// back between two devices. Nothing may crash or read out of bounds (ASan),
// and once every channel is closed no rdma_cm id or multicast join may be left.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <tuple>
#include <vector>

#include "apps/droced/cm_service.h"

namespace {

using namespace droce;
using droced::CmDevice;
using droced::CmService;
using droced::GsiPath;

CmDevice Dev(uint8_t last, uint32_t ip) {
  CmDevice d;
  d.mac = {0x02, 0xd0, 0xce, 0, 0, last};
  d.guid = 0x00d0ceFFFE000000ull | last;
  cm::Gid v4{};
  v4[10] = v4[11] = 0xFF;
  v4[12] = static_cast<uint8_t>(ip >> 24);
  v4[13] = static_cast<uint8_t>(ip >> 16);
  v4[14] = static_cast<uint8_t>(ip >> 8);
  v4[15] = static_cast<uint8_t>(ip);
  d.gids = {cm::Gid{0xFE, 0x80}, v4};
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return 0;
  std::deque<std::tuple<int, GsiPath, std::array<uint8_t, cm::kMadSize>>> wire;
  CmService cm([&](int dev, const GsiPath& p, const std::array<uint8_t, cm::kMadSize>& m) {
                 if (wire.size() < 64) wire.emplace_back(dev, p, m);
               },
               1);
  cm.SetDevices({Dev(1, 0x0a000001), Dev(2, 0x0a000002)});
  uint64_t now = 1000;
  size_t i = 0;
  while (i + 3 <= size) {  // [op][length, 2 bytes little-endian][bytes]
    const uint8_t op = data[i];
    const size_t len = data[i + 1] | (size_t{data[i + 2]} << 8);
    i += 3;
    const size_t n = std::min(len, size - i);
    // An exactly sized copy: overreads are caught.
    const std::vector<uint8_t> chunk(data + i, data + i + n);
    i += n;
    const int conn = 10 + op % 3;
    switch (op >> 5) {
      case 0:
      case 1:
      case 2: {  // a command, its option bytes after the first 8
        const size_t split = std::min<size_t>(chunk.size(), chunk.size() > 8 ? chunk.size() - 8 : chunk.size());
        (void)cm.Command(conn, std::span<const uint8_t>(chunk.data(), split), now,
                         std::span<const uint8_t>(chunk.data() + split, chunk.size() - split));
        break;
      }
      case 3: {  // a MAD from the wire (padded to 256 bytes half of the time)
        std::vector<uint8_t> mad = chunk;
        if (op & 1) mad.resize(cm::kMadSize);
        GsiPath p;
        p.dst_mac = cm.devices()[op & 1].mac;
        cm.OnMad(op & 1, p, mad, now);
        break;
      }
      case 4:
        now += chunk.empty() ? 1 : uint64_t{chunk[0]} << (op & 15);
        cm.OnTimer(now);
        break;
      case 5:
        cm.ConnectionClosed(conn, now);
        break;
      default:
        break;
    }
    for (int k = 0; k < 64 && !wire.empty(); ++k) {  // the switch: back to the device with that MAC
      auto [dev, path, mad] = wire.front();
      wire.pop_front();
      uint8_t frame[droced::kGsiFrameMax];
      const uint32_t flen = droced::BuildGsiFrame(path, mad, 0, frame);
      for (size_t d = 0; d < cm.devices().size(); ++d) {
        if (cm.devices()[d].mac == path.dst_mac) cm.OnGsiFrame(static_cast<int>(d), frame, flen, now);
      }
    }
  }
  for (int conn = 10; conn < 13; ++conn) cm.ConnectionClosed(conn, now);
  if (cm.id_count() != 0) std::abort();
  if (cm.mcast_count() != 0) std::abort();  // multicast joins leave with their ids
  return 0;
}
