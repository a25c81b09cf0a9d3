#include "drivers/udp/roce_udp.h"

#include <net/if.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "wire/byte_order.h"
#include "wire/gid.h"
#include "wire/headers.h"
#include "wire/icrc.h"
#include "wire/packet.h"

#ifndef SO_RCVMARK
#define SO_RCVMARK 75
#endif

namespace droce::udp {
namespace {

constexpr uint8_t kV4MappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};

bool IsV4Mapped(const uint8_t* a) { return std::memcmp(a, kV4MappedPrefix, 12) == 0; }

int SetInt(int fd, int level, int name, int value) { return setsockopt(fd, level, name, &value, sizeof value); }

}  // namespace

absl::StatusOr<int> OpenSocket(const SocketConfig& c, uint16_t* bound_port) {
  const int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("UDP socket: ", std::strerror(errno)));
  const auto fail = [fd](const char* what) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
  };
  if (SetInt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0) != 0) return fail("IPV6_V6ONLY");
  if (!c.ifname.empty() &&
      setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, c.ifname.c_str(), static_cast<socklen_t>(c.ifname.size())) != 0) {
    return fail("SO_BINDTODEVICE");
  }
  // What a received frame's headers are rebuilt from (ReadArrival).
  if (SetInt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1) != 0) return fail("IPV6_RECVPKTINFO");
  if (SetInt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1) != 0) return fail("IPV6_RECVTCLASS");
  if (SetInt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1) != 0) return fail("IPV6_RECVHOPLIMIT");
  if (SetInt(fd, IPPROTO_IP, IP_RECVTOS, 1) != 0) return fail("IP_RECVTOS");
  if (SetInt(fd, IPPROTO_IP, IP_RECVTTL, 1) != 0) return fail("IP_RECVTTL");
  if (SetInt(fd, SOL_SOCKET, SO_RCVMARK, 1) != 0) return fail("SO_RCVMARK");
  // RoCEv2 senders (rxe, ConnectX) leave the UDP checksum 0 over IPv6 too.
  if (SetInt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, 1) != 0) return fail("UDP_NO_CHECK6_RX");
  // DF, and so identification 0 on an unconnected socket: what the ICRC of
  // droce's frames covers. Never fragmented: the path MTU fits the interface.
  if (SetInt(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE) != 0) return fail("IP_MTU_DISCOVER");
  if (SetInt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_PROBE) != 0) return fail("IPV6_MTU_DISCOVER");
  // A group's frames sent here reach the host's other processes through
  // droced's switch, not as the kernel's loopback copy.
  if (SetInt(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 0) != 0) return fail("IP_MULTICAST_LOOP");
  if (SetInt(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 0) != 0) return fail("IPV6_MULTICAST_LOOP");
  // A group's datagrams leave by the interface: the PKTINFO each send
  // carries names no interface, and a group has no route of its own.
  if (!c.ifname.empty()) {
    const int ifindex = static_cast<int>(if_nametoindex(c.ifname.c_str()));
    ip_mreqn m{};
    m.imr_ifindex = ifindex;
    if (ifindex == 0 || setsockopt(fd, IPPROTO_IP, IP_MULTICAST_IF, &m, sizeof m) != 0) return fail("IP_MULTICAST_IF");
    if (SetInt(fd, IPPROTO_IPV6, IPV6_MULTICAST_IF, ifindex) != 0) return fail("IPV6_MULTICAST_IF");
  }
  if (c.rcvbuf_bytes > 0 && SetInt(fd, SOL_SOCKET, SO_RCVBUFFORCE, c.rcvbuf_bytes) != 0) {
    (void)SetInt(fd, SOL_SOCKET, SO_RCVBUF, c.rcvbuf_bytes);  // capped by net.core.rmem_max
  }
  if (c.sndbuf_bytes > 0 && SetInt(fd, SOL_SOCKET, SO_SNDBUFFORCE, c.sndbuf_bytes) != 0) {
    (void)SetInt(fd, SOL_SOCKET, SO_SNDBUF, c.sndbuf_bytes);
  }
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_port = htons(c.port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return fail("bind");
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return fail("getsockname");
  *bound_port = ntohs(a.sin6_port);
  return fd;
}

