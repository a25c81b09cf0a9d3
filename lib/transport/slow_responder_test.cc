// A go-back-N requester against a responder slower than its own window:
// perftest's 128 outstanding 64 KiB READs (or WRITEs) at MTU 1024 against
// Linux rxe in an emulated guest (doc/interop-rxe.md). The slowness is the
// test wire's, not the transport's: each end sends through a FIFO drained
// at a fixed line rate in virtual time (sim::EgressPortIo). What the
// responder owes waits there in order, as the requests wait in rxe's queue:
// a READ asked again is served after everything asked before it, and in
// full, as rxe serves it; a WRITE's data reaches it no faster than the rate.
// Both directions lose a frame now and then.
//
// The requester's in-flight window (512 PSNs, 8 such READs) takes about
// two transport timeouts to drain at this rate: a retry has to wait behind
// what the responder still owes for the first copies. The transfers must
// finish, every WR successful and the data intact, and the responder must
// not be asked for the same work over and over.
#include <gmock/gmock.h>

#include "sim/switch/egress_port_io.h"
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kMsg = 64 * 1024;
constexpr uint32_t kOutstanding = 128;  // perftest's tx_depth and rxe's max_qp_rd_atom
constexpr uint8_t kTimeout = 14;        // perftest's: 4.096 us x 2^14 = 67 ms

class SlowResponderPair {
 public:
  // The responder (b) sends through a FIFO at `rate_bps`; the requester's
  // requests reach it through one at the same rate (a WRITE's data is what
  // it is slow to take); `loss` of the frames leaving either FIFO is lost.
  // `fifo_frames` bounds each FIFO (tail drop, as a tap's queue).
  SlowResponderPair(uint64_t rate_bps, double loss, uint32_t seed, uint32_t fifo_frames = kFifoFrames)
      : wire_(WireConfig(loss, seed)),
        slow_{{&wire_.end(0), FifoConfig(rate_bps), &Clock, &now_, fifo_frames},
              {&wire_.end(1), FifoConfig(rate_bps), &Clock, &now_, fifo_frames}} {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      OpenSide(s_[i], cfg, &slow_[i], kOutstanding * kMsg);
    }
    ConnectSides(s_, kMtu, kTimeout, /*retry_cnt=*/7, kOutstanding);
  }

  Side& a() { return s_[0]; }
  Side& b() { return s_[1]; }
  const transport::QpCounters& requester() { return s_[0].dev->qp(s_[0].qpn)->counters(); }
  uint64_t now() const { return now_; }
  // The responder does nothing for `ns` from `after_ns` into the run (a
  // descheduled guest).
  void Stall(uint64_t after_ns, uint64_t ns) {
    stall_from_ = now_ + after_ns;
    stall_until_ = stall_from_ + ns;
  }

  // perftest's loop: `total` WRs of `op`, at most kOutstanding posted at a
  // time, each reposted as one completes. Returns the completions; stops
  // early at the first error or when virtual time runs out.
  std::vector<Completion> Stream(WrOpcode op, uint32_t total, uint64_t max_ns) {
    std::vector<Completion> done;
    uint32_t posted = 0;
    const auto post = [&] {
      const uint64_t off = static_cast<uint64_t>(posted % kOutstanding) * kMsg;
      EXPECT_EQ(a().dev->PostSend(a().qpn, MakeWr(posted, op, a(), off, kMsg, b(), off)), 0);
      ++posted;
    };
    while (posted < std::min(total, kOutstanding)) post();
    const uint64_t end = now_ + max_ns;
    Completion buf[64];
    while (now_ < end && done.size() < total) {
      const bool stalled = now_ >= stall_from_ && now_ < stall_until_;
      const uint32_t work = a().dev->Poll(now_) + (stalled ? 0 : b().dev->Poll(now_));
      for (uint32_t k; (k = a().dev->PollCq(a().cq, buf, 64)) > 0;) {
        for (uint32_t i = 0; i < k; ++i) {
          done.push_back(buf[i]);
          if (buf[i].status != WcStatus::kSuccess) return done;
          if (posted < total) post();
        }
      }
      now_ += work > 0 ? 1000 : 20'000;
    }
    return done;
  }

 private:
  static constexpr uint32_t kFifoFrames = 12 * 1024;
  static uint64_t Clock(void* ctx) { return *static_cast<uint64_t*>(ctx); }
  static sim::MemWireConfig WireConfig(double loss, uint32_t seed) {
    sim::MemWireConfig c;
    c.seed = seed;
    c.pool_frames = 16 * 1024;  // the FIFOs hold theirs from this pool
    c.queue_frames = 4096;
    for (auto& d : c.impair) d.drop = loss;
    return c;
  }
  static sim::EgressPortConfig FifoConfig(uint64_t rate_bps) {
    sim::EgressPortConfig c;
    c.line_rate_bps = rate_bps;
    c.ecn = false;
    return c;
  }

  uint64_t now_ = 1'000'000;
  uint64_t stall_from_ = 0, stall_until_ = 0;
  sim::MemWire wire_;
  sim::EgressPortIo slow_[2];
  Side s_[2];
};

// ~4,000 1 KiB packets a second: the window's 512 packets take ~130 ms,
// two of the QP's 67 ms timeouts (rxe in the lab's guests moved 1.5-8 MB/s).
constexpr uint64_t kRate = 36'000'000;
constexpr uint32_t kWindow = 512;  // go-back-N's max_inflight_packets
constexpr uint32_t kPackets = kMsg / kMtu;

