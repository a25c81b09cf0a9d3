// The verbs runtime (runtime.h): one per open device in a process. This
// file starts and stops it: the registry of open devices, EAL and the port
// (none on the fabric: a DaemonLink to droced), the device, the progress
// thread's start; the other jobs have files of their own: fabric_link.cc,
// progress.cc, events.cc, doorbell.cc, stats.cc.
#include "drivers/verbs/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/memif_listener.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/ethdev/prefault.h"
#include "drivers/ethdev/unmap_guard.h"
#include "drivers/verbs/abi.h"
#include "drivers/fabric/protocol.h"
#include "drivers/verbs/thread_pause.h"
#include "drivers/verbs/tsc_clock.h"
#include "transport/sr/selective_repeat.h"

namespace droce::verbs {

constinit TscClock g_clock;

namespace {
std::mutex g_registry_mu;
std::map<std::string, Runtime*>& Registry() {
  static auto* m = new std::map<std::string, Runtime*>;
  return *m;
}

// A memif server whose process died leaves its socket file behind, and the
// next server then fails with EADDRINUSE. Remove it only if nobody listens.
void RemoveStaleMemifSocket(const std::string& vdev) {
  if (vdev.rfind("net_memif", 0) != 0 || vdev.find("role=server") == std::string::npos) return;
  const size_t at = vdev.find("socket=");
  if (at == std::string::npos) return;
  const std::string path = vdev.substr(at + 7, vdev.find(',', at) - (at + 7));
  if (path.empty() || path[0] != '/' || path.size() >= sizeof(sockaddr_un::sun_path)) return;
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED) {
    unlink(path.c_str());
  }
  close(fd);
}

// A fabric device's frame buffers (its DaemonLink's pool): the loopback ring
// (1024 frames) and the bursts in flight. Pages are touched only as buffers
// are used (pktio::FramePool).
constexpr uint32_t kFabricLinkBuffers = 2047;

}  // namespace

// A program that exits without closing its device (perftest on an error)
// still reports its counters under DROCE_STATS=1.
struct ExitReporter {
  ~ExitReporter() {
    const char* env = std::getenv("DROCE_STATS");
    if (env == nullptr || *env != '1') return;
    std::lock_guard<std::mutex> lock(g_registry_mu);
    for (auto& [name, rt] : Registry()) rt->ReportAtExit();
  }
} g_exit_reporter;

void Runtime::ReportAtExit() {
  // The progress thread still runs during exit and may hold the device for
  // a poll round: retry rather than skip the report (a single try_lock lost
  // it in CI). Bounded, in case exit() was called by a thread holding it.
  const uint64_t until = NowNs() + 500'000'000;
  while (!mu.try_lock()) {
    if (NowNs() > until) return;
    SleepUs(100);
  }
  PrintStats();
  Unlock();
}

absl::StatusOr<Runtime*> Runtime::Acquire(const DeviceFile& f) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = Registry().find(f.name);
  if (it != Registry().end()) {
    ++it->second->refs_;
    return it->second;
  }
  auto* rt = new Runtime(f);
  absl::Status s = rt->Start();
  if (!s.ok()) {
    if (rt->fabric_fd_ >= 0) close(rt->fabric_fd_);
    delete rt;
    return absl::Status(s.code(), absl::StrCat(f.name, ": ", s.message()));
  }
  rt->refs_ = 1;
  Registry()[f.name] = rt;
  return rt;
}

void Runtime::Release(Runtime* rt) {
  if (rt == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    if (--rt->refs_ > 0) return;
    Registry().erase(rt->file_.name);
  }
  rt->Stop();
  delete rt;
}

