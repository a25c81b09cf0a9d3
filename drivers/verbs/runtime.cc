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
#include "drivers/ethdev/prefault.h"
#include "drivers/verbs/abi.h"
#include "drivers/fabric/protocol.h"
#include "drivers/verbs/tsc_clock.h"
#include "transport/sr/selective_repeat.h"

namespace droce::verbs {

uint64_t NowNs() {
  static TscClock clock;  // CLOCK_MONOTONIC from the TSC (tsc_clock.h)
  return clock.Now();
}

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

// A fabric port's mbuf pool (PortConfig): the device's loopback ring (1024
// frames), the lcores' caches (the program's EAL thread and the progress
// thread, up to 1.5 x the cache each) and the bursts in flight fit in it.
constexpr uint32_t kFabricPortMbufs = 2047;
constexpr uint32_t kFabricPortMempoolCache = 128;

inline void CpuRelax() { __builtin_ia32_pause(); }

void SleepUs(uint32_t us) {
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}
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

absl::Status Runtime::AttachFabric(uint32_t want_qpn_base) {
  const std::string control = fabric::ControlSocketPath(file_.fabric_dir);
  fabric_fd_ = fabric::Connect(control);
  if (fabric_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("the fabric daemon is not running (", control, ": ",
                                               std::strerror(errno), "); start it with `droce-ctl daemon start`"));
  }
  fabric::Request req = fabric::MakeRequest(fabric::kOpAttach, file_.name);
  req.want_qpn_base = want_qpn_base;
  absl::StatusOr<fabric::Reply> r = fabric::Call(fabric_fd_, req, 10000);
  if (!r.ok()) return r.status();
  if (r->error != 0) {
    return absl::UnavailableError(absl::StrCat("droced refused to attach: ", r->message, " (",
                                               std::strerror(r->error), ")"));
  }
  if (std::memcmp(r->mac, file_.dev.mac.data(), 6) != 0) {
    return absl::FailedPreconditionError("droced knows the device with another MAC (re-register it)");
  }
  if (r->qpn_count == 0 || r->qpn_base < 2 || r->qpn_base + r->qpn_count > fabric::kQpnSpace ||
      (want_qpn_base != 0 && (r->qpn_base != want_qpn_base || r->qpn_count < file_.dev.max_qp))) {
    return absl::FailedPreconditionError("droced gave an invalid QPN range");
  }
  // A netdev-bound device: the interface's state follows the reply (its
  // GID table, its port), before anything else on the connection.
  if (file_.netdev_bound) {
    pollfd pfd{fabric_fd_, POLLIN, 0};
    fabric::NetdevState m{};
    if (poll(&pfd, 1, 2000) != 1 || recv(fabric_fd_, &m, sizeof m, MSG_DONTWAIT) != sizeof m ||
        m.magic != fabric::kNetdevMagic || m.version != fabric::kNetdevVersion || m.size != sizeof m) {
      return absl::UnavailableError("droced sent no state of the device's interface");
    }
    first_netdev_state_ = m;
    has_netdev_state_ = true;
  }
  // Only QPNs of our range: the daemon steers the device's others to the
  // processes that own them.
  file_.dev.qpn_base = r->qpn_base;
  file_.dev.max_qp = std::min(file_.dev.max_qp, r->qpn_count);
  // The client lays out the shared memory (2 rings of 1024 buffers): buffers
  // the size of droce's largest frame, all the fabric carries to a process.
  file_.vdev = absl::StrCat("net_memif_", file_.name, "_fabric,role=client,socket=", r->memif_socket,
                            ",id=", r->memif_id, ",secret=", r->secret,
                            ",socket-abstract=no,bsize=", pktio::kMaxFrameBytes);
  return absl::OkStatus();
}

absl::Status Runtime::Start() {
  if (file_.fabric) {
    absl::Status s = AttachFabric(0);
    if (!s.ok()) return s;
  }
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
  pc.memif_listener_path = ethdev::MemifListenerPath(file_.vdev);
  if (file_.fabric) {
    // memif copies each frame between its shared buffers and our mbufs
    // within the burst, so the pool holds only the frames the device keeps:
    // its loopback ring (1024), a burst each way, the lcores' caches. Each
    // open device costs this much (doc/verbs.md "Memory per open device").
    pc.droce_frames_only = true;
    pc.mbufs = kFabricPortMbufs;
    pc.mempool_cache = kFabricPortMempoolCache;
  }
  absl::StatusOr<std::unique_ptr<ethdev::EthdevPort>> port = ethdev::EthdevPort::Open(pc);
  if (!port.ok()) return port.status();
  port_ = std::move(*port);
  next_reconnect_ns_ = NowNs() + 100'000'000;
  attempt_ns_ = NowNs();
  link_up_ = port_->RefreshLink();
  if (file_.fabric) {
    direct_ = std::make_unique<ethdev::DirectIo>(port_.get(), file_.dev.mac, file_.dev.qpn_base, file_.dev.max_qp);
  }
  dev_ = std::make_unique<core::Device>(file_.dev, direct_ ? static_cast<pktio::BurstIo*>(direct_.get()) : port_.get());
  if (has_netdev_state_) ApplyNetdevState(first_netdev_state_, /*events=*/false);
  if (file_.fabric) {
    dev_->loopback().SetOwnQpns(dev_->qpn_base(), dev_->config().max_qp);
    // The daemon listens already: the handshake takes milliseconds. QPs of
    // the device in other processes are reached only through it.
    link_up_ = port_->WaitLinkUp(static_cast<int>(file_.link_wait_ms));
  }
  if (link_up_) PrefaultWire();
  if (file_.progress.wakeup) {
    std::string why_not;
    wakeup_ = ethdev::RxWakeup::For(port_->port_id(), &why_not);
    if (wakeup_ == nullptr && std::getenv("DROCE_DEBUG") != nullptr) {
      std::fprintf(stderr, "droce %s: no wake-up on arrival (%s)\n", file_.name.c_str(), why_not.c_str());
    }
  }
  for (const auto& [gid, mac] : file_.neighbors) dev_->AddNeighbor(gid, mac);
  event_socket_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (event_socket_ < 0) return absl::UnavailableError("cannot create the event socket");
  // The progress thread starts with every signal blocked: the program's
  // handlers run in the program's threads (a blocked waiter in
  // WaitForChannel finds a process-directed signal pending and returns
  // EINTR, as its read() would).
  sigset_t all, old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old_mask);
  progress_ = std::thread([this] { ProgressLoop(); });
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
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
    direct_.reset();  // unmaps the rings
    // A program may open the device again (qperf does per test): the vdev
    // must go too, or probing it again fails. Removing it closes the port.
    wakeup_.reset();
    // A peer that exits as we do closes its memif socket, and DPDK's
    // interrupt thread then tears the connection down (memif_disconnect)
    // while our close would do the same: two teardowns at once fault in
    // 22.11 (seen: rte_dev_remove -> memif close, SIGSEGV, the interrupt
    // thread inside its own disconnect). The port is stopped and closed on
    // that thread, in turn (EthdevPort::Stop; test
    // BothEndsOfAMemifClosingAtOnceDoNotRace); the vdev removal then finds
    // the port closed. The pauses, from before, stay as margin.
    if (port_ && file_.vdev.rfind("net_memif", 0) == 0 && !port_->LinkUp()) usleep(30'000);
    if (port_) port_->Stop(/*close=*/true);
    (void)ethdev::RemoveVdev(file_.port_name());
    // A peer that left during our close: the interrupt thread's disconnect
    // frees the interface's mbufs into our pools, so the pools go only after
    // it has had time to finish (seen in CI: ~EthdevPort's rte_mempool_free
    // while the interrupt thread was inside memif, SIGSEGV at exit).
    if (port_ && file_.vdev.rfind("net_memif", 0) == 0) usleep(30'000);
    port_.reset();
  }
  if (event_socket_ >= 0) close(event_socket_);
  // After the memif interface went: the daemon then frees it and our QPNs.
  if (fabric_fd_ >= 0) close(fabric_fd_);
}

