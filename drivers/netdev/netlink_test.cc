#include "drivers/netdev/netlink.h"

#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <random>

#include <gtest/gtest.h>

namespace droce::netdev {
namespace {

// Builds netlink messages as the kernel lays them out.
class Msg {
 public:
  template <typename Body>
  Msg(uint16_t type, const Body& body, uint32_t seq = 7) {
    nlmsghdr h{};
    h.nlmsg_type = type;
    h.nlmsg_seq = seq;
    Put(&h, sizeof h);
    Put(&body, sizeof body);
  }
  Msg& Attr(uint16_t type, const void* data, size_t len) {
    rtattr a{static_cast<unsigned short>(sizeof(rtattr) + len), type};
    Put(&a, sizeof a);
    Put(data, len);
    return *this;
  }
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> b = b_;
    const uint32_t len = static_cast<uint32_t>(b.size());
    std::memcpy(b.data(), &len, 4);
    return b;
  }

 private:
  void Put(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
    b_.resize((b_.size() + 3) & ~size_t{3}, 0);
  }
  std::vector<uint8_t> b_;
};

std::vector<NetlinkEvent> Parse(const std::vector<uint8_t>& b, absl::Status* status = nullptr) {
  std::vector<NetlinkEvent> out;
  absl::Status s = ParseNetlink(b.data(), b.size(), &out);
  if (status != nullptr) *status = s;
  else EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(ParseNetlink, Link) {
  ifinfomsg m{};
  m.ifi_index = 6;
  m.ifi_flags = IFF_UP | IFF_LOWER_UP | IFF_RUNNING;
  const uint8_t mac[6] = {0x1e, 0x22, 0x14, 0xb8, 0x3a, 0x29};
  const uint32_t mtu = 1500;
  const uint8_t oper = 6;
  auto b = Msg(RTM_NEWLINK, m).Attr(IFLA_IFNAME, "veth0", 6).Attr(IFLA_ADDRESS, mac, 6).Attr(IFLA_MTU, &mtu, 4)
               .Attr(IFLA_OPERSTATE, &oper, 1).Bytes();
  auto ev = Parse(b);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, NetlinkEvent::kNewLink);
  EXPECT_EQ(ev[0].link.ifindex, 6);
  EXPECT_EQ(ev[0].link.name, "veth0");
  EXPECT_TRUE(ev[0].link.has_mac);
  EXPECT_EQ(ev[0].link.mac[5], 0x29);
  EXPECT_EQ(ev[0].link.mtu, 1500u);
  EXPECT_TRUE(ev[0].link.usable());
  m.ifi_flags = IFF_UP;  // no carrier
  EXPECT_FALSE(Parse(Msg(RTM_DELLINK, m).Bytes())[0].link.usable());
}

TEST(ParseNetlink, AttributesOfTheWrongSizeAreIgnored) {
  ifinfomsg m{};
  const uint8_t long_mac[20] = {};
  const uint16_t short_mtu = 9;
  auto ev = Parse(Msg(RTM_NEWLINK, m).Attr(IFLA_ADDRESS, long_mac, 20).Attr(IFLA_MTU, &short_mtu, 2)
                      .Attr(IFLA_IFNAME, "no-terminator", 13).Bytes());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_FALSE(ev[0].link.has_mac);
  EXPECT_EQ(ev[0].link.mtu, 0u);
  EXPECT_EQ(ev[0].link.name, "");
}

TEST(ParseNetlink, Addresses) {
  ifaddrmsg m{};
  m.ifa_family = AF_INET;
  m.ifa_prefixlen = 24;
  m.ifa_index = 6;
  const uint8_t local[4] = {10, 0, 0, 1}, peer[4] = {10, 0, 0, 9};
  auto ev = Parse(Msg(RTM_NEWADDR, m).Attr(IFA_ADDRESS, peer, 4).Attr(IFA_LOCAL, local, 4).Bytes());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].addr.addr, wire::Ipv4MappedGid(0x0a000001));  // IFA_LOCAL wins
  EXPECT_EQ(ev[0].addr.prefixlen, 24);
  EXPECT_TRUE(ev[0].addr.usable());
  ifaddrmsg m6{};
  m6.ifa_family = AF_INET6;
  m6.ifa_index = 6;
  m6.ifa_flags = IFA_F_TENTATIVE;
  uint8_t a6[16] = {0xfe, 0x80};
  a6[15] = 1;
  ev = Parse(Msg(RTM_DELADDR, m6).Attr(IFA_ADDRESS, a6, 16).Bytes());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, NetlinkEvent::kDelAddr);
  EXPECT_EQ(ev[0].addr.addr[0], 0xfe);
  EXPECT_FALSE(ev[0].addr.usable());  // DAD not done
  const uint32_t flags = 0;
  EXPECT_TRUE(Parse(Msg(RTM_NEWADDR, m6).Attr(IFA_ADDRESS, a6, 16).Attr(IFA_FLAGS, &flags, 4).Bytes())[0].addr.usable());
  // An IPv4 message carrying a 16-byte address has none: malformed.
  absl::Status s;
  Parse(Msg(RTM_NEWADDR, m).Attr(IFA_LOCAL, a6, 16).Bytes(), &s);
  EXPECT_FALSE(s.ok());
}

