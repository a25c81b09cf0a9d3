#include "drivers/netdev/netlink.h"

#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_arp.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace droce::netdev {
namespace {

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1'000'000;
}

// Netlink aligns messages and attributes to 4 bytes.
constexpr size_t Align4(size_t n) { return (n + 3) & ~size_t{3}; }

// Walks the attributes in [p, p + len): f(type, data, data_len) for each
// well-formed one. False if one overruns the area (the message is bad).
template <typename F>
bool ForEachAttr(const uint8_t* p, size_t len, F&& f) {
  size_t off = 0;
  while (off + sizeof(rtattr) <= len) {
    rtattr a;
    std::memcpy(&a, p + off, sizeof a);
    if (a.rta_len < sizeof(rtattr) || a.rta_len > len - off) return false;
    f(static_cast<uint16_t>(a.rta_type & NLA_TYPE_MASK), p + off + sizeof(rtattr), size_t{a.rta_len} - sizeof(rtattr));
    off += Align4(a.rta_len);
  }
  return true;
}

// An address attribute of the family's size, as a GID (IPv4 mapped).
bool ReadAddr(uint8_t family, const uint8_t* data, size_t len, Gid* out) {
  if (family == AF_INET && len == 4) {
    *out = Gid{};
    (*out)[10] = (*out)[11] = 0xFF;
    std::memcpy(out->data() + 12, data, 4);
    return true;
  }
  if (family == AF_INET6 && len == 16) {
    std::memcpy(out->data(), data, 16);
    return true;
  }
  return false;
}

template <typename T>
bool ReadScalar(const uint8_t* data, size_t len, T* out) {
  if (len != sizeof(T)) return false;
  std::memcpy(out, data, sizeof(T));
  return true;
}

bool ParseLink(const uint8_t* body, size_t len, LinkInfo* l) {
  ifinfomsg m;
  if (len < sizeof m) return false;
  std::memcpy(&m, body, sizeof m);
  l->ifindex = m.ifi_index;
  l->flags = m.ifi_flags;
  l->type = m.ifi_type;
  return ForEachAttr(body + Align4(sizeof m), len - std::min(len, Align4(sizeof m)),
                     [&](uint16_t type, const uint8_t* d, size_t n) {
                       switch (type) {
                         case IFLA_IFNAME:
                           if (n > 0 && n <= IFNAMSIZ && std::memchr(d, 0, n) != nullptr) {
                             l->name = reinterpret_cast<const char*>(d);
                           }
                           break;
                         case IFLA_ADDRESS:
                           if (n == 6) {
                             std::memcpy(l->mac.data(), d, 6);
                             l->has_mac = true;
                           }
                           break;
                         case IFLA_MTU:
                           ReadScalar(d, n, &l->mtu);
                           break;
                         case IFLA_OPERSTATE:
                           ReadScalar(d, n, &l->operstate);
                           break;
                         default:
                           break;
                       }
                     });
}

bool ParseAddr(const uint8_t* body, size_t len, AddrInfo* a) {
  ifaddrmsg m;
  if (len < sizeof m) return false;
  std::memcpy(&m, body, sizeof m);
  a->ifindex = static_cast<int>(m.ifa_index);
  a->ipv6 = m.ifa_family == AF_INET6;
  a->prefixlen = m.ifa_prefixlen;
  a->scope = m.ifa_scope;
  a->flags = m.ifa_flags;
  bool have_local = false, have_address = false;
  Gid local{}, address{};
  const bool ok = ForEachAttr(body + Align4(sizeof m), len - std::min(len, Align4(sizeof m)),
                              [&](uint16_t type, const uint8_t* d, size_t n) {
                                if (type == IFA_LOCAL) have_local = ReadAddr(m.ifa_family, d, n, &local);
                                if (type == IFA_ADDRESS) have_address = ReadAddr(m.ifa_family, d, n, &address);
                                if (type == IFA_FLAGS) ReadScalar(d, n, &a->flags);
                              });
  if (!ok || (m.ifa_family != AF_INET && m.ifa_family != AF_INET6)) return false;
  // IPv4: IFA_LOCAL is the interface's own address (IFA_ADDRESS is the peer
  // of a point-to-point link); IPv6 gives IFA_ADDRESS (and IFA_LOCAL only
  // for point-to-point, where it is again ours).
  if (have_local) {
    a->addr = local;
  } else if (have_address) {
    a->addr = address;
  } else {
    return false;
  }
  return true;
}

