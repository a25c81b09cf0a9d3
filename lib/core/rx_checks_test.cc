// Who is talking: the receive path executes a frame only
// if it is for this device (VLAN, destination MAC and IP), in the default
// partition (P_Key), well formed at the IP layer (header checksum, TTL) and,
// for a connected QP with a path, sent along that path (source and
// destination address, IP version). Each drop moves its own counter
// (doc/rx-checks.md). And the neighbour table: static entries are never
// overridden by ARP, the table is bounded, a flood of ARPs costs little.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "wire/gid.h"
#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/arp.h"
#include "wire/fields.h"

namespace droce::core {
namespace {

constexpr Mac kPeerMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kOwnIp = 0x0A000001, kPeerIp = 0x0A000002;

// A device with one RC QP at RTS connected to a fake peer 10.0.0.2, and a
// remotely writable region; frames are fed by hand.
class RxChecks : public ::testing::Test {
 protected:
  void Build(DeviceConfig cfg) {
    cfg.mac = {0x02, 0, 0, 0, 0, 0x01};
    cfg.ipv4 = kOwnIp;
    dev_ = std::make_unique<Device>(cfg, &io_);
    pd_ = dev_->AllocPd();
    cq_ = *dev_->CreateCq(64);
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    qpn_ = *dev_->CreateQp(init);
    mem_.assign(4096, 0);
    keys_ = *dev_->RegMr(pd_, mem_.data(), mem_.size(), 0x10000,
                         mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
    ConnectParams c;
    c.peer_gid = wire::Ipv4MappedGid(kPeerIp);
    c.peer_mac = kPeerMac;
    c.peer_qpn = kPeerQpn;
    ASSERT_TRUE(ConnectQp(*dev_, qpn_, c).ok());
  }
  void SetUp() override { Build(DeviceConfig{}); }

  // An RDMA WRITE ONLY of 8 bytes of `value` at offset 8*psn, at the PSN the
  // QP expects, from the peer along the QP's path.
  wire::PacketFields Write(uint8_t value) {
    wire::PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = dev_->config().mac;
    f.route.src_ip = wire::Ipv4MappedGid(kPeerIp);
    f.route.dst_ip = wire::Ipv4MappedGid(kOwnIp);
    f.route.has_vlan = dev_->config().vlan;
    f.route.vlan_tci = dev_->config().vlan_tci;
    f.bth.opcode = wire::kRcWriteOnly;
    f.bth.dest_qp = qpn_;
    f.bth.ack_req = true;
    f.bth.psn = dev_->qp(qpn_)->expected_psn();
    f.reth_va = 0x10000 + 8 * (f.bth.psn % 500);
    f.reth_rkey = keys_.rkey;
    f.reth_length = 8;
    payload_.assign(8, value);
    f.payload = payload_;
    return f;
  }

  // Feeds one frame built from `f` (after `mutate`, for raw byte changes) and
  // reports whether it executed: the region changed and the PSN advanced.
  bool Feed(const wire::PacketFields& f, const std::function<void(std::vector<uint8_t>&)>& mutate = {}) {
    std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
    frame.resize(*wire::SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size())));
    if (mutate) mutate(frame);
    const std::vector<uint8_t> before = mem_;
    const transport::Qp* q = dev_->qp(f.bth.dest_qp);
    const uint32_t epsn = q->expected_psn();
    io_.rx.push_back(frame);
    dev_->Poll(now_ += 1000);
    const bool executed = q->expected_psn() != epsn;
    EXPECT_EQ(executed, mem_ != before);
    return executed;
  }

  const DeviceCounters& c() { return dev_->counters(); }