TEST(ParseNetlink, NeighboursRoutesErrorsAndOtherFamilies) {
  ndmsg n{};
  n.ndm_family = AF_INET;
  n.ndm_ifindex = 6;
  n.ndm_state = NUD_REACHABLE;
  const uint8_t dst[4] = {10, 0, 0, 2}, ll[6] = {2, 0, 0, 0, 0, 2};
  std::vector<uint8_t> b = Msg(RTM_NEWNEIGH, n).Attr(NDA_DST, dst, 4).Attr(NDA_LLADDR, ll, 6).Bytes();
  rtmsg r{};
  r.rtm_family = AF_INET;
  r.rtm_type = RTN_UNICAST;
  const uint32_t oif = 6;
  const uint8_t gw[4] = {10, 0, 0, 254}, src[4] = {10, 0, 0, 1};
  auto rb = Msg(RTM_NEWROUTE, r).Attr(RTA_OIF, &oif, 4).Attr(RTA_GATEWAY, gw, 4).Attr(RTA_PREFSRC, src, 4).Bytes();
  b.insert(b.end(), rb.begin(), rb.end());
  ndmsg bridge{};
  bridge.ndm_family = AF_BRIDGE;  // an FDB entry: skipped
  auto bb = Msg(RTM_NEWNEIGH, bridge).Attr(NDA_LLADDR, ll, 6).Bytes();
  b.insert(b.end(), bb.begin(), bb.end());
  nlmsgerr e{};
  e.error = -ENETUNREACH;
  auto eb = Msg(NLMSG_ERROR, e).Bytes();
  b.insert(b.end(), eb.begin(), eb.end());
  auto ev = Parse(b);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_TRUE(ev[0].neigh.resolved());
  EXPECT_EQ(ev[0].neigh.dst, wire::Ipv4MappedGid(0x0a000002));
  EXPECT_EQ(ev[1].kind, NetlinkEvent::kRoute);
  EXPECT_EQ(ev[1].route.oif, 6);
  EXPECT_TRUE(ev[1].route.has_gateway);
  EXPECT_EQ(ev[1].route.gateway, wire::Ipv4MappedGid(0x0a0000fe));
  EXPECT_EQ(ev[1].route.prefsrc, wire::Ipv4MappedGid(0x0a000001));
  EXPECT_EQ(ev[2].kind, NetlinkEvent::kError);
  EXPECT_EQ(ev[2].error, ENETUNREACH);
  n.ndm_state = NUD_INCOMPLETE;
  EXPECT_FALSE(Parse(Msg(RTM_NEWNEIGH, n).Attr(NDA_DST, dst, 4).Bytes())[0].neigh.resolved());
}

TEST(ParseNetlink, MalformedMessagesEndTheParse) {
  ifinfomsg m{};
  std::vector<uint8_t> good = Msg(RTM_NEWLINK, m).Attr(IFLA_IFNAME, "a", 2).Bytes();
  absl::Status s;
  // A length beyond the buffer.
  std::vector<uint8_t> b = good;
  b[0] = 200;
  EXPECT_TRUE(Parse(b, &s).empty());
  EXPECT_FALSE(s.ok());
  // A length below the header.
  b = good;
  b[0] = 8;
  Parse(b, &s);
  EXPECT_FALSE(s.ok());
  // An attribute overrunning its message.
  b = good;
  b[sizeof(nlmsghdr) + sizeof(ifinfomsg)] = 60;
  Parse(b, &s);
  EXPECT_FALSE(s.ok());
  // A body shorter than its fixed part.
  nlmsghdr h{};
  h.nlmsg_len = sizeof h + 4;
  h.nlmsg_type = RTM_NEWLINK;
  b.assign(sizeof h + 4, 0);
  std::memcpy(b.data(), &h, sizeof h);
  Parse(b, &s);
  EXPECT_FALSE(s.ok());
  // What came before a bad message stays.
  b = good;
  b.insert(b.end(), {1, 2, 3});
  EXPECT_EQ(Parse(b, &s).size(), 1u);
  EXPECT_FALSE(s.ok());
}

TEST(ParseNetlink, RandomAndDamagedInputNeverReadsPastTheBuffer) {
  std::mt19937 rng(1);
  ifinfomsg m{};
  m.ifi_flags = IFF_UP;
  const uint8_t mac[6] = {1, 2, 3, 4, 5, 6};
  const std::vector<uint8_t> seed = Msg(RTM_NEWLINK, m).Attr(IFLA_IFNAME, "veth0", 6).Attr(IFLA_ADDRESS, mac, 6).Bytes();
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> b = seed;
    for (int k = 0; k < 4; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    b.resize(rng() % (b.size() + 8));
    // Copied to an exact-size heap block: a read past it is a fault under ASan.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[b.size() + 1]);
    std::memcpy(exact.get(), b.data(), b.size());
    std::vector<NetlinkEvent> out;
    (void)ParseNetlink(exact.get(), b.size(), &out);
  }
}

}  // namespace
}  // namespace droce::netdev