::testing::Message Counters(SlowResponderPair& pair) {
  const transport::QpCounters& q = pair.requester();
  return ::testing::Message() << "timeouts " << q.timeouts << " retransmitted " << q.retransmitted_packets
                              << " naks " << q.naks_received << " duplicates " << q.duplicates_received
                              << " out_of_sequence " << q.out_of_sequence << " virtual ms "
                              << pair.now() / 1'000'000;
}

// Rounds of perftest's 128 WRs of `op` (the data of the first round read or
// written again): every WR must complete successfully within `max_ns` of
// virtual time, and both memories hold the same bytes.
void Transfer(SlowResponderPair& pair, WrOpcode op, uint64_t max_ns, uint32_t rounds = 2) {
  const uint32_t kTotal = rounds * kOutstanding;
  Side& source = op == WrOpcode::kRdmaRead ? pair.b() : pair.a();
  for (uint32_t i = 0; i < kOutstanding; ++i) Fill(source.mem, static_cast<uint64_t>(i) * kMsg, kMsg, i + 1);
  const std::vector<Completion> done = pair.Stream(op, kTotal, max_ns);
  SCOPED_TRACE(Counters(pair));
  ASSERT_EQ(done.size(), kTotal);
  for (const Completion& c : done) ASSERT_EQ(c.status, WcStatus::kSuccess) << "wr " << c.wr_id;
  EXPECT_TRUE(pair.a().mem == pair.b().mem);
}

// A lost response makes the requester ask its READ again from the missing
// response, and every later READ (go-back-N): the responder serves those
// only after the first copies, whose responses keep the timer running.
TEST(SlowResponder, ReadsWithLossFinishWithoutARetryStorm) {
  SlowResponderPair pair(kRate, 0.001, 7);
  Transfer(pair, WrOpcode::kRdmaRead, 30'000'000'000ull);
  const transport::QpCounters& q = pair.requester();
  SCOPED_TRACE(Counters(pair));
  EXPECT_GT(q.out_of_sequence, 0u);                    // there were losses to repair
  EXPECT_LT(q.retransmitted_packets, 2 * kOutstanding);  // READ requests asked again: fewer than READs
  EXPECT_LT(q.duplicates_received, kWindow);           // no READ served twice to no purpose
}

// The responder stops for three timeouts (a descheduled guest) with the
// window outstanding: one retry of the window, then probes; when it comes
// back it serves the first copies (progress) and then the retry once.
TEST(SlowResponder, ReadsSurviveAStall) {
  SlowResponderPair pair(kRate, 0, 3);
  pair.Stall(500'000'000, 3 * transport::AckTimeoutNs(kTimeout));
  Transfer(pair, WrOpcode::kRdmaRead, 30'000'000'000ull);
  const transport::QpCounters& q = pair.requester();
  SCOPED_TRACE(Counters(pair));
  EXPECT_GE(q.timeouts, 2u);
  EXPECT_LT(q.retransmitted_packets, 2 * kWindow / kPackets + q.timeouts);  // one retry of the window
  EXPECT_LT(q.duplicates_received, 2 * kWindow);
}

// A lost WRITE packet: the responder NAKs once and drops what follows until
// the retry fills the gap, silently. The timeouts in that silence resend
// the oldest packet, not the window again.
TEST(SlowResponder, WritesWithLossFinishWithoutARetryStorm) {
  SlowResponderPair pair(kRate, 0.001, 11);
  Transfer(pair, WrOpcode::kRdmaWrite, 30'000'000'000ull);
  const transport::QpCounters& q = pair.requester();
  SCOPED_TRACE(Counters(pair));
  EXPECT_GT(q.naks_received, 0u);
  // Each sequence NAK resends at most the window; the timeouts add a packet each.
  EXPECT_LE(q.retransmitted_packets, (q.naks_received + 1) * kWindow + q.timeouts);
  EXPECT_LT(q.duplicates_received, 2 * kOutstanding);
}

// The same at a third of the rate (12 s without loss): the silence after a
// NAK lasts five to six timeouts. A copy of the window per timeout used to
// pile up behind it.
TEST(SlowResponder, WritesAtAThirdOfTheRateFinishInTime) {
  SlowResponderPair pair(kRate / 3, 0.001, 11);
  Transfer(pair, WrOpcode::kRdmaWrite, 24'000'000'000ull);
  const transport::QpCounters& q = pair.requester();
  SCOPED_TRACE(Counters(pair));
  EXPECT_LE(q.retransmitted_packets, (q.naks_received + 1) * kWindow + q.timeouts);
}

// A responder so slow that the 64 packets between two ACKs take longer than
// a timeout (~450 packets a second), behind a bounded queue (1,000 frames, a
// tap's): every timeout comes after progress. Each one used to resend the
// window, which the queue dropped or the responder served as duplicates.
TEST(SlowResponder, WritesSlowerThanATimeoutPerAckFinish) {
  SlowResponderPair pair(kRate / 9, 0, 5, /*fifo_frames=*/1000);
  Transfer(pair, WrOpcode::kRdmaWrite, 40'000'000'000ull, /*rounds=*/1);
  const transport::QpCounters& q = pair.requester();
  SCOPED_TRACE(Counters(pair));
  EXPECT_GT(q.timeouts, 0u);
  EXPECT_LE(q.retransmitted_packets, q.timeouts);  // a probe per timeout, nothing else
}

}  // namespace
}  // namespace droce::core
