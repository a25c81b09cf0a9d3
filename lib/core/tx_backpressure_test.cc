// A port that takes only part of a burst (a DPDK TX ring that is full) is
// backpressure, not loss: the device keeps the refused frames and sends them
// first next round, so nothing is retransmitted and the data arrives intact.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"

namespace droce::core {
namespace {

// Accepts at most `per_call` frames per TxBurst, and nothing on every other
// call: a ring that drains slower than the device fills it.
class NarrowPort final : public pktio::BurstIo {
 public:
  NarrowPort(pktio::BurstIo* inner, uint16_t per_call) : inner_(inner), per_call_(per_call) {}
  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override { return inner_->RxBurst(f, n); }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return inner_->AllocTx(f, n); }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    if (++calls_ % 2 == 0) {
      refused_ += n;
      return 0;
    }
    const uint16_t k = std::min(n, per_call_);
    refused_ += n - k;
    return inner_->TxBurst(f, k);
  }
  void Release(pktio::Frame* f, uint16_t n) override { inner_->Release(f, n); }
  uint64_t refused() const { return refused_; }

 private:
  pktio::BurstIo* inner_;
  uint16_t per_call_;
  uint64_t calls_ = 0, refused_ = 0;
};

TEST(TxBackpressure, RefusedFramesWaitInsteadOfBeingLost) {
  sim::MemWireConfig wc;
  wc.pool_frames = 4096;
  wc.queue_frames = 4096;
  sim::MemWire wire(wc);
  NarrowPort narrow_a(&wire.end(0), 3), narrow_b(&wire.end(1), 3);
  pktio::BurstIo* ports[2] = {&narrow_a, &narrow_b};
  std::unique_ptr<Device> dev[2];
  uint32_t pd[2], cq[2], qpn[2];
  std::vector<uint8_t> mem[2];
  mem::MrKeys keys[2];
  for (int i = 0; i < 2; ++i) {
    DeviceConfig cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
    cfg.ipv4 = 0x0A000001 + i;
    dev[i] = std::make_unique<Device>(cfg, ports[i]);
    pd[i] = dev[i]->AllocPd();
    cq[i] = *dev[i]->CreateCq(256);
    QpInitAttr init;
    init.pd = pd[i];
    init.send_cq = init.recv_cq = cq[i];
    qpn[i] = *dev[i]->CreateQp(init);
    mem[i].assign(1 << 20, static_cast<uint8_t>(i));
    keys[i] = *dev[i]->RegMr(pd[i], mem[i].data(), mem[i].size(), reinterpret_cast<uint64_t>(mem[i].data()),
                             mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(ConnectQp(*dev[i], qpn[i], ParamsToward(*dev[1 - i], qpn[1 - i], 1024)).ok());
  }
  for (size_t k = 0; k < 256 * 1024; ++k) mem[0][k] = static_cast<uint8_t>(k * 13 + 7);
  // A WRITE and a READ of 256 packets each: requests and READ responses both
  // meet the narrow port.
  transport::SendWr w;
  w.wr_id = 1;
  w.opcode = transport::WrOpcode::kRdmaWrite;
  w.flags = transport::kSendSignaled;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(mem[0].data()), 256 * 1024, keys[0].lkey};
  w.remote_addr = reinterpret_cast<uint64_t>(mem[1].data());
  w.rkey = keys[1].rkey;
  ASSERT_EQ(dev[0]->PostSend(qpn[0], w), 0);
  transport::SendWr r = w;
  r.wr_id = 2;
  r.opcode = transport::WrOpcode::kRdmaRead;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(mem[0].data()) + 512 * 1024, 256 * 1024, keys[0].lkey};
  ASSERT_EQ(dev[0]->PostSend(qpn[0], r), 0);

  std::vector<queue::Completion> done;
  queue::Completion buf[8];
  for (uint64_t now = 1'000'000; done.size() < 2 && now < 2'000'000'000; now += 1000) {
    dev[0]->Poll(now);
    dev[1]->Poll(now);
    for (uint32_t k; (k = dev[0]->PollCq(cq[0], buf, 8)) > 0;) done.insert(done.end(), buf, buf + k);
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
  EXPECT_EQ(done[1].status, queue::WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(mem[0].begin(), mem[0].begin() + 256 * 1024, mem[1].begin()));
  EXPECT_TRUE(std::equal(mem[1].begin(), mem[1].begin() + 256 * 1024, mem[0].begin() + 512 * 1024));
  // The port refused plenty, yet nothing was lost or sent twice.
  EXPECT_GT(narrow_a.refused() + narrow_b.refused(), 100u);
  EXPECT_GT(dev[0]->counters().tx_port_full + dev[1]->counters().tx_port_full, 0u);
  EXPECT_EQ(dev[0]->qp(qpn[0])->counters().retransmitted_packets, 0u);
  EXPECT_EQ(dev[1]->qp(qpn[1])->counters().retransmitted_packets, 0u);
  EXPECT_EQ(wire.counters(0).queue_full + wire.counters(1).queue_full, 0u);
}

}  // namespace
}  // namespace droce::core
