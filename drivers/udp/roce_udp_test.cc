// Frames to datagrams and back (roce_udp.h): through real kernel UDP
// sockets on the loopback interface (no privileges needed), the rebuilt
// frame is bit-exact the one sent, its ICRC valid; and UdpIo's split between
// the socket and the inner port.
#include "drivers/udp/roce_udp.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "drivers/udp/udp_io.h"
#include "gtest/gtest.h"
#include "wire/byte_order.h"
#include "wire/fields.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace droce::udp {
namespace {

constexpr std::array<uint8_t, 6> kOwnMac = {0x02, 0, 0, 0, 0, 0xa};
constexpr std::array<uint8_t, 6> kPeerMac = {0x02, 0, 0, 0, 0, 0xb};

std::array<uint8_t, 16> Loopback(bool ipv6) {
  std::array<uint8_t, 16> g{};
  if (ipv6) {
    g[15] = 1;
  } else {
    g[10] = g[11] = 0xFF;
    g[12] = 127, g[15] = 1;
  }
  return g;
}

// A RoCEv2 WRITE frame over loopback with `len` payload bytes, UDP from
// `sport` to `dport`, its ICRC over those.
std::vector<uint8_t> Frame(bool ipv6, uint16_t sport, uint16_t dport, uint32_t len, uint8_t tclass = 0x6a) {
  wire::PacketFields f;
  f.route.src_mac = kOwnMac;
  f.route.dst_mac = kPeerMac;
  f.route.ipv6 = ipv6;
  f.route.tclass = tclass;
  f.route.src_ip = Loopback(ipv6);
  f.route.dst_ip = Loopback(ipv6);
  f.route.udp_src_port = sport;
  f.route.udp_dst_port = dport;
  f.bth.opcode = wire::kRcWriteOnly;
  f.bth.dest_qp = 0x1234;
  f.bth.psn = 77;
  f.reth_va = 0x1000;
  f.reth_rkey = 0xabcd;
  f.reth_length = len;
  std::vector<uint8_t> payload(len);
  for (uint32_t i = 0; i < len; ++i) payload[i] = static_cast<uint8_t>(i * 7);
  f.payload = payload;
  std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
  auto n = wire::SerializeFields(f, frame.data(), frame.size());
  EXPECT_TRUE(n.ok());
  frame.resize(n.ok() ? *n : 0);
  return frame;
}

struct Sock {
  int fd = -1;
  uint16_t port = 0;
  Sock() {
    absl::StatusOr<int> s = OpenSocket(SocketConfig{}, &port);
    EXPECT_TRUE(s.ok()) << s.status();
    fd = s.ok() ? *s : -1;
  }
  ~Sock() {
    if (fd >= 0) close(fd);
  }
};

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 2000) == 1;
}

// Sends `frame` from a to b and rebuilds it there.
std::vector<uint8_t> RoundTrip(const Sock& a, const Sock& b, std::vector<uint8_t> frame, UdpCounters* ca,
                               UdpCounters* cb) {
  SendBatch send;
  EXPECT_TRUE(send.Add(frame.data(), static_cast<uint32_t>(frame.size()), a.port, ca));
  EXPECT_EQ(send.Send(a.fd, ca), 1);
  EXPECT_TRUE(Readable(b.fd));
  std::vector<uint8_t> buf(kHeadroom + pktio::kMaxFrameBytes);
  uint8_t* bufs[1] = {buf.data()};
  const uint32_t caps[1] = {pktio::kMaxFrameBytes};
  RecvBatch recv;
  RecvBatch::Frame got[1];
  EXPECT_EQ(recv.Receive(b.fd, bufs, caps, 1, kPeerMac, got, cb), 1);
  if (got[0].data == nullptr) return {};
  return std::vector<uint8_t>(got[0].data, got[0].data + got[0].len);
}

// The frame's ICRC against its bytes (wire::ParsePacket would refuse a
// destination port other than 4791, which these test frames use).
bool IcrcValid(const uint8_t* frame, const Departure& d) {
  const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
  return wire::ComputeIcrc(frame + d.l3_offset, icrc_at - d.l3_offset, d.ipv6) == wire::LoadLe32(frame + icrc_at);
}

