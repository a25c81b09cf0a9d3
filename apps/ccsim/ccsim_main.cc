// droce-ccsim: N DCQCN senders through one emulated ECN-marking bottleneck,
// in virtual time. Prints one summary line (key=value); --csv-out writes the
// time series. doc/cc-experiments.md has the experiments and their results.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "apps/ccsim/sim.h"

namespace {

void Usage() {
  std::fprintf(stderr,
      "usage: droce-ccsim [options]\n"
      "  --senders N            greedy flows into the bottleneck (2)\n"
      "  --line-rate-gbps R     every port's speed (25)\n"
      "  --profile paper|mlx5   DCQCN parameters (paper)\n"
      "  --dcqcn on|off         reaction/notification points on (on)\n"
      "  --duration-ms D        simulated time (50)\n"
      "  --kmin B --kmax B      RED/ECN thresholds in bytes (5000, 200000)\n"
      "  --pmax P               marking probability at kmax (0.01)\n"
      "  --buffer-bytes B       tail drop above B queued bytes, 0 = unlimited (1000000)\n"
      "  --mark-at enqueue|dequeue  where RED looks at the queue (dequeue)\n"
      "  --jitter-ns J          packets reach the switch U[0,J) ns after leaving (50)\n"
      "  --late-join-ms T       the last sender starts at T ms (off)\n"
      "  --mtu B                payload bytes per packet, +58 header bytes (1024)\n"
      "  --feedback-delay-us D  CNP from receiver to sender (4)\n"
      "  --cnp-interval-us I    override the profile's min_time_between_cnps\n"
      "  --sample-us S          time-series resolution (100)\n"
      "  --conv-window-us W     averaging window of the convergence test (1000)\n"
      "  --csv-out FILE         time series: t, queue, per-flow RC and throughput\n"
      "  --seed S               RED marking RNG seed (1)\n"
      "  --set KNOB=V           override one profile knob (a DcqcnParams field, e.g.\n"
      "                         dce_tcp_rtt_us=55); repeatable; for sensitivity runs\n");
}

bool ParseOnOff(const char* v, bool* out) {
  if (!std::strcmp(v, "on")) return *out = true, true;
  if (!std::strcmp(v, "off")) return *out = false, true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  droce::ccsim::SimConfig cfg;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage();
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "droce-ccsim: %s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    char* end = nullptr;
    bool ok = true;
    auto num = [&]() { double d = std::strtod(v, &end); ok = end && *end == '\0' && end != v; return d; };
    auto unum = [&]() { unsigned long long u = std::strtoull(v, &end, 10); ok = end && *end == '\0' && end != v; return u; };
    if (a == "--senders") cfg.senders = static_cast<int>(unum());
    else if (a == "--line-rate-gbps") cfg.line_rate_gbps = num();
    else if (a == "--profile") cfg.profile = v;
    else if (a == "--dcqcn") ok = ParseOnOff(v, &cfg.dcqcn);
    else if (a == "--duration-ms") cfg.duration_ms = num();
    else if (a == "--kmin") cfg.kmin_bytes = unum();
    else if (a == "--kmax") cfg.kmax_bytes = unum();
    else if (a == "--pmax") cfg.pmax = num();
    else if (a == "--buffer-bytes") cfg.buffer_bytes = unum();
    else if (a == "--mark-at") {
      ok = !std::strcmp(v, "enqueue") || !std::strcmp(v, "dequeue");
      cfg.mark_on_dequeue = !std::strcmp(v, "dequeue");
    }
    else if (a == "--jitter-ns") cfg.jitter_ns = num();
    else if (a == "--late-join-ms") cfg.late_join_ms = num();
    else if (a == "--mtu") cfg.mtu = static_cast<uint32_t>(unum());
    else if (a == "--feedback-delay-us") cfg.feedback_delay_us = num();
    else if (a == "--cnp-interval-us") cfg.cnp_interval_us = num();
    else if (a == "--sample-us") cfg.sample_us = num();
    else if (a == "--conv-window-us") cfg.conv_window_us = num();
    else if (a == "--csv-out") csv = v;
    else if (a == "--seed") cfg.seed = unum();
    else if (a == "--set") {
      const char* eq = std::strchr(v, '=');
      ok = eq != nullptr && eq != v;
      if (ok) {
        const std::string val(eq + 1);
        const double d = std::strtod(val.c_str(), &end);
        ok = !val.empty() && end && *end == '\0';
        if (ok) cfg.overrides.emplace_back(std::string(v, eq), d);
      }
    }
    else {
      std::fprintf(stderr, "droce-ccsim: unknown option %s\n", a.c_str());
      Usage();
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "droce-ccsim: bad value for %s: %s\n", a.c_str(), v);
      return 2;
    }
  }
  droce::ccsim::SimResult r;
  std::string err;
  if (!droce::ccsim::RunSim(cfg, &r, &err)) {
    std::fprintf(stderr, "droce-ccsim: %s\n", err.c_str());
    return 2;
  }
  if (!csv.empty() && !droce::ccsim::WriteCsv(r, csv)) {
    std::fprintf(stderr, "droce-ccsim: cannot write %s\n", csv.c_str());
    return 1;
  }
  std::printf("%s\n", droce::ccsim::SummaryLine(cfg, r).c_str());
  return 0;
}
