// One QP streaming the largest READ response a peer may ask for (2^31 bytes)
// must not monopolise a poll round: receive is polled
// between rounds and every other active QP gets its turn, so a second QP's
// WRITE is acknowledged within a round or two, with at most a few bursts of
// the stream ahead of it. Measured in rounds and packets, not wall time.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "sim/wire/mem_wire.h"
#include "tests/support/device_pair.h"

namespace droce::core {
namespace {

// A port that never pushes back, like af_packet: READ response packets for
// `sink_qpn` are taken and thrown away at once (the wire has room for all of
// them), everything else goes to the in-memory wire. Records how many READ
// response packets had left when the first ACK for `watch_qpn` did.
class SinkPort final : public testing::ForwardingPort {
 public:
  using ForwardingPort::ForwardingPort;
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      const wire::ParsedPacket p = wire::ParsePacket(f[i].data, f[i].len);
      const uint32_t qpn = p.ok() ? wire::BthView(f[i].data + p.bth_offset).dest_qp() : 0;
      if (p.ok() && qpn == sink_qpn && p.opcode >= wire::kRcReadResponseFirst &&
          p.opcode <= wire::kRcReadResponseOnly) {
        ++sunk_;
        inner()->Release(f + i, 1);
        continue;
      }
      if (p.ok() && qpn == watch_qpn && p.opcode == wire::kRcAcknowledge && sunk_at_ack_ < 0) {
        sunk_at_ack_ = static_cast<int64_t>(sunk_);
      }
      if (inner()->TxBurst(f + i, 1) != 1) return i;
    }
    return n;
  }

  uint32_t sink_qpn = 0, watch_qpn = 0;
  uint64_t sunk() const { return sunk_; }
  int64_t sunk_at_ack() const { return sunk_at_ack_; }

 private:
  uint64_t sunk_ = 0;
  int64_t sunk_at_ack_ = -1;
};

TEST(TxFairness, LargestReadDoesNotStarveAnotherQp) {
  // 2^31 bytes, the largest message IBTA allows, registered on both sides
  // without backing it: READ responses read untouched (zero) pages, and the
  // requester never receives them (the sink takes them).
  uint64_t big_len = 1ull << 31;
  void* big = mmap(nullptr, big_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (big == MAP_FAILED) {  // strict overcommit: a length the test can afford still shows the bound
    big_len = 256ull << 20;
    big = mmap(nullptr, big_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  ASSERT_NE(big, MAP_FAILED);

  sim::MemWireConfig wc;
  wc.pool_frames = 1024;
  wc.queue_frames = 512;
  sim::MemWire wire(wc);
  SinkPort sink(&wire.end(0));
  testing::DevicePairOptions o;  // device 0: the responder under test, 1: the peer
  o.qps = 2;
  o.mtu = 4096;
  testing::DevicePair p(&sink, &wire.end(1), o);
  mem::MrKeys big_keys[2];
  for (int i = 0; i < 2; ++i) {
    big_keys[i] = *p.dev[i]->RegMr(p.pd[i], big, big_len, reinterpret_cast<uint64_t>(big),
                                 mem::kLocalWrite | mem::kRemoteRead);
  }
  sink.sink_qpn = p.qpn[1][0];
  sink.watch_qpn = p.qpn[1][1];
  const uint64_t read_packets = big_len / 4096;

  transport::SendWr r;
  r.wr_id = 1;
  r.opcode = transport::WrOpcode::kRdmaRead;
  r.flags = transport::kSendSignaled;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(big), static_cast<uint32_t>(big_len), big_keys[1].lkey};
  r.remote_addr = reinterpret_cast<uint64_t>(big);
  r.rkey = big_keys[0].rkey;
  ASSERT_EQ(p.dev[1]->PostSend(p.qpn[1][0], r), 0);

  const uint32_t per_round = uint32_t{p.dev[0]->config().tx_bursts_per_qp} * p.dev[0]->config().burst;
  uint64_t now = 1'000'000;
  uint64_t max_round = 0;
  auto round = [&] {
    p.dev[1]->Poll(now);
    const uint64_t before = p.dev[0]->counters().tx_packets;
    p.dev[0]->Poll(now);
    max_round = std::max(max_round, p.dev[0]->counters().tx_packets - before);
    now += 1000;
  };
  // The stream starts; no round of the responder sends more than its budget.
  for (int i = 0; i < 3; ++i) round();
  ASSERT_GT(sink.sunk(), 0u);
  EXPECT_LE(max_round, per_round);

  // A WRITE on the other QP pair, posted while the READ streams.
  transport::SendWr w;
  w.wr_id = 2;
  w.opcode = transport::WrOpcode::kRdmaWrite;
  w.flags = transport::kSendSignaled;
  w.num_sge = 1;
  w.sg_list[0] = {reinterpret_cast<uint64_t>(p.mem[1].data()), 4096, p.keys[1].lkey};
  w.remote_addr = reinterpret_cast<uint64_t>(p.mem[0].data());
  w.rkey = p.keys[0].rkey;
  ASSERT_EQ(p.dev[1]->PostSend(p.qpn[1][1], w), 0);
  const uint64_t sunk_before_write = sink.sunk();
  queue::Completion c;
  int rounds = 0;
  while (rounds < 10 && p.dev[1]->PollCq(p.cq[1], &c, 1) == 0) {
    round();
    ++rounds;
  }
  ASSERT_LT(rounds, 10) << "the second QP's WRITE did not complete";
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, queue::WcStatus::kSuccess);
  EXPECT_LE(rounds, 3);
  // The ACK left with at most two rounds' budget of the stream ahead of it
  // (the round the WRITE arrived in, and possibly the stream's turn first).
  ASSERT_GE(sink.sunk_at_ack(), 0);
  EXPECT_LE(static_cast<uint64_t>(sink.sunk_at_ack()) - sunk_before_write, 2u * per_round);
  EXPECT_LE(max_round, 2u * per_round);  // two active QPs, each within its budget
  // The READ is still streaming: it was served alongside, not finished first.
  EXPECT_LT(sink.sunk(), read_packets);
  EXPECT_TRUE(std::equal(p.mem[0].begin(), p.mem[0].begin() + 4096, p.mem[1].begin()));
  p.dev[0].reset();
  p.dev[1].reset();
  munmap(big, big_len);
}

// Counts the transmit bursts a port is handed.
class BurstCounter final : public testing::ForwardingPort {
 public:
  using ForwardingPort::ForwardingPort;
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override {
    const uint16_t got = inner()->AllocTx(f, n);
    allocated += got;
    return got;
  }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    ++bursts;
    return inner()->TxBurst(f, n);
  }
  uint64_t bursts = 0;
  uint64_t allocated = 0;  // buffers handed out by AllocTx
};

