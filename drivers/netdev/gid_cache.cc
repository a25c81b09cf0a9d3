#include "drivers/netdev/gid_cache.h"

#include <algorithm>

namespace droce::netdev {

GidCache::Gid GidCache::DefaultGid(const Mac& mac) {
  return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xFF, 0xFE,
             mac[3], mac[4], mac[5]};
}

bool GidCache::SetMac(const Mac& mac) {
  const Gid g = DefaultGid(mac);
  if (entries_[0] == g) return false;
  entries_[0] = g;
  // An address that was the old default's twin, or is the new one's, is
  // kept once: at index 0.
  for (size_t i = 1; i < kSize; ++i) {
    if (entries_[i] == g) entries_[i] = Gid{};
  }
  return true;
}

int GidCache::Find(const Gid& gid) const {
  if (gid == Gid{}) return -1;
  for (size_t i = 0; i < kSize; ++i) {
    if (entries_[i] == gid) return static_cast<int>(i);
  }
  return -1;
}

bool GidCache::Update(const std::vector<Gid>& addrs) {
  bool changed = false;
  auto wanted = [&](const Gid& g) { return std::find(addrs.begin(), addrs.end(), g) != addrs.end(); };
  for (size_t i = 1; i < kSize; ++i) {
    if (entries_[i] != Gid{} && !wanted(entries_[i])) {
      entries_[i] = Gid{};
      changed = true;
    }
  }
  overflowed_ = 0;
  for (const Gid& g : addrs) {
    if (g == Gid{} || Find(g) >= 0) continue;
    size_t i = 1;
    while (i < kSize && entries_[i] != Gid{}) ++i;
    if (i == kSize) {
      ++overflowed_;
      continue;
    }
    entries_[i] = g;
    changed = true;
  }
  return changed;
}

}  // namespace droce::netdev
