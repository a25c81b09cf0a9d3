// Flow-size CDFs and Poisson arrivals (sim/ns3/workload.h).
#include "sim/ns3/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

namespace droce::ns3glue {
namespace {

// WebSearch: the flow sizes of the web-search cluster measured in Alizadeh
// et al., "Data Center TCP (DCTCP)", SIGCOMM 2010 (Fig. 4, background
// flows), as the piecewise-linear points pFabric (Alizadeh et al., SIGCOMM
// 2013, §5.1) and HPCC (Li et al., SIGCOMM 2019, §5.1) simulate: half the
// flows below ~60 KB, most bytes in flows of 1–30 MB; mean ~1.7 MB.
constexpr std::pair<double, double> kWebSearch[] = {
    {0, 0},           {10e3, 0.15},  {20e3, 0.20},  {30e3, 0.30}, {50e3, 0.40}, {80e3, 0.53},
    {200e3, 0.60},    {1e6, 0.70},   {2e6, 0.80},   {5e6, 0.90},  {10e6, 0.97}, {30e6, 1.0},
};

// FB_Hadoop: the flow sizes of Facebook's Hadoop racks in Roy et al.,
// "Inside the Social Network's (Datacenter) Network", SIGCOMM 2015 (Fig. 6,
// Hadoop), read off the published CDF: most flows below a few KB, a tail to
// ~10 MB; mean ~0.25 MB. An approximate reading of the figure, not the
// authors' data.
constexpr std::pair<double, double> kFbHadoop[] = {
    {0, 0},         {300, 0.10},    {600, 0.30},    {1e3, 0.50},   {2e3, 0.60},  {5e3, 0.70},
    {10e3, 0.75},   {50e3, 0.80},   {100e3, 0.83},  {300e3, 0.88}, {1e6, 0.93},  {3e6, 0.97},
    {10e6, 1.0},
};

}  // namespace

bool FlowSizeCdf::FromPoints(std::vector<std::pair<double, double>> points, FlowSizeCdf* out, std::string* error) {
  if (points.size() < 2) {
    *error = "a flow-size CDF needs at least two points";
    return false;
  }
  if (points.back().second > 1.0 + 1e-9) {  // percent
    for (auto& p : points) p.second /= 100.0;
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    if (!(p.first >= 0) || !(p.second >= 0) || p.second > 1.0 + 1e-9 ||
        (i > 0 && (p.first < points[i - 1].first || p.second < points[i - 1].second))) {
      *error = "flow-size CDF point " + std::to_string(i) + ": sizes and fractions must be non-negative and non-decreasing";
      return false;
    }
  }
  if (std::fabs(points.back().second - 1.0) > 1e-6) {
    *error = "a flow-size CDF must end at fraction 1 (or 100)";
    return false;
  }
  points.back().second = 1.0;
  out->points_ = std::move(points);
  return true;
}

bool FlowSizeCdf::Load(const std::string& name, FlowSizeCdf* out, std::string* error) {
  if (name == "websearch") return FromPoints({std::begin(kWebSearch), std::end(kWebSearch)}, out, error);
  if (name == "fb_hadoop") return FromPoints({std::begin(kFbHadoop), std::end(kFbHadoop)}, out, error);
  std::ifstream in(name);
  if (!in) {
    *error = "no workload '" + name + "' (websearch, fb_hadoop or a file of 'bytes fraction' lines)";
    return false;
  }
  std::vector<std::pair<double, double>> points;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = line.substr(0, line.find('#'));
    std::istringstream ls(line);
    double bytes, frac;
    if (!(ls >> bytes)) continue;  // blank
    std::string rest;
    if (!(ls >> frac) || (ls >> rest)) {
      *error = name + ":" + std::to_string(n) + ": expected 'bytes fraction'";
      return false;
    }
    points.emplace_back(bytes, frac);
  }
  return FromPoints(std::move(points), out, error);
}

uint64_t FlowSizeCdf::Sample(double u) const {
  const auto& p = points_;
  size_t i = 1;
  while (i + 1 < p.size() && p[i].second <= u) ++i;
  const double f0 = p[i - 1].second, f1 = p[i].second;
  const double x = f1 > f0 ? p[i - 1].first + (p[i].first - p[i - 1].first) * (u - f0) / (f1 - f0) : p[i].first;
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(x)));
}

double FlowSizeCdf::MeanBytes() const {
  double m = 0;
  for (size_t i = 1; i < points_.size(); ++i) {
    m += (points_[i].second - points_[i - 1].second) * (points_[i].first + points_[i - 1].first) / 2;
  }
  return m;
}

std::vector<FlowSpec> PoissonFlows(const WorkloadConfig& cfg, const FlowSizeCdf& sizes) {
  std::vector<FlowSpec> flows;
  if (cfg.hosts < 2 || cfg.load <= 0 || sizes.MeanBytes() <= 0) return flows;
  std::mt19937_64 rng(cfg.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  // Flows per ns over the whole fabric: load x hosts x line rate / mean flow size.
  const double rate = cfg.load * cfg.hosts * cfg.host_rate_bps / 8e9 / sizes.MeanBytes();
  std::exponential_distribution<double> gap(rate);
  std::uniform_int_distribution<uint32_t> host(0, cfg.hosts - 1), other(0, cfg.hosts - 2);
  for (double t = gap(rng); t < static_cast<double>(cfg.duration_ns); t += gap(rng)) {
    FlowSpec f;
    f.start_ns = static_cast<uint64_t>(t);
    f.src = host(rng);
    f.dst = other(rng);
    if (f.dst >= f.src) ++f.dst;
    f.bytes = sizes.Sample(uniform(rng));
    flows.push_back(f);
  }
  return flows;
}

}  // namespace droce::ns3glue
