// Datacenter workloads as the HPCC simulator's experiments draw them: flow
// sizes from a published flow-size CDF (piecewise linear between its points,
// as sampled by inverse transform), Poisson flow arrivals whose mean rate puts
// `load` of every host's line rate on the fabric, each flow between a source
// and a destination host drawn uniformly (never the same host).
//
// C++17 and free of ns-3 and droce: the fabric scenario, its program and its
// tests use it.
#ifndef DROCE_SIM_NS3_WORKLOAD_H_
#define DROCE_SIM_NS3_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace droce::ns3glue {

// (flow size in bytes, fraction of flows at or below it); sizes and fractions
// non-decreasing, the last fraction 1.
class FlowSizeCdf {
 public:
  // A built-in table ("websearch", "fb_hadoop") or a file of "bytes fraction"
  // lines ('#' comments; fractions in [0, 1] or percent in [0, 100]).
  static bool Load(const std::string& name_or_path, FlowSizeCdf* out, std::string* error);
  static bool FromPoints(std::vector<std::pair<double, double>> points, FlowSizeCdf* out, std::string* error);

  // The size at quantile u in [0, 1) (at least 1 byte).
  uint64_t Sample(double u) const;
  double MeanBytes() const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

struct FlowSpec {
  uint32_t src = 0, dst = 0;
  uint64_t bytes = 0;
  uint64_t start_ns = 0;
};

struct WorkloadConfig {
  uint32_t hosts = 0;
  uint64_t host_rate_bps = 100'000'000'000ull;
  double load = 0.3;         // offered bytes / (hosts x line rate)
  uint64_t duration_ns = 0;  // arrivals in [0, duration)
  uint64_t seed = 1;
};

// Flows in order of start time.
std::vector<FlowSpec> PoissonFlows(const WorkloadConfig& cfg, const FlowSizeCdf& sizes);

}  // namespace droce::ns3glue

#endif  // DROCE_SIM_NS3_WORKLOAD_H_