TEST(RoceUdp, FramesCrossRealSocketsBitExact) {
  Sock a, b;
  for (bool ipv6 : {false, true}) {
    for (uint32_t len : {0u, 1u, 1024u, 4096u}) {
      SCOPED_TRACE(testing::Message() << (ipv6 ? "IPv6 " : "IPv4 ") << len);
      // What the receiver's kernel delivers to b: droce's TC program moved
      // the destination port from 4791 to b's; the sender wrote 4791 (and
      // the ICRC covers it). Here the frame goes straight to b's port.
      std::vector<uint8_t> sent = Frame(ipv6, a.port, b.port, len);
      UdpCounters ca, cb;
      std::vector<uint8_t> got = RoundTrip(a, b, sent, &ca, &cb);
      ASSERT_EQ(got.size(), sent.size());
      EXPECT_EQ(std::memcmp(got.data(), kPeerMac.data(), 6), 0);  // to the receiving device
      Departure d;
      ASSERT_TRUE(ReadDeparture(got.data(), static_cast<uint32_t>(got.size()), &d));
      EXPECT_EQ(d.dst_port, kRoceV2Port);  // rebuilt as the sender wrote it on the wire
      wire::UdpWriter(got.data() + d.l4_offset).set_dst_port(b.port);
      // Everything but the Ethernet addresses (and the IPv4 checksum, which
      // covers the same bytes) is the sender's frame.
      EXPECT_EQ(std::memcmp(got.data() + 12, sent.data() + 12, sent.size() - 12), 0);
      EXPECT_TRUE(IcrcValid(got.data(), d));
      EXPECT_EQ(ca.tx_datagrams, 1u);
      EXPECT_EQ(ca.tx_port_rewritten, 0u);
      EXPECT_EQ(cb.rx_datagrams, 1u);
      EXPECT_EQ(cb.rx_dropped, 0u);
    }
  }
}

TEST(RoceUdp, AFrameFromAnotherSourcePortIsRewrittenWithItsIcrc) {
  Sock a, b;
  std::vector<uint8_t> sent = Frame(false, 0xC123, b.port, 100);
  UdpCounters ca, cb;
  std::vector<uint8_t> got = RoundTrip(a, b, sent, &ca, &cb);
  EXPECT_EQ(ca.tx_port_rewritten, 1u);
  Departure d;
  ASSERT_TRUE(ReadDeparture(got.data(), static_cast<uint32_t>(got.size()), &d));
  EXPECT_EQ(d.src_port, a.port);
  wire::UdpWriter(got.data() + d.l4_offset).set_dst_port(b.port);
  EXPECT_TRUE(IcrcValid(got.data(), d));
}

TEST(RoceUdp, TheMarkCarriesAnIpv4IdentificationIntoTheRebuiltHeader) {
  Arrival a;
  a.src = Loopback(false);
  a.dst = Loopback(false);
  a.src_port = 5000;
  std::vector<uint8_t> buf(kHeadroom + 16, 0);
  // What ReadArrival makes of droce_tc.bpf.c's mark for ID 0x1234 without DF.
  const uint32_t mark = MarkOf(0x1234, 0);
  a.ipv4_id = static_cast<uint16_t>(mark);
  a.ipv4_flags_fragment = static_cast<uint16_t>(((mark >> 16) & 7) << 13);
  uint32_t len = 0;
  uint8_t* f = WriteHeaders(a, kOwnMac, buf.data() + kHeadroom, 16, &len);
  wire::Ipv4View ip(f + 14);
  EXPECT_EQ(ip.id(), 0x1234);
  EXPECT_EQ(ip.flags_fragment(), 0);
  EXPECT_EQ(wire::Ipv4HeaderChecksum(f + 14, 20), wire::LoadBe16(f + 14 + 10));  // the stored one is right
  EXPECT_EQ(len, 14u + 20 + 8 + 16);
}

TEST(RoceUdp, WhatIsNoUnicastUdpFrameIsNoDeparture) {
  std::vector<uint8_t> f = Frame(false, 1, 4791, 8);
  Departure d;
  EXPECT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
  const std::vector<uint8_t> unicast = f;
  f[0] |= 1;  // a group MAC in front of a unicast address
  EXPECT_FALSE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
  // To group 239.1.2.3 with its MAC: a departure; with another group's MAC: none.
  const uint8_t group_mac[6] = {0x01, 0x00, 0x5e, 0x01, 0x02, 0x03};
  std::memcpy(f.data(), group_mac, 6);
  const uint8_t group_ip[4] = {239, 1, 2, 3};
  std::memcpy(f.data() + 14 + 16, group_ip, 4);
  EXPECT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
  EXPECT_EQ(d.dst[12], 239);
  f[5] = 0x04;
  EXPECT_FALSE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
  f = unicast;
  EXPECT_FALSE(ReadDeparture(f.data(), 30, &d));  // cut inside the IP header
  f[14 + 6] = 0x20;  // more fragments
  EXPECT_FALSE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
  f[14 + 6] = 0x40;
  wire::UdpWriter(f.data() + 34).set_length(9);  // disagrees with the IP length
  EXPECT_FALSE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
}

