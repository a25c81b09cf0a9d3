// A registered droce device: its dataplane configuration (written by
// droce-ctl, read by the provider when a program opens the device) and the
// sysfs tree and /dev node through which libibverbs discovers it.
//
// Pure C++ (no DPDK, no libibverbs) so droce-ctl and tests use it directly.
#ifndef DROCE_DRIVERS_VERBS_DEVICE_CONFIG_H_
#define DROCE_DRIVERS_VERBS_DEVICE_CONFIG_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"

namespace droce::verbs {

// The progress thread's back-off (doc/verbs.md). Sleeping rather than
// yielding matters on a small machine: a thread that wakes from a short sleep
// preempts a program spinning on memory, one that yields does not.
struct ProgressConfig {
  uint32_t spins = 200;           // empty polls before sleeping
  uint32_t hot_us = 2000;         // after the last packet, sleep only hot_sleep_us at a time
  uint32_t hot_sleep_us = 5;
  uint32_t max_sleep_us = 1000;   // then sleep steps double up to this
  uint32_t app_active_us = 20;    // the program called poll_cq this recently: let it drive
  // While the program keeps polling (every look-back finds a poll within
  // app_active_us, and no pause of its own since the last one) the
  // look-backs space out, doubling up to this: each one is a timed sleep
  // (~21 us of CPU on the 2-core test VM) whose wake-up preempts a
  // busy-polling program or its peer's thread. Milliseconds, so that a
  // program that never pauses (ib_write_bw's client) costs ~500 of them a
  // second, not 5,000; the price is once, when such a program stops calling
  // for good: the thread takes over up to this late. app_active_us (or
  // less) keeps them fixed.
  uint32_t app_active_max_us = 2000;
  // A program that kept polling through LookBackPacer::kSteadyLookBacks
  // look-backs in a row, on a device that sends a stream, is taken over only
  // once it has been quiet this long, not app_active_us: its shorter gaps are
  // preemptions (on a 2-core host the peer's thread or this one took its
  // CPU), and a look-back that took one for the end of its polling polled
  // beside it, spun, hot-slept and started the spacing over (measured:
  // ib_write_bw -s 64, 1 QP, +42 % by median in whole rounds;
  // tools/bench/verbs/results.md). Not for a ping-pong, which polls without
  // a pause too but spins on memory between its polls for what only the
  // thread delivers (ib_write_lat's typical rose ~60 % with it). The
  // look-backs of such a program are already this far apart or more (the
  // spacing at kSteadyLookBacks is 8 x app_active_us), so a sender that
  // stops waits no longer than it did. At or below app_active_us: no change.
  uint32_t steady_quiet_us = 200;
  // The look-back spacing's cap for such a steady sender, in place of
  // app_active_max_us (LookBackPacer::StandAside). Each look-back is a timer
  // wake-up that takes a CPU for ~60 us on the 2-core test VM, mostly the
  // server's progress thread's (the client's program thread holds the
  // other), and the stream's window waits out each one: at the 2 ms cap,
  // ~500 a second held a 1-QP ib_write_bw -s 64 pair's requests on their
  // way to the server for 177 ms in 2 s, at this one 9 ms
  // (tools/bench/verbs/results.md, window_trace.py). The price is paid
  // once, by a steady sender that stops calling for good (a bulk sender
  // that turns to computing): the thread takes over up to this late. At or
  // below app_active_max_us: no change.
  uint32_t steady_lookback_max_us = 20000;
  // A program that shares its one CPU with the thread (mpirun binds a rank,
  // and the threads it starts, to a core), called within the last
  // millisecond and took received data in its last poll is taken over only
  // once it has been quiet this long, not app_active_us (TakeOverAfterNs).
  uint32_t shared_cpu_quiet_us = 200;
  // progress_calm_lookbacks: after this many look-backs in a row found the
  // program polling with no pause of its own (LookBackPacer::calm), the
  // thread naps with the kernel's default slice instead of slice_us, so its
  // timer wake-up waits for the program's slice end or block instead of
  // preempting it; the first look-back that finds a pause or a quiet
  // program takes the short slice back. 0 (the default): always slice_us;
  // beside a bound MPI rank it measured no faster than 0
  // (tools/bench/stacks/results.md, stacks18).
  uint32_t calm_lookbacks = 0;
  bool wakeup = true;             // sleeps end when a frame arrives (memif, af_packet)
  // Inside a stream the hot phase waits for the next frame on the
  // wire's arrival descriptor, with no timer per wait (a watchdog of
  // max_sleep_us bounds it), instead of hot_sleep_us timed sleeps. Needs
  // wakeup.
  bool stream_wait = true;
  // ibv_get_cq_event (through libdroce-preload.so) polls the dataplane this
  // long before it sleeps on the wire and the channel (like Linux's
  // net.core.busy_poll for sockets); 0 sleeps at once.
  uint32_t event_busy_poll_us = 50;
  // Inside a stream on the process's own UDP socket (udp::UdpIo::InStream:
  // the last receive took a train of frames), an ibv_get_cq_event whose
  // poll finds nothing sleeps this long on the channel alone instead of
  // busy-polling: the socket queues the next trains meanwhile and one
  // receive takes them, where a busy-poll spends the gap in empty receives.
  // A nap after which the poll still finds nothing ends the naps of that
  // wait. 0: no naps.
  uint32_t event_stream_nap_us = 0;
  // The progress thread asks for this scheduler time slice (EEVDF's
  // sched_runtime): short, so that it preempts a program spinning on memory
  // when it wakes. 0 keeps the kernel's default.
  uint32_t slice_us = 100;
  // progress_nice: the progress thread's nice value (-20..19), set with the
  // slice. A lower value weighs its run time less in EEVDF's virtual time,
  // so a thread that runs in bursts next to a spinning program stays
  // eligible and its wake-up preempts the spinner instead of waiting for
  // the tick (doc/verbs.md). Negative values need CAP_SYS_NICE or
  // RLIMIT_NICE; refused, the thread keeps its nice value (DROCE_DEBUG says
  // so, DROCE_STATS counts it).
  int32_t nice = 0;
  // progress_sched=fifo: the progress thread runs SCHED_FIFO at rt_priority
  // when the process may (CAP_SYS_NICE, root): its wake-ups preempt a
  // program spinning on memory at once, as the softirq that runs a kernel
  // NIC's receive does. Not the default: on the 2-core test VM it cut
  // ib_write_lat's p99 but slowed busy-polling programs (doc/verbs.md).
  // progress_sched=normal, or fifo refused: SCHED_OTHER with slice_us.
  bool sched_fifo = false;
  // progress_sched=auto (the default): SCHED_FIFO (at rt_priority) only while
  // the program runs without calling (spins on memory), does not drive the
  // device and its traffic is sparse; SCHED_OTHER (with slice_us) while it
  // calls post/poll continuously, is preempted or blocked, or packets stream
  // (AutoSchedPolicy below). The thread switches its own policy, on
  // transitions only; refused (no CAP_SYS_NICE), it stays SCHED_OTHER.
  // sched_fifo and sched_auto are never both set.
  bool sched_auto = true;
  // progress_auto_drive_us: under auto, a program whose post/poll calls
  // covered 3/4 of the last this-many microseconds drives the device.
  uint32_t auto_drive_us = 1000;
  uint32_t rt_priority = 1;
  // progress_pm_qos_us: while the progress thread is hot (a program polled
  // or waits in ibv_get_cq_event, or a packet came within hot_us) the runtime
  // holds /dev/cpu_dma_latency at this many microseconds (PM QoS, as
  // tuned's latency-performance profile does): idle CPUs then stay in
  // shallow states (0: poll) and a wake-up does not first leave a halted
  // vCPU. Released once the thread goes idle. Costs: idle CPUs spin while
  // held (power, a VM host's CPU). -1: off (the default). Needs write access
  // to the device (root); refused, it does nothing (DROCE_DEBUG says so).
  int32_t pm_qos_us = -1;
};

// When the progress thread, standing aside for a polling program, looks
// again (progress_app_active_us, progress_app_active_max_us): the first
// look-back comes app_active_us after the program's last poll; each
// further one in a row that still finds the program polling, and polling
// without a pause since the last one, doubles the spacing up to
// app_active_max_us. A look-back that finds the program quiet (the thread
// then polls itself), or that follows a pause, starts again at
// app_active_us. A pause that spans the previous look-back is not the
// program's own: the look-back's wake-up preempted it there (on a shared
// CPU, ~9 us of two context switches on the test VM), so it does not start
// the spacing over.
class LookBackPacer {
 public:
  // Look-backs in a row that found the program polling after which it
  // counts as a steady poller (TakeOverAfter).
  static constexpr uint32_t kSteadyLookBacks = 4;
  LookBackPacer(uint32_t active_us, uint32_t max_us, uint32_t calm_after = 0, uint32_t steady_quiet_us = 0,
                uint32_t steady_max_us = 0)
      : active_ns_(uint64_t{active_us} * 1000),
        max_ns_(uint64_t{max_us} * 1000),
        steady_ns_(uint64_t{steady_quiet_us} * 1000),
        steady_max_ns_(std::max(max_ns_, uint64_t{steady_max_us} * 1000)),
        calm_after_(calm_after) {}
  // A steady poller (kSteadyLookBacks look-backs in a row found it polling)
  // on a device that is a stream's sending end (StreamGauge::sending).
  bool Steady(bool sending) const { return sending && streak_ >= kSteadyLookBacks; }
  // How long the program must have been quiet before the thread takes over,
  // given what TakeOverAfterNs says (take_over_ns): steady_quiet_us, if
  // longer, for a steady poller (kSteadyLookBacks look-backs in a row found
  // it polling) whose device is a stream's sending end (StreamGauge::sending:
  // ib_write_bw's client; not a ping-pong such as ib_write_lat, which polls
  // without a pause too but waits, between its polls, on what only the
  // thread delivers). Also what counts as a pause in StandAside then, so a
  // preemption shorter than that does not start the spacing over.
  uint64_t TakeOverAfter(uint64_t take_over_ns, bool sending) const {
    return Steady(sending) ? std::max(take_over_ns, steady_ns_) : take_over_ns;
  }
  // The program polled at last_app_ns, within app_active_us of now_ns;
  // max_gap_ns: the longest pause between its calls since the last
  // look-back, ending at gap_end_ns. When to look again. A pause of
  // app_active_us or more means it does stop polling (ib_write_lat spins on
  // memory between its completions): no doubling then.
  // active_ns: what counts as a pause here, app_active_us unless the
  // program shares the thread's CPU (TakeOverAfterNs); 0: app_active_us.
  // sending: the device is a stream's sending end; a steady poller's
  // spacing then doubles up to progress_steady_lookback_max_us.
  uint64_t StandAside(uint64_t now_ns, uint64_t last_app_ns, uint64_t max_gap_ns, uint64_t gap_end_ns = 0,
                      uint64_t active_ns = 0, bool sending = false) {
    if (active_ns == 0) active_ns = active_ns_;
    const bool ours = last_look_ns_ != 0 && gap_end_ns >= last_look_ns_ && gap_end_ns - max_gap_ns <= last_look_ns_;
    if (max_gap_ns >= active_ns && !ours) streak_ = 0;
    last_look_ns_ = now_ns;
    uint64_t wake_ns = last_app_ns + active_ns;
    const uint64_t cap = Steady(sending) ? steady_max_ns_ : max_ns_;
    if (streak_++ > 0 && cap > active_ns) {
      spacing_ns_ = std::min(spacing_ns_ * 2, cap);
      wake_ns = std::max(wake_ns, now_ns + spacing_ns_);
    } else {
      spacing_ns_ = active_ns;
    }
    return wake_ns;
  }
  void Quiet() { streak_ = 0, last_look_ns_ = 0; }
  // The program has kept polling through calm_after look-backs in a row
  // (progress_calm_lookbacks): the thread's next wake-up may wait for it.
  bool calm() const { return calm_after_ != 0 && streak_ >= calm_after_; }

