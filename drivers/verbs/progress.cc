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
#include "drivers/verbs/arrival_wait.h"
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

// A counter this thread alone writes: no locked instruction.
void Bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }

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

// SCHED_OTHER with the kernel's default slice and the thread's nice value
// kept, for the calling thread: progress_calm_lookbacks' nap (a timer
// wake-up that does not preempt the program on its CPU).
static void DefaultSlice() {
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  errno = 0;
  const int own = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  attr.sched_nice = errno == 0 ? own : 0;
  (void)syscall(SYS_sched_setattr, 0, &attr, 0u);
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

// The calling thread may run on one CPU only.
static bool OnOneCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1;
}

// The progress thread's loop and its scheduling state, one object per run
// of the thread. Each pass takes the first step that applies:
//   1. leave SCHED_FIFO when busy too long or no longer wanted (LeaveFifo);
//   2. a program thread waits for an event and drives meanwhile: nap
//      (ServeEventWaiter);
//   3. the program polls or posts: stand aside and look back later
//      (StandAsideWhileProgramCalls);
//   4. poll the device once (PollOnce);
//   5. nothing found: spin a little, then sleep (IdleStep).
class Runtime::ProgressThread {
 public:
  explicit ProgressThread(Runtime& rt);
  ~ProgressThread();
  void Run();

 private:
  // Scheduling policy: SCHED_FIFO and SCHED_OTHER, progress_sched=auto.
  void Announce() const;
  void SetFifoState(bool fifo);
  void SwitchAuto(bool to_fifo, uint64_t at, bool hold = true);
  bool AppCalling(uint64_t at) const;
  uint64_t ReadProgramCpu();
  bool AutoWantsFifo(uint64_t at);
  void LeaveFifo(uint64_t now);
  void Nap(uint32_t us);
  void Rested();
  void StandAside();
  void CalmSlice(bool calm);
  // The loop's steps.
  void ServeEventWaiter();
  void StandAsideWhileProgramCalls(uint64_t now, uint64_t last_app, uint64_t active_ns, bool sending);
  uint32_t PollOnce();
  uint32_t RoundLocked(uint64_t polled_at);
  // The clock, read for a pass (Run) or after a sleep; the pass's poll
  // round may take the reading as its time (RoundTime).
  uint64_t ReadClock() { return round_time_.Read(rt_.mu, [] { return NowNs(); }); }
  void IdleStep(uint64_t now, uint64_t last_app);
  bool StreamWait(uint64_t now, bool receiving, bool on_ring);
  void CountPoll(uint64_t now, uint64_t last_app, bool waiting_for_event);

