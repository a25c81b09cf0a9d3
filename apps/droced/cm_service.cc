#include "apps/droced/cm_service.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "wire/byte_order.h"

namespace droce::droced {
namespace {

constexpr uint8_t kCmResponseTimeout = 20;  // CMA_CM_RESPONSE_TIMEOUT
constexpr uint8_t kMaxCmRetries = 15;       // CMA_MAX_CM_RETRIES
constexpr uint8_t kMraServiceTimeout = 24;  // CMA_CM_MRA_SETTING without the delay flag
constexpr uint8_t kPacketLifeTime = 16;     // CMA_IBOE_PACKET_LIFETIME
constexpr uint8_t kLocalAckTimeout = 18;
constexpr uint8_t kHopLimit = 64;
constexpr uint32_t kCommEst = 4;            // IB_EVENT_COMM_EST (rdma_notify)

template <typename T>
bool Load(std::span<const uint8_t> in, T* out) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(out, in.data(), sizeof(T));
  return true;
}

template <typename T>
std::vector<uint8_t> Bytes(const T& v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

// The address a sockaddr names; EAFNOSUPPORT for what is not IPv4/IPv6
// (AF_IB among them: librdmacm then uses the IP commands).
int ParseSockaddr(const uint8_t* p, size_t len, cm::IpAddr* ip, bool* v6, uint16_t* port) {
  sa_family_t family;
  if (len < sizeof family) return EINVAL;
  std::memcpy(&family, p, sizeof family);
  if (family == AF_INET) {
    sockaddr_in sin;
    if (len < sizeof sin) return EINVAL;
    std::memcpy(&sin, p, sizeof sin);
    *ip = cm::Ipv4Addr(ntohl(sin.sin_addr.s_addr));
    *v6 = false;
    *port = ntohs(sin.sin_port);
    return 0;
  }
  if (family == AF_INET6) {
    sockaddr_in6 sin6;
    if (len < sizeof sin6) return EINVAL;
    std::memcpy(&sin6, p, sizeof sin6);
    std::memcpy(ip->data(), &sin6.sin6_addr, 16);
    *v6 = true;
    *port = ntohs(sin6.sin6_port);
    return 0;
  }
  return EAFNOSUPPORT;
}

void StoreSockaddr(bool v6, const cm::IpAddr& ip, uint16_t port, void* out) {
  if (!v6) {
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    std::memcpy(&sin.sin_addr, ip.data() + 12, 4);
    std::memcpy(out, &sin, sizeof sin);
  } else {
    sockaddr_in6 sin6{};
    sin6.sin6_family = AF_INET6;
    sin6.sin6_port = htons(port);
    std::memcpy(&sin6.sin6_addr, ip.data(), 16);
    std::memcpy(out, &sin6, sizeof sin6);
  }
}

// A multicast destination (IPv4 224.0.0.0/4, IPv6 ff00::/8; cma_ip_addr form).
bool IsMulticastIp(bool v6, const cm::IpAddr& ip) { return v6 ? ip[0] == 0xff : (ip[12] & 0xF0) == 0xE0; }
// 127.0.0.0/8 or ::1.
bool IsLoopbackIp(bool v6, const cm::IpAddr& ip) {
  if (!v6) return ip[12] == 127;
  static constexpr uint8_t kOne[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return std::memcmp(ip.data(), kOne, 16) == 0;
}

// The Ethernet group address an IP multicast group maps to: 01:00:5e and
// the low 23 bits (RFC 1112 6.4), 33:33 and the low 32 bits (RFC 2464 7).
std::array<uint8_t, 6> MulticastMacOf(bool v6, const cm::IpAddr& ip) {
  if (v6) return {0x33, 0x33, ip[12], ip[13], ip[14], ip[15]};
  return {0x01, 0x00, 0x5e, static_cast<uint8_t>(ip[13] & 0x7F), ip[14], ip[15]};
}

constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY: rdma_cm's Q_Key for UD ids

// The QP type of a port space, as Linux's ucma_get_qp_type: TCP is RC, UDP
// and IPoIB are UD, the IB port space takes the command's; -1: refused.
int QpTypeOf(uint16_t ps, uint8_t qp_type) {
  switch (ps) {
    case static_cast<uint16_t>(cm::PortSpace::kTcp):
      return IBV_QPT_RC;
    case static_cast<uint16_t>(cm::PortSpace::kUdp):
    case static_cast<uint16_t>(cm::PortSpace::kIpoib):
      return IBV_QPT_UD;
    case static_cast<uint16_t>(cm::PortSpace::kIb):
      return qp_type == IBV_QPT_RC || qp_type == IBV_QPT_UD ? qp_type : -1;
    default:
      return -1;
  }
}

}  // namespace

bool CmService::Addr::any() const {
  return std::all_of(ip.begin(), ip.end(), [](uint8_t b) { return b == 0; });
}

CmService::CmService(SendFn send, uint64_t seed) : send_(std::move(send)), rng_(seed) {}

CmService::Id* CmService::Find(int conn, uint32_t handle) {
  auto it = ids_.find(handle);
  if (it == ids_.end() || it->second.conn != conn) return nullptr;
  return &it->second;
}

CmService::Id* CmService::FindByLocalComm(uint32_t comm_id) {
  auto it = by_comm_id_.find(comm_id);
  if (it == by_comm_id_.end()) return nullptr;
  auto id = ids_.find(it->second);
  return id == ids_.end() ? nullptr : &id->second;
}

cm::Gid CmService::GidOf(const Addr& a) const {
  if (a.v6) return a.ip;
  cm::Gid g{};
  g[10] = g[11] = 0xFF;
  std::memcpy(g.data() + 12, a.ip.data() + 12, 4);
  return g;
}

int CmService::DeviceOfIp(const Addr& a) const {
  const cm::Gid g = GidOf(a);
  if (g == cm::Gid{}) return -1;  // the zero GID is a hole of a table, no address
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const cm::Gid& x : devices_[d].gids) {
      if (x == g) return static_cast<int>(d);
    }
  }
  return -1;
}

int CmService::GidIndex(int device, const cm::Gid& gid) const {
  if (device < 0 || gid == cm::Gid{}) return -1;
  const auto& gids = devices_[device].gids;
  for (size_t i = 0; i < gids.size(); ++i) {
    if (gids[i] == gid) return static_cast<int>(i);
  }
  return -1;
}

bool CmService::PortInUse(uint16_t ps, uint16_t port, const Addr& a, const Id* except) const {
  for (const auto& [h, id] : ids_) {
    // Only ids that were bound hold a port; the connections a listener
    // accepted share its port and hold none (as Linux's bind lists).
    if (&id == except || !id.owns_port || id.ps != ps || id.src.port != port) continue;
    if (id.src.any() || a.any() || id.src.ip == a.ip) {
      if (!(id.reuseaddr && except != nullptr && except->reuseaddr && id.state != IdState::kListen)) return true;
    }
  }
  return false;
}

uint16_t CmService::EphemeralPort(uint16_t ps, const Addr& a) {
  for (int tries = 0; tries < 4096; ++tries) {
    const auto port = static_cast<uint16_t>(32768 + rng_() % (60999 - 32768 + 1));
    if (!PortInUse(ps, port, a, nullptr)) return port;
  }
  return 0;
}

// A loopback address: the first device that has an address of the family
// (as Linux's cma_bind_loopback takes the first active port), bound to that
// address. libfabric's verbs provider binds "localhost" when a server gives
// no address, and then listens on (and tells its clients) the id's local
// address: another host must be able to reach it.
int CmService::BindLoopback(Id& id, const Addr& a) {
  for (size_t d = 0; d < devices_.size(); ++d) {
    for (const cm::Gid& g : devices_[d].gids) {
      if (g == cm::Gid{} || IsIpv4MappedGid(g) == a.v6) continue;
      if (a.v6 && g[0] == 0xfe && (g[1] & 0xc0) == 0x80) continue;  // a link-local one needs its scope
      Addr own = a;
      own.ip = cm::IpAddr{};
      if (a.v6) {
        own.ip = g;
      } else {
        std::memcpy(own.ip.data() + 12, g.data() + 12, 4);
      }
      return Bind(id, own);
    }
  }
  return EADDRNOTAVAIL;
}

int CmService::Bind(Id& id, const Addr& a) {
  if (id.state != IdState::kIdle) return EINVAL;
  int device = -1;
  if (!a.any()) {
    device = DeviceOfIp(a);
    if (device < 0 && IsLoopbackIp(a.v6, a.ip)) return BindLoopback(id, a);
    if (device < 0) return EADDRNOTAVAIL;
  }
  Addr b = a;
  if (b.port == 0) {
    b.port = EphemeralPort(id.ps, b);
    if (b.port == 0) return EADDRINUSE;
  } else if (PortInUse(id.ps, b.port, b, &id)) {
    return EADDRINUSE;
  }
  id.src = b;
  id.device = device;
  id.state = IdState::kAddrBound;
  id.owns_port = true;
  return 0;
}