// DROCE_STATS=1: the device's and every QP's counters on stderr at close,
// for users who want to know what the wire did (drops, NAKs, retransmits).
void Runtime::PrintStats() {
  const core::DeviceCounters& c = dev_->counters();
  const ethdev::PortStats& p = port_->stats();
  if (direct_) {
    const ethdev::DirectCounters& d = direct_->counters();
    std::fprintf(stderr,
                 "droce %s: direct paths %zu (table %u): tx %lu (ring full %lu) rx %lu rx_not_mine %lu "
                 "rx_bad_length %lu wakeups sent %lu, paths added %lu removed %lu, messages refused %lu\n",
                 file_.name.c_str(), direct_->paths(), direct_->generation(), d.tx_direct, d.tx_ring_full,
                 d.rx_direct, d.rx_not_mine, d.rx_bad_length, d.wakeups_sent, d.paths_added, d.paths_removed,
                 d.messages_refused);
  }
  std::fprintf(stderr,
               "droce %s: link %s, reconnects %lu, port rx %lu tx %lu rx_multi_segment %lu unmap_faults %lu, looped "
               "%lu, fabric losses %lu re-attaches %lu\n",
               file_.name.c_str(), port_->LinkUp() ? "up" : "down", reconnects_, p.rx_packets, p.tx_packets,
               p.rx_multi_segment, p.unmap_faults, dev_->loopback_counters().looped, fabric_losses_,
               fabric_reattaches_);
  std::fprintf(stderr,
               "droce %s: rx %lu pkts %lu B, tx %lu pkts %lu B, port tx_full %lu, progress polls %lu sleeps %lu "
               "(woken by arrival %lu, %s; %s%s, demoted %lu, yielded to the program %lu, auto to FIFO %lu to OTHER %lu, program not running %lu%s), stood aside %lu, pm_qos holds %lu, events %lu comp (%lu handed over in process) %lu async, event waits "
               "slept %lu (woken by arrival %lu), posts left for the owner %lu\n",
               file_.name.c_str(), c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes, p.tx_full,
               stats_.progress_polls.load(), stats_.progress_sleeps.load(), stats_.progress_arrival_wakeups.load(), wakeup_ ? wakeup_->kind() : "timed sleeps only",
               progress_fifo_.load() ? "SCHED_FIFO" : "SCHED_OTHER",
               stats_.progress_nice_refused.load() != 0 ? " progress_nice refused" : "", stats_.progress_fifo_demotions.load(),
               stats_.progress_fifo_yields.load(), stats_.progress_auto_to_fifo.load(),
               stats_.progress_auto_to_other.load(), stats_.progress_auto_not_running.load(),
               stats_.progress_auto_refused.load() != 0 ? " (SCHED_FIFO refused)" : "",
               stats_.progress_stand_asides.load(), stats_.pm_qos_holds.load(),
               stats_.comp_events.load(), stats_.events_handed_over.load(), stats_.async_events.load(),
               stats_.event_wait_sleeps.load(), stats_.event_wait_arrivals.load(),
               stats_.posts_left_for_owner.load());
  // Every device counter (lib/core DROCE_DEVICE_COUNTERS and the parse drops).
  std::string line = absl::StrCat("droce ", file_.name, " device:");
  core::ForEachDeviceCounter(c, [&](const char* name, uint64_t v) { absl::StrAppend(&line, " ", name, " ", v); });
  std::fprintf(stderr, "%s\n", line.c_str());
  for (uint32_t qpn = dev_->qpn_base(); qpn < dev_->qpn_base() + dev_->config().max_qp; ++qpn) PrintQpStats(qpn);
}

// One QP's counters (DROCE_STATS=1): at close for the QPs still open, and
// when a QP is destroyed (perftest destroys its QPs before closing).
void Runtime::PrintQpStats(uint32_t qpn) {
  transport::Qp* q = dev_->qp(qpn);
  if (q == nullptr) return;
  {
    const transport::QpCounters& k = q->counters();
    std::fprintf(stderr,
                 "droce %s qp %u: tx %lu rx %lu retransmitted %lu timeouts %lu naks sent %lu (seq %lu, rnr %lu) "
                 "received %lu (rnr %lu) duplicates %lu out_of_sequence %lu acks sent %lu received %lu solicited %lu "
                 "dropped_wrong_state %lu state %s selective_repeat %s sr_sacks_sent %lu sr_sacks_received %lu "
                 "sr_retransmitted_packets %lu sr_out_of_order_placed %lu sr_dropped %lu sr_fallbacks %lu tlp_probes %lu "
                 "sr_rack_resent %lu sr_spurious_timeouts %lu\n",
                 file_.name.c_str(), qpn, k.tx_packets, k.rx_packets, k.retransmitted_packets, k.timeouts,
                 k.naks_sent, k.seq_naks_sent, k.rnr_naks_sent, k.naks_received, k.rnr_naks_received,
                 k.duplicates_received, k.out_of_sequence, k.acks_sent, k.acks_received, k.ack_solicits,
                 k.dropped_wrong_state,
                 transport::QpStateName(q->state()), q->selective_repeat() ? "on" : "off", k.sr_sacks_sent,
                 k.sr_sacks_received, k.sr_retransmitted_packets, k.sr_out_of_order_placed, k.sr_dropped,
                 k.sr_fallbacks, k.tlp_probes, k.sr_rack_resent, k.sr_spurious_timeouts);
    if (q->selective_repeat()) {  // the SR breakdown (doc/loss-experiment.md)
      const transport::RttEstimator& r = q->sr()->rtt();
      std::fprintf(stderr,
                   "droce %s qp %u sr: timeout_resent %lu timeouts_low %lu timeouts_backoff %lu window_full_us %lu "
                   "srtt_us %lu rttvar_us %lu rto_low_us %lu rto_high_us %lu rtt_max_us %lu rtt_hist_us "
                   "<32:%lu <64:%lu <128:%lu <256:%lu <512:%lu <1024:%lu <2048:%lu >=2048:%lu\n",
                   file_.name.c_str(), qpn, k.sr_timeout_resent, k.sr_timeouts_low, k.sr_timeouts_backoff,
                   k.sr_window_full_ns / 1000, r.srtt_ns / 1000, r.rttvar_ns / 1000, q->sr()->rto_low_ns() / 1000,
                   q->sr()->rto_high_ns() / 1000, k.sr_rtt_max_ns / 1000, k.sr_rtt_hist[0], k.sr_rtt_hist[1],
                   k.sr_rtt_hist[2], k.sr_rtt_hist[3], k.sr_rtt_hist[4], k.sr_rtt_hist[5], k.sr_rtt_hist[6],
                   k.sr_rtt_hist[7]);
    }
  }
}

uint32_t Runtime::PollLocked(uint64_t now_ns, bool program_polls) {
  if (now_ns >= next_link_check_ns_) {
    CheckLink(now_ns);
    CheckQps();  // once a millisecond, like the link
  }
  batcher_.Flushed();  // the round transmits every active QP, deferred ones too
  const uint32_t work = dev_->Poll(now_ns, program_polls && file_.poll_ack_hold);
  if (!watches_.empty()) DeliverEvents();
  if (!srq_limits_.empty()) CheckSrqLimits();
  return work;
}

uint32_t Runtime::DoorbellLocked(uint32_t qpn, uint64_t now_ns, bool small) {
  if (file_.progress.sched_auto) NoteAppCall(now_ns);  // a post: the program drives
  // A real-time progress thread asleep armed (it serves a program that went
  // quiet) would not take a deferred tail before its sleep's bound.
  small = small && !fifo_armed_.load(std::memory_order_relaxed);
  if (batcher_.Defer(now_ns, small, last_app_poll_ns_.load(std::memory_order_relaxed))) {
    dev_->DeferDoorbell(qpn);
    return 0;
  }
  const uint32_t work = dev_->Doorbell(qpn, now_ns);
  if (armed_channels_.load(std::memory_order_relaxed) > 0) DeliverEvents();
  if (file_.doorbell_batch > 1) batcher_.PostEnded(NowNs());
  return work;
}

void Runtime::DrainPostedLocked(uint64_t now_ns) {
  PostedDoorbell* d = posted_head_.exchange(nullptr, std::memory_order_acquire);
  while (d != nullptr) {
    // next first: once kinds is 0 a poster may push d again (and write next).
    PostedDoorbell* next = d->next;
    const uint8_t kinds = d->kinds.exchange(0, std::memory_order_acq_rel);
    if (kinds & PostedDoorbell::kSend) {
      (void)DoorbellLocked(d->qpn, now_ns);  // takes the receives too
    } else if (kinds & PostedDoorbell::kRecv) {
      dev_->TakePostedRecvs(d->qpn);
    }
    stats_.posts_left_for_owner.fetch_add(1, std::memory_order_relaxed);
    d = next;
  }
}

