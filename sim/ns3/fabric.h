// A leaf-spine fabric in ns-3 with droce's transport as every host's NIC, as
// the HPCC simulator's experiments run: `leaves` leaf switches of
// `hosts_per_leaf` hosts each (host links at host_rate), every leaf linked to
// every one of `spines` spine switches (at spine_rate); every switch port is
// a SwitchPortModel (FIFO at its line rate, ECN, tail drop, INT) and a leaf
// spreads flows over its uplinks by a hash of the flow (ECMP). PFC at every
// switch ingress is an option. Each flow of the workload (sim/ns3/workload.h)
// is RDMA WRITEs on an RC QP pair of its own, set up when it starts; every
// host runs cc=. ns-3's scheduler is the only clock.
//
// A flow's ideal completion is what it would take alone: its bytes and
// headers at the host's line rate, plus the last packet's store-and-forward
// at each switch and the propagation of the data and of its ACK — a lower
// bound on what the simulation can give, so slowdown = FCT / ideal >= 1.
//
// C++17 and free of ns-3's headers: the program and the test include it.
#ifndef DROCE_SIM_NS3_FABRIC_H_
#define DROCE_SIM_NS3_FABRIC_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sim/ns3/host_model.h"
#include "sim/ns3/workload.h"

namespace droce::ns3glue {

struct FabricConfig {
  uint32_t leaves = 8, hosts_per_leaf = 16, spines = 4;
  uint64_t host_rate_bps = 100'000'000'000ull;
  uint64_t spine_rate_bps = 400'000'000'000ull;  // 8 x 16 x 100G under 4 x 400G per leaf: no oversubscription
  uint64_t link_delay_ns = 1000;
  std::string cc = "dcqcn";
  std::string cc_params;
  uint32_t mtu = 1024;
  uint32_t msg_bytes = 64 * 1024;
  uint32_t depth = 16;  // WRITEs outstanding per flow
  // ECN at every port, scaled with its line rate: the HPCC simulator's values (Kmin 100 KB, Kmax 400 KB
  // per 25 Gb/s, Pmax 0.2) per 100 Gb/s.
  bool ecn = true;
  uint64_t kmin_per_100g = 400'000, kmax_per_100g = 1'600'000;
  double pmax = 0.2;
  bool mark_at_dequeue = false;
  uint64_t buffer_bytes = 0;  // every port's; 0 unlimited
  bool int_stamp_auto = true; // every port stamps INT when cc is hpcc
  bool int_stamp = false;     // without auto
  // PFC at every switch ingress; xoff/xon in bytes of that ingress in the switch's queues.
  bool pfc = false;
  uint64_t pfc_xoff_bytes = 500'000, pfc_xon_bytes = 250'000;
  uint64_t poll_ns = 50;
  uint64_t seed = 1;
  uint64_t max_ns = 100'000'000;  // simulated time limit
  // Queue lengths are measured from the start to this time (0: to the end of the run): the arrivals'
  // window, so the tail where the last long flows finish alone does not dilute them.
  uint64_t queue_until_ns = 0;
  std::vector<FlowSpec> flows;    // start times from 0
};

struct FabricFlow {
  FlowSpec spec;
  FlowProgress progress;
  uint64_t ideal_ns = 0;
  uint32_t switches = 0;  // on its path
  QpView qp;              // the sender QP's transport counters at the end
};

// Switch ports of one kind, merged.
struct PortClassStats {
  std::string name;  // leaf_down (toward hosts), leaf_up, spine_down
  uint32_t ports = 0;
  uint32_t bin_bytes = 0;
  std::vector<uint64_t> histogram_ns;  // summed over the ports: ns spent with [i, i+1) x bin_bytes queued
  uint64_t max_queue_bytes = 0;
  uint64_t dropped = 0, marked = 0, stamped = 0, pauses = 0, paused_ns = 0;
  std::vector<uint64_t> departed_bytes;  // each port's, over the run (ECMP's spread over the uplinks)
  // Time-weighted over the ports and the measured time (FabricConfig::queue_until_ns).
  double mean_queue_bytes = 0;
  uint64_t QueuePercentile(double q) const;
};

struct FabricResult {
  std::string error;  // non-empty: the scenario could not be set up
  bool all_done = false;
  uint64_t end_ns = 0;  // the last completion, or the time limit
  std::vector<FabricFlow> flows;
  std::vector<PortClassStats> ports;
  uint64_t host_pauses = 0;  // PFC pauses the hosts received
  uint64_t pause_frames = 0; // PFC pauses the switches sent
  uint64_t unknown_destination = 0;
  uint64_t events = 0;
};

FabricResult RunFabric(const FabricConfig& cfg);
// The ideal completion of `bytes` through `switches` switches (1: same leaf, 3: through a spine).
uint64_t IdealFctNs(const FabricConfig& cfg, uint64_t bytes, uint32_t switches);

// flow,src,dst,bytes,start_us,fct_us,ideal_us,slowdown,switches,done,failed,retransmitted,timeouts
void WriteFabricFlowsCsv(const FabricResult& r, std::ostream& out);
// class,queue_bytes,cdf: each port class's time-weighted queue-length CDF (where it changes).
void WriteQueueCdfCsv(const FabricResult& r, std::ostream& out);
// One key=value line: the configuration and the results (slowdown percentiles, queues, drops, pauses).
std::string FabricSummary(const FabricConfig& cfg, const FabricResult& r);

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_FABRIC_H_
