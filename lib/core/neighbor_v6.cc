// IPv6 neighbour discovery for the device (RFC 4861), the counterpart of its
// ARP: answer solicitations for our own addresses, solicit a peer's, learn
// from advertisements for addresses we asked about and from the source
// link-layer address of solicitations aimed at us. Control traffic only:
// frames are queued and leave ahead of the QPs' packets in the next poll.
#include <algorithm>

#include "core/device.h"

namespace droce::core {
namespace {

bool IsLinkLocal(const Gid& g) { return g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

constexpr size_t kMaxQueued = 64;

}  // namespace

void Device::RequestNeighbor(const Gid& ip) {
  if (IsIpv4MappedGid(ip)) {
    RequestArp((uint32_t{ip[12]} << 24) | (uint32_t{ip[13]} << 16) | (uint32_t{ip[14]} << 8) | ip[15]);
  } else {
    RequestNd(ip);
  }
}

void Device::RequestNd(const Gid& target) {
  if (wire::IsMulticast(target) || wire::IsUnspecified(target) || nd_out_.size() >= kMaxQueued) return;
  // Source: the link-local address for a link-local target, else the
  // global one if we have it (a peer checks the NS against its own prefix).
  const Gid* src = &gids_[0];
  if (!IsLinkLocal(target)) {
    for (const Gid& g : gids_) {
      if (!IsIpv4MappedGid(g) && !IsLinkLocal(g)) src = &g;
    }
  }
  wire::NdPacket ns;
  ns.type = wire::kNdSolicit;
  ns.eth_src = config_.mac;
  ns.src = *src;
  ns.dst = wire::SolicitedNodeMulticast(target);
  ns.eth_dst = wire::MulticastMac(ns.dst);
  ns.target = target;
  ns.has_lla = true;
  ns.lla = config_.mac;
  nd_out_.push_back(ns);
  if (std::find(nd_pending_.begin(), nd_pending_.end(), target) == nd_pending_.end()) {
    if (nd_pending_.size() >= kMaxQueued) nd_pending_.erase(nd_pending_.begin());
    nd_pending_.push_back(target);
  }
}

bool Device::HandleNd(const uint8_t* frame, uint32_t len) {
  wire::NdPacket nd;
  const wire::NdParse r = wire::ParseNd(frame, len, &nd);
  if (r == wire::NdParse::kNotNd) return false;
  ++counters_.rx_nd;
  if (r == wire::NdParse::kMalformed) {
    ++counters_.rx_nd_malformed;
    return true;
  }
  const bool ours = std::any_of(gids_.begin(), gids_.end(), [&](const Gid& g) {
    return !IsIpv4MappedGid(g) && g == nd.target;
  });
  auto learn = [&](const Gid& ip, const Mac& mac) {
    LearnNeighbor(ip, mac);
    std::erase(nd_pending_, ip);
  };
  if (nd.type == wire::kNdSolicit) {
    if (!ours || (nd.dst != nd.target && nd.dst != wire::SolicitedNodeMulticast(nd.target))) return true;
    const bool dad = wire::IsUnspecified(nd.src);  // duplicate address detection: answer all nodes
    if (!dad && nd.has_lla) learn(nd.src, nd.lla);
    if (nd_out_.size() >= kMaxQueued) return true;
    nd_out_.push_back(wire::AdvertFor(nd, config_.mac));
    return true;
  }
  // An advertisement: learn it if we asked, or update what we know.
  if (ours || !nd.has_lla) return true;
  const bool asked = std::find(nd_pending_.begin(), nd_pending_.end(), nd.target) != nd_pending_.end();
  if (asked || HasNeighbor(nd.target)) learn(nd.target, nd.lla);
  return true;
}

uint32_t Device::TransmitNd() {
  return TransmitQueued(
      nd_out_,
      [this](const wire::NdPacket& m, uint8_t* data) {
        return wire::BuildNd(m, config_.vlan, config_.vlan_tci, data);
      },
      [this](const wire::NdPacket& m) {
        ++(m.type == wire::kNdAdvert ? counters_.nd_adverts_sent : counters_.nd_solicits_sent);
      });
}

}  // namespace droce::core