  Runtime& rt_;
  const ProgressConfig& pc_;
  bool registered_ = false;  // holds an lcore id (UnregisterThread at the end)
  bool nice_taken_ = true;
  // SCHED_FIFO, as the softirq that runs a kernel NIC's receive: a wake-up
  // (an arrival, a hot-phase timer) preempts a program spinning on memory at
  // once instead of waiting out its slice. It stays bounded: empty spins
  // last at most kFifoSpinNs, and a thread busy for kFifoBusyNs without a
  // sleep drops to SCHED_OTHER until it next sleeps (as softirq work past
  // its budget goes to ksoftirqd), so a busy receiver shares the CPU fairly.
  bool fifo_ = false;
  bool fifo_permitted_ = false;
  // progress_sched=auto: the thread starts SCHED_OTHER (normal's loop) and
  // takes SCHED_FIFO (fifo's loop) right before an armed sleep when
  // AutoSchedPolicy says the program does not drive, packets are sparse and
  // the program's thread ran while it did not call (a SCHED_OTHER thread
  // that has to wait behind a spinning program for the tick could not
  // promote itself in time). It leaves it as under fifo (standing aside for
  // a polling program, NoteAppPoll) and, with a 2 ms hold, when it wakes and
  // finds the program driving or packets streaming (doc/verbs.md,
  // progress_sched).
  bool auto_sched_ = false;
  bool auto_refused_ = false;  // SCHED_FIFO refused once: not asked again
  AutoSchedPolicy auto_policy_;
  LookBackPacer pacer_;
  // Napping with the kernel's default slice (CalmSlice): the program has
  // kept polling through progress_calm_lookbacks look-backs.
  bool calm_slice_ = false;
  uint32_t idle_ = 0;          // empty polls since the last work
  uint64_t last_work_ = 0;
  uint64_t idle_since_ = 0;    // the first empty poll of this spin
  uint64_t busy_since_ = 0;    // the first poll since the last sleep
  uint32_t sleep_us_ = 1;      // the next idle sleep (doubles up to max_sleep_us)
  // The thread may run on one CPU only (mpirun binds a rank, and the
  // threads it starts, to a core): it then shares that CPU with the
  // program, and an empty spin keeps the program off it (IdleStep).
  bool one_cpu_ = false;
  static constexpr uint64_t kSharedCpuNs = 1'000'000;
  ArrivalWait arrival_;        // the hot phase's wait inside a stream (StreamWait)
  StreamGauge stream_;         // is the device a stream's receiving end (StreamWait)
  // The last round found nothing to do with frames a full direct ring
  // refused (Runtime::BlockedOnRingLocked): the hot phase waits armed for
  // the receiver to free slots (StreamWait).
  bool on_ring_ = false;
  RoundTime round_time_;       // the pass's clock reading, for its round (PollOnce)
  // busy_since_ is a reading taken after a sleep, for the next pass (Run).
  bool woke_ = false;
};

Runtime::ProgressThread::ProgressThread(Runtime& rt)
    : rt_(rt),
      pc_(rt.file_.progress),
      auto_policy_(pc_.app_active_us, pc_.auto_drive_us),
      pacer_(pc_.app_active_us, pc_.app_active_max_us, pc_.slice_us != 0 ? pc_.calm_lookbacks : 0,
             pc_.steady_quiet_us, pc_.steady_lookback_max_us),
      arrival_(uint64_t{std::max<uint32_t>(pc_.max_sleep_us, 1)} * 1000) {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us: short sleeps must stay short
  // An lcore id gives this thread DPDK's mempool cache: a passive side's
  // progress thread allocates and frees every mbuf (measured: 64 KiB
  // ib_write_bw's receiver spent its time in the pool's ring and in memif's
  // copies from cold mbufs without it). A process whose devices are all on
  // the fabric runs no EAL.
  registered_ = ethdev::EalStarted() && ethdev::RegisterThread();
  pthread_setname_np(pthread_self(), "droce-progress");
  nice_taken_ = RequestSlice(pc_.slice_us, pc_.nice);
  if (!nice_taken_) rt_.stats_.progress_nice_refused.store(1, std::memory_order_relaxed);
  fifo_ = pc_.sched_fifo && SetFifo(pc_.rt_priority);
  fifo_permitted_ = fifo_;
  rt_.progress_fifo_.store(fifo_, std::memory_order_relaxed);
  auto_sched_ = pc_.sched_auto;
  if (fifo_permitted_ || auto_sched_) {
    rt_.progress_tid_.store(static_cast<long>(syscall(SYS_gettid)), std::memory_order_relaxed);
  }
  last_work_ = NowNs();
  busy_since_ = last_work_;
  one_cpu_ = OnOneCpu();
  Announce();
}

Runtime::ProgressThread::~ProgressThread() {
  rt_.ReleasePmQos();
  if (registered_) ethdev::UnregisterThread();
}

void Runtime::ProgressThread::Announce() const {
  if (std::getenv("DROCE_DEBUG") == nullptr) return;
  const char* name = rt_.file_.name.c_str();
  if (fifo_) {
    std::fprintf(stderr, "droce %s: progress thread SCHED_FIFO priority %u\n", name, pc_.rt_priority);
    return;
  }
  std::fprintf(stderr, "droce %s: progress thread SCHED_OTHER, slice %u us, nice %d%s%s\n", name, pc_.slice_us,
               getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))),
               nice_taken_ ? "" : " (progress_nice refused: no CAP_SYS_NICE?)",
               pc_.sched_fifo   ? " (SCHED_FIFO refused: no CAP_SYS_NICE?)"
               : pc_.sched_auto ? " (progress_sched=auto: SCHED_FIFO while the program does not drive)"
                                : "");
}

