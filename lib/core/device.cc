#include "core/device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "wire/icrc.h"

namespace droce::core {

using transport::RcQp;

const char* ParseErrorCounterName(wire::ParseStatus s) {
  static const auto* names = [] {
    auto* n = new std::array<std::string, static_cast<int>(wire::ParseStatus::kCount)>;
    for (int i = 0; i < static_cast<int>(n->size()); ++i) {
      (*n)[i] = std::string("rx_") + wire::ParseStatusName(static_cast<wire::ParseStatus>(i));
    }
    return n;
  }();
  const int i = static_cast<int>(s);
  return i >= 0 && i < static_cast<int>(names->size()) ? (*names)[i].c_str() : "rx_?";
}

Device::Device(const DeviceConfig& config, pktio::BurstIo* io)
    : config_(config), loopback_(io, config.mac), io_(io != nullptr ? &loopback_ : nullptr),
      gids_(GidTable(config)), mrs_(config.max_mr), ahs_(kMaxAh) {
  for (const Gid& g : gids_) {
    if (!IsIpv4MappedGid(g)) own_ipv6_.push_back(g);
  }
  rx_vid_ = config.vlan ? (config.vlan_tci & 0xFFF) : 0;
  std::memcpy(&mac_lo_, config.mac.data(), 4);
  std::memcpy(&mac_hi_, config.mac.data() + 4, 2);
  uint8_t ipv4_bytes[4];
  wire::StoreBe32(ipv4_bytes, config.ipv4);
  std::memcpy(&ipv4_raw_, ipv4_bytes, 4);
  std::random_device rd;
  neighbors_ = decltype(neighbors_)(config.max_neighbors + 1, SeededGidHash{(uint64_t{rd()} << 32) | rd()},
                                    CountingGidEq{&neighbor_compares_});
  if (config_.max_qp > kQpnLimit - 2) config_.max_qp = kQpnLimit - 2;
  qpn_base_ = config_.qpn_base;
  if (qpn_base_ < 2 || qpn_base_ > kQpnLimit - config_.max_qp) {
    qpn_base_ = 2 + rd() % (kQpnLimit - config_.max_qp - 1);  // [2, 2^24 - max_qp]
  }
  qps_.reserve(std::min<uint32_t>(config_.max_qp, 4096));
  rx_frames_.resize(config.burst);
  tx_frames_.resize(config.burst);
  gather_frames_.resize(config.burst);
  tx_backlog_.reserve(config.burst);  // never more than one burst's tail
}

Device::~Device() {
  if (gather_spare_ > 0) io_->Release(gather_frames_.data(), gather_spare_);
  // Frames still waiting for the port go back to it.
  if (tx_backlog_head_ < tx_backlog_.size()) {
    io_->Release(tx_backlog_.data() + tx_backlog_head_,
                 static_cast<uint16_t>(tx_backlog_.size() - tx_backlog_head_));
  }
}

uint32_t Device::FlushTxBacklog() {
  if (tx_backlog_.empty()) return 0;
  uint32_t sent_total = 0;
  while (tx_backlog_head_ < tx_backlog_.size()) {
    pktio::Frame* f = tx_backlog_.data() + tx_backlog_head_;
    const auto n = static_cast<uint16_t>(tx_backlog_.size() - tx_backlog_head_);
    const uint16_t sent = io_->TxBurst(f, n);
    for (uint16_t k = 0; k < sent; ++k) counters_.tx_bytes += f[k].len;
    counters_.tx_packets += sent;
    sent_total += sent;
    tx_backlog_head_ += sent;
    if (sent < n) return sent_total;
  }
  tx_backlog_.clear();
  tx_backlog_head_ = 0;
  return sent_total;
}

// Makes room for one entry if the table is full: evicts the oldest learnt
// one (order entries for addresses since made static are skipped). False if
// every entry is static.
bool Device::MakeNeighborRoom() {
  while (neighbors_.size() >= config_.max_neighbors && !learnt_order_.empty()) {
    auto old = neighbors_.find(learnt_order_.front());
    learnt_order_.pop_front();
    if (old != neighbors_.end() && !old->second.is_static) {
      neighbors_.erase(old);
      ++counters_.neighbors_evicted;
    }
  }
  if (neighbors_.size() < config_.max_neighbors) return true;
  ++counters_.neighbors_refused;
  return false;
}

bool Device::IsLocalGid(const Gid& gid) const {
  return gid != Gid{} && std::find(gids_.begin(), gids_.end(), gid) != gids_.end();
}

void Device::SetGids(const std::vector<Gid>& table) {
  gids_ = table;
  own_ipv6_.clear();
  more_ipv4_raw_.clear();
  ipv4_raw_ = 0;
  for (const Gid& g : gids_) {
    if (g == Gid{}) continue;
    if (!IsIpv4MappedGid(g)) {
      own_ipv6_.push_back(g);
      continue;
    }
    uint32_t raw;
    std::memcpy(&raw, g.data() + 12, 4);
    if (ipv4_raw_ == 0) {
      ipv4_raw_ = raw;
    } else {
      more_ipv4_raw_.push_back(raw);
    }
  }
}

bool Device::AddNeighbor(const Gid& ip, const Mac& mac) {
  auto it = neighbors_.find(ip);
  if (it != neighbors_.end()) {
    it->second = {mac, true};
    return true;
  }
  if (!MakeNeighborRoom()) return false;
  neighbors_.emplace(ip, Neighbor{mac, true});
  return true;
}

void Device::LearnNeighbor(const Gid& ip, const Mac& mac) {
  auto it = neighbors_.find(ip);
  if (it != neighbors_.end()) {
    if (it->second.is_static) {
      if (it->second.mac != mac) ++counters_.neighbors_refused;
    } else {
      it->second.mac = mac;
    }
    return;
  }
  if (!MakeNeighborRoom()) return;
  neighbors_.emplace(ip, Neighbor{mac, false});
  learnt_order_.push_back(ip);
  ++counters_.neighbors_learned;
}

const Mac* Device::FindNeighbor(const Gid& ip) const {
  auto it = neighbors_.find(ip);
  return it == neighbors_.end() ? nullptr : &it->second.mac;
}

void Device::RequestArp(uint32_t ipv4) {
  if (config_.ipv4 == 0 || arp_out_.size() >= 64) return;
  wire::ArpPacket req;
  req.op = wire::kArpRequest;
  req.sender_mac = config_.mac;
  req.sender_ip = config_.ipv4;
  req.target_ip = ipv4;
  arp_out_.push_back(req);
}

// RFC 826, for an RNIC: answer requests for our address and learn the
// sender of any ARP packet aimed at us (a reply to our request, or the
// peer's own request, which tells us its MAC before we ask).
void Device::HandleArp(const uint8_t* frame, uint32_t len) {
  wire::ArpPacket a;
  if (!wire::ParseArp(frame, len, &a)) return;
  ++counters_.rx_arp;
  if (config_.ipv4 == 0 || a.target_ip != config_.ipv4 || a.sender_ip == 0) return;
  LearnNeighbor(wire::Ipv4MappedGid(a.sender_ip), a.sender_mac);
  if (a.op == wire::kArpRequest && arp_out_.size() < 64) {
    arp_out_.push_back(wire::ArpReplyFor(a, config_.mac, config_.ipv4));
  }
}

uint32_t Device::TransmitArp() {
  return TransmitQueued(
      arp_out_,
      [this](const wire::ArpPacket& m, uint8_t* data) {
        return wire::BuildArp(m, config_.vlan, config_.vlan_tci, data);
      },
      [this](const wire::ArpPacket& m) {
        ++(m.op == wire::kArpReply ? counters_.arp_replies_sent : counters_.arp_requests_sent);
      });
}

absl::StatusOr<uint32_t> Device::CreateCq(uint32_t depth) {
  if (depth == 0 || depth > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat("CQ depth %u not in 1..%u", depth, 1u << 20));
  }
  cqs_.push_back(std::make_unique<queue::CompletionQueue>(depth));
  return static_cast<uint32_t>(cqs_.size() - 1);
}

