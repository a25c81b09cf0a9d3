// Takes a QP from RESET (or INIT) to RTR or RTS with the attribute masks
// verbs requires for its type: the sequence every droce program and test
// runs to connect a QP (like the modify_qp calls of ibv_rc_pingpong).
#ifndef DROCE_LIB_CORE_CONNECT_H_
#define DROCE_LIB_CORE_CONNECT_H_

#include "absl/status/status.h"
#include "core/device.h"

namespace droce::core {

struct ConnectParams {
  Gid peer_gid{};
  uint8_t sgid_index = 1;    // 1: the IPv4-mapped GID
  Mac peer_mac{};
  bool peer_mac_known = true;  // false: resolve through the neighbour table
  uint32_t peer_qpn = 0;
  uint32_t mtu = 1024;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint32_t access = mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic;
  uint8_t timeout = 14;      // RC: 4.096 us * 2^timeout
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;
  uint8_t max_rd_atomic = 16;
  uint8_t max_dest_rd_atomic = 16;  // responder resources for the peer's READs and atomics
  bool to_rts = true;        // false: stop at RTR (a pure responder)
};

absl::Status ConnectQp(Device& dev, uint32_t qpn, const ConnectParams& p);

// The parameters toward QP peer_qpn of `peer`, a device on the same wire
// (its IPv4-mapped GID, its MAC), the rest as ConnectParams' defaults.
inline ConnectParams ParamsToward(const Device& peer, uint32_t peer_qpn, uint32_t mtu) {
  ConnectParams c;
  c.peer_gid = peer.gids()[1];
  c.peer_mac = peer.config().mac;
  c.peer_qpn = peer_qpn;
  c.mtu = mtu;
  return c;
}

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_CONNECT_H_