void Runtime::ProgressThread::SetFifoState(bool fifo) {
  round_time_.Drop();  // after a system call: the round reads its own time
  fifo_ = fifo;
  calm_slice_ = false;  // every switch sets the slice (SCHED_FIFO has none)
  rt_.progress_fifo_.store(fifo, std::memory_order_relaxed);
}

void Runtime::ProgressThread::SwitchAuto(bool to_fifo, uint64_t at, bool hold) {
  if (to_fifo) {
    if (!SetFifo(pc_.rt_priority)) {
      auto_refused_ = true;
      rt_.stats_.progress_auto_refused.store(1, std::memory_order_relaxed);
      return;
    }
    rt_.stats_.progress_auto_to_fifo.fetch_add(1, std::memory_order_relaxed);
  } else {
    (void)RequestSlice(pc_.slice_us == 0 ? 1 : pc_.slice_us, pc_.nice);  // SCHED_OTHER, slice and nice with it
    rt_.stats_.progress_auto_to_other.fetch_add(1, std::memory_order_relaxed);
  }
  SetFifoState(to_fifo);
  if (hold || to_fifo) auto_policy_.Switched(to_fifo, at);
}

// A post or poll within app_active_us (auto only).
bool Runtime::ProgressThread::AppCalling(uint64_t at) const {
  const uint64_t last = rt_.last_app_call_ns_.load(std::memory_order_relaxed);
  return last != 0 && NsSince(at, last) < uint64_t{pc_.app_active_us} * 1000;
}

// The CPU time of the program thread that called last (its thread clock,
// MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) as glibc's
// pthread_getcpuclockid builds it), for AutoSchedPolicy::NoteProgramCpu.
// Returns when it was read.
uint64_t Runtime::ProgressThread::ReadProgramCpu() {
  const long tid = rt_.app_tid_.load(std::memory_order_relaxed);
  const auto clock = static_cast<clockid_t>((~static_cast<uint32_t>(tid) << 3) | 6u);
  timespec ts{};
  const bool ok = tid != 0 && clock_gettime(clock, &ts) == 0;
  const uint64_t at = NowNs();
  if (!ok) {
    auto_policy_.ProgramCpuUnknown();
  } else {
    const uint64_t cpu_ns = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
    auto_policy_.NoteProgramCpu(at, cpu_ns, rt_.last_app_call_ns_.load(std::memory_order_relaxed));
  }
  return at;
}

bool Runtime::ProgressThread::AutoWantsFifo(uint64_t at) {
  auto_policy_.NoteCalls(at, rt_.app_covered_ns_.load(std::memory_order_relaxed));
  const uint64_t last_call = rt_.last_app_call_ns_.load(std::memory_order_relaxed);
  const bool waiters = rt_.app_waiters_.load(std::memory_order_relaxed) > 0;
  if (fifo_) return auto_policy_.WantFifo(true, at, last_call, waiters);
  // A promotion: only for a program seen running without calls (the churn
  // guard; the reading is a system call, made only here).
  if (!auto_policy_.Eligible(at, last_call, waiters)) return false;
  if (auto_policy_.WantFifo(false, ReadProgramCpu(), last_call, waiters)) return true;
  rt_.stats_.progress_auto_not_running.fetch_add(1, std::memory_order_relaxed);
  return false;
}