absl::Status Runtime::Start() {
  if (file_.fabric) {
    link_ = std::make_unique<ethdev::DaemonLink>(kFabricLinkBuffers);
    absl::Status s = AttachFabric(0);
    if (!s.ok()) return s;
    link_up_ = true;
  } else {
    absl::Status s = OpenWirePort();
    if (!s.ok()) return s;
  }
  pktio::BurstIo* wire = link_ ? static_cast<pktio::BurstIo*>(link_.get()) : port_.get();
  if (file_.fabric) {
    direct_ = std::make_unique<ethdev::DirectIo>(wire, file_.dev.mac, file_.dev.qpn_base, file_.dev.max_qp, NowNs);
    direct_->AllowLending(file_.direct_lend);
  }
  pktio::BurstIo* io = direct_ ? static_cast<pktio::BurstIo*>(direct_.get()) : wire;
  if (udp_fd_ >= 0) {
    // Frames to other hosts leave through the process's own socket, from
    // its port (the ICRC covers the UDP header the kernel writes).
    file_.dev.udp_source_port = udp_port_;
    udp_ = std::make_unique<udp::UdpIo>(io, udp_fd_, udp_port_, file_.dev.mac);
    udp_fd_ = -1;  // the UdpIo's now
    udp_->set_gso(file_.udp_gso);
    udp_->set_gather(file_.udp_gather);
    // Frames to another droce device of this droced (its MAC, which droced
    // answers for such a destination) stay on the host: droced switches them.
    // The devices registered when the program starts; one added later is
    // reached through the socket, where the kernel routes by its address.
    for (const std::string& other : ListDevices(file_.fabric_dir)) {
      if (other == file_.name) continue;
      absl::StatusOr<DeviceFile> f = ReadDevice(file_.fabric_dir, other);
      if (f.ok()) udp_->AddHostMac(f->dev.mac);
    }
    io = udp_.get();
  }
  io_ = io;
  dev_ = std::make_unique<core::Device>(file_.dev, io);
  if (has_netdev_state_) ApplyNetdevState(first_netdev_state_, /*events=*/false);
  if (file_.fabric) dev_->loopback().SetOwnQpns(dev_->qpn_base(), dev_->config().max_qp);
  if (link_up_) PrefaultWire();
  if (file_.progress.wakeup) {
    std::string why_not;
    wakeup_ = link_ ? link_->MakeWakeup() : ethdev::RxWakeup::For(port_->port_id(), &why_not);
    if (wakeup_ == nullptr && std::getenv("DROCE_DEBUG") != nullptr) {
      std::fprintf(stderr, "droce %s: no wake-up on arrival (%s)\n", file_.name.c_str(), why_not.c_str());
    }
    ProbeThroughWakeupLocked();
  }
  for (const auto& [gid, mac] : file_.neighbors) dev_->AddNeighbor(gid, mac);
  event_socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (event_socket_ < 0) return absl::UnavailableError("cannot create the event socket");
  // The progress thread starts with every signal blocked but the faults
  // (FillBlockableSignals: its bursts run under the unmap guard): the
  // program's handlers run in the program's threads (a blocked waiter in
  // WaitForChannel finds a process-directed signal pending and returns
  // EINTR, as its read() would).
  sigset_t all, old_mask;
  ethdev::FillBlockableSignals(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old_mask);
  progress_ = std::thread([this] { ProgressLoop(); });
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return absl::OkStatus();
}

