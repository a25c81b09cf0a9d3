// Qp::NextDeadline against what OnTimer and the transmit path do, one
// test per timer kind: at NextDeadline() - 1 nothing changes, at
// NextDeadline() something does. And the device's timing wheel: QPs that
// only wait for a timer are off the active list, and their timers still
// fire on time (doc/core.md "Timers").
#include "tests/support/rc_pair_fixture.h"
#include "transport/sr/selective_repeat.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using transport::Qp;

// A's QP after posting `wr` and polling A alone at `now` (B never answers).
Qp* SendUnanswered(RcPair& pair, const SendWr& wr, uint64_t now) {
  Side& a = pair.a();
  EXPECT_EQ(a.dev->PostSend(a.qpn, wr), 0);
  a.dev->Poll(now);
  return a.dev->qp(a.qpn);
}

TEST(NextDeadline, RetransmitTimeout) {
  RcPair pair({}, 1);
  const uint64_t t0 = pair.now();
  Qp* q = SendUnanswered(pair, MakeWr(1, WrOpcode::kRdmaWrite, pair.a(), 0, 64, pair.b(), 0), t0);
  const uint64_t d = q->NextDeadline();
  ASSERT_GT(d, t0);
  EXPECT_EQ(d - t0, transport::AckTimeoutNs(8));  // the fixture's timeout 8
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  q->OnTimer(d - 1);
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(q->NextDeadline(), d);
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  q->OnTimer(d);
  EXPECT_EQ(q->counters().timeouts, 1u);
  EXPECT_TRUE(q->HasTransmitWork(d));  // the retransmission
  EXPECT_GT(q->NextDeadline(), d);
}

TEST(NextDeadline, RnrWait) {
  RcPair pair({}, 2);
  Side& a = pair.a();
  Side& b = pair.b();
  // A SEND with no receive posted at B: B answers RNR NAK.
  EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  uint64_t now = pair.now();
  Qp* q = a.dev->qp(a.qpn);
  for (int i = 0; i < 10 && q->counters().rnr_naks_received == 0; ++i, now += 1000) {
    a.dev->Poll(now);
    b.dev->Poll(now);
  }
  ASSERT_EQ(q->counters().rnr_naks_received, 1u);
  const uint64_t d = q->NextDeadline();
  ASSERT_GT(d, now);
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  q->OnTimer(d - 1);
  EXPECT_EQ(q->NextDeadline(), d);
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  EXPECT_TRUE(q->HasTransmitWork(d));  // the SEND goes again
  // The device: A is off the active list while it waits, and sends at d.
  EXPECT_EQ(a.dev->active_qps(), 0u);
  EXPECT_EQ(a.dev->timers().deadline(a.qpn - a.dev->qpn_base()), d);
  const uint64_t sent = a.dev->counters().tx_packets;
  a.dev->Poll(d - 1);
  EXPECT_EQ(a.dev->counters().tx_packets, sent);
  a.dev->Poll(d);
  EXPECT_EQ(a.dev->counters().tx_packets, sent + 1);
}

