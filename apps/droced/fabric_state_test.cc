// droced's control protocol and forwarding rules, in memory (no DPDK): the
// ports are a fake backend, the devices are registered in a private run
// directory exactly as droce-ctl registers them.
#include "apps/droced/fabric_state.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "drivers/fabric/path_marker.h"
#include "gtest/gtest.h"
#include "wire/arp.h"
#include "wire/byte_order.h"
#include "wire/steer.h"

namespace droce::droced {
namespace {

namespace fs = std::filesystem;

class FakePorts : public PortBackend {
 public:
  absl::StatusOr<int> OpenPort(uint32_t memif_id, const std::string& secret, bool rings) override {
    if (fail_next) {
      fail_next = false;
      return absl::UnavailableError("probe failed");
    }
    opened.insert(next);
    ids.push_back(memif_id);
    secrets.push_back(secret);
    ring_links.push_back(rings);
    return next++;
  }
  void ClosePort(int handle, bool) override { opened.erase(handle); }
  std::set<int> opened;
  std::vector<bool> ring_links;
  std::vector<uint32_t> ids;
  std::vector<std::string> secrets;
  int next = 100;
  bool fail_next = false;
};

constexpr core::Mac kMac0{0x02, 0xd0, 0xce, 0, 0, 1};
constexpr core::Mac kMac1{0x02, 0xd0, 0xce, 0, 0, 2};
constexpr core::Mac kOtherMac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};

class FabricStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/droced-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Register("droce0", kMac0, 0x0a000001, true);
    Register("droce1", kMac1, 0x0a000002, true);
    Register("direct0", kOtherMac, 0x0a000009, false);  // not a fabric device
    state_ = std::make_unique<FabricState>(dir_, &ports_);
    state_->Rescan();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void Register(const std::string& name, const core::Mac& mac, uint32_t ip, bool fabric) {
    verbs::DeviceFile f;
    f.name = name;
    f.dev.mac = mac;
    f.dev.ipv4 = ip;
    if (fabric) {
      f.fabric = true;
      f.fabric_dir = dir_;
    } else {
      f.vdev = "net_null0";
    }
    ASSERT_TRUE(verbs::WriteDeviceTree(dir_, dir_ + "/dev", f).ok());
  }

  fabric::Reply Send(int fd, const fabric::Request& req, pid_t pid = 4242) {
    return state_->Handle(fd, &req, sizeof req, pid, 0, &text_);
  }
  fabric::Reply Attach(int fd, const std::string& dev, pid_t pid = 4242, uint32_t link = fabric::kLinkRings) {
    fabric::Request req = fabric::MakeRequest(fabric::kOpAttach, dev);
    req.pid = static_cast<uint32_t>(pid);
    req.link = link;
    return Send(fd, req, pid);
  }
  int PortsInUse() {
    int n = 0;
    for (const Port& p : state_->ports()) n += p.in_use;
    return n;
  }

  std::string dir_;
  FakePorts ports_;
  std::unique_ptr<FabricState> state_;
  std::string text_;
};

TEST_F(FabricStateTest, AttachGivesEachProcessItsOwnRangeAndInterface) {
  const fabric::Reply a = Attach(10, "droce0", 111);
  const fabric::Reply b = Attach(11, "droce0", 222);
  ASSERT_EQ(a.error, 0) << a.message;
  ASSERT_EQ(b.error, 0) << b.message;
  EXPECT_EQ(a.op, fabric::kOpAttach);
  EXPECT_EQ(a.qpn_count, fabric::kQpnsPerProcess);
  EXPECT_GE(a.qpn_base, fabric::kQpnsPerProcess);  // never QPN 0 or 1
  EXPECT_NE(a.qpn_base, b.qpn_base);
  EXPECT_TRUE(a.qpn_base + a.qpn_count <= b.qpn_base || b.qpn_base + b.qpn_count <= a.qpn_base);
  EXPECT_NE(a.memif_id, b.memif_id);
  EXPECT_NE(a.memif_id, 0u);  // the daemon's own pinned interface
  EXPECT_EQ(std::memcmp(a.mac, kMac0.data(), 6), 0);
  EXPECT_EQ(a.num_gids, 2u);  // link-local and IPv4
  // Rings (the default): no memif interface, so no secret or socket.
  EXPECT_STREQ(a.secret, "");
  EXPECT_STREQ(a.memif_socket, "");
  EXPECT_EQ(ports_.ring_links, (std::vector<bool>{true, true}));
  // Ranges are per device: droce1's first process may get droce0's range.
  const fabric::Reply c = Attach(12, "droce1", 333);
  ASSERT_EQ(c.error, 0) << c.message;
  EXPECT_EQ(PortsInUse(), 3);
  state_->StatusText("");
  EXPECT_NE(state_->StatusText("droce0").find("pid 111"), std::string::npos);
  EXPECT_NE(state_->StatusText("droce0").find("pid 222"), std::string::npos);
  EXPECT_EQ(state_->StatusText("droce0").find("pid 333"), std::string::npos);
}

// A DPDK application (droce-testpmd) asks for a memif interface: it gets a
// secret of its own and the daemon's memif socket.
TEST_F(FabricStateTest, MemifAttachGetsAnInterfaceWithItsOwnSecret) {
  const fabric::Reply a = Attach(10, "droce0", 111, fabric::kLinkMemif);
  const fabric::Reply b = Attach(11, "droce0", 222, fabric::kLinkMemif);
  ASSERT_EQ(a.error, 0) << a.message;
  ASSERT_EQ(b.error, 0) << b.message;
  EXPECT_STRNE(a.secret, "");
  EXPECT_STRNE(a.secret, b.secret);
  EXPECT_EQ(std::string(a.memif_socket), fabric::MemifSocketPath(dir_));
  EXPECT_EQ(ports_.ring_links, (std::vector<bool>{false, false}));
  EXPECT_NE(state_->StatusText("droce0").find("memif " + std::to_string(a.memif_id)), std::string::npos);
  EXPECT_EQ(Attach(12, "droce0", 333, 2).error, EINVAL);  // no such link kind
  EXPECT_EQ(Attach(13, "droce0", 444, 0xffffffffu).error, EINVAL);
  fabric::Request status = fabric::MakeRequest(fabric::kOpStatus, "");
  status.pid = 4242;
  status.link = fabric::kLinkMemif;  // only an attach names a link
  EXPECT_EQ(Send(14, status).error, EINVAL);
}