queue::CompletionQueue* Device::cq(uint32_t id) {
  return id < cqs_.size() ? cqs_[id].get() : nullptr;
}

absl::Status Device::DestroyCq(uint32_t id) {
  if (cq(id) == nullptr) return absl::NotFoundError(absl::StrFormat("no CQ %u", id));
  for (const QpSlot& slot : qps_) {
    const RcQp* q = slot.qp.get();
    if (q && (q->env().send_cq == cqs_[id].get() || q->env().recv_cq == cqs_[id].get())) {
      return absl::FailedPreconditionError("CQ still in use by a QP");
    }
  }
  cqs_[id].reset();
  return absl::OkStatus();
}

absl::Status Device::ResizeCq(uint32_t id, uint32_t depth) {
  if (cq(id) == nullptr) return absl::NotFoundError(absl::StrFormat("no CQ %u", id));
  if (depth == 0 || depth > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat("CQ depth %u not in 1..%u", depth, 1u << 20));
  }
  if (!cqs_[id]->Resize(depth)) return absl::InvalidArgumentError("more completions queued than the new depth");
  return absl::OkStatus();
}

absl::Status Device::DestroySrq(uint32_t id) {
  if (srq(id) == nullptr) return absl::NotFoundError(absl::StrFormat("no SRQ %u", id));
  for (const QpSlot& slot : qps_) {
    if (slot.qp && slot.qp->env().srq == srqs_[id].get()) return absl::FailedPreconditionError("SRQ still in use by a QP");
  }
  srqs_[id].reset();
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Device::CreateSrq(uint32_t depth) {
  if (depth == 0 || depth > (1u << 16)) return absl::InvalidArgumentError("SRQ depth not in 1..65536");
  srqs_.push_back(std::make_unique<transport::Srq>(depth));
  return static_cast<uint32_t>(srqs_.size() - 1);
}

int Device::PostSrqRecv(uint32_t srq, const transport::RecvWr& wr) {
  if (srq >= srqs_.size() || !srqs_[srq]) return EINVAL;
  if (wr.num_sge > transport::kMaxSge) return EINVAL;
  return srqs_[srq]->ring().Push(wr) ? 0 : ENOMEM;
}

absl::StatusOr<uint32_t> Device::CreateAh(uint32_t pd, const transport::AddressVector& av) {
  if (!mrs_.PdExists(pd)) return absl::InvalidArgumentError("no such protection domain");
  transport::AddressVector v = av;
  if (const std::optional<Mac> group = MulticastMac(v.dgid)) {
    v.dmac = *group;  // RFC 1112 / RFC 2464: the group's MAC, no neighbour to resolve
    v.dmac_valid = true;
  }
  wire::Route route;
  absl::Status s = MakeRoute(v, 0, 0, &route);  // the UDP source port is the sending QP's
  if (!s.ok()) return s;
  const int64_t id = ahs_.Add(pd, v, route);
  if (id < 0) return absl::ResourceExhaustedError("no address handle left");
  return static_cast<uint32_t>(id);
}

absl::Status Device::AttachMcast(uint32_t qpn, const Gid& group) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  if (!q->ud()) return absl::InvalidArgumentError("only UD QPs join multicast groups");
  const std::optional<Mac> mac = MulticastMac(group);
  if (!mac) return absl::InvalidArgumentError("not a multicast GID");
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const McastGroup& g) { return g.gid == group; });
  if (it == groups_.end()) {
    if (groups_.size() >= kMaxMcastGroups) return absl::ResourceExhaustedError("multicast group table full");
    groups_.push_back(McastGroup{group, *mac, {}});
    it = groups_.end() - 1;
  }
  if (std::find(it->qpns.begin(), it->qpns.end(), qpn) != it->qpns.end()) return absl::OkStatus();  // as rxe
  if (it->qpns.size() >= kMaxMcastQpAttach) return absl::ResourceExhaustedError("group has too many QPs");
  it->qpns.push_back(qpn);
  return absl::OkStatus();
}