bool ParseNeigh(const uint8_t* body, size_t len, NeighInfo* nb) {
  ndmsg m;
  if (len < sizeof m) return false;
  std::memcpy(&m, body, sizeof m);
  nb->ifindex = m.ndm_ifindex;
  nb->state = m.ndm_state;
  bool have_dst = false;
  const bool ok = ForEachAttr(body + Align4(sizeof m), len - std::min(len, Align4(sizeof m)),
                              [&](uint16_t type, const uint8_t* d, size_t n) {
                                if (type == NDA_DST) have_dst = ReadAddr(m.ndm_family, d, n, &nb->dst);
                                if (type == NDA_LLADDR && n == 6) {
                                  std::memcpy(nb->lladdr.data(), d, 6);
                                  nb->has_lladdr = true;
                                }
                              });
  return ok && have_dst;
}

bool ParseRoute(const uint8_t* body, size_t len, RouteInfo* r) {
  rtmsg m;
  if (len < sizeof m) return false;
  std::memcpy(&m, body, sizeof m);
  r->type = m.rtm_type;
  return ForEachAttr(body + Align4(sizeof m), len - std::min(len, Align4(sizeof m)),
                     [&](uint16_t type, const uint8_t* d, size_t n) {
                       if (type == RTA_OIF) {
                         uint32_t oif = 0;
                         if (ReadScalar(d, n, &oif)) r->oif = static_cast<int>(oif);
                       }
                       if (type == RTA_GATEWAY) r->has_gateway = ReadAddr(m.rtm_family, d, n, &r->gateway);
                       if (type == RTA_PREFSRC) r->has_prefsrc = ReadAddr(m.rtm_family, d, n, &r->prefsrc);
                     });
}

// Appends one attribute to a request buffer.
void PutAttr(std::vector<uint8_t>* b, uint16_t type, const void* data, size_t len) {
  rtattr a{static_cast<unsigned short>(sizeof(rtattr) + len), type};
  const size_t at = b->size();
  b->resize(at + Align4(sizeof a + len), 0);
  std::memcpy(b->data() + at, &a, sizeof a);
  std::memcpy(b->data() + at + sizeof a, data, len);
}

// The family and raw bytes of a GID as an address.
uint8_t FamilyOf(const Gid& g) { return IsIpv4(g) ? AF_INET : AF_INET6; }
const uint8_t* RawOf(const Gid& g) { return IsIpv4(g) ? g.data() + 12 : g.data(); }
size_t RawLen(const Gid& g) { return IsIpv4(g) ? 4 : 16; }

template <typename Body>
std::vector<uint8_t> Request(uint16_t type, uint16_t flags, const Body& body) {
  std::vector<uint8_t> b(NLMSG_HDRLEN + Align4(sizeof body), 0);
  nlmsghdr h{};
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  std::memcpy(b.data(), &h, sizeof h);
  std::memcpy(b.data() + NLMSG_HDRLEN, &body, sizeof body);
  return b;
}

int OpenSocket(uint32_t groups, bool nonblock) {
  const int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), NETLINK_ROUTE);
  if (fd < 0) return -1;
  const int rcvbuf = 1 << 20;
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_nl sa{};
  sa.nl_family = AF_NETLINK;
  sa.nl_groups = groups;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

}  // namespace

bool LinkInfo::usable() const {
  if ((flags & IFF_UP) == 0) return false;
  return (flags & IFF_LOWER_UP) != 0 || (flags & IFF_RUNNING) != 0;
}

bool AddrInfo::usable() const { return (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)) == 0; }