 private:
  uint64_t active_ns_, max_ns_, steady_ns_, steady_max_ns_;
  uint32_t calm_after_;
  uint64_t spacing_ns_ = 0;
  uint64_t last_look_ns_ = 0;  // the last stand-aside look-back (0: the thread polled since)
  uint32_t streak_ = 0;        // look-backs in a row that found the program polling
};

// How long the program must not have called before the progress thread
// polls for it (ProgressThread::Run), and what counts as a pause in the
// look-back spacing. shares_cpu: the thread may run on one CPU only, the
// program's, and the program called within the last millisecond; rx_bytes:
// the received bytes its last poll with completions took. On that CPU the
// thread runs only by preempting the program (two context switches, ~9 us
// on the test VM), and the frames it would take are the ones the program's
// next poll takes. A rank whose poll took kBusyRxBytes or more is busy with
// them: UCX unpacks an eager message's 8 KiB fragments into the user's buffer
// for 20-100 us without a call (16 after one poll_cq), and a look-back that
// took it for a quiet program polled and hot-slept beside it about once per
// message (tools/bench/stacks/results.md, stacks19); it is quiet after
// shared_cpu_quiet_us. A program that waits for what only the device
// delivers after a poll that took no such data keeps app_active_us:
// ib_write_lat pinned to a CPU polls its send completion, then spins on
// memory until the peer's WRITE is placed (with 200 us for it too, its
// typical went from 0.72 to 1.3 us, its average from 6-17 to 50-60 us).
inline constexpr uint32_t kBusyRxBytes = 8192;
inline uint64_t TakeOverAfterNs(const ProgressConfig& pc, bool shares_cpu, uint32_t rx_bytes) {
  const uint64_t active_ns = uint64_t{pc.app_active_us} * 1000;
  if (!shares_cpu || rx_bytes < kBusyRxBytes) return active_ns;
  return std::max(active_ns, uint64_t{pc.shared_cpu_quiet_us} * 1000);
}

// The program's calls into the device as the progress thread's look-backs
// see them (Runtime::NoteAppPoll, RingPosted; ProgressThread::Run). Written
// by program threads, read by the progress thread: relaxed, as threads
// racing here only blur a heuristic.
//   - A poll stamps its start, and a poll whose round took work stamps its
//     end too: such a poll can last longer than app_active_us (a receiver
//     taking a 64 KiB message's frames while the sender produces them), and
//     the pause before the next poll is measured from where it ended.
//   - A call under way (a program thread holds the device or waits for it)
//     is a call now: the thread could not poll then anyway, and a look-back
//     that took it for a quiet program polled, spun and slept in 5 us steps
//     beside it on its CPU (tools/bench/stacks/results.md, stacks15).
class ProgramCalls {
 public:
  void Polled(uint64_t now_ns) {
    NotePause(now_ns);
    last_poll_ns_.store(now_ns, std::memory_order_relaxed);
  }
  void BusyPollEnded(uint64_t now_ns) { last_poll_ns_.store(now_ns, std::memory_order_relaxed); }
  void Posted(uint64_t now_ns) {
    NotePause(now_ns);
    if (last_post_ns_.load(std::memory_order_relaxed) != now_ns) {
      last_post_ns_.store(now_ns, std::memory_order_relaxed);
    }
  }
  // A poll returned completions: the bytes of the received messages among
  // them (0: none; TakeOverAfterNs).
  void TookCompletions(uint32_t rx_bytes) {
    if (last_rx_bytes_.load(std::memory_order_relaxed) != rx_bytes) {
      last_rx_bytes_.store(rx_bytes, std::memory_order_relaxed);
    }
  }
  uint32_t last_rx_bytes() const { return last_rx_bytes_.load(std::memory_order_relaxed); }
  uint64_t last_poll_ns() const { return last_poll_ns_.load(std::memory_order_relaxed); }
  // The program's last call as a look-back at now_ns sees it; in_call: a
  // program thread holds the device or waits for it.
  uint64_t LastCall(uint64_t now_ns, bool in_call) const {
    if (in_call) return now_ns;
    return std::max(last_poll_ns_.load(std::memory_order_relaxed), last_post_ns_.load(std::memory_order_relaxed));
  }
  // The longest pause between calls since the last call of this, and when
  // it ended (*end_ns).
  uint64_t TakeMaxGap(uint64_t* end_ns = nullptr) {
    if (end_ns != nullptr) *end_ns = max_gap_end_ns_.load(std::memory_order_relaxed);
    return max_gap_ns_.exchange(0, std::memory_order_relaxed);
  }

