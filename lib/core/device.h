// The RNIC: GIDs, protection domains, memory regions, CQs, QPs and the
// run-to-completion poll loop over one burst I/O port.
//
// Control-path calls return absl::Status (or a positive errno where verbs
// does); Poll() is the data path: bursts in, counters out. One thread owns a
// Device: the poll loop and every call on it.
#ifndef DROCE_LIB_CORE_DEVICE_H_
#define DROCE_LIB_CORE_DEVICE_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/dcqcn.h"
#include "mem/mr_table.h"
#include "pktio/burst_io.h"
#include "queue/completion.h"
#include "transport/qp.h"
#include "wire/arp.h"
#include "wire/nd.h"
#include "wire/packet.h"

namespace droce::core {

using Gid = std::array<uint8_t, 16>;
using Mac = std::array<uint8_t, 6>;

// ::ffff:a.b.c.d, the GID form of an IPv4 address (RoCEv2 over IPv4).
inline bool IsIpv4MappedGid(const Gid& g) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(g.data(), kPrefix, 12) == 0;
}

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
  uint32_t max_mr = 1u << 16;
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
};

struct QpInitAttr {
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  int32_t srq = -1;
  transport::QpCaps caps;
};

// Drops and events the poll loop counts (never logs).
struct DeviceCounters {
  uint64_t rx_packets = 0;
  uint64_t rx_bytes = 0;
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t tx_dropped = 0;    // ARP/ND frames the port refused (lost, as on a wire)
  uint64_t tx_port_full = 0;  // frames the port refused at first and that waited for the next round
  uint64_t rx_foreign = 0;  // not RoCEv2 (or not for us)
  uint64_t rx_unknown_qp = 0;
  uint64_t rx_cnp = 0;
  uint64_t rx_cnp_dropped = 0;  // CNPs for no known QP
  uint64_t rx_arp = 0;
  uint64_t arp_replies_sent = 0;
  uint64_t arp_requests_sent = 0;
  uint64_t neighbors_learned = 0;
  uint64_t rx_nd = 0;                // IPv6 neighbour solicitations and advertisements
  uint64_t rx_nd_malformed = 0;      // ... that failed RFC 4861 validation (dropped)
  uint64_t nd_solicits_sent = 0;
  uint64_t nd_adverts_sent = 0;
  uint64_t rx_parse_errors[static_cast<int>(wire::ParseStatus::kCount)] = {};
  uint64_t rx_bad_icrc() const { return rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)]; }
};

class Device {
 public:
  Device(const DeviceConfig& config, pktio::BurstIo* io);
  ~Device();

  const DeviceConfig& config() const { return config_; }
  // GID table as rxe fills it: 0 = fe80::EUI-64(mac), 1 = ::ffff:IPv4, 2 = IPv6 global.
  const std::vector<Gid>& gids() const { return gids_; }
  void AddNeighbor(const Gid& ip, const Mac& mac);
  bool HasNeighbor(const Gid& ip) const;
  // Queues an ARP request for an IPv4 address (sent by the next Poll); the
  // reply lands in the neighbour table. The device answers ARP requests for
  // its own IPv4 address by itself.
  void RequestArp(uint32_t ipv4);
  // Queues a neighbour solicitation for an IPv6 address (neighbor_v6.cc);
  // the advertisement lands in the neighbour table. The device answers
  // solicitations for its own IPv6 addresses (GIDs 0 and the global one).
  void RequestNd(const Gid& ipv6);
  // Resolves any GID: ARP for an IPv4-mapped one, ND for IPv6. Call it every
  // 100 ms or so while polling until HasNeighbor(ip).
  void RequestNeighbor(const Gid& ip);

  uint32_t AllocPd() { return mrs_.AllocPd(); }
  absl::Status DeallocPd(uint32_t pd) { return mrs_.DeallocPd(pd); }
  absl::StatusOr<mem::MrKeys> RegMr(uint32_t pd, void* addr, uint64_t length, uint64_t iova,
                                    uint32_t access) {
    return mrs_.Register(pd, addr, length, iova, access);
  }
  absl::Status DeregMr(uint32_t lkey) { return mrs_.Deregister(lkey); }
  mem::MrTable& mrs() { return mrs_; }

  absl::StatusOr<uint32_t> CreateCq(uint32_t depth);
  queue::CompletionQueue* cq(uint32_t id);
  // Fails (FailedPrecondition) while a QP still uses the CQ / SRQ.
  absl::Status DestroyCq(uint32_t id);
  absl::StatusOr<uint32_t> CreateSrq(uint32_t depth);
  transport::Srq* srq(uint32_t id) { return id < srqs_.size() ? srqs_[id].get() : nullptr; }
  absl::Status DestroySrq(uint32_t id);
  int PostSrqRecv(uint32_t srq, const transport::RecvWr& wr);