absl::Status Device::DetachMcast(uint32_t qpn, const Gid& group) {
  auto it = std::find_if(groups_.begin(), groups_.end(), [&](const McastGroup& g) { return g.gid == group; });
  if (it == groups_.end()) return absl::InvalidArgumentError("no such multicast group");
  auto q = std::find(it->qpns.begin(), it->qpns.end(), qpn);
  if (q == it->qpns.end()) return absl::InvalidArgumentError("QP not attached to the group");
  it->qpns.erase(q);
  if (it->qpns.empty()) groups_.erase(it);
  return absl::OkStatus();
}

absl::Status Device::DestroyAh(uint32_t ah) {
  if (!ahs_.Remove(ah)) return absl::NotFoundError(absl::StrFormat("no address handle %u", ah));
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Device::CreateQp(const QpInitAttr& init) {
  if (!mrs_.PdExists(init.pd)) return absl::InvalidArgumentError("no such protection domain");
  if (cq(init.send_cq) == nullptr || cq(init.recv_cq) == nullptr) {
    return absl::InvalidArgumentError("no such completion queue");
  }
  if (init.srq >= 0 && srq(static_cast<uint32_t>(init.srq)) == nullptr) {
    return absl::InvalidArgumentError("no such shared receive queue");
  }
  const transport::QpCaps& c = init.caps;
  if (c.max_send_wr == 0 || c.max_send_wr > (1u << 15) || c.max_recv_wr > (1u << 15) ||
      c.max_send_sge > transport::kMaxSge || c.max_recv_sge > transport::kMaxSge ||
      c.max_inline_data > transport::kMaxInlineData) {
    return absl::InvalidArgumentError("QP capabilities exceed the device limits");
  }
  if (qps_.size() < config_.max_qp && qpn_base_ + qps_.size() == transport::kMulticastQpn) {
    qps_.emplace_back();  // QPN 0xFFFFFF addresses multicast groups (IBTA 10.5.3): never a QP's
    timers_.Reserve(static_cast<uint32_t>(qps_.size()));
  }
  if (qps_.size() >= config_.max_qp && free_slots_.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat("all %u QPs of the device are in use", config_.max_qp));
  }
  transport::QpEnv env;
  env.mrs = &mrs_;
  env.send_cq = cq(init.send_cq);
  env.recv_cq = cq(init.recv_cq);
  env.srq = init.srq >= 0 ? srqs_[init.srq].get() : nullptr;
  env.pd = init.pd;
  env.make_route = &Device::MakeRouteThunk;
  env.route_ctx = this;
  env.ahs = &ahs_;
  env.cnp_enabled = config_.cnp_enabled;
  env.min_time_between_cnps_ns = config_.min_time_between_cnps_ns;
  env.cnp_dscp = config_.cnp_dscp;
  env.dcqcn = config_.dcqcn ? &config_.dcqcn_params : nullptr;
  env.selective_repeat = config_.selective_repeat;
  env.sr_max_inflight_packets = config_.sr_max_inflight_packets;
  env.sr_rto_low_ns = config_.sr_rto_low_ns;
  env.sr_rto_low_below = config_.sr_rto_low_below;
  env.sr_rto_high_ns = config_.sr_rto_high_ns;
  env.sr_rto_min_ns = config_.sr_rto_min_ns;
  env.sr_tlp = config_.sr_tlp;
  env.unsignaled_ack_every = config_.unsignaled_ack_every;
  env.ack_solicit_ns = config_.ack_solicit_ns;
  uint32_t index;
  if (qps_.size() < config_.max_qp) {
    index = static_cast<uint32_t>(qps_.size());  // a QPN never used yet
    qps_.emplace_back();
    timers_.Reserve(static_cast<uint32_t>(qps_.size()));
  } else {
    index = free_slots_.front();  // the one freed longest ago
    free_slots_.pop_front();
  }
  const uint32_t qpn = qpn_base_ + index;
  qps_[index].qp = std::make_unique<RcQp>(qpn, c, env);
  qps_[index].path = PathFilter{};
  return qpn;
}


