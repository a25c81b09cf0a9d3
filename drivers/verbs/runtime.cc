#include "drivers/verbs/runtime.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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

inline void CpuRelax() { __builtin_ia32_pause(); }

void SleepUs(uint32_t us) {
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  nanosleep(&ts, nullptr);
}
}  // namespace

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
  ethdev::PortConfig pc;
  pc.name = file_.port_name();
  absl::StatusOr<std::unique_ptr<ethdev::EthdevPort>> port = ethdev::EthdevPort::Open(pc);
  if (!port.ok()) return port.status();
  port_ = std::move(*port);
  link_up_ = port_->RefreshLink();
  dev_ = std::make_unique<core::Device>(file_.dev, port_.get());
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
    dev_.reset();
    if (port_) port_->Stop();
    port_.reset();
  }
  if (event_socket_ >= 0) close(event_socket_);
}

uint32_t Runtime::PollLocked(uint64_t now_ns) {
  if (now_ns >= next_link_check_ns_) {
    link_up_.store(port_->RefreshLink(), std::memory_order_relaxed);
    next_link_check_ns_ = now_ns + 1'000'000;
  }
  const uint32_t work = dev_->Poll(now_ns);
  if (!watches_.empty()) DeliverEvents();
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

void Runtime::WatchCq(const CqWatch& w) {
  watches_.push_back(w);
  watches_.back().seen_notifications = dev_->cq(w.cq_id)->notifications();
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

// Back-off ladder when there is nothing to do: spin, then yield, then sleep
// in doubling steps up to max_sleep_us. While a program is blocked waiting
// for a completion event it never sleeps (yielding keeps event latency low
// without starving the program's own threads on a small machine); while the
// program polls by itself it is left alone.
void Runtime::ProgressLoop() {
  const ProgressConfig& pc = file_.progress;
  uint32_t idle = 0;
  uint64_t idle_since = 0;
  uint32_t sleep_us = 1;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t now = NowNs();
    const bool waiting_for_event = armed_channels_.load(std::memory_order_relaxed) > 0;
    const uint64_t last_app = last_app_poll_ns_.load(std::memory_order_relaxed);
    if (!waiting_for_event && now - last_app < uint64_t{pc.app_active_us} * 1000) {
      SleepUs(std::max<uint32_t>(pc.max_sleep_us, 1));
      idle = 0;
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
      continue;
    }
    if (idle++ < pc.spins) {
      CpuRelax();
      continue;
    }
    if (idle_since == 0 || idle == pc.spins + 1) idle_since = now;
    if (waiting_for_event || now - idle_since < uint64_t{pc.yield_us} * 1000) {
      sched_yield();
      continue;
    }
    SleepUs(sleep_us);
    stats_.progress_sleeps.fetch_add(1, std::memory_order_relaxed);
    sleep_us = std::min<uint32_t>(sleep_us * 2, std::max<uint32_t>(pc.max_sleep_us, 1));
  }
}

}  // namespace droce::verbs