  sim::ScriptedIo io_;
  std::unique_ptr<Device> dev_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
  std::vector<uint8_t> mem_, payload_;
  mem::MrKeys keys_{};
  uint64_t now_ = 1'000'000;
};

TEST_F(RxChecks, TheLegitimateFrameExecutes) {
  EXPECT_TRUE(Feed(Write(1)));
  EXPECT_TRUE(Feed(Write(2)));
  EXPECT_EQ(c().rx_drop_dst_mac + c().rx_drop_dst_ip + c().rx_drop_path + c().rx_drop_pkey + c().rx_drop_vlan, 0u);
}

TEST_F(RxChecks, DestinationMacMustBeOursOrBroadcast) {
  wire::PacketFields f = Write(3);
  f.route.dst_mac = {0x02, 0, 0, 0, 0, 0x07};  // another host's (promiscuous port)
  EXPECT_FALSE(Feed(f));
  f.route.dst_mac = {0x01, 0x00, 0x5e, 0, 0, 1};  // a multicast group we did not join
  EXPECT_FALSE(Feed(f));
  f.route.dst_mac = {0x33, 0x33, 0, 0, 0, 1};
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_dst_mac, 3u);
  f.route.dst_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // broadcast_unresolved peers send this
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, DestinationIpMustBeOneOfOurGids) {
  wire::PacketFields f = Write(4);
  f.route.dst_ip = wire::Ipv4MappedGid(0x0A000009);
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_dst_ip, 1u);
  // Our IPv4 address in an IPv6 header (::ffff:10.0.0.1) is not an IPv6 GID.
  f.route.ipv6 = true;
  f.route.dst_ip = wire::Ipv4MappedGid(kOwnIp);
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_dst_ip, 2u);
  EXPECT_TRUE(Feed(Write(4)));
}

TEST_F(RxChecks, SourceAddressMustBeTheQpsPath) {
  wire::PacketFields f = Write(5);
  f.route.src_ip = wire::Ipv4MappedGid(0x0A4D0063);  // 10.77.0.99
  EXPECT_FALSE(Feed(f));
  f.route.src_ip = wire::Ipv4MappedGid(0x08080808);
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_path, 2u);
  EXPECT_EQ(c().rx_unknown_qp, 0u);
  EXPECT_TRUE(Feed(Write(5)));
}

TEST_F(RxChecks, AnIpv6FrameDoesNotReachAnIpv4Qp) {
  // To our link-local GID (a real IPv6 address of ours), from the peer's
  // link-local address, or from its IPv4 address written as IPv6.
  wire::PacketFields f = Write(6);
  f.route.ipv6 = true;
  f.route.dst_ip = dev_->gids()[0];
  f.route.src_ip = Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2};
  EXPECT_FALSE(Feed(f));
  f.route.src_ip = wire::Ipv4MappedGid(kPeerIp);
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_path, 2u);
  EXPECT_EQ(c().rx_drop_dst_ip, 0u);
}

TEST_F(RxChecks, AnIpv4FrameDoesNotReachAnIpv6Qp) {
  // A second QP whose path is IPv6 (link-local GID 0 to the peer's).
  QpInitAttr init;
  init.pd = pd_;
  init.send_cq = init.recv_cq = cq_;
  const uint32_t q6 = *dev_->CreateQp(init);
  const Gid peer6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2};
  ConnectParams cp;
  cp.peer_gid = peer6;
  cp.sgid_index = 0;
  cp.peer_mac = kPeerMac;
  cp.peer_qpn = kPeerQpn + 1;
  ASSERT_TRUE(ConnectQp(*dev_, q6, cp).ok());
  wire::PacketFields f = Write(7);
  f.bth.dest_qp = q6;
  f.bth.psn = dev_->qp(q6)->expected_psn();
  f.route.src_ip = wire::Ipv4MappedGid(kPeerIp);  // IPv4 from the right host, wrong IP version for this QP
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_path, 1u);
  // The same WRITE over IPv6 along its path executes.
  f.route.ipv6 = true;
  f.route.src_ip = peer6;
  f.route.dst_ip = dev_->gids()[0];
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, PkeyMustMatchTheDefaultPartition) {
  wire::PacketFields f = Write(8);
  f.bth.pkey = 0x1234;
  EXPECT_FALSE(Feed(f));
  f.bth.pkey = 0x0000;
  EXPECT_FALSE(Feed(f));
  f.bth.pkey = 0x8000;  // full member of the invalid partition 0
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_pkey, 3u);
  f.bth.pkey = 0x7FFF;  // limited member of the default partition: matches our full membership
  EXPECT_TRUE(Feed(f));
  f = Write(9);
  f.bth.pkey = 0xFFFF;
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, Ipv4ChecksumAndTtlZero) {
  EXPECT_FALSE(Feed(Write(10), [](std::vector<uint8_t>& b) { b[14 + 10] ^= 0x01; }));
  EXPECT_EQ(c().rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIpChecksum)], 1u);
  wire::PacketFields f = Write(10);
  f.route.ttl = 0;
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_parse_errors[static_cast<int>(wire::ParseStatus::kIpTtlZero)], 1u);
  f.route.ttl = 1;  // the last hop of a routed path
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, IcrcIsCheckedUnlessThePortIsConfiguredAsTrusted) {
  auto bad_icrc = [](std::vector<uint8_t>& b) { b.back() ^= 0x01; };
  EXPECT_FALSE(Feed(Write(20), bad_icrc));
  EXPECT_EQ(c().rx_bad_icrc(), 1u);
  EXPECT_TRUE(Feed(Write(21)));
  EXPECT_FALSE(Feed(Write(22), bad_icrc));  // by prediction too
  EXPECT_EQ(c().rx_bad_icrc(), 2u);
  DeviceConfig cfg;
  cfg.rx_icrc_trusted = true;  // a shared-memory link (DeviceConfig::rx_icrc_trusted)
  dev_.reset();
  Build(cfg);
  EXPECT_TRUE(Feed(Write(23), bad_icrc));
  EXPECT_TRUE(Feed(Write(24), bad_icrc));  // by prediction too
  EXPECT_EQ(c().rx_bad_icrc(), 0u);
  EXPECT_GT(c().rx_predicted, 0u);
}

