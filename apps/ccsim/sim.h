// droce-ccsim's simulation: N greedy senders, each a DCQCN reaction point
// (cc::ReactionPoint) and pacer (cc::Pacer), send MTU packets into one
// emulated congestion point (sim::EgressPort); the receiver is the notification
// point (one CNP per flow per min_time_between_cnps while it sees CE) and the
// CNP reaches the sender after a feedback delay. A discrete-event simulation
// in virtual time: the same options and seed give the same output.
#ifndef DROCE_APPS_CCSIM_SIM_H_
#define DROCE_APPS_CCSIM_SIM_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cc/dcqcn.h"

namespace droce::ccsim {

struct SimConfig {
  int senders = 2;
  double line_rate_gbps = 25;      // every port: senders' NICs and the bottleneck
  std::string profile = "paper";   // paper | mlx5
  bool dcqcn = true;
  double duration_ms = 50;
  uint64_t kmin_bytes = 5'000;     // the paper's Kmin / Kmax / Pmax
  uint64_t kmax_bytes = 200'000;
  double pmax = 0.01;
  uint64_t buffer_bytes = 1'000'000;  // 0: unlimited
  bool mark_on_dequeue = true;     // RED on the bytes behind a leaving packet (else ahead of an arriving one)
  double jitter_ns = 50;           // each packet reaches the switch U[0, jitter) after its send time
  double late_join_ms = -1;        // >= 0: the last sender starts then
  uint32_t mtu = 1024;             // payload; frames carry 58 more bytes
  double feedback_delay_us = 4;    // receiver's CNP to the sender's reaction point
  double cnp_interval_us = -1;     // < 0: the profile's min_time_between_cnps
  double sample_us = 100;          // time-series resolution
  double conv_window_us = 1000;    // windows for the convergence test
  uint64_t seed = 1;
  // Profile knobs overridden by name (DcqcnParams fields, e.g. "dce_tcp_rtt_us"),
  // applied in order after the profile: for sensitivity runs, never the goal's
  // configuration. Printed in the summary line as set=name:value+...
  std::vector<std::pair<std::string, double>> overrides;
};

// Sets one DcqcnParams field by its name; false if there is no such knob or
// the value does not fit it.
bool SetKnob(cc::DcqcnParams* p, const std::string& name, double value);

struct FlowSeries {
  std::vector<double> rc_gbps;   // reaction point's RC at each sample
  std::vector<double> thr_gbps;  // delivered over the sample interval
};

struct SimResult {
  // Summary (second half = [duration/2, duration]).
  double jain = 0;                 // over delivered bytes per flow in the second half
  double converge_ms = -1;         // first 1-window where every flow is within 10 % of fair; -1 never
  double stable_ms = -1;           // from then on every window is within 10 %; -1 never
  uint64_t queue_p50 = 0, queue_p99 = 0, queue_max = 0;  // second half, time-weighted
  uint64_t queue_max_run = 0;      // whole run
  uint64_t drops = 0;
  uint64_t drops_2h = 0;           // second half
  uint64_t cnps = 0;
  uint64_t marks = 0;
  double utilization = 0;          // delivered / capacity, second half
  std::vector<double> flow_gbps;   // per flow, second half
  // Time series.
  std::vector<double> t_us;
  std::vector<uint64_t> queue_bytes;
  std::vector<FlowSeries> flows;
};

// Runs one simulation. Fails (returns false, *error set) on bad options.
bool RunSim(const SimConfig& cfg, SimResult* out, std::string* error);

// The one summary line droce-ccsim prints.
std::string SummaryLine(const SimConfig& cfg, const SimResult& r);

bool WriteCsv(const SimResult& r, const std::string& path);

// Jain's fairness index (sum x)^2 / (n sum x^2); 1 for an empty or all-zero set.
double Jain(const std::vector<double>& x);

// Convergence of per-flow throughput to `fair` within `tol` (relative), on
// windows [from + k w, from + (k+1) w) averaged from samples: thr[f][s] is
// flow f's throughput over sample s, i.e. [s * sample_us, (s+1) * sample_us).
// `first_us`: time (after from) at the end of the first window where every
// flow is within tol; `stable_us`: start of the last run of such windows that
// lasts to the end of the run. -1: never. Incomplete trailing windows ignored.
struct Convergence {
  double first_us = -1;
  double stable_us = -1;
};
Convergence ConvergenceTimes(const std::vector<std::vector<double>>& thr, double sample_us,
                             double from_us, double window_us, double fair, double tol);

}  // namespace droce::ccsim

#endif  // DROCE_APPS_CCSIM_SIM_H_