// An in-memory inner port: what it was given to send, and frames to deliver.
// Receives every datagram waiting at `s` (one buffer each), rebuilt.
std::vector<std::vector<uint8_t>> ReceiveAll(const Sock& s, UdpCounters* c) {
  std::vector<std::vector<uint8_t>> out;
  std::vector<std::vector<uint8_t>> bufs(RecvBatch::kMax, std::vector<uint8_t>(kHeadroom + pktio::kMaxFrameBytes));
  uint8_t* ptrs[RecvBatch::kMax];
  uint32_t caps[RecvBatch::kMax];
  for (int i = 0; i < RecvBatch::kMax; ++i) ptrs[i] = bufs[i].data(), caps[i] = pktio::kMaxFrameBytes;
  RecvBatch recv;
  RecvBatch::Frame got[RecvBatch::kMax];
  while (Readable(s.fd)) {
    const int r = recv.Receive(s.fd, ptrs, caps, RecvBatch::kMax, kPeerMac, got, c);
    if (r == 0) break;
    for (int i = 0; i < r; ++i) {
      if (got[i].data != nullptr) out.emplace_back(got[i].data, got[i].data + got[i].len);
    }
    pollfd p{s.fd, POLLIN, 0};
    if (poll(&p, 1, 50) != 1) break;
  }
  return out;
}

// Segmented sends (SendBatch::set_gso): a run of equal-sized IPv6 frames to
// one destination leaves in one message, the last frame shorter; an IPv4
// frame and a frame to another port start messages of their own. The
// receiving socket (no UDP_GRO) gets each frame as its own datagram, bit
// for bit what was sent, its ICRC valid.
TEST(RoceUdp, SegmentedSendsCarryEachFrameWithItsIcrc) {
  Sock a, b, other;
  std::vector<std::vector<uint8_t>> frames;
  for (int i = 0; i < 5; ++i) frames.push_back(Frame(true, a.port, b.port, 1024));
  frames.push_back(Frame(true, a.port, b.port, 100));       // shorter: ends the run
  frames.push_back(Frame(true, a.port, b.port, 1024));      // a new message
  frames.push_back(Frame(false, a.port, b.port, 1024));     // IPv4: never segmented
  frames.push_back(Frame(true, a.port, other.port, 1024));  // another port
  for (size_t i = 0; i < frames.size(); ++i) wire::StoreBe32(frames[i].data() + frames[i].size() - 8, 1000 + i);
  // Each frame's ICRC again after the mark written into its payload.
  for (auto& f : frames) {
    Departure d;
    ASSERT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
    const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
    wire::StoreLe32(f.data() + icrc_at, wire::ComputeIcrc(f.data() + d.l3_offset, icrc_at - d.l3_offset, d.ipv6));
  }
  UdpCounters ca, cb, co;
  SendBatch send;
  send.set_gso(true);
  for (auto& f : frames) ASSERT_TRUE(send.Add(f.data(), static_cast<uint32_t>(f.size()), a.port, &ca));
  ASSERT_EQ(send.Send(a.fd, &ca), static_cast<int>(frames.size()));
  EXPECT_EQ(ca.tx_calls, 1u);
  EXPECT_EQ(ca.tx_datagrams, frames.size());
  EXPECT_EQ(ca.tx_gso_datagrams, 6u);  // the first message: five full frames and the short one
  EXPECT_EQ(ca.tx_dropped, 0u);
  std::vector<std::vector<uint8_t>> got = ReceiveAll(b, &cb);
  std::vector<std::vector<uint8_t>> got_other = ReceiveAll(other, &co);
  ASSERT_EQ(got.size(), 8u);
  ASSERT_EQ(got_other.size(), 1u);
  got.push_back(got_other[0]);
  for (size_t i = 0; i < frames.size(); ++i) {
    SCOPED_TRACE(i);
    const std::vector<uint8_t>& sent = frames[i];
    // Datagrams of different families may arrive in either order: find it by its mark.
    auto it = std::find_if(got.begin(), got.end(), [&](const std::vector<uint8_t>& g) {
      return g.size() == sent.size() && wire::LoadBe32(g.data() + g.size() - 8) == 1000 + i;
    });
    ASSERT_NE(it, got.end());
    std::vector<uint8_t> g = *it;
    Departure d;
    ASSERT_TRUE(ReadDeparture(g.data(), static_cast<uint32_t>(g.size()), &d));
    EXPECT_EQ(d.dst_port, kRoceV2Port);
    wire::UdpWriter(g.data() + d.l4_offset).set_dst_port(i == 8 ? other.port : b.port);
    EXPECT_EQ(std::memcmp(g.data() + 12, sent.data() + 12, sent.size() - 12), 0);
    EXPECT_TRUE(IcrcValid(g.data(), d));
  }
}

