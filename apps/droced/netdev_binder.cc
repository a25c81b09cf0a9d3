#include "apps/droced/netdev_binder.h"

#include <linux/rtnetlink.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "drivers/verbs/device_config.h"
#include "apps/droced/clock.h"

namespace droce::droced {
namespace {

void Log(const std::string& s) {
  char when[32];
  const time_t t = time(nullptr);
  tm tm_now;
  localtime_r(&t, &tm_now);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm_now);
  std::fprintf(stderr, "%s droced: %s\n", when, s.c_str());
  std::fflush(stderr);
}

std::vector<core::Gid> UsableAddresses(const std::vector<netdev::AddrInfo>& addrs) {
  std::vector<core::Gid> out;
  for (const netdev::AddrInfo& a : addrs) {
    if (a.usable()) out.push_back(a.addr);
  }
  return out;
}

// The Ethernet group address of a multicast IP (RFC 1112, RFC 2464), as the
// kernel's neighbour table maps it.
bool MulticastMac(const core::Gid& g, core::Mac* mac) {
  if (core::IsIpv4MappedGid(g)) {
    if ((g[12] & 0xF0) != 0xE0) return false;
    *mac = {0x01, 0x00, 0x5e, static_cast<uint8_t>(g[13] & 0x7F), g[14], g[15]};
    return true;
  }
  if (g[0] != 0xFF) return false;
  *mac = {0x33, 0x33, g[12], g[13], g[14], g[15]};
  return true;
}

}  // namespace

NetdevBinder::NetdevBinder(std::string run_dir, FabricState* state, NotifyFn notify, PortGoneFn port_gone)
    : run_dir_(std::move(run_dir)), state_(state), notify_(std::move(notify)), port_gone_(std::move(port_gone)) {}

// droced unbinds (UnbindAll) before it tears its loop down; what is left
// here only closes its ports, telling nobody.
NetdevBinder::~NetdevBinder() { bound_.clear(); }

int NetdevBinder::fd() const { return nl_ ? nl_->event_fd() : -1; }

bool NetdevBinder::EnsureNetlink(std::string* why) {
  if (nl_) return true;
  absl::StatusOr<std::unique_ptr<netdev::Netlink>> n =
      netdev::Netlink::Open(RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_NEIGH);
  if (!n.ok()) {
    *why = std::string(n.status().message());
    return false;
  }
  nl_ = std::move(*n);
  return true;
}

int NetdevBinder::DeviceOfIfindex(int ifindex) const {
  for (const auto& [dev, b] : bound_) {
    if (b.ifindex == ifindex) return static_cast<int>(dev);
  }
  return -1;
}

int NetdevBinder::DeviceOwning(const core::Gid& gid) const {
  if (gid == core::Gid{}) return -1;
  const std::vector<FabricDevice>& devs = state_->devices();
  for (size_t i = 0; i < devs.size(); ++i) {
    for (size_t k = 0; k < devs[i].gids.size(); ++k) {
      const bool valid = !devs[i].netdev_bound || ((devs[i].gid_valid >> k) & 1);
      if (valid && devs[i].gids[k] == gid) return static_cast<int>(i);
    }
  }
  return -1;
}

std::string NetdevBinder::Sync() {
  std::string errors;
  const std::vector<FabricDevice>& devs = state_->devices();
  for (uint32_t i = 0; i < devs.size(); ++i) {
    const FabricDevice& d = devs[i];
    const bool is_bound = bound_.count(i) != 0;
    if (is_bound && (!d.registered || !d.netdev_bound)) Unbind(i, "its device file was removed");
    if (is_bound || !d.registered || !d.netdev_bound) continue;
    absl::Status s = Bind(i);
    if (!s.ok()) {
      state_->device(i).bind_error = std::string(s.message());
      Log(absl::StrCat(d.name, ": cannot bind ", d.netdev, ": ", s.message()));
      absl::StrAppend(&errors, d.name, " on ", d.netdev, ": ", s.message(), "\n");
    }
  }
  return errors;
}

