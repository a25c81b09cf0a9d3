// The transport's tuning of a QP that a device sets for all of its QPs:
// core::DeviceConfig holds one (the device file's keys) and Device::CreateQp
// hands it to every QP whole (transport::QpEnv), so each default is written
// here once.
#ifndef DROCE_LIB_TRANSPORT_QP_TUNING_H_
#define DROCE_LIB_TRANSPORT_QP_TUNING_H_

#include <cstdint>

namespace droce::transport {

struct QpTuning {
  // Notification point (RoCEv2 A17.9, DCQCN): a CE-marked packet for this QP
  // makes it send a CNP to its peer, at most one per interval.
  bool cnp_enabled = true;
  uint64_t min_time_between_cnps_ns = 4000;
  uint8_t cnp_dscp = 48;
  // Selective repeat (doc/transport.md "Selective repeat"): on for every RC
  // QP of the device without negotiation (both ends configured the same;
  // off by default: toward rxe or ConnectX a QP stays IBTA go-back-N; a QP
  // may also be switched before RTR, by ECE). The cap on PSNs in flight
  // (the path's bandwidth-delay product, at most kSrWindow - 1); IRN's low
  // retransmission timeout, used while at most sr_rto_low_below packets are
  // in flight, and its high one (a few round trips, capped by the QP's IBTA
  // timeout; a timeout retransmits, only a whole IBTA timeout without
  // progress spends one of retry_cnt).
  bool selective_repeat = false;
  uint32_t sr_max_inflight_packets = 256;
  uint64_t sr_rto_low_ns = 200'000;
  uint32_t sr_rto_low_below = 4;
  uint64_t sr_rto_high_ns = 320'000;
  // Measured timers (RFC 6298 from ACK/SACKs of packets sent once): RTO_low
  // = max(sr_rto_min_ns, SRTT + 4 RTTVAR), RTO_high = 3 x that, capped by
  // sr_rto_low_ns / sr_rto_high_ns (the values used before a sample); a
  // tail-loss probe (sr_tlp) after max(sr_rto_min_ns, 2 SRTT) without
  // anything to send.
  uint64_t sr_rto_min_ns = 16'000;
  bool sr_tlp = true;
  // AckReq on an unsignaled SEND/WRITE's last packet only once this many
  // packets went out since the last AckReq (1: every message, as rxe does);
  // a signaled WR, a retransmission and an SR QP always ask. A tail left
  // without AckReq is solicited (its last packet resent with AckReq) once
  // nothing new has been sent for ack_solicit_ns (doc/transport.md
  // "Requester").
  uint32_t unsignaled_ack_every = 16;
  uint64_t ack_solicit_ns = 500'000;
  // A floor under the QP's local ACK timeout (IBTA exponent, 0: none): the
  // transport timer runs at least 4.096 us x 2^min_ack_timeout whatever the
  // QP asked (0, infinite, stays infinite), as ConnectX firmware floors it
  // (about 0.5 s on ConnectX-2). For peers that stall longer than a
  // program's hard-coded timeout budget: guests emulated on a loaded host.
  uint8_t min_ack_timeout = 0;
};

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_QP_TUNING_H_