void CmService::QueueEvent(const Id& id, uint32_t event, int32_t status, const void* param, size_t param_len,
                           uint32_t ece_vendor, uint32_t ece_mod, uint64_t uid_override, uint32_t counted_handle) {
  rdma_ucm_event_resp r{};
  r.uid = uid_override != 0 ? uid_override : id.uid;
  r.id = id.handle;
  r.event = event;
  r.status = static_cast<uint32_t>(status);
  if (param != nullptr) std::memcpy(&r.param, param, std::min(param_len, sizeof r.param));
  r.ece.vendor_id = ece_vendor;
  r.ece.attr_mod = ece_mod;
  events_.push_back(Event{id.conn, counted_handle != 0 ? counted_handle : id.handle, Bytes(r)});
}

void CmService::Send(const Id& id, const cm::CmMessage& m) {
  ++counters_.mads_tx;
  send_(id.device, id.path, cm::SerializeMad(m));
}

size_t CmService::PendingEvents(int conn) const {
  return static_cast<size_t>(std::count_if(events_.begin(), events_.end(), [&](const Event& e) { return e.conn == conn; }));
}

namespace {

// A BIND of an AF_IB address (librdmacm's probe, CmCounters::af_ib_probes).
bool IsAfIbBind(std::span<const uint8_t> in) {
  rdma_ucm_bind b;
  return Load(in, &b) && b.addr.ss_family == AF_IB;
}

}  // namespace

CmService::Result CmService::Command(int conn, std::span<const uint8_t> cmd, uint64_t now_ms,
                                     std::span<const uint8_t> option) {
  ++counters_.commands;
  rdma_ucm_cmd_hdr hdr;
  Result r;
  if (!Load(cmd, &hdr) || cmd.size() != sizeof hdr + hdr.in) {
    r.error = EINVAL;
  } else {
    r = Dispatch(conn, hdr.cmd, cmd.subspan(sizeof hdr), now_ms, option);
    if (r.error == 0 && r.out.size() > hdr.out) r.error = ENOSPC;
    if (r.error == EAGAIN && hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {
      ++counters_.get_event_empty;
      return r;
    }
    if (r.error == EAFNOSUPPORT && hdr.cmd == RDMA_USER_CM_CMD_BIND && IsAfIbBind(cmd.subspan(sizeof hdr))) {
      ++counters_.af_ib_probes;
      return r;
    }
  }
  if (r.error != 0) {
    ++counters_.commands_failed;
    r.out.clear();
  }
  return r;
}

// RDMA_USER_CM_CMD_CREATE_ID
CmService::Result CmService::CmdCreateId(int conn, uint32_t, std::span<const uint8_t> in,
                                         uint64_t, std::span<const uint8_t>) {
  rdma_ucm_create_id c;
  if (!Load(in, &c)) return {EINVAL, {}};
  const int qp_type = QpTypeOf(c.ps, c.qp_type);
  if (qp_type < 0) return {EINVAL, {}};
  Id id;
  id.handle = next_handle_++;
  id.conn = conn;
  id.uid = c.uid;
  id.ps = c.ps;
  id.qp_type = static_cast<uint8_t>(qp_type);
  id.seq_num = static_cast<uint32_t>(rng_()) & 0xFFFFFF;
  rdma_ucm_create_id_resp resp{id.handle};
  ids_.emplace(id.handle, std::move(id));
  return {0, Bytes(resp)};
}

// RDMA_USER_CM_CMD_DESTROY_ID
CmService::Result CmService::CmdDestroyId(int conn, uint32_t, std::span<const uint8_t> in,
                                          uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_destroy_id c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  rdma_ucm_destroy_id_resp resp{id->events_reported};
  DestroyId(c.id, now_ms);
  return {0, Bytes(resp)};
}

// RDMA_USER_CM_CMD_BIND_IP, RDMA_USER_CM_CMD_BIND
CmService::Result CmService::CmdBind(int conn, uint32_t cmd, std::span<const uint8_t> in,
                                     uint64_t, std::span<const uint8_t>) {
  uint32_t handle;
  cm::IpAddr ip{};
  bool v6 = false;
  uint16_t port = 0;
  int err;
  if (cmd == RDMA_USER_CM_CMD_BIND_IP) {
    rdma_ucm_bind_ip c;
    if (!Load(in, &c)) return {EINVAL, {}};
    handle = c.id;
    err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.addr), sizeof c.addr, &ip, &v6, &port);
  } else {
    rdma_ucm_bind c;
    if (!Load(in, &c)) return {EINVAL, {}};
    handle = c.id;
    if (c.addr_size > sizeof c.addr) return {EINVAL, {}};
    err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.addr), c.addr_size, &ip, &v6, &port);
  }
  Id* id = Find(conn, handle);
  if (id == nullptr) return {EINVAL, {}};
  if (err != 0) return {err, {}};
  return {Bind(*id, Addr{v6, ip, port}), {}};
}

// RDMA_USER_CM_CMD_RESOLVE_IP, RDMA_USER_CM_CMD_RESOLVE_ADDR
CmService::Result CmService::CmdResolveAddr(int conn, uint32_t cmd, std::span<const uint8_t> in,
                                            uint64_t now_ms, std::span<const uint8_t>) {
  uint32_t handle, timeout_ms;
  Addr src, dst;
  bool has_src = false;
  int err = 0;
  if (cmd == RDMA_USER_CM_CMD_RESOLVE_IP) {
    rdma_ucm_resolve_ip c;
    if (!Load(in, &c)) return {EINVAL, {}};
    handle = c.id;
    timeout_ms = c.timeout_ms;
    err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.dst_addr), sizeof c.dst_addr, &dst.ip, &dst.v6,
                        &dst.port);
    if (err == 0 && c.src_addr.sin6_family != 0) {
      has_src = true;
      err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.src_addr), sizeof c.src_addr, &src.ip, &src.v6,
                          &src.port);
    }
  } else {
    rdma_ucm_resolve_addr c;
    if (!Load(in, &c)) return {EINVAL, {}};
    handle = c.id;
    timeout_ms = c.timeout_ms;
    if (c.dst_size > sizeof c.dst_addr || c.src_size > sizeof c.src_addr) return {EINVAL, {}};
    err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.dst_addr), c.dst_size, &dst.ip, &dst.v6, &dst.port);
    if (err == 0 && c.src_size != 0) {
      has_src = true;
      err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.src_addr), c.src_size, &src.ip, &src.v6,
                          &src.port);
    }
  }
  Id* id = Find(conn, handle);
  if (id == nullptr) return {EINVAL, {}};
  if (err != 0) return {err, {}};
  // The kernel's route, where netdev-bound devices reach the host's
  // networks: which device, and from which address.
  std::optional<Route> kernel_route;
  if (route_ != nullptr && DeviceOfIp(dst) < 0 && !IsMulticastIp(dst.v6, dst.ip)) {
    const Addr* bound = id->state == IdState::kAddrBound && !id->src.any() ? &id->src
                        : has_src && !src.any()                              ? &src
                                                                             : nullptr;
    const cm::Gid bound_gid = bound != nullptr ? GidOf(*bound) : cm::Gid{};
    kernel_route = route_(GidOf(dst), bound != nullptr ? &bound_gid : nullptr);
    if (kernel_route->device < 0 || !devices_[kernel_route->device].netdev) kernel_route.reset();
  }
  if (id->state == IdState::kIdle) {
    // Unbound: the source is the device that owns the destination (a
    // local address routes to itself, as on Linux), the kernel's route's
    // (netdev-bound devices), or the given one.
    Addr from = has_src ? src : Addr{dst.v6, {}, 0};
    if (!has_src || from.any()) {
      const int d = DeviceOfIp(dst);
      if (d >= 0) {
        from.ip = dst.ip;
      } else if (kernel_route) {
        if (dst.v6) {
          from.ip = kernel_route->source;
        } else {
          std::memcpy(from.ip.data() + 12, kernel_route->source.data() + 12, 4);
        }
      } else if (!devices_.empty()) {
        // The first address of the destination's family; for IPv6 of its
        // scope too (a link-local source only for a link-local peer).
        auto link_local = [](const cm::IpAddr& a) { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; };
        for (const cm::Gid& g : devices_[0].gids) {
          if (g != cm::Gid{} && IsIpv4MappedGid(g) != dst.v6 && (!dst.v6 || link_local(g) == link_local(dst.ip))) {
            if (!dst.v6) std::memcpy(from.ip.data() + 12, g.data() + 12, 4); else from.ip = g;
            break;
          }
        }
      }
    }
    from.port = has_src ? src.port : 0;
    if (const int e = Bind(*id, from); e != 0) return {e, {}};
  } else if (id->state != IdState::kAddrBound) {
    return {EINVAL, {}};
  }
  if (id->device < 0) {  // bound to the wildcard: take the device by the destination, or the route
    Addr self = id->src;
    self.ip = dst.ip;
    self.v6 = dst.v6;
    id->device = DeviceOfIp(self);
    if (id->device >= 0) {
      id->src.ip = dst.ip;
    } else if (kernel_route) {
      id->device = kernel_route->device;
      if (dst.v6) {
        id->src.ip = kernel_route->source;
      } else {
        std::memcpy(id->src.ip.data() + 12, kernel_route->source.data() + 12, 4);
      }
    }
  }
  id->dst = dst;
  const int dst_dev = DeviceOfIp(dst);
  // A multicast destination (mckey resolves its group address) resolves
  // on the source's device to the group's MAC, as Linux's neighbour
  // lookup maps it; rdma_join_multicast follows.
  const bool mcast = IsMulticastIp(dst.v6, dst.ip);
  // Another host's address from a netdev-bound device: the kernel's
  // next hop; from a fabric device: through the uplink, by ARP (IPv4)
  // or neighbour solicitation (IPv6).
  const bool netdev = id->device >= 0 && devices_[id->device].netdev;
  const bool remote = dst_dev < 0 && !mcast && (netdev ? kernel_resolve_ != nullptr : resolve_ != nullptr);
  if (id->device < 0 || (dst_dev < 0 && !mcast && !remote) || dst.v6 != id->src.v6) {
    // No droce device reaches it (and no uplink): ADDR_ERROR, as Linux
    // reports an unreachable destination.
    QueueEvent(*id, kEvAddrError, -EHOSTUNREACH);
    return {0, {}};
  }
  if (remote) {
    const uint32_t timeout = timeout_ms != 0 ? timeout_ms : 2000;
    if (!netdev) {
      const auto n = neighbours_.find(GidOf(dst));
      if (n != neighbours_.end()) {
        AddrResolved(*id, n->second);
        return {0, {}};
      }
    }
    id->state = IdState::kAddrQuery;
    id->resolve_deadline_ms = now_ms + timeout;
    id->resolve_retry_ms = netdev ? UINT64_MAX : now_ms + 1000;  // the kernel retries by itself
    if (netdev) {
      kernel_resolve_(id->device, GidOf(id->src), GidOf(dst), timeout);
    } else {
      resolve_(id->device, GidOf(id->src), GidOf(dst));
    }
    return {0, {}};
  }
  AddrResolved(*id, mcast ? MulticastMacOf(dst.v6, dst.ip) : devices_[dst_dev].mac);
  return {0, {}};
}