TEST(RoceUdp, WithoutSegmentationEveryFrameIsItsOwnMessage) {
  Sock a, b;
  std::vector<std::vector<uint8_t>> frames(4, Frame(true, a.port, b.port, 512));
  UdpCounters ca, cb;
  SendBatch send;
  for (auto& f : frames) ASSERT_TRUE(send.Add(f.data(), static_cast<uint32_t>(f.size()), a.port, &ca));
  ASSERT_EQ(send.Send(a.fd, &ca), 4);
  EXPECT_EQ(ca.tx_gso_datagrams, 0u);
  EXPECT_EQ(ReceiveAll(b, &cb).size(), 4u);
}

class FakeInner : public pktio::BurstIo {
 public:
  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override {
    uint16_t k = 0;
    while (k < n && !rx.empty()) {
      frames[k++] = rx.front();
      rx.pop_front();
    }
    return k;
  }
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override {
    if (live_limit > 0) n = static_cast<uint16_t>(std::min(n, static_cast<uint16_t>(std::max(live_limit - live, 0))));
    for (uint16_t i = 0; i < n; ++i) {
      auto* b = new std::vector<uint8_t>(pktio::kMaxFrameBytes + kHeadroom);
      frames[i] = {b->data(), 0, static_cast<uint32_t>(b->size()), b};
      ++live;
    }
    return n;
  }
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) sent.push_back(frames[i]);
    return n;
  }
  void Release(pktio::Frame* frames, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      delete static_cast<std::vector<uint8_t>*>(frames[i].handle);
      --live;
    }
  }
  bool KnownEmpty() override { return known_empty; }
  bool TakesGather() const override { return takes_gather; }
  std::deque<pktio::Frame> rx;
  std::vector<pktio::Frame> sent;
  bool known_empty = false;  // what the port says when asked
  bool takes_gather = false;  // read by a UdpIo when it is made
  int live = 0;
  int live_limit = 0;  // > 0: AllocTx gives no more buffers than leave this many live
};

pktio::Frame Copy(FakeInner& io, const std::vector<uint8_t>& bytes) {
  pktio::Frame f;
  io.AllocTx(&f, 1);
  std::memcpy(f.data, bytes.data(), bytes.size());
  f.len = static_cast<uint32_t>(bytes.size());
  return f;
}

// An idle poll may be skipped on KnownEmpty (verbs Runtime::IdleLocked):
// never while the socket may hold a frame, and never past a port behind
// that cannot tell.
TEST(UdpIo, KnownEmptyNeverWithASocketOtherwiseAsThePortBehindIt) {
  FakeInner inner;
  inner.known_empty = true;
  {
    Sock s;
    UdpIo io(&inner, s.fd, s.port, kOwnMac);
    s.fd = -1;  // the UdpIo's now
    EXPECT_FALSE(io.KnownEmpty());
  }
  UdpIo io(&inner, -1, 0, kOwnMac);
  EXPECT_TRUE(io.KnownEmpty());
  inner.known_empty = false;
  EXPECT_FALSE(io.KnownEmpty());
}

TEST(UdpIo, OtherHostsGoToTheSocketTheHostStaysInside) {
  FakeInner inner_a, inner_b;
  Sock sa, sb;
  const uint16_t pa = sa.port, pb = sb.port;
  {
    UdpIo a(&inner_a, sa.fd, pa, kOwnMac), b(&inner_b, sb.fd, pb, kPeerMac);
    sa.fd = sb.fd = -1;  // the UdpIos' now
    // To the peer (socket), to our own MAC (another process of the device:
    // inner), to a group (inner), and to the peer again.
    std::vector<uint8_t> remote = Frame(false, pa, pb, 64);
    std::vector<uint8_t> own = remote;
    std::memcpy(own.data(), kOwnMac.data(), 6);
    std::vector<uint8_t> group = remote;
    group[0] = 0x01;
    pktio::Frame out[4] = {Copy(inner_a, remote), Copy(inner_a, own), Copy(inner_a, group), Copy(inner_a, remote)};
    EXPECT_EQ(a.TxBurst(out, 4), 4);
    ASSERT_EQ(inner_a.sent.size(), 2u);  // own and group
    EXPECT_EQ(inner_a.sent[0].data[0], kOwnMac[0]);
    EXPECT_EQ(inner_a.sent[1].data[0], 0x01);
    EXPECT_EQ(a.counters().tx_datagrams, 2u);
    inner_a.Release(inner_a.sent.data(), 2);
    // The peer's burst holds what its inner port has and what its socket got.
    inner_b.rx.push_back(Copy(inner_b, own));
    ASSERT_TRUE(Readable(b.Arm(-1)));
    pktio::Frame in[8];
    uint16_t got = 0;
    for (int tries = 0; tries < 4 && got < 3; ++tries) got = static_cast<uint16_t>(got + b.RxBurst(in + got, 8));
    ASSERT_EQ(got, 3);
    EXPECT_EQ(b.counters().rx_datagrams, 2u);
    inner_b.Release(in, got);
  }
  EXPECT_EQ(inner_a.live, 0);  // every buffer went back, the stash included
  EXPECT_EQ(inner_b.live, 0);
}

