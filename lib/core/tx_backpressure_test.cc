// A port that takes only part of a burst (a DPDK TX ring that is full) is
// backpressure, not loss: the device keeps the refused frames and sends them
// first next round, so nothing is retransmitted and the data arrives intact.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "sim/wire/mem_wire.h"
#include "tests/support/device_pair.h"

namespace droce::core {
namespace {

// Accepts at most `per_call` frames per TxBurst, and nothing on every other
// call: a ring that drains slower than the device fills it.
class NarrowPort final : public testing::ForwardingPort {
 public:
  NarrowPort(pktio::BurstIo* inner, uint16_t per_call) : ForwardingPort(inner), per_call_(per_call) {}
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    if (++calls_ % 2 == 0) {
      refused_ += n;
      return 0;
    }
    const uint16_t k = std::min(n, per_call_);
    refused_ += n - k;
    return inner()->TxBurst(f, k);
  }
  uint64_t refused() const { return refused_; }

 private:
  uint16_t per_call_;
  uint64_t calls_ = 0, refused_ = 0;
};

TEST(TxBackpressure, RefusedFramesWaitInsteadOfBeingLost) {
  sim::MemWireConfig wc;
  wc.pool_frames = 4096;
  wc.queue_frames = 4096;
  sim::MemWire wire(wc);
  NarrowPort narrow_a(&wire.end(0), 3), narrow_b(&wire.end(1), 3);
  testing::DevicePairOptions o;
  o.mem_bytes = 1 << 20;
  testing::DevicePair p(&narrow_a, &narrow_b, o);
  for (size_t k = 0; k < 256 * 1024; ++k) p.mem[0][k] = static_cast<uint8_t>(k * 13 + 7);
  // A WRITE and a READ of 256 packets each: requests and READ responses both
  // meet the narrow port.
  transport::SendWr w = p.Wr(transport::WrOpcode::kRdmaWrite, 256 * 1024, 0, 0, 1);
  ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], w), 0);
  transport::SendWr r = p.Wr(transport::WrOpcode::kRdmaRead, 256 * 1024, 512 * 1024, 0, 2);
  ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], r), 0);

  const std::vector<queue::Completion> done = p.RunUntil(2, 2'000'000);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
  EXPECT_EQ(done[1].status, queue::WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(p.mem[0].begin(), p.mem[0].begin() + 256 * 1024, p.mem[1].begin()));
  EXPECT_TRUE(std::equal(p.mem[1].begin(), p.mem[1].begin() + 256 * 1024, p.mem[0].begin() + 512 * 1024));
  // The port refused plenty, yet nothing was lost or sent twice.
  EXPECT_GT(narrow_a.refused() + narrow_b.refused(), 100u);
  EXPECT_GT(p.dev[0]->counters().tx_port_full + p.dev[1]->counters().tx_port_full, 0u);
  EXPECT_EQ(p.dev[0]->qp(p.qpn[0][0])->counters().retransmitted_packets, 0u);
  EXPECT_EQ(p.dev[1]->qp(p.qpn[1][0])->counters().retransmitted_packets, 0u);
  EXPECT_EQ(wire.counters(0).queue_full + wire.counters(1).queue_full, 0u);
}

// A port that refuses everything while closed (a full direct ring).
class GatePort final : public testing::ForwardingPort {
 public:
  using ForwardingPort::ForwardingPort;
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override { return open ? inner()->TxBurst(f, n) : 0; }
  bool open = false;
};

// What the verbs progress thread asks before it waits, untimed, for a full
// direct ring to take frames again (Runtime::BlockedOnRingLocked): frames
// the port refused wait and nothing else is due; not once the port took
// them, nor while a timer is due before the wait's end.
TEST(TxBackpressure, BlockedOnPortOnlyWhileRefusedFramesWaitAndNothingIsDue) {
  sim::MemWire wire(sim::MemWireConfig{});
  GatePort gate(&wire.end(0));
  testing::ForwardingPort b(&wire.end(1));
  testing::DevicePairOptions o;
  o.mem_bytes = 1 << 20;
  testing::DevicePair p(&gate, &b, o);
  EXPECT_FALSE(p.dev[0]->BlockedOnPort(p.now));  // nothing refused
  transport::SendWr w = p.Wr(transport::WrOpcode::kRdmaWrite, 64 * 1024, 0, 0, 1);
  ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], w), 0);
  p.dev[0]->Poll(p.now);
  EXPECT_GT(p.dev[0]->counters().tx_port_full, 0u);
  EXPECT_FALSE(p.dev[0]->Quiescent(p.now));
  EXPECT_TRUE(p.dev[0]->BlockedOnPort(p.now + 1000));
  // The WRITE's retransmit timer falls due some time ahead: not blocked
  // "until" then, as a wait that long would miss it.
  EXPECT_FALSE(p.dev[0]->BlockedOnPort(p.now + 60'000'000'000ull));
  gate.open = true;
  const std::vector<queue::Completion> done = p.RunUntil(1, 100'000);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
  EXPECT_FALSE(p.dev[0]->BlockedOnPort(p.now));
}

}  // namespace
}  // namespace droce::core