 private:
  // The longest pause between calls since the progress thread last looked
  // (LookBackPacer): a sender posting a message's fragments for longer than
  // app_active_us before it polls (UCX's 8 bcopy SENDs of a 64 KiB eager
  // message) does not pause.
  void NotePause(uint64_t now_ns) {
    const uint64_t prev = LastCall(now_ns, false);
    const uint64_t gap = now_ns > prev ? now_ns - prev : 0;
    if (gap > max_gap_ns_.load(std::memory_order_relaxed)) {
      max_gap_ns_.store(gap, std::memory_order_relaxed);
      max_gap_end_ns_.store(now_ns, std::memory_order_relaxed);
    }
  }
  std::atomic<uint64_t> last_poll_ns_{0};
  std::atomic<uint64_t> last_post_ns_{0};
  std::atomic<uint64_t> max_gap_ns_{0};
  std::atomic<uint64_t> max_gap_end_ns_{0};
  std::atomic<uint32_t> last_rx_bytes_{0};
};

// Time from `t` to `now`; 0 for a stamp a program thread made after the
// progress thread read its clock (an unsigned now - t would wrap and read
// as long ago).
inline uint64_t NsSince(uint64_t now, uint64_t t) { return t >= now ? 0 : now - t; }

// Doorbell batching (doorbell_batch; doc/verbs.md "Doorbell batching"). A
// post's doorbell transmits at once, unless the program is in the middle of
// a burst of small posts and polls its CQ: then up to `batch` posts leave
// together, as a hardware NIC fetches the WQEs of several doorbells at once.
// On droce the posting thread is the NIC, and each transmit has a cost per
// call that a burst pays once (the wire's ring index, which the peer's CPU
// last wrote; the drain of the stores to the shared ring before the next
// locked instruction: doc/bench-study.md finding 4). A deferred doorbell
// leaves with the batch's last post, at the program's next poll round
// (poll_cq, an event wait) or at the progress thread's next round.
//   - Only a post that follows the previous one within kBurstGapNs, with no
//     poll_cq in between, defers: the first post after a pause or a poll —
//     every post of a ping-pong, whose programs poll or wait between posts
//     (ib_write_lat's posts came 1.4 us apart on the test VM) — goes now.
//   - Only a small post (one WR of at most kSmallBytes): a large message
//     fills bursts on its own.
//   - Only while the program polled within kPollWindowNs: a program that
//     polls its CQ comes back to it soon; one that posts and then waits on
//     memory leaves its tail to the progress thread.
// Inside a burst not every post reads the clock (a TSC read is ~10 ns, a
// deferring post's whole cost ~60): after a post that read it and deferred,
// the next kUnreadPosts small posts defer without a reading (DeferUnread) —
// unless one of them fills the batch, or a poll_cq stamped since, or a
// transmit or flush came in between — and the post after them reads and
// asks whether the posts since the last reading came within kBurstGapNs
// each on average (now <= last reading + gap x posts). A pause among the
// unread posts is caught there, at most kUnreadPosts posts late: that post
// transmits, with the ones deferred before it. The first post after a
// transmit or a poll always reads, so a ping-pong's posts and a slow
// poster's go at once as before.
class DoorbellBatcher {
 public:
  static constexpr uint64_t kBurstGapNs = 1'000;  // the default gap (doorbell_burst_gap_ns)
  static constexpr uint64_t kPollWindowNs = 1'000'000;
  static constexpr uint32_t kSmallBytes = 1024;
  // Posts that may defer after a reading without one of their own.
  static constexpr uint32_t kUnreadPosts = 3;

