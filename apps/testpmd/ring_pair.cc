#include "apps/testpmd/ring_pair.h"

#include "absl/strings/str_format.h"

#ifdef DROCE_HAVE_NET_RING
#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_lcore.h>
#include <rte_ring.h>
#endif

namespace droce::testpmd {

absl::StatusOr<std::pair<std::string, std::string>> CreateRingPair(const std::string& prefix) {
#ifdef DROCE_HAVE_NET_RING
  // One ring per direction; each has one producer (the sending port's
  // thread) and one consumer (the receiving port's thread).
  const std::string s2c_name = prefix + "s2c", c2s_name = prefix + "c2s";
  rte_ring* s2c = rte_ring_create(s2c_name.c_str(), 4096, static_cast<int>(rte_socket_id()),
                                  RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* c2s = rte_ring_create(c2s_name.c_str(), 4096, static_cast<int>(rte_socket_id()),
                                  RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (s2c == nullptr || c2s == nullptr) {
    rte_ring_free(s2c);
    rte_ring_free(c2s);
    return absl::ResourceExhaustedError(absl::StrFormat("rings for a net_ring pair: %s", rte_strerror(rte_errno)));
  }
  // The server end receives from c2s and sends into s2c; the client end the reverse.
  const std::string server = prefix + "s", client = prefix + "c";
  if (rte_eth_from_rings(server.c_str(), &c2s, 1, &s2c, 1, rte_socket_id()) < 0 ||
      rte_eth_from_rings(client.c_str(), &s2c, 1, &c2s, 1, rte_socket_id()) < 0) {
    return absl::UnavailableError(absl::StrFormat("net_ring pair %s: %s", prefix, rte_strerror(rte_errno)));
  }
  return std::make_pair("net_ring_" + server, "net_ring_" + client);
#else
  return absl::UnimplementedError(
      absl::StrFormat("--role pair needs DPDK's net_ring library (librte_net_ring), not found at build time (%s)",
                      prefix));
#endif
}

}  // namespace droce::testpmd