// Sends `out` from a (one TxBurst) and receives them at b in bursts of at
// most `burst`: each bit-exact frames[i] (its destination port as the sender
// wrote it), its ICRC valid, in order.
void SendAndCheck(UdpIo& a, std::vector<pktio::Frame> out, UdpIo& b, FakeInner& inner_b,
                  const std::vector<std::vector<uint8_t>>& frames, uint16_t burst, uint16_t dst_port) {
  ASSERT_EQ(a.TxBurst(out.data(), static_cast<uint16_t>(out.size())), out.size());
  ASSERT_TRUE(Readable(b.Arm(-1)));
  std::vector<pktio::Frame> in;
  for (int tries = 0; tries < 50 && in.size() < frames.size(); ++tries) {
    pktio::Frame f[64];
    const uint16_t got = b.RxBurst(f, burst);
    EXPECT_LE(got, burst);
    in.insert(in.end(), f, f + got);
  }
  ASSERT_EQ(in.size(), frames.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(i);
    std::vector<uint8_t> g(in[i].data, in[i].data + in[i].len);
    ASSERT_EQ(g.size(), frames[i].size());
    Departure d;
    ASSERT_TRUE(ReadDeparture(g.data(), static_cast<uint32_t>(g.size()), &d));
    wire::UdpWriter(g.data() + d.l4_offset).set_dst_port(dst_port);
    EXPECT_EQ(std::memcmp(g.data() + 12, frames[i].data() + 12, g.size() - 12), 0);
    EXPECT_TRUE(IcrcValid(g.data(), d));
  }
  inner_b.Release(in.data(), static_cast<uint16_t>(in.size()));
}

// SendAndCheck of copies of `frames`.
void CrossInOrder(UdpIo& a, FakeInner& inner_a, UdpIo& b, FakeInner& inner_b,
                  const std::vector<std::vector<uint8_t>>& frames, uint16_t burst, uint16_t dst_port) {
  std::vector<pktio::Frame> out;
  for (const auto& f : frames) out.push_back(Copy(inner_a, f));
  SendAndCheck(a, out, b, inner_b, frames, burst, dst_port);
}

// Two UdpIos over loopback; every buffer goes back.
struct UdpPair {
  UdpPair(bool gso, bool gather, bool inner_gather = false) {
    inner_a.takes_gather = inner_gather;
    pa = sa.port, pb = sb.port;
    a.emplace(&inner_a, sa.fd, pa, kOwnMac);
    b.emplace(&inner_b, sb.fd, pb, kPeerMac);
    sa.fd = sb.fd = -1;  // the UdpIos' now
    a->set_gso(gso);
    b->set_gso(gso);
    a->set_gather(gather);
  }
  ~UdpPair() {
    a.reset();
    b.reset();
    EXPECT_EQ(inner_a.live, 0);
    EXPECT_EQ(inner_b.live, 0);
  }
  FakeInner inner_a, inner_b;
  Sock sa, sb;
  uint16_t pa = 0, pb = 0;
  std::optional<UdpIo> a, b;
};

// With udp_gso on both.
class CoalescingPair : public testing::Test, public UdpPair {
 protected:
  CoalescingPair() : UdpPair(/*gso=*/true, /*gather=*/false) {}
};

// The receiver's socket takes a segmented run as one coalesced datagram
// (loopback hands the segmented skb over whole) and UdpIo splits it into
// one buffer per frame, each bit-exact the frame sent, in order, across
// bursts smaller than the run. The first run arrives before the receiver
// knows the segment size (copied into place), the second lands in place.
TEST_F(CoalescingPair, CoalescedDatagramsSplitIntoTheFramesSent) {
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    std::vector<std::vector<uint8_t>> sent;
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> f = Frame(true, pa, pb, i == 19 ? 300 : 2048);
      Departure d;
      EXPECT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
      wire::StoreBe32(f.data() + d.payload_offset + 4, 5000 + i);  // the PSN field: tells frames apart
      const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
      wire::StoreLe32(f.data() + icrc_at, wire::ComputeIcrc(f.data() + d.l3_offset, icrc_at - d.l3_offset, true));
      sent.push_back(f);
    }
    CrossInOrder(*a, inner_a, *b, inner_b, sent, 8, pb);
  }
  EXPECT_EQ(a->counters().tx_gso_datagrams, 40u);
  EXPECT_EQ(b->counters().rx_coalesced, 40u);
  EXPECT_EQ(b->counters().rx_gro_copied, 1u);  // the first run only
  EXPECT_EQ(b->counters().rx_dropped, 0u);
}

