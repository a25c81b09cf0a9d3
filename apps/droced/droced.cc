// droced: the host fabric daemon of one droce run directory (doc/droced.md).
//
//   droced [options]   (droced --help; the table is options.cc)
//
// Every program that opens a fabric device of the run directory attaches
// here over the control socket (<run dir>/droced.sock) and gets a QPN range
// and its link to the switch: a pair of shared-memory rings (ring_ports.h),
// or for a DPDK application that asks, a memif interface on the daemon's
// memif socket (<run dir>/droced.memif.sock); the daemon switches frames
// between those links (QPN steering, ARP/ND answers, flooding) and never
// touches the transport.
// In the background (the default) it writes droced.pid and droced.log in the
// run directory; `droce-ctl daemon start|stop|status` drives it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <map>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/droced/cm_service.h"
#include "apps/droced/fabric_state.h"
#include "apps/droced/netdev_binder.h"
#include "apps/droced/options.h"
#include "apps/droced/ring_ports.h"
#include <rdma/rdma_user_cm.h>
#include "drivers/rdmacm/cm_protocol.h"
#include "apps/droced/uplink_spec.h"
#include "sim/switch/egress_port_io.h"
#include "drivers/ethdev/direct_io.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/ethdev/prefault.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "drivers/ethdev/unmap_guard.h"
#include "pktio/burst_io.h"
#include "wire/arp.h"
#include "wire/nd.h"
#include "wire/packet.h"
#include "wire/steer.h"
#include "wire/headers.h"
#include "apps/droced/clock.h"

namespace droce::droced {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }


// Control-path log lines (never per packet).
void Log(const char* fmt, ...) {
  char when[32];
  const time_t t = time(nullptr);
  tm tm_now;
  localtime_r(&t, &tm_now);
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm_now);
  std::fprintf(stderr, "%s droced: ", when);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

uint32_t Fnv(const std::string& s) {
  uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

// The scheduler time slice the poll loop asks for (EEVDF's sched_runtime,
// as the verbs progress thread does, doc/verbs.md): a switch that wakes from
// a short sleep must preempt the programs spinning on their CQs at once, not
// after their slice (milliseconds on a 2-core machine: every frame of a
// ping-pong crosses the daemon).
bool RequestShortSlice(uint32_t slice_us) {
  struct SchedAttr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
  } attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, 0);
  attr.sched_nice = errno == 0 ? nice : 0;
  attr.sched_runtime = uint64_t{slice_us} * 1000;
  return syscall(SYS_sched_setattr, 0, &attr, 0u) == 0;
}

constexpr uint16_t kBurst = 32;
constexpr uint16_t kRing = 1024;
// Frames droce sends fit one mbuf of this data room; a larger one arrives
// chained and is dropped (rx_malformed).
constexpr uint16_t kDataRoom = pktio::kMaxFrameBytes + RTE_PKTMBUF_HEADROOM;

// The processes' links: shared-memory rings (ring_ports.h) for the verbs
// provider, or, for a DPDK application that asks (droce-testpmd), a memif
// interface: DPDK memif servers on one socket, told apart by id (DPDK
// 22.11's memif_socket_init keeps one listener per socket path and a list of
// interfaces; a client's init message names its id).
class ProcessPorts final : public PortBackend {
 public:
  ProcessPorts(std::string socket, rte_mempool* pool, uint32_t link_slots)
      : socket_(std::move(socket)), pool_(pool), rings_(pool, link_slots) {}
  RingPorts& rings() { return rings_; }

  absl::StatusOr<int> OpenPort(uint32_t memif_id, const std::string& secret, bool rings) override {
    if (rings) return rings_.Open(memif_id);
    const std::string name = absl::StrCat("net_memif_p", memif_id);
    const std::string vdev = ethdev::MemifVdevArgs(
        {.name = name, .server = true, .id = memif_id, .socket = socket_, .secret = secret, .buffer_bytes = 10240});
    absl::Status s = ethdev::ProbeVdev(vdev);
    if (!s.ok()) return s;
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
      return absl::InternalError(absl::StrCat("probed ", name, " but found no port"));
    }
    rte_eth_conf conf{};
    int rc = rte_eth_dev_configure(port, 1, 1, &conf);
    if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr, pool_);
    if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr);
    if (rc == 0) rc = rte_eth_dev_start(port);
    if (rc != 0) {
      (void)ethdev::RemoveVdev(name);
      return absl::UnavailableError(absl::StrFormat("starting %s: %s", name, rte_strerror(-rc)));
    }
    return static_cast<int>(port);
  }

  // The process detached or died. DPDK's interrupt thread tears the memif
  // connection down when the client's socket closes (it sends the
  // disconnect, closes the control channel, unmaps the shared regions).
  // Stopping and removing the port runs the same teardown, so it runs on
  // that thread too (ethdev::RunOnInterruptThread): from this thread, at
  // once with it, both closed the control channel's fd and EAL's interrupt
  // thread panicked re-adding a closed fd to its epoll set (droced died when
  // an MPI rank was killed). Waiting for the link to go down first lets the
  // peer's own disconnect finish.
  void ClosePort(int handle, bool rings) override {
    if (rings) {
      rings_.Close(handle);  // droced's own mapping: the process's stays valid until it unmaps
      return;
    }
    struct Job {
      uint16_t port;
      char name[RTE_ETH_NAME_MAX_LEN];
      absl::Status removed;
    } job{static_cast<uint16_t>(handle), {}, absl::OkStatus()};
    rte_eth_dev_get_name_by_port(job.port, job.name);
    for (int i = 0; i < 500; ++i) {
      rte_eth_link link{};
      if (rte_eth_link_get_nowait(job.port, &link) != 0 || link.link_status == RTE_ETH_LINK_DOWN) break;
      usleep(1000);
    }
    ethdev::RunOnInterruptThread(
        [](void* p) {
          auto* j = static_cast<Job*>(p);
          rte_eth_dev_stop(j->port);
          j->removed = ethdev::RemoveVdev(j->name);  // closes the port
        },
        &job);
    if (!job.removed.ok()) Log("removing %s: %s", job.name, std::string(job.removed.message()).c_str());
  }

 private:
  std::string socket_;
  rte_mempool* pool_;
  RingPorts rings_;
};

class Daemon {
 public:
  Daemon(std::string run_dir, rte_mempool* pool, uint32_t link_slots)
      : run_dir_(run_dir),
        pool_(pool),
        ports_(fabric::MemifSocketPath(run_dir), pool, link_slots),
        state_(run_dir, &ports_),
        netdev_(run_dir, &state_, [this](uint32_t dev, const fabric::NetdevState& m) { NotifyNetdev(dev, m); },
                [this](int port) { wakeups_[port].reset(); }),
        cm_([this](int dev, const GsiPath& path, const std::array<uint8_t, cm::kMadSize>& mad) {
              CmSend(dev, path, mad);
            },
            NowNs() ^ (uint64_t(getpid()) << 40)) {
    // netdev-bound devices: the CM's routes and next hops are the kernel's
    // (doc/netdev.md); answers are delivered after the command that asked.
    cm_.SetKernelRouting(
        [this](const cm::Gid& dst, const cm::Gid* src) {
          const NetdevBinder::Route k = netdev_.RouteTo(dst, src);
          CmService::Route r;
          r.device = k.device;
          r.error = k.error;
          r.source = k.source;
          return r;
        },
        [this](int dev, const cm::Gid& src, const cm::Gid& dst, uint32_t timeout_ms) {
          netdev_.Resolve(static_cast<uint32_t>(dev), src, dst, timeout_ms,
                          [this](uint32_t d, const core::Gid& target, int error, const core::Mac& mac) {
                            kernel_answers_.push_back({static_cast<int>(d), target, error, mac});
                          });
        });
  }

