// A switch egress port: FIFO timing at line rate (the queue adds delay),
// RED/ECN marking (thresholds, probability, seed), tail drop, time-weighted
// queue stats, PFC pause from downstream, the INT record of a leaving packet,
// and PFC's ingress accounting.
#include "sim/switch/egress_port.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace droce::sim {
namespace {

constexpr uint64_t kG = 1'000'000'000;

EgressPortConfig TenGig() {
  EgressPortConfig c;
  c.line_rate_bps = 10 * kG;  // 1000 B take 800 ns
  c.kmin_bytes = 5000;
  c.kmax_bytes = 15000;
  c.pmax = 0.5;
  c.stats_bin_bytes = 100;
  c.mark_at = MarkAt::kEnqueue;  // tests of kDequeue say so
  return c;
}

TEST(EgressPort, DrainsFifoAtLineRate) {
  EgressPortConfig c = TenGig();
  c.ecn = false;
  EgressPort b(c);
  for (uint64_t tag = 1; tag <= 3; ++tag) EXPECT_FALSE(b.Enqueue(1000, 0, tag).dropped);
  EXPECT_EQ(b.queue_bytes(0), 3000u);
  EXPECT_EQ(b.next_departure_ns(), 800u);
  Departure d;
  EXPECT_FALSE(b.Dequeue(799, &d));
  EXPECT_EQ(b.queue_bytes(799), 3000u);
  EXPECT_EQ(b.queue_bytes(800), 2000u);  // the port's view, before any Dequeue
  ASSERT_TRUE(b.Dequeue(2400, &d));
  EXPECT_EQ(d.tag, 1u);
  EXPECT_EQ(d.depart_ns, 800u);
  ASSERT_TRUE(b.Dequeue(2400, &d));
  EXPECT_EQ(d.tag, 2u);
  EXPECT_EQ(d.depart_ns, 1600u);
  ASSERT_TRUE(b.Dequeue(2400, &d));
  EXPECT_EQ(d.tag, 3u);
  EXPECT_EQ(d.depart_ns, 2400u);
  EXPECT_FALSE(b.Dequeue(1'000'000, &d));
  EXPECT_EQ(b.queue_bytes(2400), 0u);
  // An idle port starts the next packet at once.
  b.Enqueue(500, 10'000, 4);
  EXPECT_EQ(b.next_departure_ns(), 10'400u);
  EXPECT_EQ(b.departed_bytes(), 3000u);
}

TEST(EgressPort, MarkProbabilityIsRed) {
  EgressPort b(TenGig());
  EXPECT_EQ(b.MarkProbability(0), 0.0);
  EXPECT_EQ(b.MarkProbability(5000), 0.0);
  EXPECT_DOUBLE_EQ(b.MarkProbability(7500), 0.125);
  EXPECT_DOUBLE_EQ(b.MarkProbability(10000), 0.25);
  EXPECT_DOUBLE_EQ(b.MarkProbability(15000), 0.5);
  EXPECT_EQ(b.MarkProbability(15001), 1.0);
  EgressPortConfig off = TenGig();
  off.ecn = false;
  EXPECT_EQ(EgressPort(off).MarkProbability(1'000'000), 0.0);
}

TEST(EgressPort, NoMarksBelowKminAllAboveKmax) {
  EgressPort b(TenGig());
  // Back-to-back arrivals at t=0: packet i sees i*1000 bytes.
  for (int i = 0; i <= 5; ++i) EXPECT_FALSE(b.Enqueue(1000, 0).ce_marked) << i;
  for (int i = 6; i <= 15; ++i) b.Enqueue(1000, 0);
  for (int i = 16; i < 40; ++i) EXPECT_TRUE(b.Enqueue(1000, 0).ce_marked) << i;
  EXPECT_EQ(b.max_queue_bytes(), 40'000u);
}

TEST(EgressPort, DequeueMarkingSeesTheBytesBehind) {
  EgressPortConfig c = TenGig();
  c.mark_at = MarkAt::kDequeue;
  EgressPort b(c);
  // 20 back-to-back packets at t=0: none marked on arrival...
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(b.Enqueue(1000, 0, i).ce_marked);
  EXPECT_EQ(b.marked_packets(), 0u);
  // ...packet i leaves with (19 - i) * 1000 bytes behind it.
  Departure d;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(b.Dequeue(100'000, &d));
    ASSERT_EQ(d.tag, static_cast<uint64_t>(i));
    const uint64_t behind = (19 - i) * 1000;
    if (behind > 15000) {
      EXPECT_TRUE(d.ce_marked) << i;
    }
    if (behind <= 5000) {
      EXPECT_FALSE(d.ce_marked) << i;
    }
  }
  EXPECT_GE(b.marked_packets(), 4u);  // 19000..16000 behind
}

// Arrivals at exactly line rate after a prefill keep the queue at one level;
// the marked fraction must match MarkProbability(level).
double MarkedFraction(uint64_t seed, int prefill, std::vector<bool>* marks) {
  EgressPortConfig c = TenGig();
  c.seed = seed;
  EgressPort b(c);
  for (int i = 0; i < prefill; ++i) b.Enqueue(1000, 0);
  int marked = 0;
  const int n = 200'000;
  Departure d;
  for (int i = 1; i <= n; ++i) {
    const uint64_t t = 800ull * i;
    EXPECT_EQ(b.queue_bytes(t), (prefill - 1) * 1000ull);
    const bool m = b.Enqueue(1000, t).ce_marked;
    marked += m;
    if (marks) marks->push_back(m);
    while (b.Dequeue(t, &d)) {
    }
  }
  return static_cast<double>(marked) / n;
}

TEST(EgressPort, MarkedFractionMatchesRedProbability) {
  // Level 10000 B: p = 0.25; 4 sigma of a binomial over 2e5 is 0.0039.
  EXPECT_NEAR(MarkedFraction(7, 11, nullptr), 0.25, 0.004);
  // Level 7000 B: p = 0.1.
  EXPECT_NEAR(MarkedFraction(7, 8, nullptr), 0.1, 0.003);
}

TEST(EgressPort, SameSeedSameMarksOtherSeedOthers) {
  std::vector<bool> a, b, c;
  MarkedFraction(42, 11, &a);
  MarkedFraction(42, 11, &b);
  MarkedFraction(43, 11, &c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(EgressPort, TailDropAtBufferSize) {
  EgressPortConfig c = TenGig();
  c.buffer_bytes = 3000;
  EgressPort b(c);
  EXPECT_FALSE(b.Enqueue(1000, 0).dropped);
  EXPECT_FALSE(b.Enqueue(1000, 0).dropped);
  EXPECT_FALSE(b.Enqueue(1000, 0).dropped);
  EXPECT_TRUE(b.Enqueue(1000, 0).dropped);
  EXPECT_TRUE(b.Enqueue(1, 0).dropped);
  EXPECT_EQ(b.dropped_packets(), 2u);
  EXPECT_EQ(b.enqueued_packets(), 3u);
  EXPECT_EQ(b.queue_bytes(0), 3000u);
  EXPECT_FALSE(b.Enqueue(1000, 800).dropped);  // one left: room again
  EXPECT_EQ(b.max_queue_bytes(), 3000u);
}

// max_packets 0: the FIFO grows past its first allocation as the queue
// does, in order; max_packets N: a fixed FIFO, the packet beyond N dropped.
TEST(EgressPort, FifoGrowsUnlessItsSizeIsGiven) {
  EgressPortConfig c = TenGig();
  EgressPort grows(c);
  const uint32_t n = 3 * EgressPort::kInitialPackets + 5;
  for (uint32_t i = 0; i < n; ++i) EXPECT_FALSE(grows.Enqueue(1000, 0, i).dropped);
  EXPECT_EQ(grows.queue_packets(), n);
  Departure d;
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_TRUE(grows.Dequeue(uint64_t{n} * 800, &d));
    EXPECT_EQ(d.tag, i);
    EXPECT_EQ(d.depart_ns, uint64_t{i + 1} * 800);
  }
  EXPECT_FALSE(grows.Dequeue(UINT64_MAX - 1, &d));

  c.max_packets = 4;
  EgressPort fixed(c);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(fixed.Enqueue(1000, 0).dropped);
  EXPECT_TRUE(fixed.Enqueue(1000, 0).dropped);
  EXPECT_EQ(fixed.dropped_packets(), 1u);
  // Left the port but not dequeued: still the caller's, still no room.
  EXPECT_TRUE(fixed.Enqueue(1000, 800).dropped);
  ASSERT_TRUE(fixed.Dequeue(800, &d));
  EXPECT_FALSE(fixed.Enqueue(1000, 800).dropped);
}

TEST(EgressPort, TimeWeightedQueuePercentiles) {
  EgressPort b(TenGig());
  b.ResetStats(0);
  b.Enqueue(1000, 0);
  b.Enqueue(1000, 0);
  // Queue 2000 B for [0, 800), 1000 B for [800, 1600), empty for [1600, 8000).
  EXPECT_EQ(b.QueuePercentile(0.5, 8000), 0u);
  EXPECT_EQ(b.QueuePercentile(0.8, 8000), 0u);
  EXPECT_EQ(b.QueuePercentile(0.85, 8000), 1000u);
  EXPECT_EQ(b.QueuePercentile(0.95, 8000), 2000u);
  EXPECT_EQ(b.QueuePercentile(1.0, 8000), 2000u);
  // Mean: (2050*800 + 1050*800 + 50*6400) / 8000 with bin centres.
  EXPECT_NEAR(b.MeanQueueBytes(8000), (2050.0 * 800 + 1050.0 * 800 + 50.0 * 6400) / 8000, 1e-9);
  b.ResetStats(8000);
  EXPECT_EQ(b.max_queue_bytes(), 0u);
  EXPECT_EQ(b.enqueued_packets(), 0u);
}

TEST(EgressPort, QueueingDelayGrowsWithTheQueue) {
  EgressPort b(TenGig());
  // A burst of 10 at t=0: the k-th waits (k-1) x 800 ns before it starts.
  for (int i = 0; i < 10; ++i) b.Enqueue(1000, 0, i);
  Departure d;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(b.Dequeue(1'000'000, &d));
    EXPECT_EQ(d.depart_ns - d.enqueue_ns, 800u * (i + 1));
  }
}

TEST(EgressPort, PauseHoldsWhatHasNotStartedAndResumeGoesOn) {
  EgressPortConfig c = TenGig();
  c.ecn = false;
  EgressPort b(c);
  for (uint64_t tag = 1; tag <= 3; ++tag) b.Enqueue(1000, 0, tag);
  b.Pause(500);  // packet 1 is on the wire (0..800): it finishes; 2 and 3 wait
  EXPECT_TRUE(b.paused());
  Departure d;
  ASSERT_TRUE(b.Dequeue(10'000, &d));
  EXPECT_EQ(d.tag, 1u);
  EXPECT_EQ(d.depart_ns, 800u);
  EXPECT_FALSE(b.Dequeue(10'000, &d));
  EXPECT_EQ(b.next_departure_ns(), UINT64_MAX);
  EXPECT_EQ(b.queue_bytes(10'000), 2000u);
  b.Enqueue(1000, 10'000, 4);  // arrivals queue while paused
  b.Resume(20'000);
  EXPECT_FALSE(b.paused());
  EXPECT_EQ(b.next_departure_ns(), 20'800u);
  for (uint64_t tag = 2; tag <= 4; ++tag) {
    ASSERT_TRUE(b.Dequeue(100'000, &d));
    EXPECT_EQ(d.tag, tag);
    EXPECT_EQ(d.depart_ns, 20'000 + 800 * (tag - 1));
  }
  EXPECT_EQ(b.pauses(), 1u);
  EXPECT_EQ(b.paused_ns(100'000), 19'500u);
  // A pause that ends before the packet in transmission does: the next one starts after it.
  b.Enqueue(1000, 200'000, 5);
  b.Enqueue(1000, 200'000, 6);
  b.Pause(200'100);
  b.Resume(200'200);
  ASSERT_TRUE(b.Dequeue(300'000, &d));
  EXPECT_EQ(d.depart_ns, 200'800u);
  ASSERT_TRUE(b.Dequeue(300'000, &d));
  EXPECT_EQ(d.depart_ns, 201'600u);
}

TEST(EgressPort, LeavingPacketsCarryThePortsIntRecord) {
  EgressPortConfig c = TenGig();
  c.int_stamp = true;
  EgressPort b(c);
  b.Enqueue(1000, 100, 1);
  b.Enqueue(500, 100, 2);
  b.Enqueue(1500, 100, 3);
  Departure d;
  ASSERT_TRUE(b.Dequeue(10'000, &d));
  EXPECT_EQ(d.int_hop.timestamp_ns, 900u);
  EXPECT_EQ(d.int_hop.tx_bytes, 1000u);
  EXPECT_EQ(d.int_hop.qlen_bytes, 2000u);  // behind it
  EXPECT_EQ(d.int_hop.line_rate_mbps, 10'000u);
  ASSERT_TRUE(b.Dequeue(10'000, &d));
  EXPECT_EQ(d.int_hop.timestamp_ns, 1300u);
  EXPECT_EQ(d.int_hop.tx_bytes, 1500u);
  EXPECT_EQ(d.int_hop.qlen_bytes, 1500u);
  ASSERT_TRUE(b.Dequeue(10'000, &d));
  EXPECT_EQ(d.int_hop.tx_bytes, 3000u);
  EXPECT_EQ(d.int_hop.qlen_bytes, 0u);
}

TEST(PfcIngress, PausesAboveXoffResumesAtXon) {
  PfcIngress pfc(2, 3000, 1000);
  EXPECT_EQ(pfc.Add(0, 1500), PfcIngress::kNone);
  EXPECT_EQ(pfc.Add(0, 1500), PfcIngress::kNone);  // 3000: not above
  EXPECT_EQ(pfc.Add(1, 4000), PfcIngress::kPause);  // per ingress
  EXPECT_EQ(pfc.Add(0, 1), PfcIngress::kPause);
  EXPECT_EQ(pfc.Add(0, 1000), PfcIngress::kNone);  // already paused
  EXPECT_TRUE(pfc.paused(0));
  EXPECT_EQ(pfc.Remove(0, 2000), PfcIngress::kNone);  // 2001 > xon
  EXPECT_EQ(pfc.Remove(0, 1001), PfcIngress::kResume);
  EXPECT_FALSE(pfc.paused(0));
  EXPECT_TRUE(pfc.paused(1));
  EXPECT_EQ(pfc.Remove(1, 99'999), PfcIngress::kResume);  // never below zero
  EXPECT_EQ(pfc.bytes(1), 0u);
  EXPECT_EQ(pfc.pause_frames(), 2u);
}

}  // namespace
}  // namespace droce::sim