bool ReadArrival(const msghdr& m, Arrival* a) {
  const auto* from = static_cast<const sockaddr_in6*>(m.msg_name);
  if (from == nullptr || m.msg_namelen < sizeof(sockaddr_in6) || from->sin6_family != AF_INET6) return false;
  std::memcpy(a->src.data(), &from->sin6_addr, 16);
  a->src_port = ntohs(from->sin6_port);
  a->ipv6 = !IsV4Mapped(a->src.data());
  a->tclass = 0;
  a->ttl = 64;
  a->ipv4_id = 0;
  a->ipv4_flags_fragment = 0x4000;
  a->has_dst = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    const uint8_t* data = CMSG_DATA(c);
    const size_t len = c->cmsg_len - CMSG_LEN(0);
    int v = 0;
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO && len >= sizeof(in6_pktinfo)) {
      std::memcpy(a->dst.data(), data + offsetof(in6_pktinfo, ipi6_addr), 16);
      a->has_dst = true;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS && len >= sizeof v) {
      std::memcpy(&v, data, sizeof v);
      a->tclass = static_cast<uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT && len >= sizeof v) {
      std::memcpy(&v, data, sizeof v);
      a->ttl = static_cast<uint8_t>(v);
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && len >= 1) {
      a->tclass = data[0];
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL && len >= sizeof v) {
      std::memcpy(&v, data, sizeof v);
      a->ttl = static_cast<uint8_t>(v);
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_MARK && len >= sizeof(uint32_t)) {
      uint32_t mark;
      std::memcpy(&mark, data, sizeof mark);
      if (mark & kMarkValid) {
        a->ipv4_id = static_cast<uint16_t>(mark);
        a->ipv4_flags_fragment = static_cast<uint16_t>(((mark >> 16) & 7) << 13);
      }
    }
  }
  return a->has_dst && IsV4Mapped(a->dst.data()) != a->ipv6;
}

uint8_t* WriteHeaders(const Arrival& a, const std::array<uint8_t, 6>& own_mac, uint8_t* payload, uint32_t len,
                      uint32_t* frame_len) {
  const uint32_t udp_len = wire::kUdpBytes + len;
  uint8_t* udp = payload - wire::kUdpBytes;
  uint8_t* ip = udp - (a.ipv6 ? wire::kIpv6Bytes : wire::kIpv4MinBytes);
  uint8_t* eth = ip - wire::kEthBytes;
  wire::EthWriter e(eth);
  // A group's datagram (droced's socket, a member) goes to the group's MAC.
  const std::optional<std::array<uint8_t, 6>> group = wire::GroupMacOfGid(a.dst);
  e.set_dst_mac(group ? group->data() : own_mac.data());
  std::memset(eth + 6, 0, 6);
  if (a.ipv6) {
    e.set_ether_type(wire::kEtherTypeIpv6);
    wire::Ipv6Writer h(ip);
    h.set_version_class_flow(a.tclass, 0);
    h.set_payload_length(static_cast<uint16_t>(udp_len));
    h.set_next_header(wire::kIpProtoUdp);
    h.set_hop_limit(a.ttl);
    h.set_src(a.src.data());
    h.set_dst(a.dst.data());
  } else {
    e.set_ether_type(wire::kEtherTypeIpv4);
    wire::Ipv4Writer h(ip);
    h.set_version_ihl(0x45);
    h.set_tos(a.tclass);
    h.set_total_length(static_cast<uint16_t>(wire::kIpv4MinBytes + udp_len));
    h.set_id(a.ipv4_id);
    h.set_flags_fragment(a.ipv4_flags_fragment);
    h.set_ttl(a.ttl);
    h.set_protocol(wire::kIpProtoUdp);
    h.set_checksum(0);
    h.set_src(wire::LoadBe32(a.src.data() + 12));
    h.set_dst(wire::LoadBe32(a.dst.data() + 12));
    h.set_checksum(wire::Ipv4HeaderChecksum(ip, wire::kIpv4MinBytes));
  }
  wire::UdpWriter u(udp);
  u.set_src_port(a.src_port);
  u.set_dst_port(kRoceV2Port);
  u.set_length(static_cast<uint16_t>(udp_len));
  u.set_checksum(0);
  *frame_len = static_cast<uint32_t>(payload + len - eth);
  return eth;
}

