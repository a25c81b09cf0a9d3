// droce-ns3-fabric: a leaf-spine fabric in ns-3 under a datacenter workload
// (WebSearch or FB_Hadoop flow sizes, Poisson arrivals at a given load),
// every host running droce's transport with cc= (sim/ns3/fabric.h). Prints
// one key=value summary line; --csv PREFIX writes PREFIX.flows.csv (each
// flow's FCT, ideal FCT and slowdown) and PREFIX.queue.csv (each port class's
// time-weighted queue-length CDF).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "sim/ns3/fabric.h"
#include "sim/ns3/options.h"

using droce::ns3glue::FabricConfig;
using droce::ns3glue::FlowSizeCdf;
using droce::ns3glue::OnOff;
using droce::ns3glue::Option;
using droce::ns3glue::ParseDouble;
using droce::ns3glue::U;
using droce::ns3glue::WorkloadConfig;

int main(int argc, char** argv) {
  FabricConfig cfg;
  WorkloadConfig wl;
  std::string workload = "websearch", csv, int_mode = "auto";
  double host_gbps = 100, spine_gbps = 400, duration_ms = 1, max_ms = 100;
  const Option options[] = {
      {"leaves", "leaf switches (8)", U(&cfg.leaves)},
      {"hosts-per-leaf", "hosts under each leaf (16)", U(&cfg.hosts_per_leaf)},
      {"spines", "spine switches, each linked to every leaf (4)", U(&cfg.spines)},
      {"host-gbps", "host links' rate (100)", [&](const std::string& v) { return ParseDouble(v, &host_gbps) && host_gbps > 0; }},
      {"spine-gbps", "leaf-spine links' rate (400)", [&](const std::string& v) { return ParseDouble(v, &spine_gbps) && spine_gbps > 0; }},
      {"delay-ns", "each link's propagation delay (1000)", U(&cfg.link_delay_ns)},
      {"cc", "every host's cc=: dcqcn|timely|hpcc|swift|none (dcqcn)", [&](const std::string& v) { cfg.cc = v; return true; }},
      {"cc-params", "every host's cc_params=, \"name=value ...\"", [&](const std::string& v) { cfg.cc_params = v; return true; }},
      {"workload", "websearch|fb_hadoop|FILE of 'bytes fraction' lines (websearch)", [&](const std::string& v) { workload = v; return true; }},
      {"load", "offered load, fraction of every host's line rate (0.3)", [&](const std::string& v) { return ParseDouble(v, &wl.load) && wl.load > 0 && wl.load <= 1; }},
      {"duration-ms", "flows arrive during this much simulated time (1)", [&](const std::string& v) { return ParseDouble(v, &duration_ms) && duration_ms > 0; }},
      {"max-ms", "simulated time limit (100)", [&](const std::string& v) { return ParseDouble(v, &max_ms) && max_ms > 0; }},
      {"seed", "the workload's and the ports' seed (1)", [&](const std::string& v) { uint64_t s; if (!droce::ns3glue::ParseU64(v, &s)) return false; wl.seed = cfg.seed = s; return true; }},
      {"mtu", "path MTU (1024)", U(&cfg.mtu)},
      {"msg-bytes", "bytes per WRITE (65536)", U(&cfg.msg_bytes)},
      {"depth", "WRITEs outstanding per flow (16)", U(&cfg.depth)},
      {"kmin", "ECN Kmin per 100 Gb/s of a port's rate, bytes (400000)", U(&cfg.kmin_per_100g)},
      {"kmax", "ECN Kmax per 100 Gb/s of a port's rate, bytes (1600000)", U(&cfg.kmax_per_100g)},
      {"pmax", "ECN marking probability at Kmax (0.2)", [&](const std::string& v) { return ParseDouble(v, &cfg.pmax) && cfg.pmax >= 0 && cfg.pmax <= 1; }},
      {"ecn", "on|off (on)", OnOff(&cfg.ecn)},
      {"mark", "enqueue|dequeue (enqueue)", [&](const std::string& v) { cfg.mark_at_dequeue = v == "dequeue"; return v == "enqueue" || v == "dequeue"; }},
      {"buffer", "every port's buffer in bytes, 0 unlimited (0)", U(&cfg.buffer_bytes)},
      {"int", "auto (with hpcc)|on|off (auto)", [&](const std::string& v) { int_mode = v; return v == "auto" || v == "on" || v == "off"; }},
      {"pfc", "on|off: PFC at every switch ingress (off)", OnOff(&cfg.pfc)},
      {"pfc-xoff", "PFC: pause an ingress above this many bytes queued (500000)", U(&cfg.pfc_xoff_bytes)},
      {"pfc-xon", "PFC: resume it at this many (250000)", U(&cfg.pfc_xon_bytes)},
      {"poll-ns", "a busy host's poll period (50)", U(&cfg.poll_ns)},
      {"csv", "write PREFIX.flows.csv and PREFIX.queue.csv", [&](const std::string& v) { csv = v; return !v.empty(); }},
  };
  if (const int status = droce::ns3glue::ParseOptions(argc, argv, "droce-ns3-fabric", options); status >= 0) {
    return status;
  }
  cfg.host_rate_bps = static_cast<uint64_t>(host_gbps * 1e9);
  cfg.spine_rate_bps = static_cast<uint64_t>(spine_gbps * 1e9);
  cfg.max_ns = static_cast<uint64_t>(max_ms * 1e6);
  cfg.int_stamp_auto = int_mode == "auto";
  cfg.int_stamp = int_mode == "on";

  FlowSizeCdf sizes;
  std::string error;
  if (!FlowSizeCdf::Load(workload, &sizes, &error)) {
    std::fprintf(stderr, "droce-ns3-fabric: %s\n", error.c_str());
    return 2;
  }
  wl.hosts = cfg.leaves * cfg.hosts_per_leaf;
  wl.host_rate_bps = cfg.host_rate_bps;
  wl.duration_ns = static_cast<uint64_t>(duration_ms * 1e6);
  cfg.queue_until_ns = wl.duration_ns;
  cfg.flows = droce::ns3glue::PoissonFlows(wl, sizes);

  const droce::ns3glue::FabricResult r = droce::ns3glue::RunFabric(cfg);
  if (!r.error.empty()) {
    std::fprintf(stderr, "droce-ns3-fabric: %s\n", r.error.c_str());
    return 1;
  }
  std::cout << "workload=" << workload << " load=" << wl.load << " duration_ms=" << duration_ms
            << " mean_flow_bytes=" << static_cast<uint64_t>(sizes.MeanBytes()) << ' '
            << droce::ns3glue::FabricSummary(cfg, r) << std::endl;
  if (!csv.empty()) {
    std::ofstream flows(csv + ".flows.csv"), queue(csv + ".queue.csv");
    droce::ns3glue::WriteFabricFlowsCsv(r, flows);
    droce::ns3glue::WriteQueueCdfCsv(r, queue);
    if (!flows || !queue) {
      std::fprintf(stderr, "droce-ns3-fabric: cannot write %s.*.csv\n", csv.c_str());
      return 1;
    }
  }
  return r.all_done ? 0 : 3;
}
