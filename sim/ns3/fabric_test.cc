// The leaf-spine fabric and its workloads in ns-3 with droce's transport as
// every host's NIC (sim/ns3/fabric.h, sim/ns3/workload.h). Assertions are on
// simulated results — completions, slowdowns against the ideal, the ports'
// queues, drops and pauses — never on wall-clock time.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "sim/ns3/fabric.h"
#include "sim/ns3/workload.h"

namespace droce::ns3glue {
namespace {

// 2 leaves x 8 hosts, 2 spines at 200 Gb/s: every path kind (same leaf, through a spine, two ECMP choices).
FabricConfig SmallFabric(const char* cc) {
  FabricConfig c;
  c.leaves = 2;
  c.hosts_per_leaf = 8;
  c.spines = 2;
  c.spine_rate_bps = 200'000'000'000ull;
  c.cc = cc;
  c.max_ns = 100'000'000;
  return c;
}

FabricResult RunAndPrint(const FabricConfig& c) {
  FabricResult r = RunFabric(c);
  EXPECT_EQ(r.error, "");
  std::printf("%s\n", FabricSummary(c, r).c_str());
  return r;
}

FlowSizeCdf WebSearch() {
  FlowSizeCdf web;
  std::string error;
  EXPECT_TRUE(FlowSizeCdf::Load("websearch", &web, &error)) << error;
  return web;
}

// WebSearch flows at `load` among `hosts` hosts over `duration_ns`.
std::vector<FlowSpec> WebSearchFlows(uint32_t hosts, double load, uint64_t duration_ns, uint64_t seed) {
  WorkloadConfig w;
  w.hosts = hosts;
  w.load = load;
  w.duration_ns = duration_ns;
  w.seed = seed;
  return PoissonFlows(w, WebSearch());
}

const PortClassStats& Ports(const FabricResult& r, const std::string& name) {
  for (const PortClassStats& p : r.ports) {
    if (p.name == name) return p;
  }
  static const PortClassStats kNone;
  ADD_FAILURE() << "no port class " << name;
  return kNone;
}

TEST(Workload, TablesAreCdfsWithThePublishedMeans) {
  std::string error;
  FlowSizeCdf web, hadoop;
  ASSERT_TRUE(FlowSizeCdf::Load("websearch", &web, &error)) << error;
  ASSERT_TRUE(FlowSizeCdf::Load("fb_hadoop", &hadoop, &error)) << error;
  EXPECT_NEAR(web.MeanBytes(), 1.7e6, 0.1e6);
  EXPECT_LT(hadoop.MeanBytes(), 0.5e6);
  EXPECT_EQ(web.Sample(0.0), 1u);
  EXPECT_EQ(web.Sample(0.15), 10'000u);
  EXPECT_EQ(web.Sample(0.175), 15'000u);  // linear between points
  EXPECT_LE(web.Sample(0.999999), 30'000'000u);
  FlowSizeCdf bad;
  EXPECT_FALSE(FlowSizeCdf::FromPoints({{0, 0}, {10, 0.5}, {5, 1.0}}, &bad, &error));
  EXPECT_FALSE(FlowSizeCdf::FromPoints({{0, 0}, {10, 0.5}}, &bad, &error));
  EXPECT_FALSE(FlowSizeCdf::Load("no-such-workload", &bad, &error));
}

TEST(Workload, PoissonArrivalsOfferTheLoad) {
  constexpr uint64_t kDurationNs = 20'000'000;
  const std::vector<FlowSpec> flows = WebSearchFlows(128, 0.5, kDurationNs, 1);
  // 0.5 x 128 x 100 Gb/s / 1.7 MB per flow: ~4700 flows per ms.
  const double expected = 0.5 * 128 * 100e9 / 8 / WebSearch().MeanBytes() * 20e-3;
  EXPECT_NEAR(static_cast<double>(flows.size()), expected, 0.05 * expected);
  uint64_t last = 0;
  for (const FlowSpec& f : flows) {
    ASSERT_NE(f.src, f.dst);
    ASSERT_LT(f.src, 128u);
    ASSERT_LT(f.dst, 128u);
    ASSERT_GE(f.start_ns, last);
    ASSERT_LT(f.start_ns, kDurationNs);
    last = f.start_ns;
  }
}

// WebSearch at 50 % load for 300 us on the small fabric, with a 6-to-1
// incast of 2 MB flows (three senders on the receiver's leaf, three behind
// the spines) at 50 us: every algorithm completes every flow, no flow beats
// its ideal (slowdown >= 1), and with congestion control on, the
// host-facing queues stay far below what uncontrolled senders build.
TEST(Ns3Fabric, WebSearchCompletesEveryFlowAtOrAboveItsIdeal) {
  std::vector<FlowSpec> flows = WebSearchFlows(16, 0.5, 300'000, 3);
  ASSERT_GE(flows.size(), 10u);
  for (uint32_t src : {1u, 2u, 3u, 9u, 10u, 11u}) flows.push_back({src, 0, 2'000'000, 50'000});
  double none_mean_queue = 0;
  for (const char* cc : {"none", "dcqcn", "timely", "hpcc", "swift"}) {
    SCOPED_TRACE(cc);
    FabricConfig c = SmallFabric(cc);
    c.flows = flows;
    const FabricResult r = RunAndPrint(c);
    EXPECT_TRUE(r.all_done);
    EXPECT_EQ(r.unknown_destination, 0u);
    ASSERT_EQ(r.flows.size(), flows.size());
    bool through_spine = false;
    for (const FabricFlow& f : r.flows) {
      EXPECT_TRUE(f.progress.done);
      EXPECT_FALSE(f.progress.failed);
      EXPECT_EQ(f.progress.bytes_acked, f.spec.bytes);
      EXPECT_GE(f.progress.finish_ns - f.progress.start_ns, f.ideal_ns) << f.spec.bytes;
      through_spine = through_spine || f.switches == 3;
    }
    EXPECT_TRUE(through_spine);
    const PortClassStats& down = Ports(r, "leaf_down");
    EXPECT_EQ(down.dropped, 0u);
    if (std::string(cc) == "none") {
      none_mean_queue = down.mean_queue_bytes;
      EXPECT_GT(down.max_queue_bytes, 1'000'000u);  // the incast: more than one flow's in-flight cap
    } else {
      EXPECT_LT(down.mean_queue_bytes * 3, none_mean_queue);
    }
  }
}

// Seven senders (three on the receiver's leaf, four behind the spines) into
// one host with a 1 MB buffer at every port and no congestion control: the
// port toward the receiver overflows and drops (the flows still complete by
// go-back-N). With PFC (xoff 64 KB per ingress) the leaf pauses the ports
// and hosts that feed it, the queue stays below the buffer and nothing is
// dropped; the pause reaches back through the spines.
TEST(Ns3Fabric, PfcPausesSendersInsteadOfDropping) {
  FabricConfig c = SmallFabric("none");
  c.buffer_bytes = 1'000'000;
  for (uint32_t src : {1u, 2u, 3u, 8u, 9u, 10u, 11u}) c.flows.push_back({src, 0, 1'000'000, 0});
  const FabricResult drop = RunAndPrint(c);
  EXPECT_TRUE(drop.all_done);
  EXPECT_GT(Ports(drop, "leaf_down").dropped, 10u);
  EXPECT_EQ(drop.pause_frames, 0u);

  c.pfc = true;
  c.pfc_xoff_bytes = 64'000;
  c.pfc_xon_bytes = 32'000;
  const FabricResult pfc = RunAndPrint(c);
  EXPECT_TRUE(pfc.all_done);
  for (const PortClassStats& p : pfc.ports) EXPECT_EQ(p.dropped, 0u) << p.name;
  EXPECT_LT(Ports(pfc, "leaf_down").max_queue_bytes, c.buffer_bytes);
  EXPECT_GT(pfc.pause_frames, 0u);
  EXPECT_GT(pfc.host_pauses, 0u);                      // the receiver's leaf paused its own senders
  EXPECT_GT(Ports(pfc, "spine_down").pauses, 0u);      // ... and the spines feeding it
  for (const FabricFlow& f : pfc.flows) {
    EXPECT_EQ(f.qp.retransmitted_packets, 0u) << f.spec.src;
    EXPECT_GE(f.progress.finish_ns - f.progress.start_ns, f.ideal_ns);
  }
  // Lossless is faster here than loss and go-back-N.
  EXPECT_LT(pfc.end_ns, drop.end_ns);
}

// 32 flows from leaf 1's hosts to leaf 0's: the flow hash spreads them over
// leaf 1's two uplinks (each carries between a quarter and three quarters),
// and every packet of a flow takes one path (no reordering: no NAKs).
TEST(Ns3Fabric, EcmpSpreadsFlowsOverTheUplinks) {
  FabricConfig c = SmallFabric("none");
  for (uint32_t i = 0; i < 32; ++i) c.flows.push_back({8 + i % 8, i / 4, 100'000, i * 1000});
  const FabricResult r = RunAndPrint(c);
  EXPECT_TRUE(r.all_done);
  const std::vector<uint64_t>& up = Ports(r, "leaf_up").departed_bytes;
  ASSERT_EQ(up.size(), 4u);  // leaf 0's two uplinks (the ACKs), then leaf 1's (the data)
  const uint64_t data = up[2] + up[3];
  EXPECT_GT(data, 32 * 100'000u);
  EXPECT_GT(up[2], data / 4);
  EXPECT_GT(up[3], data / 4);
  for (const FabricFlow& f : r.flows) EXPECT_EQ(f.qp.retransmitted_packets, 0u);
}

// Virtual time and fixed seeds: the same scenario twice gives the same
// completions to the nanosecond (the ECMP paths, which hash QPNs, included).
TEST(Ns3Fabric, ARunRepeatsExactly) {
  FabricConfig c = SmallFabric("hpcc");
  c.flows = WebSearchFlows(16, 0.5, 100'000, 1);
  for (uint32_t i = 0; i < 16; ++i) c.flows.push_back({8 + i % 8, i / 2, 50'000, i * 500});
  const FabricResult a = RunFabric(c), b = RunFabric(c);
  ASSERT_TRUE(a.all_done);
  ASSERT_EQ(a.flows.size(), b.flows.size());
  for (size_t i = 0; i < a.flows.size(); ++i) EXPECT_EQ(a.flows[i].progress.finish_ns, b.flows[i].progress.finish_ns) << i;
  EXPECT_EQ(a.events, b.events);
}

TEST(Ns3Fabric, BadConfigurationsAreRefused) {
  FabricConfig c = SmallFabric("none");
  c.flows.push_back({0, 0, 1000, 0});
  EXPECT_NE(RunFabric(c).error, "");
  c.flows = {{0, 99, 1000, 0}};
  EXPECT_NE(RunFabric(c).error, "");
  c = SmallFabric("cubic");
  c.flows.push_back({0, 1, 1000, 0});
  EXPECT_NE(RunFabric(c).error.find("dcqcn, timely, hpcc, swift, none"), std::string::npos);
}

}  // namespace
}  // namespace droce::ns3glue
