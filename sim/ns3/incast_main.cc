// droce-ns3-incast: N senders -> one switch port -> one receiver in ns-3,
// every host running droce's transport with cc= (sim/ns3/incast.h). Prints
// one key=value summary line; --csv PREFIX writes PREFIX.samples.csv (queue
// and each flow's rate, window and goodput over time) and PREFIX.flows.csv.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "sim/ns3/incast.h"
#include "sim/ns3/options.h"

using droce::ns3glue::IncastConfig;
using droce::ns3glue::OnOff;
using droce::ns3glue::Option;
using droce::ns3glue::ParseDouble;
using droce::ns3glue::U;

int main(int argc, char** argv) {
  IncastConfig cfg;
  std::string csv;
  std::string int_mode = "auto";
  bool counters = false;
  double rate_gbps = 100, max_ms = 200;
  const Option options[] = {
      {"senders", "senders into the one receiver (4)", U(&cfg.senders)},
      {"cc", "every host's cc=: dcqcn|timely|hpcc|swift|none (dcqcn)", [&](const std::string& v) { cfg.cc = v; return true; }},
      {"cc-params", "every host's cc_params=, \"name=value ...\"", [&](const std::string& v) { cfg.cc_params = v; return true; }},
      {"rate-gbps", "every link's and port's line rate (100)", [&](const std::string& v) { return ParseDouble(v, &rate_gbps) && rate_gbps > 0; }},
      {"delay-ns", "each link's propagation delay (1000)", U(&cfg.link_delay_ns)},
      {"mtu", "path MTU (1024)", U(&cfg.mtu)},
      {"flow-bytes", "bytes each sender writes (1048576)", U(&cfg.flow_bytes)},
      {"msg-bytes", "bytes per WRITE (65536)", U(&cfg.msg_bytes)},
      {"depth", "WRITEs outstanding per flow (16)", U(&cfg.depth)},
      {"kmin", "ECN Kmin in bytes (400000)", U(&cfg.port.kmin_bytes)},
      {"kmax", "ECN Kmax in bytes (1600000)", U(&cfg.port.kmax_bytes)},
      {"pmax", "ECN marking probability at Kmax (0.2)", [&](const std::string& v) { return ParseDouble(v, &cfg.port.pmax) && cfg.port.pmax >= 0 && cfg.port.pmax <= 1; }},
      {"ecn", "on|off (on)", [&](const std::string& v) { cfg.port.ecn = v == "on"; return v == "on" || v == "off"; }},
      {"mark", "enqueue|dequeue (enqueue)", [&](const std::string& v) { cfg.port.mark_at_dequeue = v == "dequeue"; return v == "enqueue" || v == "dequeue"; }},
      {"buffer", "a port's buffer in bytes, 0 unlimited (0)", U(&cfg.port.buffer_bytes)},
      {"int", "auto (with hpcc)|on|off (auto)", [&](const std::string& v) { int_mode = v; return v == "auto" || v == "on" || v == "off"; }},
      {"poll-ns", "a busy host's poll period (50)", U(&cfg.poll_ns)},
      {"sample-ns", "time-series period (5000)", U(&cfg.sample_ns)},
      {"max-ms", "simulated time limit (200)", [&](const std::string& v) { return ParseDouble(v, &max_ms) && max_ms > 0; }},
      {"seed", "the ports' marking seed (1)", U(&cfg.port.seed)},
      {"counters", "on: print every host's non-zero counters (off)", OnOff(&counters)},
      {"csv", "write PREFIX.samples.csv and PREFIX.flows.csv", [&](const std::string& v) { csv = v; return !v.empty(); }},
  };
  if (const int status = droce::ns3glue::ParseOptions(argc, argv, "droce-ns3-incast", options); status >= 0) {
    return status;
  }
  cfg.line_rate_bps = static_cast<uint64_t>(rate_gbps * 1e9);
  cfg.max_ns = static_cast<uint64_t>(max_ms * 1e6);
  cfg.int_stamp_auto = int_mode == "auto";
  cfg.port.int_stamp = int_mode == "on";

  const droce::ns3glue::IncastResult r = droce::ns3glue::RunIncast(cfg);
  if (!r.error.empty()) {
    std::fprintf(stderr, "droce-ns3-incast: %s\n", r.error.c_str());
    return 1;
  }
  std::cout << droce::ns3glue::Summary(cfg, r) << std::endl;
  if (counters) {
    for (size_t h = 0; h < r.host_counters.size(); ++h) {
      std::cout << (h + 1 < r.host_counters.size() ? "sender " : "receiver ") << h << ": " << r.host_counters[h] << '\n';
    }
  }
  if (!csv.empty()) {
    std::ofstream samples(csv + ".samples.csv"), flows(csv + ".flows.csv");
    droce::ns3glue::WriteSamplesCsv(r, samples);
    droce::ns3glue::WriteFlowsCsv(r, flows);
    if (!samples || !flows) {
      std::fprintf(stderr, "droce-ns3-incast: cannot write %s.*.csv\n", csv.c_str());
      return 1;
    }
  }
  return r.all_done ? 0 : 3;
}