  // --uplink memif:SOCKET:server|client (or DROCED_UPLINK): a memif
  // interface to another droced (another host on this machine); frames for
  // MACs not on this segment go there (doc/droced.md, "Uplinks").
  // Or --uplink vdev:DPDK-VDEV (any DPDK port given as a vdev string, e.g.
  // net_af_packet_up,iface=veth0,...: a netdev; the port is named by the
  // text before the first comma), or pci:ADDR (a real NIC that EAL probed:
  // Main allow-lists it). The spec was checked (uplink_spec.h).
  absl::Status OpenUplink(const UplinkSpec& u) {
    const std::string& name = u.port;
    const std::string role = u.kind != UplinkSpec::Kind::kMemif ? "vdev" : u.server ? "server" : "client";
    if (u.kind == UplinkSpec::Kind::kMemif && u.server) unlink(u.socket.c_str());  // a dead daemon's
    absl::Status s = u.kind == UplinkSpec::Kind::kPci ? absl::OkStatus() : ethdev::ProbeVdev(u.vdev);
    if (!s.ok()) return s;
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
      return absl::NotFoundError(absl::StrCat("uplink: no port ", name,
                                              u.kind == UplinkSpec::Kind::kPci
                                                  ? " (is the NIC bound to a DPDK-capable driver, e.g. vfio-pci?)"
                                                  : ""));
    }
    rte_eth_conf conf{};
    int rc = rte_eth_dev_configure(port, 1, 1, &conf);
    if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr, pool_);
    if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, kRing, rte_eth_dev_socket_id(port), nullptr);
    if (rc != 0) return absl::UnavailableError(absl::StrFormat("uplink: %s", rte_strerror(-rc)));
    // A client whose server is not up yet fails to start: retried (Run).
    uplink_retry_ = rte_eth_dev_start(port) != 0 && role == "client";
    uplink_port_ = port;
    if (role == "vdev") rte_eth_promiscuous_enable(port);  // a netdev or a NIC: frames for every device's MAC
    state_.AddUplink(port, u.describe());
    // The CM reaches other hosts' addresses through it (ARP, doc/cm.md).
    cm_.SetResolver([this](int dev, const cm::Gid& source, const cm::Gid& target) { CmArp(dev, source, target); });
    Log("uplink: %s%s", u.describe().c_str(), uplink_retry_ ? " (server not up yet)" : "");
    return absl::OkStatus();
  }

  void set_busy_poll(bool on) { busy_poll_ = on; }
  void set_busy_window_us(uint32_t us) { busy_window_ns_ = uint64_t{us} * 1000; }
  void set_realtime(bool on) { realtime_ = on; }
  void set_direct(bool on, uint32_t ring_slots) {
    state_.set_direct_rings(on);
    ring_slots_ = ring_slots;
  }

  absl::Status Listen() {
    const std::string path = fabric::ControlSocketPath(run_dir_);
    sockaddr_un addr{};
    if (path.size() >= sizeof addr.sun_path) return absl::InvalidArgumentError("run directory path too long");
    listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_fd_ < 0) return absl::UnavailableError(std::strerror(errno));
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size());
    unlink(path.c_str());  // we hold the pid file's lock: a socket there is a dead daemon's
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listen_fd_, 64) != 0) {
      return absl::UnavailableError(absl::StrCat(path, ": ", std::strerror(errno)));
    }
    chmod(path.c_str(), 0666);  // like the uverbs nodes: any user of the host may attach
    state_.Rescan();
    // netdev-bound devices of the run directory: bound now (a device that
    // cannot be says why in the log, and its processes' attach says it too).
    (void)netdev_.Sync();
    return absl::OkStatus();
  }

  void Run() {
    prctl(PR_SET_TIMERSLACK, 1000UL);
    SchedulePollLoop();
    uint32_t idle = 0, sleep_us = 1;
    uint64_t last_work = NowNs(), next_control = 0;
    while (!g_stop && !state_.shutdown_requested()) {
      const uint32_t work = PollOnce();
      const uint64_t now = NowNs();
      if (work > 0) {
        idle = 0, sleep_us = 1, last_work = now;
        // Busy: the control sockets (attach, a process that died) are looked
        // at every 200 us, without waiting.
        if (now >= next_control) {
          ServiceControl(0);
          next_control = now + 200'000;
        }
        continue;
      }
      // Spin a while after the last frame before sleeping: a ping-pong's
      // next message comes within a round trip, and a sleep costs an OS
      // wake-up on every one (tools/bench/fabric measures the window).
      if (busy_poll_ || idle++ < 200 || now - last_work < busy_window_ns_) {
        if (busy_poll_ && now >= next_control) {
          ServiceControl(0);
          next_control = now + 200'000;
        }
        __builtin_ia32_pause();
        continue;
      }
      // Idle: sleep on the control sockets. Short sleeps for 2 ms after the
      // last frame (a ping-pong's next message), then doubling to 1 ms.
      // The switch has no timers: it sleeps until a frame or a request comes.
      if (ArmWakeups()) {
        // Every process's ring will say when a frame comes (memif interrupt
        // mode, drivers/ethdev/rx_wakeup.cc); one may have come meanwhile.
        if (PollOnce() > 0) {
          DisarmWakeups();
          idle = 0, sleep_us = 1, last_work = NowNs();
          continue;
        }
        ServiceControl(100'000);
        DisarmWakeups();
      } else if (now - last_work < 2'000'000) {
        ServiceControl(5);  // hot, and some ring cannot notify: short timed sleeps
      } else {
        ServiceControl(sleep_us);
        sleep_us = std::min<uint32_t>(sleep_us * 2, 1000);
      }
      next_control = NowNs() + 200'000;
    }
    Log("stopping (%s)", g_stop ? "signal" : "shutdown request");
    // The attached programs learn it from their control connection closing:
    // each one's runtime stops polling and removes its memif interface
    // itself (IBV_EVENT_PORT_ERR, doc/droced.md). Tearing the interfaces
    // down from here first would have DPDK's memif thread in each program
    // unmap its rings while the program may be polling them.
    for (const Conn& c : conns_) close(c.fd);
    for (int waited_ms = 0; waited_ms < 1000 && AnyLinkUp(); ++waited_ms) usleep(1000);
    // The processes are detached before the interfaces are unbound: an
    // unbinding tells the device's processes that the port is down, on their
    // connections, which are closed now (their descriptor numbers free for
    // reuse).
    for (const Conn& c : conns_) state_.ConnectionClosed(c.fd);
    conns_.clear();
    netdev_.UnbindAll();  // the interfaces get their XDP programs off
    close(listen_fd_);
    unlink(fabric::ControlSocketPath(run_dir_).c_str());
  }

 private:
  bool AnyLinkUp() {
    for (const Port& p : state_.ports()) {
      rte_eth_link link{};
      if (p.in_use && !p.uplink && !p.iface && !p.rings && rte_eth_link_get_nowait(static_cast<uint16_t>(p.handle), &link) == 0 &&
          link.link_status == RTE_ETH_LINK_UP) {
        return true;
      }
    }
    return false;
  }

  struct Conn {
    int fd;
    pid_t pid;
    uid_t uid;
    uint64_t serial;  // tells a later connection on the same fd number from this one
  };
  struct Stage {
    rte_mbuf* m[kBurst];
    uint16_t n = 0;
  };

  void Push(int port, rte_mbuf* m) {
    Stage& s = stages_[port];
    if (s.n == kBurst) Flush(port);
    if (s.n == 0) dirty_[ndirty_++] = port;
    s.m[s.n++] = m;
  }

  uint32_t Flush(int port, bool released = false) {
    Stage& s = stages_[port];
    if (s.n == 0) return 0;
    Port& p = state_.ports()[port];
    uint16_t sent = 0;
    if (p.in_use && !p.uplink && !p.iface) {
      SwitchKnobs& k = state_.knobs(p.device);
      if (k.active() || !k.mirror_path().empty()) ApplyKnobs(port, p.device, k, s, released);
    }
    if (p.in_use && s.n > 0) {
      // Counted before: memif's transmit frees what it sent.
      uint64_t bytes[kBurst];
      for (uint16_t i = 0; i < s.n; ++i) bytes[i] = rte_pktmbuf_pkt_len(s.m[i]);
      sent = p.queue_ports.empty() ? PortTx(p, s.m, s.n) : SpreadTx(p, s.m, bytes, s.n);
      for (uint16_t i = 0; i < sent; ++i) p.counters.tx_bytes += bytes[i];
      p.counters.tx_packets += sent;
      p.counters.tx_dropped += s.n - sent;
    }
    if (sent < s.n) rte_pktmbuf_free_bulk(s.m + sent, s.n - sent);
    s.n = 0;
    return sent;
  }

  // The device's switch-port knobs on a staged burst (switch_knobs.h): drops
  // leave the stage, marks rewrite the ECN field, frames the bottleneck
  // queues leave the stage until ReleaseQueued sends them, a held frame goes
  // out after the port's next one, and what stays is mirrored. A stage of
  // frames the bottleneck released (`released`) only gets reorder and mirror.
  void ApplyKnobs(int port, uint32_t device, SwitchKnobs& k, Stage& s, bool released) {
    const uint64_t now = NowNs();
    rte_mbuf* out[kBurst + 1];
    uint16_t n = 0;
    for (uint16_t i = 0; i < s.n; ++i) {
      rte_mbuf* m = s.m[i];
      EgressVerdict v;
      if (released) {
        v.hold = k.HoldBack();
      } else {
        v = k.Egress(m->data_len, now);
      }
      if (v.drop) {
        rte_pktmbuf_free(m);
        continue;
      }
      if (v.mark) wire::MarkCe(rte_pktmbuf_mtod(m, uint8_t*), m->data_len);
      if (v.queue) {
        k.Hold(m, m->data_len, static_cast<uint32_t>(port), state_.ports()[port].memif_id, m->port);
        ++queued_;
        continue;
      }
      if (v.hold && held_[port] == nullptr) {
        held_[port] = m;
        ++nheld_;
        continue;
      }
      out[n++] = m;
      if (held_[port] != nullptr && !v.hold) {
        out[n++] = held_[port];
        held_[port] = nullptr;
      }
    }
    // At most kBurst: one frame can be held back per port.
    if (n > kBurst) {
      held_[port] = out[--n];
      ++nheld_;
    }
    std::memcpy(s.m, out, n * sizeof out[0]);
    s.n = n;
    if (!k.mirror_path().empty()) Mirror(device, k, s);
  }

  // The device's mirror (debugging: a stdio write per frame).
  void Mirror(uint32_t device, SwitchKnobs& k, const Stage& s) {
    MirrorFile& mf = mirrors_[device];
    if (mf.path != k.mirror_path()) {
      if (mf.file != nullptr) std::fclose(mf.file);
      mf.path = k.mirror_path();
      mf.file = std::fopen(mf.path.c_str(), "w");
      if (mf.file == nullptr) {
        Log("mirror %s: %s", mf.path.c_str(), std::strerror(errno));
        return;
      }
      const uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
      std::fwrite(hdr, sizeof hdr, 1, mf.file);
    }
    if (mf.file == nullptr) return;
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (uint16_t i = 0; i < s.n; ++i) {
      const rte_mbuf* m = s.m[i];
      const uint32_t rec[4] = {static_cast<uint32_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec / 1000),
                               m->data_len, m->data_len};
      std::fwrite(rec, sizeof rec, 1, mf.file);
      std::fwrite(rte_pktmbuf_mtod(m, const void*), 1, m->data_len, mf.file);
      ++k.counters().mirrored;
    }
    std::fflush(mf.file);
  }

  // Frames the devices' bottlenecks let go by now (switch_knobs.h), to the
  // ports they were queued for: CE (marking at dequeue) and the INT record
  // written as they leave, then reorder and mirror. A frame whose port has
  // since gone to another process is dropped. Returns frames sent; while
  // any wait, the loop stays hot (a queue is a timer).
  uint32_t ReleaseQueued() {
    if (queued_ == 0) return 0;
    const uint64_t now = NowNs();
    uint32_t work = 0;
    const auto& devices = state_.devices();
    for (uint32_t d = 0; d < devices.size(); ++d) {
      SwitchKnobs& k = *devices[d].knobs;
      if (k.queued_frames() == 0 || k.next_release_ns() > now) continue;
      Released r;
      while (k.Release(now, &r)) {
        --queued_;
        rte_mbuf* m = static_cast<rte_mbuf*>(r.frame);
        const Port& p = state_.ports()[r.port];
        if (!p.in_use || p.memif_id != r.port_tag || p.device != d) {
          rte_pktmbuf_free(m);
          continue;
        }
        const sim::EgressEdits e =
            sim::EditLeavingFrame(rte_pktmbuf_mtod(m, uint8_t*), m->data_len, r.mark, r.stamp ? &r.hop : nullptr);
        k.counters().int_stamped += e.stamped;
        Stage& s = stages_[r.port];
        if (s.n == kBurst) work += Flush(static_cast<int>(r.port), true);
        if (s.n == 0) dirty_[ndirty_++] = static_cast<int>(r.port);
        s.m[s.n++] = m;
      }
      for (uint32_t i = 0; i < ndirty_; ++i) work += Flush(dirty_[i], true);
      ndirty_ = 0;
    }
    return work + (queued_ != 0 ? 1 : 0);
  }

  // Frames the reorder knob held back, sent once the port is idle.
  uint32_t FlushHeld() {
    uint32_t work = 0;
    if (nheld_ == 0) return 0;
    nheld_ = 0;
    for (uint32_t i = 0; i < kMaxPorts; ++i) {
      if (held_[i] == nullptr) continue;
      rte_mbuf* m = held_[i];
      held_[i] = nullptr;
      const Port& p = state_.ports()[i];
      if (p.in_use && PortTx(p, &m, 1) == 1) {
        ++work;
      } else {
        rte_pktmbuf_free(m);
      }
    }
    return work;
  }

  // A port's bursts: a process's rings, or an ethdev port (a memif
  // process, the uplink, an interface). A process killed mid-burst on memif:
  // DPDK's memif thread unmaps its rings under us (ethdev/unmap_guard.h); the
  // burst then ends, not the daemon. Rings are droced's own mapping.
  uint16_t PortRx(Port& p, rte_mbuf** m, uint16_t n) {
    if (p.rings) return ports_.rings().RxBurst(p.handle, m, n);
    if (!p.queue_ports.empty()) return QueuesRx(p, m, n);
    bool faulted = false;
    n = ethdev::GuardedRxBurst(static_cast<uint16_t>(p.handle), m, n, &faulted);
    if (faulted) ++state_.counters().unmap_faults;
    return n;
  }
  uint16_t PortTx(const Port& p, rte_mbuf** m, uint16_t n) {
    if (p.rings) return ports_.rings().TxBurst(p.handle, m, n);
    bool faulted = false;
    n = ethdev::GuardedTxBurst(static_cast<uint16_t>(p.handle), m, n, &faulted);
    if (faulted) ++state_.counters().unmap_faults;
    return n;
  }

  // An interface's port with a DPDK port per RX queue of the interface (XDP
  // steering): every queue read, from one further each time, so that a busy
  // queue does not starve the others.
  uint16_t QueuesRx(Port& p, rte_mbuf** m, uint16_t n) {
    const auto queues = static_cast<uint16_t>(p.queue_ports.size());
    const uint16_t first = p.next_queue;
    p.next_queue = static_cast<uint16_t>(first + 1 == queues ? 0 : first + 1);
    uint16_t got = 0;
    for (uint16_t k = 0; k < queues && got < n; ++k) {
      const uint16_t q = static_cast<uint16_t>(first + k < queues ? first + k : first + k - queues);
      got += rte_eth_rx_burst(p.queue_ports[q], 0, m + got, static_cast<uint16_t>(n - got));
    }
    return got;
  }

  // ... and its TX queues: each frame on its flow's queue (RoCEv2's UDP
  // source port over the queues; anything else on queue 0), so a flow's
  // frames stay in order and the flows spread over the peer's queues as RSS
  // spreads them. m and bytes (each frame's length) are reordered alike: the
  // frames sent first, then those their queue did not take.
  uint16_t SpreadTx(const Port& p, rte_mbuf** m, uint64_t* bytes, uint16_t n) {
    static_assert(netdev::kMaxXdpQueues <= 64);
    const auto queues = static_cast<uint16_t>(p.queue_ports.size());
    uint16_t queue_of[kBurst];
    uint16_t start[netdev::kMaxXdpQueues + 1] = {};
    for (uint16_t i = 0; i < n; ++i) {
      const auto* f = rte_pktmbuf_mtod(m[i], const uint8_t*);
      const uint32_t bth = wire::RoceBthOffset(f, m[i]->data_len);
      // The port's bits mixed (Fibonacci hashing): source ports that
      // differ in their high bits only still land on different queues.
      const uint32_t sport = bth == 0 ? 0 : wire::LoadBe16(f + bth - wire::kUdpBytes);
      queue_of[i] = bth == 0 ? 0 : static_cast<uint16_t>(((sport * 2654435761u) >> 16) % queues);
      ++start[queue_of[i] + 1];
    }
    for (uint16_t q = 1; q <= queues; ++q) start[q] = static_cast<uint16_t>(start[q] + start[q - 1]);
    rte_mbuf* grouped[kBurst];
    uint64_t grouped_bytes[kBurst];
    uint16_t fill[netdev::kMaxXdpQueues];
    std::memcpy(fill, start, queues * sizeof fill[0]);
    for (uint16_t i = 0; i < n; ++i) {
      const uint16_t j = fill[queue_of[i]]++;
      grouped[j] = m[i];
      grouped_bytes[j] = bytes[i];
    }
    rte_mbuf* unsent[kBurst];
    uint64_t unsent_bytes[kBurst];
    uint16_t sent = 0, left = 0;
    for (uint16_t q = 0; q < queues; ++q) {
      const uint16_t begin = start[q], count = static_cast<uint16_t>(start[q + 1] - start[q]);
      if (count == 0) continue;
      const uint16_t took = rte_eth_tx_burst(p.queue_ports[q], 0, grouped + begin, count);
      for (uint16_t i = begin; i < begin + count; ++i) {
        if (i < begin + took) {
          m[sent] = grouped[i];
          bytes[sent++] = grouped_bytes[i];
        } else {
          unsent[left] = grouped[i];
          unsent_bytes[left++] = grouped_bytes[i];
        }
      }
    }
    std::memcpy(m + sent, unsent, left * sizeof unsent[0]);
    std::memcpy(bytes + sent, unsent_bytes, left * sizeof unsent_bytes[0]);
    return sent;
  }

  uint32_t PollOnce() {
    uint32_t work = ReleaseQueued();
    if (!held_markers_.empty()) {
      SendHeldMarkers();
      work += held_markers_.size();  // no sleep while one waits: its receiver's draining wakes nobody
    }
    std::vector<Port>& ports = state_.ports();
    rte_mbuf* rx[kBurst];
    const PfcBoard& pfc = SwitchKnobs::process_board();
    for (const uint32_t idx : state_.active_ports()) {
      Port& src = ports[idx];
      // PFC: a sender whose frames fill a bottleneck waits in its own ring.
      if (queued_ != 0 && pfc.held(static_cast<uint32_t>(src.handle))) continue;
      uint16_t n;
      if (src.rings && trace_ == nullptr) {
        n = SwitchFromRing(idx, src, rx, &work);
      } else {
        n = PortRx(src, rx, kBurst);
        work += n;
        if (n != 0) {
          ++src.counters.rx_bursts;
          if (n == kBurst) ++src.counters.rx_bursts_full;
        }
      }
      for (uint16_t i = 0; i < n; ++i) SwitchFrame(idx, rx[i]);
      for (uint32_t k = 0; k < ndirty_; ++k) work += Flush(dirty_[k]);
      ndirty_ = 0;
    }
    if (work == 0) work += FlushHeld();
    // Pairs that just talked through the switch get their path (its
    // marker keeps their frames in order: ethdev/direct_io.h).
    if (state_.paths_asked()) SyncPaths();
    return work;
  }

  // One frame from port idx, in an mbuf: the switch's rules decide.
  void SwitchFrame(uint32_t idx, rte_mbuf* m) {
    std::vector<Port>& ports = state_.ports();
    Port& src = ports[idx];
    if (m->nb_segs != 1) {
      ++state_.counters().rx_malformed;
      rte_pktmbuf_free(m);
      return;
    }
    if (trace_ != nullptr) Trace(idx, m);
    if (static_cast<int>(idx) == state_.uplink()) CmSnoopArp(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len);
    ++src.counters.rx_packets;
    src.counters.rx_bytes += m->data_len;
    const Decision d = state_.Classify(static_cast<int>(idx), rte_pktmbuf_mtod(m, uint8_t*), m->data_len,
                                       static_cast<uint32_t>(m->buf_len - m->data_off));
    switch (d.kind) {
      case Decision::kToPort:
        state_.NoteSwitched(static_cast<int>(idx), d.port);
        Push(d.port, m);
        break;
      case Decision::kReplyHere:
        m->data_len = static_cast<uint16_t>(d.len);
        m->pkt_len = d.len;
        Push(d.port, m);
        break;
      case Decision::kFlood:
        for (const uint32_t k : state_.active_ports()) {
          const Port& p = ports[k];
          if (!p.in_use || p.iface || k == idx || (d.device >= 0 && p.device != static_cast<uint32_t>(d.device))) {
            continue;
          }
          rte_mbuf_refcnt_update(m, 1);  // one reference per copy: memif copies and frees each
          Push(static_cast<int>(k), m);
          ++state_.counters().flooded;
        }
        if (d.port >= 0) {  // a netdev-bound device's group frame: out of its interface too
          rte_mbuf_refcnt_update(m, 1);
          Push(d.port, m);
        }
        rte_pktmbuf_free(m);
        break;
      case Decision::kToGsi:
        RefreshCmDevices();
        cm_.OnGsiFrame(d.device, rte_pktmbuf_mtod(m, uint8_t*), m->data_len, NowNs() / 1'000'000);
        rte_pktmbuf_free(m);
        CmSettle();
        break;
      case Decision::kDrop:
        rte_pktmbuf_free(m);
        break;
    }
  }

  // A ring-linked process's burst, read in place. A unicast RoCEv2 frame
  // (not for QP 1) to another ring-linked process whose device has no knob
  // set is copied straight from the one's ring into the other's: one copy in
  // droced instead of two through an mbuf (doc/droced.md "The link to the
  // daemon"). The rest is copied into mbufs (*mbufs, returned count) for
  // SwitchFrame: what Classify may rewrite (ARP, ND), floods, the CM, memif
  // ports, the uplink, interfaces and knobs. The process can still write
  // its slots: each view's length was read once, and a frame's destination
  // is decided from the bytes as they were when read (a process that
  // rewrites its own frame meanwhile only garbles its own frame).
  uint16_t SwitchFromRing(uint32_t idx, Port& src, rte_mbuf** mbufs, uint32_t* work) {
    pktio::Frame v[kBurst];
    const uint16_t n = ports_.rings().PeekRx(src.handle, v, kBurst);
    if (n == 0) return 0;
    *work += n;
    ++src.counters.rx_bursts;
    if (n == kBurst) ++src.counters.rx_bursts_full;
    std::vector<Port>& ports = state_.ports();
    uint16_t nm = 0;
    // A run of frames to one process goes in one TxFrames.
    int run_dst = -1;
    uint16_t run_len = 0;
    pktio::Frame run[kBurst];
    const auto flush_run = [&]() {
      if (run_len == 0) return;
      Port& p = ports[run_dst];
      const uint16_t took = ports_.rings().TxFrames(p.handle, run, run_len);
      uint64_t bytes = 0;
      for (uint16_t i = 0; i < took; ++i) bytes += run[i].len;
      p.counters.tx_packets += took;
      p.counters.tx_bytes += bytes;
      // A full ring tail-drops, as a switch port does; but a path's marker
      // waits (HoldMarker), or its receiver would never read the path.
      for (uint16_t i = took; i < run_len; ++i) {
        if (!HoldMarker(run_dst, run[i])) ++p.counters.tx_dropped;
      }
      ports_.rings().CountRingToRing(took);
      run_len = 0;
    };
    uint16_t done = 0;
    for (uint16_t i = 0; i < n; ++i, ++done) {
      if (v[i].len == 0) continue;  // a bad length (counted by the ring)
      const int dst = RingToRingDestination(idx, v[i]);
      if (dst >= 0 || dst == kDropped) {
        ++src.counters.rx_packets;
        src.counters.rx_bytes += v[i].len;
      }
      if (dst == kDropped) continue;
      if (dst >= 0) {
        if (dst != run_dst) {
          flush_run();
          run_dst = dst;
        }
        run[run_len++] = v[i];
        continue;
      }
      rte_mbuf* m = rte_pktmbuf_alloc(pool_);
      if (m == nullptr) {  // the rest stays in the ring for the next round
        ports_.rings().CountNoMbuf();
        break;
      }
      if (rte_pktmbuf_tailroom(m) < v[i].len) {  // longer than any frame: the ring's bound is the slot
        rte_pktmbuf_free(m);
        ++state_.counters().rx_malformed;
        continue;
      }
      std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), v[i].data, v[i].len);
      m->data_len = static_cast<uint16_t>(v[i].len);
      m->pkt_len = v[i].len;
      mbufs[nm++] = m;
    }
    flush_run();
    ports_.rings().ReleaseRx(src.handle, done);
    return nm;
  }

  // A direct path's marker (fabric/path_marker.h) that found the receiver's
  // ring full: kept and sent when it has room (SendHeldMarkers), since the
  // receiver reads the path only after it. Holding it reorders nothing: it
  // must follow the sender's earlier switched frames, which are delivered or
  // dropped already, and the sender's later frames to that receiver take
  // the path. False if f is no marker.
  bool HoldMarker(int port, const pktio::Frame& f) {
    fabric::PathMarker marker;
    if (!fabric::ReadPathMarker(f.data, f.len, &marker) || held_markers_.size() >= kMaxHeldMarkers) return false;
    HeldMarker h;
    h.port = port;
    h.attachment = state_.ports()[port].memif_id;
    std::memcpy(h.frame, f.data, fabric::kPathMarkerBytes);
    held_markers_.push_back(h);
    return true;
  }
  void SendHeldMarkers() {
    for (size_t i = 0; i < held_markers_.size();) {
      const HeldMarker& h = held_markers_[i];
      const Port& p = state_.ports()[h.port];
      if (!p.in_use || !p.rings || p.memif_id != h.attachment) {  // it left
        held_markers_.erase(held_markers_.begin() + static_cast<long>(i));
        continue;
      }
      pktio::Frame f;
      f.data = const_cast<uint8_t*>(h.frame);
      f.len = fabric::kPathMarkerBytes;
      if (ports_.rings().TxFrames(p.handle, &f, 1) == 1) {
        held_markers_.erase(held_markers_.begin() + static_cast<long>(i));
        continue;
      }
      ++i;
    }
  }

  // The ring-linked port a frame goes to ring to ring, -1 (the mbuf way), or
  // kDropped (Classify dropped and counted it).
  // Only unicast RoCEv2 for a QPN above 1 is decided here: Classify writes
  // nothing for those (it answers ARP and ND in place) and steers them by
  // QPN; its decision is then taken only if the port is another process's
  // ring whose device has no knob.
  int RingToRingDestination(uint32_t idx, const pktio::Frame& f) {
    if (f.len < wire::kEthBytes || (f.data[0] & 1) != 0) return -1;
    const int64_t qpn = wire::RoceDestQp(f.data, f.len);
    if (qpn < 2) return -1;
    // Checked before Classify counts the frame: a frame that is then not
    // forwarded here would be classified (and counted) again in SwitchFrame.
    const int dev = state_.FindDeviceByMac(f.data);
    if (dev < 0 || state_.devices()[dev].netdev_bound || !KnobFree(static_cast<uint32_t>(dev))) return -1;
    const Port& from = state_.ports()[idx];
    if (from.device < state_.devices().size() &&
        (state_.devices()[from.device].netdev_bound || !KnobFree(from.device))) {
      return -1;
    }
    const Decision d = state_.Classify(static_cast<int>(idx), const_cast<uint8_t*>(f.data), f.len, f.len);
    if (d.kind == Decision::kDrop) return kDropped;  // RoCEv2 to no owner, a forged marker
    if (d.kind != Decision::kToPort) return -1;
    const Port& p = state_.ports()[d.port];
    if (!p.in_use || !p.rings || p.uplink || p.iface || d.port == static_cast<int>(idx)) return -1;
    state_.NoteSwitched(static_cast<int>(idx), d.port);
    return d.port;
  }
  static constexpr int kDropped = -2;
  bool KnobFree(uint32_t device) {
    const SwitchKnobs& k = state_.knobs(device);
    return !k.active() && k.mirror_path().empty();
  }

  // DROCED_TRACE=FILE (debugging only: a stdio write per frame): every
  // frame the switch receives, in pcap format, stamped when the loop read
  // it (how the 545 ms scheduling stall below was found).
  void Trace(uint32_t port, rte_mbuf* m) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint32_t rec[4] = {static_cast<uint32_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec / 1000),
                             m->data_len, m->data_len};
    (void)port;
    std::fwrite(rec, sizeof rec, 1, trace_);
    std::fwrite(rte_pktmbuf_mtod(m, void*), 1, m->data_len, trace_);
  }

 public:
  void OpenTrace(const char* path) {
    trace_ = std::fopen(path, "w");
    if (trace_ == nullptr) return;
    const uint32_t hdr[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};
    std::fwrite(hdr, sizeof hdr, 1, trace_);
  }
  void CloseTrace() {
    if (trace_ != nullptr) std::fclose(trace_);
  }

 private:
  std::FILE* trace_ = nullptr;

  // Arms every attached port's arrival notification; false (nothing left
  // armed) if one cannot notify now (a process still connecting, or a
  // layout check in rx_wakeup.cc failed): the loop then sleeps by the clock.
  bool ArmWakeups() {
    nwake_ = 0;
    bool all = true, any = false;
    for (uint32_t i = 0; i < kMaxPorts && all; ++i) {
      const Port& p = state_.ports()[i];
      if (!p.in_use) {
        wakeups_[i].reset();
        continue;
      }
      any = true;
      if (p.rings) {  // its ring's eventfd (ring_ports.h): always there
        armed_ring_[nwake_] = p.handle;
        armed_[nwake_] = i;
        wake_fds_[nwake_++] = ports_.rings().Arm(p.handle);
        continue;
      }
      if (wakeups_[i] == nullptr || wakeup_memif_[i] != p.memif_id) {
        std::string why_not;
        wakeups_[i] = p.queue_ports.empty() ? ethdev::RxWakeup::For(static_cast<uint16_t>(p.handle), &why_not)
                                            : ethdev::RxWakeup::ForSockets(p.queue_ports, &why_not);
        wakeup_memif_[i] = p.memif_id;
      }
      const int fd = wakeups_[i] != nullptr ? wakeups_[i]->Arm() : -1;
      if (fd >= 0 && prefaulted_memif_[i] != p.memif_id) {
        // Connected: its memif region is mapped. Page tables now, not a
        // fault per page on the first pass (ethdev/prefault.h).
        (void)ethdev::PrefaultSharedMappings(ethdev::kMemifRegionName);
        prefaulted_memif_[i] = p.memif_id;
      }
      if (fd < 0) {
        all = false;
        break;
      }
      armed_ring_[nwake_] = -1;
      armed_[nwake_] = i;
      wake_fds_[nwake_++] = fd;
    }
    if (!all) DisarmWakeups();
    // No process attached: nothing to poll, a control request ends the sleep.
    return all && (any || nwake_ == 0);
  }

  void DisarmWakeups() {
    for (uint32_t k = 0; k < nwake_; ++k) {
      if (armed_ring_[k] >= 0) {
        ports_.rings().Disarm(armed_ring_[k]);  // closed meanwhile: nothing to do
      } else if (wakeups_[armed_[k]] != nullptr) {
        wakeups_[armed_[k]]->Disarm();
      }
    }
    nwake_ = 0;
  }

  // Accepts connections and answers requests; waits up to timeout_us for one.
  void ServiceControl(uint32_t timeout_us) {
    RetryUplink();
    pollfd fds[1 + kMaxConns + kMaxPorts];
    nfds_t nfds = 0;
    fds[nfds++] = {listen_fd_, POLLIN, 0};
    for (const Conn& c : conns_) fds[nfds++] = {c.fd, POLLIN, 0};
    const nfds_t nconn = nfds;
    for (uint32_t i = 0; i < nwake_; ++i) fds[nfds++] = {wake_fds_[i], POLLIN, 0};  // arrivals only wake us
    const nfds_t netlink = nfds;
    if (netdev_.fd() >= 0) fds[nfds++] = {netdev_.fd(), POLLIN, 0};  // the kernel's interface events
    CmTimers();
    netdev_.Timers(NowNs());
    const timespec timeout{0, static_cast<long>(timeout_us) * 1000};  // < 1 s
    if (ppoll(fds, nfds, &timeout, nullptr) <= 0) return;
    if (netlink < nfds && fds[netlink].revents != 0) netdev_.OnReadable();
    if (!kernel_answers_.empty()) CmSettle();
    for (nfds_t i = nconn; i-- > 1;) {  // backwards: closing a connection moves the ones after it
      if (fds[i].revents != 0) ServeConn(i - 1);
    }
    if (fds[0].revents & POLLIN) Accept();
  }

  void Accept() {
    while (true) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;
      ucred cred{};
      socklen_t len = sizeof cred;
      if (conns_.size() >= kMaxConns || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        Log("refusing a control connection (%zu open)", conns_.size());
        close(fd);
        continue;
      }
      conns_.push_back({fd, cred.pid, cred.uid, ++conn_serial_});
    }
  }

  void ServeConn(size_t i) {
    Conn c = conns_[i];
    // The largest request of either protocol (MSG_TRUNC tells the real length).
    static_assert(sizeof(fabric::KnobRequest) >= sizeof(fabric::ResolveRequest));
    alignas(8) char buf[std::max(sizeof(fabric::Request) + sizeof(fabric::KnobRequest) + 64,
                                 sizeof(cmproto::CmRequest) + cmproto::kMaxCommandBytes + cmproto::kMaxOptionBytes)];
    const ssize_t n = recv(c.fd, buf, sizeof buf, MSG_TRUNC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n >= 4) {
      uint32_t magic;
      std::memcpy(&magic, buf, sizeof magic);
      if (magic == cmproto::kCmMagic) {  // an rdma_cm event channel (doc/cm.md)
        // n is the datagram's real length (MSG_TRUNC); ServeCm reads only
        // what its checked lengths say, which never exceed the buffer.
        ServeCm(c.fd, buf, static_cast<size_t>(n));
        return;
      }
    }
    if (n <= 0) {  // EOF: the process detached, exited or died
      if (cm_conns_.erase(c.fd) > 0) {
        cm_.ConnectionClosed(c.fd, NowNs() / 1'000'000);
        CmSettle();
      }
      for (const Port& p : state_.ports()) {
        if (p.in_use && p.conn_fd == c.fd) {
          Log("process %d left %s (%s %u, qpns from %u): rx %lu pkts, tx %lu pkts, tx_dropped %lu, "
              "rx_bursts %lu (full %lu)",
              p.pid, state_.devices()[p.device].name.c_str(), p.rings ? "rings" : "memif", p.memif_id, p.slot * fabric::kQpnsPerProcess,
              p.counters.rx_packets, p.counters.tx_packets, p.counters.tx_dropped, p.counters.rx_bursts,
              p.counters.rx_bursts_full);
        }
      }
      state_.ConnectionClosed(c.fd);
      close(c.fd);
      conns_.erase(conns_.begin() + static_cast<long>(i));
      SyncPaths();  // its peers stop using their rings to it
      netdev_.ReleaseUnownedSockets();  // its steering goes, then its socket's port
      (void)netdev_.SyncGroups();       // and its multicast groups (logged if the kernel refuses)
      return;
    }
    std::string text;
    // MSG_TRUNC: n is the datagram's real length; only what fit was read.
    const ssize_t got = std::min<ssize_t>(n, sizeof(fabric::Request) + sizeof(fabric::KnobRequest) + 64);
    ResolveQuery resolve;
    fabric::Reply r = state_.Handle(c.fd, buf, n == got ? n : -1, c.pid, c.uid, &text, &resolve);
    if (r.op == fabric::kOpResolve && r.error == EINPROGRESS) {
      StartResolve(c, r, resolve);
      return;
    }
    if (r.op == fabric::kOpRescan && r.error == 0) {
      // A netdev-bound device droce-ctl just registered is bound now; what
      // failed goes back to droce-ctl, which then removes the device.
      const std::string failed = netdev_.Sync();
      if (!failed.empty()) {
        r.error = ENODEV;
        std::snprintf(r.message, sizeof r.message, "%s", failed.c_str());
      }
    }
    if (r.op == fabric::kOpMcast && r.error == 0) {
      // The interface joins (or leaves) the group: the kernel's refusal is the process's error.
      if (absl::Status s = netdev_.SyncGroups(); !s.ok()) {
        r.error = EADDRNOTAVAIL;
        std::snprintf(r.message, sizeof r.message, "%s", std::string(s.message()).c_str());
      }
    }
    if (r.op == fabric::kOpStatus && r.error == 0) {
      const RingPortCounters& rc = ports_.rings().counters();
      text += absl::StrFormat(
          "links (rings): rx_no_mbuf %lu rx_bad_length %lu tx_too_long %lu wakeups_sent %lu ring_to_ring %lu\n",
          rc.rx_no_mbuf, rc.rx_bad_length, rc.tx_too_long, rc.wakeups_sent, rc.ring_to_ring);
      for (uint32_t d = 0; d < state_.devices().size(); ++d) text += netdev_.StatusText(d);
      text += cm_.StatusText();
    }
    if (r.error != 0) {
      Log("request from pid %d refused: %s (%s)", c.pid, r.message, std::strerror(r.error));
    } else if (r.op == fabric::kOpAttach) {
      Log("process %d attached (%s %u, qpns %u-%u)", c.pid, r.memif_socket[0] != 0 ? "memif" : "rings", r.memif_id, r.qpn_base,
          r.qpn_base + r.qpn_count - 1);
    }
    std::string out(reinterpret_cast<const char*>(&r), sizeof r);
    out += text;
    fabric::Reply* hdr = reinterpret_cast<fabric::Reply*>(out.data());
    hdr->size = static_cast<uint32_t>(out.size());
    send(c.fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    // The process's side of its rings follows the reply, then, for a
    // netdev-bound device, the interface's state (its GID table, its port).
    if (r.op == fabric::kOpAttach && r.error == 0) {
      for (const Port& p : state_.ports()) {
        if (!p.in_use || p.conn_fd != c.fd || p.iface) continue;
        if (p.rings) {
          if (const int err = ports_.rings().SendToProcess(p.handle, c.fd); err != 0) {
            Log("process %d: sending its link: %s", c.pid, std::strerror(err));
          }
        }
        if (state_.devices()[p.device].netdev_bound) SendNetdevAttach(c, p);
      }
    }
    // After the reply: an attach's paths follow it on the same connection.
    SyncPaths();
    netdev_.ReleaseUnownedSockets();  // a detach's
    (void)netdev_.SyncGroups();
  }

  // The interface's state for a process that just attached, and with
  // steering udp its own socket (doc/netdev.md "UDP sockets"). A socket that
  // cannot be made leaves the process on droced's path (memif).
  void SendNetdevAttach(const Conn& c, const Port& p) {
    fabric::NetdevState m = state_.NetdevStateOf(p.device);
    absl::StatusOr<netdev::ProcessSocket> sock = absl::NotFoundError("");
    if (netdev_.SteersToSockets(p.device)) {
      sock = netdev_.ProcessSocketFor(p.device, p.slot);
      if (!sock.ok()) Log("process %d: no socket of its own: %s", c.pid, std::string(sock.status().message()).c_str());
    }
    m.own_socket = sock.ok() ? 1 : 0;
    send(c.fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (!sock.ok()) return;
    fabric::NetdevSocket ns{};
    ns.magic = fabric::kNetdevSocketMagic;
    ns.version = fabric::kNetdevSocketVersion;
    ns.size = sizeof ns;
    ns.port = sock->port;
    if (const int err = ethdev::SendWithFds(c.fd, &ns, sizeof ns, &sock->fd, 1); err != 0) {
      Log("process %d: sending its socket: %s", c.pid, std::strerror(err));
    }
    close(sock->fd);
  }

  // --- netdev-bound devices (doc/netdev.md).
  // The interface changed: every process of the device is told.
  void NotifyNetdev(uint32_t device, const fabric::NetdevState& m) {
    for (const Port& p : state_.ports()) {
      if (p.in_use && !p.iface && !p.uplink && p.device == device && p.conn_fd >= 0) {
        if (send(p.conn_fd, &m, sizeof m, MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof m) {
          Log("telling process %d about %s: %s", p.pid, state_.devices()[device].name.c_str(), std::strerror(errno));
        }
      }
    }
    RefreshCmDevices();
  }

  // A process's kOpResolve: the kernel's answer, now or once it resolved
  // the neighbour, goes back on the request's connection if it is still the
  // same one.
  void StartResolve(const Conn& c, const fabric::Reply& pending, const ResolveQuery& q) {
    const int fd = c.fd;
    const uint64_t serial = c.serial;
    fabric::Reply base = pending;
    netdev_.Resolve(q.device, q.sgid, q.dgid, q.timeout_ms,
                    [this, fd, serial, base](uint32_t, const core::Gid& dst, int error, const core::Mac& mac) {
                      bool open = false;
                      for (const Conn& k : conns_) open |= k.fd == fd && k.serial == serial;
                      if (!open) return;
                      fabric::Reply r = base;
                      r.error = error;
                      std::memcpy(r.mac, mac.data(), 6);
                      if (error != 0) {
                        std::snprintf(r.message, sizeof r.message, "%s: %s", netdev::FormatIp(dst).c_str(),
                                      std::strerror(error));
                      }
                      send(fd, &r, sizeof r, MSG_DONTWAIT | MSG_NOSIGNAL);
                    });
  }

  // --- Direct paths (doc/droced.md "Direct rings"): the rings between two
  // processes are set up here and handed to both over their control
  // connections; the daemon never maps them and keeps no descriptor.
  void SyncPaths() {
    for (const PathChange& c : state_.SyncDirectPaths()) {
      if (c.add) {
        if (!SetUpPath(c.path)) state_.ForgetDirectPath(c.path.id);
        continue;
      }
      for (int side = 0; side < 2; ++side) {
        if (c.notify[side]) SendPathRemoval(c.path.port[side], c.path.id);
      }
      Log("direct path %lu (attachments %u - %u) withdrawn", c.path.id, c.path.attachment_id[0], c.path.attachment_id[1]);
    }
  }

  ethdev::PeerMessage PathMessage(int port, uint64_t id, uint16_t op) {
    ethdev::PeerMessage m{};
    m.magic = ethdev::kPeerMagic;
    m.version = ethdev::kPeerVersion;
    m.op = op;
    m.size = sizeof m;
    m.generation = ++state_.ports()[port].peer_generation;
    m.path_id = id;
    return m;
  }

  void SendPathRemoval(int port, uint64_t id) {
    const ethdev::PeerMessage m = PathMessage(port, id, ethdev::kPeerRemove);
    if (const int err = ethdev::SendPeerMessage(state_.ports()[port].conn_fd, m, nullptr, 0); err != 0) {
      Log("telling process %d that direct path %lu is gone: %s", state_.ports()[port].pid, id, std::strerror(err));
    }
  }

  bool SetUpPath(const DirectPath& d) {
    const Port& a = state_.ports()[d.port[0]];
    const Port& b = state_.ports()[d.port[1]];
    const uint32_t slot_bytes = pktio::FrameRing::kDefaultSlotBytes;
    const size_t bytes = 2 * pktio::FrameRing::Bytes(ring_slots_, slot_bytes);
    // Named for /proc/PID/maps (tests/fabric: only the pair maps it).
    const std::string name = absl::StrFormat("droce-ring-%lu-%d-%d", d.id, a.pid, b.pid);
    const int mem = ethdev::CreateRingMemfd(name, bytes);
    int efd[2] = {eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
    bool ok = mem >= 0 && efd[0] >= 0 && efd[1] >= 0;
    int sent = 0;
    for (int side = 0; ok && side < 2; ++side) {
      const Port& me = side == 0 ? a : b;
      const Port& peer = side == 0 ? b : a;
      ethdev::PeerMessage m = PathMessage(d.port[side], d.id, ethdev::kPeerAdd);
      std::memcpy(m.peer_mac, state_.devices()[peer.device].mac.data(), 6);
      m.peer_qpn_base = peer.slot * fabric::kQpnsPerProcess;
      m.peer_qpn_count = fabric::kQpnsPerProcess;
      m.slots = ring_slots_;
      m.slot_bytes = slot_bytes;
      m.my_ring = static_cast<uint32_t>(side);
      m.peer_pid = static_cast<uint32_t>(peer.pid);
      m.marker_key = d.marker_key;
      const int fds[3] = {mem, efd[side], efd[1 - side]};
      const int err = ethdev::SendPeerMessage(me.conn_fd, m, fds, 3);
      if (err != 0) {
        Log("direct path %lu: telling process %d: %s", d.id, me.pid, std::strerror(err));
        ok = false;
      } else {
        ++sent;
      }
    }
    if (!ok && sent == 1) SendPathRemoval(d.port[0], d.id);
    if (!ok && mem < 0) Log("direct path %lu: memfd: %s", d.id, std::strerror(errno));
    for (int fd : {mem, efd[0], efd[1]}) {
      if (fd >= 0) close(fd);
    }
    if (ok) {
      Log("direct path %lu: process %d (attachment %u) <-> process %d (attachment %u), %u slots each way", d.id, a.pid,
          a.memif_id, b.pid, b.memif_id, ring_slots_);
    }
    return ok;
  }

  // --- The connection manager (cm_service.h): ucma commands from event
  // channels, GSI frames, timers.
  void RefreshCmDevices() {
    std::vector<CmDevice> devs;
    for (const FabricDevice& d : state_.devices()) {
      CmDevice c;
      c.name = d.name;
      std::memcpy(c.mac.data(), d.mac.data(), 6);
      const uint8_t eui[8] = {static_cast<uint8_t>(d.mac[0] ^ 2), d.mac[1], d.mac[2], 0xff, 0xfe,
                              d.mac[3], d.mac[4], d.mac[5]};
      for (uint8_t b : eui) c.guid = (c.guid << 8) | b;  // sysfs node_guid's value
      for (const core::Gid& g : d.gids) {
        cm::Gid x;
        std::memcpy(x.data(), g.data(), 16);
        c.gids.push_back(x);  // a netdev-bound device's holes are zero GIDs, matched by nothing
      }
      if (d.netdev_bound) {
        c.path_mtu = d.active_mtu;
        c.netdev = true;
      }
      devs.push_back(std::move(c));
    }
    cm_.SetDevices(std::move(devs));
  }

  // A frame the daemon itself sends to another host: out of the uplink,
  // counted as the switch counts what it forwards there. False: no uplink,
  // or it did not take the frame.
  bool SendToUplink(const uint8_t* frame, uint32_t len) { return SendOut(state_.uplink(), frame, len); }

  // Out of switch port `u` (the uplink, or a netdev-bound device's interface).
  bool SendOut(int u, const uint8_t* frame, uint32_t len) {
    if (u < 0) return false;
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) return false;
    char* p = rte_pktmbuf_append(m, static_cast<uint16_t>(len));
    if (p == nullptr) {
      rte_pktmbuf_free(m);
      return false;
    }
    std::memcpy(p, frame, len);
    Port& port = state_.ports()[u];
    if (rte_eth_tx_burst(static_cast<uint16_t>(port.handle), 0, &m, 1) != 1) {
      rte_pktmbuf_free(m);
      ++port.counters.tx_dropped;
      return false;
    }
    if (port.iface) {
      ++state_.device(port.device).counters.to_netdev;
    } else {
      ++state_.counters().to_uplink;
    }
    ++port.counters.tx_packets;
    port.counters.tx_bytes += len;
    return true;
  }

  // The CM's neighbour resolution over the uplink: an ARP request from the
  // device for `target` (an IPv4-mapped GID), or a neighbour solicitation to
  // its solicited-node group (RFC 4861 7.2.2); the answer is heard by CmSnoopArp.
  void CmArp(int dev, const cm::Gid& source, const cm::Gid& target) {
    if (dev < 0 || static_cast<size_t>(dev) >= state_.devices().size()) return;
    const FabricDevice& d = state_.devices()[dev];
    if (!IsIpv4MappedGid(target)) {
      wire::NdPacket ns;
      ns.type = wire::kNdSolicit;
      std::memcpy(ns.eth_src.data(), d.mac.data(), 6);
      ns.src = source;
      ns.dst = wire::SolicitedNodeMulticast(target);
      ns.eth_dst = wire::MulticastMac(ns.dst);
      ns.target = target;
      ns.has_lla = true;
      ns.lla = ns.eth_src;
      uint8_t buf[wire::kNdFrameMaxBytes];
      const uint32_t len = wire::BuildNd(ns, d.vlan, d.vlan_tci, buf);
      if (trace_ != nullptr) TraceBytes(buf, len);
      SendToUplink(buf, len);
      return;
    }
    wire::ArpPacket a;
    a.op = wire::kArpRequest;
    std::memcpy(a.sender_mac.data(), d.mac.data(), 6);
    a.sender_ip = wire::LoadBe32(source.data() + 12);
    a.target_ip = wire::LoadBe32(target.data() + 12);
    uint8_t buf[wire::kArpFrameBytes + wire::kVlanTagBytes];
    const uint32_t len = wire::BuildArp(a, d.vlan, d.vlan_tci, buf);
    if (trace_ != nullptr) TraceBytes(buf, len);
    SendToUplink(buf, len);
  }

  // Every ARP and every valid NS/NA with a link-layer address from the
  // uplink tells the CM where a host is (Linux's neighbour table learns the
  // same way): an ARP's sender, an NA's target, an NS's source.
  void CmSnoopArp(const uint8_t* frame, uint32_t len) {
    cm::Gid g{};
    std::array<uint8_t, 6> mac{};
    wire::ArpPacket a;
    wire::NdPacket nd;
    if (wire::ParseArp(frame, len, &a)) {
      if (a.sender_ip == 0) return;
      g[10] = g[11] = 0xFF;
      wire::StoreBe32(g.data() + 12, a.sender_ip);
      mac = a.sender_mac;
    } else if (wire::ParseNd(frame, len, &nd) == wire::NdParse::kOk && nd.has_lla) {
      if (nd.type == wire::kNdAdvert) {
        g = nd.target;
      } else if (!wire::IsUnspecified(nd.src)) {
        g = nd.src;
      } else {
        return;
      }
      mac = nd.lla;
    } else {
      return;
    }
    cm_.LearnNeighbour(g, mac, NowNs() / 1'000'000);
    CmNotify();
  }

  // A MAD leaves device `dev`'s QP1 as a RoCEv2 frame. A destination that
  // is a fabric device's QP1 is this same CM: the frame is queued and parsed
  // back by CmSettle (and traced); any other goes out of the uplink.
  void CmSend(int dev, const GsiPath& path, const std::array<uint8_t, cm::kMadSize>& mad) {
    std::vector<uint8_t> frame(kGsiFrameMax);
    frame.resize(BuildGsiFrame(path, mad, gsi_psn_++, frame.data()));
    int to = -1;
    for (size_t k = 0; k < state_.devices().size(); ++k) {
      if (std::memcmp(state_.devices()[k].mac.data(), path.dst_mac.data(), 6) == 0) to = static_cast<int>(k);
    }
    if (trace_ != nullptr) TraceBytes(frame.data(), static_cast<uint32_t>(frame.size()));
    if (to < 0) {
      // Another host: a netdev-bound device's MADs leave by its interface,
      // a fabric device's by the uplink.
      const FabricDevice* d = dev >= 0 && static_cast<size_t>(dev) < state_.devices().size() ? &state_.devices()[dev]
                                                                                          : nullptr;
      const bool sent = d != nullptr && d->netdev_bound
                            ? d->port_active && SendOut(d->iface_port, frame.data(), static_cast<uint32_t>(frame.size()))
                            : SendToUplink(frame.data(), static_cast<uint32_t>(frame.size()));
      if (!sent) ++state_.counters().rx_unknown_dst;
      return;
    }
    gsi_queue_.emplace_back(to, std::move(frame));
  }

  // Delivers queued GSI frames (their answers may queue more) and tells
  // event channels that have events waiting.
  void CmSettle() {
    CmDeliver();
    CmNotify();
  }

  void CmDeliver() {
    // Next hops the kernel resolved for the CM (netdev-bound devices).
    while (!kernel_answers_.empty()) {
      const KernelAnswer a = kernel_answers_.front();
      kernel_answers_.pop_front();
      cm_.KernelNeighbour(a.device, a.target, a.error, a.mac);
    }
    for (int guard = 0; !gsi_queue_.empty() && guard < 1024; ++guard) {
      auto [dev, frame] = std::move(gsi_queue_.front());
      gsi_queue_.pop_front();
      cm_.OnGsiFrame(dev, frame.data(), static_cast<uint32_t>(frame.size()), NowNs() / 1'000'000);
    }
  }

  // A notification goes after any reply: the shim reads a command's reply
  // as the first datagram that is not one, and counts what it skipped.
  void CmNotify() {
    for (auto& [fd, ch] : cm_conns_) {
      uint32_t& outstanding = ch.outstanding;
      if (outstanding == 0 && cm_.PendingEvents(fd) > 0) {
        cmproto::CmReply n{cmproto::kCmMagic, cmproto::kCmVersion, cmproto::kCmNotify, sizeof n, 0,
                           static_cast<uint32_t>(cm_.PendingEvents(fd)), 0};
        if (send(fd, &n, sizeof n, MSG_DONTWAIT | MSG_NOSIGNAL) == sizeof n) outstanding = 1;
      }
    }
  }

  void CmTimers() {
    const uint64_t now = NowNs() / 1'000'000;
    if (const auto d = cm_.NextDeadline(); d && *d <= now) {
      cm_.OnTimer(now);
      CmSettle();
    }
  }

  void ServeCm(int fd, const char* buf, size_t n) {
    cmproto::CmReply r{cmproto::kCmMagic, cmproto::kCmVersion, cmproto::kCmReply, sizeof r, 0, 0, 0};
    cmproto::CmRequest q;
    std::vector<uint8_t> out;
    if (n < sizeof q) {
      r.error = EINVAL;
    } else {
      std::memcpy(&q, buf, sizeof q);
      if (q.version != cmproto::kCmVersion) {
        r.error = EPROTONOSUPPORT;
      } else if (q.size != n || q.command_len > cmproto::kMaxCommandBytes || q.option_len > cmproto::kMaxOptionBytes ||
                 sizeof q + uint64_t{q.command_len} + q.option_len != n ||
                 (q.kind != cmproto::kCmCommand && q.kind != cmproto::kCmSync)) {
        r.error = EINVAL;
      } else {
        CmChannel& ch = cm_conns_[fd];
        while (ch.token == 0) {  // unguessable: a token is what lets a channel take ids
          if (getrandom(&ch.token, sizeof ch.token, 0) != sizeof ch.token) ch.token = NowNs() ^ ++cm_token_salt_;
        }
        ch.outstanding -= std::min(ch.outstanding, q.notifies_consumed);
        const auto* p = reinterpret_cast<const uint8_t*>(buf) + sizeof q;
        std::span<const uint8_t> option(p + q.command_len, q.option_len);
        rdma_ucm_cmd_hdr hdr{};
        if (q.command_len >= sizeof hdr) std::memcpy(&hdr, p, sizeof hdr);
        int dest = -1;
        if (q.kind == cmproto::kCmCommand && hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID) {
          // The id's current channel, by its token (drivers/rdmacm/cm_protocol.h).
          uint64_t token = 0;
          if (option.size() == sizeof token) std::memcpy(&token, option.data(), sizeof token);
          for (const auto& [other, och] : cm_conns_) {
            if (token != 0 && och.token == token) dest = other;
          }
          option = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&dest), sizeof dest);
        }
        if (q.kind == cmproto::kCmCommand) {
          RefreshCmDevices();
          CmService::Result res =
              cm_.Command(fd, std::span<const uint8_t>(p, q.command_len), NowNs() / 1'000'000, option);
          r.error = res.error;
          out = std::move(res.out);
        } else {
          out.resize(sizeof ch.token);
          std::memcpy(out.data(), &ch.token, sizeof ch.token);
        }
      }
    }
    CmDeliver();
    r.events_pending = static_cast<uint32_t>(cm_.PendingEvents(fd));
    r.payload_len = static_cast<uint32_t>(out.size());
    r.size = static_cast<uint32_t>(sizeof r + out.size());
    std::string msg(reinterpret_cast<const char*>(&r), sizeof r);
    msg.append(reinterpret_cast<const char*>(out.data()), out.size());
    send(fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    CmNotify();  // for what the command queued (here or on other channels), after the reply
  }

  void TraceBytes(const uint8_t* data, uint32_t len) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint32_t rec[4] = {static_cast<uint32_t>(ts.tv_sec), static_cast<uint32_t>(ts.tv_nsec / 1000), len, len};
    std::fwrite(rec, sizeof rec, 1, trace_);
    std::fwrite(data, 1, len, trace_);
  }

  static constexpr size_t kMaxConns = 1024;
  std::string run_dir_;
  rte_mempool* pool_;
  int uplink_port_ = -1;
  bool uplink_retry_ = false;  // a memif client uplink whose server did not listen: start it again
  uint64_t next_uplink_try_ = 0;
  // Only after a start that failed (connect refused): restarting a client
  // mid-handshake makes DPDK 22.11's server close a socket its interrupt
  // thread still watches (drivers/verbs/fabric_link.cc's CheckLink).
  void RetryUplink() {
    const uint64_t now = NowNs();
    if (!uplink_retry_ || now < next_uplink_try_) return;
    next_uplink_try_ = now + 1'000'000'000;
    rte_eth_dev_stop(static_cast<uint16_t>(uplink_port_));
    uplink_retry_ = rte_eth_dev_start(static_cast<uint16_t>(uplink_port_)) != 0;
    if (!uplink_retry_) Log("uplink: connected to its server");
  }
  ProcessPorts ports_;
  FabricState state_;
  NetdevBinder netdev_;
  CmService cm_;
  struct CmChannel {
    uint32_t outstanding = 0;  // notifications sent and not yet reported read
    uint64_t token = 0;        // names the channel in rdma_migrate_id
  };
  std::map<int, CmChannel> cm_conns_;  // by event channel fd
  uint64_t cm_token_salt_ = 0;
  uint64_t conn_serial_ = 0;
  std::deque<std::pair<int, std::vector<uint8_t>>> gsi_queue_;
  struct KernelAnswer {
    int device;
    core::Gid target;
    int error;
    core::Mac mac;
  };
  std::deque<KernelAnswer> kernel_answers_;
  uint32_t gsi_psn_ = 0;
  int listen_fd_ = -1;
  bool busy_poll_ = false;  // never sleep (a core of its own: benchmarks)
  uint64_t busy_window_ns_ = 0;  // spin this long after the last frame (--busy-window-us)
  bool realtime_ = true;
  uint32_t ring_slots_ = kDefaultRingSlots;  // per direction of a direct path (--ring-slots)

  // Every frame between two processes crosses this loop, so it must run as
  // soon as it wakes. Under SCHED_OTHER, next to two programs spinning on
  // their CQs and a loaded 2-core machine, a 5 us sleep was measured to end
  // 545 ms later (strace -T) and QPs ran out of retries; a short EEVDF slice
  // and nice -20 did not prevent it. A low SCHED_FIFO priority does (the
  // loop sleeps whenever it is idle, and the kernel's RT throttling caps it
  // at 95% of a CPU). Without the privilege: nice -10 and a short slice.
  void SchedulePollLoop() {
    sched_param sp{};
    sp.sched_priority = 1;
    if (realtime_ && sched_setscheduler(0, SCHED_FIFO, &sp) == 0) {
      Log("poll loop: SCHED_FIFO priority 1");
      return;
    }
    const int err = errno;
    (void)setpriority(PRIO_PROCESS, 0, -10);
    RequestShortSlice(100);
    Log("poll loop: SCHED_OTHER%s (latency under load suffers; %s)", realtime_ ? "" : " (--no-realtime)",
        realtime_ ? std::strerror(err) : "as asked");
  }
  std::vector<Conn> conns_;
  Stage stages_[kMaxPorts];
  struct HeldMarker {
    int port = -1;
    uint32_t attachment = 0;  // the port's memif_id when held: a reused index is another process
    uint8_t frame[fabric::kPathMarkerBytes] = {};
  };
  std::vector<HeldMarker> held_markers_;  // few: paths being set up to a full ring
  static constexpr size_t kMaxHeldMarkers = 1024;
  rte_mbuf* held_[kMaxPorts] = {};  // the reorder knob's frame per port
  size_t queued_ = 0;               // frames in the devices' bottleneck queues
  uint32_t nheld_ = 0;               // frames held since the last FlushHeld (0: nothing to scan)
  struct MirrorFile {
    std::string path;
    std::FILE* file = nullptr;
  };
  std::map<uint32_t, MirrorFile> mirrors_;  // per device
  int dirty_[kMaxPorts * kBurst];
  std::unique_ptr<ethdev::RxWakeup> wakeups_[kMaxPorts];  // per port index, for memif wakeup_memif_[i]
  uint32_t wakeup_memif_[kMaxPorts] = {};
  uint32_t prefaulted_memif_[kMaxPorts] = {};  // the memif whose region was prefaulted, per port index
  uint32_t armed_[kMaxPorts] = {};
  int armed_ring_[kMaxPorts] = {};  // the armed port's RingPorts handle, -1: an ethdev port
  int wake_fds_[kMaxPorts] = {};
  uint32_t nwake_ = 0;
  uint32_t ndirty_ = 0;
};

