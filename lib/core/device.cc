#include "core/device.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace droce::core {

using transport::Qp;

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
  // Long messages leave in pieces only where the port's reader takes them
  // meanwhile (pktio::BurstIo::ReadConcurrently).
  if (io != nullptr && !io->ReadConcurrently()) config_.tx_flush_bytes = 0;
  gather_tx_ = io != nullptr && io->TakesGather();
  rx_may_lend_ = io != nullptr && io->StartLending();
  rx_vid_ = config.vlan ? (config.vlan_tci & 0xFFF) : 0;
  rx_l3_offset_ = static_cast<uint8_t>(wire::kEthBytes + (config.vlan ? wire::kVlanTagBytes : 0));
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

absl::StatusOr<uint32_t> Device::CreateCq(uint32_t depth) {
  if (depth == 0 || depth > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat("CQ depth %u not in 1..%u", depth, 1u << 20));
  }
  cqs_.push_back(std::make_unique<queue::CompletionQueue>(depth));
  return static_cast<uint32_t>(cqs_.size() - 1);
}

absl::Status Device::DestroyCq(uint32_t id) {
  if (cq(id) == nullptr) return absl::NotFoundError(absl::StrFormat("no CQ %u", id));
  for (const QpSlot& slot : qps_) {
    const Qp* q = slot.qp.get();
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
  Qp* q = qp(qpn);
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
    qp_slots_ = static_cast<uint32_t>(qps_.size());
    timers_.Reserve(static_cast<uint32_t>(qps_.size()));
  }
  if (qps_.size() >= config_.max_qp && free_slots_.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat("all %u QPs of the device are in use", config_.max_qp));
  }
  transport::QpEnv env;
  static_cast<transport::QpTuning&>(env) = config_;  // the device's tuning, whole
  env.mrs = &mrs_;
  env.send_cq = cq(init.send_cq);
  env.recv_cq = cq(init.recv_cq);
  env.srq = init.srq >= 0 ? srqs_[init.srq].get() : nullptr;
  env.pd = init.pd;
  env.make_route = &Device::MakeRouteThunk;
  env.route_ctx = this;
  env.ahs = &ahs_;
  env.gather_tx = gather_tx_;
  // DeviceConfig::dcqcn (with its profile) or the algorithm of DeviceConfig::cc.
  env.cc = config_.dcqcn ? &cc::kDcqcnOps : config_.cc.ops;
  env.cc_params = config_.dcqcn ? static_cast<const void*>(&config_.dcqcn_params) : config_.cc.param_block();
  uint32_t index;
  if (qps_.size() < config_.max_qp) {
    index = static_cast<uint32_t>(qps_.size());  // a QPN never used yet
    qps_.emplace_back();
    qp_slots_ = static_cast<uint32_t>(qps_.size());
    timers_.Reserve(static_cast<uint32_t>(qps_.size()));
  } else {
    index = free_slots_.front();  // the one freed longest ago
    free_slots_.pop_front();
  }
  const uint32_t qpn = qpn_base_ + index;
  qps_[index].qp = std::make_unique<Qp>(qpn, c, env);
  qps_[index].path = PathFilter{};
  ForgetPrediction(index);
  return qpn;
}

// Removes a QP's completions from its CQs, as rdma-core's mlx5 provider
// cleans the CQs of a QP moved to RESET or destroyed.
void Device::DropCompletions(const Qp& q) {
  q.env().send_cq->RemoveQp(q.qpn());
  q.env().recv_cq->RemoveQp(q.qpn());
}

absl::Status Device::SetQpSelectiveRepeat(uint32_t qpn, bool on) {
  Qp* q = qp(qpn);
  if (q == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  return q->SetSelectiveRepeat(on);
}

absl::Status Device::SetQpCongestionControl(uint32_t qpn, std::string_view algorithm) {
  Qp* q = qp(qpn);
  if (q == nullptr) return absl::NotFoundError(absl::StrFormat("no QP %u", qpn));
  if (algorithm == "none") return q->SetCongestionControl(nullptr, nullptr);
  const cc::Ops* ops = cc::FindAlgorithm(algorithm);
  if (ops == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown congestion control '%s' (one of %s)",
                                                      std::string(algorithm), cc::AlgorithmNames()));
  }
  if (config_.dcqcn && ops == &cc::kDcqcnOps) return q->SetCongestionControl(ops, &config_.dcqcn_params);
  if (config_.cc.ops == ops) return q->SetCongestionControl(ops, config_.cc.param_block());
  for (const auto& c : cc_choices_) {
    if (c->ops == ops) return q->SetCongestionControl(ops, c->param_block());
  }
  absl::StatusOr<cc::Config> made = cc::ParseConfig(algorithm, "", config_.cc_line_rate_bps);
  if (!made.ok()) return made.status();
  cc_choices_.push_back(std::make_unique<cc::Config>(*made));  // control path
  return q->SetCongestionControl(ops, cc_choices_.back()->param_block());
}

absl::Status Device::ModifyQp(uint32_t qpn, const transport::QpAttr& attr, uint32_t mask) {
  Qp* q = qp(qpn);
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
  ForgetPrediction(qpn - qpn_base_);
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
// (DROCE_STATS prints them at close; doc/loss-experiment.md).
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
  if (slot.active) {  // an active slot holds a QP (PostSend)
    std::erase(active_, qpn - qpn_base_);
    slot.active = false;
  }
  slot.path = PathFilter{};
  slot.tx_short = false;
  ForgetPrediction(qpn - qpn_base_);
  timers_.Cancel(qpn - qpn_base_);
  free_slots_.push_back(qpn - qpn_base_);
  mrs_.ReleaseQp(qpn);  // its type-2 memory windows return to the free state
  return absl::OkStatus();
}

// A post to a QP on the active list is the last call of PostSend (nothing
// saved around it); an active slot holds a QP (DestroyQp takes it off the
// list). Any other post comes here, out of line, and puts its QP on the list
// only when the WR was accepted.
[[gnu::noinline]] int Device::PostSendInactive(uint32_t index, const transport::SendWr& wr) {
  Qp* q = qps_[index].qp.get();
  if (q == nullptr) return EINVAL;
  const int err = q->PostSend(wr);
  if (err == 0) Activate(qpn_base_ + index);
  return err;
}

int Device::PostSend(uint32_t qpn, const transport::SendWr& wr) {
  const uint32_t i = qpn - qpn_base_;  // QPNs below the base wrap to large indices
  if (i >= qp_slots_) return EINVAL;
  QpSlot& slot = qps_[i];
  if (!slot.active) [[unlikely]] return PostSendInactive(i, wr);
  return slot.qp->PostSend(wr);
}

int Device::PostRecv(uint32_t qpn, const transport::RecvWr& wr) {
  Qp* q = qp(qpn);
  return q == nullptr ? EINVAL : q->PostRecv(wr);
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
  f.udp_src_port = config_.udp_source_port != 0 ? config_.udp_source_port : wire::UdpSourcePortForFlowLabel(flow);
  *out = wire::MakeRoute(f);
  return absl::OkStatus();
}

uint32_t Device::PollCq(uint32_t id, queue::Completion* out, uint32_t n) {
  uint32_t i = 0;
  return PollCqEach(id, n, [&](const queue::Completion& c) {
    out[i] = c;
    out[i++].flags &= ~queue::CompletionQueue::kWcSolicited;
  });
}

}  // namespace droce::core
