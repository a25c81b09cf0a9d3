// Internal loopback: two QPs of one device connected to each other reach
// each other without the wire (rxe's loopback; the pyverbs suite's traffic
// tests depend on it). Every opcode, both MTUs, each GID kind the device has.
#include <cstring>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"

namespace droce::core {
namespace {

using queue::Completion;
using queue::WcStatus;
using transport::RecvWr;
using transport::SendWr;
using transport::WrOpcode;

class LoopbackDevice {
 public:
  explicit LoopbackDevice(transport::QpType type = transport::QpType::kRc, uint32_t qpn_base = 0x11)
      : wire_(sim::MemWireConfig{}) {
    DeviceConfig cfg;
    cfg.qpn_base = qpn_base;
    cfg.mac = {0x02, 0, 0, 0, 0, 0x11};
    cfg.ipv4 = 0x0A000001;
    cfg.has_ipv6_global = true;
    cfg.ipv6_global = Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    dev_ = std::make_unique<Device>(cfg, &wire_.end(0));
    pd_ = dev_->AllocPd();
    cq_ = *dev_->CreateCq(1024);
    for (uint32_t& qpn : qpn_) {
      QpInitAttr init;
      init.pd = pd_;
      init.send_cq = init.recv_cq = cq_;
      init.caps.max_send_wr = 256;
      init.caps.max_recv_wr = 256;
      init.caps.type = type;
      qpn = *dev_->CreateQp(init);
    }
    mem_.resize(1 << 20);
    keys_ = *dev_->RegMr(pd_, mem_.data(), mem_.size(), reinterpret_cast<uint64_t>(mem_.data()),
                         mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
  }

  absl::Status Connect(uint8_t sgid_index, uint32_t mtu) {
    for (int i = 0; i < 2; ++i) {
      ConnectParams c;
      c.sgid_index = sgid_index;
      c.peer_gid = dev_->gids()[sgid_index];
      c.peer_mac_known = false;  // resolved as a local GID, never by ARP/ND
      c.peer_qpn = qpn_[1 - i];
      c.mtu = mtu;
      if (absl::Status s = ConnectQp(*dev_, qpn_[i], c); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Polls until `want` completions arrived (virtual time).
  std::vector<Completion> Run(size_t want) {
    std::vector<Completion> got;
    Completion buf[32];
    for (int round = 0; round < 100000 && got.size() < want; ++round) {
      now_ += dev_->Poll(now_) > 0 ? 1000 : 50'000;
      for (uint32_t k; (k = dev_->PollCq(cq_, buf, 32)) > 0;) got.insert(got.end(), buf, buf + k);
    }
    return got;
  }

  uint64_t addr(uint64_t off) { return reinterpret_cast<uint64_t>(mem_.data()) + off; }
  SendWr Wr(uint64_t id, WrOpcode op, uint64_t off, uint32_t len, uint64_t roff) {
    SendWr wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.flags = transport::kSendSignaled;
    wr.num_sge = 1;
    wr.sg_list[0] = {addr(off), len, keys_.lkey};
    wr.remote_addr = addr(roff);
    wr.rkey = keys_.rkey;
    return wr;
  }
  RecvWr Recv(uint64_t id, uint64_t off, uint32_t len) {
    RecvWr wr;
    wr.wr_id = id;
    wr.num_sge = 1;
    wr.sg_list[0] = {addr(off), len, keys_.lkey};
    return wr;
  }

  void Pattern0() {
    for (uint32_t i = 0; i < 4096; ++i) mem_[i] = static_cast<uint8_t>(i * 13 + 5);
  }
  Device& dev() { return *dev_; }
  sim::MemWire& wire() { return wire_; }
  uint32_t qpn(int i) const { return qpn_[i]; }
  std::vector<uint8_t>& mem() { return mem_; }

 private:
  sim::MemWire wire_;
  std::unique_ptr<Device> dev_;
  uint32_t pd_ = 0, cq_ = 0, qpn_[2] = {};
  std::vector<uint8_t> mem_;
  mem::MrKeys keys_{};
  uint64_t now_ = 1'000'000;
};

void Pattern(std::vector<uint8_t>& m, uint64_t off, uint32_t len, uint8_t seed) {
  for (uint32_t i = 0; i < len; ++i) m[off + i] = static_cast<uint8_t>(i * 7 + seed + (i >> 9));
}

// (sgid index, path MTU)
class LoopbackTest : public ::testing::TestWithParam<std::tuple<uint8_t, uint32_t>> {};

TEST_P(LoopbackTest, EveryOpcodeReachesTheOtherQpWithoutTheWire) {
  const auto [gid_index, mtu] = GetParam();
  LoopbackDevice d;
  ASSERT_TRUE(d.Connect(gid_index, mtu).ok());
  constexpr uint32_t kLen = 10000;  // several packets at either MTU
  auto& m = d.mem();
  Pattern(m, 0, kLen, 1);       // WRITE source
  Pattern(m, 200000, kLen, 2);  // READ source
  Pattern(m, 400000, kLen, 3);  // SEND source
  uint64_t counter = 40;
  std::memcpy(&m[600000], &counter, 8);
  uint64_t cas = 7;
  std::memcpy(&m[600008], &cas, 8);

  Device& dev = d.dev();
  ASSERT_EQ(dev.PostRecv(d.qpn(1), d.Recv(100, 500000, kLen)), 0);
  ASSERT_EQ(dev.PostRecv(d.qpn(1), d.Recv(101, 520000, 64)), 0);  // WRITE with immediate
  ASSERT_EQ(dev.PostSend(d.qpn(0), d.Wr(1, WrOpcode::kRdmaWrite, 0, kLen, 100000)), 0);
  ASSERT_EQ(dev.PostSend(d.qpn(0), d.Wr(2, WrOpcode::kRdmaRead, 300000, kLen, 200000)), 0);
  SendWr send = d.Wr(3, WrOpcode::kSendWithImm, 400000, kLen, 0);
  send.imm_data = 0x12345678;
  ASSERT_EQ(dev.PostSend(d.qpn(0), send), 0);
  SendWr wimm = d.Wr(4, WrOpcode::kRdmaWriteWithImm, 0, 100, 140000);
  wimm.imm_data = 0xCAFE;
  ASSERT_EQ(dev.PostSend(d.qpn(0), wimm), 0);
  SendWr faa = d.Wr(5, WrOpcode::kAtomicFetchAndAdd, 610000, 8, 600000);
  faa.compare_add = 2;
  ASSERT_EQ(dev.PostSend(d.qpn(0), faa), 0);
  SendWr cs = d.Wr(6, WrOpcode::kAtomicCmpAndSwp, 610008, 8, 600008);
  cs.compare_add = 7;
  cs.swap = 99;
  ASSERT_EQ(dev.PostSend(d.qpn(0), cs), 0);

  const std::vector<Completion> got = d.Run(8);
  ASSERT_EQ(got.size(), 8u);
  for (const Completion& c : got) EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id;

  EXPECT_EQ(std::memcmp(&m[0], &m[100000], kLen), 0) << "WRITE";
  EXPECT_EQ(std::memcmp(&m[200000], &m[300000], kLen), 0) << "READ";
  EXPECT_EQ(std::memcmp(&m[400000], &m[500000], kLen), 0) << "SEND";
  EXPECT_EQ(std::memcmp(&m[0], &m[140000], 100), 0) << "WRITE with immediate";
  uint64_t v;
  std::memcpy(&v, &m[600000], 8);
  EXPECT_EQ(v, 42u);
  std::memcpy(&v, &m[610000], 8);
  EXPECT_EQ(v, 40u);
  std::memcpy(&v, &m[600008], 8);
  EXPECT_EQ(v, 99u);
  std::memcpy(&v, &m[610008], 8);
  EXPECT_EQ(v, 7u);

  // Nothing went to the wire; the device still counted it as traffic.
  EXPECT_EQ(d.wire().counters(0).sent, 0u);
  EXPECT_GT(dev.loopback_counters().looped, 2u * kLen / mtu);
  EXPECT_EQ(dev.counters().tx_packets, dev.counters().rx_packets);
  EXPECT_GT(dev.counters().tx_packets, 0u);
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<uint8_t, uint32_t>>& info) {
  static const char* const kGid[] = {"LinkLocal", "Ipv4", "Ipv6Global"};
  return std::string(kGid[std::get<0>(info.param)]) + "Mtu" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(GidsAndMtus, LoopbackTest,
                         ::testing::Combine(::testing::Values<uint8_t>(0, 1, 2),
                                            ::testing::Values<uint32_t>(1024, 4096)),
                         ParamName);

TEST(Loopback, UcWriteAndSend) {
  LoopbackDevice d(transport::QpType::kUc);
  ASSERT_TRUE(d.Connect(1, 1024).ok());
  auto& m = d.mem();
  Pattern(m, 0, 5000, 9);
  Device& dev = d.dev();
  ASSERT_EQ(dev.PostRecv(d.qpn(1), d.Recv(10, 300000, 5000)), 0);
  ASSERT_EQ(dev.PostSend(d.qpn(0), d.Wr(1, WrOpcode::kRdmaWrite, 0, 5000, 100000)), 0);
  ASSERT_EQ(dev.PostSend(d.qpn(0), d.Wr(2, WrOpcode::kSend, 0, 5000, 0)), 0);
  const std::vector<Completion> got = d.Run(3);
  ASSERT_EQ(got.size(), 3u);
  for (const Completion& c : got) EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(&m[0], &m[100000], 5000), 0);
  EXPECT_EQ(std::memcmp(&m[0], &m[300000], 5000), 0);
  EXPECT_EQ(d.wire().counters(0).sent, 0u);
}

// A path to another host still leaves through the port.
TEST(Loopback, OtherDestinationsUseTheWire) {
  LoopbackDevice d;
  ConnectParams c;
  c.peer_gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  c.peer_mac = {0x02, 0, 0, 0, 0, 0x22};
  c.peer_qpn = 0x99;
  ASSERT_TRUE(ConnectQp(d.dev(), d.qpn(0), c).ok());
  ASSERT_EQ(d.dev().PostSend(d.qpn(0), d.Wr(1, WrOpcode::kRdmaWrite, 0, 100, 0)), 0);
  d.Run(0);
  d.dev().Poll(2'000'000);
  EXPECT_EQ(d.wire().counters(0).sent, 1u);
  EXPECT_EQ(d.dev().loopback_counters().looped, 0u);
}

// A device shared by processes through droced: this process owns QPNs
// [base, base + max_qp); a frame to the device's own MAC for a QPN outside
// that range belongs to another process and leaves through the port (the
// daemon steers it), while frames between this process's QPs still loop.
TEST(Loopback, SharedPortLoopsOnlyThisProcessesQpns) {
  constexpr uint32_t kBase = 0x2000;
  LoopbackDevice d(transport::QpType::kRc, kBase);
  d.dev().loopback().SetOwnQpns(kBase, d.dev().config().max_qp);
  EXPECT_EQ(d.qpn(0), kBase);
  EXPECT_EQ(d.qpn(1), kBase + 1);
  EXPECT_NE(d.dev().qp(kBase), nullptr);
  EXPECT_EQ(d.dev().qp(0x11), nullptr);
  EXPECT_EQ(d.dev().qp(kBase - 1), nullptr);
  // Own QPs: the loopback.
  ASSERT_TRUE(d.Connect(1, 1024).ok());
  d.Pattern0();
  ASSERT_EQ(d.dev().PostSend(d.qpn(0), d.Wr(1, WrOpcode::kRdmaWrite, 0, 3000, 1 << 16)), 0);
  auto done = d.Run(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(d.mem().data(), d.mem().data() + (1 << 16), 3000), 0);
  const uint64_t looped = d.dev().loopback_counters().looped;
  EXPECT_GT(looped, 0u);
  EXPECT_EQ(d.wire().counters(0).sent, 0u);
  // Another process's QP of the same device (same GID, same MAC): the wire.
  ASSERT_TRUE(d.dev().ModifyQp(d.qpn(0), transport::QpAttr{.qp_state = transport::QpState::kReset},
                               transport::kAttrState).ok());
  ConnectParams c;
  c.sgid_index = 1;
  c.peer_gid = d.dev().gids()[1];
  c.peer_mac_known = false;
  c.peer_qpn = kBase + 0x1000 + 5;
  c.mtu = 1024;
  ASSERT_TRUE(ConnectQp(d.dev(), d.qpn(0), c).ok());
  ASSERT_EQ(d.dev().PostSend(d.qpn(0), d.Wr(2, WrOpcode::kRdmaWrite, 0, 100, 0)), 0);
  d.dev().Poll(3'000'000);
  EXPECT_EQ(d.wire().counters(0).sent, 1u);
  EXPECT_EQ(d.dev().loopback_counters().looped, looped);
}

}  // namespace
}  // namespace droce::core