TEST_F(RxChecks, VlanTagWhereTheDeviceHasNone) {
  wire::PacketFields f = Write(11);
  f.route.has_vlan = true;
  f.route.vlan_tci = 5;
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_vlan, 1u);
  f.route.vlan_tci = 3 << 13;  // VLAN id 0: a priority tag, the untagged network
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, WrongOrMissingVlanWhereTheDeviceHasOne) {
  DeviceConfig cfg;
  cfg.vlan = true;
  cfg.vlan_tci = (3 << 13) | 100;
  dev_.reset();
  Build(cfg);
  wire::PacketFields f = Write(12);
  f.route.vlan_tci = 101;
  EXPECT_FALSE(Feed(f));
  f.route.has_vlan = false;
  EXPECT_FALSE(Feed(f));
  EXPECT_EQ(c().rx_drop_vlan, 2u);
  f.route.has_vlan = true;
  f.route.vlan_tci = 100;  // another priority, the same VLAN
  EXPECT_TRUE(Feed(f));
}

TEST_F(RxChecks, LoopbackFramesPassEveryCheck) {
  // A QP connected to the device itself: its frames come from our own MAC
  // and IP to our own MAC and IP, as a loopback port returns them.
  QpInitAttr init;
  init.pd = pd_;
  init.send_cq = init.recv_cq = cq_;
  const uint32_t self = *dev_->CreateQp(init);
  ConnectParams cp;
  cp.peer_gid = wire::Ipv4MappedGid(kOwnIp);
  cp.peer_mac = dev_->config().mac;
  cp.peer_qpn = self;
  ASSERT_TRUE(ConnectQp(*dev_, self, cp).ok());
  transport::SendWr w;
  w.wr_id = 1;
  w.opcode = transport::WrOpcode::kRdmaWrite;
  w.flags = transport::kSendSignaled;
  w.num_sge = 1;
  std::fill(mem_.begin() + 2048, mem_.begin() + 2048 + 64, 0x5A);
  w.sg_list[0] = {0x10000 + 2048, 64, keys_.lkey};
  w.remote_addr = 0x10000 + 1024;
  w.rkey = keys_.rkey;
  ASSERT_EQ(dev_->PostSend(self, w), 0);
  queue::Completion wc{};
  for (int i = 0; i < 20 && dev_->PollCq(cq_, &wc, 1) == 0; ++i) {
    dev_->Poll(now_ += 1000);
    for (auto& sent : io_.sent) io_.rx.push_back(sent);  // the port loops every frame back
    io_.sent.clear();
  }
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, queue::WcStatus::kSuccess);
  EXPECT_TRUE(std::all_of(mem_.begin() + 1024, mem_.begin() + 1024 + 64, [](uint8_t b) { return b == 0x5A; }));
  EXPECT_EQ(c().rx_drop_dst_mac + c().rx_drop_dst_ip + c().rx_drop_path + c().rx_drop_pkey + c().rx_drop_vlan, 0u);
}