// Removes a QP's completions from its CQs, as rdma-core's mlx5 provider
// cleans the CQs of a QP moved to RESET or destroyed.
void Device::DropCompletions(const RcQp& q) {
  q.env().send_cq->RemoveQp(q.qpn());
  q.env().recv_cq->RemoveQp(q.qpn());
}

absl::Status Device::SetQpSelectiveRepeat(uint32_t qpn, bool on) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  return q->SetSelectiveRepeat(on);
}

absl::Status Device::ModifyQp(uint32_t qpn, const transport::QpAttr& attr, uint32_t mask) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  absl::Status s = q->Modify(attr, mask);
  if (!s.ok()) return s;
  if ((mask & transport::kAttrState) && attr.qp_state == transport::QpState::kReset) {
    DropCompletions(*q);  // what the QP left behind (flushed WRs) goes with its old life
  }
  Activate(qpn);  // e.g. a move to ERR has flush work
  // The receive filter follows the QP's path: on from RTR (when the AV is
  // set) on, off again in RESET/INIT; ERR keeps what it had.
  PathFilter& f = qps_[qpn - qpn_base_].path;
  switch (q->state()) {
    case transport::QpState::kReset:
    case transport::QpState::kInit:
      f = PathFilter{};
      break;
    case transport::QpState::kErr:
      break;
    default: {
      if (q->ud()) break;  // datagrams come from anyone (the Q_Key guards a UD QP)
      // MakeRoute checked sgid_index and that both GIDs are of one IP version.
      const transport::AddressVector& av = q->attr().ah;
      if (av.sgid_index < gids_.size()) f = MakePathFilter(av.dgid, gids_[av.sgid_index]);
      break;
    }
  }
  return s;
}

// A destroyed SR QP's repair-time counters, kept in the device's
// (DROCE_STATS prints them at close; doc/loss-experiment.md "Round 6").
void Device::FoldSrCounters(const transport::QpCounters& k) {
  uint64_t samples = 0;
  for (uint64_t v : k.sr_rtt_hist) samples += v;
  if (samples == 0 && k.sr_repairs_timed == 0 && k.sr_repair_waits == 0) return;
  counters_.sr_window_full_us += k.sr_window_full_ns / 1000;
  counters_.sr_sq_drained_us += k.sr_sq_drained_ns / 1000;
  counters_.sr_rtt_samples += samples;
  counters_.sr_rtt_inflight_sum += k.sr_rtt_inflight_sum;
  const uint64_t min_us = k.sr_rtt_min_ns / 1000;
  if (k.sr_rtt_min_ns != 0 && (counters_.sr_rtt_min_us == 0 || min_us < counters_.sr_rtt_min_us)) {
    counters_.sr_rtt_min_us = min_us;
  }
  counters_.sr_repair_waits += k.sr_repair_waits;
  counters_.sr_repair_wait_us += k.sr_repair_wait_ns / 1000;
  counters_.sr_repair_wait_max_us = std::max(counters_.sr_repair_wait_max_us, k.sr_repair_wait_max_ns / 1000);
  counters_.sr_repairs_timed += k.sr_repairs_timed;
  counters_.sr_repair_us += k.sr_repair_ns / 1000;
  constexpr int kB = transport::QpCounters::kSrRttBuckets;  // buckets 4.. are >= 512 us, 6.. >= 2048 us
  for (int b = 4; b < kB; ++b) counters_.sr_repair_ge512us += k.sr_repair_hist[b];
  for (int b = 6; b < kB; ++b) counters_.sr_repair_ge2048us += k.sr_repair_hist[b];
}