// The run directory's pid file, locked (one daemon per directory); -1 with
// the reason on stderr when it cannot be opened or another daemon holds it.
int LockPidFile(const std::string& pid_path, const std::string& run_dir) {
  const int pid_fd = open(pid_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (pid_fd < 0) {
    std::fprintf(stderr, "droced: %s: %s\n", pid_path.c_str(), std::strerror(errno));
    return -1;
  }
  if (flock(pid_fd, LOCK_EX | LOCK_NB) != 0) {
    char other[32] = {};
    (void)!pread(pid_fd, other, sizeof other - 1, 0);
    other[std::strcspn(other, "\n")] = '\0';
    std::fprintf(stderr, "droced: already running for %s (pid %s)\n", run_dir.c_str(), other);
    close(pid_fd);
    return -1;
  }
  return pid_fd;
}

// Forks into the background. The parent waits until the daemon says it
// listens (a byte on the pipe whose write end `*ready_fd` the child keeps)
// and returns its exit code; the child returns nullopt with stdin on
// /dev/null and stdout/stderr on the run directory's log.
std::optional<int> Detach(const std::string& run_dir, int* ready_fd) {
  int ready_pipe[2] = {-1, -1};
  if (pipe2(ready_pipe, O_CLOEXEC) != 0) return 1;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child > 0) {
    close(ready_pipe[1]);
    char ok = 0;
    const bool ready = read(ready_pipe[0], &ok, 1) == 1 && ok == 1;
    if (!ready) std::fprintf(stderr, "droced: failed to start, see %s\n", fabric::LogFilePath(run_dir).c_str());
    return ready ? 0 : 1;
  }
  close(ready_pipe[0]);
  *ready_fd = ready_pipe[1];
  setsid();
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  const int log_fd = open(fabric::LogFilePath(run_dir).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (null_fd >= 0) dup2(null_fd, 0);
  if (log_fd >= 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
  }
  return std::nullopt;
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (DaemonWantsHelp(args)) {
    std::fputs(DaemonUsage().c_str(), stdout);
    return 0;
  }
  absl::StatusOr<DaemonOptions> options = ParseDaemonOptions(args, verbs::DefaultRunDir(), std::getenv);
  if (!options.ok()) {
    std::fprintf(stderr, "droced: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  std::string run_dir = options->run_dir;
  const bool foreground = options->foreground;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  run_dir = std::filesystem::weakly_canonical(run_dir, ec).string();
  // One daemon per run directory: the pid file's lock says who it is.
  const std::string pid_path = fabric::PidFilePath(run_dir);
  const int pid_fd = LockPidFile(pid_path, run_dir);
  if (pid_fd < 0) return 1;
  int ready_fd = -1;
  if (!foreground) {
    if (std::optional<int> parent_exit = Detach(run_dir, &ready_fd)) return *parent_exit;
  }
  const std::string pid_text = absl::StrCat(getpid(), "\n");
  (void)!ftruncate(pid_fd, 0);
  (void)!pwrite(pid_fd, pid_text.data(), pid_text.size(), 0);

  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);

  // The memif socket: a dead daemon's file would make the listener fail.
  const std::string memif_socket = fabric::MemifSocketPath(run_dir);
  unlink(memif_socket.c_str());
  ethdev::EalConfig eal;
  eal.file_prefix = absl::StrFormat("droced-%08x", Fnv(run_dir));
  eal.memory_mb = options->memory_mb;
  eal.hugepages = options->hugepages;
  eal.extra_args = options->eal_args;
  if (options->uplink && options->uplink->kind == UplinkSpec::Kind::kPci) {
    eal.pci = true;  // only the uplink's device: allow-listed
    eal.extra_args.insert(eal.extra_args.begin(), {"-a", options->uplink->vdev});
  }
  // An interface of the daemon's own that is never started (no client can
  // connect to it): it keeps the socket's listener for the daemon's life, so
  // processes coming and going never tear it down and re-create it.
  char pin_secret[17] = {};
  for (int i = 0; i < 16; ++i) pin_secret[i] = "0123456789abcdef"[(Fnv(run_dir) + NowNs() * (i + 7)) % 16];
  eal.vdevs = {ethdev::MemifVdevArgs(
      {.name = "net_memif_droced", .server = true, .id = 0, .socket = memif_socket, .secret = pin_secret})};
  absl::Status s = ethdev::StartEal(eal);
  if (s.ok() && !ethdev::InstallUnmapGuard()) Log("no SIGSEGV guard for memif's unmap race: %s", std::strerror(errno));
  rte_mempool* pool = s.ok() ? rte_pktmbuf_pool_create("droced_pool", 16383, 256, 0, kDataRoom, SOCKET_ID_ANY)
                             : nullptr;
  if (s.ok() && pool == nullptr) s = absl::ResourceExhaustedError(rte_strerror(rte_errno));
  // Frames a bottleneck still holds when it is replaced or its device goes.
  SwitchKnobs::set_frame_free([](void* m) { rte_pktmbuf_free(static_cast<rte_mbuf*>(m)); });
  auto* daemon = s.ok() ? new Daemon(run_dir, pool, options->link_slots) : nullptr;
  if (daemon != nullptr) {
    daemon->set_busy_poll(options->busy_poll);
    daemon->set_busy_window_us(options->busy_window_us);
    daemon->set_realtime(options->realtime);
    daemon->set_direct(options->direct, options->ring_slots);
    s = daemon->Listen();
    if (s.ok() && options->uplink) s = daemon->OpenUplink(*options->uplink);
  }
  if (!s.ok()) {
    Log("cannot start: %s", std::string(s.message()).c_str());
    return 1;
  }
  Log("serving %s (pid %d, control %s, memif %s)", run_dir.c_str(), getpid(),
      fabric::ControlSocketPath(run_dir).c_str(), memif_socket.c_str());
  if (ready_fd >= 0) {
    const char ok = 1;
    (void)!write(ready_fd, &ok, 1);
    close(ready_fd);
  }
  if (const char* trace = std::getenv("DROCED_TRACE"); trace != nullptr) daemon->OpenTrace(trace);
  daemon->Run();
  daemon->CloseTrace();
  delete daemon;
  unlink(memif_socket.c_str());
  unlink(pid_path.c_str());
  Log("stopped");
  return 0;
}

}  // namespace
}  // namespace droce::droced

int main(int argc, char** argv) { return droce::droced::Main(argc, argv); }
