// droce's transport inside ns-3: N-to-1 incasts through one switch port at
// 100 Gb/s, every host running one of lib/cc's algorithms (sim/ns3/incast.h).
// Assertions are on simulated results — completions, the port's queue and
// drops, what each algorithm saw — never on wall-clock time.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "sim/ns3/incast.h"

namespace droce::ns3glue {
namespace {

IncastConfig Incast(const char* cc, uint32_t senders, uint64_t flow_bytes, uint64_t buffer_bytes = 0) {
  IncastConfig c;
  c.cc = cc;
  c.senders = senders;
  c.flow_bytes = flow_bytes;
  c.port.buffer_bytes = buffer_bytes;
  c.max_ns = 200'000'000;
  return c;
}

IncastResult RunAndPrint(const IncastConfig& c) {
  IncastResult r = RunIncast(c);
  EXPECT_EQ(r.error, "");
  std::printf("%s\n", Summary(c, r).c_str());
  return r;
}

void ExpectEveryFlowDone(const IncastResult& r, uint32_t senders, uint64_t bytes) {
  EXPECT_TRUE(r.all_done);
  ASSERT_EQ(r.flows.size(), senders);
  for (const IncastFlow& f : r.flows) {
    EXPECT_TRUE(f.progress.done) << f.sender;
    EXPECT_FALSE(f.progress.failed) << f.sender;
    EXPECT_EQ(f.progress.bytes_acked, bytes) << f.sender;
  }
}

// Without congestion control 4 senders at line rate keep the bottleneck's
// queue near what they have in flight; every algorithm completes every flow
// and keeps the time-averaged queue at a fraction of that, each reacting to
// its own signal: DCQCN to CNPs, TIMELY and Swift to RTT samples, HPCC to
// the INT records the port stamps.
TEST(Ns3Incast, EveryAlgorithmCompletesAndKeepsTheQueueFarBelowNone) {
  constexpr uint32_t kSenders = 4;
  constexpr uint64_t kBytes = 2'000'000;
  const IncastResult none = RunAndPrint(Incast("none", kSenders, kBytes));
  ExpectEveryFlowDone(none, kSenders, kBytes);
  EXPECT_EQ(none.bottleneck.dropped, 0u);
  // Most of what the senders have in flight waits at the port.
  EXPECT_GT(none.bottleneck.mean_queue_bytes, 1'000'000);
  // Line rate: the bytes leave in little more than their serialization time.
  EXPECT_LT(none.end_ns, kSenders * kBytes * 8 * 12 / 10 / 100);

  for (const char* cc : {"dcqcn", "timely", "hpcc", "swift"}) {
    SCOPED_TRACE(cc);
    const IncastResult r = RunAndPrint(Incast(cc, kSenders, kBytes));
    ExpectEveryFlowDone(r, kSenders, kBytes);
    EXPECT_EQ(r.bottleneck.dropped, 0u);
    EXPECT_LT(r.bottleneck.mean_queue_bytes * 3, none.bottleneck.mean_queue_bytes);
    const std::string name = cc;
    for (const IncastFlow& f : r.flows) {
      EXPECT_EQ(f.cc.algorithm, name);
      EXPECT_GT(f.cc.rate_decreases, 0u) << f.sender;
      // What each algorithm reacts to reached it: CNPs (at most one per 50 us
      // per QP, while the queue is above Kmin), INT echoes, RTT samples (one per ACK).
      if (name == "dcqcn") {
        EXPECT_GT(f.cc.cnps, 2u) << f.sender;
      } else {
        // The responder acknowledges a 64 KiB WRITE about once: tens of samples per flow.
        EXPECT_GT(name == "hpcc" ? f.cc.telemetry_acks : f.cc.rtt_samples, 15u) << f.sender;
      }
    }
    // The port stamps INT only for HPCC (int_stamp_auto).
    EXPECT_EQ(r.bottleneck.stamped > 1000, name == "hpcc") << r.bottleneck.stamped;
  }
}

// A 1.5 MB buffer, 8 senders: without congestion control the queue reaches
// the buffer and the port drops (the flows still complete, by go-back-N
// retransmission); HPCC, which starts each flow at one BDP and follows the
// port's telemetry, never fills it.
TEST(Ns3Incast, NoneOverflowsTheBufferWhereHpccStaysBelowIt) {
  constexpr uint32_t kSenders = 8;
  constexpr uint64_t kBytes = 1'000'000, kBuffer = 1'500'000;
  const IncastResult none = RunAndPrint(Incast("none", kSenders, kBytes, kBuffer));
  ExpectEveryFlowDone(none, kSenders, kBytes);
  EXPECT_GT(none.bottleneck.dropped, 100u);
  const IncastResult hpcc = RunAndPrint(Incast("hpcc", kSenders, kBytes, kBuffer));
  ExpectEveryFlowDone(hpcc, kSenders, kBytes);
  EXPECT_EQ(hpcc.bottleneck.dropped, 0u);
  EXPECT_LT(hpcc.bottleneck.max_queue_bytes, kBuffer * 3 / 4);
  EXPECT_LT(hpcc.end_ns, none.end_ns);
}

// HPCC's window, started at one BDP (over 120 packets) for each of 16
// senders, shrinks to a few packets when the first ACK reports the queue:
// the packets still in flight were sent while AckReq came every half window,
// none of them asks for an ACK, and the responder coalesces. The requester
// probes (Qp::CcAskWhenWindowStalls) instead of waiting for the transport
// timer (67 ms here), so every flow finishes near the line rate's time.
TEST(Ns3Incast, AShrunkenWindowNeverWaitsForTheTransportTimer) {
  constexpr uint32_t kSenders = 16;
  constexpr uint64_t kBytes = 1'000'000;
  const IncastResult r = RunAndPrint(Incast("hpcc", kSenders, kBytes));
  ExpectEveryFlowDone(r, kSenders, kBytes);
  const uint64_t ideal_ns = kSenders * kBytes * 8 / 100;
  EXPECT_LT(r.end_ns, 2 * ideal_ns);
  for (const IncastFlow& f : r.flows) EXPECT_EQ(f.qp.timeouts, 0u) << f.sender;
}

// The time series: one sample per period from the start to the last
// completion, the queue and every flow's rate and goodput in it.
TEST(Ns3Incast, SamplesCoverTheRun) {
  IncastConfig c = Incast("dcqcn", 2, 500'000);
  c.sample_ns = 2000;
  const IncastResult r = RunAndPrint(c);
  ExpectEveryFlowDone(r, 2, 500'000);
  ASSERT_GT(r.samples.size(), 10u);
  EXPECT_GE(r.samples.back().t_ns, r.end_ns);
  double acked_bits = 0;
  for (const IncastSample& s : r.samples) {
    ASSERT_EQ(s.rate_bps.size(), 2u);
    ASSERT_EQ(s.goodput_bps.size(), 2u);
    for (double g : s.goodput_bps) acked_bits += g * c.sample_ns / 1e9;
  }
  EXPECT_NEAR(acked_bits, 2 * 500'000 * 8.0, 1.0);
}

TEST(Ns3Incast, ABadAlgorithmIsRefused) {
  const IncastResult r = RunIncast(Incast("cubic", 2, 100'000));
  EXPECT_NE(r.error.find("dcqcn, timely, hpcc, swift, none"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace droce::ns3glue
