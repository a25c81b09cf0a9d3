// AckReq on unsignaled work requests (doc/transport.md "Requester"): a
// signaled WR's last packet always asks for an ACK; unsignaled ones ask
// once every unsignaled_ack_every packets; a tail left unasked is solicited
// (its last packet resent with AckReq) after ack_solicit_ns without
// sending, never by a retransmission timeout.
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using transport::Qp;

// Two devices on a clean in-memory wire with the AckReq settings under
// test, driven by hand: A sends, B answers, in virtual time.
class AckPair {
 public:
  AckPair(uint32_t unsignaled_ack_every, uint64_t ack_solicit_ns = 100'000, uint8_t timeout = 14)
      : link_(sim::MemWireConfig{}) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      cfg.unsignaled_ack_every = unsignaled_ack_every;
      cfg.ack_solicit_ns = ack_solicit_ns;
      OpenSide(s_[i], cfg, &link_.end(i), 1 << 20);
    }
    ConnectSides(s_, 1024, timeout);
  }
  Side& a() { return s_[0]; }
  Side& b() { return s_[1]; }
  Qp* qa() { return s_[0].dev->qp(s_[0].qpn); }
  Qp* qb() { return s_[1].dev->qp(s_[1].qpn); }
  sim::MemWire& link() { return link_; }
  // Nothing of A's is unacknowledged: no timer left to run.
  bool AllAcked() { return qa()->NextDeadline() == 0; }

  // A 64 B WRITE from A to B, sent at `now` and received by B at once.
  void Write(uint64_t id, bool signaled, uint64_t now) {
    SendWr wr = MakeWr(id, WrOpcode::kRdmaWrite, a(), 0, 64, b(), 0);
    if (!signaled) wr.flags = 0;
    ASSERT_EQ(a().dev->PostSend(a().qpn, wr), 0);
    a().dev->Poll(now);
    b().dev->Poll(now + 1000);  // B answers what asked for an answer
  }
  // A takes B's answers at `now`; returns the completions it found.
  uint32_t TakeAnswers(uint64_t now) {
    a().dev->Poll(now);
    Completion c[64];
    return a().dev->PollCq(a().cq, c, 64);
  }

 private:
  sim::MemWire link_;
  Side s_[2];
};

TEST(AckReq, UnsignaledWritesShareOneAckEverySixteenPackets) {
  AckPair pair(16);
  uint64_t now = 1'000'000;
  for (int i = 1; i <= 40; ++i, now += 2000) pair.Write(i, false, now);
  pair.Write(41, true, now);
  EXPECT_EQ(pair.TakeAnswers(now + 2000), 1u);  // the signaled one
  // AckReq on WRITE 16 and 32 (sixteen packets each) and 41 (signaled).
  EXPECT_EQ(pair.qb()->counters().acks_sent, 3u);
  EXPECT_EQ(pair.qa()->counters().acks_received, 3u);
  EXPECT_TRUE(pair.AllAcked());  // 41's ACK covers them all
  EXPECT_EQ(pair.qa()->counters().ack_solicits, 0u);
}

TEST(AckReq, EveryMessageAsksWithUnsignaledAckEveryOne) {
  AckPair pair(1);  // rxe's behaviour
  uint64_t now = 1'000'000;
  for (int i = 1; i <= 10; ++i, now += 2000) pair.Write(i, false, now);
  pair.TakeAnswers(now);
  EXPECT_EQ(pair.qb()->counters().acks_sent, 10u);
  EXPECT_TRUE(pair.AllAcked());
}

TEST(AckReq, ASignaledWriteIsAnsweredAtOnce) {
  AckPair pair(16);
  const uint64_t t0 = 1'000'000;
  pair.Write(1, true, t0);
  EXPECT_EQ(pair.TakeAnswers(t0 + 2000), 1u);
  EXPECT_EQ(pair.qb()->counters().acks_sent, 1u);
}