bool ReadDeparture(const uint8_t* f, uint32_t len, Departure* d) {
  const wire::L3Info l3 = wire::ReadL3(f, len);
  if (l3.ether_type == 0) return false;
  const uint8_t* ip = f + l3.l3_offset;
  uint32_t l4;
  uint32_t ip_end;
  if (l3.ether_type == wire::kEtherTypeIpv4) {
    if (len < l3.l3_offset + wire::kIpv4MinBytes) return false;
    wire::Ipv4View h(ip);
    if (h.version() != 4 || h.header_bytes() != wire::kIpv4MinBytes || h.protocol() != wire::kIpProtoUdp ||
        h.is_fragment()) {
      return false;
    }
    d->ipv6 = false;
    std::memcpy(d->src.data(), kV4MappedPrefix, 12);
    std::memcpy(d->dst.data(), kV4MappedPrefix, 12);
    std::memcpy(d->src.data() + 12, ip + 12, 4);
    std::memcpy(d->dst.data() + 12, ip + 16, 4);
    d->tclass = h.tos();
    d->ttl = h.ttl();
    l4 = l3.l3_offset + wire::kIpv4MinBytes;
    ip_end = l3.l3_offset + h.total_length();
  } else if (l3.ether_type == wire::kEtherTypeIpv6) {
    if (len < l3.l3_offset + wire::kIpv6Bytes) return false;
    wire::Ipv6View h(ip);
    if (h.version() != 6 || h.next_header() != wire::kIpProtoUdp) return false;
    d->ipv6 = true;
    std::memcpy(d->src.data(), h.src(), 16);
    std::memcpy(d->dst.data(), h.dst(), 16);
    d->tclass = h.traffic_class();
    d->ttl = h.hop_limit();
    l4 = l3.l3_offset + wire::kIpv6Bytes;
    ip_end = l4 + h.payload_length();
  } else {
    return false;
  }
  // To a group MAC: a datagram to that group only (not broadcast, not a
  // unicast address behind a group MAC).
  if ((f[0] & 1) != 0) {
    const std::optional<std::array<uint8_t, 6>> group = wire::GroupMacOfGid(d->dst);
    if (!group || std::memcmp(group->data(), f, 6) != 0) return false;
  }
  if (len < l4 + wire::kUdpBytes || ip_end > len) return false;
  wire::UdpView u(f + l4);
  if (u.length() < wire::kUdpBytes || l4 + u.length() != ip_end) return false;
  d->src_port = u.src_port();
  d->dst_port = u.dst_port();
  d->l3_offset = l3.l3_offset;
  d->l4_offset = l4;
  d->payload_offset = l4 + wire::kUdpBytes;
  d->payload_len = u.length() - wire::kUdpBytes;
  return true;
}

void RewriteSourcePort(uint8_t* frame, const Departure& d, uint16_t port) {
  wire::UdpWriter(frame + d.l4_offset).set_src_port(port);
  if (d.payload_len < wire::kIcrcBytes) return;
  const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
  wire::StoreLe32(frame + icrc_at, wire::ComputeIcrc(frame + d.l3_offset, icrc_at - d.l3_offset, d.ipv6));
}