// A program whose daemon restarted asks for its old range back: granted
// when free, refused (EADDRINUSE) when another process holds it, and a base
// that is no range's (unaligned, slot 0 with QPNs 0 and 1, past the 24-bit
// space) or on another op is malformed.
TEST_F(FabricStateTest, AttachCanAskForItsOldRangeBack) {
  auto attach_wanting = [&](int fd, pid_t pid, uint32_t base) {
    fabric::Request req = fabric::MakeRequest(fabric::kOpAttach, "droce0");
    req.pid = static_cast<uint32_t>(pid);
    req.want_qpn_base = base;
    return Send(fd, req, pid);
  };
  const uint32_t want = 77 * fabric::kQpnsPerProcess;
  const fabric::Reply a = attach_wanting(10, 111, want);
  ASSERT_EQ(a.error, 0) << a.message;
  EXPECT_EQ(a.qpn_base, want);
  EXPECT_EQ(a.qpn_count, fabric::kQpnsPerProcess);
  // Taken: nobody gets another process's QPNs.
  const fabric::Reply b = attach_wanting(11, 222, want);
  EXPECT_EQ(b.error, EADDRINUSE);
  EXPECT_EQ(PortsInUse(), 1);
  // The same range of another device is free (ranges are per device).
  fabric::Request other = fabric::MakeRequest(fabric::kOpAttach, "droce1");
  other.pid = 333;
  other.want_qpn_base = want;
  EXPECT_EQ(Send(12, other, 333).qpn_base, want);
  // Freed: the next asker gets it.
  state_->ConnectionClosed(10);
  const fabric::Reply c = attach_wanting(13, 444, want);
  ASSERT_EQ(c.error, 0) << c.message;
  EXPECT_EQ(c.qpn_base, want);
  for (uint32_t bad : {want + 1, 1u, fabric::kQpnsPerProcess / 2, fabric::kQpnSpace, 0xFFFFFC00u}) {
    EXPECT_EQ(attach_wanting(20, 555, bad).error, EINVAL) << bad;
  }
  fabric::Request status = fabric::MakeRequest(fabric::kOpStatus, "");
  status.pid = 4242;
  status.want_qpn_base = want;
  EXPECT_EQ(Send(21, status).error, EINVAL);
  EXPECT_EQ(PortsInUse(), 2);
}

TEST_F(FabricStateTest, ClosedConnectionFreesRangeAndPort) {
  const fabric::Reply a = Attach(10, "droce0", 111);
  ASSERT_EQ(a.error, 0);
  ASSERT_EQ(ports_.opened.size(), 1u);
  state_->ConnectionClosed(10);
  EXPECT_EQ(PortsInUse(), 0);
  EXPECT_TRUE(ports_.opened.empty());
  EXPECT_EQ(state_->StatusText("droce0").find("pid 111"), std::string::npos);
  // Its QPNs belong to nobody now: frames for them are dropped and counted.
  // (Checked through the switch in SteersRoceByDestinationQpn.)
  fabric::Request det = fabric::MakeRequest(fabric::kOpDetach, "");
  det.pid = 4242;
  EXPECT_EQ(Send(11, det).error, ENOENT);
}

TEST_F(FabricStateTest, DetachFreesTheAttachmentAndConnectionMayReattach) {
  ASSERT_EQ(Attach(10, "droce0", 4242).error, 0);
  EXPECT_EQ(Attach(10, "droce0", 4242).error, EBUSY);  // one attachment per connection
  fabric::Request det = fabric::MakeRequest(fabric::kOpDetach, "");
  det.pid = 4242;
  EXPECT_EQ(Send(10, det).error, 0);
  EXPECT_EQ(PortsInUse(), 0);
  EXPECT_EQ(Attach(10, "droce0", 4242).error, 0);
}

TEST_F(FabricStateTest, RejectsMalformedAndHostileRequests) {
  fabric::Request good = fabric::MakeRequest(fabric::kOpAttach, "droce0");
  good.pid = 4242;
  auto with = [&](auto mutate) {
    fabric::Request r = good;
    mutate(r);
    return Send(10, r).error;
  };
  EXPECT_EQ(with([](fabric::Request& r) { r.magic = 0x12345678; }), EPROTO);
  EXPECT_EQ(with([](fabric::Request& r) { r.version = 99; }), EPROTONOSUPPORT);
  EXPECT_EQ(with([](fabric::Request& r) { r.size = 12; }), EINVAL);
  EXPECT_EQ(with([](fabric::Request& r) { r.reserved[3] = 1; }), EINVAL);
  EXPECT_EQ(with([](fabric::Request& r) { std::memset(r.device, 'a', sizeof r.device); }), EINVAL);
  EXPECT_EQ(with([](fabric::Request& r) { std::strcpy(r.device, "../etc"); }), EINVAL);
  EXPECT_EQ(with([](fabric::Request& r) { std::strcpy(r.device, "nosuch"); }), ENODEV);
  EXPECT_EQ(with([](fabric::Request& r) { std::strcpy(r.device, "direct0"); }), ENODEV);  // not on the fabric
  EXPECT_EQ(with([](fabric::Request& r) { r.pid = 1; }), EPERM);  // someone else's pid
  EXPECT_EQ(with([](fabric::Request& r) { r.op = 77; }), EOPNOTSUPP);
  // Short and long datagrams.
  EXPECT_EQ(state_->Handle(10, &good, 3, 4242, 0, &text_).error, EINVAL);
  EXPECT_EQ(state_->Handle(10, &good, sizeof good - 1, 4242, 0, &text_).error, EINVAL);
  EXPECT_EQ(state_->Handle(10, &good, -1, 4242, 0, &text_).error, EINVAL);  // truncated (longer than a request)
  // Shutdown: only root or the daemon's user.
  fabric::Request stop = fabric::MakeRequest(fabric::kOpShutdown, "");
  stop.pid = 4242;
  EXPECT_EQ(state_->Handle(10, &stop, sizeof stop, 4242, getuid() + 1000, &text_).error,
            getuid() == 0 ? EPERM : EPERM);
  EXPECT_FALSE(state_->shutdown_requested());
  EXPECT_EQ(PortsInUse(), 0);
  EXPECT_TRUE(ports_.opened.empty());
  // A probe that fails leaves nothing behind.
  ports_.fail_next = true;
  EXPECT_EQ(with([](fabric::Request&) {}), EIO);
  EXPECT_EQ(PortsInUse(), 0);
  EXPECT_EQ(with([](fabric::Request&) {}), 0);
}

TEST_F(FabricStateTest, RandomGarbageNeverAttachesOrCrashes) {
  std::mt19937_64 rng(14);
  std::vector<uint8_t> buf(512);
  fabric::Request good = fabric::MakeRequest(fabric::kOpAttach, "droce0");
  good.pid = 4242;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0) {  // a valid header with random damage: reaches the field checks
      std::memcpy(buf.data(), &good, sizeof good);
      for (int k = 0; k < 3; ++k) buf[rng() % sizeof good] = static_cast<uint8_t>(rng());
    }
    const ssize_t n = (i % 2 == 0) ? static_cast<ssize_t>(sizeof good) : static_cast<ssize_t>(rng() % buf.size());
    const fabric::Reply r = state_->Handle(20 + i, buf.data(), n, 4242, 1000, &text_);
    if (r.error == 0) {  // damage that left a valid request (e.g. a flipped byte of the pid back)
      state_->ConnectionClosed(20 + i);
    }
  }
  EXPECT_EQ(PortsInUse(), 0);
  EXPECT_FALSE(state_->shutdown_requested());
}