TEST(NextDeadline, SelectiveRepeatTailLossProbe) {
  RcPair pair({}, 3, 1024, 4 << 20, 0, 0, /*timeout=*/14, 7, 7, transport::QpType::kRc, 4000, nullptr, 16384,
              true, true);
  Side& a = pair.a();
  Side& b = pair.b();
  // One WRITE answered after 40 us gives an RTT sample (the probe needs
  // one) with the probe (2 SRTT) before the RTO (SRTT + 4 RTTVAR).
  EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 0)), 0);
  const uint64_t s = pair.now();
  a.dev->Poll(s);
  b.dev->Poll(s + 20'000);
  a.dev->Poll(s + 40'000);
  ASSERT_EQ(a.dev->qp(a.qpn)->sr()->rtt().srtt_ns, 40'000u);
  const uint64_t t0 = s + 50'000;
  Qp* q = SendUnanswered(pair, MakeWr(2, WrOpcode::kRdmaWrite, a, 0, 64, b, 0), t0);
  ASSERT_TRUE(q->sr()->rtt().valid);
  const uint64_t d = q->NextDeadline();
  ASSERT_EQ(d, t0 + 80'000);  // 2 SRTT
  q->OnTimer(d - 1);
  EXPECT_EQ(q->NextDeadline(), d);
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  q->OnTimer(d);
  EXPECT_TRUE(q->HasTransmitWork(d));  // the probe
  EXPECT_GT(q->NextDeadline(), d);     // the RTO
  a.dev->Poll(d);
  EXPECT_EQ(q->counters().tlp_probes, 1u);
  EXPECT_EQ(q->counters().timeouts, 0u);
}

TEST(NextDeadline, SelectiveRepeatRetransmitTimeout) {
  RcPair pair({}, 4, 1024, 4 << 20, 0, 0, /*timeout=*/14, 7, 7, transport::QpType::kRc, 4000, nullptr, 16384,
              true, true);
  const uint64_t t0 = pair.now();
  Qp* q = SendUnanswered(pair, MakeWr(1, WrOpcode::kRdmaWrite, pair.a(), 0, 64, pair.b(), 0), t0);
  const uint64_t d = q->NextDeadline();  // no RTT sample yet: no probe, the low RTO
  ASSERT_EQ(d - t0, q->sr()->rto_low_ns());
  q->OnTimer(d - 1);
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(q->NextDeadline(), d);
  q->OnTimer(d);
  EXPECT_EQ(q->counters().timeouts, 1u);
  EXPECT_TRUE(q->HasTransmitWork(d));
}

const cc::DcqcnParams kPaper = cc::PaperProfile(10'000'000'000ull);

TEST(NextDeadline, ReactionPointTimers) {
  RcPair pair({}, 5, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, &kPaper);
  Side& a = pair.a();
  Qp* q = a.dev->qp(a.qpn);
  EXPECT_EQ(q->NextDeadline(), 0u);  // no CNP yet: no timer runs
  const uint64_t t0 = pair.now();
  q->OnCnp(t0);
  const cc::ReactionPoint& rp = *q->reaction_point();
  ASSERT_TRUE(rp.rate_limited());
  const uint64_t d = q->NextDeadline();
  EXPECT_EQ(d, t0 + 55'000);  // T and the alpha period, 55 us each
  const double alpha = rp.alpha();
  const uint64_t rate = rp.current_rate_bps();
  q->OnTimer(d - 1);
  EXPECT_EQ(rp.alpha(), alpha);
  EXPECT_EQ(rp.current_rate_bps(), rate);
  EXPECT_EQ(q->NextDeadline(), d);
  q->OnTimer(d);
  EXPECT_LT(rp.alpha(), alpha);
  EXPECT_GT(rp.current_rate_bps(), rate);  // fast recovery
  EXPECT_EQ(q->NextDeadline(), d + 55'000);
}

TEST(NextDeadline, Pacer) {
  RcPair pair({}, 6, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, &kPaper);
  Side& a = pair.a();
  Qp* q = a.dev->qp(a.qpn);
  const uint64_t t0 = pair.now();
  q->OnCnp(t0);  // 10 -> 5 Gb/s
  // A 4 KiB WRITE is four 1 KiB packets: one leaves, the pacer holds the rest.
  EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 4096, pair.b(), 0)), 0);
  a.dev->Poll(t0);
  EXPECT_EQ(q->counters().tx_packets, 1u);
  const uint64_t d = q->NextDeadline();
  ASSERT_EQ(d, q->paced_until_ns());
  ASSERT_GT(d, t0);
  ASSERT_LT(d, t0 + 55'000);  // before the reaction point's timers
  q->OnTimer(d - 1);
  EXPECT_EQ(q->NextDeadline(), d);
  EXPECT_FALSE(q->HasTransmitWork(d - 1));
  EXPECT_TRUE(q->HasTransmitWork(d));
  // The device sends the next packet at d, not before.
  EXPECT_EQ(a.dev->active_qps(), 0u);
  a.dev->Poll(d - 1);
  EXPECT_EQ(q->counters().tx_packets, 1u);
  a.dev->Poll(d);
  EXPECT_EQ(q->counters().tx_packets, 2u);
}

// A CNP for an idle QP (nothing to send, so not on the active list) files
// the reaction point's timers in the wheel: the rate recovers on time.
TEST(TimerWheelDevice, CnpForAnIdleQpFilesItsRateTimers) {
  RcPair pair({}, 8, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, &kPaper);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint64_t t0 = pair.now();
  a.dev->Poll(t0 - 1000);  // the connected QPs leave the active list (nothing to send)
  b.dev->Poll(t0 - 1000);
  ASSERT_EQ(a.dev->active_qps(), 0u);
  // B owes A a CNP and sends it alone (the doorbell transmits B's QP only).
  b.dev->qp(b.qpn)->OnCongestionMark(t0);
  ASSERT_EQ(b.dev->Doorbell(b.qpn, t0), 1u);
  a.dev->Poll(t0);
  const Qp* q = a.dev->qp(a.qpn);
  const cc::ReactionPoint& rp = *q->reaction_point();
  ASSERT_EQ(rp.cnps_received(), 1u);
  EXPECT_EQ(a.dev->active_qps(), 0u);
  EXPECT_EQ(a.dev->timers().deadline(a.qpn - a.dev->qpn_base()), t0 + 55'000);
  const uint64_t cut = rp.current_rate_bps();
  a.dev->Poll(t0 + 54'999);
  EXPECT_EQ(rp.current_rate_bps(), cut);
  a.dev->Poll(t0 + 55'000);
  EXPECT_GT(rp.current_rate_bps(), cut);  // the first rate-increase event (timer T)
}

// An ACK that moves the retransmission deadline later leaves the QP filed
// at the old one (lazy re-arm): the wheel hands it back then, the device
// files it again, and the timer fires at the new deadline, not before.
TEST(TimerWheelDevice, ADeadlineMovedLaterFiresAtTheNewOne) {
  RcPair pair({}, 9);
  Side& a = pair.a();
  Side& b = pair.b();
  Qp* q = a.dev->qp(a.qpn);
  const uint64_t t0 = pair.now();
  const uint64_t timeout = transport::AckTimeoutNs(8);
  // 100 packets: the first round sends 64 (two bursts), the first 64th asks for an ACK.
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 100 * 1024, b, 0)), 0);
  a.dev->Poll(t0);
  ASSERT_EQ(q->counters().tx_packets, 64u);
  EXPECT_EQ(q->NextDeadline(), t0 + timeout);
  b.dev->Poll(t0 + 1000);
  b.dev->Poll(t0 + 1000);  // B acknowledges PSN 63
  const uint64_t t1 = t0 + 2000;
  a.dev->Poll(t1);  // the ACK: progress, the deadline moves to t1 + timeout
  for (uint64_t t = t1 + 1000; q->counters().tx_packets < 100; t += 1000) a.dev->Poll(t);
  EXPECT_EQ(q->NextDeadline(), t1 + timeout);
  EXPECT_EQ(a.dev->active_qps(), 0u);
  EXPECT_EQ(a.dev->timers().deadline(a.qpn - a.dev->qpn_base()), t0 + timeout);  // filed early
  a.dev->Poll(t0 + timeout);
  EXPECT_EQ(q->counters().timeouts, 0u);
  EXPECT_EQ(a.dev->timers().deadline(a.qpn - a.dev->qpn_base()), t1 + timeout);  // filed again
  a.dev->Poll(t1 + timeout - 1);
  EXPECT_EQ(q->counters().timeouts, 0u);
  a.dev->Poll(t1 + timeout);
  EXPECT_EQ(q->counters().timeouts, 1u);
}

// 64 QPs with one WRITE each that no one answers: after the first round the
// active list is empty (a Poll round visits none of them), every QP is in
// the wheel at its retransmit deadline, and the retransmissions go out at
// that deadline, all of them, not before.
TEST(TimerWheelDevice, QpsWaitingForAnAckAreOffTheActiveList) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  std::vector<uint32_t> qpns;
  for (int i = 0; i < 64; ++i) {
    QpInitAttr init;
    init.pd = a.pd;
    init.send_cq = init.recv_cq = a.cq;
    const uint32_t qpn = *a.dev->CreateQp(init);
    ConnectParams c;
    c.peer_gid = b.dev->gids()[1];
    c.peer_mac = b.dev->config().mac;
    c.peer_qpn = b.qpn;
    c.timeout = 8;
    ASSERT_TRUE(ConnectQp(*a.dev, qpn, c).ok());
    qpns.push_back(qpn);
  }
  const uint64_t t0 = pair.now();
  for (uint32_t qpn : qpns) ASSERT_EQ(a.dev->PostSend(qpn, MakeWr(qpn, WrOpcode::kRdmaWrite, a, 0, 64, b, 0)), 0);
  a.dev->Poll(t0);
  EXPECT_EQ(a.dev->counters().tx_packets, 64u);
  EXPECT_EQ(a.dev->active_qps(), 0u);
  EXPECT_EQ(a.dev->timers().size(), 64u);
  const uint64_t d = t0 + transport::AckTimeoutNs(8);
  for (uint32_t qpn : qpns) EXPECT_EQ(a.dev->timers().deadline(qpn - a.dev->qpn_base()), d);
  for (uint64_t t = t0 + 1000; t < d; t += 1000) a.dev->Poll(t);
  EXPECT_EQ(a.dev->counters().tx_packets, 64u);
  a.dev->Poll(d);
  EXPECT_EQ(a.dev->counters().tx_packets, 128u);
  for (uint32_t qpn : qpns) EXPECT_EQ(a.dev->qp(qpn)->counters().timeouts, 1u);
  // Destroyed QPs leave the wheel.
  for (uint32_t qpn : qpns) ASSERT_TRUE(a.dev->DestroyQp(qpn).ok());
  EXPECT_EQ(a.dev->timers().size(), 0u);
}

// A pair whose requester (a) has the device floor `min_ack_timeout` under
// its QP's ACK timeout (QpEnv::min_ack_timeout), for ibv_rc_pingpong's
// exchange: a 4 KiB SEND that b receives.
class FlooredPair {
 public:
  FlooredPair(uint8_t min_ack_timeout, uint8_t timeout) : wire_(sim::MemWireConfig{}) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      if (i == 0) cfg.min_ack_timeout = min_ack_timeout;
      OpenSide(s_[i], cfg, &wire_.end(i), 1 << 16);
    }
    ConnectSides(s_, 1024, timeout, /*retry_cnt=*/7);
  }
  Side& a() { return s_[0]; }
  Side& b() { return s_[1]; }
  Qp* requester() { return s_[0].dev->qp(s_[0].qpn); }

  // The SEND, with b silent for `stall_ns` (a guest descheduled by its
  // host) and then answering: the requester's completion, once it has one.
  Completion SendThroughStall(uint64_t stall_ns) {
    EXPECT_EQ(b().dev->PostRecv(b().qpn, MakeRecv(1, b(), 0, 4096)), 0);
    EXPECT_EQ(a().dev->PostSend(a().qpn, MakeWr(2, WrOpcode::kSend, a(), 0, 4096, b(), 0)), 0);
    const uint64_t t0 = now_;
    Completion c{};
    for (; now_ < t0 + 1'000'000'000; now_ += 10'000) {
      a().dev->Poll(now_);
      if (now_ >= t0 + stall_ns) b().dev->Poll(now_);
      if (a().dev->PollCq(a().cq, &c, 1) == 1) return c;
    }
    ADD_FAILURE() << "no completion";
    return c;
  }

 private:
  uint64_t now_ = 1'000'000;
  sim::MemWire wire_;
  Side s_[2];
};

// The floor raises a shorter QP timeout to itself and leaves a longer one.
TEST(MinAckTimeout, FloorsTheQpsTimeout) {
  FlooredPair floored(12, 8);
  const uint64_t t0 = 1'000'000;
  ASSERT_EQ(floored.a().dev->PostSend(floored.a().qpn, MakeWr(1, WrOpcode::kRdmaWrite, floored.a(), 0, 64,
                                                              floored.b(), 0)), 0);
  floored.a().dev->Poll(t0);
  EXPECT_EQ(floored.requester()->NextDeadline() - t0, transport::AckTimeoutNs(12));

  FlooredPair below(4, 8);
  ASSERT_EQ(below.a().dev->PostSend(below.a().qpn, MakeWr(1, WrOpcode::kRdmaWrite, below.a(), 0, 64,
                                                          below.b(), 0)), 0);
  below.a().dev->Poll(t0);
  EXPECT_EQ(below.requester()->NextDeadline() - t0, transport::AckTimeoutNs(8));
}

// A peer silent for longer than the QP's whole retry budget (8 timeouts of
// 1 ms): the QP fails with retry exceeded, as IBTA says; with a floor of
// 2^12 (16.8 ms a timeout) the same silence costs no retry at all.
TEST(MinAckTimeout, APeerStalledPastTheRetryBudget) {
  const uint64_t stall = 12 * transport::AckTimeoutNs(8);
  FlooredPair exact(0, 8);
  EXPECT_EQ(exact.SendThroughStall(stall).status, WcStatus::kRetryExcErr);
  EXPECT_EQ(exact.requester()->counters().timeouts, 8u);

  FlooredPair floored(12, 8);
  EXPECT_EQ(floored.SendThroughStall(stall).status, WcStatus::kSuccess);
  EXPECT_EQ(floored.requester()->counters().timeouts, 0u);
}

// A QP timeout of 0 (infinite) stays infinite under a floor.
TEST(MinAckTimeout, InfiniteStaysInfinite) {
  FlooredPair pair(12, 0);
  EXPECT_EQ(pair.SendThroughStall(2'000'000'000ull / 4).status, WcStatus::kSuccess);
  EXPECT_EQ(pair.requester()->counters().timeouts, 0u);
}

}  // namespace
}  // namespace droce::core