  explicit DoorbellBatcher(uint32_t batch, uint64_t burst_gap_ns = kBurstGapNs)
      : batch_(batch), burst_gap_ns_(burst_gap_ns) {}
  // A post's doorbell at now_ns (small: one WR of at most kSmallBytes;
  // last_poll_ns: the program's last poll_cq). True: defer it; false:
  // transmit now (with whatever was deferred).
  // Every post asks, so the tests are plain compares, cheapest first:
  // t + gap >= now is NsSince(now, t) <= gap (a stamp ahead of now_ns
  // counts as 0 ns ago).
  // Asked without the device lock (a post that defers takes none): the
  // stamps are relaxed loads and stores, no read-modify-write. Two threads
  // posting at once may both count from the same deferred_, so a batch
  // can run a post or two past `batch`; nothing is lost by that (each
  // deferred QP is on the owner's list, Runtime::RingPosted), and one
  // thread's posts are counted exactly.
  bool Defer(uint64_t now_ns, bool small, uint64_t last_poll_ns) {
    const uint64_t last_post = last_post_ns_.load(std::memory_order_relaxed);
    last_post_ns_.store(now_ns, std::memory_order_relaxed);
    const uint32_t deferred = deferred_.load(std::memory_order_relaxed);
    // This post and the unread ones since the reading at last_post.
    const uint32_t unread = unread_.load(std::memory_order_relaxed);
    const uint64_t posts = unread > kUnreadPosts ? 1 : unread + 1;
    if (small && deferred + 1 < batch_ && last_post != 0 && last_post + burst_gap_ns_ * posts >= now_ns &&
        last_poll_ns <= last_post && last_poll_ns != 0 && last_poll_ns + kPollWindowNs >= now_ns) {
      deferred_.store(deferred + 1, std::memory_order_relaxed);
      if (unread != 0) unread_.store(0, std::memory_order_relaxed);
      return true;
    }
    if (deferred != 0) deferred_.store(0, std::memory_order_relaxed);
    if (unread != kMustRead) unread_.store(kMustRead, std::memory_order_relaxed);
    return false;
  }
  // A post's doorbell, asked before the clock is read: true, defer it
  // without a reading (the class comment); false, read the clock and ask
  // Defer. Only after a reading post deferred, and only while that post's
  // stamp is the last one: a poll_cq stamped since (last_poll_ns later),
  // a transmit or a flush make the next post read.
  bool DeferUnread(bool small, uint64_t last_poll_ns) {
    const uint32_t unread = unread_.load(std::memory_order_relaxed);
    if (!small || unread >= kUnreadPosts) return false;
    const uint32_t deferred = deferred_.load(std::memory_order_relaxed);
    if (deferred + 1 >= batch_ || last_poll_ns > last_post_ns_.load(std::memory_order_relaxed)) return false;
    deferred_.store(deferred + 1, std::memory_order_relaxed);
    unread_.store(unread + 1, std::memory_order_relaxed);
    return true;
  }
  // A post whose doorbell transmitted returned at now_ns: the gap to the
  // next post is the program's time between calls, not this transmit's
  // (a batch's last post sends 16 frames; counted from its start, the next
  // post could look like the end of a burst and go alone).
  void PostEnded(uint64_t now_ns) { last_post_ns_.store(now_ns, std::memory_order_relaxed); }
  // A poll round or a flush transmitted what was deferred: the next post reads the clock.
  void Flushed() {
    if (deferred_.load(std::memory_order_relaxed) != 0) {
      deferred_.store(0, std::memory_order_relaxed);
      unread_.store(kMustRead, std::memory_order_relaxed);
    }
  }
  uint32_t deferred() const { return deferred_.load(std::memory_order_relaxed); }