// Ethernet + IPv4 + UDP:4791 + BTH to `qpn`.
std::vector<uint8_t> RoceFrame(const core::Mac& dst, uint32_t dst_ip, uint32_t qpn) {
  std::vector<uint8_t> f(14 + 20 + 8 + 12 + 4, 0);
  std::memcpy(f.data(), dst.data(), 6);
  std::memcpy(f.data() + 6, kOtherMac.data(), 6);
  wire::StoreBe16(f.data() + 12, wire::kEtherTypeIpv4);
  f[14] = 0x45;
  f[14 + 8] = 64;
  f[14 + 9] = wire::kIpProtoUdp;
  wire::StoreBe32(f.data() + 14 + 16, dst_ip);
  wire::StoreBe16(f.data() + 34 + 2, wire::kRoceV2Port);
  f[42 + 5] = static_cast<uint8_t>(qpn >> 16);
  f[42 + 6] = static_cast<uint8_t>(qpn >> 8);
  f[42 + 7] = static_cast<uint8_t>(qpn);
  return f;
}

TEST_F(FabricStateTest, SteersRoceByDestinationQpn) {
  const fabric::Reply a = Attach(10, "droce0", 111);
  const fabric::Reply b = Attach(11, "droce0", 222);
  const fabric::Reply c = Attach(12, "droce1", 333);
  ASSERT_EQ(a.error | b.error | c.error, 0);
  auto classify = [&](std::vector<uint8_t> f, int src = 0) {
    return state_->Classify(src, f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  };
  auto port_of = [&](int fd) {
    for (size_t i = 0; i < state_->ports().size(); ++i) {
      if (state_->ports()[i].in_use && state_->ports()[i].conn_fd == fd) return static_cast<int>(i);
    }
    return -1;
  };
  Decision d = classify(RoceFrame(kMac0, 0x0a000001, a.qpn_base + 5));
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, port_of(10));
  d = classify(RoceFrame(kMac0, 0x0a000001, b.qpn_base + b.qpn_count - 1));
  EXPECT_EQ(d.port, port_of(11));
  d = classify(RoceFrame(kMac1, 0x0a000002, c.qpn_base));
  EXPECT_EQ(d.port, port_of(12));
  // A broadcast RoCEv2 frame (unresolved neighbour) goes by destination IP.
  d = classify(RoceFrame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0a000002, c.qpn_base + 1));
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, port_of(12));
  d = classify(RoceFrame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0a0000ff, c.qpn_base + 1));
  EXPECT_EQ(d.kind, Decision::kDrop);
  EXPECT_EQ(state_->counters().rx_no_route, 1u);
  // RoCEv2 multicast (UD to a group, QP 0xFFFFFF): flooded to every other
  // process of the segment; the devices keep what is for groups they joined.
  d = classify(RoceFrame({0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, 0xef010203, 0xFFFFFF));
  EXPECT_EQ(d.kind, Decision::kFlood);
  EXPECT_EQ(d.device, -1);
  EXPECT_EQ(state_->counters().rx_no_route, 1u);
  // QPN 1 (GSI) of a device: to the daemon's CM, never to a process.
  d = classify(RoceFrame(kMac1, 0x0a000002, 1));
  EXPECT_EQ(d.kind, Decision::kToGsi);
  EXPECT_EQ(d.device, 1);
  EXPECT_EQ(state_->devices()[1].counters.rx_gsi, 1u);
  // No owner: a free range, and a dead process's range.
  EXPECT_EQ(classify(RoceFrame(kMac0, 0x0a000001, 0xfff000)).kind, Decision::kDrop);
  state_->ConnectionClosed(10);
  EXPECT_EQ(classify(RoceFrame(kMac0, 0x0a000001, a.qpn_base + 5)).kind, Decision::kDrop);
  EXPECT_EQ(state_->devices()[0].counters.rx_no_owner, 2u);
  // Unicast to a MAC that is no device of this fabric, with no uplink.
  EXPECT_EQ(classify(RoceFrame(kOtherMac, 0x0a000009, 0x20)).kind, Decision::kDrop);
  EXPECT_EQ(state_->counters().rx_unknown_dst, 1u);
}

// With an uplink: frames for other hosts (unknown unicast MAC, broadcast
// RoCEv2 to an IP not on the segment) go out of it, never back into it;
// what comes in from it is steered as from a process; floods of the segment
// reach it, a device's own floods do not.
TEST_F(FabricStateTest, UplinkTakesWhatIsNotOnTheSegment) {
  const fabric::Reply a = Attach(10, "droce0", 111);
  ASSERT_EQ(a.error, 0);
  EXPECT_EQ(a.flags & fabric::kReplyFramesFromWire, 0);  // no uplink yet: only the host's processes
  const int up = state_->AddUplink(77, "memif test");
  ASSERT_GE(up, 0);
  EXPECT_EQ(state_->AddUplink(78, "a second"), -1);  // one uplink
  // A process attaching now is told frames from a wire reach it (a device
  // that trusts its link refuses to attach: rx_icrc_trust).
  const fabric::Reply later = Attach(12, "droce0", 333);
  ASSERT_EQ(later.error, 0) << later.message;
  EXPECT_NE(later.flags & fabric::kReplyFramesFromWire, 0);
  EXPECT_TRUE(state_->ports()[up].uplink);
  int own = -1;
  for (size_t i = 0; i < state_->ports().size(); ++i) {
    if (state_->ports()[i].in_use && state_->ports()[i].conn_fd == 10) own = static_cast<int>(i);
  }
  auto classify = [&](std::vector<uint8_t> f, int src) {
    return state_->Classify(src, f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  };
  Decision d = classify(RoceFrame(kOtherMac, 0x0a000009, 0x20), own);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, up);
  d = classify(RoceFrame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0a000009, 0x20), own);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, up);
  EXPECT_EQ(state_->counters().to_uplink, 2u);
  // From the uplink: unknown destinations are dropped, not reflected.
  EXPECT_EQ(classify(RoceFrame(kOtherMac, 0x0a000009, 0x20), up).kind, Decision::kDrop);
  EXPECT_EQ(state_->counters().rx_unknown_dst, 1u);
  // ... and our devices' QPs are reached as from any port.
  d = classify(RoceFrame(kMac0, 0x0a000001, a.qpn_base + 3), up);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, own);
  EXPECT_NE(state_->StatusText("").find("uplink memif test: to_uplink 2"), std::string::npos) << state_->StatusText("");
  // Closing every connection leaves the uplink.
  state_->ConnectionClosed(10);
  EXPECT_TRUE(state_->ports()[up].in_use);
}

TEST_F(FabricStateTest, AnswersArpForDeviceAddressesAndFloodsTheRest) {
  ASSERT_EQ(Attach(10, "droce0", 111).error, 0);
  std::vector<uint8_t> f(64, 0);
  wire::ArpPacket req;
  req.op = wire::kArpRequest;
  req.sender_mac = kMac0;
  req.sender_ip = 0x0a000001;
  req.target_ip = 0x0a000002;  // droce1, with no process attached: the daemon still answers
  uint32_t len = wire::BuildArp(req, false, 0, f.data());
  Decision d = state_->Classify(3, f.data(), len, static_cast<uint32_t>(f.size()));
  ASSERT_EQ(d.kind, Decision::kReplyHere);
  EXPECT_EQ(d.port, 3);
  wire::ArpPacket reply;
  ASSERT_TRUE(wire::ParseArp(f.data(), d.len, &reply));
  EXPECT_EQ(reply.op, wire::kArpReply);
  EXPECT_EQ(reply.sender_mac, kMac1);
  EXPECT_EQ(reply.sender_ip, 0x0a000002u);
  EXPECT_EQ(reply.target_mac, kMac0);
  EXPECT_EQ(std::memcmp(f.data(), kMac0.data(), 6), 0);  // to the asker
  EXPECT_EQ(state_->devices()[1].counters.arp_replies, 1u);
  // A request for an address no device has: flooded to the segment.
  req.target_ip = 0x0a0000ee;
  len = wire::BuildArp(req, false, 0, f.data());
  d = state_->Classify(3, f.data(), len, static_cast<uint32_t>(f.size()));
  EXPECT_EQ(d.kind, Decision::kFlood);
  EXPECT_EQ(d.device, -1);
  // Too short to be anything.
  EXPECT_EQ(state_->Classify(3, f.data(), 6, 64).kind, Decision::kDrop);
}