absl::Status NetdevBinder::Bind(uint32_t device) {
  FabricDevice& d = state_->device(device);
  std::string why;
  if (!EnsureNetlink(&why)) return absl::UnavailableError(absl::StrCat("netlink: ", why));
  absl::StatusOr<netdev::LinkInfo> link = nl_->GetLink(d.netdev);
  if (!link.ok()) return link.status();
  if (!link->has_mac) return absl::FailedPreconditionError(absl::StrCat(d.netdev, " is not an Ethernet interface"));
  if (link->mac != d.file_mac) {
    return absl::FailedPreconditionError(absl::StrCat(d.netdev, "'s MAC is ", verbs::FormatMac(link->mac),
                                                      ", the device was registered with ", verbs::FormatMac(d.file_mac),
                                                      " (droce-ctl link del, then add it again)"));
  }
  absl::StatusOr<std::vector<netdev::AddrInfo>> addrs = nl_->GetAddrs(link->ifindex);
  if (!addrs.ok()) return addrs.status();
  netdev::InterfaceConfig c;
  c.device = d.name;
  c.ifname = d.netdev;
  c.ifindex = link->ifindex;
  c.mac = link->mac;
  if (!netdev::ParseSteering(d.steering, &c.steering)) c.steering = netdev::Steering::kAuto;
  std::vector<core::Gid> steered = UsableAddresses(*addrs);
  absl::StatusOr<std::unique_ptr<netdev::InterfacePort>> port = netdev::InterfacePort::Open(c, steered);
  if (!port.ok()) return port.status();
  Bound b;
  b.steered = std::move(steered);
  b.ifindex = link->ifindex;
  b.gids = std::make_unique<netdev::GidCache>(link->mac);
  b.port = std::move(*port);
  const int port_index = state_->AddInterfacePort(device, b.port->port_id(), b.port->queue_ports());
  if (port_index < 0) return absl::ResourceExhaustedError("no switch port left");
  d.iface_describe = b.port->Describe();
  Log(absl::StrCat(d.name, ": bound to ", d.netdev, " (ifindex ", b.ifindex, "): ", d.iface_describe));
  if (!b.port->udp_refused().empty()) Log(absl::StrCat(d.name, ": UDP sockets not used: ", b.port->udp_refused()));
  if (!b.port->xdp_refused().empty()) Log(absl::StrCat(d.name, ": XDP not used: ", b.port->xdp_refused()));
  bound_[device] = std::move(b);
  Publish(device, *link, *addrs);
  (void)SyncGroups();  // bound again (the interface came back): the groups its processes still hold
  return absl::OkStatus();
}

void NetdevBinder::Unbind(uint32_t device, const std::string& why) {
  auto it = bound_.find(device);
  if (it == bound_.end()) return;
  FabricDevice& d = state_->device(device);
  Log(absl::StrCat(d.name, ": unbinding ", d.netdev, ": ", why));
  if (d.iface_port >= 0) port_gone_(d.iface_port);
  state_->RemoveInterfacePort(device);
  bound_.erase(it);  // closes the port: the XDP program goes with it
  d.bind_error = why;
  notify_(device, state_->NetdevStateOf(device));  // the port is down
  if (d.registered) {
    (void)verbs::WritePortState(run_dir_, d.name, d.netdev, d.gids, d.gid_valid, false);
  }
  std::erase_if(pending_, [&](Pending& p) {
    if (p.device != device) return false;
    p.answer(p.device, p.dst, ENETDOWN, {});
    return true;
  });
}

void NetdevBinder::UnbindAll() {
  while (!bound_.empty()) Unbind(bound_.begin()->first, "droced stops");
}

