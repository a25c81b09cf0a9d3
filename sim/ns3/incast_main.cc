// droce-ns3-incast: N senders -> one switch port -> one receiver in ns-3,
// every host running droce's transport with cc= (sim/ns3/incast.h). Prints
// one key=value summary line; --csv PREFIX writes PREFIX.samples.csv (queue
// and each flow's rate, window and goodput over time) and PREFIX.flows.csv.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <string>

#include "sim/ns3/incast.h"

namespace {

using droce::ns3glue::IncastConfig;

struct Option {
  const char* name;
  const char* help;
  std::function<bool(const std::string&)> set;
};

bool ParseU64(const std::string& v, uint64_t* out) {
  if (v.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v[0] == '-') return false;
  *out = x;
  return true;
}

bool ParseDouble(const std::string& v, double* out) {
  char* end = nullptr;
  *out = std::strtod(v.c_str(), &end);
  return !v.empty() && *end == '\0';
}

template <typename T>
std::function<bool(const std::string&)> U(T* field) {
  return [field](const std::string& v) {
    uint64_t x;
    if (!ParseU64(v, &x) || x > std::numeric_limits<T>::max()) return false;
    *field = static_cast<T>(x);
    return true;
  };
}

}  // namespace

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
      {"counters", "on: print every host's non-zero counters (off)", [&](const std::string& v) { counters = v == "on"; return v == "on" || v == "off"; }},
      {"csv", "write PREFIX.samples.csv and PREFIX.flows.csv", [&](const std::string& v) { csv = v; return !v.empty(); }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("usage: droce-ns3-incast [--option value | --option=value] ...\n");
      for (const Option& o : options) std::printf("  --%-10s %s\n", o.name, o.help);
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "droce-ns3-incast: unexpected argument '%s' (--help)\n", arg.c_str());
      return 2;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "droce-ns3-incast: --%s needs a value\n", name.c_str());
      return 2;
    }
    const Option* o = nullptr;
    for (const Option& c : options) o = name == c.name ? &c : o;
    if (o == nullptr) {
      std::fprintf(stderr, "droce-ns3-incast: unknown option --%s (--help)\n", name.c_str());
      return 2;
    }
    if (!o->set(value)) {
      std::fprintf(stderr, "droce-ns3-incast: bad value '%s' for --%s: %s\n", value.c_str(), name.c_str(), o->help);
      return 2;
    }
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
