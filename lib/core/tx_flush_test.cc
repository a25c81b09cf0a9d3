// Full frames of a long message leave tx_flush_bytes at a time (a peer that
// reads the port on another CPU starts on the first while the rest are
// built), on a port that says its reader works meanwhile; short frames still
// fill a burst. Counted at the port: the sizes of the TxBurst calls.
#include <algorithm>
#include <vector>

#include <gtest/gtest.h>

#include "sim/wire/mem_wire.h"
#include "tests/support/device_pair.h"

namespace droce::core {
namespace {

// Passes everything on and remembers how many frames each TxBurst carried.
// `concurrent`: what it says of its reader (a ring's, or a socket's).
class BurstRecorder final : public testing::ForwardingPort {
 public:
  BurstRecorder(pktio::BurstIo* inner, bool concurrent) : ForwardingPort(inner), concurrent_(concurrent) {}
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    bursts.push_back(n);
    return inner()->TxBurst(f, n);
  }
  bool ReadConcurrently() const override { return concurrent_; }
  std::vector<uint16_t> bursts;

 private:
  bool concurrent_;
};

sim::MemWireConfig RoomyWire() {
  sim::MemWireConfig wc;
  wc.pool_frames = 4096;
  wc.queue_frames = 4096;
  return wc;
}

testing::DevicePairOptions PairOptions(uint32_t tx_flush_bytes) {
  testing::DevicePairOptions o;
  o.config.tx_flush_bytes = tx_flush_bytes;
  o.mem_bytes = 1 << 20;
  o.mtu = 4096;
  return o;
}

// Two devices, each behind a BurstRecorder, with one RC QP each at MTU 4096.
struct RecordedPair {
  explicit RecordedPair(uint32_t tx_flush_bytes, bool concurrent = true)
      : wire(RoomyWire()),
        port{BurstRecorder(&wire.end(0), concurrent), BurstRecorder(&wire.end(1), concurrent)},
        p(&port[0], &port[1], PairOptions(tx_flush_bytes)) {}
  sim::MemWire wire;
  BurstRecorder port[2];
  testing::DevicePair p;
};

// The responder's 32 READ responses of a 128 KiB READ (MTU 4096).
std::vector<uint16_t> ReadResponseBursts(uint32_t tx_flush_bytes, bool concurrent = true) {
  RecordedPair r(tx_flush_bytes, concurrent);
  EXPECT_EQ(r.p.dev[0]->PostSend(r.p.qpn[0][0], r.p.Wr(transport::WrOpcode::kRdmaRead, 128 * 1024, 0, 0)), 0);
  EXPECT_EQ(r.p.RunUntil(1).size(), 1u);
  EXPECT_TRUE(std::equal(r.p.mem[1].begin(), r.p.mem[1].begin() + 128 * 1024, r.p.mem[0].begin()));
  return r.port[1].bursts;
}

TEST(TxFlush, LongReadLeavesFourFramesAtATime) {
  const std::vector<uint16_t> flushed = ReadResponseBursts(16384);
  ASSERT_EQ(flushed.size(), 8u);
  for (uint16_t n : flushed) EXPECT_EQ(n, 4u);
  const std::vector<uint16_t> whole = ReadResponseBursts(0);  // the limit off: one burst of 32
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0], 32u);
}

// A port whose TxBurst is a system call (a socket) gets the 32 frames in
// one burst whatever tx_flush_bytes says: no device setting has to undo it.
TEST(TxFlush, APortReadBySystemCallsGetsWholeBursts) {
  const std::vector<uint16_t> bursts = ReadResponseBursts(16384, /*concurrent=*/false);
  ASSERT_EQ(bursts.size(), 1u);
  EXPECT_EQ(bursts[0], 32u);
  RecordedPair r(16384, /*concurrent=*/false);
  EXPECT_EQ(r.p.dev[0]->config().tx_flush_bytes, 0u);
}

TEST(TxFlush, ShortFramesStillFillABurst) {
  RecordedPair r(16384);
  for (uint32_t k = 0; k < 64; ++k) {
    transport::SendWr w = r.p.Wr(transport::WrOpcode::kRdmaWrite, 64, 64 * k, 64 * k, k);
    w.flags = k == 63 ? uint32_t{transport::kSendSignaled} : 0u;
    ASSERT_EQ(r.p.dev[0]->PostSend(r.p.qpn[0][0], w), 0);
  }
  EXPECT_EQ(r.p.RunUntil(1).size(), 1u);
  ASSERT_FALSE(r.port[0].bursts.empty());
  EXPECT_EQ(r.port[0].bursts[0], 32u);  // the first round's first burst: 32 WRITEs, not 4
}

// The responder's ACKs are short frames, but one at a time: they do not
// make its next call ask for a whole burst (only a call filled with short
// frames does), so a READ after WRITEs on the QP still leaves four at a time.
TEST(TxFlush, LongReadAfterAcksStillLeavesFourFramesAtATime) {
  RecordedPair r(16384);
  for (uint32_t k = 0; k < 8; ++k) {
    transport::SendWr w = r.p.Wr(transport::WrOpcode::kRdmaWrite, 64, 64 * k, 64 * k, k);
    w.flags = uint32_t{transport::kSendSignaled};
    ASSERT_EQ(r.p.dev[0]->PostSend(r.p.qpn[0][0], w), 0);
    ASSERT_EQ(r.p.RunUntil(1).size(), 1u);  // one WRITE and its ACK at a time
  }
  const size_t acks = r.port[1].bursts.size();
  ASSERT_GE(acks, 8u);
  EXPECT_EQ(r.p.dev[0]->PostSend(r.p.qpn[0][0], r.p.Wr(transport::WrOpcode::kRdmaRead, 128 * 1024, 0, 0)), 0);
  EXPECT_EQ(r.p.RunUntil(1).size(), 1u);
  const std::vector<uint16_t> read(r.port[1].bursts.begin() + static_cast<std::ptrdiff_t>(acks), r.port[1].bursts.end());
  ASSERT_EQ(read.size(), 8u);
  for (uint16_t n : read) EXPECT_EQ(n, 4u);
}

}  // namespace
}  // namespace droce::core