// RDMA_USER_CM_CMD_RESOLVE_ROUTE
CmService::Result CmService::CmdResolveRoute(int conn, uint32_t, std::span<const uint8_t> in,
                                             uint64_t, std::span<const uint8_t>) {
  rdma_ucm_resolve_route c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state != IdState::kAddrResolved && id->state != IdState::kRouteResolved) return {EINVAL, {}};
  id->state = IdState::kRouteResolved;
  QueueEvent(*id, kEvRouteResolved, 0);
  return {0, {}};
}

// RDMA_USER_CM_CMD_QUERY_ROUTE
CmService::Result CmService::CmdQueryRoute(int conn, uint32_t, std::span<const uint8_t> in,
                                           uint64_t, std::span<const uint8_t>) {
  rdma_ucm_query c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  return {0, QueryRoute(*id)};
}

// RDMA_USER_CM_CMD_QUERY
CmService::Result CmService::CmdQuery(int conn, uint32_t, std::span<const uint8_t> in,
                                      uint64_t, std::span<const uint8_t>) {
  rdma_ucm_query c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  if (c.option != RDMA_USER_CM_QUERY_ADDR) return {ENOSYS, {}};
  rdma_ucm_query_addr_resp resp{};
  if (id->device >= 0) {
    resp.node_guid = htobe64(devices_[id->device].guid);
    resp.port_num = 1;
    resp.pkey = 0xFFFF;
  }
  resp.src_size = id->src.v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  resp.dst_size = id->dst.v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  StoreSockaddr(id->src.v6, id->src.ip, id->src.port, &resp.src_addr);
  StoreSockaddr(id->dst.v6, id->dst.ip, id->dst.port, &resp.dst_addr);
  return {0, Bytes(resp)};
}

// RDMA_USER_CM_CMD_LISTEN
CmService::Result CmService::CmdListen(int conn, uint32_t, std::span<const uint8_t> in,
                                       uint64_t, std::span<const uint8_t>) {
  rdma_ucm_listen c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state == IdState::kIdle) {
    if (const int e = Bind(*id, Addr{}); e != 0) return {e, {}};
  }
  if (id->state == IdState::kListen) return {0, {}};
  if (id->state != IdState::kAddrBound) return {EINVAL, {}};
  for (const auto& [h, other] : ids_) {
    if (&other != id && other.state == IdState::kListen && other.ps == id->ps && other.src.port == id->src.port &&
        (other.src.any() || id->src.any() || other.src.ip == id->src.ip)) {
      return {EADDRINUSE, {}};
    }
  }
  id->state = IdState::kListen;
  return {0, {}};
}

// RDMA_USER_CM_CMD_CONNECT
CmService::Result CmService::CmdConnect(int conn, uint32_t, std::span<const uint8_t> in,
                                        uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_connect c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  if (id->state != IdState::kRouteResolved || !c.conn_param.valid) return {EINVAL, {}};
  if (id->qp_type == IBV_QPT_UD) {
    // UD: a service id resolution (SIDR_REQ), as Linux's cma_resolve_ib_udp.
    if (c.conn_param.private_data_len > cm::kSidrReqPrivateDataSize - cm::kCmaHeaderSize) return {EINVAL, {}};
    const uint32_t request_id = static_cast<uint32_t>(rng_());
    id->cm.emplace(request_id, cm::ConnectionConfig{kPacketLifeTime});
    by_comm_id_[request_id] = id->handle;
    cm::SidrReq sreq;
    sreq.pkey = 0xFFFF;
    sreq.service_id = cm::ServiceId(static_cast<cm::PortSpace>(id->ps), id->dst.port);
    cm::CmaHeader h;
    h.ip_version = id->src.v6 ? 6 : 4;
    h.port = id->src.port;
    h.src = id->src.ip;
    h.dst = id->dst.ip;
    cm::StoreCmaHeader(h, sreq.private_data);
    std::memcpy(sreq.private_data.data() + cm::kCmaHeaderSize, c.conn_param.private_data,
                c.conn_param.private_data_len);
    return SendStep(*id, id->cm->SendSidrReq(sreq, next_tid_++, kCmResponseTimeout, kMaxCmRetries, now_ms), now_ms,
                    IdState::kConnect);
  }
  if (c.conn_param.private_data_len > cm::kRdmaCmReqUserPrivateData) return {EINVAL, {}};
  const uint32_t comm_id = static_cast<uint32_t>(rng_());
  id->cm.emplace(comm_id, cm::ConnectionConfig{kPacketLifeTime});
  by_comm_id_[comm_id] = id->handle;
  id->local_qpn = c.conn_param.qp_num & 0xFFFFFF;
  id->responder_resources = c.conn_param.responder_resources;
  id->initiator_depth = c.conn_param.initiator_depth;
  id->retry_count = std::min<uint8_t>(c.conn_param.retry_count, 7);
  id->rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
  cm::Req req;
  req.vendor_id = c.ece.vendor_id & 0xFFFFFF;
  req.service_id = cm::ServiceId(static_cast<cm::PortSpace>(id->ps), id->dst.port);
  req.local_ca_guid = devices_[id->device].guid;
  req.local_qpn = id->local_qpn;
  req.responder_resources = id->responder_resources;
  req.initiator_depth = id->initiator_depth;
  req.remote_cm_response_timeout = kCmResponseTimeout;
  req.transport = cm::TransportType::kRc;
  req.end_to_end_flow_control = c.conn_param.flow_control != 0;
  req.starting_psn = id->seq_num;
  req.local_cm_response_timeout = kCmResponseTimeout;
  req.retry_count = id->retry_count;
  req.pkey = 0xFFFF;
  req.path_mtu = id->path_mtu;
  req.rnr_retry_count = id->rnr_retry_count;
  req.max_cm_retries = kMaxCmRetries;
  req.srq = c.conn_param.srq != 0;
  req.primary.local_lid = 0xFFFF;  // permissive: RoCE has no LIDs (Linux's cm_format_req)
  req.primary.remote_lid = 0xFFFF;
  req.primary.local_gid = id->path.src_gid;
  req.primary.remote_gid = id->path.dst_gid;
  req.primary.traffic_class = id->tos;
  req.primary.hop_limit = kHopLimit;
  req.primary.local_ack_timeout = id->ack_timeout.value_or(kLocalAckTimeout);
  cm::CmaHeader h;
  h.ip_version = id->src.v6 ? 6 : 4;
  h.port = id->src.port;
  h.src = id->src.ip;
  h.dst = id->dst.ip;
  cm::StoreCmaHeader(h, req.private_data);
  std::memcpy(req.private_data.data() + cm::kCmaHeaderSize, c.conn_param.private_data,
              c.conn_param.private_data_len);
  return SendStep(*id, id->cm->SendReq(req, next_tid_++, now_ms, c.ece.attr_mod), now_ms, IdState::kConnect);
}