void PrepareMessage(const Departure& d, const uint8_t* frame, sockaddr_in6* name, iovec* iov, char* control,
                    msghdr* m) {
  *name = {};
  name->sin6_family = AF_INET6;
  name->sin6_port = htons(d.dst_port);
  std::memcpy(&name->sin6_addr, d.dst.data(), 16);
  iov->iov_base = const_cast<uint8_t*>(frame + d.payload_offset);
  iov->iov_len = d.payload_len;
  *m = {};
  m->msg_name = name;
  m->msg_namelen = sizeof *name;
  m->msg_iov = iov;
  m->msg_iovlen = 1;
  m->msg_control = control;
  m->msg_controllen = kControlBytes;
  cmsghdr* c = CMSG_FIRSTHDR(m);
  size_t used = 0;
  const auto add = [&](int level, int type, const auto& value) {
    c->cmsg_level = level;
    c->cmsg_type = type;
    c->cmsg_len = CMSG_LEN(sizeof value);
    std::memcpy(CMSG_DATA(c), &value, sizeof value);
    used += CMSG_SPACE(sizeof value);
    c = CMSG_NXTHDR(m, c);
  };
  // The source address (the frame's GID), and the IP header's traffic
  // class (ECN included) and hop limit. An IPv4 datagram of a dual-stack
  // socket takes IPv4's control messages (ip_cmsg_send).
  if (d.ipv6) {
    in6_pktinfo pi{};
    std::memcpy(&pi.ipi6_addr, d.src.data(), 16);
    add(IPPROTO_IPV6, IPV6_PKTINFO, pi);
    add(IPPROTO_IPV6, IPV6_TCLASS, int{d.tclass});
    // (A group's default hop limit is 1, not 64.)
    if (d.ttl != 64 || d.dst[0] == 0xFF) add(IPPROTO_IPV6, IPV6_HOPLIMIT, int{d.ttl});
  } else {
    in_pktinfo pi{};
    std::memcpy(&pi.ipi_spec_dst, d.src.data() + 12, 4);
    add(IPPROTO_IP, IP_PKTINFO, pi);
    add(IPPROTO_IP, IP_TOS, int{d.tclass});
    if (d.ttl != 64 || (d.dst[12] & 0xF0) == 0xE0) add(IPPROTO_IP, IP_TTL, int{d.ttl});
  }
  m->msg_controllen = used;
}

int RecvBatch::ReceiveMessages(int fd, int messages, int iov_per_message, UdpCounters* c) {
  for (int j = 0; j < messages; ++j) {
    msghdr& m = msgs_[j].msg_hdr;
    m.msg_name = &names_[j];
    m.msg_namelen = sizeof names_[j];
    m.msg_iov = &iov_[j * iov_per_message];
    m.msg_iovlen = static_cast<size_t>(iov_per_message);
    m.msg_control = control_[j];
    m.msg_controllen = kControlBytes;
    m.msg_flags = 0;
  }
  ++c->rx_calls;
  const int got = recvmmsg(fd, msgs_, static_cast<unsigned>(messages), MSG_DONTWAIT, nullptr);
  if (got <= 0) {
    ++c->rx_empty_calls;
    return 0;
  }
  return got;
}

int RecvBatch::Receive(int fd, uint8_t* const* bufs, const uint32_t* caps, int n,
                       const std::array<uint8_t, 6>& own_mac, Frame* out, UdpCounters* c) {
  if (n > kMax) n = kMax;
  for (int i = 0; i < n; ++i) iov_[i] = {bufs[i] + kHeadroom, caps[i]};
  const int got = ReceiveMessages(fd, n, 1, c);
  Arrival a;
  for (int i = 0; i < got; ++i) {
    const msghdr& m = msgs_[i].msg_hdr;
    out[i] = {nullptr, 0};
    if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || !ReadArrival(m, &a)) {
      ++c->rx_dropped;
      continue;
    }
    out[i].data = WriteHeaders(a, own_mac, bufs[i] + kHeadroom, msgs_[i].msg_len, &out[i].len);
  }
  c->rx_datagrams += static_cast<uint64_t>(got);
  return got;
}

namespace {

// The segment size of a coalesced datagram (UDP_GRO's control message), 0 if none.
uint32_t CoalescedSegment(const msghdr& m) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int v;
      std::memcpy(&v, CMSG_DATA(c), sizeof v);
      return v > 0 ? static_cast<uint32_t>(v) : 0;
    }
  }
  return 0;
}

}  // namespace

int RecvBatch::ReceiveCoalesced(int fd, uint8_t* const* bufs, const uint32_t* caps, int n, int per_message,
                                uint32_t segment, const std::array<uint8_t, 6>& own_mac, Frame* out, UdpCounters* c,
                                uint32_t* seen_segment) {
  if (n > kMax) n = kMax;
  messages_ = 0;
  if (per_message < 1 || per_message > n || segment == 0) return 0;
  messages_ = n / per_message;
  per_message_ = per_message;
  segment_ = segment;
  for (int i = 0; i < messages_ * per_message; ++i) {
    bufs_[i] = bufs[i];
    caps_[i] = caps[i];
    iov_[i] = {bufs[i] + kHeadroom, segment};
  }
  return std::max(ReceiveCoalescedAgain(fd, own_mac, out, c, seen_segment), 0);
}