// The switch knobs' request: the daemon's user or root only, a registered
// fabric device, every field checked; accepted knobs show in the status.
TEST_F(FabricStateTest, SwitchSetChecksEveryFieldAndWho) {
  auto set = [&](const std::string& dev, const fabric::KnobRequest& k, uid_t uid = 0, ssize_t extra = 0) {
    fabric::Request req = fabric::MakeRequest(fabric::kOpSwitchSet, dev);
    req.pid = 4242;
    req.size = sizeof req + sizeof k;
    char buf[sizeof req + sizeof k + 8] = {};
    std::memcpy(buf, &req, sizeof req);
    std::memcpy(buf + sizeof req, &k, sizeof k);
    return state_->Handle(30, buf, static_cast<ssize_t>(sizeof req + sizeof k) + extra, 4242, uid, &text_);
  };
  fabric::KnobRequest k{};
  k.set = fabric::kKnobLoss | fabric::kKnobSeed | fabric::kKnobBottleneck;
  k.loss_ppm = 10000;
  k.seed = 7;
  k.rate_bps = 10'000'000'000ull;
  k.kmin_bytes = 5000;
  k.kmax_bytes = 200000;
  k.pmax_ppm = 10000;
  EXPECT_EQ(set("droce0", k, getuid() + 1).error, EPERM);  // another user
  EXPECT_EQ(set("droce0", k, 0, -1).error, EINVAL);        // short
  EXPECT_EQ(set("droce0", k, 0, 8).error, EINVAL);         // long
  EXPECT_EQ(set("nosuch", k).error, ENODEV);
  EXPECT_EQ(set("bad name!", k).error, EINVAL);
  fabric::KnobRequest bad = k;
  bad.kmin_bytes = bad.kmax_bytes + 1;
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  bad = k;
  bad.loss_ppm = 1'000'001;
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  bad = k;
  bad.set |= 1u << 20;
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  bad = k;
  bad.set |= fabric::kKnobMirror;
  std::memcpy(bad.mirror, "rel.pcap", 8);
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  bad = k;
  std::memset(bad.mirror, 'x', sizeof bad.mirror);  // not terminated
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  bad = k;
  bad.reserved[3] = 1;
  EXPECT_EQ(set("droce0", bad).error, EINVAL);
  EXPECT_FALSE(state_->knobs(0).active());  // nothing refused changed anything
  const fabric::Reply ok = set("droce0", k);
  ASSERT_EQ(ok.error, 0) << ok.message;
  EXPECT_TRUE(state_->knobs(0).active());
  const std::string status = state_->StatusText("droce0");
  EXPECT_NE(status.find("loss=0.01"), std::string::npos) << status;
  EXPECT_NE(status.find("bottleneck rate=10000000000"), std::string::npos) << status;
  // A switch-set body on any other op is a wrong size.
  fabric::Request other = fabric::MakeRequest(fabric::kOpStatus, "");
  other.pid = 4242;
  char buf[sizeof other + sizeof k] = {};
  std::memcpy(buf, &other, sizeof other);
  EXPECT_EQ(state_->Handle(31, buf, sizeof buf, 4242, 0, &text_).error, EINVAL);
  // Clearing: everything off.
  fabric::KnobRequest clear{};
  clear.set = fabric::kKnobAll;
  ASSERT_EQ(set("droce0", clear).error, 0);
  EXPECT_FALSE(state_->knobs(0).active());
}

// Direct paths: two attached processes get one when the switch first
// forwards a frame between them, never at attach; a process that leaves
// takes its paths with it (only the survivor is told); a knob on a device
// withdraws the paths of its processes (the switch needs their frames) and,
// once cleared, their next switched frame brings them back; the uplink
// never gets one.
TEST_F(FabricStateTest, DirectPathsFollowTrafficPortsAndKnobs) {
  const auto port_of = [&](int conn) {
    for (uint32_t i : state_->active_ports()) {
      if (state_->ports()[i].conn_fd == conn) return static_cast<int>(i);
    }
    return -1;
  };
  ASSERT_EQ(Attach(10, "droce0", 111).error, 0);
  ASSERT_EQ(Attach(11, "droce0", 222).error, 0);
  ASSERT_EQ(Attach(12, "droce1", 333).error, 0);
  const int uplink = state_->AddUplink(900, "test uplink");
  EXPECT_TRUE(state_->SyncDirectPaths().empty());  // attached, silent: no path
  const int p10 = port_of(10), p11 = port_of(11), p12 = port_of(12);
  state_->NoteSwitched(p10, p11);
  state_->NoteSwitched(p11, p10);  // the same pair: asked once
  state_->NoteSwitched(p10, p10);  // a port to itself: never
  state_->NoteSwitched(p12, uplink);
  state_->NoteSwitched(uplink, p12);
  EXPECT_TRUE(state_->paths_asked());
  std::vector<PathChange> c = state_->SyncDirectPaths();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].add);
  EXPECT_TRUE(c[0].notify[0] && c[0].notify[1]);
  EXPECT_FALSE(state_->paths_asked());
  state_->NoteSwitched(p10, p11);  // has one: nothing asked
  EXPECT_FALSE(state_->paths_asked());
  state_->NoteSwitched(p10, p12);
  state_->NoteSwitched(p12, p11);
  c = state_->SyncDirectPaths();
  ASSERT_EQ(c.size(), 2u);  // 10-12, 12-11
  EXPECT_TRUE(state_->SyncDirectPaths().empty());  // nothing changed: nothing to do
  EXPECT_EQ(state_->direct_paths().size(), 3u);
  // The process on conn 11 dies: its two paths go, the survivors are told.
  state_->ConnectionClosed(11);
  c = state_->SyncDirectPaths();
  ASSERT_EQ(c.size(), 2u);
  for (const PathChange& x : c) {
    EXPECT_FALSE(x.add);
    for (int side = 0; side < 2; ++side) EXPECT_EQ(x.notify[side], x.path.port[side] != p11);
  }
  // A newcomer reusing the port index is a new attachment: it asks anew.
  ASSERT_EQ(Attach(13, "droce0", 444).error, 0);
  const int p13 = port_of(13);
  EXPECT_EQ(p13, p11);
  EXPECT_TRUE(state_->SyncDirectPaths().empty());
  state_->NoteSwitched(p13, p10);
  state_->NoteSwitched(p12, p13);
  c = state_->SyncDirectPaths();
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(state_->direct_paths().size(), 3u);
  // A memif-linked process (droce-testpmd, which takes no path) gets none.
  ASSERT_EQ(Attach(15, "droce1", 666, fabric::kLinkMemif).error, 0);
  state_->NoteSwitched(port_of(15), p10);
  EXPECT_FALSE(state_->paths_asked());
  state_->ConnectionClosed(15);
  // A pair asked for just before one side left gets nothing.
  ASSERT_EQ(Attach(14, "droce1", 555).error, 0);
  state_->NoteSwitched(port_of(14), p10);
  state_->ConnectionClosed(14);
  EXPECT_TRUE(state_->SyncDirectPaths().empty());
  // A loss knob on droce1: the paths of its process go (both sides told).
  auto set = [&](const std::string& dev, const fabric::KnobRequest& k) {
    fabric::Request req = fabric::MakeRequest(fabric::kOpSwitchSet, dev);
    req.pid = 4242;
    req.size = sizeof req + sizeof k;
    char buf[sizeof req + sizeof k] = {};
    std::memcpy(buf, &req, sizeof req);
    std::memcpy(buf + sizeof req, &k, sizeof k);
    return state_->Handle(30, buf, sizeof buf, 4242, 0, &text_);
  };
  fabric::KnobRequest loss{};
  loss.set = fabric::kKnobLoss;
  loss.loss_ppm = 1000;
  ASSERT_EQ(set("droce1", loss).error, 0);
  c = state_->SyncDirectPaths();
  ASSERT_EQ(c.size(), 2u);
  for (const PathChange& x : c) {
    EXPECT_FALSE(x.add);
    EXPECT_TRUE(x.notify[0] && x.notify[1]);
  }
  EXPECT_EQ(state_->direct_paths().size(), 1u);  // droce0's two processes keep theirs
  state_->NoteSwitched(p12, p10);  // while the knob is on, the switch keeps them
  EXPECT_FALSE(state_->paths_asked());
  fabric::KnobRequest clear{};
  clear.set = fabric::kKnobAll;
  ASSERT_EQ(set("droce1", clear).error, 0);
  EXPECT_TRUE(state_->SyncDirectPaths().empty());  // back when they talk again
  state_->NoteSwitched(p12, p10);
  state_->NoteSwitched(p13, p12);
  c = state_->SyncDirectPaths();
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(state_->direct_paths().size(), 3u);
  // A mirror counts too; and --no-direct withdraws everything.
  fabric::KnobRequest mirror{};
  mirror.set = fabric::kKnobMirror;
  std::strcpy(mirror.mirror, "/tmp/droced-test-mirror.pcap");
  ASSERT_EQ(set("droce0", mirror).error, 0);
  EXPECT_FALSE(state_->DirectAllowed(0));
  state_->set_direct_rings(false);
  c = state_->SyncDirectPaths();
  EXPECT_EQ(c.size(), 3u);
  EXPECT_TRUE(state_->direct_paths().empty());
  EXPECT_NE(state_->StatusText("").find("direct paths: 0 (direct rings off"), std::string::npos);
}

