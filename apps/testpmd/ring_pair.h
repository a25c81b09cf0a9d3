// Two DPDK net_ring ports joined back to back in one process, for
// `droce-testpmd --role pair`: what one port transmits the other receives.
// A net_ring is process-local memory, so its two ends cannot be two
// processes (without hugepages there is no shared memory for a DPDK
// secondary process), and DPDK 22.11's net_ring vdev arguments only make a
// port that receives its own frames (nodeaction=...:ATTACH gives a second
// port the same ring, not the reverse one): the pair is built with
// rte_eth_from_rings from two single-producer single-consumer rings.
#ifndef DROCE_APPS_TESTPMD_RING_PAIR_H_
#define DROCE_APPS_TESTPMD_RING_PAIR_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace droce::testpmd {

// EAL must be running. Creates ports net_ring_<prefix>s and
// net_ring_<prefix>c and returns their names (server end, client end). Each
// end must be driven by one thread at a time (its rings are SP/SC).
absl::StatusOr<std::pair<std::string, std::string>> CreateRingPair(const std::string& prefix);

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_RING_PAIR_H_
