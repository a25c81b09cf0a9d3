// N-to-1 incast in ns-3 with droce's transport as every host's NIC: N
// senders and one receiver, each on its own point-to-point link to one
// switch; every switch port is a SwitchPortModel (queue at line rate, ECN,
// tail drop, INT), so the port toward the receiver is the bottleneck. Each
// sender runs one RC flow of RDMA WRITEs into the receiver, all starting
// together; every host runs cc=. ns-3's scheduler is the only clock.
//
// C++17 and free of ns-3's headers: the scenario program and the test
// include it; incast.cc and nodes.cc hold the ns-3 side.
#ifndef DROCE_SIM_NS3_INCAST_H_
#define DROCE_SIM_NS3_INCAST_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "sim/ns3/host_model.h"

namespace droce::ns3glue {

struct IncastConfig {
  uint32_t senders = 4;
  std::string cc = "dcqcn";  // every host's cc=
  std::string cc_params;     // every host's cc_params=
  uint64_t line_rate_bps = 100'000'000'000ull;  // every link and switch port
  uint64_t link_delay_ns = 1000;                // propagation, each link
  uint32_t mtu = 1024;
  uint64_t flow_bytes = 1u << 20;
  uint32_t msg_bytes = 64 * 1024;
  uint32_t depth = 16;       // WRITEs outstanding per flow
  // Every switch port (line_rate_bps is the link's). ECN as the HPCC simulator's run.py sets it at
  // 100 Gb/s (Kmin 100 KB and Kmax 400 KB per 25 Gb/s, Pmax 0.2); the buffer is unlimited unless set.
  SwitchPortConfig port = [] {
    SwitchPortConfig p;
    p.kmin_bytes = 400'000;
    p.kmax_bytes = 1'600'000;
    p.pmax = 0.2;
    return p;
  }();
  bool int_stamp_auto = true;  // switch ports stamp INT when cc is hpcc
  // A busy host's poll loop period. A paced QP sends at most one packet per round (lib/cc/pacer.h), so it
  // is kept below a packet's time at the line rate (84 ns for 1 KiB at 100 Gb/s).
  uint64_t poll_ns = 50;
  uint64_t sample_ns = 5000; // time-series period
  uint64_t max_ns = 200'000'000;  // simulated time limit after the flows start
};

struct IncastFlow {
  uint32_t sender = 0;
  FlowProgress progress;
  CcView cc;  // at the end
  QpView qp;  // the sender QP's transport counters at the end
};

struct IncastSample {
  uint64_t t_ns = 0;            // since the flows started
  uint64_t queue_bytes = 0;     // the bottleneck port's
  std::vector<double> rate_bps;     // each flow's congestion-control rate (line rate when unlimited)
  std::vector<uint32_t> window;     // each flow's window in packets (0: none)
  std::vector<double> goodput_bps;  // each flow's acknowledged bytes over the last period
};

struct IncastResult {
  std::string error;            // non-empty: the scenario could not be set up
  bool all_done = false;
  uint64_t end_ns = 0;          // since the flows started: the last completion, or the limit
  std::vector<IncastFlow> flows;
  SwitchPortStats bottleneck;
  std::vector<IncastSample> samples;
  uint64_t events = 0;          // ns-3 events run
  std::vector<std::string> host_counters;  // HostModel::DescribeCounters, senders then the receiver
};

IncastResult RunIncast(const IncastConfig& cfg);

// t_us,queue_bytes,rate_gbps_0..,window_0..,goodput_gbps_0..
void WriteSamplesCsv(const IncastResult& r, std::ostream& out);
// flow,sender,bytes,fct_us,done,failed,algorithm,rtt_samples,min_rtt_us,cnps,telemetry_acks,rate_decreases,
// tx_packets,retransmitted,timeouts,naks_received
void WriteFlowsCsv(const IncastResult& r, std::ostream& out);
// One key=value line: the configuration and the results (FCTs, queue, drops, marks).
std::string Summary(const IncastConfig& cfg, const IncastResult& r);

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_INCAST_H_
