// The neighbour table (static entries and those learnt from ARP and ND,
// neighbor_v6.cc) and ARP (RFC 826).
#include "core/device.h"

namespace droce::core {

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
  ForgetPredictions();  // they were judged against the old addresses
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

}  // namespace droce::core
