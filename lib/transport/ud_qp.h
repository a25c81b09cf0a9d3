// Unreliable Datagram (IBTA 9.8.4, RoCEv2 Annex A17): address handles and
// the pieces of a UD QP that RC and UC do not have. A UD QP is an Qp of
// type QpType::kUd (the verbs state machine, queues, completions and the
// transmit scheduler are shared); what is datagram-specific lives in
// ud_qp.cc: one packet per message (SEND ONLY [WITH IMMEDIATE]) with a DETH
// (Q_Key, source QPN), the destination taken from each work request's
// address handle, and on receive the Q_Key check and the 40-byte GRH area at
// the start of the receive buffer (doc/transport.md "Unreliable Datagram").
#ifndef DROCE_LIB_TRANSPORT_UD_QP_H_
#define DROCE_LIB_TRANSPORT_UD_QP_H_

#include <cstdint>
#include <vector>

#include "transport/types.h"
#include "wire/packet.h"

namespace droce::transport {

// IBTA 11.4.1.1 / rxe: the GRH area a UD receive buffer starts with. For
// RoCEv2 over IPv6 it holds the IPv6 header; over IPv4 its first 20 bytes
// are zero and the IPv4 header fills the last 20 (as Linux's
// rdma_network_hdr lays it out).
inline constexpr uint32_t kGrhBytes = 40;
// The L3 header type a UD receive completion reports in ibv_wc.sl
// (queue::Completion::sl), numbered as mlx5's CQE does (0 would be a RoCEv1
// GRH, which droce does not speak).
inline constexpr uint8_t kRoceL3Ipv6 = 1;
inline constexpr uint8_t kRoceL3Ipv4 = 2;
// A work request Q_Key with the high bit set asks for the QP's own Q_Key
// (controlled Q_Keys, IBTA 10.2.5; rxe substitutes it the same way).
inline constexpr uint32_t kControlledQkeyBit = 0x80000000u;
// BTH destination QP of a multicast datagram (IBTA 9.8.4 / 10.5.3).
inline constexpr uint32_t kMulticastQpn = 0xFFFFFF;

// The UDP source port of a UD QP's packets, as rxe derives it from the QPN
// (0xC000 + the top 14 bits of qpn * the 32-bit golden ratio): a UD QP
// talks to many peers, so the port does not depend on the destination.
inline uint16_t UdSourcePort(uint32_t qpn) {
  const uint32_t h = qpn * 0x61C88647u;
  return static_cast<uint16_t>(0xC000u + ((h >> 18) & 0x3FFFu));
}

// An address handle: the address vector and the Eth/IP/UDP prefix built
// from it once, at creation (ibv_create_ah). A send copies the prefix into
// its WQE when posted, so destroying the AH afterwards does not affect it.
struct AddressHandle {
  bool valid = false;
  uint32_t pd = 0;
  AddressVector av;
  wire::Route route;
};

// Address handles of a device, by number. Control path only; lookups on
// post_send are an index and a flag.
class AhTable {
 public:
  explicit AhTable(uint32_t max) : max_(max) {}
  // The new handle's number, or -1 when all `max` are in use.
  int64_t Add(uint32_t pd, const AddressVector& av, const wire::Route& route);
  bool Remove(uint32_t id);
  const AddressHandle* Find(uint32_t id) const {
    return id < ahs_.size() && ahs_[id].valid ? &ahs_[id] : nullptr;
  }
  uint32_t count() const { return count_; }

 private:
  uint32_t max_;
  uint32_t count_ = 0;
  std::vector<AddressHandle> ahs_;
  std::vector<uint32_t> free_;
};

// What became of a received datagram (ud_qp.cc, Qp::OnUdPacket); the
// device counts the drops.
enum class UdRx : uint8_t { kDelivered, kWrongState, kBadQkey, kNoRecv, kError };

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_UD_QP_H_
