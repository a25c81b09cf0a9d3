// Full frames of a long message leave tx_flush_bytes at a time (a peer that
// reads the port on another CPU starts on the first while the rest are
// built); short frames still fill a burst. Counted at the port: the sizes of
// the TxBurst calls.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"

namespace droce::core {
namespace {

// Passes everything on and remembers how many frames each TxBurst carried.
class BurstRecorder final : public pktio::BurstIo {
 public:
  explicit BurstRecorder(pktio::BurstIo* inner) : inner_(inner) {}
  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override { return inner_->RxBurst(f, n); }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return inner_->AllocTx(f, n); }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    bursts.push_back(n);
    return inner_->TxBurst(f, n);
  }
  void Release(pktio::Frame* f, uint16_t n) override { inner_->Release(f, n); }
  std::vector<uint16_t> bursts;

 private:
  pktio::BurstIo* inner_;
};

struct Pair {
  explicit Pair(uint32_t tx_flush_bytes)
      : wire(WireConfig()), port{BurstRecorder(&wire.end(0)), BurstRecorder(&wire.end(1))} {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      cfg.tx_flush_bytes = tx_flush_bytes;
      dev[i] = std::make_unique<Device>(cfg, &port[i]);
      const uint32_t pd = dev[i]->AllocPd();
      cq[i] = *dev[i]->CreateCq(256);
      QpInitAttr init;
      init.pd = pd;
      init.send_cq = init.recv_cq = cq[i];
      qpn[i] = *dev[i]->CreateQp(init);
      mem[i].assign(1 << 20, static_cast<uint8_t>(i));
      keys[i] = *dev[i]->RegMr(pd, mem[i].data(), mem[i].size(), reinterpret_cast<uint64_t>(mem[i].data()),
                               mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
    }
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(ConnectQp(*dev[i], qpn[i], ParamsToward(*dev[1 - i], qpn[1 - i], 4096)).ok());
    }
  }
  static sim::MemWireConfig WireConfig() {
    sim::MemWireConfig wc;
    wc.pool_frames = 4096;
    wc.queue_frames = 4096;
    return wc;
  }
  transport::SendWr Wr(transport::WrOpcode op, uint32_t len, uint64_t offset) {
    transport::SendWr w;
    w.opcode = op;
    w.num_sge = 1;
    w.sg_list[0] = {reinterpret_cast<uint64_t>(mem[0].data()) + offset, len, keys[0].lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(mem[1].data()) + offset;
    w.rkey = keys[1].rkey;
    return w;
  }
  // Polls both until dev[0] has `want` completions.
  void Run(size_t want) {
    queue::Completion buf[64];
    size_t done = 0;
    for (uint64_t now = 1'000'000; done < want && now < 100'000'000; now += 1000) {
      dev[0]->Poll(now);
      dev[1]->Poll(now);
      done += dev[0]->PollCq(cq[0], buf, 64);
    }
    EXPECT_EQ(done, want);
  }
  sim::MemWire wire;
  BurstRecorder port[2];
  std::unique_ptr<Device> dev[2];
  uint32_t cq[2], qpn[2];
  std::vector<uint8_t> mem[2];
  mem::MrKeys keys[2];
};

// The responder's 32 READ responses of a 128 KiB READ (MTU 4096).
std::vector<uint16_t> ReadResponseBursts(uint32_t tx_flush_bytes) {
  Pair p(tx_flush_bytes);
  transport::SendWr r = p.Wr(transport::WrOpcode::kRdmaRead, 128 * 1024, 0);
  r.flags = transport::kSendSignaled;
  EXPECT_EQ(p.dev[0]->PostSend(p.qpn[0], r), 0);
  p.Run(1);
  EXPECT_TRUE(std::equal(p.mem[1].begin(), p.mem[1].begin() + 128 * 1024, p.mem[0].begin()));
  return p.port[1].bursts;
}

TEST(TxFlush, LongReadLeavesFourFramesAtATime) {
  const std::vector<uint16_t> flushed = ReadResponseBursts(16384);
  ASSERT_EQ(flushed.size(), 8u);
  for (uint16_t n : flushed) EXPECT_EQ(n, 4u);
  const std::vector<uint16_t> whole = ReadResponseBursts(0);  // the limit off: one burst of 32
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0], 32u);
}

TEST(TxFlush, ShortFramesStillFillABurst) {
  Pair p(16384);
  for (uint32_t k = 0; k < 64; ++k) {
    transport::SendWr w = p.Wr(transport::WrOpcode::kRdmaWrite, 64, 64 * k);
    w.wr_id = k;
    w.flags = k == 63 ? uint32_t{transport::kSendSignaled} : 0u;
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0], w), 0);
  }
  p.Run(1);
  ASSERT_FALSE(p.port[0].bursts.empty());
  EXPECT_EQ(p.port[0].bursts[0], 32u);  // the first round's first burst: 32 WRITEs, not 4
}

}  // namespace
}  // namespace droce::core
