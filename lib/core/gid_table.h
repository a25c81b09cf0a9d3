// The GID table of a device, from its addresses alone: what the device
// answers for, what the verbs provider reports (ibv_query_gid, sysfs) and
// what droced hands to the processes attached to it, all from one function.
#ifndef DROCE_LIB_CORE_GID_TABLE_H_
#define DROCE_LIB_CORE_GID_TABLE_H_

#include <vector>

#include "core/config.h"

namespace droce::core {

// The IPv6 link-local address of a MAC (RFC 4291 appendix A: fe80::, the
// modified EUI-64 with the universal/local bit flipped).
Gid LinkLocalGid(const Mac& mac);

// As rxe fills it (Linux roce_gid_mgmt.c): 0 = fe80::EUI-64(mac),
// then ::ffff:IPv4 when the device has an IPv4 address, then its global
// IPv6 address when it has one.
std::vector<Gid> GidTable(const DeviceConfig& config);

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_GID_TABLE_H_