void NetdevBinder::Publish(uint32_t device, const netdev::LinkInfo& link,
                           const std::vector<netdev::AddrInfo>& addrs) {
  Bound& b = bound_.at(device);
  FabricDevice& d = state_->device(device);
  const std::vector<core::Gid> usable = UsableAddresses(addrs);
  bool gids_changed = b.gids->SetMac(link.mac);
  b.port->SetMac(link.mac);
  gids_changed = b.gids->Update(usable) || gids_changed;
  // The steering takes frames for every GID of the table, the default GID
  // (fe80:: with the MAC's EUI-64, index 0) included: programs address a
  // peer by any of its GIDs (libfabric's UD-based providers by GID 0). The
  // interface's EUI-64 link-local address becoming usable (its DAD done after
  // the binding) changes no entry of the table, so the steering follows the
  // table's contents, not gids_changed.
  std::vector<core::Gid> steered;
  for (size_t i = 0; i < netdev::GidCache::kSize; ++i) {
    if (b.gids->valid(i)) steered.push_back(b.gids->entries()[i]);
  }
  if (steered != b.steered) {
    absl::Status s = b.port->SetAddresses(steered);
    if (s.ok()) {
      b.steered = std::move(steered);
    } else {
      Log(absl::StrCat(d.name, ": steering for the new addresses: ", s.message()));
    }
  }
  if (b.gids->overflowed() > 0) {
    Log(absl::StrFormat("%s: %zu addresses of %s do not fit the GID table (%zu entries)", d.name,
                        b.gids->overflowed(), d.netdev, netdev::GidCache::kSize));
  }
  std::vector<core::Gid> table(b.gids->entries().begin(), b.gids->entries().end());
  uint32_t valid = 0;
  for (size_t i = 0; i < netdev::GidCache::kSize; ++i) valid |= b.gids->valid(i) ? 1u << i : 0;
  const uint8_t mtu = netdev::RocePathMtu(link.mtu, b.port->max_frame_bytes());
  const bool active = link.usable() && mtu != 0;
  const bool was_active = d.port_active;
  if (!state_->SetNetdevState(device, link.mac, table, valid, active, mtu != 0 ? mtu : 1)) return;
  if (active != was_active || gids_changed) {
    std::string gid_text;
    for (size_t i = 0; i < table.size(); ++i) {
      if ((valid >> i) & 1) absl::StrAppend(&gid_text, " ", i, ":", netdev::FormatIp(table[i]));
    }
    Log(absl::StrFormat("%s: %s %s, mtu %u (path %u), gids%s", d.name, d.netdev, active ? "ACTIVE" : "DOWN",
                        link.mtu, mtu != 0 ? 128u << mtu : 0u, gid_text));
  }
  absl::Status s = verbs::WritePortState(run_dir_, d.name, d.netdev, table, valid, active);
  if (!s.ok()) Log(absl::StrCat(d.name, ": sysfs: ", s.message()));
  notify_(device, state_->NetdevStateOf(device));
}

void NetdevBinder::Refresh(uint32_t device) {
  auto it = bound_.find(device);
  if (it == bound_.end() || !nl_) return;
  absl::StatusOr<netdev::LinkInfo> link = nl_->GetLink(it->second.ifindex);
  if (!link.ok()) {
    Unbind(device, absl::StrCat("the interface went (", link.status().message(), ")"));
    return;
  }
  absl::StatusOr<std::vector<netdev::AddrInfo>> addrs = nl_->GetAddrs(it->second.ifindex);
  if (!addrs.ok()) {
    Log(absl::StrCat(state_->device(device).name, ": addresses: ", addrs.status().message()));
    return;
  }
  Publish(device, *link, *addrs);
}

void NetdevBinder::OnReadable() {
  if (!nl_) return;
  std::vector<netdev::NetlinkEvent> events;
  bool overflowed = false;
  absl::Status s = nl_->ReadEvents(&events, &overflowed);
  if (!s.ok()) Log(absl::StrCat("netlink events: ", s.message()));
  std::vector<uint32_t> refresh;
  auto want = [&](int dev) {
    if (dev >= 0 && std::find(refresh.begin(), refresh.end(), uint32_t(dev)) == refresh.end()) refresh.push_back(dev);
  };
  if (overflowed || !s.ok()) {
    for (const auto& [dev, b] : bound_) want(static_cast<int>(dev));
  }
  bool rebind = false;
  for (const netdev::NetlinkEvent& e : events) {
    switch (e.kind) {
      case netdev::NetlinkEvent::kNewLink:
      case netdev::NetlinkEvent::kDelLink: {
        const int dev = DeviceOfIfindex(e.link.ifindex);
        want(dev);
        // An interface (re)appearing under the name of a device not bound.
        if (dev < 0 && e.kind == netdev::NetlinkEvent::kNewLink) {
          for (const FabricDevice& d : state_->devices()) rebind |= d.netdev_bound && d.registered && d.iface_port < 0 && d.netdev == e.link.name;
        }
        break;
      }
      case netdev::NetlinkEvent::kNewAddr:
      case netdev::NetlinkEvent::kDelAddr:
        want(DeviceOfIfindex(e.addr.ifindex));
        break;
      case netdev::NetlinkEvent::kNewNeigh:
      case netdev::NetlinkEvent::kDelNeigh:
        std::erase_if(pending_, [&](Pending& p) {
          if (p.ifindex != e.neigh.ifindex || p.next_hop != e.neigh.dst) return false;
          if (e.kind == netdev::NetlinkEvent::kNewNeigh && e.neigh.resolved()) {
            p.answer(p.device, p.dst, 0, e.neigh.lladdr);
            return true;
          }
          if (e.neigh.failed()) {
            p.answer(p.device, p.dst, EHOSTUNREACH, {});
            return true;
          }
          return false;
        });
        break;
      default:
        break;
    }
  }
  for (uint32_t dev : refresh) Refresh(dev);
  if (rebind) (void)Sync();
}