// Receives that find nothing are repeated as set up (the stash unchanged).
// A receive that took buffers ends that: with no buffer to refill them
// (the pool exhausted) the next run lands in the buffers left, not in
// those the program still holds, and both runs stay bit-exact.
TEST_F(CoalescingPair, EmptyReceivesAreRepeatedOnlyOverTheSameBuffers) {
  const auto run_of = [&](uint32_t psn) {
    std::vector<std::vector<uint8_t>> frames;
    for (int i = 0; i < 20; ++i) {
      std::vector<uint8_t> f = Frame(true, pa, pb, i == 19 ? 300 : 2048);
      Departure d;
      EXPECT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
      wire::StoreBe32(f.data() + d.payload_offset + 4, psn + i);
      const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
      wire::StoreLe32(f.data() + icrc_at, wire::ComputeIcrc(f.data() + d.l3_offset, icrc_at - d.l3_offset, true));
      frames.push_back(f);
    }
    return frames;
  };
  inner_b.live_limit = RecvBatch::kMax;  // the stash's first fill, never refilled while frames are held
  std::vector<std::vector<uint8_t>> sent;
  std::vector<pktio::Frame> in;
  pktio::Frame none[8];
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    const uint64_t empty_before = b->counters().rx_empty_calls;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(b->RxBurst(none, 8), 0);
    EXPECT_EQ(b->counters().rx_empty_calls, empty_before + 3);
    const std::vector<std::vector<uint8_t>> frames = run_of(9000 + 100 * run);
    std::vector<pktio::Frame> out;
    for (const auto& f : frames) out.push_back(Copy(inner_a, f));
    ASSERT_EQ(a->TxBurst(out.data(), static_cast<uint16_t>(out.size())), out.size());
    sent.insert(sent.end(), frames.begin(), frames.end());
    ASSERT_TRUE(Readable(b->Arm(-1)));
    for (int tries = 0; tries < 50 && in.size() < sent.size(); ++tries) {
      pktio::Frame f[8];
      in.insert(in.end(), f, f + b->RxBurst(f, 8));
    }
    ASSERT_EQ(in.size(), sent.size());
  }
  for (size_t i = 0; i < in.size(); ++i) {  // the first run's frames too, held throughout
    SCOPED_TRACE(i);
    ASSERT_EQ(in[i].len, sent[i].size());
    Departure d;
    ASSERT_TRUE(ReadDeparture(in[i].data, in[i].len, &d));
    wire::UdpWriter(in[i].data + d.l4_offset).set_dst_port(pb);
    EXPECT_EQ(std::memcmp(in[i].data + 12, sent[i].data() + 12, sent[i].size() - 12), 0);
  }
  inner_b.Release(in.data(), static_cast<uint16_t>(in.size()));
  EXPECT_EQ(b->counters().rx_dropped, 0u);
}

// A receive that takes a train (a coalesced run, or as many datagrams one
// by one) puts the socket in a stream until a receive takes less; receives
// that find nothing change nothing (event_stream_nap_us naps on it).
void CheckStream(UdpIo& a, FakeInner& inner_a, UdpIo& b, FakeInner& inner_b, uint16_t pa, uint16_t pb) {
  EXPECT_FALSE(b.InStream());
  CrossInOrder(a, inner_a, b, inner_b, std::vector<std::vector<uint8_t>>(20, Frame(true, pa, pb, 2048)), 64, pb);
  EXPECT_TRUE(b.InStream());
  pktio::Frame none[8];
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.RxBurst(none, 8), 0);
  EXPECT_TRUE(b.InStream());
  CrossInOrder(a, inner_a, b, inner_b, {Frame(true, pa, pb, 2)}, 64, pb);
  EXPECT_FALSE(b.InStream());
}

TEST_F(CoalescingPair, ATrainPutsTheSocketInAStreamALoneFrameEndsIt) {
  CheckStream(*a, inner_a, *b, inner_b, pa, pb);
  EXPECT_EQ(b->counters().rx_coalesced, 20u);
}

TEST(UdpIo, ATrainOfSingleDatagramsIsAStreamToo) {
  UdpPair p(/*gso=*/false, /*gather=*/false);
  CheckStream(*p.a, p.inner_a, *p.b, p.inner_b, p.pa, p.pb);
  EXPECT_EQ(p.b->counters().rx_coalesced, 0u);
}

// After coalesced datagrams of small segments (a run of ACK-sized frames),
// a single full-size frame still arrives whole (the read size has a floor:
// 64 buffers of it hold 64 KiB), moved into one buffer.
TEST_F(CoalescingPair, AFullFrameAfterSmallCoalescedOnesArrivesWhole) {
  CrossInOrder(*a, inner_a, *b, inner_b, std::vector<std::vector<uint8_t>>(10, Frame(true, pa, pb, 0)), 32, pb);
  CrossInOrder(*a, inner_a, *b, inner_b, {Frame(true, pa, pb, 4096)}, 32, pb);
  EXPECT_EQ(b->counters().rx_coalesced, 10u);
  EXPECT_EQ(b->counters().rx_dropped, 0u);
}

