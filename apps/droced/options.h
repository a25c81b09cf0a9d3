// droced's command line: one table (apps/common/option_table.h), each entry an
// option's name, its value's name, its help and how it sets DaemonOptions.
// Four environment variables give defaults for a daemon droce-ctl starts
// (benchmarks, two run directories as two hosts); an option given on the
// command line wins. No DPDK here: the unit test parses without EAL.
#ifndef DROCE_APPS_DROCED_OPTIONS_H_
#define DROCE_APPS_DROCED_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "apps/droced/uplink_spec.h"

namespace droce::droced {

// --memory-mb's bounds (droce-ctl daemon start checks them too).
inline constexpr unsigned kMemoryMbMin = 64, kMemoryMbMax = 65536;

// Slots per direction of a direct path (--ring-slots): 64 of 4416 bytes,
// 276 KiB each way. The ring is cycled in order, so every slot of it passes
// through both CPUs' caches once per `slots` frames; with a rendezvous
// message's buffer beside it (the rank sends from and receives into it) a
// ring of 256 (1.1 MiB each way, two ways per CPU in a ping-pong) no longer
// fits a 2 MiB L2 beside it: a slot's lines have left L2 when it comes round
// again. 64 is still two of the receiver's 32-frame bursts, so producer and
// consumer overlap (at 32 they alternate).
// Measured in tools/bench/stacks/results.md (stacks21).
inline constexpr uint32_t kDefaultRingSlots = 64;

struct DaemonOptions {
  std::string run_dir;              // default: verbs::DefaultRunDir() (the caller's)
  bool foreground = false;          // stay in the foreground, log to stderr
  bool busy_poll = false;           // never sleep (a core of its own: benchmarks)
  uint32_t busy_window_us = 0;      // spin this long after the last frame before sleeping
  bool realtime = true;             // the poll loop at SCHED_FIFO priority 1 when allowed
  bool direct = true;               // direct rings between two processes' ports
  uint32_t ring_slots = kDefaultRingSlots;  // per direction of a direct path
  uint32_t link_slots = 512;        // per direction of a process's ring link to the daemon
  unsigned memory_mb = 256;         // DPDK memory (--no-huge -m)
  bool hugepages = false;           // a real NIC as the uplink: hugepages
  std::vector<std::string> eal_args;  // the uplink PMD's own EAL options
  std::optional<UplinkSpec> uplink;
};

// Reads an environment variable (nullptr: unset); tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// The usage text, generated from the table.
std::string DaemonUsage();

// True if `args` asks for the usage (-h or --help anywhere).
bool DaemonWantsHelp(const std::vector<std::string>& args);

// Parses droced's arguments (without argv[0]) over the defaults and the
// environment's (DROCED_BUSY_WINDOW_US, DROCED_DIRECT, DROCED_RING_SLOTS, DROCED_UPLINK). An
// error names the option or variable and why; the caller prints it and
// exits 2.
absl::StatusOr<DaemonOptions> ParseDaemonOptions(const std::vector<std::string>& args, std::string default_run_dir,
                                                 const EnvLookup& env);

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_OPTIONS_H_