absl::Status Device::DestroyQp(uint32_t qpn) {
  if (qp(qpn) == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  QpSlot& slot = qps_[qpn - qpn_base_];
  DropCompletions(*slot.qp);  // a later QP with the same number must not be credited with them
  FoldSrCounters(slot.qp->counters());
  for (McastGroup& g : groups_) std::erase(g.qpns, qpn);  // a destroyed QP leaves its groups
  std::erase_if(groups_, [](const McastGroup& g) { return g.qpns.empty(); });
  slot.qp.reset();
  slot.path = PathFilter{};
  timers_.Cancel(qpn - qpn_base_);
  free_slots_.push_back(qpn - qpn_base_);
  mrs_.ReleaseQp(qpn);  // its type-2 memory windows return to the free state
  return absl::OkStatus();
}

int Device::PostSend(uint32_t qpn, const transport::SendWr& wr) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return EINVAL;
  const int err = q->PostSend(wr);
  if (err == 0) Activate(qpn);
  return err;
}

int Device::PostRecv(uint32_t qpn, const transport::RecvWr& wr) {
  RcQp* q = qp(qpn);
  return q == nullptr ? EINVAL : q->PostRecv(wr);
}

uint32_t Device::PollCq(uint32_t id, queue::Completion* out, uint32_t n) {
  queue::CompletionQueue* c = cq(id);
  if (c == nullptr) return 0;
  const uint32_t got = c->Poll(out, n);
  for (uint32_t i = 0; i < got; ++i) out[i].flags &= ~queue::CompletionQueue::kWcSolicited;
  return got;
}

void Device::Refile(uint32_t index) {
  const uint64_t d = qps_[index].qp->NextDeadline();
  if (d == 0) {
    timers_.Cancel(index);
  } else if (!timers_.armed(index) || d < timers_.deadline(index)) {
    timers_.Arm(index, d);
  }
}

void Device::Activate(uint32_t qpn) {
  const uint32_t i = qpn - qpn_base_;
  if (!qps_[i].active) {
    qps_[i].active = true;
    active_.push_back(i);
  }
}

Device::PathFilter Device::MakePathFilter(const Gid& peer, const Gid& own) {
  PathFilter f;
  if (IsIpv4MappedGid(peer)) {
    f.ip_version = 4;
    std::memcpy(f.addrs, peer.data() + 12, 4);
    std::memcpy(f.addrs + 4, own.data() + 12, 4);
  } else {
    f.ip_version = 6;
    std::memcpy(f.addrs, peer.data(), 16);
    std::memcpy(f.addrs + 16, own.data(), 16);
  }
  return f;
}

absl::Status Device::MakeRouteThunk(void* ctx, const transport::AddressVector& av,
                                    uint32_t local_qpn, uint32_t remote_qpn, wire::Route* out) {
  return static_cast<const Device*>(ctx)->MakeRoute(av, local_qpn, remote_qpn, out);
}

absl::Status Device::MakeRoute(const transport::AddressVector& av, uint32_t local_qpn,
                               uint32_t remote_qpn, wire::Route* out) const {
  if (av.sgid_index >= gids_.size() || gids_[av.sgid_index] == Gid{}) {
    return absl::InvalidArgumentError(absl::StrFormat("sgid_index %u names no GID", av.sgid_index));
  }
  const Gid& sgid = gids_[av.sgid_index];
  const bool v4 = IsIpv4MappedGid(av.dgid);
  if (v4 != IsIpv4MappedGid(sgid)) {
    return absl::InvalidArgumentError("source and destination GIDs are of different IP versions");
  }
  wire::RouteFields f;
  f.src_mac = config_.mac;
  if (IsLocalGid(av.dgid)) {
    f.dst_mac = config_.mac;  // another QP of this device: internal loopback
  } else if (av.dmac_valid) {
    f.dst_mac = av.dmac;
  } else {
    if (const Mac* mac = FindNeighbor(av.dgid); mac != nullptr) {
      f.dst_mac = *mac;
    } else if (config_.broadcast_unresolved) {
      f.dst_mac = Mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    } else {
      return absl::UnavailableError("destination not resolved (no neighbour)");
    }
  }
  f.has_vlan = config_.vlan;
  f.vlan_tci = config_.vlan_tci;
  f.ipv6 = !v4;
  const uint8_t dscp = av.traffic_class != 0 ? (av.traffic_class >> 2) : config_.dscp;
  f.tclass = static_cast<uint8_t>((dscp << 2) | (config_.ecn & 3));
  f.ttl = av.hop_limit;
  f.src_ip = sgid;
  f.dst_ip = av.dgid;
  const uint32_t flow = av.flow_label != 0 ? av.flow_label
                                           : wire::FlowLabelForQpPair(local_qpn, remote_qpn);
  f.flow_label = flow;
  f.udp_src_port = wire::UdpSourcePortForFlowLabel(flow);
  *out = wire::MakeRoute(f);
  return absl::OkStatus();
}

