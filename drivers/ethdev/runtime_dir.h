// DPDK's per-process runtime directories (<base>/dpdk/<file prefix>).
//
// DPDK 22.11 leaves a process's runtime directory behind when the process
// ends: its shared config, the memzone and memseg arrays and its
// multi-process socket, ~3.5 MB with --no-huge. droce's file prefixes are
// per process ("droce-<device>-<pid>", so that any number of programs can
// open a device), so every verbs program left one: a day of this host's test
// runs left 19,000 of them, 72 GB, and filled the disk. A droce process
// therefore removes, when it starts EAL, the droce-* directories that no
// live process uses (a running DPDK primary holds a write lock on its
// "config" file), and its own when it exits.
#ifndef DROCE_DRIVERS_ETHDEV_RUNTIME_DIR_H_
#define DROCE_DRIVERS_ETHDEV_RUNTIME_DIR_H_

#include <string>

namespace droce::ethdev {

// Where DPDK puts runtime directories for this user: /var/run/dpdk for
// root, else $XDG_RUNTIME_DIR/dpdk or /tmp/dpdk (eal_create_runtime_dir).
std::string DpdkRuntimeBase();

// droce's file prefixes: "droce-..." (verbs programs, droce-testpmd, tests)
// and "droced-<hash of the run directory>" (the fabric daemon).
bool IsDroceRuntimeDirName(const std::string& name);

// Removes the directories under `base` with droce's names, that
// are at least min_age_s old (a process that is starting has not locked its
// config yet) and whose "config" no process holds a lock on (or that have
// none). Other names are never touched. Returns how many were removed.
int RemoveStaleRuntimeDirs(const std::string& base, int min_age_s);

// Removes one runtime directory and the files in it (not recursive: DPDK
// puts only files there). True if it is gone.
bool RemoveRuntimeDir(const std::string& dir);

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_RUNTIME_DIR_H_