// SCHED_FIFO ends after kFifoBusyNs without a sleep; under auto also when
// the thread wakes into a program that drives, or a stream.
void Runtime::ProgressThread::LeaveFifo(uint64_t now) {
  if (fifo_ && auto_sched_ && now - busy_since_ > kFifoBusyNs) {
    SwitchAuto(false, now);
    rt_.stats_.progress_fifo_demotions.fetch_add(1, std::memory_order_relaxed);
  } else if (auto_sched_ && fifo_ && !AutoWantsFifo(now)) {
    SwitchAuto(false, now);
  }
  if (fifo_ && now - busy_since_ > kFifoBusyNs) {
    (void)RequestSlice(pc_.slice_us == 0 ? 1 : pc_.slice_us, pc_.nice);  // SCHED_OTHER again, slice and nice with it
    SetFifoState(false);
    rt_.stats_.progress_fifo_demotions.fetch_add(1, std::memory_order_relaxed);
  }
}

// A timed sleep. Under SCHED_FIFO at least kFifoMinSleepUs: a shorter one
// on a virtual machine often never leaves the CPU (the timer fires before
// the thread is switched out), so a real-time thread sleeping 5 us at a
// time holds its CPU (measured: two such threads took both CPUs).
void Runtime::ProgressThread::Nap(uint32_t us) {
  SleepUs(fifo_ ? std::max<uint32_t>(us, kFifoMinSleepUs) : std::max<uint32_t>(us, 1));
}

// Called before every idle sleep: a demoted thread gets SCHED_FIFO back.
void Runtime::ProgressThread::Rested() {
  if (fifo_permitted_ && !fifo_) SetFifoState(SetFifo(pc_.rt_priority));
}

// While a program polls, a SCHED_FIFO thread stands aside at SCHED_OTHER
// (default slice): its look-backs do not preempt the program. It takes
// SCHED_FIFO again (Rested) only to sleep armed, i.e. once no program
// thread has polled for app_active_us: it serves programs that spin on
// memory or are blocked elsewhere, as NAPI busy-poll keeps the IRQ masked.
void Runtime::ProgressThread::StandAside() {
  if (fifo_ && auto_sched_) {
    SwitchAuto(false, NowNs(), /*hold=*/false);  // no hold: it serves the pauses between the bursts
  } else if (fifo_) {
    ToOther(0);
    SetFifoState(false);
  }
}

// progress_calm_lookbacks: while the program keeps polling, each look-back
// is a timer wake-up, and with the short slice it preempts the program on a
// shared CPU (mpirun binds a rank and its threads to one core): two context
// switches, ~9 us on the test VM, 6,500 times a second beside an MPI rank
// (tools/bench/stacks/results.md, stacks15). With the default slice the
// wake-up waits for the program's slice end or its next block instead. The
// short slice comes back at the first look-back that finds a pause or a
// quiet program, so a program that pauses every iteration (ib_write_lat)
// never leaves it; one that polled continuously and then spins on memory
// waits up to a slice once. sched_setattr on transitions only.
void Runtime::ProgressThread::CalmSlice(bool calm) {
  if (calm == calm_slice_ || fifo_) return;
  round_time_.Drop();  // a system call: the round reads its own time
  if (calm) {
    DefaultSlice();
    Bump(rt_.stats_.wakes.calm_slices);
  } else {
    (void)RequestSlice(pc_.slice_us, pc_.nice);
    Bump(rt_.stats_.wakes.short_slices);
  }
  calm_slice_ = calm;
}

// A program thread waits for an event and drives the dataplane meanwhile
// (WaitForChannel): look back after max_sleep_us.
void Runtime::ProgressThread::ServeEventWaiter() {
  Bump(rt_.stats_.wakes.event_waiter);
  rt_.HoldPmQos();
  StandAside();
  Nap(pc_.max_sleep_us);
  busy_since_ = ReadClock(), woke_ = true;
}