void Device::DeliverUd(const uint8_t* frame, const wire::ParsedPacket& p, RcQp* q) {
  if (wire::BthView(frame + p.bth_offset).dest_qp() == transport::kMulticastQpn) {
    // IBTA 10.5.3: to every QP attached to the group (each checks its Q_Key).
    const McastGroup* g = FindGroup(frame, p);
    if (g == nullptr) {
      ++counters_.rx_unknown_qp;
      return;
    }
    ++counters_.rx_mcast;
    uint32_t taken = 0;
    for (const uint32_t qpn : g->qpns) {
      RcQp* m = qp(qpn);
      if (m == nullptr) continue;
      switch (m->OnUdPacket(frame, p)) {
        case transport::UdRx::kDelivered: ++taken; break;
        case transport::UdRx::kBadQkey: ++counters_.rx_ud_drop_qkey; break;
        case transport::UdRx::kNoRecv: ++counters_.rx_ud_no_recv; break;
        default: break;
      }
    }
    if (taken == 0) ++counters_.rx_mcast_no_qp;
    return;
  }
  if (q == nullptr || !q->ud()) {
    ++counters_.rx_unknown_qp;
    return;
  }
  switch (q->OnUdPacket(frame, p)) {
    case transport::UdRx::kBadQkey: ++counters_.rx_ud_drop_qkey; break;
    case transport::UdRx::kNoRecv: ++counters_.rx_ud_no_recv; break;
    default: break;
  }
}

// Sends the gathered frames gather_frames_[0, *pending) in one burst. What
// the port refuses waits in the backlog (sent first next round) and sets
// *port_full. The spare empty frames behind them move to the front. Returns
// the frames sent.
uint32_t Device::FlushGathered(uint16_t* pending, bool* port_full) {
  if (*pending == 0) return 0;
  pktio::Frame* tx = gather_frames_.data();
  const uint16_t sent = io_->TxBurst(tx, *pending);
  for (uint32_t j = 0; j < sent; ++j) counters_.tx_bytes += tx[j].len;
  counters_.tx_packets += sent;
  if (sent < *pending) {
    tx_backlog_.assign(tx + sent, tx + *pending);
    tx_backlog_head_ = 0;
    counters_.tx_port_full += *pending - sent;
    *port_full = true;
  }
  std::copy(tx + *pending, tx + *pending + gather_spare_, tx);
  *pending = 0;
  return sent;
}

// Lets one QP add at most tx_bursts_per_qp bursts' worth of frames to the
// gathered burst gather_frames_[0, *pending), flushing it whenever it fills:
// the frames of several QPs leave in one TxBurst. Buffers the QP did not use
// stay with the device as spares (gather_frames_[*pending, + gather_spare_))
// for the next call, instead of going back to the port: a QP asks for a
// burst's worth when its window allows it, whatever it has queued, and one
// 64 B WRITE used to cost 32 buffer allocations and 31 frees (a third of
// its CPU time over DPDK). Returns the frames sent.
uint32_t Device::GatherQp(RcQp& q, uint64_t now_ns, uint16_t* pending, bool* port_full) {
  uint32_t sent = 0;
  uint32_t budget = uint32_t{config_.tx_bursts_per_qp} * config_.burst;
  pktio::Frame* tx = gather_frames_.data();
  while (budget > 0 && !*port_full) {
    const uint32_t room = std::min<uint32_t>(budget, config_.burst - *pending);
    const uint32_t demand = q.TransmitDemand(now_ns, room);
    if (demand == 0) break;
    if (gather_spare_ < demand) {
      gather_spare_ = static_cast<uint16_t>(
          gather_spare_ + io_->AllocTx(tx + *pending + gather_spare_, static_cast<uint16_t>(demand - gather_spare_)));
    }
    const uint32_t got = std::min<uint32_t>(demand, gather_spare_);
    if (got == 0) break;
    const uint32_t used = q.Transmit(tx + *pending, got, now_ns);
    *pending = static_cast<uint16_t>(*pending + used);
    gather_spare_ = static_cast<uint16_t>(gather_spare_ - used);
    for (uint16_t i = 0; i < gather_spare_; ++i) tx[*pending + i].len = 0;
    budget -= used;
    if (*pending == config_.burst) sent += FlushGathered(pending, port_full);
    // The QP has nothing more now: it built fewer than it was given, or it
    // asked for less than it could have had (asking again only returns 0).
    if (used < got || used == 0 || demand < room) break;
  }
  return sent;
}

uint32_t Device::Doorbell(uint32_t qpn, uint64_t now_ns) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return 0;
  q->TakePosted();  // WRs posted without the device lock (RcQp::PublishSend)
  if (io_ == nullptr) return 0;
  Activate(qpn);  // what the doorbell leaves (timers, the rest of a long message) goes to Poll
  uint32_t work = FlushTxBacklog();
  // Frames the port refused go first (the QP's own may be among them).
  if (tx_backlog_head_ < tx_backlog_.size()) return work;
  bool port_full = false;
  uint16_t pending = 0;
  // Deferred doorbells were rung first: their frames go first.
  work += GatherDeferred(now_ns, qpn, &pending, &port_full);
  if (!port_full) work += GatherQp(*q, now_ns, &pending, &port_full);
  return work + FlushGathered(&pending, &port_full);
}

