#include "apps/droced/options.h"

#include "absl/strings/str_split.h"
#include "apps/common/option_table.h"
#include "pktio/frame_ring.h"

namespace droce::droced {
namespace {

using OptionSpec = apps::OptionSpec<DaemonOptions>;

absl::Status RingSlots(const std::string& name, const std::string& v, uint32_t* out) {
  uint32_t slots = 0;
  if (absl::Status s = apps::Integer(name, v, 2, 65536, &slots); !s.ok()) return s;
  if (!pktio::FrameRing::ValidGeometry(slots, pktio::FrameRing::kDefaultSlotBytes)) {
    return apps::BadOption(name + ": a power of two, 2..65536, not '" + v + "'");
  }
  *out = slots;
  return absl::OkStatus();
}

absl::Status Uplink(const std::string& name, const std::string& v, DaemonOptions& o) {
  absl::StatusOr<UplinkSpec> u = ParseUplinkSpec(v);
  if (!u.ok()) return apps::BadOption(name + ": " + std::string(u.status().message()));
  o.uplink = *u;
  return absl::OkStatus();
}

const std::vector<OptionSpec>& Table() {
  static const std::vector<OptionSpec> table = {
      {"--run-dir", nullptr, "DIR", "the run directory this daemon serves ($DROCE_RUN_DIR, else the\nnetwork "
       "namespace's default)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) {
         if (v.empty()) return apps::BadOption(k + " must not be empty");
         o.run_dir = v;
         return absl::OkStatus();
       }},
      {"--foreground", nullptr, nullptr, "do not detach; log to stderr",
       [](DaemonOptions& o, const std::string&, const std::string&) {
         o.foreground = true;
         return absl::OkStatus();
       }},
      {"--memory-mb", nullptr, "N", "DPDK memory in MiB, 64..65536 (256)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) {
         return apps::Integer(k, v, kMemoryMbMin, kMemoryMbMax, &o.memory_mb);
       }},
      {"--busy-poll", nullptr, nullptr, "never sleep (a core of its own: benchmarks)",
       [](DaemonOptions& o, const std::string&, const std::string&) {
         o.busy_poll = true;
         return absl::OkStatus();
       }},
      {"--busy-window-us", nullptr, "N",
       "spin N us after the last frame before sleeping, 0..1000000\n($DROCED_BUSY_WINDOW_US; 0)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) {
         return apps::Integer(k, v, 0, 1000000, &o.busy_window_us);
       }},
      {"--no-realtime", nullptr, nullptr, "leave the poll loop at SCHED_OTHER (doc/droced.md)",
       [](DaemonOptions& o, const std::string&, const std::string&) {
         o.realtime = false;
         return absl::OkStatus();
       }},
      {"--no-direct", nullptr, nullptr, "switch every frame; no direct rings between processes\n"
       "($DROCED_DIRECT=0)",
       [](DaemonOptions& o, const std::string&, const std::string&) {
         o.direct = false;
         return absl::OkStatus();
       }},
      {"--ring-slots", nullptr, "N", "slots per direction of a direct path, a power of two\n($DROCED_RING_SLOTS; 64)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) { return RingSlots(k, v, &o.ring_slots); }},
      {"--link-slots", nullptr, "N", "slots per direction of a process's ring link, a power of two\n(512)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) { return RingSlots(k, v, &o.link_slots); }},
      {"--uplink", nullptr, "SPEC",
       "memif:SOCKET:server|client | vdev:NAME[,ARGS] | pci:DDDD:BB:DD.F[,ARGS]\n($DROCED_UPLINK; none)",
       [](DaemonOptions& o, const std::string& k, const std::string& v) { return Uplink(k, v, o); }},
      {"--hugepages", nullptr, nullptr, "DPDK memory from hugepages (a real NIC as the uplink)",
       [](DaemonOptions& o, const std::string&, const std::string&) {
         o.hugepages = true;
         return absl::OkStatus();
       }},
      {"--eal", nullptr, "\"ARGS\"", "further EAL options for the uplink's PMD, space-separated",
       [](DaemonOptions& o, const std::string&, const std::string& v) {
         for (absl::string_view w : absl::StrSplit(v, ' ', absl::SkipEmpty())) o.eal_args.emplace_back(w);
         return absl::OkStatus();
       }},
  };
  return table;
}

// The environment's defaults, checked as the options they stand for.
absl::Status ApplyEnvironment(const EnvLookup& env, DaemonOptions& o) {
  if (const char* v = env("DROCED_BUSY_WINDOW_US"); v != nullptr) {
    if (absl::Status s = apps::Integer("DROCED_BUSY_WINDOW_US", v, 0, 1000000, &o.busy_window_us); !s.ok()) return s;
  }
  if (const char* v = env("DROCED_DIRECT"); v != nullptr) {
    const std::string d = v;
    if (d != "0" && d != "1") return apps::BadOption("DROCED_DIRECT must be 0 or 1, not '" + d + "'");
    o.direct = d == "1";
  }
  if (const char* v = env("DROCED_RING_SLOTS"); v != nullptr) {
    if (absl::Status s = RingSlots("DROCED_RING_SLOTS", v, &o.ring_slots); !s.ok()) return s;
  }
  if (const char* v = env("DROCED_UPLINK"); v != nullptr && *v != '\0') {
    if (absl::Status s = Uplink("DROCED_UPLINK", v, o); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

std::string DaemonUsage() { return "usage: droced [options]\n" + apps::FormatUsage(Table()); }

bool DaemonWantsHelp(const std::vector<std::string>& args) { return apps::WantsHelp(args); }

absl::StatusOr<DaemonOptions> ParseDaemonOptions(const std::vector<std::string>& args, std::string default_run_dir,
                                                 const EnvLookup& env) {
  DaemonOptions o;
  o.run_dir = std::move(default_run_dir);
  if (absl::Status s = ApplyEnvironment(env, o); !s.ok()) return s;
  absl::StatusOr<std::vector<apps::GivenOption<DaemonOptions>>> given =
      apps::SplitOptions(Table(), args, "droced --help lists the options");
  if (!given.ok()) return given.status();
  if (absl::Status s = apps::ApplyOptions(*given, o); !s.ok()) return s;
  return o;
}

}  // namespace droce::droced
