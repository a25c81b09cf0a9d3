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
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/dcqcn.h"
#include "core/config.h"
#include "core/gid_table.h"
#include "core/timer_wheel.h"
#include "mem/mr_table.h"
#include "pktio/burst_io.h"
#include "pktio/loopback_io.h"
#include "queue/completion.h"
#include "transport/qp.h"
#include "wire/arp.h"
#include "wire/gid.h"
#include "wire/nd.h"
#include "wire/packet.h"
#include "wire/prediction.h"

namespace droce::core {

using wire::IsIpv4MappedGid;  // wire/gid.h

// The Ethernet group address of a RoCEv2 multicast GID, or nullopt when the
// GID is not multicast (wire/gid.h).
inline std::optional<Mac> MulticastMac(const Gid& g) { return wire::GroupMacOfGid(g); }

// A GID hash with a seed (for tables keyed by addresses a peer chooses).
struct SeededGidHash {
  uint64_t seed = 0;
  size_t operator()(const Gid& g) const {
    uint64_t a, b;
    std::memcpy(&a, g.data(), 8);
    std::memcpy(&b, g.data() + 8, 8);
    uint64_t h = (a ^ seed) * 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 29) ^ b) * 0xBF58476D1CE4E5B9ull;
    return static_cast<size_t>(h ^ (h >> 32));
  }
};

// GID equality that counts its calls: the neighbour table's work per frame
// (a lookup compares the keys of one bucket whose cached hashes match) is
// what its tests bound, not wall-clock time.
struct CountingGidEq {
  uint64_t* compares = nullptr;
  bool operator()(const Gid& a, const Gid& b) const {
    ++*compares;
    return a == b;
  }
};

struct QpInitAttr {
  uint32_t pd = 0;
  uint32_t send_cq = 0;
  uint32_t recv_cq = 0;
  int32_t srq = -1;
  transport::QpCaps caps;
};