TEST_F(RxChecks, ForgedAckFromAnotherAddressCompletesNothing) {
  // A WRITE in flight; an ACK for it from a spoofed source must not complete it.
  transport::SendWr w;
  w.wr_id = 7;
  w.opcode = transport::WrOpcode::kRdmaWrite;
  w.flags = transport::kSendSignaled;
  w.num_sge = 1;
  w.sg_list[0] = {0x10000, 16, keys_.lkey};
  w.remote_addr = 0x5000;
  w.rkey = 0x1234;
  ASSERT_EQ(dev_->PostSend(qpn_, w), 0);
  dev_->Poll(now_ += 1000);
  ASSERT_EQ(io_.sent.size(), 1u);
  const wire::ParsedPacket sent = wire::ParsePacket(io_.sent[0].data(), static_cast<uint32_t>(io_.sent[0].size()));
  wire::PacketFields ack;
  ack.route.src_mac = kPeerMac;
  ack.route.dst_mac = dev_->config().mac;
  ack.route.src_ip = wire::Ipv4MappedGid(0x0A4D0063);
  ack.route.dst_ip = wire::Ipv4MappedGid(kOwnIp);
  ack.bth.opcode = wire::kRcAcknowledge;
  ack.bth.dest_qp = qpn_;
  ack.bth.psn = wire::BthView(io_.sent[0].data() + sent.bth_offset).psn();
  ack.aeth_syndrome = 0x1F;
  ack.aeth_msn = 1;
  std::vector<uint8_t> frame(256);
  frame.resize(*wire::SerializeFields(ack, frame.data(), 256));
  io_.rx.push_back(frame);
  dev_->Poll(now_ += 1000);
  queue::Completion wc;
  EXPECT_EQ(dev_->PollCq(cq_, &wc, 1), 0u);
  EXPECT_EQ(c().rx_drop_path, 1u);
  // From the peer it completes.
  ack.route.src_ip = wire::Ipv4MappedGid(kPeerIp);
  frame.resize(256);
  frame.resize(*wire::SerializeFields(ack, frame.data(), 256));
  io_.rx.push_back(frame);
  dev_->Poll(now_ += 1000);
  ASSERT_EQ(dev_->PollCq(cq_, &wc, 1), 1u);
  EXPECT_EQ(wc.wr_id, 7u);
}

std::vector<uint8_t> ArpFrame(uint16_t op, uint32_t sender_ip, const Mac& sender_mac, uint32_t target_ip,
                              const Mac& dst) {
  wire::ArpPacket a;
  a.op = op;
  a.sender_ip = sender_ip;
  a.sender_mac = sender_mac;
  a.target_ip = target_ip;
  a.target_mac = dst;
  std::vector<uint8_t> f(wire::kArpFrameBytes + wire::kVlanTagBytes);
  f.resize(wire::BuildArp(a, false, 0, f.data()));
  return f;
}

// --- Counters: one list for every printer, ARP/ND bytes counted.

TEST(Counters, EveryFieldIsVisitedOnceUnderItsOwnName) {
  // Give every uint64_t of the struct a distinct value; the visitor must
  // report each (but the never-counted parse slots: ok and foreign reasons).
  DeviceCounters c;
  static_assert(sizeof(DeviceCounters) % sizeof(uint64_t) == 0);
  constexpr size_t kWords = sizeof(DeviceCounters) / sizeof(uint64_t);
  uint64_t words[kWords];
  for (size_t i = 0; i < kWords; ++i) words[i] = 1000 + i;
  std::memcpy(&c, words, sizeof c);
  std::vector<uint64_t> seen;
  std::vector<std::string> names;
  ForEachDeviceCounter(c, [&](const char* name, uint64_t v) {
    seen.push_back(v);
    names.emplace_back(name);
  });
  size_t never_counted = 1;  // kOk
  for (int i = 0; i < static_cast<int>(wire::ParseStatus::kCount); ++i) {
    never_counted += wire::IsForeign(static_cast<wire::ParseStatus>(i)) ? 1 : 0;
  }
  EXPECT_EQ(seen.size(), kWords - never_counted);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::unique(names.begin(), names.end()), names.end());
  for (const char* want : {"rx_cnp", "rx_bad_icrc", "rx_truncated", "rx_bad_ip_checksum", "rx_ip_ttl_zero",
                           "rx_drop_pkey", "rx_drop_path", "neighbors_refused", "tx_bytes"}) {
    EXPECT_TRUE(std::binary_search(names.begin(), names.end(), std::string(want))) << want;
  }
}