// Until the program has not polled for app_active_us: one that stops
// polling (to spin on memory) gets this thread after app_active_us, not
// after up to twice that as with whole app_active_us sleeps. A program
// that is still polling at the next look-back polls continuously
// (ibv_rc_pingpong, ib_send_lat): the look-backs then double up to
// app_active_max_us. Each is a timer wake-up whose short slice preempts the
// polling program (measured: every 20 us cost ibv_rc_pingpong most of its
// time, doc/verbs.md); one that found the program quiet starts again at
// app_active_us (ib_write_lat polls for its send completion, then spins on
// memory: its look-back still lands app_active_us after that poll, and its
// pauses keep the spacing from doubling).
void Runtime::ProgressThread::StandAsideWhileProgramCalls(uint64_t now, uint64_t last_app, uint64_t active_ns,
                                                           bool sending) {
  rt_.HoldPmQos();
  StandAside();
  // auto: a reading of the program's CPU time before the nap, so that the
  // next promotion sees whether it ran after its last call.
  if (auto_sched_ && !auto_refused_ && !auto_policy_.driving() && !auto_policy_.dense()) (void)ReadProgramCpu();
  uint64_t gap_end = 0;
  const uint64_t gap = rt_.app_calls_.TakeMaxGap(&gap_end);
  const uint64_t wake_ns = pacer_.StandAside(now, last_app, gap, gap_end, active_ns, sending);
  CalmSlice(pacer_.calm());
  rt_.stats_.progress_stand_asides.fetch_add(1, std::memory_order_relaxed);
  Nap(static_cast<uint32_t>((wake_ns - now) / 1000));
  busy_since_ = ReadClock(), woke_ = true;
}

// One poll round, unless a program thread waits for the device mutex or
// holds it. Returns the round's work. Its time is the pass's reading when
// nobody has held the device since it was taken (RoundTime), else read
// under the lock: a program thread may have run a round at a later time in
// between, and the engine takes unsigned differences of successive times
// (timeouts, CNP spacing), which must not step back.
uint32_t Runtime::ProgressThread::PollOnce() {
  if (rt_.mu.app_waiting.load(std::memory_order_relaxed) != 0 || !rt_.mu.try_lock()) return 0;
  const uint32_t work = RoundLocked(round_time_.ForHold(rt_.mu, [] { return NowNs(); }));
  rt_.Unlock();
  // This thread is the counter's only writer: no locked instruction, which
  // would wait for the round's stores to the wire to drain.
  rt_.stats_.progress_polls.store(rt_.stats_.progress_polls.load(std::memory_order_relaxed) + 1,
                                  std::memory_order_relaxed);
  return work;
}

// A round of this thread's, with the received packets counted for the
// packet rates (AutoSchedPolicy::NoteRx: auto's verdicts) and the stream
// StreamWait looks for under every policy (StreamGauge). Caller holds mu.
uint32_t Runtime::ProgressThread::RoundLocked(uint64_t polled_at) {
  const uint64_t rx_before = rt_.dev_->counters().rx_packets;
  const uint32_t work = rt_.PollLocked(polled_at);
  on_ring_ = work == 0 && rt_.BlockedOnRingLocked(polled_at);
  const uint64_t rx_after = rt_.dev_->counters().rx_packets;
  rt_.progress_rx_packets_ += rx_after - rx_before;
  if (auto_sched_) auto_policy_.NoteRx(polled_at, rx_after, rt_.progress_rx_packets_);
  stream_.Note(polled_at, rx_after, rt_.dev_->counters().tx_packets);
  return work;
}

