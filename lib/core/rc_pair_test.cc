// Two devices on an in-memory wire, exchanging every RC opcode under loss,
// reordering, duplication and corruption. Every WR must complete exactly once
// with the right status and the data must match byte for byte.
#include "tests/support/pair_matrix.h"
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;  // RcPair, Side, MakeWr, Completion, WrOpcode...

// post_send's doorbell (Device::Doorbell) sends the posting QP's packets at
// once and does nothing else: a frame waiting on the receive side stays
// there, for the poll loop.
TEST(Doorbell, TransmitsThePostingQpAndReceivesNothing) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 64, 1);
  Fill(b.mem, 0, 64, 2);
  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(1, WrOpcode::kRdmaWrite, b, 0, 64, a, 4096)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 1u);  // b's WRITE is on the wire to a
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().tx_packets, 1u);
  EXPECT_EQ(a.dev->counters().rx_packets, 0u);  // b's WRITE waits for a's poll loop
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 0u);  // nothing more to send
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].wr_id, 2u);
  EXPECT_EQ(cb[0].wr_id, 1u);
  EXPECT_EQ(std::memcmp(a.mem.data() + 4096, b.mem.data(), 64), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
}

// A deferred doorbell (the verbs runtime's doorbell batching) sends
// nothing; the next doorbell sends the deferred QP's frames with its own.
TEST(Doorbell, DeferredDoorbellLeavesWithTheNext) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 128, 3);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_EQ(a.dev->counters().tx_packets, 0u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaWrite, a, 64, 64, b, 4096 + 64)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_EQ(a.dev->deferred_doorbells(), 1u);  // one entry per QP
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 128, b, 8192)), 0);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 3u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 0u);
  EXPECT_EQ(a.dev->counters().tx_doorbells_deferred, 2u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(ca[i].wr_id, i + 1);  // in posting order
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 128), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 8192, a.mem.data(), 128), 0);
}

// A deferred doorbell never waits for a later post: the next poll round
// transmits its QP, and FlushDeferredDoorbells sends it and receives nothing.
TEST(Doorbell, DeferredDoorbellLeavesWithAPollRoundOrAFlush) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_GE(a.dev->Poll(pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().tx_packets, 1u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 0u);

  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(2, WrOpcode::kRdmaWrite, b, 0, 64, a, 4096)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 1u);  // a frame now waits at a
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  const uint64_t rx_before = a.dev->counters().rx_packets;
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().rx_packets, rx_before);  // receive is the poll loop's
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 0u);  // nothing deferred any more
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
}

// A QP destroyed after its doorbell was deferred is skipped.
TEST(Doorbell, DeferredDoorbellOfADestroyedQpIsSkipped) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  ASSERT_TRUE(a.dev->DestroyQp(a.qpn).ok());
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 0u);
  EXPECT_EQ(a.dev->counters().tx_packets, 0u);
}

// A round the program drives (Poll's hold_acks) keeps a lone ACK for the
// program's next post: the reply and the ACK of what it answers leave in
// one doorbell, and the peer takes both in one receive burst.
TEST(HoldAcks, ALoneAckLeavesWithTheProgramsReply) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 64, 4);
  Fill(b.mem, 64, 64, 5);
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10, b, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostRecv(a.qpn, MakeRecv(11, a, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);  // signaled: AckReq
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 1u);
  EXPECT_EQ(b.dev->Poll(pair.now(), /*hold_acks=*/true), 1u);  // the SEND in, nothing out
  EXPECT_EQ(b.dev->counters().tx_packets, 0u);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  Completion c;
  ASSERT_EQ(b.dev->PollCq(b.cq, &c, 1), 1u);
  EXPECT_EQ(c.wr_id, 10u);
  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(2, WrOpcode::kSend, b, 64, 64, a, 0)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 2u);  // the ACK and the reply
  const uint64_t bursts = a.dev->counters().rx_bursts;
  a.dev->Poll(pair.now());
  EXPECT_EQ(a.dev->counters().rx_bursts, bursts + 1);
  EXPECT_EQ(a.dev->counters().rx_packets, 2u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
  EXPECT_EQ(ca.size(), 2u);  // a's SEND (acknowledged) and its receive
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
  EXPECT_EQ(std::memcmp(a.mem.data() + 4096, b.mem.data() + 64, 64), 0);
}

// A held ACK waits one round at most: the next round sends it, held or not;
// a round the progress thread runs (no hold_acks) never holds.
TEST(HoldAcks, AHeldAckLeavesWithTheNextRound) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10 + i, b, 4096 * (i + 1), 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_packets, 0u);
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_packets, 1u);  // held once, then sent
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now());
  EXPECT_EQ(b.dev->counters().tx_packets, 2u);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 2));
}

// Selective-repeat QPs time RTTs from their ACKs: never held.
TEST(HoldAcks, SelectiveRepeatQpsDoNotHold) {
  RcPair pair({}, 7, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, nullptr, 16384, true, true);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10, b, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 0u);
  EXPECT_EQ(b.dev->counters().tx_packets, 1u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
}

// A QP asks the device for the buffers its queued requests fill, not for
// its window's room: one 64 B WRITE's doorbell takes one buffer.
TEST(Doorbell, DemandCountsQueuedRequestPackets) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::RcQp* q = a.dev->qp(a.qpn);
  ASSERT_NE(q, nullptr);
  const uint32_t burst = 32;
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 0u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaRead, a, 8192, 8192, b, 0)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 2u);  // a READ: one request packet
  const uint32_t mtu_packets = 4096 / q->attr().path_mtu;
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 4096, b, 4096)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 2u + mtu_packets);
  EXPECT_EQ(q->TransmitDemand(pair.now(), 2), 2u);  // never more than asked
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 2u + mtu_packets);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 0u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
}

// The impaired-wire matrix (tests/support/pair_matrix.h) with go-back-N:
// every opcode and size, data byte for byte, each WR completed once, only
// IBTA opcodes on the wire.
class RcMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(RcMatrix, AllOpcodesAllSizes) {
  const auto [scenario, mtu] = GetParam();
  AllOpcodesAllSizes(scenario, mtu, /*selective_repeat=*/false);
}

INSTANTIATE_TEST_SUITE_P(Impaired, RcMatrix, MatrixValues(), MatrixName);

}  // namespace
}  // namespace droce::core
