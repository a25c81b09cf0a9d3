// A device's configuration: addresses, limits, the transport's tuning.
#ifndef DROCE_LIB_CORE_CONFIG_H_
#define DROCE_LIB_CORE_CONFIG_H_

#include <array>
#include <cstdint>

#include "cc/congestion_control.h"
#include "cc/dcqcn.h"
#include "wire/gid.h"
#include "wire/headers.h"

namespace droce::core {

using Gid = wire::Gid;
using Mac = std::array<uint8_t, 6>;

struct DeviceConfig {
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
  // Destinations with no neighbour entry go to the broadcast MAC instead of
  // failing (point-to-point wires such as memif, where any MAC arrives).
  bool broadcast_unresolved = false;
  // Notification point: CNPs for CE-marked packets (see transport::QpEnv).
  bool cnp_enabled = true;
  uint64_t min_time_between_cnps_ns = 4000;
  uint8_t cnp_dscp = 48;
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
  // Selective repeat (doc/transport.md "Selective repeat"): every RC QP of
  // the device uses it, without negotiation (both ends configured the same;
  // off by default: toward rxe or ConnectX a QP must stay IBTA go-back-N).
  // A QP may also be switched before RTR (SetQpSelectiveRepeat, ECE).
  bool selective_repeat = false;
  // The cap on PSNs in flight of an SR QP (the path's bandwidth-delay
  // product in packets; at most transport::kSrWindow - 1), and IRN's low
  // retransmission timeout, used while at most sr_rto_low_below packets
  // are in flight, and its high one (IRN's RTO_high: a few round trips, not
  // the QP's IBTA timeout; retry_cnt is still counted per IBTA timeout).
  uint32_t sr_max_inflight_packets = 256;
  uint64_t sr_rto_low_ns = 200'000;
  uint32_t sr_rto_low_below = 4;
  uint64_t sr_rto_high_ns = 320'000;
  // Measured timers (doc/transport.md "Selective repeat"): the RTOs follow
  // SRTT + 4 RTTVAR, at least sr_rto_min_ns, with sr_rto_low_ns and
  // sr_rto_high_ns as ceilings and initial values; a tail-loss probe
  // (sr_tlp) after max(sr_rto_min_ns, 2 SRTT) without anything to send.
  uint64_t sr_rto_min_ns = 16'000;
  bool sr_tlp = true;
  // AckReq on unsignaled SEND/WRITEs (doc/transport.md "Requester"): every
  // unsignaled_ack_every packets (1: on every message, as rxe), and a tail
  // left without one is solicited after ack_solicit_ns without sending.
  uint32_t unsignaled_ack_every = 16;
  uint64_t ack_solicit_ns = 500'000;
  // The floor under every QP's local ACK timeout (transport::QpEnv, IBTA
  // exponent; 0: each QP's own value).
  uint8_t min_ack_timeout = 0;
  // The UDP source port of every frame the device builds; 0: one per QP
  // pair from its flow label (RoCEv2's ECMP entropy, as rxe and mlx5). A
  // device whose frames leave through a kernel UDP socket sets the socket's
  // port: the kernel writes the UDP header, and the ICRC covers the port.
  uint16_t udp_source_port = 0;
};

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_CONFIG_H_