void Runtime::RingPosted(PostedDoorbell* d, uint8_t kind, bool small, uint64_t now_ns) {
  if (last_app_post_ns_.load(std::memory_order_relaxed) != now_ns) {
    last_app_post_ns_.store(now_ns, std::memory_order_relaxed);
  }
  if (mu.try_lock()) {
    if (kind == PostedDoorbell::kSend) {
      (void)DoorbellLocked(d->qpn, now_ns, small);
    } else {
      dev_->TakePostedRecvs(d->qpn);
    }
    Unlock();
    return;
  }
  if (d->kinds.fetch_or(kind, std::memory_order_acq_rel) == 0) {
    PostedDoorbell* head = posted_head_.load(std::memory_order_relaxed);
    do {
      d->next = head;
    } while (!posted_head_.compare_exchange_weak(head, d, std::memory_order_release, std::memory_order_relaxed));
  }
  // The owner drains before it lets go and looks again after (Unlock); what
  // it can miss is a push that came after its look while its freeing store
  // still sat in its store buffer. That store is visible well within
  // kPostedHandoverNs: until then, a lock still held means that owner's
  // last look is still to come, or a newer owner (who took the lock after
  // this push, a locked instruction) drains it. Free: this thread takes the
  // device and runs the list itself. Rare: a post stamps last_app_post_ns_,
  // and the progress thread stands aside after it.
  const uint64_t since = NowNs();
  do {
    if (!mu.locked()) {
      if (mu.try_lock()) Unlock();
      return;
    }
    __builtin_ia32_pause();
  } while (NowNs() - since < kPostedHandoverNs);
}

void Runtime::SendCompEvent(const CqWatch& w, ChannelWaiters* cw) {
  if (cw != nullptr) ++cw->socket_sent;
  droce_comp_event_desc ev{w.handle};
  sendto(event_socket_, &ev, sizeof ev, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&w.channel_addr),
         w.channel_addr_len);
}

Runtime::ChannelWaiters* Runtime::FindWaitersLocked(int channel_fd) {
  for (ChannelWaiters& cw : channel_waiters_) {
    if (cw.fd == channel_fd) return &cw;
  }
  return nullptr;
}