TEST(Counters, ArpFramesCountInTxBytes) {
  sim::ScriptedIo io;
  DeviceConfig cfg;
  cfg.ipv4 = kOwnIp;
  Device dev(cfg, &io);
  io.rx.push_back(ArpFrame(wire::kArpRequest, kPeerIp, kPeerMac, kOwnIp, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  dev.RequestArp(0x0A000003);
  dev.Poll(1);
  ASSERT_EQ(io.sent.size(), 2u);
  EXPECT_EQ(dev.counters().tx_packets, 2u);
  EXPECT_EQ(dev.counters().tx_bytes, io.sent[0].size() + io.sent[1].size());
}

// --- QPNs a peer cannot guess cheaply.

TEST(Qpns, RandomBasePerDeviceWithin24BitsNeverTheSpecialQps) {
  sim::ScriptedIo io;
  std::vector<uint32_t> firsts;
  for (int i = 0; i < 8; ++i) {
    DeviceConfig cfg;
    cfg.max_qp = 4;
    Device dev(cfg, &io);
    const uint32_t pd = dev.AllocPd();
    const uint32_t cq = *dev.CreateCq(16);
    QpInitAttr init;
    init.pd = pd;
    init.send_cq = init.recv_cq = cq;
    std::vector<uint32_t> qpns;
    for (int k = 0; k < 4; ++k) qpns.push_back(*dev.CreateQp(init));
    EXPECT_FALSE(dev.CreateQp(init).ok());  // max_qp
    for (uint32_t k = 0; k < 4; ++k) {
      EXPECT_EQ(qpns[k], dev.qpn_base() + k);
      EXPECT_GE(qpns[k], 2u);
      EXPECT_LT(qpns[k], 1u << 24);
      EXPECT_NE(dev.qp(qpns[k]), nullptr);
    }
    EXPECT_EQ(dev.qp(dev.qpn_base() - 1), nullptr);
    EXPECT_EQ(dev.qp(dev.qpn_base() + 4), nullptr);
    EXPECT_EQ(dev.qp(0), nullptr);
    EXPECT_EQ(dev.qp(1), nullptr);
    firsts.push_back(qpns[0]);
  }
  std::sort(firsts.begin(), firsts.end());
  // Eight devices, 2^24 possible bases: equal ones would mean a fixed start.
  EXPECT_EQ(std::unique(firsts.begin(), firsts.end()), firsts.end());
  EXPECT_NE(firsts[0], Device::kFirstQpn);
}

TEST(Qpns, AFixedBaseIsHonouredAndABadOneReplaced) {
  sim::ScriptedIo io;
  DeviceConfig cfg;
  cfg.max_qp = 16;
  cfg.qpn_base = (1u << 24) - 16;  // the last range that fits
  Device top(cfg, &io);
  EXPECT_EQ(top.qpn_base(), (1u << 24) - 16);
  cfg.qpn_base = Device::kFirstQpn;
  Device fixed(cfg, &io);
  EXPECT_EQ(fixed.qpn_base(), Device::kFirstQpn);
  for (uint32_t bad : {1u, (1u << 24) - 15, 0xFFFFFFF0u}) {
    cfg.qpn_base = bad;
    Device d(cfg, &io);
    EXPECT_GE(d.qpn_base(), 2u);
    EXPECT_LE(d.qpn_base() + cfg.max_qp, 1u << 24);
  }
}

TEST_F(RxChecks, FramesForQpnsOutsideTheRangeFindNoQp) {
  for (uint32_t qpn : {qpn_ - 1, qpn_ + 1, uint32_t{Device::kFirstQpn}, 0u, 1u}) {
    if (qpn == qpn_) continue;
    wire::PacketFields f = Write(13);
    f.bth.dest_qp = qpn & 0xFFFFFF;
    std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
    frame.resize(*wire::SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size())));
    io_.rx.push_back(frame);
  }
  dev_->Poll(now_ += 1000);
  EXPECT_EQ(c().rx_unknown_qp, 5u);
  EXPECT_TRUE(Feed(Write(13)));
}

// --- The neighbour table.