// A gather frame (pktio::Frame::gather) made from a flat frame of Frame():
// its buffer holds the headers through the RETH, then the pad and ICRC; the
// payload is in `memory` (at an odd offset), as a payload in registered
// memory is.
pktio::Frame GatherCopy(FakeInner& io, const std::vector<uint8_t>& flat, uint32_t payload_len,
                        std::vector<uint8_t>* memory) {
  Departure d;
  EXPECT_TRUE(ReadDeparture(flat.data(), static_cast<uint32_t>(flat.size()), &d));
  const uint32_t at = d.payload_offset + wire::kBthBytes + wire::kRethBytes;
  memory->assign(payload_len + 3, 0xEE);
  std::memcpy(memory->data() + 3, flat.data() + at, payload_len);
  pktio::Frame f;
  io.AllocTx(&f, 1);
  std::memset(f.data, 0x55, f.capacity);  // what the buffer held before: must never be sent
  std::memcpy(f.data, flat.data(), at);
  const uint32_t tail = static_cast<uint32_t>(flat.size()) - at - payload_len;
  std::memcpy(f.data + at, flat.data() + at + payload_len, tail);
  f.len = at + payload_len + tail;
  f.gather = memory->data() + 3;
  f.gather_len = payload_len;
  f.gather_at = at;
  return f;
}

// The one frame b's socket has (empty if none came): its bytes, its buffer
// given back.
std::vector<uint8_t> ReceiveOne(UdpPair& p) {
  if (!Readable(p.b->Arm(-1))) return {};
  pktio::Frame in[4];
  uint16_t got = 0;
  for (int tries = 0; tries < 4 && got < 1; ++tries) got = static_cast<uint16_t>(got + p.b->RxBurst(in + got, 4));
  EXPECT_EQ(got, 1);
  std::vector<uint8_t> bytes;
  if (got > 0) bytes.assign(in[0].data, in[0].data + in[0].len);
  p.inner_b.Release(in, got);
  return bytes;
}

// SendAndCheck of gather frames made from `frames` (lens[i]: frame i's payload bytes).
void CrossGathered(UdpIo& a, FakeInner& inner_a, UdpIo& b, FakeInner& inner_b,
                   const std::vector<std::vector<uint8_t>>& frames, const std::vector<uint32_t>& lens,
                   uint16_t dst_port) {
  std::vector<std::vector<uint8_t>> memory(frames.size());
  std::vector<pktio::Frame> out;
  for (size_t i = 0; i < frames.size(); ++i) out.push_back(GatherCopy(inner_a, frames[i], lens[i], &memory[i]));
  SendAndCheck(a, out, b, inner_b, frames, 64, dst_port);
}

// Gather frames leave from three iovecs: the receiver gets each frame bit
// for bit, over IPv4 and IPv6, payload lengths with and without pad, with
// segmentation (a run of one size in one message, each segment with its own
// headers and ICRC) and without.
TEST(UdpIoGather, GatherFramesArriveAsTheFramesTheyDescribe) {
  for (bool gso : {false, true}) {
    for (bool ipv6 : {false, true}) {
      SCOPED_TRACE(testing::Message() << (gso ? "gso " : "") << (ipv6 ? "IPv6" : "IPv4"));
      UdpPair p(gso, /*gather=*/true);
      EXPECT_TRUE(p.a->TakesGather());
      std::vector<std::vector<uint8_t>> frames;
      std::vector<uint32_t> lens;
      for (uint32_t len : {4096u, 4096u, 4096u, 1027u, 2048u, 2048u, 1025u, 1u}) {
        std::vector<uint8_t> f = Frame(ipv6, p.pa, p.pb, len);
        Departure d;
        EXPECT_TRUE(ReadDeparture(f.data(), static_cast<uint32_t>(f.size()), &d));
        wire::StoreBe32(f.data() + d.payload_offset + 4, 700 + static_cast<uint32_t>(frames.size()));  // PSN
        const uint32_t icrc_at = d.payload_offset + d.payload_len - wire::kIcrcBytes;
        wire::StoreLe32(f.data() + icrc_at, wire::ComputeIcrc(f.data() + d.l3_offset, icrc_at - d.l3_offset, ipv6));
        frames.push_back(f);
        lens.push_back(len);
      }
      CrossGathered(*p.a, p.inner_a, *p.b, p.inner_b, frames, lens, p.pb);
      EXPECT_EQ(p.a->counters().tx_gathered, frames.size());
      EXPECT_EQ(p.a->counters().tx_flattened, 0u);
      EXPECT_EQ(p.a->counters().tx_dropped, 0u);
      if (gso && ipv6) {
        EXPECT_GT(p.a->counters().tx_gso_datagrams, 0u);
      }
      EXPECT_EQ(p.b->counters().rx_dropped, 0u);
    }
  }
}

