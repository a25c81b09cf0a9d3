// The control channel's hello exchange between two devices on the
// in-memory wire, on virtual time: a side joins late, at the worst moment
// for the side that was waiting for it.
#include "apps/testpmd/control_channel.h"

#include <memory>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "sim/wire/mem_wire.h"
#include "wire/gid.h"

namespace droce::testpmd {
namespace {

constexpr uint64_t kMs = 1'000'000;

// One end: a device, its control QP and a control area, as a session has.
struct End {
  End(pktio::BurstIo* io, uint8_t host) {
    core::DeviceConfig cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, host};
    cfg.ipv4 = 0x0A000000u | host;
    dev = std::make_unique<core::Device>(cfg, io);
    const uint32_t pd = dev->AllocPd();
    cq = *dev->CreateCq(64);
    core::QpInitAttr init;
    init.pd = pd;
    init.send_cq = init.recv_cq = cq;
    init.caps.max_send_wr = init.caps.max_recv_wr = 2 * kCtrlRecvs;
    qpn = *dev->CreateQp(init);
    area.assign(kCtrlAreaBytes, 0);
    const uint64_t va = reinterpret_cast<uint64_t>(area.data());
    const mem::MrKeys keys = *dev->RegMr(pd, area.data(), area.size(), va, mem::kLocalWrite | mem::kRemoteWrite);
    ctrl.emplace(*dev, qpn, area.data(), va, keys.lkey, keys.rkey, va);
  }
  // Connects toward `peer` and sends the hello.
  void Start(const End& peer) {
    core::ConnectParams c;
    c.peer_gid = wire::Ipv4MappedGid(peer.dev->config().ipv4);
    c.peer_mac = peer.dev->config().mac;
    c.peer_qpn = peer.qpn;
    c.timeout = 14;  // 67 ms, as a session's
    c.retry_cnt = 7;
    ASSERT_TRUE(ctrl->StartHello(c, 1024 + dev->config().mac[5]).ok());
    started = true;
  }
  // One poll round of the owner: the device, its completions, the exchange.
  void Round(uint64_t now) {
    dev->Poll(now);
    queue::Completion wc[16];
    const uint32_t n = dev->PollCq(cq, wc, 16);
    for (uint32_t i = 0; i < n; ++i) EXPECT_TRUE(ctrl->Consume(wc[i], &errors));
    if (started && !done) {
      absl::StatusOr<bool> d = ctrl->HelloDone();
      ASSERT_TRUE(d.ok()) << d.status();
      done = *d;
    }
  }
  const transport::QpCounters& counters() const { return dev->qp(qpn)->counters(); }