void Device::DeferDoorbell(uint32_t qpn) {
  RcQp* q = qp(qpn);
  if (q == nullptr) return;
  q->TakePosted();
  if (io_ == nullptr) return;
  Activate(qpn);
  ++counters_.tx_doorbells_deferred;
  AddDeferred(qpn);
}

// Puts qpn on the deferred-doorbell list once; false when the list is full
// (the QP is still on the active list: the next Poll sends it).
bool Device::AddDeferred(uint32_t qpn) {
  for (size_t i = 0; i < n_deferred_; ++i) {
    if (deferred_[i] == qpn) return true;
  }
  if (n_deferred_ == deferred_.size()) return false;
  deferred_[n_deferred_++] = qpn;
  return true;
}

uint32_t Device::FlushDeferredDoorbells(uint64_t now_ns) {
  if (n_deferred_ == 0 || io_ == nullptr) return 0;
  uint32_t work = FlushTxBacklog();
  if (tx_backlog_head_ < tx_backlog_.size()) return work;
  bool port_full = false;
  uint16_t pending = 0;
  work += GatherDeferred(now_ns, kQpnLimit, &pending, &port_full);
  return work + FlushGathered(&pending, &port_full);
}

// Gathers the deferred doorbells' QPs (but except_qpn, gathered by the
// caller) and empties the list: what they leave stays on the active list.
uint32_t Device::GatherDeferred(uint64_t now_ns, uint32_t except_qpn, uint16_t* pending, bool* port_full) {
  uint32_t sent = 0;
  for (size_t i = 0; i < n_deferred_ && !*port_full; ++i) {
    if (deferred_[i] == except_qpn) continue;
    RcQp* d = qp(deferred_[i]);  // destroyed since: nothing to send
    if (d != nullptr) sent += GatherQp(*d, now_ns, pending, port_full);
  }
  n_deferred_ = 0;
  return sent;
}