// Nothing to do: spin a little, then sleep. For hot_us after the last
// packet (and whenever a program is blocked waiting for a completion event)
// sleeps are short, so a packet for a program that spins on memory
// (ib_write_lat's server) waits microseconds, not a scheduler slice; after
// that, sleeps double up to max_sleep_us.
void Runtime::ProgressThread::IdleStep(uint64_t now, uint64_t last_app) {
  if (idle_ == 0) idle_since_ = now;
  // Under auto a SCHED_FIFO thread whose program is not calling spins
  // longer (kAutoFifoSpinNs).
  const uint64_t spin_cap_ns = !auto_sched_ || AppCalling(now) ? kFifoSpinNs : kAutoFifoSpinNs;
  // Confined to the CPU of a program that called within kSharedCpuNs, the
  // thread does not spin: while it spins the program cannot run, so the
  // program's next call, or its look at what the thread delivered, waits
  // for the spins to end (up to the thread's slice); a hot sleep gives the
  // CPU back at once. A program that does not call (ib_read_lat's server
  // waits in a TCP read) leaves the CPU to the thread, whose spins then
  // catch the next request.
  const bool shares_cpu = one_cpu_ && NsSince(now, last_app) < kSharedCpuNs;
  if (!shares_cpu && idle_++ < pc_.spins && (!fifo_ || now - idle_since_ < spin_cap_ns)) {
    Bump(rt_.stats_.wakes.spins);
    CpuRelax();
    return;
  }
  Rested();
  if (auto_sched_ && !auto_refused_ && !fifo_ && AutoWantsFifo(now)) {
    SwitchAuto(true, now);  // decided before the sleep, not after
  }
  rt_.stats_.progress_sleeps.fetch_add(1, std::memory_order_relaxed);
  // An armed channel whose program waits on the fd itself (UCX's epoll)
  // keeps the thread hot only while packets come: a device with an armed
  // channel and no traffic sleeps armed like any idle one (an arrival wakes
  // it). A hot phase for every armed channel would keep a thread waking
  // every hot_sleep_us on each device such a program opens (UCX and MPI
  // open them all, 8 per rank on a GPU server), and on shared cores those
  // threads take the CPU from the programs' own progress.
  const bool hot = now - last_work_ < uint64_t{pc_.hot_us} * 1000;
  // Hot: short timed sleeps, not an armed wait. A thread woken by the
  // peer's eventfd write may be placed on the waker's CPU and wait there
  // behind a spinning program for a scheduler slice (ib_write_lat runs with
  // armed hot sleeps showed ms typicals); a timer wakes it where it slept.
  // SCHED_FIFO: the hot phase sleeps armed too. A woken real-time thread
  // goes to a CPU running only SCHED_OTHER work and preempts it at once, so
  // the arrival wakes it within microseconds and no timer wakes it in
  // between (timed hot sleeps cost a preemption of the program every
  // hot_sleep_us).
  // Idle — no packet, and no program call, within hot_us — CPUs may sleep
  // deeply again. The program's calls count too: a polling program that the
  // scheduler held off for longer than app_active_us is still hot (without
  // them the request could flap: a polling program sampled for 2 s was
  // never found held, the thread having stood aside 548 times meanwhile).
  if (!hot && NsSince(now, last_app) >= uint64_t{pc_.hot_us} * 1000) rt_.ReleasePmQos();
  if (hot && !fifo_) {
    const bool receiving = stream_.receiving();
    if (pc_.stream_wait && (receiving || on_ring_) && StreamWait(now, receiving, on_ring_)) return;
    Bump(rt_.stats_.wakes.hot_sleeps);
    SleepUs(std::max<uint32_t>(pc_.hot_sleep_us, 1));
    busy_since_ = ReadClock(), woke_ = true;
    return;
  }
  Bump(rt_.stats_.wakes.idle_waits);
  one_cpu_ = OnOneCpu();  // a program may bind itself after it opened the device
  if (fifo_) rt_.fifo_armed_.store(true, std::memory_order_release);
  const uint32_t found = rt_.IdleWait(fifo_ ? std::max<uint32_t>(sleep_us_, kFifoMinSleepUs) : sleep_us_, fifo_);
  if (fifo_ && !rt_.fifo_armed_.exchange(false, std::memory_order_acq_rel)) {
    SetFifoState(false);  // a program polled meanwhile and demoted this thread (NoteAppPoll)
  }
  busy_since_ = ReadClock(), woke_ = true;
  if (found > 0) {
    idle_ = 0, last_work_ = busy_since_, sleep_us_ = 1;
  } else {
    sleep_us_ = std::min<uint32_t>(sleep_us_ * 2, std::max<uint32_t>(pc_.max_sleep_us, 1));
  }
}