  std::unique_ptr<core::Device> dev;
  uint32_t cq = 0, qpn = 0;
  std::vector<uint8_t> area;
  std::optional<ControlChannel> ctrl;
  bool started = false, done = false;
  uint64_t errors = 0;
};

struct Pair {
  sim::MemWire wire{sim::MemWireConfig{}};
  End a{&wire.end(0), 1}, b{&wire.end(1), 2};
  uint64_t now = 1'000 * kMs;
  void Round() {
    now += kMs;
    a.Round(now);
    b.Round(now);  // before b starts: its QP is in RESET and drops a's frames, like a switch with no owner
  }
  // Rounds until both are done (at most `limit_ns` of virtual time).
  bool RunUntilDone(uint64_t limit_ns) {
    for (const uint64_t end = now + limit_ns; now < end && !(a.done && b.done);) Round();
    return a.done && b.done;
  }
};

// Messages after the exchange get through both ways (the PSNs agree).
void ExpectMessagesFlow(Pair& p) {
  p.b.ctrl->Send(CtrlType::kStart, 7);
  p.a.ctrl->Send(CtrlType::kReady, 9);
  for (int i = 0; i < 100 && !(p.a.ctrl->Has(CtrlType::kStart) && p.b.ctrl->Has(CtrlType::kReady)); ++i) p.Round();
  ASSERT_TRUE(p.a.ctrl->Has(CtrlType::kStart));
  ASSERT_TRUE(p.b.ctrl->Has(CtrlType::kReady));
  EXPECT_EQ(p.a.ctrl->Take(CtrlType::kStart).value, 7u);
  EXPECT_EQ(p.b.ctrl->Take(CtrlType::kReady).value, 9u);
  EXPECT_EQ(p.a.errors, 0u);
  EXPECT_EQ(p.b.errors, 0u);
}

TEST(HelloExchange, BothPresent) {
  Pair p;
  p.a.Start(p.b);
  p.b.Start(p.a);
  ASSERT_TRUE(p.RunUntilDone(1'000 * kMs));
  EXPECT_EQ(p.a.ctrl->peer_hello().value, 1026u);
  EXPECT_EQ(p.b.ctrl->peer_hello().value, 1025u);
  EXPECT_EQ(p.a.ctrl->restarts() + p.b.ctrl->restarts(), 0u);
  ExpectMessagesFlow(p);
}

// a's control QP retries into the void until it errs, and starts over.
TEST(HelloExchange, AbsentPeerRestartsTheQp) {
  Pair p;
  p.a.Start(p.b);
  for (int i = 0; i < 2'000 && p.a.ctrl->restarts() < 2; ++i) p.Round();
  EXPECT_EQ(p.a.ctrl->restarts(), 2u);
  EXPECT_FALSE(p.a.done);
  p.b.Start(p.a);
  ASSERT_TRUE(p.RunUntilDone(2'000 * kMs));
  ExpectMessagesFlow(p);
}

// b's hello reaches a after a's last retransmission, before a's QP errs.
// Holding b's hello, a must still get its own through: its QP errs, it
// starts over with the PSN b's next message carries, and b gets the hello.
TEST(HelloExchange, PeerHelloArrivesInOurLastRetryInterval) {
  Pair p;
  p.a.Start(p.b);
  for (int i = 0; i < 2'000 && p.a.counters().retransmitted_packets < 7; ++i) p.Round();
  ASSERT_EQ(p.a.counters().retransmitted_packets, 7u);  // retry_cnt: the next timeout errs the QP
  ASSERT_EQ(p.a.dev->qp(p.a.qpn)->state(), transport::QpState::kRts);
  p.b.Start(p.a);
  ASSERT_TRUE(p.RunUntilDone(2'000 * kMs)) << "a done " << p.a.done << ", b done " << p.b.done;
  EXPECT_EQ(p.a.ctrl->restarts(), 1u);  // the QP erred holding b's hello
  EXPECT_EQ(p.b.ctrl->restarts(), 0u);
  EXPECT_EQ(p.b.ctrl->peer_hello().value, 1025u);
  ExpectMessagesFlow(p);
}

// The hello carries the run's shape; ends that differ in any part of it
// say which option differs, and nothing for equal shapes.
TEST(RunShape, RoundTripsAndNamesWhatDiffers) {
  const RunShape own{4096, 4096, 1u << 24};
  const RunShape back = DecodeRunShape(EncodeRunShape(own));
  EXPECT_EQ(back.mtu, own.mtu);
  EXPECT_EQ(back.outstanding, own.outstanding);
  EXPECT_EQ(back.size, own.size);
  EXPECT_EQ(RunShapeMismatch(own, own), "");
  EXPECT_EQ(RunShapeMismatch({1024, 16, 64}, {4096, 16, 64}),
            "the peer's path MTU is 4096, this side's 1024: give both the same --mtu (or set mtu on both)");
  EXPECT_EQ(RunShapeMismatch({1024, 16, 64}, {1024, 32, 64}),
            "the peer runs --outstanding 32, this side 16: give both the same");
  const std::string both = RunShapeMismatch({1024, 16, 64}, {1024, 8, 65536});
  EXPECT_NE(both.find("--outstanding 8, this side 16"), std::string::npos) << both;
  EXPECT_NE(both.find("--size 65536, this side 64"), std::string::npos) << both;
}

}  // namespace
}  // namespace droce::testpmd
