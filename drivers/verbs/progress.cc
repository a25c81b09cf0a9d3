// The verbs runtime's progress thread (doc/verbs.md "Progress thread"): the
// loop that polls the device while nobody else does, and its policy: when
// to spin, yield or sleep, the SCHED_FIFO / SCHED_OTHER switch, the PM QoS
// hold while hot, and the idle wait on the wire's wake-up.

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
#include "drivers/verbs/abi.h"
#include "drivers/fabric/protocol.h"
#include "drivers/verbs/thread_pause.h"
#include "drivers/verbs/tsc_clock.h"
#include "transport/sr/selective_repeat.h"

namespace droce::verbs {

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
  // (A process whose devices are all on the fabric runs no EAL.)
  const bool registered = ethdev::EalStarted() && ethdev::RegisterThread();
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

}  // namespace droce::verbs
