// DPDK EAL start-up for droce: from an application or lazily from inside a
// library (the verbs provider). Builds the EAL argument list from a config,
// never enables what the user did not ask for (no PCI scan for virtual ports,
// no telemetry thread), and gives the calling thread its CPU affinity back
// (EAL pins the main thread to its first lcore).
#ifndef DROCE_DRIVERS_ETHDEV_EAL_H_
#define DROCE_DRIVERS_ETHDEV_EAL_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace droce::ethdev {

struct EalConfig {
  std::string file_prefix = "droce";  // distinct per process sharing the machine
  bool hugepages = false;             // false: --no-huge -m memory_mb
  unsigned memory_mb = 512;
  bool pci = false;                   // false: --no-pci (virtual ports only)
  std::vector<std::string> vdevs;     // e.g. "net_memif0,role=server,socket=/tmp/m.sock,bsize=10240"
  std::string log_level = "error";
  std::vector<std::string> extra_args;  // passed through verbatim
};

// Starts EAL once per process (later calls with any config return OK).
absl::Status StartEal(const EalConfig& config);
// Starts EAL with arguments as a DPDK application received them
// (argv[0] first); returns how many were consumed, like rte_eal_init.
absl::Status StartEalFromArgs(int argc, char** argv, int* consumed);
// Adds a virtual device to a running EAL (a second droce device in a process).
absl::Status ProbeVdev(const std::string& vdev);
// Removes a virtual device (after its port was closed) so it can be probed again.
absl::Status RemoveVdev(const std::string& name);
bool EalStarted();
// EAL is never stopped: it is left to the process exit. rte_eal_cleanup
// (DPDK 22.11) unmaps DPDK's memory while EAL's interrupt thread still runs,
// and interrupt sources that memif leaves registered (memif_listener.h) have
// their handles in that memory: the thread faulted on them at exit
// (SIGSEGV in rte_intr_fd_get). This process's runtime directory is removed
// at exit all the same.
// Gives the calling thread (not one EAL started) an lcore id, so that DPDK's
// per-lcore mempool caches serve it: without one every mbuf allocation and
// free goes through the pool's shared ring, which is FIFO, so every mbuf is
// cold. False if EAL has no lcore id left (the thread still works, slower).
// A registered thread calls UnregisterThread() before it ends.
bool RegisterThread();
void UnregisterThread();
// Runs fn(arg) on EAL's interrupt thread and waits for it. memif handles
// its connection's events there (the peer's messages, its disconnect, the
// client's connect); a port stop or start from another thread runs the same
// teardown at the same time, and DPDK 22.11 then frees and uses the control
// channel at once (SIGSEGV in memif_msg_enq). Run there, they take turns.
// Falls back to calling fn on this thread when EAL cannot schedule it, or
// when it did not start within timeout_ms (the interrupt thread stuck).
void RunOnInterruptThread(void (*fn)(void*), void* arg, int timeout_ms = 5000);

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_EAL_H_