TEST(AckReq, AnUnaskedTailIsSolicitedNotTimedOut) {
  AckPair pair(16, 100'000);
  const uint64_t t0 = 1'000'000;
  pair.Write(1, false, t0);
  pair.Write(2, false, t0 + 60'000);  // still sending: the solicit waits for quiet
  pair.TakeAnswers(t0 + 61'000);
  Qp* q = pair.qa();
  ASSERT_FALSE(pair.AllAcked());
  EXPECT_EQ(pair.qb()->counters().acks_sent, 0u);
  const uint64_t d = q->NextDeadline();
  ASSERT_GT(d, t0 + 60'000);
  ASSERT_LT(d, t0 + 60'000 + transport::AckTimeoutNs(14));  // before the retransmission timeout
  // Nothing before 100 us of quiet after the last packet.
  const uint64_t when = t0 + 160'000;
  for (uint64_t t = d; t < when; t = q->NextDeadline()) {
    pair.a().dev->Poll(t);
    EXPECT_EQ(q->counters().ack_solicits, 0u) << t - t0;
    EXPECT_EQ(q->counters().retransmitted_packets, 0u);
  }
  EXPECT_EQ(q->NextDeadline(), when);
  pair.a().dev->Poll(when);  // the tail packet again, with AckReq
  EXPECT_EQ(q->counters().ack_solicits, 1u);
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(q->counters().retransmitted_packets, 1u);
  pair.b().dev->Poll(when + 1000);
  EXPECT_EQ(pair.qb()->counters().duplicates_received, 1u);
  pair.TakeAnswers(when + 2000);
  EXPECT_TRUE(pair.AllAcked());
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(q->NextDeadline(), 0u);  // nothing left to time
}

TEST(AckReq, ALostUnaskedTailIsRepairedBySolicit) {
  AckPair pair(16, 100'000);
  const uint64_t t0 = 1'000'000;
  pair.Write(1, false, t0);
  // WRITE 2 leaves A but is lost before B.
  SendWr wr = MakeWr(2, WrOpcode::kRdmaWrite, pair.a(), 64, 64, pair.b(), 64);
  wr.flags = 0;
  std::memset(pair.a().mem.data() + 64, 0x5A, 64);
  ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, wr), 0);
  pair.a().dev->Poll(t0 + 1000);
  pktio::Frame lost[4];
  ASSERT_EQ(pair.link().end(1).RxBurst(lost, 4), 1u);
  pair.link().end(1).Release(lost, 1);
  Qp* q = pair.qa();
  uint64_t t = q->NextDeadline();
  while (q->counters().ack_solicits == 0 && t != 0 && t < t0 + 10'000'000) {
    pair.a().dev->Poll(t);
    t = q->NextDeadline();
  }
  EXPECT_EQ(q->counters().ack_solicits, 1u);
  EXPECT_EQ(q->counters().timeouts, 0u);
  pair.b().dev->Poll(t + 1000);
  pair.TakeAnswers(t + 2000);
  EXPECT_TRUE(pair.AllAcked());
  EXPECT_EQ(pair.b().mem[64], 0x5A);
}

// A bulk stream asking every 64 packets (unsignaled_ack_every=64, as a
// netdev device streams): the window never waits for a solicit or a timer.
// 600 unsignaled one-packet WRITEs posted at once, more than the go-back-N
// window of 512, then one signaled: the ACKs the AckReqs draw open it.
TEST(AckReq, ABulkStreamAskingEverySixtyFourPacketsKeepsTheWindowOpen) {
  AckPair pair(64, 100'000);
  const uint64_t t0 = 1'000'000;
  for (uint64_t i = 1; i <= 601; ++i) {
    SendWr wr = MakeWr(i, WrOpcode::kRdmaWrite, pair.a(), (i % 64) * 64, 64, pair.b(), (i % 64) * 64);
    if (i != 601) wr.flags = 0;
    ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, wr), 0);
  }
  uint64_t t = t0;
  Completion c[8];
  uint32_t done = 0;
  for (; done == 0 && t < t0 + 50'000; t += 1000) {  // far below ack_solicit_ns and the ACK timeout
    pair.a().dev->Poll(t);
    pair.b().dev->Poll(t + 500);
    done = pair.a().dev->PollCq(pair.a().cq, c, 8);
  }
  ASSERT_EQ(done, 1u);
  EXPECT_EQ(c[0].wr_id, 601u);
  Qp* q = pair.qa();
  EXPECT_EQ(q->counters().ack_solicits, 0u);
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(q->counters().retransmitted_packets, 0u);
  // AckReq on packets 64, 128, ..., 576 and the signaled 601: at most ten
  // ACKs (the responder coalesces those of one receive round).
  EXPECT_GE(pair.qb()->counters().acks_sent, 2u);
  EXPECT_LE(pair.qb()->counters().acks_sent, 10u);
  EXPECT_TRUE(pair.AllAcked());
}

// The ACK an AckReq drew is lost: the requester's transport timer resends
// (the retry probe) and the duplicate's ACK settles everything.
TEST(AckReq, ALostAckOfABulkStreamIsRecoveredByTheTimer) {
  AckPair pair(64, 100'000, /*timeout=*/10);
  const uint64_t t0 = 1'000'000;
  for (uint64_t i = 1; i <= 64; ++i) {
    SendWr wr = MakeWr(i, WrOpcode::kRdmaWrite, pair.a(), i * 64, 64, pair.b(), i * 64);
    wr.flags = 0;
    std::memset(pair.a().mem.data() + i * 64, static_cast<int>(i), 64);
    ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, wr), 0);
  }
  // A sends the 64 in bursts; packet 64 asks and B answers; that ACK (the
  // only frame B sends) is lost before A.
  pktio::Frame lost[4];
  uint32_t lost_frames = 0;
  for (uint64_t t = t0; pair.qb()->counters().acks_sent == 0 && t < t0 + 20'000; t += 1000) {
    pair.a().dev->Poll(t);
    pair.b().dev->Poll(t + 500);
    const uint32_t n = pair.link().end(0).RxBurst(lost, 4);
    pair.link().end(0).Release(lost, n);
    lost_frames += n;
  }
  ASSERT_EQ(pair.qb()->counters().acks_sent, 1u);
  ASSERT_EQ(lost_frames, 1u);
  Qp* q = pair.qa();
  ASSERT_FALSE(pair.AllAcked());
  EXPECT_EQ(q->counters().ack_solicits, 0u);  // the tail asked: nothing to solicit
  uint64_t t = q->NextDeadline();
  ASSERT_NE(t, 0u);
  while (q->counters().timeouts == 0 && t != 0 && t < t0 + 1'000'000'000) {
    pair.a().dev->Poll(t);
    t = q->NextDeadline();
  }
  EXPECT_EQ(q->counters().timeouts, 1u);
  const uint64_t after = t0 + transport::AckTimeoutNs(10);
  for (uint64_t u = after + 1000; !pair.AllAcked() && u < after + 100'000; u += 1000) {
    pair.b().dev->Poll(u);
    pair.a().dev->Poll(u + 500);
  }
  EXPECT_TRUE(pair.AllAcked());
  EXPECT_GE(pair.qb()->counters().duplicates_received, 1u);
  for (uint64_t i = 1; i <= 64; ++i) EXPECT_EQ(pair.b().mem[i * 64], static_cast<uint8_t>(i)) << i;
}

// A lone message is answered as before whatever the stream setting: a
// signaled one in the responder's first round, an unsignaled one by the
// solicit after ack_solicit_ns (unchanged by unsignaled_ack_every).
TEST(AckReq, ALoneMessageIsAnsweredAsSoonWithUnsignaledAckEverySixtyFour) {
  for (const uint32_t every : {16u, 64u}) {
    AckPair pair(every, 100'000);
    const uint64_t t0 = 1'000'000;
    pair.Write(1, true, t0);
    EXPECT_EQ(pair.qb()->counters().acks_sent, 1u) << every;  // B's first round
    EXPECT_EQ(pair.TakeAnswers(t0 + 2000), 1u) << every;
    pair.Write(2, false, t0 + 10'000);
    EXPECT_EQ(pair.qa()->NextDeadline(), t0 + 10'000 + 100'000) << every;  // the solicit, as with 16
    pair.a().dev->Poll(t0 + 110'000);
    pair.b().dev->Poll(t0 + 111'000);
    pair.TakeAnswers(t0 + 112'000);
    EXPECT_TRUE(pair.AllAcked()) << every;
    EXPECT_EQ(pair.qa()->counters().ack_solicits, 1u) << every;
  }
}

// A peer that stops right after receiving (rdma_disconnect moves its QP to
// ERR before the DREQ leaves) acknowledges what it accepted on the way: the
// requester's unasked tail completes, instead of being flushed when the
// disconnect reaches it (fi_pingpong's last unsignaled message over
// verbs;ofi_rxm did so).
TEST(AckReq, AResponderMovingToErrAcknowledgesTheUnaskedTail) {
  AckPair pair(16, 100'000);
  const uint64_t t0 = 1'000'000;
  pair.Write(1, false, t0);
  pair.Write(2, false, t0 + 2000);
  EXPECT_EQ(pair.qb()->counters().acks_sent, 0u);  // nothing asked yet
  QpAttr err;
  err.qp_state = transport::QpState::kErr;
  ASSERT_TRUE(pair.b().dev->ModifyQp(pair.b().qpn, err, transport::kAttrState).ok());
  pair.b().dev->Poll(t0 + 5000);
  EXPECT_EQ(pair.qb()->counters().acks_sent, 1u);
  pair.TakeAnswers(t0 + 6000);
  EXPECT_TRUE(pair.AllAcked());
  EXPECT_EQ(pair.qa()->counters().ack_solicits, 0u);
  // A's own move to ERR now flushes nothing: both WRITEs completed.
  ASSERT_TRUE(pair.a().dev->ModifyQp(pair.a().qpn, err, transport::kAttrState).ok());
  pair.a().dev->Poll(t0 + 7000);
  Completion c[8];
  EXPECT_EQ(pair.a().dev->PollCq(pair.a().cq, c, 8), 0u);
  // A responder with nothing owed sends nothing more on its way to ERR.
  AckPair quiet(16, 100'000);
  quiet.Write(1, true, t0);  // signaled: acknowledged at once
  const uint32_t acks = quiet.qb()->counters().acks_sent;
  ASSERT_TRUE(quiet.b().dev->ModifyQp(quiet.b().qpn, err, transport::kAttrState).ok());
  quiet.b().dev->Poll(t0 + 5000);
  EXPECT_EQ(quiet.qb()->counters().acks_sent, acks);
}

}  // namespace
}  // namespace droce::core