// RDMA_USER_CM_CMD_ACCEPT
CmService::Result CmService::CmdAccept(int conn, uint32_t, std::span<const uint8_t> in,
                                       uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_accept c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr || !id->cm) return {EINVAL, {}};
  if (!c.conn_param.valid) {
    // The active side after CONNECT_RESPONSE (librdmacm moved its QP to
    // RTS): the RTU (Linux's cma_rep_recv).
    return SendStep(*id, id->cm->SendRtu(cm::Rtu{}), now_ms, IdState::kConnected);
  }
  if (id->qp_type == IBV_QPT_UD) {  // the SIDR_REP: our QPN and Q_Key
    if (c.conn_param.private_data_len > cm::kSidrRepPrivateDataSize) return {EINVAL, {}};
    id->uid = c.uid;
    cm::SidrRep srep;
    srep.status = cm::SidrStatus::kOk;
    srep.qpn = c.conn_param.qp_num & 0xFFFFFF;
    srep.qkey = c.conn_param.qkey != 0 ? c.conn_param.qkey : kUdpQkey;
    srep.service_id = cm::ServiceId(static_cast<cm::PortSpace>(id->ps), id->src.port);
    srep.vendor_id = c.ece.vendor_id & 0xFFFFFF;
    std::memcpy(srep.private_data.data(), c.conn_param.private_data, c.conn_param.private_data_len);
    return SendStep(*id, id->cm->SendSidrRep(srep), now_ms, IdState::kConnected);
  }
  if (c.conn_param.private_data_len > cm::kRepPrivateDataSize) return {EINVAL, {}};
  id->uid = c.uid;
  id->local_qpn = c.conn_param.qp_num & 0xFFFFFF;
  id->responder_resources = c.conn_param.responder_resources;
  id->initiator_depth = c.conn_param.initiator_depth;
  cm::Rep rep;
  rep.local_qpn = id->local_qpn;
  rep.vendor_id = c.ece.vendor_id & 0xFFFFFF;
  rep.starting_psn = id->seq_num;
  rep.responder_resources = id->responder_resources;
  rep.initiator_depth = id->initiator_depth;
  rep.target_ack_delay = 15;
  rep.end_to_end_flow_control = c.conn_param.flow_control != 0;
  rep.rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
  rep.srq = c.conn_param.srq != 0;
  rep.local_ca_guid = devices_[id->device].guid;
  std::memcpy(rep.private_data.data(), c.conn_param.private_data, c.conn_param.private_data_len);
  return SendStep(*id, id->cm->SendRep(rep, now_ms, c.ece.attr_mod), now_ms);
}

// RDMA_USER_CM_CMD_REJECT
CmService::Result CmService::CmdReject(int conn, uint32_t, std::span<const uint8_t> in,
                                       uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_reject c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr || !id->cm) return {EINVAL, {}};
  if (c.private_data_len > cm::kRejPrivateDataSize) return {EINVAL, {}};
  // Linux's rdma_reject: "consumer defined" with the user's private data
  // (the reason byte selects that or, with ECE, "vendor option not supported").
  if (id->qp_type == IBV_QPT_UD) {
    cm::SidrRep srep;
    srep.status = cm::SidrStatus::kReject;
    srep.service_id = cm::ServiceId(static_cast<cm::PortSpace>(id->ps), id->src.port);
    std::memcpy(srep.private_data.data(), c.private_data,
                std::min<size_t>(c.private_data_len, cm::kSidrRepPrivateDataSize));
    return SendStep(*id, id->cm->SendSidrRep(srep), now_ms);
  }
  const uint16_t reason = c.reason == 35 ? 35 : static_cast<uint16_t>(cm::RejReason::kConsumerDefined);
  return SendStep(*id, id->cm->SendRej(reason, now_ms, std::span<const uint8_t>(c.private_data, c.private_data_len)),
                  now_ms);
}

// RDMA_USER_CM_CMD_DISCONNECT
CmService::Result CmService::CmdDisconnect(int conn, uint32_t, std::span<const uint8_t> in,
                                           uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_disconnect c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr || !id->cm) return {EINVAL, {}};
  // Linux's rdma_disconnect: a DREQ, or the DREP to a received DREQ; in
  // any other state nothing is sent and it still succeeds (a program
  // disconnects after its DISCONNECTED event, when time wait has begun).
  absl::StatusOr<cm::Step> step = id->cm->SendDreq(next_tid_++, now_ms);
  if (!step.ok()) step = id->cm->SendDrep(now_ms);
  if (step.ok()) Apply(*id, *step, nullptr, now_ms);
  return {0, {}};
}

// RDMA_USER_CM_CMD_INIT_QP_ATTR
CmService::Result CmService::CmdInitQpAttr(int conn, uint32_t, std::span<const uint8_t> in,
                                           uint64_t, std::span<const uint8_t>) {
  rdma_ucm_init_qp_attr c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  int err = 0;
  std::vector<uint8_t> out = InitQpAttr(*id, c.qp_state, &err);
  return {err, std::move(out)};
}

// RDMA_USER_CM_CMD_GET_EVENT
CmService::Result CmService::CmdGetEvent(int conn, uint32_t, std::span<const uint8_t> in,
                                         uint64_t, std::span<const uint8_t>) {
  Result r;
  rdma_ucm_get_event c;
  if (!Load(in, &c)) return {EINVAL, {}};
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    if (it->conn != conn) continue;
    if (auto id = ids_.find(it->handle); id != ids_.end()) ++id->second.events_reported;
    if (auto mc = mcasts_.find(it->mc); it->mc != 0 && mc != mcasts_.end()) ++mc->second.events_reported;
    r.out = std::move(it->resp);
    events_.erase(it);
    return r;
  }
  return {EAGAIN, {}};
}

// RDMA_USER_CM_CMD_SET_OPTION
CmService::Result CmService::CmdSetOption(int conn, uint32_t, std::span<const uint8_t> in,
                                          uint64_t, std::span<const uint8_t> option) {
  rdma_ucm_set_option c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr) return {EINVAL, {}};
  if (option.size() != c.optlen) return {EINVAL, {}};
  if (c.level != RDMA_OPTION_ID) return {ENOSYS, {}};
  switch (c.optname) {
    case RDMA_OPTION_ID_TOS:
      if (option.size() != 1) return {EINVAL, {}};
      id->tos = option[0];
      id->tos_set = true;
      return {0, {}};
    case RDMA_OPTION_ID_REUSEADDR: {
      int v;
      if (option.size() != sizeof v) return {EINVAL, {}};
      std::memcpy(&v, option.data(), sizeof v);
      if (id->state != IdState::kIdle) return {EINVAL, {}};
      id->reuseaddr = v != 0;
      return {0, {}};
    }
    case RDMA_OPTION_ID_AFONLY:
      if (option.size() != sizeof(int)) return {EINVAL, {}};
      return {0, {}};
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (option.size() != 1) return {EINVAL, {}};
      id->ack_timeout = std::min<uint8_t>(option[0], 31);
      return {0, {}};
    default:
      return {ENOSYS, {}};
  }
}

// RDMA_USER_CM_CMD_NOTIFY
CmService::Result CmService::CmdNotify(int conn, uint32_t, std::span<const uint8_t> in,
                                       uint64_t now_ms, std::span<const uint8_t>) {
  rdma_ucm_notify c;
  Id* id = LoadForId(conn, in, &c);
  if (id == nullptr || !id->cm) return {EINVAL, {}};
  if (c.event == kCommEst) Apply(*id, id->cm->CommEstablished(), nullptr, now_ms);
  return {0, {}};
}

// RDMA_USER_CM_CMD_MIGRATE_ID
CmService::Result CmService::CmdMigrateId(int conn, uint32_t, std::span<const uint8_t> in,
                                          uint64_t, std::span<const uint8_t> option) {
  // rdma_migrate_id: written to the destination event channel (`conn`);
  // the id and its undelivered events move there from the channel the
  // command names (Linux's ucma_migrate_id takes it as an fd; `option`
  // carries the connection the caller resolved it to).
  rdma_ucm_migrate_id c;
  int from;
  if (!Load(in, &c) || option.size() != sizeof from) return {EINVAL, {}};
  std::memcpy(&from, option.data(), sizeof from);
  Id* id = from >= 0 ? Find(from, c.id) : nullptr;
  if (id == nullptr) return {EINVAL, {}};
  id->conn = conn;
  for (Event& e : events_) {
    if (e.handle == c.id) e.conn = conn;
  }
  rdma_ucm_migrate_resp resp{id->events_reported};
  return {0, Bytes(resp)};
}

