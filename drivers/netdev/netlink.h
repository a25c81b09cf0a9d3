// The kernel's view of a network interface, through rtnetlink: what a
// netdev-bound droce device takes from the host (doc/netdev.md) — the
// interface's MAC, MTU and state, its addresses, routes and neighbours — and
// the events that change them. droced is the only user (with droce-ctl's
// checks at `link add`); nothing here keeps a private copy of the kernel's
// tables: a route or a neighbour is asked for when it is needed.
//
// Every message is parsed defensively (ParseNetlink): lengths are checked
// against the buffer before anything is read, attributes of the wrong size
// are ignored, and a malformed message ends the parse with an error instead
// of a read past the data (tests/fuzz/netlink_fuzz.cc).
#ifndef DROCE_DRIVERS_NETDEV_NETLINK_H_
#define DROCE_DRIVERS_NETDEV_NETLINK_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "wire/gid.h"

namespace droce::netdev {

using Gid = wire::Gid;
using Mac = std::array<uint8_t, 6>;

struct LinkInfo {
  int ifindex = 0;
  std::string name;
  bool has_mac = false;  // IFLA_ADDRESS of Ethernet's length
  Mac mac{};
  uint32_t mtu = 0;
  uint32_t flags = 0;     // IFF_*
  uint8_t operstate = 0;  // IF_OPER_* (0 when absent)
  uint16_t type = 0;      // ARPHRD_*
  // Administratively up and carrier on (IFF_UP and IFF_LOWER_UP, or
  // IFF_RUNNING where the kernel gives no IFF_LOWER_UP): the port is ACTIVE.
  bool usable() const;
};

struct AddrInfo {
  int ifindex = 0;
  bool ipv6 = false;
  Gid addr{};  // IPv4 as ::ffff:a.b.c.d
  uint8_t prefixlen = 0;
  uint8_t scope = 0;
  uint32_t flags = 0;  // IFA_F_* (IFA_FLAGS when given)
  // An address the host uses: not tentative (DAD still running) and not a
  // duplicate DAD found.
  bool usable() const;
};

struct NeighInfo {
  int ifindex = 0;
  Gid dst{};
  bool has_lladdr = false;
  Mac lladdr{};
  uint16_t state = 0;  // NUD_*
  // A link-layer address the kernel would send to now (REACHABLE, STALE,
  // DELAY, PROBE, PERMANENT, NOARP).
  bool resolved() const;
  // The kernel gave up (FAILED) or the entry says it cannot be reached.
  bool failed() const;
};

struct RouteInfo {
  uint8_t type = 0;  // RTN_*
  int oif = 0;
  bool has_gateway = false;
  Gid gateway{};
  bool has_prefsrc = false;
  Gid prefsrc{};
};

struct NetlinkEvent {
  enum Kind : uint8_t { kNewLink, kDelLink, kNewAddr, kDelAddr, kNewNeigh, kDelNeigh, kRoute, kError, kDone };
  Kind kind = kDone;
  uint32_t seq = 0;
  int error = 0;  // kError: the positive errno (0: an acknowledgement)
  LinkInfo link;
  AddrInfo addr;
  NeighInfo neigh;
  RouteInfo route;
};

// Parses the netlink messages of one receive (`len` bytes). Message types it
// does not know are skipped; a truncated or inconsistent message ends the
// parse with InvalidArgument (what came before it stays in *out).
absl::Status ParseNetlink(const uint8_t* buf, size_t len, std::vector<NetlinkEvent>* out);

// An rtnetlink socket of the calling process's network namespace.
class Netlink {
 public:
  // groups: RTMGRP_* bits whose events ReadEvents delivers (0: queries only).
  static absl::StatusOr<std::unique_ptr<Netlink>> Open(uint32_t groups);
  ~Netlink();
  Netlink(const Netlink&) = delete;
  Netlink& operator=(const Netlink&) = delete;

  // The event socket's descriptor (readable when events wait), or -1.
  int event_fd() const { return event_fd_; }
  // Events that arrived (non-blocking). A lost batch (ENOBUFS: the kernel
  // overflowed our receive buffer) is reported as *overflowed, and the
  // caller re-reads the state it follows.
  absl::Status ReadEvents(std::vector<NetlinkEvent>* out, bool* overflowed);

  // Queries (answers within timeout_ms or DeadlineExceeded).
  absl::StatusOr<LinkInfo> GetLink(const std::string& name);
  absl::StatusOr<LinkInfo> GetLink(int ifindex);
  // Every address of the interface, IPv4 first (the kernel's dump order).
  absl::StatusOr<std::vector<AddrInfo>> GetAddrs(int ifindex);
  // The kernel's route to dst (RTM_GETROUTE): from src if given, out of
  // oif if not 0.
  absl::StatusOr<RouteInfo> GetRoute(const Gid& dst, const Gid* src, int oif);
  // The neighbour entry for dst on ifindex, or nullopt if there is none.
  absl::StatusOr<std::optional<NeighInfo>> GetNeigh(int ifindex, const Gid& dst);
  // Asks the kernel to resolve dst on ifindex (RTM_NEWNEIGH with NTF_USE:
  // the entry is created if missing and its state machine runs, sending ARP
  // or a neighbour solicitation); the answer comes as a neighbour event.
  absl::Status ResolveNeigh(int ifindex, const Gid& dst);

  // The kernel's errno for the last failed query (ENETUNREACH for a route
  // to nowhere, ...), 0 if it did not answer with one.
  int last_error() const { return last_error_; }

  static constexpr int kTimeoutMs = 2000;

 private:
  Netlink() = default;
  // Sends a request and collects its answer (a dump until NLMSG_DONE, or
  // one message / acknowledgement).
  absl::StatusOr<std::vector<NetlinkEvent>> Query(const void* req, size_t len, bool dump);
  int query_fd_ = -1;
  int event_fd_ = -1;
  int last_error_ = 0;  // the kernel's errno of the last query (0: none)
  uint32_t seq_ = 1;
};

inline bool IsIpv4(const Gid& g) { return wire::IsIpv4MappedGid(g); }
inline bool IsLinkLocal(const Gid& g) { return !IsIpv4(g) && g[0] == 0xfe && (g[1] & 0xc0) == 0x80; }

// A RoCE port's path MTU (IBV_MTU_256..IBV_MTU_4096 as 1..5) on an
// interface of MTU iface_mtu whose port receives frames of up to max_frame
// bytes: the largest that leaves room for RoCEv2's headers inside the IP MTU
// (80 bytes, as Linux rxe allows) and for the Ethernet header and a VLAN tag
// in a frame. 0 if even 256 does not fit.
uint8_t RocePathMtu(uint32_t iface_mtu, uint32_t max_frame);
inline std::string FormatIp(const Gid& g) { return wire::GidAddressText(g); }  // 10.0.0.1 or fe80::1

}  // namespace droce::netdev

#endif  // DROCE_DRIVERS_NETDEV_NETLINK_H_
