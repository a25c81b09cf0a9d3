#include "drivers/verbs/runtime.h"

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
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
#include "drivers/verbs/abi.h"

namespace droce::verbs {

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
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
  if (mu.try_lock()) {
    PrintStats();
    mu.unlock();
  }
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
  absl::StatusOr<std::unique_ptr<ethdev::EthdevPort>> port = ethdev::EthdevPort::Open(pc);
  if (!port.ok()) return port.status();
  port_ = std::move(*port);
  next_reconnect_ns_ = NowNs() + 100'000'000;
  attempt_ns_ = NowNs();
  link_up_ = port_->RefreshLink();
  dev_ = std::make_unique<core::Device>(file_.dev, port_.get());
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
  progress_ = std::thread([this] { ProgressLoop(); });
  return absl::OkStatus();
}

void Runtime::Stop() {
  stop_ = true;
  if (progress_.joinable()) progress_.join();
  {
    std::lock_guard<std::mutex> lock(mu);
    // Let what is queued leave (e.g. a final ACK) before the port goes.
    const uint64_t until = NowNs() + 20'000'000;
    while (NowNs() < until && dev_->Poll(NowNs()) > 0) {
    }
    if (const char* env = std::getenv("DROCE_STATS"); env != nullptr && *env == '1') PrintStats();
    dev_.reset();
    // A program may open the device again (qperf does per test): the vdev
    // must go too, or probing it again fails. Removing it closes the port.
    wakeup_.reset();
    if (port_) port_->Stop(/*close=*/false);
    (void)ethdev::RemoveVdev(file_.port_name());
    port_.reset();
  }
  if (event_socket_ >= 0) close(event_socket_);
}

// DROCE_STATS=1: the device's and every QP's counters on stderr at close,
// for users who want to know what the wire did (drops, NAKs, retransmits).
void Runtime::PrintStats() {
  const core::DeviceCounters& c = dev_->counters();
  const ethdev::PortStats& p = port_->stats();
  std::fprintf(stderr, "droce %s: link %s, reconnects %lu\n", file_.name.c_str(), port_->LinkUp() ? "up" : "down",
               reconnects_);
  std::fprintf(stderr,
               "droce %s: rx %lu pkts %lu B, tx %lu pkts %lu B, tx_dropped %lu, tx_port_full %lu, rx_foreign %lu, "
               "rx_unknown_qp %lu, "
               "rx_bad_icrc %lu, port tx_full %lu, progress polls %lu sleeps %lu (woken by arrival %lu, %s), "
               "events %lu comp %lu async\n",
               file_.name.c_str(), c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes, c.tx_dropped, c.tx_port_full,
               c.rx_foreign,
               c.rx_unknown_qp, c.rx_bad_icrc(), p.tx_full, stats_.progress_polls.load(),
               stats_.progress_sleeps.load(), stats_.progress_arrival_wakeups.load(),
               wakeup_ ? wakeup_->kind() : "timed sleeps only", stats_.comp_events.load(),
               stats_.async_events.load());
  for (uint32_t qpn = core::Device::kFirstQpn; qpn < core::Device::kFirstQpn + dev_->config().max_qp; ++qpn) {
    transport::RcQp* q = dev_->qp(qpn);
    if (q == nullptr) continue;
    const transport::QpCounters& k = q->counters();
    std::fprintf(stderr,
                 "droce %s qp %u: tx %lu rx %lu retransmitted %lu timeouts %lu naks sent %lu (seq %lu, rnr %lu) "
                 "received %lu (rnr %lu) duplicates %lu out_of_sequence %lu acks sent %lu received %lu "
                 "dropped_wrong_state %lu state %s\n",
                 file_.name.c_str(), qpn, k.tx_packets, k.rx_packets, k.retransmitted_packets, k.timeouts,
                 k.naks_sent, k.seq_naks_sent, k.rnr_naks_sent, k.naks_received, k.rnr_naks_received,
                 k.duplicates_received, k.out_of_sequence, k.acks_sent, k.acks_received, k.dropped_wrong_state,
                 transport::QpStateName(q->state()));
  }
}

uint32_t Runtime::PollLocked(uint64_t now_ns) {
  if (now_ns >= next_link_check_ns_) {
    CheckLink(now_ns);
    CheckQps();  // once a millisecond, like the link
  }
  const uint32_t work = dev_->Poll(now_ns);
  if (!watches_.empty()) DeliverEvents();
  if (!srq_limits_.empty()) CheckSrqLimits();
  return work;
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
      droce_comp_event_desc ev{w.handle};
      sendto(event_socket_, &ev, sizeof ev, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&w.channel_addr),
             w.channel_addr_len);
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