 private:
  // unread_: the posts that deferred without a reading since the last one
  // (up to kUnreadPosts); kMustRead: the last reading did not defer, or a
  // transmit or flush came since, so the next post reads.
  static constexpr uint32_t kMustRead = ~uint32_t{0};
  uint32_t batch_;
  uint64_t burst_gap_ns_;
  std::atomic<uint64_t> last_post_ns_{0};
  std::atomic<uint32_t> deferred_{0};
  std::atomic<uint32_t> unread_{kMustRead};
};

// Whether the device is the receiving end of a stream (doc/verbs.md, "Stream
// waits"): over the last window of kWindowNs it received kMinPerMs packets a
// millisecond or more and at least kRxPerTx times as many as it sent. A bulk
// receiver (ib_write_bw's server: one ACK per ~16 packets) is; a responder
// that answers each request (ib_read_lat, ib_send_lat, ib_write_lat's
// server: as many out as in) is not, however fast: its peer waits for each
// answer, so a wake-up that queues the thread behind a spinning program is
// paid in latency. Pure: the progress thread notes its counters after each
// of its rounds; a window without packets says "not receiving".
// The sending end is the mirror (kMinPerMs sent a millisecond or more, at
// least kRxPerTx times as many as received: ib_write_bw's client), noted
// after every round whoever runs it (Runtime::PollLocked) for the
// look-backs' steady poller (LookBackPacer::TakeOverAfter).
class StreamGauge {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000;
  static constexpr uint64_t kMinPerMs = 50;
  static constexpr uint64_t kRxPerTx = 4;

  void Note(uint64_t now_ns, uint64_t rx_packets, uint64_t tx_packets) {
    if (start_ns_ == 0 || now_ns < start_ns_) {
      start_ns_ = now_ns, rx_ = rx_packets, tx_ = tx_packets;
      return;
    }
    const uint64_t elapsed = now_ns - start_ns_;
    if (elapsed < kWindowNs) return;
    const uint64_t rx = rx_packets - rx_, tx = tx_packets - tx_;
    receiving_ = rx * kWindowNs >= kMinPerMs * elapsed && rx >= kRxPerTx * tx;
    sending_ = tx * kWindowNs >= kMinPerMs * elapsed && tx >= kRxPerTx * rx;
    start_ns_ = now_ns, rx_ = rx_packets, tx_ = tx_packets;
  }
  bool receiving() const { return receiving_; }
  bool sending() const { return sending_; }

 private:
  uint64_t start_ns_ = 0, rx_ = 0, tx_ = 0;
  bool receiving_ = false, sending_ = false;
};

// progress_sched=auto (doc/verbs.md): whether the progress thread should run
// SCHED_FIFO now. Real-time priority pays where the program does not drive
// the device — it spins on memory (ib_write_lat) or waits elsewhere — and
// packets come one at a time: then each arrival must preempt a spinning
// program at once, and a SCHED_OTHER wake-up can wait for the tick behind
// it. It costs where the program drives (its own poll/post calls receive
// and transmit; a real-time thread woken by the arrivals it polls for
// preempts it) and where packets stream (a receiver under a bandwidth test:
// every armed sleep costs the sender an eventfd write and a real-time
// wake-up). So:
//   to SCHED_OTHER when the program's post/poll calls covered at least 3/4
//   of each of the last kDriveWindows windows of drive_us (it drives: a
//   program that polls in a loop covers nearly all of it, even when other
//   threads preempt it now and then),
//   when a program thread waits in ibv_get_cq_event (it drives), when
//   the device received kDensePerMs packets a millisecond or more, or when
//   the program received nearly all packets itself (NoteRx);
//   to SCHED_FIFO when the program takes part (called within
//   kTakesPartNs) but has not called for quiet_us, its calls
//   covered less than 1/4 of a drive_us window since it last drove (3/4),
//   nobody waits for an event,
//   the device received fewer than kSparsePerMs packets a millisecond,
//   the thread was not sent to SCHED_OTHER for these reasons within kHoldNs
//   (Switched), and the program's thread ran for at least half of the time
//   it has been quiet (NoteProgramCpu: it spins on memory, rather than being
//   preempted or blocked: the churn guard).
// A program that calls in bursts (ib_write_lat polls for its send
// completion, about half of each round trip, then spins on memory), a
// polling program that other threads preempt now and then (on the shared
// 2-core VM a polling thread's coverage swung from 3 % to 100 % from one
// millisecond to the next), and a rate between the thresholds keep the
// verdict as it is. Coverage counts only pauses shorter than quiet_us
// between calls. Pure (no clock, no system call): the progress thread asks
// before it sleeps and when it wakes (Runtime::ProgressLoop), where a
// SCHED_FIFO thread also stands aside for a polling program as under fifo.
class AutoSchedPolicy {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000;  // packet rates
  static constexpr uint64_t kDensePerMs = 200;  // a packet every 5 us or more often
  static constexpr uint64_t kSparsePerMs = 50;  // a packet every 20 us or less often
  static constexpr uint64_t kHoldNs = 2'000'000;
  // The program takes part: it called within this long. One that never
  // calls (ib_read_lat's and ib_write_bw's servers wait in a TCP read)
  // leaves the work to the thread alone, and a real-time thread there costs
  // (a responder that spins at SCHED_FIFO keeps the requester off a shared
  // CPU; one that sleeps armed pays a wake-up per request: 48 us typicals
  // vs 2.5 under normal) and gains nothing measured.
  static constexpr uint64_t kTakesPartNs = 100'000'000;
  // Windows in a row covered 3/4 before the program counts as driving: a
  // program of ib_write_lat whose peer's progress thread waits a tick or
  // two for a CPU polls for its completion for 4-8 ms (HZ=250), and must
  // not lose the real-time thread that ends such stalls.
  static constexpr uint32_t kDriveWindows = 8;

