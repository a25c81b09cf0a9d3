#include "core/gid_table.h"

namespace droce::core {

Gid LinkLocalGid(const Mac& mac) {
  return Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(mac[0] ^ 0x02), mac[1], mac[2], 0xFF, 0xFE,
             mac[3], mac[4], mac[5]};
}

std::vector<Gid> GidTable(const DeviceConfig& config) {
  std::vector<Gid> gids{LinkLocalGid(config.mac)};
  if (config.ipv4 != 0) gids.push_back(wire::Ipv4MappedGid(config.ipv4));
  if (config.has_ipv6_global) gids.push_back(config.ipv6_global);
  return gids;
}

}  // namespace droce::core
