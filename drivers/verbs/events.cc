// The verbs runtime's events and completion channels: CQ notification and
// completion events, QP and SRQ async events, and the wait of
// ibv_get_cq_event on a channel (WaitForChannel), which polls in user space
// and keeps the kernel read()'s EINTR behaviour.

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

// Only an armed watch can have one: a CQ notifies once per arming, and
// DeliverEvents disarms the watch as it sends the event. The other watches
// are not looked up (UCX keeps one channel armed for a whole job beside
// three unarmed CQs per device, and this runs on every empty poll_cq).
bool Runtime::EventsPendingLocked() {
  for (const CqWatch& w : watches_) {
    if (!w.armed) continue;
    const queue::CompletionQueue* cq = dev_->cq(w.cq_id);
    if (cq != nullptr && cq->notifications() != w.seen_notifications) return true;
  }
  return false;
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
      last_arm_ns_.store(NowNs(), std::memory_order_relaxed);
    }
  }
}

int Runtime::ArmWireLocked() {
  if (wakeup_ == nullptr || wakeup_stale_ || !link_up()) return -1;
  int fd = wakeup_->Arm();  // idempotent: a second sleeper gets the same descriptor
  // The direct rings' eventfds with it (one epoll set), when there are any.
  if (fd >= 0 && direct_) {
    fd = direct_->Arm(fd);
    if (fd < 0) wakeup_->Disarm();
  }
  if (fd >= 0 && udp_) {  // the process's own socket with them
    fd = udp_->Arm(fd);
    if (fd < 0) {
      if (direct_) direct_->Disarm();
      wakeup_->Disarm();
    }
  }
  if (fd >= 0) ++wire_armers_;
  return fd;
}

// The last sleeper out masks the notification and drains it; an earlier one
// leaves it for the others (poll wakes every sleeper on one write).
void Runtime::DisarmWireLocked() {
  if (wire_armers_ > 0 && --wire_armers_ == 0) {
    if (udp_) udp_->Disarm();
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
    ethdev::FillBlockableSignals(&all);
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
      ethdev::FillBlockableSignals(&all);
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
  const uint32_t nap_us = pc.event_stream_nap_us;
  bool napped = false;  // the last poll followed a nap
  bool may_nap = nap_us > 0;
  while (true) {
    uint32_t work;
    bool in_stream = false;
    {
      AppLock lock(this);
      now = NowNs();
      work = PollLocked(now);
      if (take_pending(FindWaitersLocked(channel_fd))) return 0;
      in_stream = may_nap && udp_ && udp_->InStream();
    }
    if (now >= next_signal_check) {
      if (signals.Interrupted()) return EINTR;
      next_signal_check = now + kSignalCheckNs;
    }
    if (napped && work == 0) {  // the stream paused: busy-poll and sleep as outside one
      may_nap = in_stream = false;
      stats_.event_wait_naps_empty.fetch_add(1, std::memory_order_relaxed);
    }
    napped = false;
    if (work > 0) continue;
    if (in_stream) {
      // The channel alone: an arrival on the socket does not end the nap.
      pollfd pfd{channel_fd, POLLIN, 0};
      const timespec nap{0, static_cast<long>(std::min<uint32_t>(nap_us, 999'999)) * 1000};
      stats_.event_wait_naps.fetch_add(1, std::memory_order_relaxed);
      if (ppoll(&pfd, 1, &nap, nullptr) > 0 && (pfd.revents & POLLIN)) return 0;
      napped = true;
      continue;
    }
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