void Runtime::DeliverEvents() {
  for (CqWatch& w : watches_) {
    queue::CompletionQueue* cq = dev_->cq(w.cq_id);
    if (cq == nullptr) continue;
    if (w.has_channel && cq->notifications() != w.seen_notifications) {
      w.seen_notifications = cq->notifications();
      if (w.armed) {
        w.armed = false;
        armed_channels_.fetch_sub(1, std::memory_order_relaxed);
      }
      ChannelWaiters* cw = FindWaitersLocked(w.channel_fd);  // none unless a thread ever waited
      if (cw != nullptr && cw->waiters > cw->sleepers) {
        cw->pending.push_back(w.handle);  // an awake waiter takes it (WaitForChannel)
      } else {
        SendCompEvent(w, cw);
      }
      stats_.comp_events.fetch_add(1, std::memory_order_relaxed);
    }
    if (cq->overflowed() && !w.overrun_reported && w.async_write_fd >= 0) {
      w.overrun_reported = true;
      droce_async_event_desc ev{w.handle, IBV_EVENT_CQ_ERR, 0};
      if (write(w.async_write_fd, &ev, sizeof ev) == sizeof ev) {
        stats_.async_events.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

// The memif regions are mapped once the link is up: their page tables are
// filled now, not one fault per page on the first pass over the rings
// (ethdev/prefault.h).
void Runtime::PrefaultWire() {
  if (file_.vdev.rfind("net_memif", 0) != 0) return;
  wire_prefaulted_bytes_ = ethdev::PrefaultSharedMappings(ethdev::kMemifRegionName);
}

// Refreshes the link state. A memif client whose link is down restarts its
// port every 100 ms if its connection attempt failed (its server may have
// started after it) or the link dropped; one whose attempt is still in its
// handshake is left alone for up to 2 s: restarting a client mid-handshake
// makes DPDK 22.11's memif server close a control socket its interrupt
// thread still watches, and EAL panics in the server.
void Runtime::CheckLink(uint64_t now_ns) {
  if (file_.fabric && !CheckFabric(now_ns)) return;
  const bool up = port_->RefreshLink();
  const bool was_up = link_up_.exchange(up, std::memory_order_relaxed);
  next_link_check_ns_ = now_ns + 1'000'000;
  if (up && !was_up) {
    PrefaultWire();  // a (re)connection maps the regions afresh
    // A memif client whose first start failed (its server came later) had
    // no RX queue to take a wake-up source from: it slept timed only.
    if (file_.progress.wakeup && wakeup_ == nullptr) {
      RenewWakeupLocked();
    }
  }
  if (up) {
    attempt_ns_ = 0;  // connected: a later drop restarts at once
    return;
  }
  // A fabric device's link goes down only when its daemon goes (its control
  // socket says so: CheckFabric); restarting the port then would run DPDK's
  // memif disconnect in this thread while its interrupt thread runs it too.
  if (!memif_client_ || file_.fabric || now_ns < next_reconnect_ns_) return;
  if (!port_->start_failed() && attempt_ns_ != 0 && now_ns - attempt_ns_ < 2'000'000'000) return;
  next_reconnect_ns_ = now_ns + 100'000'000;
  port_->Reconnect();
  attempt_ns_ = now_ns;
  ++reconnects_;
}

// The daemon stopped or died. Its control connection is the attachment:
// the daemon never ends it for a live program, and closes it before it
// tears the program's interface down when it stops (droced.cc), so the
// program stops polling and removes the interface itself — DPDK 22.11's
// memif thread would otherwise unmap the rings under a poll. (A daemon
// killed outright closes both sockets at once: that window stays.)
bool Runtime::CheckFabric(uint64_t now_ns) {
  next_link_check_ns_ = now_ns + 1'000'000;
  if (fabric_link_ == FabricLink::kLost) {
    if (now_ns >= next_attach_ns_) Reattach(now_ns);
    return false;
  }
  pollfd pfd{fabric_fd_, POLLIN, 0};
  // Readable: direct paths, or the end of the connection (EOF or an error).
  if (fabric_fd_ < 0 || (poll(&pfd, 1, 0) != 0 && !ReadFabricMessages())) {
    LoseFabric(now_ns);
    return false;
  }
  if (fabric_link_ == FabricLink::kReattached) {
    const bool up = port_->RefreshLink();
    link_up_.store(up, std::memory_order_relaxed);
    if (!up) return false;
    PrefaultWire();
    fabric_link_ = FabricLink::kAttached;
    fabric_lost_.store(false, std::memory_order_relaxed);
    SendPortEvent(IBV_EVENT_PORT_ACTIVE);
  }
  return true;
}

bool Runtime::ReadFabricMessages() {
  for (int i = 0; i < 64; ++i) {
    alignas(8) char buf[std::max(sizeof(ethdev::PeerMessage), sizeof(fabric::NetdevState)) + 64];
    int fds[3], nfds = 0;
    const long n = ethdev::ReceiveWithFds(fabric_fd_, buf, sizeof buf, fds, &nfds);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false;
    uint32_t magic = 0;
    if (n >= 4) std::memcpy(&magic, buf, sizeof magic);
    if (magic == fabric::kNetdevMagic && n == sizeof(fabric::NetdevState) && nfds == 0) {
      fabric::NetdevState m;
      std::memcpy(&m, buf, sizeof m);
      ApplyNetdevState(m, /*events=*/true);
      continue;
    }
    if (n == sizeof(ethdev::PeerMessage) && direct_) {
      ethdev::PeerMessage m;
      std::memcpy(&m, buf, sizeof m);
      absl::Status s = direct_->Apply(m, fds, nfds);  // takes the descriptors
      if (!s.ok() && std::getenv("DROCE_DEBUG") != nullptr) {
        std::fprintf(stderr, "droce %s: direct path refused: %s\n", file_.name.c_str(), std::string(s.message()).c_str());
      }
      continue;
    }
    for (int k = 0; k < nfds; ++k) close(fds[k]);  // nothing we know: ignored
  }
  return true;
}

void Runtime::SendPortEvent(uint32_t type) {
  droce_async_event_desc ev{1, type, 0};  // element: the port number (ib_uverbs_async_event_desc)
  for (int fd : async_fds_) {
    if (write(fd, &ev, sizeof ev) == sizeof ev) stats_.async_events.fetch_add(1, std::memory_order_relaxed);
  }
}

void Runtime::LoseFabric(uint64_t now_ns) {
  ++fabric_losses_;
  fabric_link_ = FabricLink::kLost;
  fabric_lost_.store(true, std::memory_order_relaxed);
  link_up_.store(false, std::memory_order_relaxed);
  port_->MarkLinkDown();
  if (direct_) direct_->RemoveAll();  // a new daemon sets up new ones
  RenewWakeupLocked();
  // A daemon that was killed closed its memif sockets too, and DPDK's
  // interrupt thread is tearing that connection down (memif_disconnect);
  // stopping the port here at the same time would run it twice at once
  // (double frees in 22.11). Give the thread time to see the socket close
  // and finish, as droced does for a program that leaves. A daemon that
  // stops cleanly keeps our interface up until we remove it.
  usleep(20'000);
  if (!port_->LinkUp()) usleep(10'000);
  port_->Stop(/*close=*/true);  // on EAL's interrupt thread (EthdevPort::Stop)
  (void)ethdev::RemoveVdev(file_.port_name());
  if (fabric_fd_ >= 0) close(fabric_fd_);
  fabric_fd_ = -1;
  // The port is down: the QPs' peers are unreachable. Flushing them now
  // (rather than letting each retry out) tells the program at once.
  FlushQps();
  SendPortEvent(IBV_EVENT_PORT_ERR);
  next_attach_ns_ = now_ns + 100'000'000;
  if (std::getenv("DROCE_DEBUG") != nullptr) {
    std::fprintf(stderr, "droce %s: the fabric daemon is gone; port down, QPs flushed\n", file_.name.c_str());
  }
}

void Runtime::FlushQps(const std::function<bool(const transport::Qp&)>& pick) {
  transport::QpAttr err;
  err.qp_state = transport::QpState::kErr;
  for (uint32_t qpn = dev_->qpn_base(); qpn < dev_->qpn_base() + dev_->config().max_qp; ++qpn) {
    const transport::Qp* q = dev_->qp(qpn);
    if (q == nullptr || q->state() == transport::QpState::kReset || q->state() == transport::QpState::kErr) continue;
    if (pick && !pick(*q)) continue;
    (void)dev_->ModifyQp(qpn, err, transport::kAttrState);
  }
}

void Runtime::ApplyNetdevState(const fabric::NetdevState& m, bool events) {
  if (m.magic != fabric::kNetdevMagic || m.version != fabric::kNetdevVersion || m.size != sizeof m) return;
  if (events && m.generation == netdev_generation_) return;
  netdev_generation_ = m.generation;
  std::vector<core::Gid> table(fabric::kNetdevGids);
  for (uint32_t i = 0; i < fabric::kNetdevGids; ++i) {
    if ((m.gid_valid >> i) & 1) std::memcpy(table[i].data(), m.gids[i], 16);
  }
  if (m.active_mtu >= 1 && m.active_mtu <= 5) active_mtu_.store(128u << m.active_mtu, std::memory_order_relaxed);
  const std::vector<core::Gid> old = dev_->gids();
  if (table != old) {
    dev_->SetGids(table);
    if (events) {
      // A QP whose source address went (or whose index now names another
      // one) cannot send from it any more: it errors, the others go on.
      FlushQps([&](const transport::Qp& q) {
        if (q.ud() || q.state() == transport::QpState::kInit) return false;
        const uint8_t i = q.attr().ah.sgid_index;
        return i >= old.size() || i >= table.size() || old[i] != table[i] || table[i] == core::Gid{};
      });
      SendPortEvent(IBV_EVENT_GID_CHANGE);
    }
  }
  const bool down = m.port_active == 0;
  const bool was_down = netdev_down_.exchange(down, std::memory_order_relaxed);
  if (!events) return;
  if (down && !was_down) {
    FlushQps();
    SendPortEvent(IBV_EVENT_PORT_ERR);
  } else if (!down && was_down) {
    SendPortEvent(IBV_EVENT_PORT_ACTIVE);
  }
  if (std::getenv("DROCE_DEBUG") != nullptr) {
    std::fprintf(stderr, "droce %s: %s is %s, GID table %s\n", file_.name.c_str(), file_.netdev.c_str(),
                 down ? "down" : "up", table != old ? "changed" : "unchanged");
  }
}

void Runtime::Reattach(uint64_t now_ns) {
  next_attach_ns_ = now_ns + 200'000'000;
  absl::Status s = AttachFabric(dev_->qpn_base());
  if (s.ok()) s = ethdev::ProbeVdev(file_.vdev);
  if (s.ok()) {
    s = port_->Rebind(file_.port_name(), /*start_may_fail=*/true);
    if (!s.ok()) (void)ethdev::RemoveVdev(file_.port_name());
  }
  if (!s.ok()) {
    if (fabric_fd_ >= 0) close(fabric_fd_);
    fabric_fd_ = -1;
    if (std::getenv("DROCE_DEBUG") != nullptr) {
      std::fprintf(stderr, "droce %s: re-attaching: %s\n", file_.name.c_str(), std::string(s.message()).c_str());
    }
    return;
  }
  ++fabric_reattaches_;
  fabric_link_ = FabricLink::kReattached;  // IBV_EVENT_PORT_ACTIVE once the link is up
  if (has_netdev_state_) ApplyNetdevState(first_netdev_state_, /*events=*/true);
  RenewWakeupLocked();
}

void Runtime::RenewWakeupLocked() {
  wakeup_stale_ = true;
  RefreshWakeupLocked();
}

void Runtime::RefreshWakeupLocked() {
  if (!wakeup_stale_ || wire_armers_ > 0) return;
  wakeup_.reset();
  wakeup_stale_ = false;
  if (file_.progress.wakeup && fabric_link_ != FabricLink::kLost) {
    wakeup_ = ethdev::RxWakeup::For(port_->port_id(), nullptr);
  }
}

bool Runtime::WaitLinkUp() {
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  while (true) {
    {
      std::lock_guard<DeviceMutex> lock(mu);
      CheckLink(NowNs());
      if (link_up_) return true;
    }
    if (NowNs() >= deadline) return false;
    SleepUs(1000);
  }
}

int Runtime::ResolveNeighbor(const core::Gid& gid, uint8_t sgid_index) {
  if (file_.netdev_bound) {
    // The kernel's route and neighbour, through droced: the device keeps no
    // neighbour table of its own (the entry is the AV's MAC, as a kernel
    // RoCE driver resolves the destination MAC at modify_qp / create_ah).
    fabric::ResolveRequest q{};
    {
      std::lock_guard<DeviceMutex> lock(mu);
      const std::vector<core::Gid>& gids = dev_->gids();
      if (sgid_index >= gids.size() || gids[sgid_index] == core::Gid{}) return EINVAL;
      std::memcpy(q.sgid, gids[sgid_index].data(), 16);
    }
    std::memcpy(q.dgid, gid.data(), 16);
    q.timeout_ms = std::clamp<uint32_t>(file_.link_wait_ms, 1000, 60000);
    fabric::Request req = fabric::MakeRequest(fabric::kOpResolve, file_.name);
    req.size = sizeof req + sizeof q;
    absl::StatusOr<fabric::Reply> r = fabric::CallOnce(fabric::ControlSocketPath(file_.fabric_dir), req,
                                                       static_cast<int>(q.timeout_ms) + 2000, nullptr, &q, sizeof q);
    if (!r.ok()) return ENETDOWN;
    if (r->error != 0) {
      if (std::getenv("DROCE_DEBUG") != nullptr) {
        std::fprintf(stderr, "droce %s: no next hop: %s\n", file_.name.c_str(), r->message);
      }
      return r->error;
    }
    core::Mac mac;
    std::memcpy(mac.data(), r->mac, 6);
    std::lock_guard<DeviceMutex> lock(mu);
    dev_->AddNeighbor(gid, mac);
    return 0;
  }
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  uint64_t next_request = 0;
  while (true) {
    {
      std::lock_guard<DeviceMutex> lock(mu);
      if (dev_->HasNeighbor(gid)) return 0;
      const uint64_t now = NowNs();
      if (now >= deadline) return 0;  // unresolved: broadcast where the device allows it
      if (now >= next_request) {
        dev_->RequestNeighbor(gid);  // ARP for IPv4-mapped GIDs, neighbour solicitation for IPv6
        next_request = now + 100'000'000;
      }
      PollLocked(now);
    }
    SleepUs(200);
  }
}

void Runtime::WatchCq(const CqWatch& w) {
  watches_.push_back(w);
  watches_.back().seen_notifications = dev_->cq(w.cq_id)->notifications();
}

void Runtime::WatchQp(uint32_t qpn, uint64_t handle, int async_write_fd) {
  qp_watches_.push_back({qpn, handle, async_write_fd, false});
}

void Runtime::UnwatchQp(uint32_t qpn) {
  std::erase_if(qp_watches_, [&](const QpWatch& w) { return w.qpn == qpn; });
}

void Runtime::NoteQpErrorByUser(uint32_t qpn) {
  for (QpWatch& w : qp_watches_) {
    if (w.qpn == qpn) w.reported = true;
  }
}

void Runtime::RearmQp(uint32_t qpn) {
  for (QpWatch& w : qp_watches_) {
    if (w.qpn == qpn) w.reported = false;
  }
}

void Runtime::ArmSrqLimit(uint32_t srq_id, uint64_t handle, uint32_t limit, int async_write_fd) {
  std::erase_if(srq_limits_, [&](const SrqLimitWatch& w) { return w.srq_id == srq_id; });
  transport::Srq* srq = dev_->srq(srq_id);
  if (limit == 0 || srq == nullptr) return;
  srq_limits_.push_back({srq_id, handle, limit, srq->ring().size(), async_write_fd});
}

uint32_t Runtime::SrqLimit(uint32_t srq_id) const {
  for (const SrqLimitWatch& w : srq_limits_) {
    if (w.srq_id == srq_id) return w.limit;
  }
  return 0;
}

void Runtime::NoteSrqPosted(uint32_t srq_id) {
  for (SrqLimitWatch& w : srq_limits_) {
    if (w.srq_id == srq_id) w.last_size = dev_->srq(srq_id)->ring().size();
  }
}

void Runtime::CheckSrqLimits() {
  for (size_t i = 0; i < srq_limits_.size();) {
    SrqLimitWatch& w = srq_limits_[i];
    transport::Srq* srq = dev_->srq(w.srq_id);
    const uint32_t size = srq != nullptr ? srq->ring().size() : 0;
    if (srq != nullptr && size < w.limit && size < w.last_size) {
      droce_async_event_desc ev{w.handle, IBV_EVENT_SRQ_LIMIT_REACHED, 0};
      if (w.async_write_fd >= 0 && write(w.async_write_fd, &ev, sizeof ev) == sizeof ev) {
        stats_.async_events.fetch_add(1, std::memory_order_relaxed);
      }
      srq_limits_.erase(srq_limits_.begin() + static_cast<long>(i));
      continue;
    }
    w.last_size = size;
    ++i;
  }
}

void Runtime::CheckQps() {
  for (QpWatch& w : qp_watches_) {
    if (w.reported || w.async_write_fd < 0) continue;
    const transport::Qp* q = dev_->qp(w.qpn);
    if (q == nullptr || q->state() != transport::QpState::kErr) continue;
    w.reported = true;
    // The kind of error that put it there (transport::QpEvent, IBTA 11.6.3.1).
    const ibv_event_type type = q->error_event() == transport::QpEvent::kAccessError    ? IBV_EVENT_QP_ACCESS_ERR
                                : q->error_event() == transport::QpEvent::kRequestError ? IBV_EVENT_QP_REQ_ERR
                                                                                        : IBV_EVENT_QP_FATAL;
    droce_async_event_desc ev{w.handle, type, 0};
    if (write(w.async_write_fd, &ev, sizeof ev) == sizeof ev) {
      stats_.async_events.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void Runtime::UnwatchCq(uint32_t cq_id) {
  for (size_t i = 0; i < watches_.size(); ++i) {
    if (watches_[i].cq_id != cq_id) continue;
    if (watches_[i].armed) armed_channels_.fetch_sub(1, std::memory_order_relaxed);
    watches_.erase(watches_.begin() + static_cast<long>(i));
    return;
  }
}

void Runtime::ArmCq(uint32_t cq_id) {
  for (CqWatch& w : watches_) {
    if (w.cq_id == cq_id && w.has_channel && !w.armed) {
      w.armed = true;
      armed_channels_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

namespace {

// sched_setattr(2)'s argument; glibc 2.36 has no wrapper.
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
};

}  // namespace

// SCHED_OTHER with the progress thread's slice and nice value for the
// calling thread (progress_slice_us, progress_nice). The slice: with EEVDF
// (Linux 6.6+; wake-up preemption by shorter slices since 6.12) a waking
// thread with a shorter slice has the earlier deadline and preempts a
// spinning program; with the default slice it can wait out the spinner's
// slice (ms). The nice value (0: the thread keeps its own): a lower one
// weighs the thread's run time less, so a thread that runs in bursts stays
// eligible to preempt (doc/verbs.md). Older kernels ignore the slice.
// Returns false where the nice value was refused (a negative one without
// CAP_SYS_NICE or RLIMIT_NICE); the slice is then asked for alone.
bool Runtime::RequestSlice(uint32_t slice_us, int32_t nice) {
  if (slice_us == 0 && nice == 0) return true;
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  const int keep = errno == 0 ? own : 0;
  attr.sched_nice = nice != 0 ? nice : keep;
  attr.sched_runtime = uint64_t{slice_us} * 1000;
  if (syscall(SYS_sched_setattr, 0, &attr, 0u) == 0 || nice == 0) return true;
  attr.sched_nice = keep;
  (void)syscall(SYS_sched_setattr, 0, &attr, 0u);
  return false;
}

// SCHED_OTHER with the default slice for thread `tid` (0: the caller): a
// stand-aside progress thread's timer wake-ups then do not preempt the
// program that polls (no short slice, no real-time priority).
void Runtime::ToOther(long tid) {
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  (void)syscall(SYS_sched_setattr, tid, &attr, 0u);
}

void Runtime::DemoteProgressThread() {
  const long tid = progress_tid_.load(std::memory_order_relaxed);
  if (tid == 0) return;
  ToOther(tid);
  stats_.progress_fifo_yields.fetch_add(1, std::memory_order_relaxed);
}

// SCHED_FIFO at `priority` for the calling thread; false where refused
// (no CAP_SYS_NICE, an RT-less cgroup): the thread keeps its policy.
bool Runtime::SetFifo(uint32_t priority) {
  sched_param sp{};
  sp.sched_priority = static_cast<int>(priority);
  return pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
}

// Back-off when there is nothing to do: spin a little, then sleep. For
// hot_us after the last packet (and whenever a program is blocked waiting
// for a completion event) sleeps are short, so a packet for a program that
// spins on memory (ib_write_lat's server) waits microseconds, not a
// scheduler slice; after that, sleeps double up to max_sleep_us. While the
// program itself calls poll_cq it drives the dataplane and this thread only
// checks back every app_active_us.
void Runtime::ProgressLoop() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: short sleeps must stay short
  // An lcore id gives this thread DPDK's mempool cache: a passive side's
  // progress thread allocates and frees every mbuf (measured: 64 KiB
  // ib_write_bw's receiver spent its time in the pool's ring and in memif's
  // copies from cold mbufs without it).
  const bool registered = ethdev::RegisterThread();
  pthread_setname_np(pthread_self(), "droce-progress");
  const bool nice_taken = RequestSlice(file_.progress.slice_us, file_.progress.nice);
  if (!nice_taken) stats_.progress_nice_refused.store(1, std::memory_order_relaxed);
  struct Unregister {
    bool on;
    ~Unregister() {
      if (on) ethdev::UnregisterThread();
    }
  } unregister{registered};
  const ProgressConfig& pc = file_.progress;
  // SCHED_FIFO, as the softirq that runs a kernel NIC's receive: a wake-up
  // (an arrival, a hot-phase timer) preempts a program spinning on memory at
  // once instead of waiting out its slice. It stays bounded: empty spins
  // last at most kFifoSpinNs, and a thread busy for kFifoBusyNs without a
  // sleep drops to SCHED_OTHER until it next sleeps (as softirq work past
  // its budget goes to ksoftirqd), so a busy receiver shares the CPU fairly.
  bool fifo = pc.sched_fifo && SetFifo(pc.rt_priority);
  const bool fifo_permitted = fifo;
  progress_fifo_.store(fifo, std::memory_order_relaxed);
  // progress_sched=auto: the thread starts SCHED_OTHER (normal's loop) and
  // takes SCHED_FIFO (fifo's loop) right before an armed sleep when
  // AutoSchedPolicy says the program does not drive, packets are sparse and
  // the program's thread ran while it did not call (a SCHED_OTHER thread
  // that has to wait behind a spinning program for the tick could not
  // promote itself in time). It leaves it as under fifo
  // (standing aside for a polling program, NoteAppPoll) and, with a 2 ms
  // hold, when it wakes and finds the program driving or packets streaming
  // (doc/verbs.md, progress_sched).
  const bool auto_sched = pc.sched_auto;
  bool auto_refused = false;
  AutoSchedPolicy auto_policy(pc.app_active_us, pc.auto_drive_us);
  const auto auto_switch = [&](bool to_fifo, uint64_t at, bool hold = true) {
    if (to_fifo) {
      if (!SetFifo(pc.rt_priority)) {
        auto_refused = true;  // not asked again
        stats_.progress_auto_refused.store(1, std::memory_order_relaxed);
        return;
      }
      stats_.progress_auto_to_fifo.fetch_add(1, std::memory_order_relaxed);
    } else {
      (void)RequestSlice(pc.slice_us == 0 ? 1 : pc.slice_us, pc.nice);  // SCHED_OTHER, slice and nice with it
      stats_.progress_auto_to_other.fetch_add(1, std::memory_order_relaxed);
    }
    fifo = to_fifo;
    progress_fifo_.store(fifo, std::memory_order_relaxed);
    if (hold || to_fifo) auto_policy.Switched(to_fifo, at);
  };
  const auto app_calling = [&](uint64_t at) {  // a post/poll within app_active_us (auto only)
    const uint64_t last = last_app_call_ns_.load(std::memory_order_relaxed);
    return last != 0 && NsSince(at, last) < uint64_t{pc.app_active_us} * 1000;
  };
  // The CPU time of the program thread that called last (its thread clock,
  // MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) as glibc's
  // pthread_getcpuclockid builds it), for AutoSchedPolicy::NoteProgramCpu.
  // Returns when it was read.
  const auto read_program_cpu = [&]() -> uint64_t {
    const long tid = app_tid_.load(std::memory_order_relaxed);
    const auto clock = static_cast<clockid_t>((~static_cast<uint32_t>(tid) << 3) | 6u);
    timespec ts{};
    const bool ok = tid != 0 && clock_gettime(clock, &ts) == 0;
    const uint64_t at = NowNs();
    if (!ok) {
      auto_policy.ProgramCpuUnknown();
    } else {
      const uint64_t cpu_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
      auto_policy.NoteProgramCpu(at, cpu_ns, last_app_call_ns_.load(std::memory_order_relaxed));
    }
    return at;
  };
  const auto auto_wants_fifo = [&](uint64_t at) {
    auto_policy.NoteCalls(at, app_covered_ns_.load(std::memory_order_relaxed));
    const uint64_t last_call = last_app_call_ns_.load(std::memory_order_relaxed);
    const bool waiters = app_waiters_.load(std::memory_order_relaxed) > 0;
    if (fifo) return auto_policy.WantFifo(true, at, last_call, waiters);
    // A promotion: only for a program seen running without calls (the
    // churn guard; the reading is a system call, made only here).
    if (!auto_policy.Eligible(at, last_call, waiters)) return false;
    if (auto_policy.WantFifo(false, read_program_cpu(), last_call, waiters)) return true;
    stats_.progress_auto_not_running.fetch_add(1, std::memory_order_relaxed);
    return false;
  };
  if (std::getenv("DROCE_DEBUG") != nullptr) {
    if (fifo) {
      std::fprintf(stderr, "droce %s: progress thread SCHED_FIFO priority %u\n", file_.name.c_str(), pc.rt_priority);
    } else {
      std::fprintf(stderr, "droce %s: progress thread SCHED_OTHER, slice %u us, nice %d%s%s\n", file_.name.c_str(),
                   pc.slice_us, getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))),
                   nice_taken ? "" : " (progress_nice refused: no CAP_SYS_NICE?)",
                   pc.sched_fifo   ? " (SCHED_FIFO refused: no CAP_SYS_NICE?)"
                   : pc.sched_auto ? " (progress_sched=auto: SCHED_FIFO while the program does not drive)"
                                   : "");
    }
  }
  // A timed sleep. Under SCHED_FIFO at least kFifoMinSleepUs: a shorter
  // one on a virtual machine often never leaves the CPU (the timer fires
  // before the thread is switched out), so a real-time thread sleeping 5 us
  // at a time holds its CPU (measured: two such threads took both CPUs).
  const auto nap = [&](uint32_t us) {
    SleepUs(fifo ? std::max<uint32_t>(us, kFifoMinSleepUs) : std::max<uint32_t>(us, 1));
  };
  // Called before every sleep: a demoted thread gets SCHED_FIFO back.
  const auto rested = [&] {
    if (fifo_permitted && !fifo) {
      fifo = SetFifo(pc.rt_priority);
      progress_fifo_.store(fifo, std::memory_order_relaxed);
    }
  };
  // While a program polls, a SCHED_FIFO thread stands aside at SCHED_OTHER
  // (default slice): its look-backs do not preempt the program. It takes
  // SCHED_FIFO again (rested) only to sleep armed, i.e. once no program
  // thread has polled for app_active_us: it serves programs that spin on
  // memory or are blocked elsewhere, as NAPI busy-poll keeps the IRQ masked.
  const auto stand_aside = [&] {
    if (fifo && auto_sched) {
      auto_switch(false, NowNs(), /*hold=*/false);  // no hold: it serves the pauses between the bursts
    } else if (fifo) {
      ToOther(0);
      fifo = false;
      progress_fifo_.store(false, std::memory_order_relaxed);
    }
  };
  if (fifo_permitted || auto_sched) progress_tid_.store(static_cast<long>(syscall(SYS_gettid)), std::memory_order_relaxed);
  uint32_t idle = 0;
  uint64_t last_work = NowNs();
  uint64_t idle_since = 0;   // the first empty poll of this spin
  uint64_t busy_since = last_work;  // the first poll since the last sleep
  uint32_t sleep_us = 1;
  LookBackPacer pacer(pc.app_active_us, pc.app_active_max_us);
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t now = NowNs();
    if (fifo && auto_sched && now - busy_since > kFifoBusyNs) {
      auto_switch(false, now);
      stats_.progress_fifo_demotions.fetch_add(1, std::memory_order_relaxed);
    } else if (auto_sched && fifo && !auto_wants_fifo(now)) {
      auto_switch(false, now);  // woken into a program that drives, or a stream
    }
    if (fifo && now - busy_since > kFifoBusyNs) {
      (void)RequestSlice(pc.slice_us == 0 ? 1 : pc.slice_us, pc.nice);  // SCHED_OTHER again, slice and nice with it
      fifo = false;
      progress_fifo_.store(false, std::memory_order_relaxed);
      stats_.progress_fifo_demotions.fetch_add(1, std::memory_order_relaxed);
    }
    if (app_waiters_.load(std::memory_order_acquire) > 0) {
      // A program thread waits for an event and drives the dataplane
      // meanwhile (WaitForChannel): look back after max_sleep_us.
      HoldPmQos();
      stand_aside();
      nap(pc.max_sleep_us);
      busy_since = NowNs();
      continue;
    }
    // An armed channel keeps this thread hot unless the program waits for
    // its events in ibv_get_cq_event (it then drives the dataplane itself).
    const bool waiting_for_event =
        armed_channels_.load(std::memory_order_relaxed) > 0 &&
        NsSince(now, last_event_wait_ns_.load(std::memory_order_relaxed)) > uint64_t{pc.max_sleep_us} * 1000;
    const uint64_t last_app = std::max(last_app_poll_ns_.load(std::memory_order_relaxed),
                                       last_app_post_ns_.load(std::memory_order_relaxed));
    const uint64_t stand_aside_ns = uint64_t{pc.app_active_us} * 1000;
    if (!waiting_for_event && NsSince(now, last_app) < stand_aside_ns) {
      // Until the program has not polled for app_active_us: one that stops
      // polling (to spin on memory) gets this thread after app_active_us,
      // not after up to twice that as with whole app_active_us sleeps.
      // A program that is still polling at the next look-back polls
      // continuously (ibv_rc_pingpong, ib_send_lat): the look-backs then
      // double up to app_active_max_us. Each is a timer wake-up whose short
      // slice preempts the polling program (measured: every 20 us cost
      // ibv_rc_pingpong most of its time, doc/verbs.md); one that found the
      // program quiet starts again at app_active_us (ib_write_lat polls for
      // its send completion, then spins on memory: its look-back still
      // lands app_active_us after that poll, and its pauses keep the
      // spacing from doubling).
      HoldPmQos();
      stand_aside();
      // auto: a reading of the program's CPU time before the nap, so that
      // the next promotion sees whether it ran after its last call.
      if (auto_sched && !auto_refused && !auto_policy.driving() && !auto_policy.dense()) (void)read_program_cpu();
      const uint64_t wake_ns =
          pacer.StandAside(now, last_app, app_max_gap_ns_.exchange(0, std::memory_order_relaxed));
      stats_.progress_stand_asides.fetch_add(1, std::memory_order_relaxed);
      nap(static_cast<uint32_t>((wake_ns - now) / 1000));
      busy_since = NowNs();
      continue;
    }
    pacer.Quiet();
    uint32_t work = 0;
    if (mu.app_waiting.load(std::memory_order_relaxed) == 0 && mu.try_lock()) {
      const uint64_t polled_at = NowNs();
      const uint64_t rx_before = dev_->counters().rx_packets;
      work = PollLocked(polled_at);
      const uint64_t rx_after = dev_->counters().rx_packets;
      progress_rx_packets_ += rx_after - rx_before;
      if (auto_sched) auto_policy.NoteRx(polled_at, rx_after, progress_rx_packets_);
      Unlock();
      stats_.progress_polls.fetch_add(1, std::memory_order_relaxed);
    }
    if (work > 0) {
      HoldPmQos();
      idle = 0;
      sleep_us = 1;
      last_work = now;
      continue;
    }
    if (idle == 0) idle_since = now;
    // Under auto a SCHED_FIFO thread whose program is not calling spins
    // longer (kAutoFifoSpinNs).
    const uint64_t spin_cap_ns = !auto_sched || app_calling(now) ? kFifoSpinNs : kAutoFifoSpinNs;
    if (idle++ < pc.spins && (!fifo || now - idle_since < spin_cap_ns)) {
      CpuRelax();
      continue;
    }
    rested();
    if (auto_sched && !auto_refused && !fifo && auto_wants_fifo(now)) {
      auto_switch(true, now);  // decided before the sleep, not after
    }
    stats_.progress_sleeps.fetch_add(1, std::memory_order_relaxed);
    const bool hot = waiting_for_event || now - last_work < uint64_t{pc.hot_us} * 1000;
    // Hot: short timed sleeps, not an armed wait. A thread woken by the
    // peer's eventfd write may be placed on the waker's CPU and wait there
    // behind a spinning program for a scheduler slice (ib_write_lat runs
    // with armed hot sleeps showed ms typicals); a timer wakes it where it
    // slept.
    // SCHED_FIFO: the hot phase sleeps armed too. A woken real-time thread
    // goes to a CPU running only SCHED_OTHER work and preempts it at once,
    // so the arrival wakes it within microseconds and no timer wakes it in
    // between (timed hot sleeps cost a preemption of the program every
    // hot_sleep_us).
    // Idle — no packet, and no program call, within hot_us — CPUs may sleep
    // deeply again. The program's calls count too: a polling program that
    // the scheduler held off for longer than app_active_us is still hot
    // (without them the request could flap: CI once sampled a polling
    // program's 2 s and never found it held, the thread having stood aside
    // 548 times meanwhile).
    if (!hot && NsSince(now, last_app) >= uint64_t{pc.hot_us} * 1000) ReleasePmQos();
    if (hot && !fifo) {
      SleepUs(std::max<uint32_t>(pc.hot_sleep_us, 1));
      busy_since = NowNs();
      continue;
    }
    if (fifo) fifo_armed_.store(true, std::memory_order_release);
    const uint32_t found = IdleWait(fifo ? std::max<uint32_t>(sleep_us, kFifoMinSleepUs) : sleep_us, fifo);
    if (fifo && !fifo_armed_.exchange(false, std::memory_order_acq_rel)) {
      fifo = false;  // a program polled meanwhile and demoted this thread (NoteAppPoll)
      progress_fifo_.store(false, std::memory_order_relaxed);
    }
    busy_since = NowNs();
    if (found > 0) {
      idle = 0, last_work = busy_since, sleep_us = 1;
    } else {
      sleep_us = std::min<uint32_t>(sleep_us * 2, std::max<uint32_t>(pc.max_sleep_us, 1));
    }
  }
  ReleasePmQos();
}

// progress_pm_qos_us (doc/verbs.md): a PM QoS CPU latency request lives as
// long as the descriptor it was written to.
void Runtime::HoldPmQos() {
  const int32_t us = file_.progress.pm_qos_us;
  if (us < 0 || pm_qos_fd_ >= 0 || pm_qos_refused_) return;
  const int fd = open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, &us, sizeof us) != sizeof us) {
    pm_qos_refused_ = true;  // not asked again: this is the hot loop
    if (std::getenv("DROCE_DEBUG") != nullptr) {
      std::fprintf(stderr, "droce %s: progress_pm_qos_us refused: /dev/cpu_dma_latency: %s\n", file_.name.c_str(),
                   std::strerror(errno));
    }
    if (fd >= 0) close(fd);
    return;
  }
  pm_qos_fd_ = fd;
  stats_.pm_qos_holds.fetch_add(1, std::memory_order_relaxed);
}

void Runtime::ReleasePmQos() {
  if (pm_qos_fd_ < 0) return;
  close(pm_qos_fd_);
  pm_qos_fd_ = -1;
}

// Sleeps up to `us`, or until a frame arrives when the port can say so:
// asks the port to notify, polls once more (a frame may have come in before
// the request was seen), then sleeps on the descriptor. Returns the work that
// last poll found (the caller then keeps polling instead of sleeping).
uint32_t Runtime::IdleWait(uint32_t us, bool fifo) {
  int fd = -1;
  bool busy = false;  // a program thread holds the device: it is active, look back soon
  if (link_up()) {
    if (mu.app_waiting.load(std::memory_order_relaxed) == 0 && mu.try_lock()) {  // ArmWireLocked: -1 without a wake-up
      fd = ArmWireLocked();
      const uint64_t rx_before = dev_->counters().rx_packets;
      const uint32_t work = fd >= 0 ? PollLocked(NowNs()) : 0;
      progress_rx_packets_ += dev_->counters().rx_packets - rx_before;
      if (work > 0) DisarmWireLocked();
      Unlock();
      if (work > 0) return work;
    } else {
      busy = true;
    }
  }
  if (fd < 0) {
    // Unarmed, an arrival cannot end the sleep. Under SCHED_FIFO (whose
    // hot phase sleeps here) a busy device gets a short sleep, not a long
    // blind one; SCHED_OTHER keeps the sleep it asked for.
    SleepUs(busy && fifo ? std::min<uint32_t>(us, kFifoMinSleepUs) : us);
    return 0;
  }
  pollfd pfd{fd, POLLIN, 0};
  const timespec timeout{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  if (ppoll(&pfd, 1, &timeout, nullptr) > 0 && (pfd.revents & POLLIN)) {
    stats_.progress_arrival_wakeups.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard<DeviceMutex> lock(mu);
  DisarmWireLocked();
  return 0;
}

int Runtime::ArmWireLocked() {
  if (wakeup_ == nullptr || wakeup_stale_ || !link_up()) return -1;
  int fd = wakeup_->Arm();  // idempotent: a second sleeper gets the same descriptor
  // The direct rings' eventfds with it (one epoll set), when there are any.
  if (fd >= 0 && direct_) {
    fd = direct_->Arm(fd);
    if (fd < 0) wakeup_->Disarm();
  }
  if (fd >= 0) ++wire_armers_;
  return fd;
}

// The last sleeper out masks the notification and drains it; an earlier one
// leaves it for the others (poll wakes every sleeper on one write).
void Runtime::DisarmWireLocked() {
  if (wire_armers_ > 0 && --wire_armers_ == 0) {
    if (direct_) direct_->Disarm();
    if (wakeup_ != nullptr) wakeup_->Disarm();
    RefreshWakeupLocked();
  }
}

bool Runtime::ChannelReadable(int channel_fd) const {
  pollfd pfd{channel_fd, POLLIN, 0};
  return poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN) != 0;
}

namespace {

// libibverbs' own ibv_get_cq_event blocks in read(), which fails with EINTR
// when a signal handler without SA_RESTART runs meanwhile (qperf ends each
// test with such a SIGALRM and expects exactly that). WaitForChannel polls
// in user space, where a handler runs without the call noticing, so, when
// the program has such a handler, it blocks signals while it waits and
// looks at what is pending: SA_RESTART handlers and default actions are let
// through and the wait goes on; any other handler ends the wait with EINTR
// and runs when the mask is restored.
// True if `sig` has a handler installed without SA_RESTART: its delivery
// makes a blocking read() fail with EINTR.
bool InterruptsBlockingCalls(int sig) {
  struct sigaction sa {};
  if (sigaction(sig, nullptr, &sa) != 0 || (sa.sa_flags & SA_RESTART) != 0) return false;
  return (sa.sa_flags & SA_SIGINFO) != 0 ? sa.sa_sigaction != nullptr
                                          : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
}

// Whether any signal has a handler without SA_RESTART, i.e. whether a wait
// can be interrupted at all. Looked up at most once a millisecond (64
// sigaction calls, ~6 us), or at once with `fresh`: most programs have none
// (perftest's signal() handlers restart), and their waits then skip the two
// mask changes per wait. A handler installed less than 1 ms before a signal
// that lands while such a wait is polling goes unnoticed; the wait then ends
// with the next event instead of EINTR.
bool SignalsCanInterrupt(bool fresh = false) {
  static std::atomic<uint64_t> valid_until{0};
  static std::atomic<bool> can{true};
  const uint64_t now = NowNs();
  if (!fresh && now < valid_until.load(std::memory_order_relaxed)) return can.load(std::memory_order_relaxed);
  bool any = false;
  for (int sig = 1; sig < NSIG && !any; ++sig) any = InterruptsBlockingCalls(sig);
  can.store(any, std::memory_order_relaxed);
  valid_until.store(now + 1'000'000, std::memory_order_relaxed);
  return any;
}

class SignalGate {
 public:
  explicit SignalGate(bool active) : active_(active) {
    if (!active_) return;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &original_);
  }
  ~SignalGate() {
    if (active_) pthread_sigmask(SIG_SETMASK, &original_, nullptr);
  }
  SignalGate(const SignalGate&) = delete;
  SignalGate& operator=(const SignalGate&) = delete;

  bool active() const { return active_; }

  // True when a pending signal must end the wait with EINTR.
  bool Interrupted() {
    if (!active_) return false;
    sigset_t pending;
    if (sigpending(&pending) != 0) return false;
    bool any = false, interrupt = false;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sigismember(&pending, sig) != 1 || sigismember(&original_, sig) == 1) continue;  // the program blocks it
      any = true;
      interrupt |= InterruptsBlockingCalls(sig);
    }
    if (any && !interrupt) {  // let them run, then go on waiting
      pthread_sigmask(SIG_SETMASK, &original_, nullptr);
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, nullptr);
    }
    return interrupt;
  }

 private:
  bool active_;
  sigset_t original_;
};

constexpr uint64_t kSignalCheckNs = 10'000;  // while polling; and after every sleep

}  // namespace

int Runtime::WaitForChannel(int channel_fd, uint64_t* cq_handle) {
  *cq_handle = 0;
  app_waiters_.fetch_add(1, std::memory_order_relaxed);
  bool check_socket, check_flags, nonblocking;
  uint64_t sent_before;
  {
    AppLock lock(this);
    ChannelWaiters* cw = FindWaitersLocked(channel_fd);
    if (cw == nullptr) {
      channel_waiters_.push_back({});
      cw = &channel_waiters_.back();
      cw->fd = channel_fd;
    }
    ++cw->waiters;
    sent_before = cw->socket_sent;
    check_socket = cw->clean_at != sent_before;
    check_flags = NowNs() >= cw->flags_valid_until;
    nonblocking = cw->nonblocking;
  }
  // Leaving: the last waiter of a channel sends what is still pending
  // through the socket, so no event is lost. The progress thread is not
  // woken: the program is about to poll its CQ and will likely wait again;
  // the thread looks back within max_sleep_us and stands aside as for a
  // polling program.
  struct Leave {
    Runtime* rt;
    int fd;
    ~Leave() {
      {
        AppLock lock(rt);
        ChannelWaiters* cw = rt->FindWaitersLocked(fd);
        if (--cw->waiters == 0) {
          for (const uint64_t handle : cw->pending) {
            for (const CqWatch& w : rt->watches_) {
              if (w.handle == handle) rt->SendCompEvent(w, cw);
            }
          }
          cw->pending.clear();  // the entry stays (channels are few): no allocation per wait
        }
      }
      const uint64_t now = NowNs();
      rt->NoteAppPoll(now);
      rt->last_event_wait_ns_.store(now, std::memory_order_relaxed);
      rt->app_waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
  } leave{this, channel_fd};
  // Registered first, then the socket looked at: an event sent before the
  // registration is found there, one after it is handed over. The look (a
  // system call) is skipped while every datagram sent to the channel was
  // seen consumed.
  if (check_socket) {
    if (ChannelReadable(channel_fd)) return 0;
    AppLock lock(this);
    FindWaitersLocked(channel_fd)->clean_at = sent_before;
  }
  // A non-blocking channel gets one round and no wait (libibverbs' read then
  // says EAGAIN). Its flags are looked up at most once a millisecond.
  const auto refresh_flags = [&]() -> int {
    const int flags = fcntl(channel_fd, F_GETFL);
    if (flags < 0) return errno;
    nonblocking = (flags & O_NONBLOCK) != 0;
    AppLock lock(this);
    ChannelWaiters* cw = FindWaitersLocked(channel_fd);
    cw->nonblocking = nonblocking;
    cw->flags_valid_until = NowNs() + 1'000'000;
    return 0;
  };
  if (check_flags) {
    if (const int err = refresh_flags(); err != 0) return err;
  }
  const auto take_pending = [&](ChannelWaiters* cw) {
    if (cw->pending.empty()) return false;
    *cq_handle = cw->pending.front();
    cw->pending.erase(cw->pending.begin());
    stats_.events_handed_over.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  if (nonblocking) {
    AppLock lock(this);
    PollLocked(NowNs());
    take_pending(FindWaitersLocked(channel_fd));
    return 0;
  }
  const ProgressConfig& pc = file_.progress;
  SignalGate signals(SignalsCanInterrupt());  // declared after leave: the mask is restored first
  uint64_t now = NowNs();
  const uint64_t busy_until = now + uint64_t{pc.event_busy_poll_us} * 1000;
  uint64_t next_signal_check = now + kSignalCheckNs;
  uint64_t next_flags_check = now + 1'000'000;
  while (true) {
    uint32_t work;
    {
      AppLock lock(this);
      now = NowNs();
      work = PollLocked(now);
      if (take_pending(FindWaitersLocked(channel_fd))) return 0;
    }
    if (now >= next_signal_check) {
      if (signals.Interrupted()) return EINTR;
      next_signal_check = now + kSignalCheckNs;
    }
    if (work > 0) continue;
    if (now < busy_until) {
      CpuRelax();
      continue;
    }
    if (NowNs() >= next_flags_check) {  // the program may have made the channel non-blocking
      if (const int err = refresh_flags(); err != 0) return err;
      if (nonblocking) return 0;
      next_flags_check = NowNs() + 1'000'000;
    }
    int wire_fd = -1;
    {
      AppLock lock(this);
      wire_fd = ArmWireLocked();
      // A frame may have come in before the request was seen.
      if (wire_fd >= 0 && (work = PollLocked(NowNs())) > 0) DisarmWireLocked();
      ChannelWaiters* cw = FindWaitersLocked(channel_fd);
      if (take_pending(cw)) {
        if (work == 0 && wire_fd >= 0) DisarmWireLocked();
        return 0;
      }
      if (work == 0) ++cw->sleepers;  // from now on events come through the socket
    }
    if (work > 0) continue;
    // With an arrival descriptor the timeout only paces timers (retransmit,
    // link checks), as in the progress thread's idle sleep; without one,
    // sleeps stay hot_sleep_us, as the progress thread's do while a program
    // waits for an event.
    const uint32_t us =
        wire_fd >= 0 ? std::max<uint32_t>(pc.max_sleep_us, 1) : std::max<uint32_t>(pc.hot_sleep_us, 1);
    pollfd pfd[2] = {{channel_fd, POLLIN, 0}, {wire_fd, POLLIN, 0}};
    const timespec timeout{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    stats_.event_wait_sleeps.fetch_add(1, std::memory_order_relaxed);
    const int ready = ppoll(pfd, wire_fd >= 0 ? 2 : 1, &timeout, nullptr);
    const int poll_errno = errno;
    if (ready > 0 && (pfd[1].revents & POLLIN)) stats_.event_wait_arrivals.fetch_add(1, std::memory_order_relaxed);
    {
      AppLock lock(this);
      if (wire_fd >= 0) DisarmWireLocked();
      --FindWaitersLocked(channel_fd)->sleepers;
    }
    if (ready > 0 && (pfd[0].revents & POLLIN)) return 0;
    if (ready < 0 && poll_errno != EINTR) return poll_errno;
    if (signals.Interrupted()) return EINTR;
    // Unguarded (no such handler when the wait began): a handler just ran;
    // if one that does not restart exists now, it is the likely one.
    if (ready < 0 && !signals.active() && SignalsCanInterrupt(/*fresh=*/true)) return EINTR;
    next_signal_check = NowNs() + kSignalCheckNs;
  }
}

}  // namespace droce::verbs
