// The uplink option of droced (`--uplink SPEC`, `DROCED_UPLINK=SPEC`,
// `droce-ctl daemon start --uplink SPEC`, `droce-ctl link add ... uplink
// SPEC`): parsed and checked in one place, by droce-ctl before it starts the
// daemon (a clear error, exit 2) and by droced itself (doc/droced.md
// "Uplinks"). No DPDK here.
//
//   memif:SOCKET:server|client  a memif interface (id 0) to another droced
//   vdev:NAME[,ARGS]            any DPDK virtual device (net_af_packet, net_af_xdp, ...)
//   pci:DDDD:BB:DD.F[,ARGS]     a real NIC: droced allow-lists the device for
//                               EAL (-a), scans PCI, and uses its port
#ifndef DROCE_APPS_DROCED_UPLINK_SPEC_H_
#define DROCE_APPS_DROCED_UPLINK_SPEC_H_

#include <string>

#include "absl/status/statusor.h"

namespace droce::droced {

struct UplinkSpec {
  enum class Kind { kMemif, kVdev, kPci } kind = Kind::kMemif;
  std::string socket;  // kMemif: absolute path
  bool server = false;  // kMemif: the memif server (else client)
  std::string vdev;     // kVdev: the whole vdev string; kPci: the EAL -a argument (ADDR[,ARGS])
  std::string port;     // the ethdev name: net_memif_uplink, the vdev's name, the PCI address
  std::string describe() const;
};

absl::StatusOr<UplinkSpec> ParseUplinkSpec(const std::string& spec);

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_UPLINK_SPEC_H_