// Drops and events the poll loop counts (never logs): one list, so that
// every place that prints counters (DROCE_STATS, droce-testpmd's `show port
// stats` and telemetry) prints all of them. X(name, what it counts).
#define DROCE_DEVICE_COUNTERS(X)                                                                          \
  X(rx_packets, "frames received")                                                                        \
  X(rx_bytes, "bytes received")                                                                           \
  X(tx_packets, "frames sent (RoCEv2, ARP, ND)")                                                          \
  X(tx_bytes, "bytes sent (RoCEv2, ARP, ND)")                                                             \
  X(tx_dropped, "ARP/ND frames the port refused (lost, as on a wire)")                                    \
  X(tx_port_full, "frames the port refused at first and that waited for the next round")                  \
  X(rx_foreign, "not RoCEv2 (ARP, ND and other traffic for us)")                                          \
  X(rx_drop_vlan, "802.1Q VLAN id not the device's (a tag where it has none, or none where it has one)")  \
  X(rx_drop_dst_mac, "destination MAC neither ours nor broadcast (nor, outside RoCEv2, multicast)")       \
  X(rx_drop_dst_ip, "RoCEv2 to an IP address that is not one of the device's GIDs")                       \
  X(rx_drop_pkey, "BTH P_Key not a member of the default partition")                                      \
  X(rx_drop_path, "connected QP: IP version, source or destination address not the QP's path")            \
  X(rx_unknown_qp, "no QP with that number, or an opcode of another transport")                           \
  X(rx_ud_drop_qkey, "UD datagrams whose DETH Q_Key is not the QP's (IBTA 10.2.5: dropped silently)")      \
  X(rx_ud_no_recv, "UD datagrams for a QP with no receive posted (lost: UD has no RNR)")                   \
  X(rx_mcast, "multicast datagrams received for a joined group (each counted once)")                      \
  X(rx_mcast_no_qp, "multicast datagrams with no attached QP in RTR or later to take them")                \
  X(rx_cnp, "congestion notification packets received")                                                  \
  X(rx_cnp_dropped, "CNPs for no known QP")                                                               \
  X(rx_arp, "ARP requests and replies received")                                                          \
  X(arp_replies_sent, "ARP replies sent")                                                                 \
  X(arp_requests_sent, "ARP requests sent")                                                               \
  X(neighbors_learned, "neighbours learnt from ARP/ND")                                                   \
  X(neighbors_refused, "learnt addresses that would override a static entry (or no room: all static)")    \
  X(neighbors_evicted, "learnt entries pushed out by newer ones (table full)")                            \
  X(rx_nd, "IPv6 neighbour solicitations and advertisements received")                                    \
  X(rx_nd_malformed, "... that failed RFC 4861 validation (dropped)")                                     \
  X(nd_solicits_sent, "neighbour solicitations sent")                                                     \
  X(nd_adverts_sent, "neighbour advertisements sent")                                                     \
  X(rx_bursts, "RX polls that returned frames")                                                           \
  X(tx_doorbells_deferred, "doorbells put off to leave with a later one (verbs doorbell batching)")         \
  X(tx_acks_held, "ACKs a round the program drove kept for its next post or round (Poll's hold_acks)")      \
  X(rx_bursts_full, "... that returned a full burst (the port's RX ring held more: a queue here)")        \
  X(tx_bursts, "TX bursts handed to the port (tx_packets / tx_bursts: the frames a burst carries)")      \
  X(rx_predicted, "RoCEv2 frames whose headers were their QP's prediction (no full parse, doc/rx-checks.md)") \
  X(rx_icrc_trusted, "lent frames (direct rings) placed without the ICRC check (DeviceConfig::rx_icrc_trust_lent)") \
  X(sr_rtt_samples, "destroyed SR QPs: RTT samples (QpCounters::sr_rtt_hist, summed)")                    \
  X(sr_rtt_inflight_sum, "... packets in flight at those samples, summed")                                \
  X(sr_rtt_min_us, "... the smallest RTT sample")                                                         \
  X(sr_repair_waits, "... holes a SACK showed whose first resend was then built")                         \
  X(sr_repair_wait_us, "... the time from the SACK to that resend, summed")                               \
  X(sr_repair_wait_max_us, "... its largest")                                                             \
  X(sr_repairs_timed, "... resends timed to their PSN's acknowledgement (one at a time)")                 \
  X(sr_repair_us, "... those times, summed")                                                              \
  X(sr_repair_ge512us, "... those of 512 us or more")                                                     \
  X(sr_repair_ge2048us, "... those of 2048 us or more")                                                   \
  X(sr_window_full_us, "... time new packets waited at the in-flight cap")                                \
  X(sr_sq_drained_us, "... time every posted WR had been sent and some waited for acknowledgement")

struct DeviceCounters {
#define DROCE_DECLARE_COUNTER(name, what) uint64_t name = 0;
  DROCE_DEVICE_COUNTERS(DROCE_DECLARE_COUNTER)
#undef DROCE_DECLARE_COUNTER
  // Malformed RoCEv2 frames by reason (the foreign reasons count in rx_foreign).
  uint64_t rx_parse_errors[static_cast<int>(wire::ParseStatus::kCount)] = {};
  uint64_t rx_bad_icrc() const { return rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)]; }
};

// "rx_<reason>" (rx_bad_icrc, rx_truncated, ...) for a malformed-frame reason.
const char* ParseErrorCounterName(wire::ParseStatus s);

// Calls f(name, value) for every device counter: the DROCE_DEVICE_COUNTERS
// list, then rx_<reason> for every reason a RoCEv2 frame can be malformed.
template <typename F>
void ForEachDeviceCounter(const DeviceCounters& c, F&& f) {
#define DROCE_VISIT_COUNTER(name, what) f(#name, c.name);
  DROCE_DEVICE_COUNTERS(DROCE_VISIT_COUNTER)
#undef DROCE_VISIT_COUNTER
  for (int i = 1; i < static_cast<int>(wire::ParseStatus::kCount); ++i) {
    const auto s = static_cast<wire::ParseStatus>(i);
    if (!wire::IsForeign(s)) f(ParseErrorCounterName(s), c.rx_parse_errors[i]);
  }
}