// RDMA_USER_CM_CMD_JOIN_IP_MCAST
CmService::Result CmService::CmdJoinIpMcast(int conn, uint32_t, std::span<const uint8_t> in,
                                            uint64_t, std::span<const uint8_t>) {
  rdma_ucm_join_ip_mcast c;
  if (!Load(in, &c)) return {EINVAL, {}};
  Addr group;
  const int err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.addr), sizeof c.addr, &group.ip, &group.v6,
                                &group.port);
  if (err != 0) return {err, {}};
  return Join(conn, c.id, c.uid, group, RDMA_MC_JOIN_FLAG_FULLMEMBER);
}

// RDMA_USER_CM_CMD_JOIN_MCAST
CmService::Result CmService::CmdJoinMcast(int conn, uint32_t, std::span<const uint8_t> in,
                                          uint64_t, std::span<const uint8_t>) {
  rdma_ucm_join_mcast c;
  if (!Load(in, &c)) return {EINVAL, {}};
  // As ucma_join_multicast: the size must be the family's own.
  sa_family_t family;
  std::memcpy(&family, &c.addr, sizeof family);
  const size_t want = family == AF_INET ? sizeof(sockaddr_in) : family == AF_INET6 ? sizeof(sockaddr_in6) : 0;
  if (want == 0 || c.addr_size != want) return {EINVAL, {}};
  Addr group;
  const int err = ParseSockaddr(reinterpret_cast<const uint8_t*>(&c.addr), c.addr_size, &group.ip, &group.v6,
                                &group.port);
  if (err != 0) return {err, {}};
  return Join(conn, c.id, c.uid, group, c.join_flags);
}

// RDMA_USER_CM_CMD_LEAVE_MCAST
CmService::Result CmService::CmdLeaveMcast(int conn, uint32_t, std::span<const uint8_t> in,
                                           uint64_t, std::span<const uint8_t>) {
  // rdma_leave_multicast: no event; the group's undelivered events go
  // (ucma_cleanup_mc_events) and the answer counts the ones delivered,
  // which librdmacm waits to be acknowledged before it frees the join.
  rdma_ucm_destroy_id c;
  if (!Load(in, &c)) return {EINVAL, {}};
  auto it = mcasts_.find(c.id);
  if (it == mcasts_.end()) return {ENOENT, {}};
  if (Find(conn, it->second.id_handle) == nullptr) return {EINVAL, {}};
  std::erase_if(events_, [&](const Event& e) { return e.mc == c.id; });
  rdma_ucm_destroy_id_resp resp{it->second.events_reported};
  mcasts_.erase(it);
  return {0, Bytes(resp)};
}

// The command table, indexed by command number as Linux's ucma_cmd_table
// (drivers/infiniband/core/ucma.c): a command without a handler is ENOSYS.
const CmService::CommandTable CmService::kCommandTable = [] {
  CommandTable t{};
  t[RDMA_USER_CM_CMD_CREATE_ID] = &CmService::CmdCreateId;
  t[RDMA_USER_CM_CMD_DESTROY_ID] = &CmService::CmdDestroyId;
  t[RDMA_USER_CM_CMD_BIND_IP] = &CmService::CmdBind;
  t[RDMA_USER_CM_CMD_BIND] = &CmService::CmdBind;
  t[RDMA_USER_CM_CMD_RESOLVE_IP] = &CmService::CmdResolveAddr;
  t[RDMA_USER_CM_CMD_RESOLVE_ADDR] = &CmService::CmdResolveAddr;
  t[RDMA_USER_CM_CMD_RESOLVE_ROUTE] = &CmService::CmdResolveRoute;
  t[RDMA_USER_CM_CMD_QUERY_ROUTE] = &CmService::CmdQueryRoute;
  t[RDMA_USER_CM_CMD_QUERY] = &CmService::CmdQuery;
  t[RDMA_USER_CM_CMD_LISTEN] = &CmService::CmdListen;
  t[RDMA_USER_CM_CMD_CONNECT] = &CmService::CmdConnect;
  t[RDMA_USER_CM_CMD_ACCEPT] = &CmService::CmdAccept;
  t[RDMA_USER_CM_CMD_REJECT] = &CmService::CmdReject;
  t[RDMA_USER_CM_CMD_DISCONNECT] = &CmService::CmdDisconnect;
  t[RDMA_USER_CM_CMD_INIT_QP_ATTR] = &CmService::CmdInitQpAttr;
  t[RDMA_USER_CM_CMD_GET_EVENT] = &CmService::CmdGetEvent;
  t[RDMA_USER_CM_CMD_SET_OPTION] = &CmService::CmdSetOption;
  t[RDMA_USER_CM_CMD_NOTIFY] = &CmService::CmdNotify;
  t[RDMA_USER_CM_CMD_MIGRATE_ID] = &CmService::CmdMigrateId;
  t[RDMA_USER_CM_CMD_JOIN_IP_MCAST] = &CmService::CmdJoinIpMcast;
  t[RDMA_USER_CM_CMD_JOIN_MCAST] = &CmService::CmdJoinMcast;
  t[RDMA_USER_CM_CMD_LEAVE_MCAST] = &CmService::CmdLeaveMcast;
  return t;
}();

CmService::Result CmService::Dispatch(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                                      std::span<const uint8_t> option) {
  const Handler h = cmd < kCommandTable.size() ? kCommandTable[cmd] : nullptr;
  if (h == nullptr) return {ENOSYS, {}};  // GET_OPTION (Linux: ENOSYS too)
  return (this->*h)(conn, cmd, in, now_ms, option);
}

// rdma_join_multicast on RoCE, as Linux's cma_iboe_join_multicast: no SA
// and no MAD; the group's MGID is the IPv4 address mapped (::ffff:a.b.c.d,
// cma_iboe_set_mgid for RoCEv2) and MULTICAST_JOIN follows at once with the
// address handle to send to it (QP 0xFFFFFF, the id's Q_Key; hop limit 64).
// librdmacm attaches the id's QP to the MGID when it reads the event
// (ucma_process_join). IPv6 groups: Linux refuses them on RoCEv2 (ENOTSUPP).
CmService::Result CmService::Join(int conn, uint32_t handle, uint64_t uid, const Addr& group, uint16_t join_flags) {
  if (join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) {
    return {EINVAL, {}};
  }
  Id* id = Find(conn, handle);
  if (id == nullptr || id->device < 0) return {EINVAL, {}};  // ucma_get_ctx_dev: bound to a device
  if (id->state != IdState::kAddrBound && id->state != IdState::kAddrResolved) return {EINVAL, {}};
  if (id->qp_type != IBV_QPT_UD) return {EINVAL, {}};
  if (group.any()) return {EINVAL, {}};
  if (group.v6) return {EOPNOTSUPP, {}};
  Mcast mc;
  mc.id_handle = handle;
  mc.uid = uid;
  mc.mgid = GidOf(group);
  mc.send_only = join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  const uint32_t mh = next_mc_handle_++;
  mcasts_.emplace(mh, mc);

  rdma_ucm_event_resp r{};
  r.uid = uid;
  r.id = mh;
  r.event = kEvMulticastJoin;
  rdma_ucm_ud_param& ud = r.param.ud;
  ud.qp_num = 0xFFFFFF;
  ud.qkey = id->qkey;
  std::memcpy(ud.ah_attr.grh.dgid, mc.mgid.data(), 16);
  ud.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(0, GidIndex(id->device, GidOf(id->src))));
  ud.ah_attr.grh.hop_limit = kHopLimit;
  ud.ah_attr.grh.traffic_class = id->tos;
  ud.ah_attr.is_global = 1;
  ud.ah_attr.port_num = 1;
  events_.push_back(Event{conn, handle, Bytes(r), mh});
  rdma_ucm_create_id_resp resp{mh};
  return {0, Bytes(resp)};
}

void CmService::AddrResolved(Id& id, const std::array<uint8_t, 6>& dst_mac) {
  id.path.src_mac = devices_[id.device].mac;
  id.path.dst_mac = dst_mac;
  id.path.src_gid = GidOf(id.src);
  id.path.dst_gid = GidOf(id.dst);
  id.path.hop_limit = kHopLimit;
  id.path.tclass = id.tos;
  id.path_mtu = devices_[id.device].path_mtu;
  id.state = IdState::kAddrResolved;
  QueueEvent(id, kEvAddrResolved, 0);
}

void CmService::KernelNeighbour(int device, const cm::Gid& target, int error, const std::array<uint8_t, 6>& mac) {
  for (auto& [h, id] : ids_) {
    if (id.state != IdState::kAddrQuery || id.device != device || GidOf(id.dst) != target) continue;
    if (error == 0) {
      AddrResolved(id, mac);
    } else {
      id.state = IdState::kAddrBound;
      QueueEvent(id, kEvAddrError, -error);
    }
  }
}

