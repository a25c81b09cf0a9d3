#include "drivers/ethdev/eal.h"

#include <pthread.h>
#include <semaphore.h>
#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>

#include <rte_alarm.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include "absl/strings/str_format.h"
#include "drivers/ethdev/runtime_dir.h"
#include "drivers/ethdev/unmap_guard.h"

namespace droce::ethdev {
namespace {

std::mutex g_mu;
bool g_started = false;

// The --file-prefix among EAL arguments ("rte" when none is given).
std::string FilePrefix(const std::vector<std::string>& args) {
  std::string prefix = "rte";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--file-prefix=", 0) == 0) prefix = args[i].substr(14);
    if (args[i] == "--file-prefix" && i + 1 < args.size()) prefix = args[i + 1];
  }
  return prefix;
}

// This process's runtime directory, removed at exit (runtime_dir.h).
std::string* g_own_runtime_dir = nullptr;
void RemoveOwnRuntimeDir() {
  if (g_own_runtime_dir != nullptr) RemoveRuntimeDir(*g_own_runtime_dir);
}

absl::Status InitWithAffinityRestored(std::vector<std::string> args, int* consumed) {
  // droce's prefixes are per process: clear what earlier ones left behind
  // (runtime_dir.h). A minute's margin for processes still starting.
  const bool droce_prefix = IsDroceRuntimeDirName(FilePrefix(args));
  if (droce_prefix) RemoveStaleRuntimeDirs(DpdkRuntimeBase(), 60);
  cpu_set_t before;
  const bool have_affinity = sched_getaffinity(0, sizeof before, &before) == 0;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // EAL's threads (interrupts, multi-process) inherit this mask: with every
  // signal blocked they never run the program's handlers, which belong to
  // its own threads (a SIGALRM meant to interrupt a blocking verb would
  // otherwise be delivered to DPDK's interrupt thread). Faults stay
  // unblocked (FillBlockableSignals).
  sigset_t all, old_mask;
  FillBlockableSignals(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old_mask);
  const int ret = rte_eal_init(static_cast<int>(args.size()), argv.data());
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (have_affinity) sched_setaffinity(0, sizeof before, &before);
  if (ret < 0) {
    return absl::UnavailableError(absl::StrFormat("DPDK EAL initialisation failed: %s", rte_strerror(rte_errno)));
  }
  if (consumed) *consumed = ret;
  g_started = true;
  if (droce_prefix && g_own_runtime_dir == nullptr) {
    g_own_runtime_dir = new std::string(rte_eal_get_runtime_dir());
    std::atexit(RemoveOwnRuntimeDir);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status StartEal(const EalConfig& c) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_started) return absl::OkStatus();
  if (c.file_prefix.empty()) return absl::InvalidArgumentError("EAL file prefix must not be empty");
  std::vector<std::string> args = {"droce", "--file-prefix=" + c.file_prefix, "--no-telemetry",
                                   "--log-level=" + c.log_level};
  if (!c.hugepages) {
    args.push_back("--no-huge");
    args.push_back("-m");
    args.push_back(std::to_string(c.memory_mb));
  }
  if (!c.pci) args.push_back("--no-pci");
  for (const std::string& v : c.vdevs) args.push_back("--vdev=" + v);
  bool lcores_given = false;
  for (const std::string& a : c.extra_args) {
    lcores_given |= a == "-l" || a.rfind("--lcores", 0) == 0 || a == "-c";
    args.push_back(a);
  }
  if (!lcores_given) {
    // One lcore, the CPU we run on: no worker threads the caller did not ask for.
    const int cpu = sched_getcpu();
    args.push_back("-l");
    args.push_back(std::to_string(cpu < 0 ? 0 : cpu));
  }
  return InitWithAffinityRestored(std::move(args), nullptr);
}

absl::Status StartEalFromArgs(int argc, char** argv, int* consumed) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_started) return absl::FailedPreconditionError("EAL already started");
  std::vector<std::string> args(argv, argv + argc);
  return InitWithAffinityRestored(std::move(args), consumed);
}

absl::Status ProbeVdev(const std::string& vdev) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_started) return absl::FailedPreconditionError("EAL not started");
  // Every vdev probed here is an Ethernet port. With all port ids taken
  // the probe fails late, inside the PMD, as EIO ("Reached maximum number
  // of Ethernet ports" in DPDK's log only): say so. RTE_MAX_ETHPORTS is a
  // build setting of DPDK (32 in Debian's 22.11).
  if (rte_eth_dev_count_total() >= RTE_MAX_ETHPORTS) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "all %d Ethernet ports of DPDK (RTE_MAX_ETHPORTS) are in use: cannot probe %s", RTE_MAX_ETHPORTS, vdev));
  }
  const int ret = rte_dev_probe(vdev.c_str());
  if (ret < 0) {
    return absl::UnavailableError(absl::StrFormat("probing %s failed: %s", vdev, rte_strerror(-ret)));
  }
  return absl::OkStatus();
}

absl::Status RemoveVdev(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_started) return absl::FailedPreconditionError("EAL not started");
  const int ret = rte_eal_hotplug_remove("vdev", name.c_str());
  if (ret < 0) {
    return absl::UnavailableError(absl::StrFormat("removing %s failed: %s", name, rte_strerror(-ret)));
  }
  return absl::OkStatus();
}

bool EalStarted() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_started;
}

bool RegisterThread() {
  if (rte_lcore_id() != LCORE_ID_ANY) return true;  // an EAL thread, or registered already
  return rte_thread_register() == 0;
}

void UnregisterThread() { rte_thread_unregister(); }

namespace {
struct InterruptJob {
  void (*fn)(void*);
  void* arg;
  sem_t done;
};
void RunInterruptJob(void* p) {
  auto* job = static_cast<InterruptJob*>(p);
  job->fn(job->arg);
  sem_post(&job->done);
}
}  // namespace

void RunOnInterruptThread(void (*fn)(void*), void* arg, int timeout_ms) {
  InterruptJob job{fn, arg, {}};
  sem_init(&job.done, 0, 0);
  if (!EalStarted() || rte_eal_alarm_set(1, RunInterruptJob, &job) != 0) {
    sem_destroy(&job.done);
    fn(arg);
    return;
  }
  timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += static_cast<long>(timeout_ms % 1000) * 1000000;
  if (deadline.tv_nsec >= 1000000000) {
    deadline.tv_nsec -= 1000000000;
    ++deadline.tv_sec;
  }
  while (sem_timedwait(&job.done, &deadline) != 0) {
    if (errno == EINTR) continue;
    // Not run yet: take it back (rte_eal_alarm_cancel waits for a job that
    // has begun) and run it here; begun meanwhile: it has finished now.
    if (rte_eal_alarm_cancel(RunInterruptJob, &job) > 0) fn(arg);
    else sem_wait(&job.done);
    break;
  }
  sem_destroy(&job.done);
}

}  // namespace droce::ethdev