  AutoSchedPolicy(uint32_t quiet_us, uint32_t drive_us)
      : quiet_ns_(uint64_t{std::max<uint32_t>(quiet_us, 1)} * 1000),
        drive_ns_(uint64_t{std::max<uint32_t>(drive_us, 1)} * 1000) {}

  // The device's received-packet count, read at now_ns (whenever the
  // thread holds the device). Rates are taken over windows of kWindowNs; a
  // window that reaches the dense count early says so at once.
  // thread_rx_packets: how many of them the progress thread's own polls
  // received. A window in which the thread received a quarter or more of
  // the packets says the program relies on it (ib_write_lat: the peer's
  // WRITE lands while the program spins on memory); under a tenth, that
  // the program receives for itself (ibv_rc_pingpong, ib_send_lat: both
  // programs poll); in between, and in a window without packets, the
  // verdict stands.
  void NoteRx(uint64_t now_ns, uint64_t rx_packets, uint64_t thread_rx_packets) {
    if (rx_window_start_ns_ == 0) {
      rx_window_start_ns_ = now_ns, window_rx_ = rx_packets, window_thread_rx_ = thread_rx_packets;
      return;
    }
    const uint64_t n = rx_packets - window_rx_;
    const uint64_t elapsed = now_ns - rx_window_start_ns_;
    if (elapsed >= kWindowNs && n > 0) {
      const uint64_t mine = thread_rx_packets - window_thread_rx_;
      if (mine * 4 >= n) relied_on_ = true;
      if (mine * 10 < n) relied_on_ = false;
    }
    if (n >= kDensePerMs && elapsed < kWindowNs) {
      dense_ = true, sparse_ = false;
    } else if (elapsed >= kWindowNs) {
      const uint64_t per_ms = n * kWindowNs / elapsed;
      dense_ = per_ms >= kDensePerMs;
      sparse_ = per_ms < kSparsePerMs;
    } else {
      return;
    }
    rx_window_start_ns_ = now_ns, window_rx_ = rx_packets, window_thread_rx_ = thread_rx_packets;
  }

  // The time the program's calls have covered so far (Runtime::NoteAppCall),
  // read at now_ns. Taken over windows of drive_us; a window covered 3/4
  // before its end says so at once.
  void NoteCalls(uint64_t now_ns, uint64_t covered_ns) {
    if (call_window_start_ns_ == 0) {
      call_window_start_ns_ = now_ns, window_covered_ns_ = covered_ns;
      return;
    }
    const uint64_t c = covered_ns - window_covered_ns_;
    const uint64_t elapsed = now_ns - call_window_start_ns_;
    if (c * 4 >= drive_ns_ * 3 && elapsed < drive_ns_) {
      if (++covered_windows_ >= kDriveWindows) driving_ = true;
    } else if (elapsed >= drive_ns_) {
      if (c * 4 >= elapsed * 3) {  // 3/4 covered
        if (++covered_windows_ >= kDriveWindows) driving_ = true;
      } else {
        covered_windows_ = 0;
        if (c * 4 < elapsed) driving_ = false;  // under 1/4: it stopped
      }
    } else {
      return;
    }
    call_window_start_ns_ = now_ns, window_covered_ns_ = covered_ns;
  }

  // The CPU time of the program thread that called last (its thread
  // clock), read at now_ns, with the program's last post/poll then. Says
  // whether, since the previous reading, the program ran for at least half
  // of the time it has not been calling: it spins on memory (ib_write_lat
  // between its completion and the peer's WRITE), and a SCHED_OTHER wake-up
  // can wait behind it for the tick. A program that is quiet because it does
  // not run — preempted on a loaded host (ibv_rc_pingpong polls without a
  // break: its only pauses are preemptions), or blocked — gains nothing from
  // a real-time thread, whose wake-ups then preempt it as soon as it runs
  // again (promoted and demoted in turn, ibv_rc_pingpong took ~500 us per
  // iteration on the 2-core VM). The run time while not calling is
  // bounded from below: all of the time between the previous reading and the
  // last call is taken as calling. A first reading, or one after the program
  // called with no reading in between, says "not spinning" until the next.
  void NoteProgramCpu(uint64_t now_ns, uint64_t cpu_ns, uint64_t last_call_ns) {
    spinning_ = false;
    if (cpu_read_at_ns_ != 0 && last_call_ns != 0 && now_ns > cpu_read_at_ns_ && cpu_ns >= cpu_read_ns_) {
      const uint64_t quiet = NsSince(now_ns, std::max(cpu_read_at_ns_, last_call_ns));
      const uint64_t calling = last_call_ns > cpu_read_at_ns_ ? last_call_ns - cpu_read_at_ns_ : 0;
      const uint64_t ran = cpu_ns - cpu_read_ns_;
      spinning_ = quiet > 0 && ran > calling && (ran - calling) * 2 >= quiet;
    }
    cpu_read_at_ns_ = now_ns, cpu_read_ns_ = cpu_ns;
  }
  // The program thread's CPU time could not be read (no caller yet, or it
  // has exited): not spinning, and the next reading starts afresh.
  void ProgramCpuUnknown() { spinning_ = false, cpu_read_at_ns_ = 0; }

  // fifo: the thread's policy now. last_call_ns: the program's last
  // post/poll (0: none yet); event_waiters: program threads in
  // ibv_get_cq_event. A promotion also needs the program seen spinning
  // (NoteProgramCpu) — read only when everything else says SCHED_FIFO
  // (Eligible): the reading is a system call.
  bool WantFifo(bool fifo, uint64_t now_ns, uint64_t last_call_ns, bool event_waiters) const {
    const bool takes_part = last_call_ns != 0 && NsSince(now_ns, last_call_ns) < kTakesPartNs;
    if (fifo) return takes_part && !driving_ && !event_waiters && !dense_ && relied_on_;
    return Eligible(now_ns, last_call_ns, event_waiters) && spinning_;
  }
  // Everything a promotion needs except the program seen spinning.
  bool Eligible(uint64_t now_ns, uint64_t last_call_ns, bool event_waiters) const {
    const bool takes_part = last_call_ns != 0 && NsSince(now_ns, last_call_ns) < kTakesPartNs;
    const bool calling = last_call_ns != 0 && NsSince(now_ns, last_call_ns) < quiet_ns_;
    return takes_part && !calling && !driving_ && !event_waiters && sparse_ && relied_on_ &&
           now_ns >= other_since_ns_ + kHoldNs;
  }