  absl::StatusOr<uint32_t> CreateQp(const QpInitAttr& init);
  absl::Status ModifyQp(uint32_t qpn, const transport::QpAttr& attr, uint32_t mask);
  absl::Status DestroyQp(uint32_t qpn);
  transport::RcQp* qp(uint32_t qpn);

  int PostSend(uint32_t qpn, const transport::SendWr& wr);
  int PostRecv(uint32_t qpn, const transport::RecvWr& wr);
  uint32_t PollCq(uint32_t cq, queue::Completion* out, uint32_t n);

  // One round of the run-to-completion loop: receive a burst, run timers,
  // transmit. Returns packets received + sent (0 = idle, back off).
  uint32_t Poll(uint64_t now_ns);

  const DeviceCounters& counters() const { return counters_; }

 private:
  static absl::Status MakeRouteThunk(void* ctx, const transport::AddressVector& av,
                                     uint32_t local_qpn, uint32_t remote_qpn, wire::Route* out);
  absl::Status MakeRoute(const transport::AddressVector& av, uint32_t local_qpn,
                         uint32_t remote_qpn, wire::Route* out) const;
  void Activate(uint32_t qpn);
  void HandleArp(const uint8_t* frame, uint32_t len);
  uint32_t TransmitArp();
  // neighbor_v6.cc: true if the frame was an NS/NA (handled or dropped).
  bool HandleNd(const uint8_t* frame, uint32_t len);
  uint32_t TransmitNd();
  // Sends queued control frames (ARP, ND) a burst at a time: build(msg, data)
  // writes one and returns its length, sent(msg) counts it once it left.
  // Frames the port refuses are lost, as on a wire (tx_dropped).
  template <typename Msg, typename Build, typename Sent>
  uint32_t TransmitQueued(std::vector<Msg>& queue, Build build, Sent sent);

  DeviceConfig config_;
  pktio::BurstIo* io_;
  std::vector<Gid> gids_;
  std::vector<std::pair<Gid, Mac>> neighbors_;
  std::vector<wire::ArpPacket> arp_out_;  // replies and requests waiting for the port
  std::vector<wire::NdPacket> nd_out_;    // neighbour solicitations/advertisements waiting for the port
  std::vector<Gid> nd_pending_;           // addresses we solicited (an NA for them is learnt)
  mem::MrTable mrs_;
  std::vector<std::unique_ptr<queue::CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<transport::Srq>> srqs_;
  std::vector<std::unique_ptr<transport::RcQp>> qps_;  // index = QPN
  uint32_t next_qpn_ = kFirstQpn;
  std::vector<uint32_t> active_;    // QPNs with work or timers
  std::vector<uint8_t> is_active_;  // index = QPN
  std::vector<pktio::Frame> rx_frames_;
  std::vector<pktio::Frame> tx_frames_;
  std::vector<pktio::Frame> tx_backlog_;  // refused by the port, sent first next round
  size_t tx_backlog_head_ = 0;
  size_t tx_round_robin_ = 0;  // which active QP transmits first this round
  uint32_t FlushTxBacklog();
  DeviceCounters counters_;

 public:
  static constexpr uint32_t kFirstQpn = 0x11;  // 0 and 1 are the special QPs
};

template <typename Msg, typename Build, typename Sent>
uint32_t Device::TransmitQueued(std::vector<Msg>& queue, Build build, Sent sent) {
  uint32_t total = 0;
  pktio::Frame* tx = tx_frames_.data();
  while (!queue.empty()) {
    const uint16_t want = static_cast<uint16_t>(queue.size() < config_.burst ? queue.size() : config_.burst);
    const uint16_t got = io_->AllocTx(tx, want);
    if (got == 0) break;
    for (uint16_t i = 0; i < got; ++i) tx[i].len = build(queue[i], tx[i].data);
    const uint16_t ok = io_->TxBurst(tx, got);
    if (ok < got) io_->Release(tx + ok, static_cast<uint16_t>(got - ok));
    counters_.tx_dropped += got - ok;
    for (uint16_t i = 0; i < ok; ++i) sent(queue[i]);
    counters_.tx_packets += ok;
    queue.erase(queue.begin(), queue.begin() + got);
    total += ok;
    if (ok < got) break;
  }
  return total;
}

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_DEVICE_H_