TEST(Neighbors, ArpNeverOverridesAStaticEntry) {
  sim::ScriptedIo io;
  DeviceConfig cfg;
  cfg.ipv4 = kOwnIp;
  Device dev(cfg, &io);
  ASSERT_TRUE(dev.AddNeighbor(wire::Ipv4MappedGid(kPeerIp), kPeerMac));
  const Mac evil = {0x02, 0xee, 0, 0, 0, 0x66};
  io.rx.push_back(ArpFrame(wire::kArpReply, kPeerIp, evil, kOwnIp, cfg.mac));  // unsolicited reply
  io.rx.push_back(ArpFrame(wire::kArpRequest, kPeerIp, evil, kOwnIp, cfg.mac));
  dev.Poll(1);
  ASSERT_NE(dev.FindNeighbor(wire::Ipv4MappedGid(kPeerIp)), nullptr);
  EXPECT_EQ(*dev.FindNeighbor(wire::Ipv4MappedGid(kPeerIp)), kPeerMac);
  EXPECT_EQ(dev.counters().neighbors_refused, 2u);
  EXPECT_EQ(dev.counters().neighbors_learned, 0u);
  // A learnt entry does follow the latest ARP (the peer's NIC was replaced).
  io.rx.push_back(ArpFrame(wire::kArpReply, 0x0A000003, kPeerMac, kOwnIp, cfg.mac));
  io.rx.push_back(ArpFrame(wire::kArpReply, 0x0A000003, evil, kOwnIp, cfg.mac));
  dev.Poll(2);
  ASSERT_NE(dev.FindNeighbor(wire::Ipv4MappedGid(0x0A000003)), nullptr);
  EXPECT_EQ(*dev.FindNeighbor(wire::Ipv4MappedGid(0x0A000003)), evil);
  // An ARP aimed at someone else teaches nothing.
  io.rx.push_back(ArpFrame(wire::kArpReply, 0x0A000004, evil, 0x0A000005, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  dev.Poll(3);
  EXPECT_FALSE(dev.HasNeighbor(wire::Ipv4MappedGid(0x0A000004)));
}

TEST(Neighbors, AFloodOfDistinctSendersIsBoundedAndKeepsStaticEntries) {
  sim::ScriptedIo io;
  DeviceConfig cfg;
  cfg.ipv4 = kOwnIp;
  Device dev(cfg, &io);
  ASSERT_TRUE(dev.AddNeighbor(wire::Ipv4MappedGid(kPeerIp), kPeerMac));
  const uint64_t compares_before = dev.neighbor_key_compares();
  constexpr uint32_t kFlood = 50'000;
  for (uint32_t i = 0; i < kFlood; ++i) {
    const Mac m = {0x02, 0xee, static_cast<uint8_t>(i >> 16), static_cast<uint8_t>(i >> 8),
                   static_cast<uint8_t>(i), 1};
    io.rx.push_back(ArpFrame(wire::kArpRequest, 0x0B000000 + i, m, kOwnIp, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
    if (io.rx.size() == 32) {
      dev.Poll(i);
      io.sent.clear();
    }
  }
  while (!io.rx.empty()) dev.Poll(kFlood);
  const uint64_t compares = dev.neighbor_key_compares() - compares_before;
  EXPECT_LE(dev.neighbor_count(), cfg.max_neighbors);
  EXPECT_EQ(dev.counters().neighbors_learned, kFlood);
  EXPECT_EQ(dev.counters().neighbors_evicted, kFlood - (cfg.max_neighbors - 1));
  ASSERT_NE(dev.FindNeighbor(wire::Ipv4MappedGid(kPeerIp)), nullptr);
  EXPECT_EQ(*dev.FindNeighbor(wire::Ipv4MappedGid(kPeerIp)), kPeerMac);
  EXPECT_TRUE(dev.HasNeighbor(wire::Ipv4MappedGid(0x0B000000 + kFlood - 1)));  // the newest are kept
  EXPECT_FALSE(dev.HasNeighbor(wire::Ipv4MappedGid(0x0B000000)));
  // The work: each frame looks its sender up and evicts the oldest learnt
  // entry, a handful of key comparisons (a table scanned linearly, or a hash
  // the senders could pile into one bucket, makes hundreds per frame).
  RecordProperty("neighbor_key_compares", std::to_string(compares));
  EXPECT_LE(compares, 4ull * kFlood) << "key comparisons for " << kFlood << " frames";
  // A table full of static entries refuses what it learns, and keeps them all.
  DeviceConfig small = cfg;
  small.max_neighbors = 4;
  Device tiny(small, &io);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(tiny.AddNeighbor(wire::Ipv4MappedGid(0x0C000000 + i), kPeerMac));
  EXPECT_FALSE(tiny.AddNeighbor(wire::Ipv4MappedGid(0x0C000009), kPeerMac));
  io.rx.push_back(ArpFrame(wire::kArpRequest, 0x0B000000, kPeerMac, kOwnIp, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  tiny.Poll(1);
  EXPECT_EQ(tiny.neighbor_count(), 4u);
  EXPECT_EQ(tiny.counters().neighbors_refused, 2u);
  EXPECT_FALSE(tiny.HasNeighbor(wire::Ipv4MappedGid(0x0B000000)));
}

}  // namespace
}  // namespace droce::core