int RecvBatch::ReceiveCoalescedAgain(int fd, const std::array<uint8_t, 6>& own_mac, Frame* out, UdpCounters* c,
                                     uint32_t* seen_segment) {
  if (messages_ == 0) return -1;
  const int per_message = per_message_;
  const uint32_t segment = segment_;
  uint8_t* const* bufs = bufs_;
  const uint32_t* caps = caps_;
  const int got = ReceiveMessages(fd, messages_, per_message, c);
  Arrival a;
  for (int j = 0; j < got; ++j) {
    const msghdr& m = msgs_[j].msg_hdr;
    Frame* o = out + j * per_message;
    uint8_t* const* b = bufs + j * per_message;
    for (int i = 0; i < per_message; ++i) o[i] = {nullptr, 0};
    const uint32_t total = msgs_[j].msg_len;
    const uint32_t coalesced = CoalescedSegment(m);
    const uint32_t size = coalesced != 0 ? coalesced : total;
    if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || !ReadArrival(m, &a) || size == 0) {
      ++c->rx_dropped;
      continue;
    }
    const uint32_t segments = (total + size - 1) / size;
    c->rx_datagrams += segments;
    if (coalesced != 0) {
      *seen_segment = coalesced;
      if (segments > 1) c->rx_coalesced += segments;
    }
    if (size != segment && segments > 1) {
      // Not one segment per buffer: gathered, then each copied to its own.
      if (scratch_.size() < total) {  // ReserveForCoalesced was not called
        ++c->rx_dropped;
        continue;
      }
      ++c->rx_gro_copied;
      uint32_t at = 0;
      for (int i = 0; i < per_message && at < total; ++i) {
        const uint32_t k = std::min(segment, total - at);
        std::memcpy(scratch_.data() + at, b[i] + kHeadroom, k);
        at += k;
      }
      for (uint32_t k = 0; k < segments; ++k) {
        const uint32_t len = std::min(size, total - k * size);
        if (k >= static_cast<uint32_t>(per_message) || len > caps[j * per_message + k]) {
          ++c->rx_dropped;
          continue;
        }
        std::memcpy(b[k] + kHeadroom, scratch_.data() + k * size, len);
      }
    } else if (segments == 1 && total > segment) {
      // One datagram longer than the read size: its tail went to the next buffers.
      if (total > caps[j * per_message]) {
        ++c->rx_dropped;
        continue;
      }
      ++c->rx_gro_copied;
      uint32_t at = segment;
      for (int i = 1; i < per_message && at < total; ++i) {
        const uint32_t k = std::min(segment, total - at);
        std::memmove(b[0] + kHeadroom + at, b[i] + kHeadroom, k);
        at += k;
      }
    }
    if (segments == 1) {
      o[0].data = WriteHeaders(a, own_mac, b[0] + kHeadroom, total, &o[0].len);
      continue;
    }
    for (uint32_t k = 0; k < segments && k < static_cast<uint32_t>(per_message); ++k) {
      const uint32_t len = std::min(size, total - k * size);
      if (len > caps[j * per_message + k]) continue;
      o[k].data = WriteHeaders(a, own_mac, b[k] + kHeadroom, len, &o[k].len);
    }
  }
  return got * per_message;
}

bool SendBatch::Joins(const Departure& d) const {
  if (!gso_ || m_ == 0 || !last_open_ || !d.ipv6 || !last_.ipv6) return false;
  const int segments = frames_of_[m_ - 1];
  return d.payload_len > 0 && d.payload_len <= last_.payload_len && segments < kMaxSegments &&
         last_bytes_ + d.payload_len <= kMaxSegmentedBytes && d.dst_port == last_.dst_port &&
         d.tclass == last_.tclass && d.ttl == last_.ttl && d.dst == last_.dst && d.src == last_.src;
}

