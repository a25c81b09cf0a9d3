// A device's configuration: addresses, limits, the transport's tuning.
#ifndef DROCE_LIB_CORE_CONFIG_H_
#define DROCE_LIB_CORE_CONFIG_H_

#include <array>
#include <cstdint>

#include "cc/congestion_control.h"
#include "cc/dcqcn.h"
#include "transport/qp_tuning.h"
#include "wire/gid.h"
#include "wire/headers.h"

namespace droce::core {

using Gid = wire::Gid;
using Mac = std::array<uint8_t, 6>;

// The transport's tuning of every QP of the device (CNPs, selective repeat,
// AckReq policy, the ACK timeout floor) is the transport::QpTuning base.
struct DeviceConfig : transport::QpTuning {
  Mac mac{0x02, 0, 0, 0, 0, 1};
  uint32_t ipv4 = 0;        // host order; 0 = none
  bool has_ipv6_global = false;
  Gid ipv6_global{};
  uint8_t dscp = 0;         // data packets' DSCP unless the AV sets a traffic class
  uint8_t ecn = wire::kEcnEct0;  // ECT(0) so a switch (or our CP) may mark CE
  bool vlan = false;
  uint16_t vlan_tci = 0;
  uint32_t max_qp = 1024;
  // QPNs are [qpn_base, qpn_base + max_qp), within 24 bits and never 0 or 1
  // (the special QPs). 0: a random base per device, so a peer cannot guess
  // a QPN cheaply; tests, replays and tools whose peers must know the QPNs
  // ahead set it (a fabric daemon hands each process its range). A base
  // that does not fit is replaced by a random one.
  uint32_t qpn_base = 0;
  uint32_t max_mr = 1u << 16;
  // Neighbour table entries (static and learnt). When full, a newly learnt
  // entry evicts the oldest learnt one; static entries are never evicted.
  uint32_t max_neighbors = 1024;
  uint16_t burst = 32;
  // Transmit bursts one QP may fill per Poll round. A QP with more to send
  // (a long READ response, a big WRITE) continues next round, after the
  // receive burst and every other active QP's turn: one peer's 2 GiB READ
  // cannot hold the port, the receive ring or the caller's lock for longer
  // than a round.
  uint16_t tx_bursts_per_qp = 2;
  // Full frames (over half the MTU) leave in bursts of this many bytes'
  // worth, before the burst has `burst` frames (0: only full bursts and the
  // end of a round): a long message goes out in pieces while the rest is
  // built, so a peer that reads the port on another CPU (a direct ring
  // between two processes) places the first frames while the sender builds
  // the next, instead of waiting for the whole burst (32 frames of 4 KiB:
  // 128 KiB built and copied before the reader sees a byte). Short frames
  // fill `burst` as before. Only on a port whose reader works meanwhile
  // (pktio::BurstIo::ReadConcurrently); the Device takes 0 on any other.
  uint32_t tx_flush_bytes = 16384;
  // Destinations with no neighbour entry go to the broadcast MAC instead of
  // failing (point-to-point wires such as memif, where any MAC arrives).
  bool broadcast_unresolved = false;
  // Received frames are not ICRC-checked (check 6 of doc/rx-checks.md, and
  // WRITE MIDDLE payloads are placed without the fused check): only for a
  // port whose frames never cross a wire (an in-memory or shared-memory
  // link, whose sender computed the ICRC a moment before). Off by default;
  // the verbs device file refuses it on a real wire (rx_icrc_trust).
  bool rx_icrc_trusted = false;
  // Lent frames (pktio::Frame::lent) its QP places while checking the ICRC
  // are placed by a plain copy without the check (doc/rx-checks.md "Trusted
  // direct rings"). A port lends only frames in memory their sending
  // process writes itself (the direct rings between two processes of one
  // host, which no frame of a wire ever enters): that sender can write a
  // valid ICRC over any bytes, so the check there guards against nothing
  // but its own bugs. Every other frame, a lent one copied whole included,
  // is checked as without it. Counted in rx_icrc_trusted.
  bool rx_icrc_trust_lent = false;
  // Reaction point: DCQCN rate limiting of every QP (off by default, as on
  // mlx5 without a congestion-control profile). Parameters: cc::PaperProfile
  // or cc::Mlx5Profile, or hand-tuned.
  bool dcqcn = false;
  cc::DcqcnParams dcqcn_params = cc::Mlx5Profile(100'000'000'000ull);
  // Otherwise every QP runs this algorithm (doc/cc.md; cc::ParseConfig from
  // the device file's cc= and cc_params=), none by default.
  cc::Config cc;
  // The line rate the paper defaults of an algorithm a QP chooses for itself
  // are made for (Device::SetQpCongestionControl).
  uint64_t cc_line_rate_bps = 100'000'000'000ull;
  // The UDP source port of every frame the device builds; 0: one per QP
  // pair from its flow label (RoCEv2's ECMP entropy, as rxe and mlx5). A
  // device whose frames leave through a kernel UDP socket sets the socket's
  // port: the kernel writes the UDP header, and the ICRC covers the port.
  uint16_t udp_source_port = 0;
};

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_CONFIG_H_