void CmService::LearnNeighbour(const cm::Gid& ip, const std::array<uint8_t, 6>& mac, uint64_t now_ms) {
  (void)now_ms;
  // Heard on the uplink, which anyone on that network can flood with ARP/ND:
  // a bounded table (as Linux's neighbour gc_thresh3) whose oldest-learnt
  // entry gives way, so a flood costs lookups, never unbounded memory.
  auto known = neighbours_.find(ip);
  if (known != neighbours_.end()) {
    known->second = mac;
  } else {
    if (neighbours_.size() >= kMaxUplinkNeighbours) {
      neighbours_.erase(neighbour_order_.front());
      neighbour_order_.pop_front();
    }
    neighbours_.emplace(ip, mac);
    neighbour_order_.push_back(ip);
  }
  for (auto& [h, id] : ids_) {
    if (id.state == IdState::kAddrQuery && GidOf(id.dst) == ip && !devices_[id.device].netdev) AddrResolved(id, mac);
  }
}

std::vector<uint8_t> CmService::QueryRoute(const Id& id) const {
  rdma_ucm_query_route_resp resp{};
  if (id.device >= 0) {
    resp.node_guid = htobe64(devices_[id.device].guid);
    resp.port_num = 1;
    resp.ibdev_index = static_cast<uint32_t>(id.device);
  }
  ib_user_path_rec& p = resp.ib_route[0];
  const cm::Gid sgid = id.device >= 0 ? GidOf(id.src) : cm::Gid{};
  std::memcpy(p.sgid, sgid.data(), 16);
  if (id.state == IdState::kAddrResolved || id.state == IdState::kRouteResolved || id.state >= IdState::kConnect) {
    const cm::Gid dgid = GidOf(id.dst);
    std::memcpy(p.dgid, dgid.data(), 16);
  }
  p.pkey = htons(0xFFFF);
  if (id.state == IdState::kRouteResolved || id.state == IdState::kConnect || id.state == IdState::kConnected) {
    resp.num_paths = 1;
    p.hop_limit = kHopLimit;
    p.traffic_class = id.tos;
    p.mtu = id.path_mtu;
    p.mtu_selector = 2;  // IB_SA_EQ
    p.rate = 0;
    p.packet_life_time = kPacketLifeTime;
    p.packet_life_time_selector = 2;
    p.reversible = 1;
    p.numb_path = 1;
  }
  StoreSockaddr(id.src.v6, id.src.ip, id.src.port, &resp.src_addr);
  StoreSockaddr(id.dst.v6, id.dst.ip, id.dst.port, &resp.dst_addr);
  return Bytes(resp);
}