// At the receiving end of a stream (StreamGauge: the last millisecond
// brought kMinPerMs packets or more, kRxPerTx times what went out) the hot
// phase waits for the next frame on the wire's arrival descriptor with no
// timer (ArrivalWait): the stream's next frame comes soon and wakes it for
// ~2 us of CPU, where a timed hot sleep costs 17-42 us of CPU and ~100 us of
// wall time on the test VM, long enough to stall both ends (perftest's
// window of 128 frames drains in ~30 us at 4 M msg/s). The watchdog (a
// max_sleep_us period) bounds the wait as max_sleep_us bounds an idle
// sleep. Only while the device has nothing due before the watchdog would
// end it (core::Device::Quiescent): a timer of the engine's keeps the timed
// sleep. Request-response traffic keeps the timed hot sleep, however fast:
// the peer's eventfd write may place this thread behind a program spinning
// on the waker's CPU, and the peer waits for the answer (ib_read_lat's
// typical went from 2 to 900 us with stream waits there).
// A sender whose frames a full direct ring refused (on_ring: the last round
// found nothing else to do, Runtime::BlockedOnRingLocked) waits the same
// way, under every traffic pattern: only the receiver freeing slots lets it
// go on, and DirectIo::Arm asks the receiver to write the eventfd this
// waits on when it does (once per wait), where a timed sleep would leave
// the freed ring empty for the sleep's ~100 us (ib_read_bw's responder).
// False where it did not wait (the device busy, the wire unable to notify,
// something due): the caller sleeps as before.
bool Runtime::ProgressThread::StreamWait(uint64_t now, bool receiving, bool on_ring) {
  if (!arrival_.usable() || !rt_.link_up()) return false;
  if (rt_.mu.app_waiting.load(std::memory_order_relaxed) != 0 || !rt_.mu.try_lock()) return false;
  const uint64_t until = now + uint64_t{std::max<uint32_t>(pc_.max_sleep_us, 1)} * 1000;
  on_ring = on_ring && rt_.BlockedOnRingLocked(until);
  // A doorbell record a post left (RingPosted) is work for the next round.
  if (rt_.PostedPending() || (!on_ring && !(receiving && rt_.dev_->Quiescent(until)))) {
    rt_.Unlock();
    if (receiving) rt_.stats_.progress_stream_busy.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  struct Wire {
    ProgressThread& t;
    int Arm() { return t.rt_.ArmWireLocked(); }
    uint32_t Poll() { return t.RoundLocked(NowNs()); }
    void Disarm() { t.rt_.DisarmWireLocked(); }
    void Lock() { t.rt_.mu.lock(); }
    void Unlock() { t.rt_.Unlock(); }
  } wire{*this};
  uint32_t work = 0;
  const ArrivalWait::End end = arrival_.Wait(wire, now, &work);
  if (end == ArrivalWait::End::kNotArmed) return false;
  busy_since_ = ReadClock(), woke_ = true;
  if (end == ArrivalWait::End::kWork) {
    idle_ = 0, last_work_ = busy_since_, sleep_us_ = 1;
    return true;
  }
  rt_.stats_.progress_stream_waits.fetch_add(1, std::memory_order_relaxed);
  if (on_ring) rt_.stats_.progress_ring_waits.fetch_add(1, std::memory_order_relaxed);
  if (end == ArrivalWait::End::kArrival) {
    rt_.stats_.progress_arrival_wakeups.fetch_add(1, std::memory_order_relaxed);
  } else {
    rt_.stats_.progress_stream_watchdogs.fetch_add(1, std::memory_order_relaxed);
  }
  return true;
}

// Why this pass polls (DROCE_STATS: Stats::Wakes).
void Runtime::ProgressThread::CountPoll(uint64_t now, uint64_t last_app, bool waiting_for_event) {
  Runtime::Stats::Wakes& w = rt_.stats_.wakes;
  const uint64_t quiet_ns = NsSince(now, last_app);
  if (waiting_for_event && quiet_ns < uint64_t{pc_.app_active_us} * 1000) {
    Bump(w.armed_polls);
    return;
  }
  Bump(w.quiet_polls);
  Bump(quiet_ns < 100'000 ? w.quiet_100us : quiet_ns < 1'000'000 ? w.quiet_1ms : w.quiet_long);
}

void Runtime::ProgressThread::Run() {
  while (!rt_.stop_.load(std::memory_order_relaxed)) {
    // One reading a pass: the one a sleep just ended with, or a new one.
    const uint64_t now = woke_ ? busy_since_ : ReadClock();
    woke_ = false;
    LeaveFifo(now);
    if (rt_.app_waiters_.load(std::memory_order_acquire) > 0) {
      ServeEventWaiter();
      continue;
    }
    // A program that waits on a channel's fd itself (epoll) between its
    // polls arms the CQ before each wait: while it does, this thread does
    // not stand aside for its polls, so the event it waits for comes at
    // once. Not for a program that waits in ibv_get_cq_event (it drives the
    // dataplane itself), nor for a channel armed long ago: UCX's async
    // thread watches its UD CQ for the whole job while the program polls
    // every CQ itself, and the program's own rounds deliver that event.
    // Serving such a program would put this thread's poll rounds and hot
    // sleeps beside every round trip of an MPI ping-pong, on the rank's
    // own core when mpirun binds it (tools/bench/stacks/results.md).
    const uint64_t recent_ns = uint64_t{pc_.max_sleep_us} * 1000;
    const bool waiting_for_event =
        rt_.armed_channels_.load(std::memory_order_relaxed) > 0 &&
        NsSince(now, rt_.last_event_wait_ns_.load(std::memory_order_relaxed)) > recent_ns &&
        NsSince(now, rt_.last_arm_ns_.load(std::memory_order_relaxed)) < recent_ns;
    // A program thread inside a call (holding the device or waiting for
    // it) calls now (ProgramCalls::LastCall).
    const bool in_call = rt_.mu.locked() || rt_.mu.app_waiting.load(std::memory_order_relaxed) != 0;
    const uint64_t last_app = rt_.app_calls_.LastCall(now, in_call);
    if (in_call) Bump(rt_.stats_.wakes.in_call);
    const uint64_t shared_cpu_ns = TakeOverAfterNs(pc_, one_cpu_ && NsSince(now, last_app) < kSharedCpuNs,
                                                   rt_.app_calls_.last_rx_bytes());
    // One reading for both of the pacer's answers (the take-over wait and the spacing's cap).
    const bool sending = rt_.sending_stream_.load(std::memory_order_relaxed);
    const uint64_t take_over_ns = pacer_.TakeOverAfter(shared_cpu_ns, sending);
    if (!waiting_for_event && NsSince(now, last_app) < take_over_ns) {
      // A pause past app_active_us that the thread sits out: beside a
      // program on its CPU (TakeOverAfterNs), or beyond that, beside a
      // steady sender (LookBackPacer::TakeOverAfter).
      if (NsSince(now, last_app) >= uint64_t{pc_.app_active_us} * 1000) {
        Bump(NsSince(now, last_app) < shared_cpu_ns ? rt_.stats_.wakes.shared_cpu_naps : rt_.stats_.wakes.steady_naps);
      }
      StandAsideWhileProgramCalls(now, last_app, take_over_ns, sending);
      continue;
    }
    pacer_.Quiet();
    CalmSlice(false);
    CountPoll(now, last_app, waiting_for_event);
    if (PollOnce() > 0) {
      Bump(rt_.stats_.wakes.work);
      rt_.HoldPmQos();
      idle_ = 0;
      sleep_us_ = 1;
      last_work_ = now;
      continue;
    }
    IdleStep(now, last_app);
  }
}

void Runtime::ProgressLoop() { ProgressThread(*this).Run(); }

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