  // The thread switched at now_ns (to SCHED_OTHER: because WantFifo said
  // so; standing aside for a polling program does not start the hold).
  void Switched(bool to_fifo, uint64_t now_ns) {
    if (!to_fifo) other_since_ns_ = now_ns;
  }

  bool dense() const { return dense_; }
  bool sparse() const { return sparse_; }
  bool driving() const { return driving_; }
  bool relied_on() const { return relied_on_; }
  bool spinning() const { return spinning_; }

 private:
  uint64_t quiet_ns_, drive_ns_;
  uint64_t rx_window_start_ns_ = 0, window_rx_ = 0, window_thread_rx_ = 0;
  bool relied_on_ = true;  // until packets say otherwise
  uint64_t call_window_start_ns_ = 0, window_covered_ns_ = 0;
  bool dense_ = false, sparse_ = true;  // an idle device is sparse
  bool driving_ = false;
  uint32_t covered_windows_ = 0;
  uint64_t other_since_ns_ = 0;
  uint64_t cpu_read_at_ns_ = 0, cpu_read_ns_ = 0;  // NoteProgramCpu's previous reading
  bool spinning_ = false;
};

// Entries of the port's GID table as verbs reports it (gid_tbl_len): the
// device's GIDs first, the rest empty.
inline constexpr size_t kGidTableLen = 16;

// A verbs device's core configuration before its file is read: where it
// differs from core::DeviceConfig's, the verbs device's setting wins.
//   - Frames to a destination without a neighbour entry go to the broadcast
//     MAC: on a point-to-point wire (memif) any MAC arrives.
//   - Selective repeat's measured RTO (and tail-loss probe) never go below
//     200 us: the provider's poll loop shares the host's cores, so an ACK can
//     be late by a scheduling quantum (the library's 16 us floor fits a poll
//     loop that owns its core; doc/loss-experiment.md).
inline core::DeviceConfig VerbsDeviceConfig() {
  core::DeviceConfig c;
  c.broadcast_unresolved = true;
  c.sr_rto_min_ns = 200'000;
  // A direct ring's frames come from memory only the peer process writes,
  // never from a wire: their ICRC guards against nothing that peer could
  // not do anyway (doc/rx-checks.md "Trusted direct rings").
  c.rx_icrc_trust_lent = true;
  return c;
}

// A device file's contents. Its keys, their defaults (the initializers
// here, ProgressConfig's and VerbsDeviceConfig's) and help are the table of
// device_settings.h.
struct DeviceFile {
  std::string name;       // ibdev name, e.g. droce0
  std::string vdev;       // DPDK vdev string, e.g. net_memif_droce0,role=server,socket=...,bsize=10240
  std::string netdev = "lo";  // what sysfs gid_attrs/ndevs names (must exist on the host)
  uint32_t mtu = 4096;    // port active MTU (256..4096)
  uint32_t eal_memory_mb = 256;
  uint32_t link_wait_ms = 5000;  // modify_qp to RTR/RTS waits this long for a down link
  std::vector<std::string> eal_args;  // extra EAL arguments
  core::DeviceConfig dev = VerbsDeviceConfig();
  std::vector<std::pair<core::Gid, core::Mac>> neighbors;
  ProgressConfig progress;
  std::string progress_profile = "balanced";  // the profile progress started from
  // The one peer of a point-to-point wire: an address vector without a GRH
  // (LID addressing, as qperf's RC tests use) goes here instead of failing
  // with EINVAL as on a RoCE fabric. Unset: RoCE rules.
  bool has_lid_peer = false;
  core::Gid lid_peer{};
  std::string dcqcn = "off";     // reaction point profile: off | paper | mlx5
  // min_time_between_cnps_us was given: otherwise a DCQCN profile's own CNP
  // interval applies (the paper's 50 us, mlx5's 4 us), as in droce-testpmd.
  bool cnp_interval_set = false;
  double dcqcn_line_rate_gbps = 100;
  // Congestion control of every QP (doc/cc.md): cc=dcqcn|timely|hpcc|swift|none
  // with the paper's parameters for cc_line_rate_gbps, then cc_params
  // ("name=value,..." of the algorithm's table). Checked at the end of the
  // file (dev.cc holds the result); dcqcn=paper|mlx5 is the older spelling of
  // cc=dcqcn with a profile, and the two exclude each other.
  std::string cc = "none";
  std::string cc_params;
  double cc_line_rate_gbps = 100;
  // A device of the host fabric (doc/droced.md): no wire of its own; the
  // program attaches to the droced of run directory fabric_dir, which gives
  // it a memif interface on the daemon's socket and its QPN range.
  bool fabric = false;
  std::string fabric_dir;
  // A fabric device's LID, as a subnet manager would assign it (droce-ctl:
  // the smallest unused in the run directory): ibv_query_port reports it,
  // and an address vector without a GRH whose DLID is a fabric device's LID
  // goes to that device's IPv4 address (qperf's RC tests address by LID
  // only). 0: none (LID-addressed QPs fail with EINVAL, the RoCE rule).
  uint16_t lid = 0;
  // A netdev-bound device (doc/netdev.md): the RoCE function of the host
  // interface `netdev`, served by the run directory's droced (fabric=on),
  // which binds the interface. Its MAC is the interface's (checked again
  // when droced binds it), its GIDs are the interface's addresses (droced
  // sends the table at attach and when it changes), its frames leave and
  // arrive by the interface, and its neighbours are the kernel's.
  bool netdev_bound = false;
  // How droced takes the device's frames from the interface: udp (each
  // process's own UDP socket, a TC program steering by QPN), xdp (AF_XDP and
  // an XDP program), af_packet (a packet socket with a BPF filter) or auto
  // (udp, else XDP, else af_packet).
  std::string netdev_steering = "auto";
  // With steering udp: runs of equal-sized IPv6 frames to one destination
  // leave in one segmented send (UDP_SEGMENT; udp::SendBatch), and the
  // process's socket takes coalesced datagrams (UDP_GRO; udp::UdpIo).
  bool udp_gso = false;
  // With steering udp: a long SEND or WRITE packet's payload leaves from the
  // registered memory (an iovec of its sendmmsg) instead of being copied
  // into the frame first (pktio::BurstIo::TakesGather, udp::UdpIo).
  bool udp_gather = true;
  // A fabric device's long frames from a direct ring are lent: headers
  // copied, payload placed straight from the ring's slot (DirectIo,
  // doc/rx-checks.md "Lent frames"); off: every frame is copied whole first.
  bool direct_lend = true;
  // Posts whose doorbells may leave together (DoorbellBatcher); 1: every
  // doorbell transmits at once. 32, not 16: 64 B ib_write_bw with 8 QPs
  // ahead in 9 of 10 rounds (~+10 %), 1 QP no different (results.md).
  uint32_t doorbell_batch = 32;
  // The longest gap between two posts of one burst (DoorbellBatcher). Only
  // a measurement changes it: under callgrind a program runs ~50x slower, so
  // no two posts are 1 us apart and no doorbell would ever wait
  // (tools/bench/verbs/breakdown.sh BATCHED=1).
  uint64_t doorbell_burst_gap_ns = DoorbellBatcher::kBurstGapNs;
  // A net_memif vdev's frames are copied straight into the memif ring
  // (ethdev::MemifTx, PortConfig::memif_direct_tx); off: the PMD transmits mbufs.
  bool memif_direct_tx = true;
  // With memif_direct_tx: frames are copied straight out of the memif ring
  // into the same buffers (ethdev::MemifRx, PortConfig::memif_direct_rx);
  // off: the PMD copies them into mbufs.
  bool memif_direct_rx = true;
  // A poll round run by the program's poll_cq holds a QP's lone ACK for the
  // program's next post (core::Device::Poll's hold_acks): a reply and the
  // ACK of what it answers leave in one burst. Off: every round sends it.
  bool poll_ack_hold = true;
  // An empty poll_cq of an idle device runs no poll round
  // (Runtime::PollIfBusyLocked; doc/verbs.md "Who drives the device").
  bool empty_poll_skip = true;