class Device {
 public:
  Device(const DeviceConfig& config, pktio::BurstIo* io);
  Device(const Device&) = delete;  // holds pointers to its own members
  Device& operator=(const Device&) = delete;
  ~Device();

  const DeviceConfig& config() const { return config_; }
  // The UDP source port of the routes set from now on (DeviceConfig).
  void set_udp_source_port(uint16_t port) { config_.udp_source_port = port; }
  // The GID table (GidTable(config)).
  const std::vector<Gid>& gids() const { return gids_; }
  // Replaces the GID table (a device bound to a host interface follows its
  // addresses, doc/netdev.md): index = GID index, the zero GID a hole that
  // names no address. The receive checks take every IPv4 and IPv6 entry;
  // QPs keep the paths they have (the caller decides about those whose
  // source GID went).
  void SetGids(const std::vector<Gid>& table);
  // A static neighbour (configuration): ARP and ND never override it, and
  // learnt entries never evict it. False if the table is full of static ones.
  bool AddNeighbor(const Gid& ip, const Mac& mac);
  // True for resolved neighbours and for the device's own GIDs (loopback).
  bool HasNeighbor(const Gid& ip) const { return IsLocalGid(ip) || neighbors_.count(ip) != 0; }
  // One of this device's GIDs: a path to it is the device's internal loopback.
  bool IsLocalGid(const Gid& gid) const;
  // The neighbour's MAC, or null.
  const Mac* FindNeighbor(const Gid& ip) const;
  size_t neighbor_count() const { return neighbors_.size(); }
  // Key comparisons the neighbour table has made so far (its work).
  uint64_t neighbor_key_compares() const { return neighbor_compares_; }
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
  queue::CompletionQueue* cq(uint32_t id) { return id < cqs_.size() ? cqs_[id].get() : nullptr; }
  // Fails (FailedPrecondition) while a QP still uses the CQ / SRQ.
  absl::Status DestroyCq(uint32_t id);
  // ibv_resize_cq: InvalidArgument when more completions are queued than `depth`.
  absl::Status ResizeCq(uint32_t id, uint32_t depth);
  absl::StatusOr<uint32_t> CreateSrq(uint32_t depth);
  transport::Srq* srq(uint32_t id) { return id < srqs_.size() ? srqs_[id].get() : nullptr; }
  absl::Status DestroySrq(uint32_t id);
  int PostSrqRecv(uint32_t srq, const transport::RecvWr& wr);

  // Address handles (ibv_create_ah, UD): the route is built now, from a
  // resolved neighbour like an RC path (or the group's MAC for multicast).
  absl::StatusOr<uint32_t> CreateAh(uint32_t pd, const transport::AddressVector& av);
  absl::Status DestroyAh(uint32_t ah);
  const transport::AhTable& ahs() const { return ahs_; }
  // ibv_attach_mcast / ibv_detach_mcast (UD QPs, RoCEv2 multicast GIDs:
  // ::ffff:224.0.0.0/4 or ff00::/8). A datagram to the group (destination
  // QP 0xFFFFFF, the group's IP and MAC) goes to every attached QP.
  absl::Status AttachMcast(uint32_t qpn, const Gid& group);
  absl::Status DetachMcast(uint32_t qpn, const Gid& group);
  // The groups some QP is attached to.
  std::vector<Gid> McastGroups() const {
    std::vector<Gid> out;
    for (const McastGroup& g : groups_) out.push_back(g.gid);
    return out;
  }
  static constexpr uint32_t kMaxMcastGroups = 256;
  static constexpr uint32_t kMaxMcastQpAttach = 1024;