// A direct path's marker (fabric/path_marker.h) opens the receiver's ring:
// the switch forwards one only if it is the marker of a path from the port it
// came from to the port it goes to, with the path's key. Any other frame
// with the marker's opcode (another process, the uplink, a stale path) is
// dropped and counted.
TEST_F(FabricStateTest, OnlyThePathsOwnMarkerCrossesTheSwitch) {
  const auto port_of = [&](int conn) {
    for (uint32_t i : state_->active_ports()) {
      if (state_->ports()[i].conn_fd == conn) return static_cast<int>(i);
    }
    return -1;
  };
  const fabric::Reply a = Attach(10, "droce0", 111);
  const fabric::Reply b = Attach(11, "droce1", 222);
  ASSERT_EQ(Attach(12, "droce0", 333).error | a.error | b.error, 0);
  const int uplink = state_->AddUplink(900, "test uplink");
  const int pa = port_of(10), pb = port_of(11), pc = port_of(12);
  state_->NoteSwitched(pa, pb);
  const std::vector<PathChange> c = state_->SyncDirectPaths();
  ASSERT_EQ(c.size(), 1u);
  const DirectPath path = c[0].path;
  EXPECT_NE(path.marker_key, 0u);
  const auto marker = [&](const core::Mac& dst, const core::Mac& src, uint32_t qpn, uint64_t id, uint64_t key) {
    std::vector<uint8_t> f(fabric::kPathMarkerBytes);
    fabric::BuildPathMarker(f.data(), dst, src, qpn, fabric::PathMarker{id, key});
    return f;
  };
  const auto classify = [&](std::vector<uint8_t> f, int src) {
    return state_->Classify(src, f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  };
  // The real one, both ways.
  Decision d = classify(marker(kMac1, kMac0, b.qpn_base, path.id, path.marker_key), pa);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, pb);
  d = classify(marker(kMac0, kMac1, a.qpn_base, path.id, path.marker_key), pb);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, pa);
  EXPECT_EQ(state_->counters().forged_markers, 0u);
  // Forged: a third process with the right id and key (it cannot know the
  // key; it is dropped even if it guessed), a wrong key, another id, the
  // path's marker to a port off the path, and one from the uplink.
  EXPECT_EQ(classify(marker(kMac1, kMac0, b.qpn_base, path.id, path.marker_key), pc).kind, Decision::kDrop);
  EXPECT_EQ(classify(marker(kMac1, kMac0, b.qpn_base, path.id, path.marker_key + 1), pa).kind, Decision::kDrop);
  EXPECT_EQ(classify(marker(kMac1, kMac0, b.qpn_base, path.id + 1, path.marker_key), pa).kind, Decision::kDrop);
  const uint32_t c_qpn = state_->ports()[pc].slot * fabric::kQpnsPerProcess;
  EXPECT_EQ(classify(marker(kMac0, kMac1, c_qpn, path.id, path.marker_key), pb).kind, Decision::kDrop);
  EXPECT_EQ(classify(marker(kMac1, kMac0, b.qpn_base, path.id, path.marker_key), uplink).kind, Decision::kDrop);
  // A frame with the marker's opcode that is not even marker-shaped.
  std::vector<uint8_t> odd = marker(kMac1, kMac0, b.qpn_base, path.id, path.marker_key);
  odd.push_back(0);
  EXPECT_EQ(classify(odd, pa).kind, Decision::kDrop);
  EXPECT_EQ(state_->counters().forged_markers, 6u);
  // The path gone (a side left): its marker is stale.
  state_->ConnectionClosed(11);
  (void)state_->SyncDirectPaths();
  const fabric::Reply b2 = Attach(11, "droce1", 222);
  ASSERT_EQ(b2.error, 0);
  EXPECT_EQ(classify(marker(kMac1, kMac0, b2.qpn_base, path.id, path.marker_key), pa).kind, Decision::kDrop);
  EXPECT_EQ(state_->counters().forged_markers, 7u);
}