// A gather frame for the host (inner: droced, the device's other processes)
// reaches inner flattened, bit-exact; one built with another source port is
// flattened, then rewritten with its ICRC, and sent.
TEST(UdpIoGather, GatherFramesForInnerOrToRewriteAreFlattened) {
  UdpPair p(/*gso=*/false, /*gather=*/true);
  UdpIo& a = *p.a;
  std::vector<uint8_t> own = Frame(false, p.pa, p.pb, 2000);
  std::memcpy(own.data(), kOwnMac.data(), 6);
  std::vector<uint8_t> other_port = Frame(true, 4791, p.pb, 3000);
  std::vector<uint8_t> m0, m1;
  pktio::Frame out[2] = {GatherCopy(p.inner_a, own, 2000, &m0), GatherCopy(p.inner_a, other_port, 3000, &m1)};
  ASSERT_EQ(a.TxBurst(out, 2), 2);
  EXPECT_EQ(a.counters().tx_flattened, 2u);
  EXPECT_EQ(a.counters().tx_port_rewritten, 1u);
  ASSERT_EQ(p.inner_a.sent.size(), 1u);
  EXPECT_EQ(p.inner_a.sent[0].gather_len, 0u);
  ASSERT_EQ(p.inner_a.sent[0].len, own.size());
  EXPECT_EQ(std::memcmp(p.inner_a.sent[0].data, own.data(), own.size()), 0);
  p.inner_a.Release(p.inner_a.sent.data(), 1);
  const std::vector<uint8_t> g = ReceiveOne(p);
  ASSERT_EQ(g.size(), other_port.size());
  Departure d;
  ASSERT_TRUE(ReadDeparture(g.data(), static_cast<uint32_t>(g.size()), &d));
  EXPECT_EQ(d.src_port, p.pa);
  std::vector<uint8_t> as_sent = g;
  wire::UdpWriter(as_sent.data() + d.l4_offset).set_dst_port(p.pb);  // as the sender wrote it
  EXPECT_TRUE(IcrcValid(as_sent.data(), d));
}

// An inner port that takes gather frames (the direct rings) gets them as
// they are, whether or not the socket sends them (udp_gather): the port
// copies the payload where it goes. Without set_gather, the socket's are
// flattened and arrive bit-exact.
TEST(UdpIoGather, GatherFramesForAnInnerThatTakesThemPassAsTheyAre) {
  for (bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "udp_gather" : "no udp_gather");
    UdpPair p(/*gso=*/false, gather, /*inner_gather=*/true);
    UdpIo& a = *p.a;
    EXPECT_TRUE(a.TakesGather());
    std::vector<uint8_t> own = Frame(false, p.pa, p.pb, 2000);
    std::memcpy(own.data(), kOwnMac.data(), 6);
    std::vector<uint8_t> remote = Frame(false, p.pa, p.pb, 3000);
    std::vector<uint8_t> m0, m1;
    pktio::Frame out[2] = {GatherCopy(p.inner_a, own, 2000, &m0), GatherCopy(p.inner_a, remote, 3000, &m1)};
    const pktio::Frame for_inner = out[0];
    ASSERT_EQ(a.TxBurst(out, 2), 2);
    ASSERT_EQ(p.inner_a.sent.size(), 1u);
    const pktio::Frame& got = p.inner_a.sent[0];
    EXPECT_EQ(got.gather, for_inner.gather);  // the same pieces, nothing copied
    EXPECT_EQ(got.gather_len, 2000u);
    EXPECT_EQ(got.gather_at, for_inner.gather_at);
    EXPECT_EQ(got.len, own.size());
    EXPECT_EQ(a.counters().tx_flattened, gather ? 0u : 1u);
    EXPECT_EQ(a.counters().tx_gathered, gather ? 1u : 0u);
    p.inner_a.Release(p.inner_a.sent.data(), 1);
    std::vector<uint8_t> g = ReceiveOne(p);
    ASSERT_EQ(g.size(), remote.size());
    Departure d;
    ASSERT_TRUE(ReadDeparture(g.data(), static_cast<uint32_t>(g.size()), &d));
    wire::UdpWriter(g.data() + d.l4_offset).set_dst_port(p.pb);  // as the sender wrote it
    EXPECT_EQ(std::memcmp(g.data() + 12, remote.data() + 12, g.size() - 12), 0);
  }
}

}  // namespace
}  // namespace droce::udp