// Many QPs with a packet each leave in one shared burst per round, from at
// most one burst's worth of buffers (one TxBurst per QP would make -q 8
// with small messages pay a port call per packet), each QP's packets still
// in order, and everything completes.
TEST(TxGather, OnePacketFromEachOfManyQpsIsOneBurst) {
  constexpr int kQps = 24;  // fewer than a burst (32)
  sim::MemWireConfig wc;
  wc.pool_frames = 1024;
  wc.queue_frames = 512;
  sim::MemWire wire(wc);
  BurstCounter counter(&wire.end(0));
  testing::DevicePairOptions o;
  o.qps = kQps;
  testing::DevicePair p(&counter, &wire.end(1), o);
  for (int k = 0; k < kQps; ++k) {
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][k], p.Wr(transport::WrOpcode::kRdmaWrite, 64, k * 64, 32 * 1024 + k * 64, k)),
              0);
  }
  uint64_t now = 1'000'000;
  p.dev[0]->Poll(now);
  EXPECT_EQ(p.dev[0]->counters().tx_packets, uint64_t{kQps});
  EXPECT_EQ(counter.bursts, 1u);
  // Each QP asks for a burst's worth of buffers (its window allows that
  // many) and uses one: what it leaves is kept for the next QP, not given
  // back and allocated again (was 32 + 31 + ... + 9 = 492 for 24 QPs).
  EXPECT_LE(counter.allocated, uint64_t{p.dev[0]->config().burst});
  std::vector<queue::Completion> done;
  for (int round = 0; round < 100 && done.size() < kQps; ++round) {
    now += 1000;
    p.dev[1]->Poll(now);
    p.dev[0]->Poll(now);
    queue::Completion c[64];
    const uint32_t n = p.dev[0]->PollCq(p.cq[0], c, 64);
    done.insert(done.end(), c, c + n);
  }
  ASSERT_EQ(done.size(), size_t{kQps});
  for (const queue::Completion& c : done) EXPECT_EQ(c.status, queue::WcStatus::kSuccess);
  for (int k = 0; k < kQps; ++k) {
    EXPECT_EQ(std::memcmp(p.mem[1].data() + 32 * 1024 + k * 64, p.mem[0].data() + k * 64, 64), 0) << k;
  }
}

}  // namespace
}  // namespace droce::core