// Refreshes the link state. A memif client whose link is down restarts its
// port every 100 ms if its connection attempt failed (its server may have
// started after it) or the link dropped; one whose attempt is still in its
// handshake is left alone for up to 2 s: restarting a client mid-handshake
// makes DPDK 22.11's memif server close a control socket its interrupt
// thread still watches, and EAL panics in the server.
void Runtime::CheckLink(uint64_t now_ns) {
  const bool up = port_->RefreshLink();
  link_up_.store(up, std::memory_order_relaxed);
  next_link_check_ns_ = now_ns + 1'000'000;
  if (up) {
    attempt_ns_ = 0;  // connected: a later drop restarts at once
    return;
  }
  if (!memif_client_ || now_ns < next_reconnect_ns_) return;
  if (!port_->start_failed() && attempt_ns_ != 0 && now_ns - attempt_ns_ < 2'000'000'000) return;
  next_reconnect_ns_ = now_ns + 100'000'000;
  port_->Reconnect();
  attempt_ns_ = now_ns;
  ++reconnects_;
}

bool Runtime::WaitLinkUp() {
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu);
      CheckLink(NowNs());
      if (link_up_) return true;
    }
    if (NowNs() >= deadline) return false;
    SleepUs(1000);
  }
}

bool Runtime::ResolveNeighbor(const core::Gid& gid) {
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  uint64_t next_request = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (dev_->HasNeighbor(gid)) return true;
      const uint64_t now = NowNs();
      if (now >= deadline) return false;
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
    const transport::RcQp* q = dev_->qp(w.qpn);
    if (q == nullptr || q->state() != transport::QpState::kErr) continue;
    w.reported = true;
    droce_async_event_desc ev{w.handle, IBV_EVENT_QP_FATAL, 0};
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

// Back-off when there is nothing to do: spin a little, then sleep. For
// hot_us after the last packet (and whenever a program is blocked waiting
// for a completion event) sleeps are short, so a packet for a program that
// spins on memory (ib_write_lat's server) waits microseconds, not a
// scheduler slice; after that, sleeps double up to max_sleep_us. While the
// program itself calls poll_cq it drives the dataplane and this thread only
// checks back every app_active_us.
void Runtime::ProgressLoop() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: short sleeps must stay short
  const ProgressConfig& pc = file_.progress;
  uint32_t idle = 0;
  uint64_t last_work = NowNs();
  uint32_t sleep_us = 1;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t now = NowNs();
    const bool waiting_for_event = armed_channels_.load(std::memory_order_relaxed) > 0;
    const uint64_t last_app = last_app_poll_ns_.load(std::memory_order_relaxed);
    if (!waiting_for_event && now - last_app < uint64_t{pc.app_active_us} * 1000) {
      SleepUs(std::max<uint32_t>(pc.app_active_us, 1));
      continue;
    }
    uint32_t work = 0;
    if (mu.try_lock()) {
      work = PollLocked(NowNs());
      mu.unlock();
      stats_.progress_polls.fetch_add(1, std::memory_order_relaxed);
    }
    if (work > 0) {
      idle = 0;
      sleep_us = 1;
      last_work = now;
      continue;
    }
    if (idle++ < pc.spins) {
      CpuRelax();
      continue;
    }
    stats_.progress_sleeps.fetch_add(1, std::memory_order_relaxed);
    const bool hot = waiting_for_event || now - last_work < uint64_t{pc.hot_us} * 1000;
    // Hot: short timed sleeps, not an armed wait. A thread woken by the
    // peer's eventfd write may be placed on the waker's CPU and wait there
    // behind a spinning program for a scheduler slice (ib_write_lat runs
    // with armed hot sleeps showed ms typicals); a timer wakes it where it
    // slept.
    if (hot) {
      SleepUs(std::max<uint32_t>(pc.hot_sleep_us, 1));
      continue;
    }
    const uint32_t found = IdleWait(sleep_us);
    if (found > 0) {
      idle = 0, last_work = NowNs(), sleep_us = 1;
    } else {
      sleep_us = std::min<uint32_t>(sleep_us * 2, std::max<uint32_t>(pc.max_sleep_us, 1));
    }
  }
}

// Sleeps up to `us`, or until a frame arrives when the port can say so:
// asks the port to notify, polls once more (a frame may have come in before
// the request was seen), then sleeps on the descriptor. Returns the work that
// last poll found (the caller then keeps polling instead of sleeping).
uint32_t Runtime::IdleWait(uint32_t us) {
  int fd = -1;
  if (wakeup_ != nullptr && link_up() && mu.try_lock()) {
    fd = wakeup_->Arm();
    const uint32_t work = fd >= 0 ? PollLocked(NowNs()) : 0;
    if (work > 0) wakeup_->Disarm();
    mu.unlock();
    if (work > 0) return work;
  }
  if (fd < 0) {
    SleepUs(us);
    return 0;
  }
  pollfd pfd{fd, POLLIN, 0};
  const timespec timeout{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  if (ppoll(&pfd, 1, &timeout, nullptr) > 0 && (pfd.revents & POLLIN)) {
    stats_.progress_arrival_wakeups.fetch_add(1, std::memory_order_relaxed);
  }
  std::lock_guard<std::mutex> lock(mu);
  wakeup_->Disarm();
  return 0;
}

}  // namespace droce::verbs
