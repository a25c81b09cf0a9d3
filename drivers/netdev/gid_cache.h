// The RoCE GID table of a netdev-bound device (doc/netdev.md), kept as
// Linux's RoCE GID cache keeps a port's (drivers/infiniband/core/
// roce_gid_mgmt.c and cache.c): index 0 is the default GID, fe80:: with the
// EUI-64 of the interface's MAC, always present; every address of the
// interface takes the first free index when it appears and keeps it until it
// goes, and a removed address leaves a hole (the zero GID) that the next new
// address fills. So the index a program took for an address stays valid for
// as long as the address lives. Every entry is RoCE v2.
#ifndef DROCE_DRIVERS_NETDEV_GID_CACHE_H_
#define DROCE_DRIVERS_NETDEV_GID_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "wire/gid.h"

namespace droce::netdev {

class GidCache {
 public:
  using Gid = wire::Gid;
  using Mac = std::array<uint8_t, 6>;
  // As verbs reports it (gid_tbl_len; drivers/verbs' kGidTableLen).
  static constexpr size_t kSize = 16;

  explicit GidCache(const Mac& mac) { SetMac(mac); }

  // The default GID follows the interface's MAC.
  bool SetMac(const Mac& mac);
  // The interface's addresses now (IPv4 as ::ffff:a.b.c.d), in the kernel's
  // order. Addresses that went leave holes, new ones fill the first free
  // indexes; an address equal to the default GID is that entry (not a second
  // one). True if any entry changed. Addresses beyond the table's room are
  // left out and counted (overflowed()).
  bool Update(const std::vector<Gid>& addrs);

  const std::array<Gid, kSize>& entries() const { return entries_; }
  // Index i holds a GID (index 0 always).
  bool valid(size_t i) const { return i < kSize && (i == 0 || entries_[i] != Gid{}); }
  // The index of gid, or -1.
  int Find(const Gid& gid) const;
  size_t overflowed() const { return overflowed_; }

  static Gid DefaultGid(const Mac& mac);

 private:
  std::array<Gid, kSize> entries_{};
  size_t overflowed_ = 0;
};

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_GID_CACHE_H_