std::vector<uint8_t> CmService::InitQpAttr(const Id& id, uint32_t qp_state, int* error) const {
  ib_uverbs_qp_attr a{};
  a.qp_state = qp_state;
  if (id.device < 0) {
    *error = EINVAL;
    return {};
  }
  if (id.qp_type == IBV_QPT_UD) {  // Linux's cma_ib_init_qp_attr for UD
    switch (qp_state) {
      case IBV_QPS_INIT:
        a.qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        a.port_num = 1;
        a.qkey = id.qkey;
        break;
      case IBV_QPS_RTR:
        a.qp_attr_mask = IBV_QP_STATE;
        break;
      case IBV_QPS_RTS:
        a.qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        a.sq_psn = id.seq_num;
        break;
      default:
        *error = EINVAL;
        return {};
    }
    return Bytes(a);
  }
  const bool connected = id.cm.has_value() && id.cm->state() != cm::State::kIdle;
  switch (qp_state) {
    case IBV_QPS_INIT:
      a.qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      a.pkey_index = 0;
      a.port_num = 1;
      // Before the exchange Linux's rdma_cm gives no remote access; ib_cm's
      // (with a connection) remote write, and read/atomic with responder resources.
      a.qp_access_flags = 0;
      if (connected) {
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        if (id.responder_resources != 0) a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      }
      break;
    case IBV_QPS_RTR: {
      if (!connected || id.remote_qpn == 0) {
        *error = EINVAL;
        return {};
      }
      a.qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      std::memcpy(a.ah_attr.grh.dgid, id.path.dst_gid.data(), 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(std::max(0, GidIndex(id.device, id.path.src_gid)));
      a.ah_attr.grh.hop_limit = id.path.hop_limit;
      a.ah_attr.grh.traffic_class = id.path.tclass;
      a.ah_attr.is_global = 1;
      a.ah_attr.port_num = 1;
      a.path_mtu = id.path_mtu;
      a.dest_qp_num = id.remote_qpn;
      a.rq_psn = id.seq_num;
      a.max_dest_rd_atomic = id.responder_resources;
      a.min_rnr_timer = 0;
      break;
    }
    case IBV_QPS_RTS:
      if (!connected || id.remote_qpn == 0) {
        *error = EINVAL;
        return {};
      }
      a.qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC;
      a.sq_psn = id.sq_psn;
      a.timeout = id.ack_timeout.value_or(kLocalAckTimeout);
      a.retry_cnt = id.retry_count;
      a.rnr_retry = id.rnr_retry_count;
      a.max_rd_atomic = id.initiator_depth;
      break;
    default:
      *error = EINVAL;
      return {};
  }
  return Bytes(a);
}

CmService::Result CmService::SendStep(Id& id, const absl::StatusOr<cm::Step>& step, uint64_t now_ms,
                                      std::optional<IdState> then) {
  if (!step.ok()) return {EINVAL, {}};
  if (then) id.state = *then;
  Apply(id, *step, nullptr, now_ms);
  return {0, {}};
}

void CmService::Apply(Id& id, const cm::Step& step, const cm::CmMessage* received, uint64_t now_ms) {
  (void)now_ms;
  if (step.send) Send(id, *step.send);
  if (step.ignored != cm::Ignored::kNo) ++counters_.ignored;
  rdma_ucm_conn_param p{};
  switch (step.upcall) {
    case cm::Upcall::kRepReceived: {
      const auto& rep = std::get<cm::Rep>(received->body);
      id.remote_qpn = rep.local_qpn;
      id.sq_psn = rep.starting_psn;  // cm_rep_handler: we send from the REP's starting PSN
      id.remote_guid = rep.local_ca_guid;
      id.remote_comm_id = rep.local_comm_id;
      // ib_cm: what the peer will read from us is what it can initiate.
      id.initiator_depth = std::min(id.initiator_depth, rep.responder_resources);
      id.responder_resources = std::min(id.responder_resources, rep.initiator_depth);
      id.rnr_retry_count = rep.rnr_retry_count;
      p.qp_num = rep.local_qpn;
      std::memcpy(p.private_data, rep.private_data.data(), cm::kRepPrivateDataSize);
      p.private_data_len = cm::kRepPrivateDataSize;
      p.responder_resources = rep.responder_resources;
      p.initiator_depth = rep.initiator_depth;
      p.flow_control = rep.end_to_end_flow_control;
      p.rnr_retry_count = rep.rnr_retry_count;
      p.srq = rep.srq;
      QueueEvent(id, kEvConnectResponse, 0, &p, sizeof p, rep.vendor_id, received->header.attr_mod);
      break;
    }
    case cm::Upcall::kRtuReceived:
    case cm::Upcall::kUserEstablished:
      id.state = IdState::kConnected;
      QueueEvent(id, kEvEstablished, 0);
      break;
    case cm::Upcall::kRejReceived: {
      const auto& rej = std::get<cm::Rej>(received->body);
      if (id.state == IdState::kConnect) {
        std::memcpy(p.private_data, rej.private_data.data(), cm::kRejPrivateDataSize);
        p.private_data_len = cm::kRejPrivateDataSize;
        QueueEvent(id, kEvRejected, rej.reason, &p, sizeof p);
        id.state = IdState::kDisconnected;
      } else if (id.state == IdState::kConnected && !id.disconnected_reported) {
        id.disconnected_reported = true;
        QueueEvent(id, kEvDisconnected, 0);
      }
      break;
    }
    case cm::Upcall::kReqError:
    case cm::Upcall::kRepError:
      if (id.state == IdState::kConnect) {
        QueueEvent(id, kEvUnreachable, -ETIMEDOUT);
        id.state = IdState::kDisconnected;
      }
      break;
    case cm::Upcall::kDreqReceived:
    case cm::Upcall::kDrepReceived:
    case cm::Upcall::kDreqError:
      if ((id.state == IdState::kConnected || id.state == IdState::kConnect) && !id.disconnected_reported) {
        id.disconnected_reported = true;
        id.state = IdState::kDisconnected;
        QueueEvent(id, kEvDisconnected, step.upcall == cm::Upcall::kDreqError ? -ETIMEDOUT : 0);
      }
      break;
    case cm::Upcall::kTimewaitExit:
      QueueEvent(id, kEvTimewaitExit, 0);
      break;
    case cm::Upcall::kSidrRepReceived: {
      const auto& srep = std::get<cm::SidrRep>(received->body);
      rdma_ucm_ud_param u{};
      std::memcpy(u.private_data, srep.private_data.data(), cm::kSidrRepPrivateDataSize);
      u.private_data_len = cm::kSidrRepPrivateDataSize;
      if (srep.status != cm::SidrStatus::kOk) {
        QueueEvent(id, kEvUnreachable, static_cast<int32_t>(srep.status), &u, sizeof u);
        id.state = IdState::kDisconnected;
        break;
      }
      id.remote_qpn = srep.qpn;
      id.qkey = srep.qkey;
      u.qp_num = srep.qpn;
      u.qkey = srep.qkey;
      FillAh(id, &u.ah_attr);
      id.state = IdState::kConnected;
      QueueEvent(id, kEvEstablished, 0, &u, sizeof u, srep.vendor_id);
      break;
    }
    case cm::Upcall::kSidrReqError:
      if (id.state == IdState::kConnect) {
        QueueEvent(id, kEvUnreachable, -ETIMEDOUT);
        id.state = IdState::kDisconnected;
      }
      break;
    default:
      break;
  }
}

void CmService::DestroyId(uint32_t handle, uint64_t now_ms) {
  auto it = ids_.find(handle);
  if (it == ids_.end()) return;
  Id& id = it->second;
  // Its undelivered events go with it (Linux's ucma_cleanup_events); a
  // CONNECT_REQUEST queued for a dying listener takes its new id along.
  std::vector<uint32_t> orphans;
  for (auto e = events_.begin(); e != events_.end();) {
    if (e->handle == handle) {
      rdma_ucm_event_resp r;
      std::memcpy(&r, e->resp.data(), sizeof r);
      if (r.event == kEvConnectRequest && r.id != handle) orphans.push_back(r.id);
      e = events_.erase(e);
    } else {
      ++e;
    }
  }
  if (id.cm) {
    const cm::Step step = id.cm->Destroy(now_ms);
    if (step.send) Send(id, *step.send);
    by_comm_id_.erase(id.cm->local_comm_id());
    if (id.cm->state() == cm::State::kTimewait) {
      zombies_.emplace(id.cm->local_comm_id(), std::make_pair(*id.cm, std::make_pair(id.device, id.path)));
    }
  }
  // Its multicast joins go with it (ucma_cleanup_multicast); their events
  // were counted for the id and went above.
  std::erase_if(mcasts_, [&](const auto& m) { return m.second.id_handle == handle; });
  ids_.erase(it);
  for (uint32_t o : orphans) DestroyId(o, now_ms);
}

void CmService::ConnectionClosed(int conn, uint64_t now_ms) {
  std::vector<uint32_t> handles;
  for (const auto& [h, id] : ids_) {
    if (id.conn == conn) handles.push_back(h);
  }
  for (uint32_t h : handles) DestroyId(h, now_ms);
  std::erase_if(events_, [&](const Event& e) { return e.conn == conn; });
}

void CmService::OnGsiFrame(int device, const uint8_t* frame, uint32_t len, uint64_t now_ms) {
  const GsiPacket g = ParseGsiFrame(frame, len);
  if (!g.ok()) {
    ++counters_.gsi_drops[static_cast<size_t>(g.drop)];
    return;
  }
  OnMad(device, g.from, g.mad, now_ms);
}

// The id a REQ or SIDR_REQ creates on a listener: the listener's channel,
// context and port space; its addresses are the request's, seen from here.
CmService::Id CmService::IncomingId(const Id& listener, int device, const cm::CmaHeader& hdr, uint16_t port) {
  Id id;
  id.handle = next_handle_++;
  id.conn = listener.conn;
  id.uid = listener.uid;
  id.ps = listener.ps;
  id.qp_type = listener.qp_type;
  id.state = IdState::kConnect;
  id.device = device;
  id.src = Addr{hdr.ip_version == 6, hdr.dst, port};
  id.dst = Addr{hdr.ip_version == 6, hdr.src, hdr.port};
  return id;
}

void CmService::OnMad(int device, const GsiPath& from, std::span<const uint8_t> mad, uint64_t now_ms) {
  ++counters_.mads_rx;
  const cm::ParsedMad p = cm::ParseMad(mad);
  if (!p.ok()) {
    ++counters_.mad_errors[static_cast<size_t>(p.error)];
    return;
  }
  const cm::CmMessage& m = p.message;
  if (std::holds_alternative<cm::Req>(m.body)) {
    HandleReq(device, from, m, now_ms);
    return;
  }
  if (std::holds_alternative<cm::SidrReq>(m.body)) {
    HandleSidrReq(device, from, m, now_ms);
    return;
  }
  if (const auto* srep = std::get_if<cm::SidrRep>(&m.body)) {
    Id* id = FindByLocalComm(srep->request_id);
    if (id == nullptr || !id->cm) {
      ++counters_.unmatched;
      return;
    }
    Apply(*id, id->cm->OnMad(m, now_ms), &m, now_ms);
    return;
  }
  // Every other message names our communication id as its remote id, except
  // a REJ "timeout" of a REQ we never answered with our id (by CA GUID).
  uint32_t ours = 0;
  std::visit(
      [&](const auto& b) {
        using T = std::decay_t<decltype(b)>;
        if constexpr (requires { b.remote_comm_id; }) ours = b.remote_comm_id;
        (void)sizeof(T);
      },
      m.body);
  Id* id = FindByLocalComm(ours);
  if (id == nullptr) {
    if (const auto* rej = std::get_if<cm::Rej>(&m.body); rej != nullptr && rej->ari_length >= 8) {
      const uint64_t guid = wire::LoadBe64(rej->ari.data());
      for (auto& [h, x] : ids_) {
        if (x.cm && x.remote_comm_id == rej->local_comm_id && x.remote_guid == guid) {
          id = &x;
          break;
        }
      }
    }
  }
  if (id == nullptr) {
    auto z = zombies_.find(ours);
    if (z == zombies_.end()) {
      ++counters_.unmatched;
      return;
    }
    const cm::Step step = z->second.first.OnMad(m, now_ms);
    if (step.send) {
      ++counters_.mads_tx;
      send_(z->second.second.first, z->second.second.second, cm::SerializeMad(*step.send));
    }
    return;
  }
  Apply(*id, id->cm->OnMad(m, now_ms), &m, now_ms);
}

void CmService::HandleReq(int device, const GsiPath& from, const cm::CmMessage& m, uint64_t now_ms) {
  const auto& req = std::get<cm::Req>(m.body);
  // A retried REQ goes to the connection it created.
  for (auto& [h, x] : ids_) {
    if (x.cm && x.remote_comm_id == req.local_comm_id && x.remote_guid == req.local_ca_guid) {
      Apply(x, x.cm->OnMad(m, now_ms), &m, now_ms);
      return;
    }
  }
  const GsiPath reply = ReplyPath(from);
  auto reject = [&](cm::RejReason reason) {
    ++counters_.mads_tx;
    send_(device, reply, cm::SerializeMad(cm::RejectUnmatchedReq(m, reason)));
  };
  const auto sp = cm::DecodeServiceId(req.service_id);
  const auto hdr = cm::ParseCmaHeader(req.private_data);
  Id* listener = nullptr;
  if (sp && hdr && req.transport == cm::TransportType::kRc) {
    const Addr dst{hdr->ip_version == 6, hdr->dst, sp->port};
    for (auto& [h, x] : ids_) {
      if (x.state != IdState::kListen || x.qp_type != IBV_QPT_RC || x.ps != static_cast<uint16_t>(sp->ps) ||
          x.src.port != sp->port) {
        continue;
      }
      if (!x.src.any() && (x.src.ip != dst.ip || x.device != device)) continue;
      listener = &x;
      break;
    }
  }
  if (listener == nullptr) {
    ++counters_.rej_no_listener;
    reject(cm::RejReason::kInvalidServiceId);
    return;
  }
  Id id = IncomingId(*listener, device, *hdr, sp->port);
  id.tos = listener->tos;
  id.path = reply;
  id.path.tclass = req.primary.traffic_class;
  id.seq_num = static_cast<uint32_t>(rng_()) & 0xFFFFFF;  // the REP's (cm_req_handler: rq_psn)
  id.sq_psn = req.starting_psn;                           // ... and we send from the REQ's
  id.remote_qpn = req.local_qpn;
  id.remote_guid = req.local_ca_guid;
  id.remote_comm_id = req.local_comm_id;
  id.responder_resources = req.initiator_depth;
  id.initiator_depth = req.responder_resources;
  id.retry_count = req.retry_count;
  id.rnr_retry_count = req.rnr_retry_count;
  id.path_mtu = std::min(req.path_mtu, devices_[device].path_mtu);
  const uint32_t comm_id = static_cast<uint32_t>(rng_());
  id.cm.emplace(comm_id, cm::ConnectionConfig{kPacketLifeTime});
  by_comm_id_[comm_id] = id.handle;
  const cm::Step step = id.cm->OnMad(m, now_ms);
  const uint32_t listen_handle = listener->handle;
  const uint64_t listen_uid = listener->uid;
  auto [it, inserted] = ids_.emplace(id.handle, std::move(id));
  Id& nid = it->second;
  if (step.upcall == cm::Upcall::kReqReceived) {
    rdma_ucm_conn_param p{};
    p.qp_num = req.local_qpn;
    const size_t user = cm::kReqPrivateDataSize - cm::kCmaHeaderSize;
    std::memcpy(p.private_data, req.private_data.data() + cm::kCmaHeaderSize, user);
    p.private_data_len = static_cast<uint8_t>(user);
    p.responder_resources = req.responder_resources;
    p.initiator_depth = req.initiator_depth;
    p.flow_control = req.end_to_end_flow_control;
    p.retry_count = req.retry_count;
    p.rnr_retry_count = req.rnr_retry_count;
    p.srq = req.srq;
    QueueEvent(nid, kEvConnectRequest, 0, &p, sizeof p, req.vendor_id, m.header.attr_mod, listen_uid, listen_handle);
    // As Linux's cma_req_handler: the program has not accepted yet, so ask
    // the active side for more time (MRA) rather than let its REQ time out.
    if (auto mra = nid.cm->SendMra(kMraServiceTimeout); mra.ok()) Apply(nid, *mra, nullptr, now_ms);
  }
}

void CmService::FillAh(const Id& id, ib_uverbs_ah_attr* ah) const {
  std::memcpy(ah->grh.dgid, id.path.dst_gid.data(), 16);
  ah->grh.sgid_index = static_cast<uint8_t>(std::max(0, GidIndex(id.device, id.path.src_gid)));
  ah->grh.hop_limit = id.path.hop_limit;
  ah->grh.traffic_class = id.path.tclass;
  ah->is_global = 1;
  ah->port_num = 1;
}

// A SIDR_REQ (UD rdma_cm): to the listener of its service id, as a
// CONNECT_REQUEST on a new id; nobody listens: SIDR_REP "no such service"
// (Linux's IB_SIDR_UNSUPPORTED).
void CmService::HandleSidrReq(int device, const GsiPath& from, const cm::CmMessage& m, uint64_t now_ms) {
  const auto& sreq = std::get<cm::SidrReq>(m.body);
  const GsiPath reply = ReplyPath(from);
  const auto sp = cm::DecodeServiceId(sreq.service_id);
  const auto hdr = cm::ParseCmaHeader(sreq.private_data);
  Id* listener = nullptr;
  if (sp && hdr) {
    for (auto& [h, x] : ids_) {
      if (x.state != IdState::kListen || x.qp_type != IBV_QPT_UD || x.ps != static_cast<uint16_t>(sp->ps) ||
          x.src.port != sp->port) {
        continue;
      }
      if (!x.src.any() && (x.src.ip != hdr->dst || x.device != device)) continue;
      listener = &x;
      break;
    }
  }
  if (listener == nullptr) {
    ++counters_.rej_no_listener;
    cm::CmMessage r;
    r.header.tid = m.header.tid;
    cm::SidrRep srep;
    srep.request_id = sreq.request_id;
    srep.status = cm::SidrStatus::kNoSuchService;
    srep.service_id = sreq.service_id;
    r.header.attr_id = cm::AttrId::kSidrRep;
    r.body = srep;
    ++counters_.mads_tx;
    send_(device, reply, cm::SerializeMad(r));
    return;
  }
  Id id = IncomingId(*listener, device, *hdr, sp->port);
  id.path = reply;
  id.seq_num = static_cast<uint32_t>(rng_()) & 0xFFFFFF;
  id.qkey = kUdpQkey;
  const uint32_t comm_id = static_cast<uint32_t>(rng_());
  id.cm.emplace(comm_id, cm::ConnectionConfig{kPacketLifeTime});
  const cm::Step step = id.cm->OnMad(m, now_ms);
  const uint32_t listen_handle = listener->handle;
  const uint64_t listen_uid = listener->uid;
  auto [it, inserted] = ids_.emplace(id.handle, std::move(id));
  if (step.upcall == cm::Upcall::kSidrReqReceived) {
    rdma_ucm_ud_param u{};
    const size_t user = cm::kSidrReqPrivateDataSize - cm::kCmaHeaderSize;
    std::memcpy(u.private_data, sreq.private_data.data() + cm::kCmaHeaderSize, std::min(user, sizeof u.private_data));
    u.private_data_len = static_cast<uint8_t>(std::min(user, sizeof u.private_data));
    FillAh(it->second, &u.ah_attr);
    QueueEvent(it->second, kEvConnectRequest, 0, &u, sizeof u, 0, 0, listen_uid, listen_handle);
  }
}

void CmService::OnTimer(uint64_t now_ms) {
  std::vector<uint32_t> handles;
  for (auto& [h, id] : ids_) {
    if (id.state != IdState::kAddrQuery) continue;
    if (now_ms >= id.resolve_deadline_ms) {  // no answer: as Linux's addr_handler, -ETIMEDOUT
      id.state = IdState::kAddrBound;
      QueueEvent(id, kEvAddrError, -ETIMEDOUT);
    } else if (now_ms >= id.resolve_retry_ms) {
      id.resolve_retry_ms = now_ms + 1000;
      if (resolve_ != nullptr && !devices_[id.device].netdev) resolve_(id.device, GidOf(id.src), GidOf(id.dst));
    }
  }
  for (const auto& [h, id] : ids_) {
    if (id.cm && id.cm->deadline_ms() && *id.cm->deadline_ms() <= now_ms) handles.push_back(h);
  }
  for (uint32_t h : handles) {
    auto it = ids_.find(h);
    if (it == ids_.end()) continue;
    Id& id = it->second;
    Apply(id, id.cm->OnTimer(now_ms), nullptr, now_ms);
  }
  for (auto z = zombies_.begin(); z != zombies_.end();) {
    cm::Connection& c = z->second.first;
    if (c.deadline_ms() && *c.deadline_ms() <= now_ms) {
      const cm::Step step = c.OnTimer(now_ms);
      if (step.send) {
        ++counters_.mads_tx;
        send_(z->second.second.first, z->second.second.second, cm::SerializeMad(*step.send));
      }
    }
    if (c.state() == cm::State::kIdle) {
      z = zombies_.erase(z);
    } else {
      ++z;
    }
  }
}

std::optional<uint64_t> CmService::NextDeadline() const {
  std::optional<uint64_t> best;
  auto take = [&](const cm::Connection& c) {
    if (c.deadline_ms() && (!best || *c.deadline_ms() < *best)) best = c.deadline_ms();
  };
  for (const auto& [h, id] : ids_) {
    if (id.cm) take(*id.cm);
    if (id.state == IdState::kAddrQuery) {
      const uint64_t t = std::min(id.resolve_deadline_ms, id.resolve_retry_ms);
      if (!best || t < *best) best = t;
    }
  }
  for (const auto& [k, z] : zombies_) take(z.first);
  return best;
}

std::string CmService::StatusText() const {
  size_t listening = 0;
  for (const auto& [handle, id] : ids_) listening += id.state == IdState::kListen ? 1 : 0;
  std::string out = absl::StrFormat(
      "cm: %zu ids, %zu listening, %zu in time wait, %zu multicast joins; commands %lu (failed %lu, get_event "
      "with none waiting %lu, AF_IB probes %lu), mads rx %lu tx %lu, unmatched %lu, ignored %lu, rej_no_listener %lu",
      ids_.size(), listening, zombies_.size(), mcasts_.size(), counters_.commands, counters_.commands_failed,
      counters_.get_event_empty, counters_.af_ib_probes, counters_.mads_rx, counters_.mads_tx, counters_.unmatched, counters_.ignored,
      counters_.rej_no_listener);
  for (size_t e = 1; e < static_cast<size_t>(cm::MadError::kCount); ++e) {
    if (counters_.mad_errors[e] != 0) {
      absl::StrAppendFormat(&out, ", %s %lu", cm::MadErrorName(static_cast<cm::MadError>(e)), counters_.mad_errors[e]);
    }
  }
  for (size_t d = 1; d < static_cast<size_t>(GsiDrop::kCount); ++d) {
    if (counters_.gsi_drops[d] != 0) {
      absl::StrAppendFormat(&out, ", %s %lu", GsiDropName(static_cast<GsiDrop>(d)), counters_.gsi_drops[d]);
    }
  }
  out += "\n";
  return out;
}

}  // namespace droce::droced
