// libFuzzer target for droced's netlink parser (drivers/netdev/netlink.h):
// any bytes as one receive of the kernel's messages. Nothing may be read
// outside the input (ASan); what parses must be self-consistent (names
// shorter than IFNAMSIZ, addresses of their family's form), and the
// addresses fed to a GID table must leave it consistent (index 0 the
// default GID, no address twice, holes zero).
#include <linux/if.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "drivers/netdev/gid_cache.h"
#include "drivers/netdev/netlink.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace droce::netdev;
  if (size > 65536) return 0;
  const std::vector<uint8_t> bytes(data, data + size);  // exactly sized: overreads are caught
  std::vector<NetlinkEvent> events;
  (void)ParseNetlink(bytes.data(), bytes.size(), &events);
  GidCache table({0x02, 0, 0, 0, 0, 1});
  std::vector<Gid> addrs;
  for (const NetlinkEvent& e : events) {
    if (e.link.name.size() >= IFNAMSIZ) std::abort();
    if (e.kind == NetlinkEvent::kNewAddr) {
      if (!e.addr.ipv6 && !IsIpv4(e.addr.addr)) std::abort();
      addrs.push_back(e.addr.addr);
    }
    if (e.kind == NetlinkEvent::kDelAddr) std::erase(addrs, e.addr.addr);
    if (e.kind == NetlinkEvent::kNewLink && e.link.has_mac) table.SetMac(e.link.mac);
    table.Update(addrs);
    if (!table.valid(0) || table.entries()[0] == Gid{}) std::abort();
    for (size_t i = 0; i < GidCache::kSize; ++i) {
      for (size_t k = i + 1; k < GidCache::kSize; ++k) {
        if (table.valid(i) && table.valid(k) && table.entries()[i] == table.entries()[k]) std::abort();
      }
    }
  }
  return 0;
}