uint32_t Device::Poll(uint64_t now_ns, bool hold_acks) {
  uint32_t work = 0;
  n_deferred_ = 0;  // their QPs are on the active list, which this round transmits
  ++poll_round_;
  pktio::Frame* rx = rx_frames_.data();
  const uint16_t n = io_->RxBurst(rx, config_.burst);
  if (n != 0) {
    ++counters_.rx_bursts;
    if (n == config_.burst) ++counters_.rx_bursts_full;
  }
  // The receive checks, in order (doc/rx-checks.md): the cheap ones that
  // decide whether a frame is for us at all come before the ICRC.
  for (uint16_t i = 0; i < n; ++i) {
    const uint8_t* frame = rx[i].data;
    ++counters_.rx_packets;
    counters_.rx_bytes += rx[i].len;
    const wire::ParsedPacket p = wire::ParsePacket(frame, rx[i].len);
    if (rx[i].len < wire::kEthBytes) {
      ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kTruncated)];
      continue;
    }
    // 1. Link layer: the VLAN (0 = untagged or priority-tagged), then the
    //    destination MAC (the port may be promiscuous).
    if ((p.has_vlan ? (p.vlan_tci & 0xFFF) : 0) != rx_vid_) {
      ++counters_.rx_drop_vlan;
      continue;
    }
    if (!DstMacAccepted(frame, p.ok() || !wire::IsForeign(p.status))) {
      ++counters_.rx_drop_dst_mac;
      continue;
    }
    // 2. Structure (lib/wire ParsePacket), IPv4 header checksum and TTL.
    if (!p.ok()) {
      if (wire::IsForeign(p.status)) {
        if (p.status == wire::ParseStatus::kNotUdp && p.ipv6) {
          HandleNd(frame, rx[i].len);  // ICMPv6: neighbour discovery (neighbor_v6.cc)
        } else if (rx[i].len >= wire::kEthBytes + wire::kArpBytes) {
          HandleArp(frame, rx[i].len);
        }
        ++counters_.rx_foreign;
      } else {
        ++counters_.rx_parse_errors[static_cast<int>(p.status)];
      }
      continue;
    }
    // 3. Network layer: addressed to one of our GIDs.
    if (!DstIpAccepted(frame, p)) {
      ++counters_.rx_drop_dst_ip;
      continue;
    }
    // 4. The BTH P_Key against the port's one-entry P_Key table, the default
    //    partition 0xFFFF (full member): IBTA 10.9.3 matches when the low 15
    //    bits agree and one side is a full member, so 0xFFFF and 0x7FFF.
    const wire::BthView bth(frame + p.bth_offset);
    if ((bth.pkey() & 0x7FFF) != 0x7FFF) {
      ++counters_.rx_drop_pkey;
      continue;
    }
    // 5. ICRC. RC WRITE MIDDLE: the QP checks it while it places the payload.
    const uint32_t qpn = bth.dest_qp();
    const uint32_t index = qpn - qpn_base_;
    QpSlot* slot = index < qps_.size() ? &qps_[index] : nullptr;
    RcQp* q = slot != nullptr ? slot->qp.get() : nullptr;
    const bool placer = q != nullptr && RcQp::VerifiesWhilePlacing(p);
    if (!placer && !wire::IcrcMatches(frame, p)) {
      ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
      continue;
    }
    // 6. The QP: it exists, takes this transport, and the frame came along
    //    its path (connected QPs from RTR on).
    if (p.opcode == wire::kCnp) {
      ++counters_.rx_cnp;
      if (q == nullptr) {
        ++counters_.rx_cnp_dropped;
      } else if (!PathMatches(frame, p, slot->path)) {
        ++counters_.rx_drop_path;
      } else {
        q->OnCnp(now_ns);
        Refile(index);  // the reaction point's timers (the QP stays where it is)
      }
      continue;
    }
    if (p.op().transport == wire::Transport::kUd) {
      DeliverUd(frame, p, q);
      continue;
    }
    if (q == nullptr || q->ud() ||
        (p.op().transport != wire::Transport::kRc && p.op().transport != wire::Transport::kUc)) {
      ++counters_.rx_unknown_qp;
      continue;
    }
    if (!PathMatches(frame, p, slot->path)) {
      ++counters_.rx_drop_path;
      continue;
    }
    if (placer) {
      if (!q->OnUnverifiedPacket(frame, p, now_ns)) {
        ++counters_.rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
        continue;
      }
      if (p.ecn() == wire::kEcnCe) q->OnCongestionMark(now_ns);
    } else {
      if (p.ecn() == wire::kEcnCe) q->OnCongestionMark(now_ns);
      q->OnPacket(frame, p, now_ns);
    }
    Activate(qpn);
  }
  if (n > 0) io_->Release(rx, n);
  work += n;

  if (!arp_out_.empty()) work += TransmitArp();
  if (!nd_out_.empty()) work += TransmitNd();

  // Frames the port refused last round go first, in order; while any are
  // left, QPs run their timers but build nothing new. A full TX ring is the
  // wire pushing back (as PFC would): dropping those frames instead made
  // every QP of a 1024-QP run retransmit in lockstep until retries ran out.
  work += FlushTxBacklog();
  bool port_full = tx_backlog_head_ < tx_backlog_.size();

  // QPs whose deadline came join the active list for this round (lazily
  // filed ones, whose deadline moved later, are filed again instead): each
  // runs its timers in its turn below as every active QP does.
  for (const uint32_t i : timers_.Expire(now_ns)) {
    const RcQp* q = qps_[i].qp.get();
    if (q == nullptr) continue;
    const uint64_t d = q->NextDeadline();
    if (d != 0 && d <= now_ns) {
      Activate(qpn_base_ + i);
    } else if (d != 0) {
      timers_.Arm(i, d);
    }
  }
  // Timers and transmission for QPs with work, starting one QP further on
  // every round: when the port is the bottleneck, the QPs first in the list
  // would otherwise take it every round and starve the rest into retry
  // exhaustion (seen with 8 QPs of 128 outstanding 64 KiB WRITEs). Each QP
  // fills at most tx_bursts_per_qp bursts per round, so a port that never
  // pushes back (af_packet) cannot let one long message run a round forever.
  // The QPs' frames are gathered into shared bursts (one TxBurst for many
  // QPs with a packet or two each, as with -q 8 and small messages).
  const size_t n_active = active_.size();
  const size_t start = n_active > 1 ? tx_round_robin_++ % n_active : 0;
  uint16_t pending = 0;
  for (size_t k = 0; k < n_active; ++k) {
    const uint32_t index = active_[(start + k) % n_active];
    QpSlot& slot = qps_[index];
    RcQp* q = slot.qp.get();
    if (q == nullptr) continue;
    q->OnTimer(now_ns);
    if (hold_acks && slot.ack_held_round + 1 != poll_round_ && q->OnlyAnAckToSend(now_ns) &&
        AddDeferred(qpn_base_ + index)) {
      // The program is about to see what this ACK acknowledges; if it
      // answers (a SEND for a SEND, as ibv_rc_pingpong), both leave in one
      // burst and the peer takes them in one receive.
      slot.ack_held_round = poll_round_;
      ++counters_.tx_acks_held;
    } else if (!port_full) {
      work += GatherQp(*q, now_ns, &pending, &port_full);
    }
    Refile(index);
  }
  work += FlushGathered(&pending, &port_full);
  // QPs with nothing to transmit now leave the list; their timers are in
  // the wheel (filed just above, after their last change).
  for (size_t i = 0; i < active_.size();) {
    QpSlot& slot = qps_[active_[i]];
    if (slot.qp == nullptr || !slot.qp->HasTransmitWork(now_ns)) {
      slot.active = false;
      active_[i] = active_.back();
      active_.pop_back();
    } else {
      ++i;
    }
  }
  return work;
}

}  // namespace droce::core
