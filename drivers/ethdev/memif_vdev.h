// The devargs of a DPDK net_memif vdev, built in one place for every side
// that opens one: a verbs program's fabric port, droce-testpmd's, droced's
// interfaces and uplink, droce-ctl's memif devices. Header only, no DPDK:
// droce-ctl and the uplink parser use it without the ethdev library.
#ifndef DROCE_DRIVERS_ETHDEV_MEMIF_VDEV_H_
#define DROCE_DRIVERS_ETHDEV_MEMIF_VDEV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"

namespace droce::ethdev {

struct MemifVdev {
  std::string name;                // the ethdev's name, "net_memif..."
  bool server = false;             // role=server or role=client
  std::optional<uint32_t> id;      // the interface's id on the socket (DPDK's default: 0)
  std::string socket;              // absolute path (never abstract: socket-abstract=no)
  std::string secret;              // empty: none
  uint32_t buffer_bytes = 0;       // bsize (the client lays out the rings); 0: DPDK's default
};

// "NAME,role=R[,id=N],socket=PATH,socket-abstract=no[,secret=S][,bsize=B]".
inline std::string MemifVdevArgs(const MemifVdev& m) {
  std::string s = absl::StrCat(m.name, ",role=", m.server ? "server" : "client");
  if (m.id) absl::StrAppend(&s, ",id=", *m.id);
  absl::StrAppend(&s, ",socket=", m.socket, ",socket-abstract=no");
  if (!m.secret.empty()) absl::StrAppend(&s, ",secret=", m.secret);
  if (m.buffer_bytes != 0) absl::StrAppend(&s, ",bsize=", m.buffer_bytes);
  return s;
}

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_MEMIF_VDEV_H_