bool NeighInfo::resolved() const {
  return has_lladdr && (state & (NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP)) != 0;
}

bool NeighInfo::failed() const { return (state & NUD_FAILED) != 0; }

uint8_t RocePathMtu(uint32_t iface_mtu, uint32_t max_frame) {
  constexpr uint32_t kRoceHeaders = 80, kEthernetHeader = 18;
  for (uint8_t e = 5; e >= 1; --e) {
    const uint32_t m = 128u << e;
    if (m + kRoceHeaders <= iface_mtu && m + kRoceHeaders + kEthernetHeader <= max_frame) return e;
  }
  return 0;
}

absl::Status ParseNetlink(const uint8_t* buf, size_t len, std::vector<NetlinkEvent>* out) {
  size_t off = 0;
  while (off < len) {
    if (len - off < sizeof(nlmsghdr)) return absl::InvalidArgumentError("truncated netlink header");
    nlmsghdr h;
    std::memcpy(&h, buf + off, sizeof h);
    if (h.nlmsg_len < sizeof h || h.nlmsg_len > len - off) {
      return absl::InvalidArgumentError(absl::StrFormat("netlink message length %u (%zu bytes left)", h.nlmsg_len,
                                                        len - off));
    }
    const uint8_t* body = buf + off + NLMSG_HDRLEN;
    const size_t body_len = h.nlmsg_len - std::min<size_t>(h.nlmsg_len, NLMSG_HDRLEN);
    NetlinkEvent e;
    e.seq = h.nlmsg_seq;
    bool ok = true, emit = true;
    switch (h.nlmsg_type) {
      case NLMSG_DONE:
        e.kind = NetlinkEvent::kDone;
        break;
      case NLMSG_ERROR: {
        int32_t err = 0;
        ok = body_len >= sizeof err;
        if (ok) std::memcpy(&err, body, sizeof err);
        e.kind = NetlinkEvent::kError;
        e.error = err < 0 && err > -4096 ? -err : (err == 0 ? 0 : EPROTO);
        break;
      }
      case RTM_NEWLINK:
      case RTM_DELLINK:
        e.kind = h.nlmsg_type == RTM_NEWLINK ? NetlinkEvent::kNewLink : NetlinkEvent::kDelLink;
        ok = ParseLink(body, body_len, &e.link);
        break;
      case RTM_NEWADDR:
      case RTM_DELADDR: {
        e.kind = h.nlmsg_type == RTM_NEWADDR ? NetlinkEvent::kNewAddr : NetlinkEvent::kDelAddr;
        // Families other than IP (none today) are no address of ours.
        uint8_t family = 0;
        if (body_len >= 1) std::memcpy(&family, body, 1);
        if (family != AF_INET && family != AF_INET6) {
          emit = false;
          break;
        }
        ok = ParseAddr(body, body_len, &e.addr);
        break;
      }
      case RTM_NEWNEIGH:
      case RTM_DELNEIGH: {
        e.kind = h.nlmsg_type == RTM_NEWNEIGH ? NetlinkEvent::kNewNeigh : NetlinkEvent::kDelNeigh;
        uint8_t family = 0;
        if (body_len >= 1) std::memcpy(&family, body, 1);
        if (family != AF_INET && family != AF_INET6) {  // bridge FDB entries and the like
          emit = false;
          break;
        }
        ok = ParseNeigh(body, body_len, &e.neigh);
        break;
      }
      case RTM_NEWROUTE:
        e.kind = NetlinkEvent::kRoute;
        ok = ParseRoute(body, body_len, &e.route);
        break;
      default:
        emit = false;  // NLMSG_NOOP, NLMSG_OVERRUN, types we did not ask for
        break;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrFormat("malformed netlink message of type %u", h.nlmsg_type));
    }
    if (emit) out->push_back(std::move(e));
    off += Align4(h.nlmsg_len);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Netlink>> Netlink::Open(uint32_t groups) {
  std::unique_ptr<Netlink> n(new Netlink());
  n->query_fd_ = OpenSocket(0, false);
  if (n->query_fd_ < 0) return absl::UnavailableError(absl::StrCat("netlink socket: ", std::strerror(errno)));
  if (groups != 0) {
    n->event_fd_ = OpenSocket(groups, true);
    if (n->event_fd_ < 0) return absl::UnavailableError(absl::StrCat("netlink event socket: ", std::strerror(errno)));
  }
  n->seq_ = static_cast<uint32_t>(NowMs());
  return n;
}

Netlink::~Netlink() {
  if (query_fd_ >= 0) close(query_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

absl::Status Netlink::ReadEvents(std::vector<NetlinkEvent>* out, bool* overflowed) {
  *overflowed = false;
  if (event_fd_ < 0) return absl::OkStatus();
  alignas(8) static thread_local uint8_t buf[64 * 1024];
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = recv(event_fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return absl::OkStatus();
      if (errno == ENOBUFS) {
        *overflowed = true;
        continue;
      }
      return absl::UnavailableError(absl::StrCat("netlink: ", std::strerror(errno)));
    }
    absl::Status s = ParseNetlink(buf, static_cast<size_t>(n), out);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<NetlinkEvent>> Netlink::Query(const void* req, size_t len, bool dump) {
  const uint32_t seq = ++seq_;
  last_error_ = 0;
  std::vector<uint8_t> msg(static_cast<const uint8_t*>(req), static_cast<const uint8_t*>(req) + len);
  nlmsghdr h;
  std::memcpy(&h, msg.data(), sizeof h);
  h.nlmsg_len = static_cast<uint32_t>(len);
  h.nlmsg_seq = seq;
  std::memcpy(msg.data(), &h, sizeof h);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (sendto(query_fd_, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) !=
      static_cast<ssize_t>(msg.size())) {
    return absl::UnavailableError(absl::StrCat("netlink send: ", std::strerror(errno)));
  }
  std::vector<NetlinkEvent> got;
  alignas(8) std::vector<uint8_t> buf(64 * 1024);
  const uint64_t deadline = NowMs() + kTimeoutMs;
  while (true) {
    const uint64_t now = NowMs();
    if (now >= deadline) return absl::DeadlineExceededError("netlink: no answer");
    pollfd pfd{query_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(deadline - now)) <= 0) continue;
    const ssize_t n = recv(query_fd_, buf.data(), buf.size(), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(absl::StrCat("netlink receive: ", std::strerror(errno)));
    }
    std::vector<NetlinkEvent> batch;
    absl::Status s = ParseNetlink(buf.data(), static_cast<size_t>(n), &batch);
    if (!s.ok()) return s;
    for (NetlinkEvent& e : batch) {
      if (e.seq != seq) continue;  // an answer to an earlier request that timed out
      if (e.kind == NetlinkEvent::kError) {
        last_error_ = e.error;
        if (e.error != 0) return absl::UnavailableError(std::strerror(e.error));
        return got;  // an acknowledgement
      }
      if (e.kind == NetlinkEvent::kDone) return got;
      got.push_back(std::move(e));
      if (!dump) return got;
    }
  }
}

absl::StatusOr<LinkInfo> Netlink::GetLink(int ifindex) {
  ifinfomsg m{};
  m.ifi_family = AF_UNSPEC;
  m.ifi_index = ifindex;
  std::vector<uint8_t> req = Request(RTM_GETLINK, NLM_F_REQUEST, m);
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  PutAttr(&req, IFLA_EXT_MASK, &mask, sizeof mask);
  absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), false);
  if (!r.ok()) return r.status();
  if (r->empty() || (*r)[0].kind != NetlinkEvent::kNewLink) return absl::NotFoundError("no such interface");
  return (*r)[0].link;
}

absl::StatusOr<LinkInfo> Netlink::GetLink(const std::string& name) {
  if (name.empty() || name.size() >= IFNAMSIZ) return absl::InvalidArgumentError("bad interface name");
  ifinfomsg m{};
  m.ifi_family = AF_UNSPEC;
  std::vector<uint8_t> req = Request(RTM_GETLINK, NLM_F_REQUEST, m);
  PutAttr(&req, IFLA_IFNAME, name.c_str(), name.size() + 1);
  const uint32_t mask = RTEXT_FILTER_SKIP_STATS;
  PutAttr(&req, IFLA_EXT_MASK, &mask, sizeof mask);
  absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), false);
  if (!r.ok()) {
    if (last_error_ == ENODEV) return absl::NotFoundError(absl::StrCat("no interface ", name));
    return r.status();
  }
  if (r->empty() || (*r)[0].kind != NetlinkEvent::kNewLink) return absl::NotFoundError(absl::StrCat("no interface ", name));
  return (*r)[0].link;
}