void NetdevBinder::Resolve(uint32_t device, const core::Gid& sgid, const core::Gid& dgid, uint32_t timeout_ms,
                           AnswerFn answer) {
  auto it = bound_.find(device);
  if (it == bound_.end() || !nl_) {
    answer(device, dgid, ENETDOWN, {});
    return;
  }
  // Another device of this host (as the kernel routes a local address to
  // lo, rdma-core's neighbour code answers its link's MAC).
  if (const int local = DeviceOwning(dgid); local >= 0) {
    answer(device, dgid, 0, state_->devices()[local].mac);
    return;
  }
  core::Mac group{};
  if (MulticastMac(dgid, &group)) {
    answer(device, dgid, 0, group);
    return;
  }
  // Questions waiting for the kernel are bounded: a client that keeps asking
  // for addresses nobody answers gets EAGAIN, not the daemon's memory.
  if (pending_.size() >= kMaxPending) {
    answer(device, dgid, EAGAIN, {});
    return;
  }
  const int ifindex = it->second.ifindex;
  absl::StatusOr<netdev::RouteInfo> route = nl_->GetRoute(dgid, &sgid, ifindex);
  if (!route.ok()) {
    answer(device, dgid, nl_->last_error() != 0 ? nl_->last_error() : EHOSTUNREACH, {});
    return;
  }
  if (route->type == RTN_LOCAL) {  // the host's own address, but no droce device's
    answer(device, dgid, EHOSTUNREACH, {});
    return;
  }
  if (route->type != RTN_UNICAST || (route->oif != 0 && route->oif != ifindex)) {
    answer(device, dgid, ENETUNREACH, {});
    return;
  }
  const core::Gid next = route->has_gateway ? route->gateway : dgid;
  absl::StatusOr<std::optional<netdev::NeighInfo>> n = nl_->GetNeigh(ifindex, next);
  if (n.ok() && n->has_value() && (*n)->resolved()) {
    answer(device, dgid, 0, (*n)->lladdr);
    return;
  }
  absl::Status s = nl_->ResolveNeigh(ifindex, next);
  if (!s.ok()) {
    answer(device, dgid, EHOSTUNREACH, {});
    return;
  }
  const uint64_t now = NowNs();
  pending_.push_back({device, ifindex, dgid, next, now + uint64_t{timeout_ms} * 1'000'000, now + 1'000'000'000,
                      std::move(answer)});
}

void NetdevBinder::Timers(uint64_t now_ns) {
  if (pending_.empty()) return;
  std::vector<Pending> due;
  std::erase_if(pending_, [&](Pending& p) {
    if (now_ns >= p.deadline_ns) {
      due.push_back(std::move(p));
      return true;
    }
    return false;
  });
  for (Pending& p : due) p.answer(p.device, p.dst, ETIMEDOUT, {});
  for (Pending& p : pending_) {
    if (now_ns < p.retry_ns || !nl_) continue;
    p.retry_ns = now_ns + 1'000'000'000;
    // An answer the events missed (the socket overflowed), or a new try
    // after the kernel gave up.
    absl::StatusOr<std::optional<netdev::NeighInfo>> n = nl_->GetNeigh(p.ifindex, p.next_hop);
    if (n.ok() && n->has_value() && (*n)->resolved()) {
      p.deadline_ns = 0;  // answered below
      p.answer(p.device, p.dst, 0, (*n)->lladdr);
    } else {
      (void)nl_->ResolveNeigh(p.ifindex, p.next_hop);
    }
  }
  std::erase_if(pending_, [](const Pending& p) { return p.deadline_ns == 0; });
}