TEST(SwitchKnobs, LossIsSeededAndAtTheGivenRate) {
  fabric::KnobRequest k{};
  k.set = fabric::kKnobLoss | fabric::kKnobSeed;
  k.loss_ppm = 100000;  // 10%
  k.seed = 42;
  SwitchKnobs a, b;
  a.Apply(k);
  b.Apply(k);
  int dropped = 0;
  for (int i = 0; i < 20000; ++i) {
    const EgressVerdict va = a.Egress(1000, i * 1000);
    EXPECT_EQ(va.drop, b.Egress(1000, i * 1000).drop) << i;  // the same seed, the same drops
    dropped += va.drop;
  }
  EXPECT_NEAR(dropped, 2000, 200);
  EXPECT_EQ(a.counters().loss_dropped, static_cast<uint64_t>(dropped));
}

TEST(SwitchKnobs, BottleneckMarksAboveKminAndTailDrops) {
  fabric::KnobRequest k{};
  k.set = fabric::kKnobBottleneck;
  k.rate_bps = 1'000'000'000;  // 1 Gb/s: a 1000-byte frame takes 8 us
  k.kmin_bytes = 10000;
  k.kmax_bytes = 50000;
  k.pmax_ppm = 1'000'000;
  k.limit_bytes = 100000;
  SwitchKnobs s;
  s.Apply(k);
  // At the line rate: the queue never builds, nothing is marked.
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(s.Egress(1000, uint64_t(i) * 8000).mark);
  EXPECT_EQ(s.counters().ce_marked, 0u);
  // At twice the line rate: the queue grows past kmin (marks), past kmax
  // (every frame marked) and past the limit (tail drops).
  const uint64_t t0 = 1000 * 8000;
  bool marked_all_above_kmax = true;
  for (int i = 0; i < 400; ++i) {
    const uint64_t now = t0 + uint64_t(i) * 4000;
    const uint64_t q = s.queue_bytes(now);
    const EgressVerdict v = s.Egress(1000, now);
    if (q > 50000 && !v.drop && !v.mark) marked_all_above_kmax = false;
  }
  EXPECT_GT(s.counters().ce_marked, 0u);
  EXPECT_TRUE(marked_all_above_kmax);
  EXPECT_GT(s.counters().queue_dropped, 0u);
  EXPECT_LE(s.queue_bytes(t0 + 400 * 4000), 100000u);
}