  // The ethdev name of the vdev (text before the first comma).
  std::string port_name() const { return vdev.substr(0, vdev.find(',')); }
};

// "key=value" lines; '#' comments. Unknown keys and bad values are errors
// with the line number. Both walk DeviceSettings() (device_settings.cc).
absl::StatusOr<DeviceFile> ParseDeviceFile(absl::string_view text);
std::string FormatDeviceFile(const DeviceFile& f);

// Text forms shared by droce-ctl and the config file.
absl::StatusOr<core::Mac> ParseMac(absl::string_view s);
std::string FormatMac(const core::Mac& m);
// An IPv4 or IPv6 address as a GID (IPv4 as ::ffff:a.b.c.d).
absl::StatusOr<core::Gid> ParseIpAsGid(absl::string_view s);
std::string FormatGid(const core::Gid& g);  // sysfs form: 8 groups of 4 hex digits
bool IsValidDeviceName(absl::string_view name);

// Where registered devices live: $DROCE_RUN_DIR, else /run/droce in the
// host's initial network namespace and /run/droce/netns/NAME in a named one
// (`ip netns exec NAME ...`; /run/droce/netns/ino-N for an unnamed one): a
// network namespace is a host (doc/netdev.md).
std::string DefaultRunDir();
// The run directory of the calling process's network namespace, without
// $DROCE_RUN_DIR (DefaultRunDir's fallback).
std::string NetnsRunDir();
inline std::string SysfsRoot(const std::string& run_dir) { return run_dir + "/sysfs"; }
// The uverbs name of a device (its /dev/infiniband node and class/infiniband_verbs
// entry). /dev/infiniband is shared by every run directory, so the name carries a
// hash of the run directory: droce0 of one run directory never clobbers another's.
std::string UverbsName(const std::string& run_dir, const std::string& ibdev);
inline constexpr char kDevInfinibandDir[] = "/dev/infiniband";
inline constexpr char kConfigFileName[] = "droce.conf";

// Writes <run_dir>/sysfs/class/{infiniband,infiniband_verbs}/... for the
// device and the character node dev_dir/uverbs_<name> (1:7, /dev/full's
// numbers: libibverbs' kernel commands then fail cleanly with ENOTTY).
absl::Status WriteDeviceTree(const std::string& run_dir, const std::string& dev_dir,
                             const DeviceFile& f);
// A netdev-bound device's port as droced sees it: the GID table (16
// entries, invalid ones written as the zero GID without an ndevs entry, as
// the kernel's cache shows them), the interface named in gid_attrs/ndevs, and
// the port's state. Each file is replaced whole (written aside, renamed), so
// libibverbs never reads a half-written GID.
absl::Status WritePortState(const std::string& run_dir, const std::string& name, const std::string& netdev,
                            const std::vector<core::Gid>& gids, uint32_t valid_mask, bool active);
absl::Status RemoveDeviceTree(const std::string& run_dir, const std::string& dev_dir,
                              const std::string& name);
// Names of registered devices, sorted.
std::vector<std::string> ListDevices(const std::string& run_dir);
absl::StatusOr<DeviceFile> ReadDevice(const std::string& run_dir, const std::string& name);

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_DEVICE_CONFIG_H_