  absl::StatusOr<uint32_t> CreateQp(const QpInitAttr& init);
  absl::Status ModifyQp(uint32_t qpn, const transport::QpAttr& attr, uint32_t mask);
  absl::Status DestroyQp(uint32_t qpn);
  // Selective repeat for one RC QP, before RTR (the verbs provider calls it
  // when ECE agreed on it; doc/cm.md).
  absl::Status SetQpSelectiveRepeat(uint32_t qpn, bool on);
  // Congestion control for one QP, before RTR (doc/cc.md "Per QP"):
  // `algorithm` is a name of cc::FindAlgorithm or "none". The device's own
  // algorithm runs with the device's parameters (cc_params), another with
  // its paper defaults at DeviceConfig::cc_line_rate_bps. The verbs provider
  // calls it at RTR when the program chose an algorithm through ECE.
  absl::Status SetQpCongestionControl(uint32_t qpn, std::string_view algorithm);
  transport::Qp* qp(uint32_t qpn) {
    const uint32_t i = qpn - qpn_base_;  // QPNs below the base wrap to large indices
    return i < qp_slots_ ? qps_[i].qp.get() : nullptr;
  }
  // This device's QPNs are [qpn_base(), qpn_base() + config().max_qp).
  uint32_t qpn_base() const { return qpn_base_; }

  int PostSend(uint32_t qpn, const transport::SendWr& wr);
  int PostRecv(uint32_t qpn, const transport::RecvWr& wr);
  uint32_t PollCq(uint32_t cq, queue::Completion* out, uint32_t n);
  // PollCq handing each completion to f(const queue::Completion&) where it
  // lies in the CQ (queue::CompletionQueue::PollEach: its flags still carry
  // kWcSolicited, which the caller masks).
  template <typename F>
  uint32_t PollCqEach(uint32_t id, uint32_t n, F&& f) {
    queue::CompletionQueue* c = cq(id);
    return c == nullptr ? 0 : c->PollEach(n, f);
  }

  // One round of the run-to-completion loop: receive a burst, run timers,
  // transmit. Returns packets received + sent (0 = idle, back off).
  // hold_acks (a round the program drives from poll_cq): a QP whose only
  // frame is a plain ACK keeps it for the program's next post, whose
  // doorbell sends both in one burst (a SEND answering a SEND), or for the
  // next round, which sends it whatever it is asked (at most one round's
  // hold per ACK); the ACK goes on the deferred-doorbell list.
  uint32_t Poll(uint64_t now_ns, bool hold_acks = false);
  // The doorbell of one QP (after PostSend, or after WRs were published
  // without the device lock: Qp::PublishSend, taken here first): flushes the port's backlog,
  // then lets this QP transmit what it can now (at most tx_bursts_per_qp
  // bursts) and nothing else: no receive, no timers, no other QP. What is
  // left stays on the active list for Poll. Returns packets sent.
  uint32_t Doorbell(uint32_t qpn, uint64_t now_ns);
  // A doorbell put off (the verbs runtime's doorbell batching, doc/core.md
  // "Doorbells"): the QP goes on the active list, so the next Poll
  // transmits it, and on the list of deferred doorbells, whose QPs the next
  // Doorbell gathers first, into the same bursts as its own frames.
  // posts: the doorbells this one stands for (counted in
  // tx_doorbells_deferred; the verbs runtime's posts that deferred without
  // the device lock are taken together). False: the QP is not on the
  // deferred list (gone, no port, or the list full: only the next Poll
  // sends it).
  // Inline: the list's last entry is mostly the QP already.
  bool DeferDoorbell(uint32_t qpn, uint32_t posts = 1) {
    transport::Qp* q = qp(qpn);
    if (q == nullptr) return false;
    q->TakePosted();
    if (io_ == nullptr) return false;
    Activate(qpn);
    counters_.tx_doorbells_deferred += posts;
    return (n_deferred_ != 0 && deferred_[n_deferred_ - 1] == qpn) || AddDeferred(qpn);
  }
  // Receives published without the device lock (Qp::PublishRecv) join
  // the QP's receive queue now (flushed if it is in ERR); nothing is sent.
  void TakePostedRecvs(uint32_t qpn) {
    if (transport::Qp* q = qp(qpn)) q->TakePostedRecvs();
  }
  // The deferred doorbells' QPs transmit now (at most tx_bursts_per_qp
  // bursts each), and nothing else runs. Returns packets sent.
  uint32_t FlushDeferredDoorbells(uint64_t now_ns);
  size_t deferred_doorbells() const { return n_deferred_; }