// A wire device's dataplane port: EAL started (or the vdev hot-plugged into
// a running one) and the port opened.
absl::Status Runtime::OpenWirePort() {
  RemoveStaleMemifSocket(file_.vdev);
  if (!ethdev::EalStarted()) {
    ethdev::EalConfig eal;
    eal.file_prefix = absl::StrCat("droce-", file_.name, "-", getpid());
    eal.memory_mb = file_.eal_memory_mb;
    eal.vdevs = {file_.vdev};
    eal.extra_args = file_.eal_args;
    absl::Status s = ethdev::StartEal(eal);
    if (!s.ok()) return s;
  } else {
    absl::Status s = ethdev::ProbeVdev(file_.vdev);
    if (!s.ok()) return s;
  }
  memif_client_ = file_.vdev.rfind("net_memif", 0) == 0 && file_.vdev.find("role=client") != std::string::npos;
  ethdev::PortConfig pc;
  pc.name = file_.port_name();
  pc.start_may_fail = memif_client_;
  pc.guard_peer_unmap = file_.vdev.rfind("net_memif", 0) == 0;
  // Frames built in the port's own buffers and copied straight into the
  // memif ring (MemifTx); a zero-copy vdev's buffers are mbufs in the ring.
  pc.memif_direct_tx =
      file_.memif_direct_tx && pc.guard_peer_unmap && file_.vdev.find("zero-copy=yes") == std::string::npos;
  pc.memif_direct_rx = file_.memif_direct_rx;
  pc.memif_listener_path = ethdev::MemifListenerPath(file_.vdev);
  absl::StatusOr<std::unique_ptr<ethdev::EthdevPort>> port = ethdev::EthdevPort::Open(pc);
  if (!port.ok()) return port.status();
  port_ = std::move(*port);
  next_reconnect_ns_ = NowNs() + 100'000'000;
  attempt_ns_ = NowNs();
  link_up_ = port_->RefreshLink();
  return absl::OkStatus();
}

void Runtime::Stop() {
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  {
    std::lock_guard<DeviceMutex> lock(mu);
    // Let what is queued leave (e.g. a final ACK) before the port goes.
    const uint64_t until = NowNs() + 20'000'000;
    while (NowNs() < until && dev_->Poll(NowNs()) > 0) {
    }
    if (const char* env = std::getenv("DROCE_STATS"); env != nullptr && *env == '1') PrintStats();
    dev_.reset();
    udp_.reset();     // its buffers go back to the port's pool
    direct_.reset();  // unmaps the rings
    io_ = nullptr;
    if (port_) port_->set_rx_probe(nullptr);
    wakeup_.reset();  // before the link it looks at
    link_.reset();    // unmaps the link's rings (droced keeps its own mapping until the connection closes)
    if (port_) StopWirePort();
  }
  if (event_socket_ >= 0) close(event_socket_);
  if (udp_fd_ >= 0) close(udp_fd_);
  // After the memif interface went: the daemon then frees it and our QPNs.
  if (fabric_fd_ >= 0) close(fabric_fd_);
}

// A program may open the device again (qperf does per test): the vdev
// must go too, or probing it again fails. Removing it closes the port.
// A peer that exits as we do closes its memif socket, and DPDK's interrupt
// thread then tears the connection down (memif_disconnect) while our close
// would do the same: two teardowns at once fault in 22.11 (seen:
// rte_dev_remove -> memif close, SIGSEGV, the interrupt thread inside its
// own disconnect). The port is stopped and closed on that thread, in turn
// (EthdevPort::Stop; test BothEndsOfAMemifClosingAtOnceDoNotRace); the vdev
// removal then finds the port closed. The pauses stay as margin.
void Runtime::StopWirePort() {
  const bool memif = file_.vdev.rfind("net_memif", 0) == 0;
  if (memif && !port_->LinkUp()) usleep(30'000);
  port_->Stop(/*close=*/true);
  (void)ethdev::RemoveVdev(file_.port_name());
  // A peer that left during our close: the interrupt thread's disconnect
  // frees the interface's mbufs into our pools, so the pools go only after
  // it has had time to finish (seen in CI: ~EthdevPort's rte_mempool_free
  // while the interrupt thread was inside memif, SIGSEGV at exit).
  if (memif) usleep(30'000);
  port_.reset();
}

// The memif regions are mapped once the link is up: their page tables are
// filled now, not one fault per page on the first pass over the rings
// (ethdev/prefault.h).
void Runtime::PrefaultWire() {
  if (!port_ || file_.vdev.rfind("net_memif", 0) != 0) return;
  wire_prefaulted_bytes_ = ethdev::PrefaultSharedMappings(ethdev::kMemifRegionName);
}

}  // namespace droce::verbs