// The bottleneck's FIFO is a fixed ring of kMaxQueuedFrames: the frame
// beyond it is tail-dropped, whatever the byte limit; one released, room again.
TEST(SwitchKnobs, BottleneckHoldsAtMostItsRingOfFrames) {
  fabric::KnobRequest k{};
  k.set = fabric::kKnobBottleneck;
  k.rate_bps = 1'000'000;  // 1 Mb/s: a 100-byte frame takes 800 us
  k.kmax_bytes = 1u << 30;
  SwitchKnobs s;
  s.Apply(k);
  static int frames[SwitchKnobs::kMaxQueuedFrames + 10];
  uint32_t queued = 0;
  for (int& f : frames) {
    const EgressVerdict v = s.Egress(100, 0);
    if (!v.queue) continue;
    s.Hold(&f, 100, 0, 0, 0);
    ++queued;
  }
  EXPECT_EQ(queued, SwitchKnobs::kMaxQueuedFrames);
  EXPECT_EQ(s.queued_frames(), SwitchKnobs::kMaxQueuedFrames);
  EXPECT_EQ(s.counters().queue_dropped, 10u);
  Released r;
  ASSERT_TRUE(s.Release(800'000, &r));
  EXPECT_EQ(r.frame, &frames[0]);
  EXPECT_TRUE(s.Egress(100, 800'000).queue);
}

// The bottleneck is a queue: frames leave at the line rate, in order, with
// the port's INT record, and PFC holds a sender above xoff until xon.
TEST(SwitchKnobs, BottleneckQueuesAtLineRateStampsIntAndPausesTheSender) {
  fabric::KnobRequest k{};
  k.set = fabric::kKnobBottleneck;
  k.rate_bps = 1'000'000'000;  // 8 us per 1000-byte frame
  k.kmin_bytes = 1'000'000;
  k.kmax_bytes = 1'000'000;
  k.pfc_xoff_bytes = 5000;
  k.pfc_xon_bytes = 2000;
  k.port_flags = fabric::kPortInt | fabric::kPortMarkAtDequeue;
  ASSERT_TRUE(SwitchKnobs::Validate(k).ok());
  PfcBoard board;
  static int freed = 0;
  SwitchKnobs::set_frame_free([](void*) { ++freed; });
  {
    SwitchKnobs s;
    s.Apply(k, &board);
    int frames[10];
    for (int i = 0; i < 10; ++i) {
      const EgressVerdict v = s.Egress(1000, 0);
      ASSERT_TRUE(v.queue);
      ASSERT_FALSE(v.drop);
      s.Hold(&frames[i], 1000, 3, 77, 9);  // all from ingress 9
    }
    EXPECT_TRUE(board.held(9));  // 10 000 B queued > xoff
    EXPECT_FALSE(board.held(8));
    EXPECT_EQ(s.counters().pfc_pauses, 1u);
    Released r;
    EXPECT_FALSE(s.Release(7'999, &r));
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(s.Release(8'000 * (i + 1), &r)) << i;
      EXPECT_EQ(r.frame, &frames[i]);
      EXPECT_EQ(r.port, 3u);
      EXPECT_EQ(r.port_tag, 77u);
      EXPECT_TRUE(r.stamp);
      EXPECT_EQ(r.hop.timestamp_ns, 8'000u * (i + 1));
      EXPECT_EQ(r.hop.tx_bytes, 1000u * (i + 1));
      EXPECT_EQ(r.hop.qlen_bytes, 1000u * (9 - i));
      EXPECT_EQ(r.hop.line_rate_mbps, 1000u);
      // Resumed once at most 2000 B are left.
      EXPECT_EQ(board.held(9), 9 - i > 2) << i;
    }
    EXPECT_FALSE(s.Release(1'000'000, &r));
    // Queued frames are freed when the bottleneck goes away.
    for (int i = 0; i < 7; ++i) {
      s.Egress(1000, 2'000'000);
      s.Hold(&frames[i], 1000, 3, 77, 9);
    }
    EXPECT_TRUE(board.held(9));
    fabric::KnobRequest off{};
    off.set = fabric::kKnobBottleneck;
    s.Apply(off, &board);
    EXPECT_EQ(freed, 7);
    EXPECT_FALSE(board.held(9));
    EXPECT_FALSE(s.active());
    for (int i = 0; i < 2; ++i) {
      s.Apply(k, &board);
      s.Egress(1000, 0);
      s.Hold(&frames[0], 1000, 3, 77, 9);
    }
    EXPECT_EQ(freed, 8);
  }
  EXPECT_EQ(freed, 9);  // and when the device goes
  SwitchKnobs::set_frame_free(nullptr);
}

TEST(SwitchKnobs, PortSettingsAreChecked) {
  fabric::KnobRequest k{};
  k.set = fabric::kKnobBottleneck;
  k.rate_bps = 1'000'000'000;
  k.pfc_xoff_bytes = 1000;
  k.pfc_xon_bytes = 2000;
  EXPECT_FALSE(SwitchKnobs::Validate(k).ok());  // xon above xoff
  k.pfc_xon_bytes = 500;
  EXPECT_TRUE(SwitchKnobs::Validate(k).ok());
  k.port_flags = 4;
  EXPECT_FALSE(SwitchKnobs::Validate(k).ok());
  k.port_flags = 0;
  k.reserved[6] = 1;
  EXPECT_FALSE(SwitchKnobs::Validate(k).ok());
}

}  // namespace
}  // namespace droce::droced

namespace droce::droced {
namespace {

// A netdev-bound device (doc/netdev.md): its MAC and GID table come from the
// kernel (SetNetdevState), its interface is a switch port (AddInterfacePort).
class NetdevStateTest : public FabricStateTest {
 protected:
  void SetUp() override {
    FabricStateTest::SetUp();
    verbs::DeviceFile f;
    f.name = "nd0";
    f.dev.mac = kIfMac;
    f.fabric = true;
    f.fabric_dir = dir_;
    f.netdev = "lo";
    f.netdev_bound = true;
    ASSERT_TRUE(verbs::WriteDeviceTree(dir_, dir_ + "/dev", f).ok());
    state_->Rescan();
    for (size_t i = 0; i < state_->devices().size(); ++i) {
      if (state_->devices()[i].name == "nd0") dev_ = static_cast<uint32_t>(i);
    }
  }
  void Bind(bool active) {
    iface_ = state_->AddInterfacePort(dev_, 77);
    ASSERT_GE(iface_, 0);
    std::vector<core::Gid> gids(fabric::kNetdevGids);
    gids[0] = core::Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x77, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
    gids[1] = wire::Ipv4MappedGid(0x0a000101);
    gids[3] = wire::Ipv4MappedGid(0x0a000103);  // a hole at 2
    state_->SetNetdevState(dev_, kIfMac, gids, 0b1011, active, 3);
  }
  fabric::Reply Resolve(int fd, const core::Gid& sgid, const core::Gid& dgid, ResolveQuery* q, uint32_t timeout = 1000,
                        const std::string& dev = "nd0") {
    fabric::Request req = fabric::MakeRequest(fabric::kOpResolve, dev);
    req.size = sizeof req + sizeof(fabric::ResolveRequest);
    req.pid = 4242;
    fabric::ResolveRequest body{};
    std::memcpy(body.sgid, sgid.data(), 16);
    std::memcpy(body.dgid, dgid.data(), 16);
    body.timeout_ms = timeout;
    char buf[sizeof req + sizeof body];
    std::memcpy(buf, &req, sizeof req);
    std::memcpy(buf + sizeof req, &body, sizeof body);
    return state_->Handle(fd, buf, sizeof buf, 4242, 0, &text_, q);
  }
  static constexpr core::Mac kIfMac{0x02, 0x77, 0x22, 0x33, 0x44, 0x55};
  uint32_t dev_ = 0;
  int iface_ = -1;
};

TEST_F(NetdevStateTest, AttachWaitsForTheBindingAndThenCarriesTheKernelsState) {
  fabric::Reply r = Attach(10, "nd0");
  EXPECT_EQ(r.error, ENODEV);  // not bound yet
  Bind(true);
  r = Attach(10, "nd0");
  ASSERT_EQ(r.error, 0) << r.message;
  const fabric::NetdevState m = state_->NetdevStateOf(dev_);
  EXPECT_EQ(m.magic, fabric::kNetdevMagic);
  EXPECT_EQ(m.size, sizeof m);
  EXPECT_EQ(m.port_active, 1);
  EXPECT_EQ(m.active_mtu, 3);
  EXPECT_EQ(m.gid_valid, 0b1011);
  EXPECT_EQ(std::memcmp(m.gids[3], wire::Ipv4MappedGid(0x0a000103).data(), 16), 0);
  const uint32_t generation = m.generation;
  // The same state again changes nothing; a carrier loss does.
  std::vector<core::Gid> gids = state_->devices()[dev_].gids;
  EXPECT_FALSE(state_->SetNetdevState(dev_, kIfMac, gids, 0b1011, true, 3));
  EXPECT_TRUE(state_->SetNetdevState(dev_, kIfMac, gids, 0b1011, false, 3));
  EXPECT_GT(state_->NetdevStateOf(dev_).generation, generation);
  EXPECT_EQ(state_->NetdevStateOf(dev_).port_active, 0);
}

TEST_F(NetdevStateTest, FramesFromTheInterfaceAreOnlyUnicastRoceForTheDevice) {
  Bind(true);
  const fabric::Reply a = Attach(10, "nd0", 111);
  ASSERT_EQ(a.error, 0) << a.message;
  auto classify = [&](std::vector<uint8_t> f, int src) {
    return state_->Classify(src, f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  };
  int proc = -1;
  for (size_t i = 0; i < state_->ports().size(); ++i) {
    if (state_->ports()[i].in_use && state_->ports()[i].conn_fd == 10) proc = static_cast<int>(i);
  }
  Decision d = classify(RoceFrame(kIfMac, 0x0a000101, a.qpn_base + 3), iface_);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, proc);
  EXPECT_EQ(classify(RoceFrame(kIfMac, 0x0a000101, 1), iface_).kind, Decision::kToGsi);
  // Another MAC, a broadcast, multicast RoCEv2, an unowned QPN: dropped.
  EXPECT_EQ(classify(RoceFrame(kMac0, 0x0a000101, a.qpn_base), iface_).kind, Decision::kDrop);
  EXPECT_EQ(classify(RoceFrame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0a000101, a.qpn_base), iface_).kind,
            Decision::kDrop);
  EXPECT_EQ(classify(RoceFrame({0x01, 0x00, 0x5e, 1, 2, 3}, 0xef010203, 0xFFFFFF), iface_).kind, Decision::kDrop);
  EXPECT_EQ(state_->devices()[dev_].counters.rx_not_roce, 3u);
  EXPECT_EQ(classify(RoceFrame(kIfMac, 0x0a000101, 0xfff000), iface_).kind, Decision::kDrop);
  EXPECT_EQ(state_->devices()[dev_].counters.rx_no_owner, 1u);
  // The device's process: another host's MAC leaves by the interface, a
  // fabric device's MAC stays inside, a broadcast to an unknown IP is no
  // one's (the kernel resolves this device's neighbours).
  d = classify(RoceFrame(kOtherMac, 0x0a000102, 0x40), proc);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_EQ(d.port, iface_);
  EXPECT_EQ(state_->devices()[dev_].counters.to_netdev, 1u);
  const fabric::Reply f = Attach(11, "droce0", 222);
  ASSERT_EQ(f.error, 0);
  d = classify(RoceFrame(kMac0, 0x0a000001, f.qpn_base), proc);
  EXPECT_EQ(d.kind, Decision::kToPort);
  EXPECT_NE(d.port, iface_);
  EXPECT_EQ(classify(RoceFrame({0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x0a0000ff, 0x40), proc).kind,
            Decision::kDrop);
  // The interface down: nothing leaves by it.
  std::vector<core::Gid> gids = state_->devices()[dev_].gids;
  state_->SetNetdevState(dev_, kIfMac, gids, 0b1011, false, 3);
  EXPECT_EQ(classify(RoceFrame(kOtherMac, 0x0a000102, 0x40), proc).kind, Decision::kDrop);
  EXPECT_EQ(state_->devices()[dev_].counters.netdev_dropped, 1u);
  // Unbound: its port goes; the flood of a device process never reaches an interface.
  state_->RemoveInterfacePort(dev_);
  EXPECT_EQ(state_->devices()[dev_].iface_port, -1);
  EXPECT_EQ(state_->NetdevStateOf(dev_).port_active, 0);
}

// kOpMcast: a process's groups, checked; the group's frames from the
// interface reach every process of the device; a process's multicast leaves
// by the interface as well; its groups go with it.
TEST_F(NetdevStateTest, MulticastGroupsJoinedByProcessesAndTheirFrames) {
  Bind(true);
  ASSERT_EQ(Attach(10, "nd0", 111).error, 0);
  ASSERT_EQ(Attach(11, "nd0", 222).error, 0);
  auto mcast = [&](pid_t pid, const core::Gid& g, uint32_t join, const std::string& dev = "nd0", uint8_t junk = 0) {
    fabric::Request req = fabric::MakeRequest(fabric::kOpMcast, dev);
    req.size = sizeof req + sizeof(fabric::McastRequest);
    req.pid = static_cast<uint32_t>(pid);
    fabric::McastRequest body{};
    std::memcpy(body.gid, g.data(), 16);
    body.join = join;
    body.reserved[5] = junk;
    char buf[sizeof req + sizeof body];
    std::memcpy(buf, &req, sizeof req);
    std::memcpy(buf + sizeof req, &body, sizeof body);
    return state_->Handle(9, buf, sizeof buf, pid, 0, &text_).error;
  };
  const core::Gid group = wire::Ipv4MappedGid(0xef010203);  // 239.1.2.3
  auto classify = [&](std::vector<uint8_t> f, int src) {
    return state_->Classify(src, f.data(), static_cast<uint32_t>(f.size()), static_cast<uint32_t>(f.size()));
  };
  const std::vector<uint8_t> frame = RoceFrame({0x01, 0x00, 0x5e, 1, 2, 3}, 0xef010203, 0xFFFFFF);
  EXPECT_EQ(classify(frame, iface_).kind, Decision::kDrop);  // no member yet
  EXPECT_EQ(mcast(111, wire::Ipv4MappedGid(0x0a000102), 1), EINVAL);  // no group
  EXPECT_EQ(mcast(111, group, 2), EINVAL);
  EXPECT_EQ(mcast(111, group, 1, "nd0", 1), EINVAL);               // reserved bytes
  EXPECT_EQ(mcast(333, group, 1), ENOENT);                         // not attached
  EXPECT_EQ(mcast(111, group, 1, "droce0"), EOPNOTSUPP);           // a fabric device
  EXPECT_EQ(mcast(111, group, 0), EINVAL);                         // leaving what it never joined
  EXPECT_EQ(mcast(111, group, 1), 0);
  EXPECT_EQ(mcast(111, group, 1), 0);  // again: still one membership
  EXPECT_EQ(mcast(222, group, 1), 0);
  EXPECT_EQ(state_->GroupsOf(dev_), std::vector<core::Gid>{group});
  Decision d = classify(frame, iface_);
  EXPECT_EQ(d.kind, Decision::kFlood);
  EXPECT_EQ(d.device, static_cast<int>(dev_));
  EXPECT_EQ(d.port, -1);  // never back out of the interface
  // The group's MAC must be the group's, the QPN the multicast QPN.
  EXPECT_EQ(classify(RoceFrame({0x01, 0x00, 0x5e, 1, 2, 4}, 0xef010203, 0xFFFFFF), iface_).kind, Decision::kDrop);
  EXPECT_EQ(classify(RoceFrame({0x01, 0x00, 0x5e, 1, 2, 3}, 0xef010203, 0x40), iface_).kind, Decision::kDrop);
  // A process's datagram to the group: its device's other processes, and out.
  int proc = -1;
  for (size_t i = 0; i < state_->ports().size(); ++i) {
    if (state_->ports()[i].in_use && state_->ports()[i].conn_fd == 10) proc = static_cast<int>(i);
  }
  d = classify(frame, proc);
  EXPECT_EQ(d.kind, Decision::kFlood);
  EXPECT_EQ(d.device, static_cast<int>(dev_));
  EXPECT_EQ(d.port, iface_);
  // One leaves, the other's connection closes: no member is left.
  EXPECT_EQ(mcast(111, group, 0), 0);
  EXPECT_EQ(state_->GroupsOf(dev_), std::vector<core::Gid>{group});
  state_->ConnectionClosed(11);
  EXPECT_TRUE(state_->GroupsOf(dev_).empty());
  EXPECT_EQ(classify(frame, iface_).kind, Decision::kDrop);
}

TEST_F(NetdevStateTest, ResolveChecksEveryField) {
  Bind(true);
  ResolveQuery q;
  const core::Gid src = wire::Ipv4MappedGid(0x0a000101), dst = wire::Ipv4MappedGid(0x0a000102);
  fabric::Reply r = Resolve(9, src, dst, &q);
  EXPECT_EQ(r.error, EINPROGRESS);
  EXPECT_EQ(q.device, dev_);
  EXPECT_EQ(q.dgid, dst);
  EXPECT_EQ(q.sgid, src);
  EXPECT_EQ(q.timeout_ms, 1000u);
  EXPECT_EQ(Resolve(9, wire::Ipv4MappedGid(0x0a000109), dst, &q).error, EADDRNOTAVAIL);  // not ours
  EXPECT_EQ(Resolve(9, core::Gid{}, dst, &q).error, EADDRNOTAVAIL);                      // a hole is no address
  EXPECT_EQ(Resolve(9, src, core::Gid{}, &q).error, EINVAL);
  core::Gid v6{0xfd};
  EXPECT_EQ(Resolve(9, src, v6, &q).error, EAFNOSUPPORT);
  EXPECT_EQ(Resolve(9, src, dst, &q, 0).error, EINVAL);
  EXPECT_EQ(Resolve(9, src, dst, &q, 60001).error, EINVAL);
  EXPECT_EQ(Resolve(9, src, dst, &q, 1000, "droce0").error, EOPNOTSUPP);  // a fabric device: ARP
  EXPECT_EQ(Resolve(9, src, dst, &q, 1000, "nosuch").error, ENODEV);
  EXPECT_EQ(Resolve(9, src, dst, nullptr).error, EOPNOTSUPP);
  // Nonzero reserved bytes, and a request cut short.
  fabric::Request req = fabric::MakeRequest(fabric::kOpResolve, "nd0");
  req.size = sizeof req + sizeof(fabric::ResolveRequest);
  req.pid = 4242;
  fabric::ResolveRequest body{};
  std::memcpy(body.sgid, src.data(), 16);
  std::memcpy(body.dgid, dst.data(), 16);
  body.timeout_ms = 100;
  body.reserved[3] = 1;
  char buf[sizeof req + sizeof body];
  std::memcpy(buf, &req, sizeof req);
  std::memcpy(buf + sizeof req, &body, sizeof body);
  EXPECT_EQ(state_->Handle(9, buf, sizeof buf, 4242, 0, &text_, &q).error, EINVAL);
  EXPECT_EQ(state_->Handle(9, buf, sizeof buf - 1, 4242, 0, &text_, &q).error, EINVAL);
}

}  // namespace
}  // namespace droce::droced