absl::StatusOr<std::vector<AddrInfo>> Netlink::GetAddrs(int ifindex) {
  std::vector<AddrInfo> out;
  for (uint8_t family : {uint8_t{AF_INET}, uint8_t{AF_INET6}}) {
    ifaddrmsg m{};
    m.ifa_family = family;
    m.ifa_index = static_cast<uint32_t>(ifindex);
    std::vector<uint8_t> req = Request(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, m);
    absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), true);
    if (!r.ok()) return r.status();
    for (const NetlinkEvent& e : *r) {
      if (e.kind == NetlinkEvent::kNewAddr && e.addr.ifindex == ifindex) out.push_back(e.addr);
    }
  }
  return out;
}

absl::StatusOr<RouteInfo> Netlink::GetRoute(const Gid& dst, const Gid* src, int oif) {
  rtmsg m{};
  m.rtm_family = FamilyOf(dst);
  m.rtm_dst_len = static_cast<uint8_t>(RawLen(dst) * 8);
  if (src != nullptr) m.rtm_src_len = static_cast<uint8_t>(RawLen(*src) * 8);
  std::vector<uint8_t> req = Request(RTM_GETROUTE, NLM_F_REQUEST, m);
  PutAttr(&req, RTA_DST, RawOf(dst), RawLen(dst));
  if (src != nullptr) {
    if (FamilyOf(*src) != FamilyOf(dst)) return absl::InvalidArgumentError("source and destination families differ");
    PutAttr(&req, RTA_SRC, RawOf(*src), RawLen(*src));
  }
  if (oif > 0) {
    const uint32_t o = static_cast<uint32_t>(oif);
    PutAttr(&req, RTA_OIF, &o, sizeof o);
  }
  absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), false);
  if (!r.ok()) return r.status();
  if (r->empty() || (*r)[0].kind != NetlinkEvent::kRoute) return absl::NotFoundError("no route");
  return (*r)[0].route;
}