  const DeviceCounters& counters() const { return counters_; }
  const pktio::LoopbackCounters& loopback_counters() const { return loopback_.counters(); }
  // The internal loopback, e.g. to restrict it to this process's QPNs on a
  // shared port (pktio::LoopbackIo::SetOwnQpns).
  pktio::LoopbackIo& loopback() { return loopback_; }
  // The QPs' timers (indexed by QPN - qpn_base()) and the QPs on the active
  // list (doc/core.md "Timers"): for tests and benchmarks.
  const TimerWheel& timers() const { return timers_; }
  size_t active_qps() const { return active_.size(); }
  // Nothing for a round at now_ns to do but receive: no QP with transmit
  // work or a timer due (a QP with data in flight has its retransmit timer
  // armed, mostly far ahead: TimerWheel::NoneDueBy), no deferred doorbell, no
  // control or refused frame waiting for the port, nothing looped back. With
  // nothing arrived either, a round would be empty (the verbs runtime then
  // skips an empty poll_cq's round).
  bool Quiescent(uint64_t now_ns) { return active_.empty() && tx_backlog_.empty() && NothingElseDue(now_ns); }
  // Nothing for a round before now_ns to do but receive and retry what the
  // port refused: frames wait in the backlog (while they do, QPs build
  // nothing new: TransmitRound) and no timer, deferred doorbell, control or
  // looped-back frame is due. Only the port taking frames again, or an
  // arrival, gives a round work.
  bool BlockedOnPort(uint64_t now_ns) { return tx_backlog_head_ < tx_backlog_.size() && NothingElseDue(now_ns); }