NetdevBinder::Route NetdevBinder::RouteTo(const core::Gid& dgid, const core::Gid* sgid) {
  Route r;
  if (const int local = DeviceOwning(dgid); local >= 0) {
    r.device = local;
    r.source = dgid;
    r.local = true;
    return r;
  }
  if (!nl_ || bound_.empty()) {
    r.error = EHOSTUNREACH;
    return r;
  }
  absl::StatusOr<netdev::RouteInfo> route = nl_->GetRoute(dgid, sgid, 0);
  if (!route.ok()) {
    r.error = nl_->last_error() != 0 ? nl_->last_error() : EHOSTUNREACH;
    return r;
  }
  r.device = DeviceOfIfindex(route->oif);
  if (r.device < 0 || route->type != RTN_UNICAST) {
    r.error = route->type == RTN_UNICAST ? ENODEV : EHOSTUNREACH;
    r.device = -1;
    return r;
  }
  if (sgid != nullptr) {
    r.source = *sgid;
  } else if (route->has_prefsrc) {
    r.source = route->prefsrc;
  } else {
    // IPv6 routes carry no preferred source: the interface's first address
    // of the destination's family and scope.
    const FabricDevice& d = state_->devices()[r.device];
    const bool link_local = dgid[0] == 0xfe && (dgid[1] & 0xc0) == 0x80;
    for (size_t i = 0; i < d.gids.size(); ++i) {
      const core::Gid& g = d.gids[i];
      if (!((d.gid_valid >> i) & 1) || core::IsIpv4MappedGid(g) != core::IsIpv4MappedGid(dgid)) continue;
      if (!core::IsIpv4MappedGid(g) && ((g[0] == 0xfe && (g[1] & 0xc0) == 0x80) != link_local)) continue;
      r.source = g;
      break;
    }
    if (r.source == core::Gid{}) r.error = EADDRNOTAVAIL;
  }
  return r;
}

bool NetdevBinder::SteersToSockets(uint32_t device) const {
  auto it = bound_.find(device);
  return it != bound_.end() && it->second.port->steering() == netdev::Steering::kUdp;
}

absl::StatusOr<netdev::ProcessSocket> NetdevBinder::ProcessSocketFor(uint32_t device, uint32_t slot) {
  auto it = bound_.find(device);
  if (it == bound_.end()) return absl::FailedPreconditionError("the device is not bound");
  absl::StatusOr<netdev::ProcessSocket> s = it->second.port->OpenProcessSocket(slot);
  if (s.ok()) {
    std::vector<uint32_t>& slots = it->second.socket_slots;
    if (std::find(slots.begin(), slots.end(), slot) == slots.end()) slots.push_back(slot);
  }
  return s;
}

void NetdevBinder::ReleaseUnownedSockets() {
  for (auto& entry : bound_) {  // not a structured binding: clang 14 cannot capture one
    auto& b = entry.second;
    const FabricDevice& d = state_->devices()[entry.first];
    std::erase_if(b.socket_slots, [&](uint32_t slot) {
      if (slot < d.slot_owner.size() && d.slot_owner[slot] >= 0) return false;
      b.port->CloseProcessSocket(slot);
      return true;
    });
  }
}

absl::Status NetdevBinder::SyncGroups() {
  absl::Status first;
  for (auto& entry : bound_) {
    Bound& b = entry.second;
    std::vector<core::Gid> want = state_->GroupsOf(entry.first);
    if (want == b.groups) continue;
    absl::Status s = b.port->SetGroups(want);
    if (!s.ok()) {
      Log(absl::StrCat(state_->devices()[entry.first].name, ": multicast groups: ", s.message()));
      first.Update(s);
    }
    b.groups = std::move(want);
  }
  return first;
}

std::string NetdevBinder::StatusText(uint32_t device) const {
  auto it = bound_.find(device);
  if (it == bound_.end()) return "";
  const netdev::InterfacePort& port = *it->second.port;
  std::string groups;
  for (const core::Gid& g : it->second.groups) absl::StrAppend(&groups, groups.empty() ? "" : " ", wire::GidAddressText(g));
  if (!groups.empty()) groups = absl::StrCat("  multicast groups: ", groups, "\n");
  if (port.steering() == netdev::Steering::kUdp) {
    const netdev::TcStats t = port.tc_stats();
    const udp::UdpCounters u = port.udp_counters();
    return groups + absl::StrFormat(
        "  tc: steered %lu to_daemon %lu marked %lu; processes with sockets %zu; droced's socket: rx %lu "
        "(dropped %lu) tx %lu (dropped %lu)\n",
        t.steered, t.to_daemon, t.marked, it->second.socket_slots.size(), u.rx_datagrams, u.rx_dropped,
        u.tx_datagrams, u.tx_dropped);
  }
  if (port.steering() != netdev::Steering::kXdp) return groups;
  const netdev::XdpStats s = port.xdp_stats();
  std::string queues;
  const std::vector<uint64_t> per_queue = port.QueueRxFrames();
  for (size_t q = 0; q < per_queue.size(); ++q) absl::StrAppend(&queues, " ", q, ":", per_queue[q]);
  return groups + absl::StrFormat("  xdp: redirected %lu no_socket %lu passed %lu; received per RX queue:%s\n",
                                  s.redirected, s.no_socket, s.passed, queues);
}

}  // namespace droce::droced