absl::StatusOr<std::optional<NeighInfo>> Netlink::GetNeigh(int ifindex, const Gid& dst) {
  ndmsg m{};
  m.ndm_family = FamilyOf(dst);
  m.ndm_ifindex = ifindex;
  std::vector<uint8_t> req = Request(RTM_GETNEIGH, NLM_F_REQUEST, m);
  PutAttr(&req, NDA_DST, RawOf(dst), RawLen(dst));
  absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), false);
  if (!r.ok()) {
    if (last_error_ == ENOENT) return std::optional<NeighInfo>();
    return r.status();
  }
  if (r->empty() || (*r)[0].kind != NetlinkEvent::kNewNeigh) return std::optional<NeighInfo>();
  return std::optional<NeighInfo>((*r)[0].neigh);
}

absl::Status Netlink::ResolveNeigh(int ifindex, const Gid& dst) {
  ndmsg m{};
  m.ndm_family = FamilyOf(dst);
  m.ndm_ifindex = ifindex;
  m.ndm_state = NUD_NONE;
  m.ndm_flags = NTF_USE;
  std::vector<uint8_t> req =
      Request(RTM_NEWNEIGH, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, m);
  PutAttr(&req, NDA_DST, RawOf(dst), RawLen(dst));
  absl::StatusOr<std::vector<NetlinkEvent>> r = Query(req.data(), req.size(), false);
  return r.status();
}

}  // namespace droce::netdev