 private:
  // Quiescent's and BlockedOnPort's common part: no deferred doorbell,
  // control frame or looped-back frame waiting, no timer due by now_ns.
  bool NothingElseDue(uint64_t now_ns) {
    return n_deferred_ == 0 && arp_out_.empty() && nd_out_.empty() && loopback_.pending() == 0 &&
           timers_.NoneDueBy(now_ns);
  }
  void FoldSrCounters(const transport::QpCounters& k);
  static absl::Status MakeRouteThunk(void* ctx, const transport::AddressVector& av,
                                     uint32_t local_qpn, uint32_t remote_qpn, wire::Route* out);
  absl::Status MakeRoute(const transport::AddressVector& av, uint32_t local_qpn,
                         uint32_t remote_qpn, wire::Route* out) const;
  // PostSend to a QP not on the active list (device.cc).
  int PostSendInactive(uint32_t index, const transport::SendWr& wr);
  // Puts the QP on the active list (it has transmit work). Inline: every
  // delivered frame calls it, and the QP is mostly on the list already.
  void Activate(uint32_t qpn) {
    const uint32_t i = qpn - qpn_base_;
    if (!qps_[i].active) [[unlikely]] {
      qps_[i].active = true;
      active_.push_back(i);
    }
  }
  // Files the QP of slot `index` in the timing wheel at its NextDeadline(),
  // or takes it out; a deadline that moved later stays filed at the earlier
  // one (the wheel hands it back then and it is filed again).
  void Refile(uint32_t index);
  void DropCompletions(const transport::Qp& q);
  // A neighbour learnt from ARP/ND: never overrides a static entry.
  void LearnNeighbor(const Gid& ip, const Mac& mac);
  bool MakeNeighborRoom();
  // The address filter of a connected QP (doc/rx-checks.md): once it has a
  // path (RTR and later), frames for it must come from the path's
  // destination GID to its source GID, in the path's IP version.
  struct PathFilter {
    uint8_t ip_version = 0;  // 0: no path yet, 4 or 6
    // Source then destination address, as the IP header carries them: the
    // AV's dgid (the peer), then the GID its sgid_index names (ours).
    alignas(8) uint8_t addrs[32] = {};
  };
  static bool PathMatches(const uint8_t* frame, const wire::ParsedPacket& p, const PathFilter& f) {
    if (f.ip_version == 0) return true;
    const uint8_t* l3 = frame + p.l3_offset;
    if (!p.ipv6) {
      uint64_t got, want;
      std::memcpy(&got, l3 + 12, 8);
      std::memcpy(&want, f.addrs, 8);
      return f.ip_version == 4 && got == want;
    }
    return f.ip_version == 6 && std::memcmp(l3 + 8, f.addrs, 32) == 0;
  }
  static PathFilter MakePathFilter(const Gid& peer, const Gid& own);
  // Destination MAC: ours or broadcast; group addresses only outside RoCEv2
  // (no RoCEv2 multicast group can be joined yet; ARP and neighbour
  // discovery check their own destinations).
  bool DstMacAccepted(const uint8_t* frame, bool roce) const {
    uint32_t lo;
    uint16_t hi;
    std::memcpy(&lo, frame, 4);
    std::memcpy(&hi, frame + 4, 2);
    if ((lo == mac_lo_ && hi == mac_hi_) || (lo == 0xFFFFFFFFu && hi == 0xFFFF)) return true;
    if ((frame[0] & 1) == 0) return false;
    return !roce || JoinedMac(frame);  // RoCEv2 to a group: only one we joined
  }
  // Destination IP of a RoCEv2 frame: our IPv4 address, or one of our
  // native IPv6 GIDs (not the IPv4-mapped one written in an IPv6 header).
  bool DstIpAccepted(const uint8_t* frame, const wire::ParsedPacket& p) const {
    const uint8_t* l3 = frame + p.l3_offset;
    if (!p.ipv6) {
      uint32_t dst;
      std::memcpy(&dst, l3 + 16, 4);
      if (ipv4_raw_ != 0 && dst == ipv4_raw_) return true;
      for (uint32_t other : more_ipv4_raw_) {
        if (dst == other) return true;
      }
      return (l3[16] & 0xF0) == 0xE0 && FindGroup(frame, p) != nullptr;
    }
    for (const Gid& g : own_ipv6_) {
      if (std::memcmp(l3 + 24, g.data(), 16) == 0) return true;
    }
    return l3[24] == 0xFF && FindGroup(frame, p) != nullptr;
  }
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
  // Frames to our own MAC turn around here (pktio/loopback_io.h); io_ is
  // this wrapper whenever the device has a port.
  pktio::LoopbackIo loopback_;
  pktio::BurstIo* io_;
  std::vector<Gid> gids_;
  struct Neighbor {
    Mac mac{};
    bool is_static = false;
  };
  // Keyed by GID with a per-device random hash seed: a peer choosing the
  // addresses it announces cannot pile them into one bucket.
  uint64_t neighbor_compares_ = 0;
  std::unordered_map<Gid, Neighbor, SeededGidHash, CountingGidEq> neighbors_;
  std::deque<Gid> learnt_order_;  // learnt entries, oldest first (may hold stale ones)
  uint16_t rx_vid_ = 0;           // VLAN id frames must carry (0: untagged or priority-tagged)
  uint8_t rx_l3_offset_ = 0;      // where the IP header of a frame on the device's VLAN starts
  uint32_t mac_lo_ = 0;           // our MAC's first four bytes as a native load reads them
  uint16_t mac_hi_ = 0;           // ... and its last two
  uint32_t ipv4_raw_ = 0;         // our IPv4 address as a native load of the header reads it
  std::vector<uint32_t> more_ipv4_raw_;  // further IPv4 GIDs (SetGids), in the same form
  std::vector<Gid> own_ipv6_;     // the GIDs that are native IPv6 addresses
  std::vector<wire::ArpPacket> arp_out_;  // replies and requests waiting for the port
  std::vector<wire::NdPacket> nd_out_;    // neighbour solicitations/advertisements waiting for the port
  std::vector<Gid> nd_pending_;           // addresses we solicited (an NA for them is learnt)
  mem::MrTable mrs_;
  transport::AhTable ahs_;
  struct McastGroup {
    Gid gid{};
    Mac mac{};
    std::vector<uint32_t> qpns;  // attached UD QPs
  };
  std::vector<McastGroup> groups_;  // few: searched linearly, only for multicast frames
  bool JoinedMac(const uint8_t* frame) const {
    for (const McastGroup& g : groups_) {
      if (std::memcmp(frame, g.mac.data(), 6) == 0) return true;
    }
    return false;
  }
  // The joined group a frame's destination IP names, or null.
  const McastGroup* FindGroup(const uint8_t* frame, const wire::ParsedPacket& p) const {
    const uint8_t* l3 = frame + p.l3_offset;
    for (const McastGroup& g : groups_) {
      if (p.ipv6 ? std::memcmp(l3 + 24, g.gid.data(), 16) == 0
                 : IsIpv4MappedGid(g.gid) && std::memcmp(l3 + 16, g.gid.data() + 12, 4) == 0) {
        return &g;
      }
    }
    return nullptr;
  }
  // A UD datagram (ud transport) that passed the device's checks: to its QP.
  void DeliverUd(const uint8_t* frame, const wire::ParsedPacket& p, transport::Qp* q);
  std::vector<std::unique_ptr<queue::CompletionQueue>> cqs_;
  std::vector<std::unique_ptr<transport::Srq>> srqs_;
  struct QpSlot {
    std::unique_ptr<transport::Qp> qp;
    bool active = false;  // on active_
    uint64_t ack_held_round = 0;  // the Poll round that last held this QP's ACK (hold_acks)
    // GatherQp's last call for it got all the frames it asked for, short
    // ones (at most half its MTU): its next call asks for a whole burst (tx.cc).
    bool tx_short = false;
    PathFilter path;
    // The headers of its frames, learnt from the last one that passed every
    // receive check (wire/prediction.h); forgotten whenever what they were
    // judged against changes (ForgetPrediction, ForgetPredictions).
    wire::HeaderPrediction rx_prediction;
  };
  // The parameter blocks QPs run an algorithm other than the device's with
  // (SetQpCongestionControl): one per algorithm, made on first use, never
  // moved (QPs point into them).
  std::vector<std::unique_ptr<cc::Config>> cc_choices_;
  std::vector<QpSlot> qps_;  // index = QPN - qpn_base_, grown up to max_qp slots
  // qps_.size(), kept beside it: PostSend and the receive loop test a slot
  // index against it, and the vector's size is a division by the slot's.
  uint32_t qp_slots_ = 0;
  // Slots of destroyed QPs, oldest first. A QPN is reused only once every
  // QPN of the range has been handed out, and then the one freed longest
  // ago: stale packets for the old QP have had the most time to drain
  // (doc/core.md).
  std::deque<uint32_t> free_slots_;
  uint32_t qpn_base_ = 0;
  std::vector<uint32_t> active_;    // indices into qps_ of QPs with transmit work
  TimerWheel timers_;               // every other QP's next deadline, by index into qps_
  std::vector<pktio::Frame> rx_frames_;
  std::vector<pktio::Frame> tx_frames_;
  // The QPs' shared transmit burst (GatherQp): at rest, its first
  // gather_spare_ entries are empty buffers kept from the port for the next.
  std::vector<pktio::Frame> gather_frames_;
  uint16_t gather_spare_ = 0;
  // The port takes gather frames (pktio::BurstIo::TakesGather): QPs send
  // long payloads from registered memory without copying them (QpEnv).
  bool gather_tx_ = false;
  std::vector<pktio::Frame> tx_backlog_;  // refused by the port, sent first next round
  size_t tx_backlog_head_ = 0;
  size_t tx_round_robin_ = 0;  // which active QP transmits first this round
  // QPs whose doorbell was deferred (DeferDoorbell), each once; when full, a
  // further QP is only on the active list (Poll sends it).
  static constexpr size_t kMaxDeferredDoorbells = 32;
  std::array<uint32_t, kMaxDeferredDoorbells> deferred_{};
  size_t n_deferred_ = 0;
  uint64_t poll_round_ = 1;  // Poll rounds run, from 1 (hold_acks holds an ACK one round at most; 0: never held)
  // The poll loop's steps, a file each: poll.cc runs them in this order.
  struct RxVerdict {
    bool accepted = false;              // passed the checks: Dispatch it
    bool verify_while_placing = false;  // its ICRC is the QP's to check (Qp::VerifiesWhilePlacing)
    uint32_t index = 0;                 // BTH destination QP - qpn_base_
  };
  uint32_t ReceiveBurst(uint64_t now_ns);                                            // rx.cc
  void ReceiveLent(pktio::Frame& f, uint64_t now_ns);                                // rx.cc
  // A frame of a connected QP with the headers its slot predicts: checked
  // and delivered without the full parse; false: nothing done, check it.
  // kLent: the frame is rx_lent_'s, which it copies whole (TakeWhole) unless
  // its QP places it while checking it.
  template <bool kLent = false>
  bool ReceivePredicted(const uint8_t* frame, uint32_t len, uint64_t now_ns);       // rx_checks.h
  // The frame being received while it is lent (pktio::Frame::lent: only its
  // headers copied; ReceiveLent), else null.
  pktio::Frame* rx_lent_ = nullptr;
  bool rx_may_lend_ = false;  // the port may lend frames (pktio::BurstIo::StartLending)
  template <bool kMayLend>
  void ReceiveFrames(pktio::Frame* rx, uint16_t n, uint64_t now_ns);  // rx.cc
  // Copies the rest of the lent frame being received: from then on it is
  // whole and nothing more is read from its sender's memory.
  void TakeWhole() {
    if (rx_lent_ == nullptr) return;
    pktio::TakeLent(*rx_lent_);
    rx_lent_ = nullptr;
  }
  RxVerdict CheckFrame(const uint8_t* frame, uint32_t len, const wire::ParsedPacket& p);  // rx_checks.h
  enum : uint8_t {
    kPredictedClass = 1,
    kPredictedConnected = 2,
    kPredictedPlacer = 4,
    kPredictedRoleShift = 3,
    kPredictedRole = 3 << kPredictedRoleShift,
  };
  static uint8_t PredictedClass(const wire::ParsedPacket& p, const transport::Qp& q);  // rx_checks.h
  void Dispatch(const uint8_t* frame, const wire::ParsedPacket& p, const RxVerdict& v,
                uint64_t now_ns);                                                   // dispatch.h
  // An RC/UC frame that passed every device check, to its QP; false when
  // its ICRC, checked while placing, fails (counted). `role`: its
  // Qp::RoleOf when known (kAsJudged: OnPacket judges it).
  bool DeliverConnected(transport::Qp& q, const uint8_t* frame, const wire::ParsedPacket& p,
                        bool verify_while_placing, transport::Qp::PacketRole role, uint32_t index,
                        uint64_t now_ns);  // dispatch.h
  // Header predictions rest on the device's addresses and the QP's path.
  void ForgetPrediction(uint32_t index) { qps_[index].rx_prediction = wire::HeaderPrediction{}; }
  void ForgetPredictions() {
    for (uint32_t i = 0; i < qps_.size(); ++i) ForgetPrediction(i);
  }
  void ExpireTimers(uint64_t now_ns);                                               // timers.cc
  uint32_t TransmitRound(uint64_t now_ns, bool hold_acks);                          // tx.cc
  // doorbell.cc: deferred doorbells and ACK holding.
  bool HoldAck(QpSlot& slot, uint32_t index, uint64_t now_ns);
  bool AddDeferred(uint32_t qpn);
  uint32_t GatherDeferred(uint64_t now_ns, uint32_t except_qpn, uint16_t* pending, bool* port_full);
  uint32_t FlushTxBacklog();
  uint32_t GatherQp(QpSlot& slot, uint64_t now_ns, uint16_t* pending, bool* port_full);
  uint32_t FlushGathered(uint16_t* pending, bool* port_full);
  DeviceCounters counters_;

 public:
  // The fixed base droce used before QPNs were randomised (rxe's first QPN
  // too): for tools whose two ends must know each other's QPNs in advance.
  static constexpr uint32_t kFirstQpn = 0x11;
  static constexpr uint32_t kMaxAh = 1u << 16;
  static constexpr uint32_t kQpnLimit = 1u << 24;
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
    for (uint16_t i = 0; i < ok; ++i) counters_.tx_bytes += tx[i].len;
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