bool SendBatch::Add(uint8_t* frame, uint32_t len, const Gather& g, uint16_t port, UdpCounters* c) {
  Departure d;
  // The headers are in frame[0, g.at) (ReadDeparture reads no further than
  // the UDP header); the lengths they state count the gathered bytes.
  if (n_ == kMax || g.at > len || !ReadDeparture(frame, len + g.len, &d)) return false;
  if (g.len > 0 && (g.at < d.payload_offset || d.src_port != port)) return false;
  if (d.src_port != port) {
    RewriteSourcePort(frame, d, port);
    ++c->tx_port_rewritten;
  }
  // The datagram's payload: one iovec, or three around the gathered bytes.
  iovec* iov = &iov_[iovs_];
  int pieces = 1;
  if (g.len == 0) {
    iov[0] = {frame + d.payload_offset, d.payload_len};
  } else {
    iov[0] = {frame + d.payload_offset, g.at - d.payload_offset};
    iov[1] = {const_cast<uint8_t*>(g.data), g.len};
    iov[2] = {frame + g.at, len - g.at};
    pieces = 3;
    ++c->tx_gathered;
  }
  iovs_ += pieces;
  if (Joins(d)) {
    msghdr& m = msgs_[m_ - 1].msg_hdr;
    if (frames_of_[m_ - 1] == 1) {  // a second segment: the message is segmented from now on
      auto* cm = reinterpret_cast<cmsghdr*>(static_cast<char*>(m.msg_control) + m.msg_controllen);
      cm->cmsg_level = SOL_UDP;
      cm->cmsg_type = UDP_SEGMENT;
      cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t size = static_cast<uint16_t>(last_.payload_len);
      std::memcpy(CMSG_DATA(cm), &size, sizeof size);
      m.msg_controllen += CMSG_SPACE(sizeof(uint16_t));
    }
    m.msg_iovlen += static_cast<size_t>(pieces);
    ++frames_of_[m_ - 1];
    last_bytes_ += d.payload_len;
    last_open_ = d.payload_len == last_.payload_len;
    ++n_;
    return true;
  }
  PrepareMessage(d, frame, &names_[m_], iov, control_[m_], &msgs_[m_].msg_hdr);
  if (g.len > 0) {  // PrepareMessage's one iovec is the first of three
    iov[0] = {frame + d.payload_offset, g.at - d.payload_offset};
    msgs_[m_].msg_hdr.msg_iovlen = 3;
  }
  frames_of_[m_] = 1;
  last_ = d;
  last_bytes_ = d.payload_len;
  last_open_ = true;
  ++m_;
  ++n_;
  return true;
}

int SendBatch::Send(int fd, UdpCounters* c) {
  int done = 0;  // frames
  int sent_msgs = 0;
  while (sent_msgs < m_) {
    ++c->tx_calls;
    const int sent = sendmmsg(fd, msgs_ + sent_msgs, static_cast<unsigned>(m_ - sent_msgs), MSG_DONTWAIT);
    if (sent > 0) {
      for (int i = sent_msgs; i < sent_msgs + sent; ++i) {
        done += frames_of_[i];
        c->tx_datagrams += static_cast<uint64_t>(frames_of_[i]);
        if (frames_of_[i] > 1) c->tx_gso_datagrams += static_cast<uint64_t>(frames_of_[i]);
      }
      sent_msgs += sent;
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == ENOBUFS || errno == EINTR)) {
      ++c->tx_would_block;
      break;
    }
    // This message can never leave (no route, its source address gone, too
    // big): dropped, as a NIC drops what it cannot send. A segmented one the
    // kernel refuses (EIO: no checksum offload on the route's device;
    // EINVAL) turns segmentation off; its frames are lost once, as a
    // dropped frame is, and the transport sends them again one by one.
    if (frames_of_[sent_msgs] > 1 && (errno == EIO || errno == EINVAL)) {
      gso_ = false;
      ++c->tx_gso_refused;
    }
    c->tx_dropped += static_cast<uint64_t>(frames_of_[sent_msgs]);
    done += frames_of_[sent_msgs];
    ++sent_msgs;
  }
  n_ = 0;
  m_ = 0;
  iovs_ = 0;
  return done;
}

}  // namespace droce::udp
