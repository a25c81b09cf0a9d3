// The dataplane a verbs program carries inside its own process: one per
// registered device, shared by every context that opens it. It starts DPDK's
// EAL on first use (or hot-plugs the device's vdev into a running EAL), opens
// the port, owns the core::Device, and runs a progress thread for passive
// peers that backs off when idle and stands aside while the program itself
// is polling.
//
// Threads: the program's threads (post/poll calls) and the progress thread
// share the device under `mu`. The data path inside one Poll() is still
// single-threaded; the lock just hands the device from one thread to the
// other, and the progress thread only ever try-locks.
#ifndef DROCE_DRIVERS_VERBS_RUNTIME_H_
#define DROCE_DRIVERS_VERBS_RUNTIME_H_

#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "drivers/ethdev/daemon_link.h"
#include "drivers/ethdev/direct_io.h"
#include "drivers/ethdev/port.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "drivers/udp/udp_io.h"
#include "drivers/verbs/device_config.h"
#include "drivers/verbs/device_mutex.h"
#include "drivers/verbs/tsc_clock.h"
#include "drivers/fabric/protocol.h"

namespace droce::verbs {

// CLOCK_MONOTONIC from the TSC (tsc_clock.h): posts and locked polls read
// it, inline (no call, no guard of a function-local static).
[[gnu::visibility("hidden")]] extern TscClock g_clock;
inline uint64_t NowNs() { return g_clock.Now(); }

// A CQ whose events the runtime delivers: completion events to a channel
// (a datagram socket the LD_PRELOAD shim created), CQ overrun to async_fd.
struct CqWatch {
  uint32_t cq_id = 0;
  uint64_t handle = 0;          // the ibv_cq* the event names
  bool has_channel = false;
  int channel_fd = -1;          // in this process (for WaitForChannel's hand-over)
  sockaddr_un channel_addr{};
  socklen_t channel_addr_len = 0;
  int async_write_fd = -1;
  uint64_t seen_notifications = 0;
  bool armed = false;
  bool overrun_reported = false;
};

// Runtime::mu is a DeviceMutex (device_mutex.h), with the count of program
// threads waiting for it. The progress thread does not try-lock while one
// is: its next round would take the device back the moment it let go (a
// woken futex waiter loses that race), and the program is about to drive.

// A QP's doorbell record (doc/verbs.md "Posting without the device lock",
// "Doorbell batching"): what posts made without the device lock left for
// the device's owner. One per QP, on Runtime's list of posted doorbells
// while `kinds` is not 0. Lives in the provider's QP.
struct PostedDoorbell {
  static constexpr uint8_t kSend = 1;      // send WRs published: transmit them now
  static constexpr uint8_t kRecv = 2;      // receive WRs published: take them (flushed in ERR)
  static constexpr uint8_t kDeferred = 4;  // send WRs published, doorbell deferred: they leave with the next transmit or round
  std::atomic<uint8_t> kinds{0};
  PostedDoorbell* next = nullptr;  // the list's link, written by the thread that pushes
  uint32_t qpn = 0;
  // Posts that deferred their doorbell here: written by the poster (the QP's
  // send post lock held, so one writer), counted into the device's
  // tx_doorbells_deferred by the owner, which keeps what it counted.
  std::atomic<uint32_t> deferred_posts{0};
  uint32_t deferred_counted = 0;  // under mu
};

class Runtime {
 public:
  // The runtime of device f.name in this process, created on first use.
  static absl::StatusOr<Runtime*> Acquire(const DeviceFile& f);
  static void Release(Runtime* rt);
  void PrintQpStats(uint32_t qpn);  // DROCE_STATS=1: one QP's counters (at destroy and close)
  void ReportAtExit();

  DeviceMutex mu;  // guards everything below but the atomics
  core::Device& dev() { return *dev_; }
  const DeviceFile& file() const { return file_; }
  bool link_up() const { return link_up_.load(std::memory_order_relaxed); }

  // One round of the dataplane plus event delivery. Caller holds mu.
  // program_polls: the round runs inside the program's poll_cq, which may
  // answer what it finds at once: a lone ACK waits for its post
  // (core::Device::Poll's hold_acks, if poll_ack_hold is on).
  uint32_t PollLocked(uint64_t now_ns, bool program_polls = false);
  // poll_cq found its CQ empty: the round it would run, unless a round now
  // would have nothing to do — nothing arrived (the wire's ring and the
  // direct rings hold no frame), nothing to transmit, no timer armed, no
  // event to deliver, the link check not due (core::Device::Quiescent and
  // the tests in IdleLocked). Then nothing runs (doc/verbs.md "Who
  // drives the device"; device file key empty_poll_skip). False when it
  // ran none. Caller holds mu.
  bool PollIfBusyLocked(uint64_t now_ns) {
    if (file_.empty_poll_skip && IdleLocked(now_ns)) {
      ++idle_polls_;
      return false;
    }
    if (PollLocked(now_ns, /*program_polls=*/true) > 0) app_calls_.BusyPollEnded(NowNs());
    return true;
  }
  // An empty poll_cq without the lock: the last locked poll of this CQ
  // found it empty and the device idle (PollIfBusyLocked skipped its
  // round), nobody has held the device since — every completion, post,
  // doorbell, timer and event of the device happens under mu, but for a
  // post that defers its doorbell, which leaves a record on the list
  // (RingPosted): none is there — so the CQ is still empty and the device
  // still has nothing to do but receive — and
  // the kQuietPolls - 1 polls after it have not all answered from that (one
  // poll in kQuietPolls takes the lock). A frame that arrived meanwhile (no
  // thread looks at the ring without the lock) waits for the next locked
  // poll, at most kQuietPolls - 1 polls later; a timer or the link check
  // the same (neither was due at the locked poll). Three relaxed loads and
  // a store and the list's head: no atomic read-modify-write, no clock.
  static constexpr uint32_t kQuietPolls = 8;
  // q: the CQ's (the provider's DroceCq::quiet).
  bool QuietPoll(HoldSnapshot& q) { return q.Use(mu) && !PostedPending(); }
  // The locked poll that found q's CQ empty and skipped its round. Caller
  // holds mu.
  void NoteQuietLocked(HoldSnapshot& q) { q.Take(mu, kQuietPolls - 1); }
  // post_send's doorbell: QP qpn transmits what it can now and nothing else
  // runs (core::Device::Doorbell); receive, timers, link checks and events
  // are the poll loop's (poll_cq, the progress thread, event waits). An
  // armed channel still gets its event at once (a local completion, e.g. a
  // bind or a flush). Caller holds mu.
  // small: the post was one WR of at most DoorbellBatcher::kSmallBytes,
  // which may leave with the posts that follow it (doorbell_batch).
  uint32_t DoorbellLocked(uint32_t qpn, uint64_t now_ns, bool small = false);
  // Lets go of mu (every holder's way out): first the doorbells posts left
  // (DrainPostedLocked: a deferred one joins the device's deferred
  // doorbells, for the next transmit or round), then the store that frees
  // it, then a look for one a poster left meanwhile.
  void Unlock() {
    for (;;) {
      if (PostedPending()) DrainPostedLocked(NowNs());
      mu.unlock();
      // No fence: it would wait here for this thread's stores (after a
      // doorbell, the wire's) to drain, which otherwise overlaps the
      // program's own work. A push this look misses while the freeing
      // store still sits in the store buffer is the poster's to catch
      // (RingPosted).
      if (posted_head_.load(std::memory_order_relaxed) == nullptr || !mu.try_lock()) return;
    }
  }
  // A post without the device lock published WRs on d's QP (`kind`: send
  // or receive). A send whose doorbell the batcher defers only marks d
  // (kDeferred: the QP's doorbell record) and takes no lock: the next
  // transmit, poll round or flush takes it. Otherwise the doorbell runs now
  // if the device is free, or is left on the list for its owner, who runs
  // it before it lets go. Never waits for the owner's work; waits at most
  // kPostedHandoverNs for an owner that is letting go to have let go.
  // Reads the clock itself, and not for every deferring post (DoorbellBatcher::DeferUnread).
  void RingPosted(PostedDoorbell* d, uint8_t kind, bool small);
  void MarkDeferred(PostedDoorbell* d);
  static constexpr uint64_t kPostedHandoverNs = 2000;
  void LeavePosted(PostedDoorbell* d, uint8_t kind);  // RingPosted with the device held
  void PushPosted(PostedDoorbell* d);
  // A post's doorbell that transmits (DoorbellLocked past the batcher): the
  // doorbell records first, then QP qpn's and the deferred QPs' frames.
  uint32_t TransmitLocked(uint32_t qpn, uint64_t now_ns);
  // Takes the doorbell records off the list: each QP's published WRs, its
  // place on the deferred list and the active list; one that asked to
  // transmit now and found the deferred list full transmits here. True:
  // one of them asked to transmit now (it is on the deferred list). Caller
  // holds mu.
  bool TakePostedLocked(uint64_t now_ns);
  // Doorbell records on the list (a relaxed load: a record pushed since is
  // the next look's, or the next holder's).
  bool PostedPending() const { return posted_head_.load(std::memory_order_relaxed) != nullptr; }
  // The doorbells posts left (RingPosted): every record's WRs are taken and
  // its QP joins the device's deferred doorbells (and active list); those
  // that asked to transmit now do. Caller holds mu; destroy_qp calls it
  // before a QP's PostedDoorbell goes away.
  void DrainPostedLocked(uint64_t now_ns);
  // poll_cq found what it asked for without a poll round: doorbells a burst
  // of posts deferred, and ACKs the last round held, leave now. Caller
  // holds mu.
  void FlushDeferredLocked(uint64_t now_ns) {
    if (PostedPending()) TakePostedLocked(now_ns);
    if (dev_->deferred_doorbells() != 0) {
      batcher_.Flushed();
      dev_->FlushDeferredDoorbells(now_ns);
    }
  }
  // The program is polling: the progress thread stays out of its way. A
  // SCHED_FIFO progress thread asleep armed (it serves programs that do not
  // poll) drops to SCHED_OTHER here, once per transition, so the arrivals
  // this program polls for do not preempt it (progress_sched=fifo, and auto
  // while it is SCHED_FIFO).
  void NoteAppPoll(uint64_t now_ns) {
    app_calls_.Polled(now_ns);
    if (file_.progress.sched_auto) NoteAppCall(now_ns);
    if (fifo_armed_.load(std::memory_order_relaxed) && fifo_armed_.exchange(false, std::memory_order_acq_rel)) {
      DemoteProgressThread();
    }
  }
  // A poll returned completions, rx_bytes of them received messages
  // (ProgramCalls::TookCompletions).
  void NoteCompletionsTaken(uint32_t rx_bytes) { app_calls_.TookCompletions(rx_bytes); }

  // The QPs the program has on this device (create_qp minus destroy_qp).
  void CountQp(int delta) { qps_.fetch_add(static_cast<uint32_t>(delta), std::memory_order_relaxed); }
  bool LoneQp() const { return qps_.load(std::memory_order_relaxed) == 1; }

  // progress_sched=auto: a post or poll of the program. The time its calls
  // cover (the sum of the pauses between calls shorter than app_active_us)
  // tells the progress thread whether the program drives
  // (AutoSchedPolicy). A relaxed load and two stores per call; threads
  // racing here only blur a heuristic.
  void NoteAppCall(uint64_t now_ns) {
    const uint64_t last = last_app_call_ns_.load(std::memory_order_relaxed);
    if (now_ns <= last) return;
    if (last != 0 && now_ns - last < uint64_t{file_.progress.app_active_us} * 1000) {
      app_covered_ns_.store(app_covered_ns_.load(std::memory_order_relaxed) + (now_ns - last),
                            std::memory_order_relaxed);
    }
    last_app_call_ns_.store(now_ns, std::memory_order_relaxed);
    // The caller, whose CPU time the progress thread reads before it
    // promotes itself (AutoSchedPolicy::NoteProgramCpu).
    // Constant-initialised and initial-exec: the provider is dlopen'ed, and
    // a dynamically initialised thread_local costs a __tls_get_addr call on
    // every poll and post (as unmap_guard.cc's).
    __attribute__((tls_model("initial-exec"))) static thread_local long tid = 0;
    if (tid == 0) tid = static_cast<long>(syscall(SYS_gettid));
    if (app_tid_.load(std::memory_order_relaxed) != tid) app_tid_.store(tid, std::memory_order_relaxed);
  }

  // ibv_get_cq_event on one of this device's channels (libdroce-preload.so
  // routes it here): the calling thread drives the dataplane itself until
  // an event comes — polling for event_busy_poll_us, then sleeping on the
  // channel and the wire's arrival descriptor together — so a completion
  // costs the program one wake-up, not the progress thread's and then the
  // program's. Events for the channel found while a waiter is awake are
  // handed over here (*cq_handle) instead of through the socket: no system
  // call on the way. Returns 0 with *cq_handle set, or 0 with *cq_handle 0
  // when the channel's fd holds an event (or, for a non-blocking fd, after
  // one round without waiting); an errno otherwise. Without mu.
  int WaitForChannel(int channel_fd, uint64_t* cq_handle);

  // Every context of the device gets port events (IBV_EVENT_PORT_ERR,
  // IBV_EVENT_PORT_ACTIVE) on its async event pipe. Caller holds mu.
  void AddAsyncFd(int fd) { async_fds_.push_back(fd); }
  void RemoveAsyncFd(int fd) { std::erase(async_fds_, fd); }
  // A fabric device whose daemon stopped or died, until it is attached
  // again, or a netdev-bound device whose interface is down: ibv_query_port
  // says DOWN.
  bool port_down() const {
    return fabric_lost_.load(std::memory_order_relaxed) || netdev_down_.load(std::memory_order_relaxed);
  }
  // The port's active MTU in bytes: the device file's, or for a
  // netdev-bound device what its interface allows (droced says).
  uint32_t active_mtu() const { return active_mtu_.load(std::memory_order_relaxed); }

  // Waits (without mu) up to the device's link_wait_ms for the link.
  bool WaitLinkUp();
  // Resolves a GID's MAC (ARP for IPv4, neighbour discovery for IPv6),
  // waiting up to link_wait_ms; false if nobody answered (the device then
  // falls back to broadcast if allowed).
  bool IsLocalGid(const core::Gid& gid) {
    std::lock_guard<DeviceMutex> lock(mu);
    return dev_->IsLocalGid(gid);
  }
  // A netdev-bound device asks droced, which asks the kernel (route from
  // the GID sgid_index names, then its neighbour table): 0, or the errno
  // modify_qp / create_ah then return (EHOSTUNREACH, ENETUNREACH,
  // ETIMEDOUT, EINVAL for a GID index that names nothing). Other devices
  // resolve by ARP/ND themselves and always return 0 (an unresolved
  // neighbour falls back to broadcast where allowed).
  int ResolveNeighbor(const core::Gid& gid, uint8_t sgid_index);
  // A netdev-bound device's multicast groups: droced makes the interface a
  // member of those the device's QPs are attached to (kOpMcast), and of no
  // other once every process left it. Call without mu after attaching or
  // detaching a QP; 0 or the errno of a refused join.
  int SyncMcastGroups();

  // Caller holds mu.
  void WatchCq(const CqWatch& w);
  void UnwatchCq(uint32_t cq_id);
  void ArmCq(uint32_t cq_id);
  // QPs whose transport errors put them in ERR raise an event on async_fd:
  // IBV_EVENT_QP_ACCESS_ERR when the responder detected an access violation,
  // IBV_EVENT_QP_REQ_ERR when it detected an invalid request, else
  // IBV_EVENT_QP_FATAL (retry exhausted, a NAK that ends the connection); a
  // move to ERR the program asked for raises none.
  void WatchQp(uint32_t qpn, uint64_t handle, int async_write_fd);
  void UnwatchQp(uint32_t qpn);
  void NoteQpErrorByUser(uint32_t qpn);
  void RearmQp(uint32_t qpn);
  // ibv_modify_srq(IBV_SRQ_LIMIT): once a receive taken from the SRQ leaves
  // fewer than `limit` posted, IBV_EVENT_SRQ_LIMIT_REACHED goes to
  // async_write_fd and the limit disarms. limit 0 disarms. Caller holds mu.
  void ArmSrqLimit(uint32_t srq_id, uint64_t handle, uint32_t limit, int async_write_fd);
  uint32_t SrqLimit(uint32_t srq_id) const;
  void NoteSrqPosted(uint32_t srq_id);  // posting is not a drop: the next check starts here

  struct Stats {
    std::atomic<uint64_t> progress_polls{0}, progress_sleeps{0}, progress_arrival_wakeups{0}, comp_events{0},
        async_events{0}, progress_fifo_demotions{0}, progress_fifo_yields{0},
        progress_stand_asides{0},  // look-backs that found the program polling (naps while it drives)
        progress_nice_refused{0},  // 1: progress_nice was refused (the thread kept its nice value)
        pm_qos_holds{0},           // progress_pm_qos_us: times the request was taken (released when idle)
        // progress_sched=auto: the thread's switches to SCHED_FIFO and back
        // (AutoSchedPolicy); auto_refused 1: SCHED_FIFO was refused (it then
        // stays SCHED_OTHER).
        progress_auto_to_fifo{0}, progress_auto_to_other{0}, progress_auto_refused{0},
        // auto: promotions withheld because the program, though quiet, was
        // not running (preempted or blocked: AutoSchedPolicy::NoteProgramCpu)
        progress_auto_not_running{0},
        // The hot phase's untimed waits inside a stream (StreamWait),
        // and those the watchdog ended (nothing arrived for max_sleep_us).
        progress_stream_waits{0}, progress_stream_watchdogs{0},
        // Of the stream waits: those taken with frames a full direct ring
        // refused (BlockedOnRingLocked), woken by the receiver freeing slots
        // or an arrival; hot sleeps of a receiving stream left timed because
        // the device had something due (not Quiescent).
        progress_ring_waits{0}, progress_stream_busy{0};
    // What each pass of the progress thread's loop did (ProgressThread::Run;
    // written by that thread only, DROCE_STATS): naps beside a program thread
    // that waits for an event; polls because the program had not called
    // within app_active_us, and of those the ones that found it gone 20-100,
    // 100-1000 and over 1000 us; polls because a program waits on an armed
    // channel's fd (no stand-aside); polls that found work; empty spins;
    // timed hot sleeps; idle waits (armed or not); passes that found a
    // program thread inside a call (ProgramCalls::LastCall); naps beside a
    // program on the thread's one CPU, busy with the data its last poll
    // took, that had paused under shared_cpu_quiet_us (TakeOverAfterNs);
    // naps beside a steady sender that had paused longer than that but
    // under steady_quiet_us (LookBackPacer::TakeOverAfter).
    struct Wakes {
      std::atomic<uint64_t> event_waiter{0}, in_call{0}, quiet_polls{0}, quiet_100us{0}, quiet_1ms{0},
          quiet_long{0}, armed_polls{0}, work{0}, spins{0}, hot_sleeps{0}, idle_waits{0},
          // progress_calm_lookbacks: naps switched to the default slice, and back to the short one
          calm_slices{0}, short_slices{0}, shared_cpu_naps{0}, steady_naps{0};
    } wakes;
    // ibv_get_cq_event waits: events handed over in the process, sleeps,
    // and sleeps the wire ended (an arrival).
    std::atomic<uint64_t> events_handed_over{0}, event_wait_sleeps{0}, event_wait_arrivals{0};
    // Naps inside a stream (event_stream_nap_us), and those after which
    // the poll found nothing (they end the wait's naps).
    std::atomic<uint64_t> event_wait_naps{0}, event_wait_naps_empty{0};
    // Posts that found the device owned and left their doorbell to its
    // owner (RingPosted), counted when the owner ran it.
    std::atomic<uint64_t> posts_left_for_owner{0};
  };
  const Stats& stats() const { return stats_; }

 private:
  explicit Runtime(const DeviceFile& f) : file_(f), batcher_(f.doorbell_batch, f.doorbell_burst_gap_ns) { active_mtu_ = f.mtu; }
  absl::Status Start();
  // A wire device's port (EAL, the vdev, the ethdev port), and its close.
  absl::Status OpenWirePort();
  void StopWirePort();
  // A fabric device: attach to droced (QPN range) and bind link_ to the
  // rings it sends after its reply.
  // want_qpn_base: 0 at start; the device's range when re-attaching (a
  // reply with another range fails).
  absl::Status AttachFabric(uint32_t want_qpn_base);
  // The daemon is gone (its control socket closed): stop using the port,
  // remove its interface, move every QP to ERR (posted work completes with
  // IBV_WC_WR_FLUSH_ERR), IBV_EVENT_PORT_ERR to every context. Caller holds mu.
  void LoseFabric(uint64_t now_ns);
  // Tries to attach again (the same QPN range, a new interface); a
  // netdev-bound device's groups are announced to the new droced.
  void Reattach(uint64_t now_ns);
  // kOpMcast: this process joins or leaves `group` in droced; 0 or its errno.
  int CallMcast(const core::Gid& group, bool join);
  // False if the fabric's state decided the link (lost, re-attaching).
  bool CheckFabric(uint64_t now_ns);
  // Applies what droced sent unasked (direct paths, ethdev/direct_io.h;
  // a netdev-bound device's state); false once the connection ended.
  bool ReadFabricMessages();
  // A netdev-bound device's state from droced (fabric::NetdevState): the
  // GID table, the port's state and MTU. QPs whose source GID went or
  // changed move to ERR (IBV_EVENT_QP_FATAL), a changed table raises
  // IBV_EVENT_GID_CHANGE, the port going down flushes every QP
  // (IBV_EVENT_PORT_ERR) and coming up raises IBV_EVENT_PORT_ACTIVE.
  // events: false for the state at attach. Caller holds mu (or is Start).
  void ApplyNetdevState(const fabric::NetdevState& m, bool events);
  // Every QP that is not in RESET or ERR moves to ERR (its posted work
  // completes with IBV_WC_WR_FLUSH_ERR); only those `pick` accepts if given.
  void FlushQps(const std::function<bool(const transport::Qp&)>& pick = nullptr);
  void SendPortEvent(uint32_t type);
  // The wake-up follows the port: a stale one goes once nobody sleeps on it.
  void RefreshWakeupLocked();
  // Marks the wake-up stale (the port changed, or it has none yet) and takes
  // a new one now, or when the last sleeper leaves.
  void RenewWakeupLocked();
  void Stop();
  // The progress thread's body (progress.cc): its loop and scheduling
  // state live in ProgressThread.
  class ProgressThread;
  void ProgressLoop();
  // A round now would do nothing (PollIfBusyLocked). Nothing to receive is
  // the device's port's to say, whatever it is made of (io_, the port the
  // core::Device reads: each layer answers for its own sources and asks the
  // one behind it, pktio::BurstIo::KnownEmpty). An SRQ shrinks only in a
  // round's receive, which checks its limit. Completion events are looked
  // for only on CQs armed for one: a CQ overrun is reported by the next
  // round that runs, the link check's at the latest (a millisecond). Caller
  // holds mu.
  // Before now_ns a round could only receive or retry frames a full direct
  // ring refused (core::Device::BlockedOnPort, the ring and not the port
  // stopping them): the receiver's freeing slots or an arrival is what ends
  // the wait, both of which wake an armed sleeper (DirectIo::Arm). Caller
  // holds mu.
  bool BlockedOnRingLocked(uint64_t now_ns) {
    return direct_ && direct_->tx_blocked_on_ring() && dev_->BlockedOnPort(now_ns);
  }
  bool IdleLocked(uint64_t now_ns) {
    return now_ns < next_link_check_ns_ && !PostedPending() && dev_->Quiescent(now_ns) && io_->KnownEmpty() &&
           (armed_channels_.load(std::memory_order_relaxed) == 0 || !EventsPendingLocked());
  }
  // A wire port answers KnownEmpty through the wake-up's look at its ring,
  // while that wake-up is current. Call after wakeup_ or wakeup_stale_
  // changed. Caller holds mu (or is Start or Stop).
  void ProbeThroughWakeupLocked() {
    if (port_) port_->set_rx_probe(wakeup_ != nullptr && !wakeup_stale_ ? wakeup_.get() : nullptr);
  }
  // DeliverEvents would send a completion event: a CQ armed for one got a
  // completion outside a round (e.g. a flush by modify_qp). Caller holds mu.
  bool EventsPendingLocked();
  static bool RequestSlice(uint32_t slice_us, int32_t nice);
  static bool SetFifo(uint32_t priority);
  // A SCHED_FIFO progress thread spins at most this long without work
  // before it sleeps, and drops to SCHED_OTHER after this long busy without
  // a sleep (doc/verbs.md, progress_sched).
  static constexpr uint64_t kFifoSpinNs = 5'000;
  // progress_sched=auto: a SCHED_FIFO thread whose program is not calling
  // spins up to the sparse packet spacing (AutoSchedPolicy::kSparsePerMs)
  // before it sleeps, so a request stream it answers (ib_read_lat's
  // responder) is caught by the spin, counted as a stream and moves it to
  // SCHED_OTHER, instead of paying an armed wake-up per request that keeps
  // the rate sparse.
  static constexpr uint64_t kAutoFifoSpinNs = 20'000;
  static constexpr uint64_t kFifoBusyNs = 2'000'000;
  static constexpr uint32_t kFifoMinSleepUs = 50;
  std::atomic<bool> progress_fifo_{false};
  // progress_sched=fifo: the progress thread sleeps armed at SCHED_FIFO;
  // a program's poll clears it and demotes the thread (NoteAppPoll).
  std::atomic<bool> fifo_armed_{false};
  std::atomic<long> progress_tid_{0};
  void DemoteProgressThread();
  static void ToOther(long tid);
  uint32_t IdleWait(uint32_t us, bool fifo);
  // Packets the progress thread's own polls received (progress_sched=auto:
  // does the program rely on it?). Progress thread only.
  uint64_t progress_rx_packets_ = 0;
  // progress_pm_qos_us: the progress thread holds a CPU latency request
  // while hot and drops it when it goes idle. Progress thread only.
  void HoldPmQos();
  void ReleasePmQos();
  int pm_qos_fd_ = -1;
  bool pm_qos_refused_ = false;
  // The wire's arrival descriptor, shared by the progress thread and
  // programs waiting for events: armed while anyone sleeps on it. Caller
  // holds mu; -1 when the port cannot notify now.
  int ArmWireLocked();
  void DisarmWireLocked();
  bool ChannelReadable(int channel_fd) const;
  // Threads in WaitForChannel on one channel, and the events handed to them.
  struct ChannelWaiters {
    int fd = -1;
    int waiters = 0;
    int sleepers = 0;  // in ppoll: an event must go through the socket to wake them
    std::vector<uint64_t> pending;
    uint64_t socket_sent = 0;          // datagrams sent to the channel
    uint64_t clean_at = UINT64_MAX;    // socket_sent when the socket was last seen empty
    bool nonblocking = false;          // the fd's O_NONBLOCK, as last looked up
    uint64_t flags_valid_until = 0;
  };
  std::vector<ChannelWaiters> channel_waiters_;  // under mu; one per channel ever waited on
  ChannelWaiters* FindWaitersLocked(int channel_fd);
  void SendCompEvent(const CqWatch& w, ChannelWaiters* cw);  // cw: the channel's waiters entry, if any
  void DeliverEvents();
  void PrintStats();
  void CheckLink(uint64_t now_ns);

  DeviceFile file_;
  std::mutex mcast_mu_;                   // serializes SyncMcastGroups
  std::vector<core::Gid> mcast_joined_;   // the groups droced has this process as a member of
  DoorbellBatcher batcher_;  // asked without mu by the posts that do not take it (RingPosted)
  // Posts' doorbells left for mu's owner (RingPosted): a lock-free stack,
  // pushed by posters, taken whole by the owner.
  std::atomic<PostedDoorbell*> posted_head_{nullptr};
  int refs_ = 0;
  std::unique_ptr<ethdev::EthdevPort> port_;  // a wire device's port (none on the fabric)
  // A fabric device's link to droced (ethdev/daemon_link.h): shared-memory
  // rings and a pool of frame buffers of its own; no EAL, no ethdev port.
  std::unique_ptr<ethdev::DaemonLink> link_;
  // A fabric device: the direct rings to the other processes, in front of
  // port_ (doc/droced.md "Direct rings"); the device's BurstIo.
  std::unique_ptr<ethdev::DirectIo> direct_;
  // A netdev-bound device whose interface steers to the processes' own UDP
  // sockets: frames to other hosts go through ours (doc/netdev.md), in front
  // of direct_ / port_. udp_fd_/udp_port_: the socket an attach brought,
  // until the UdpIo takes it.
  std::unique_ptr<udp::UdpIo> udp_;
  // The port the core::Device reads and writes: udp_, direct_, link_ or
  // port_, the first of them there is.
  pktio::BurstIo* io_ = nullptr;
  int udp_fd_ = -1;
  uint16_t udp_port_ = 0;
  std::unique_ptr<ethdev::RxWakeup> wakeup_;  // null: idle sleeps are timed only
  std::unique_ptr<core::Device> dev_;
  std::vector<CqWatch> watches_;
  struct QpWatch {
    uint32_t qpn;
    uint64_t handle;
    int async_write_fd;
    bool reported;
  };
  std::vector<QpWatch> qp_watches_;
  void CheckQps();
  struct SrqLimitWatch {
    uint32_t srq_id;
    uint64_t handle;
    uint32_t limit;
    uint32_t last_size;  // posted receives at the last check: only a drop fires
    int async_write_fd;
  };
  std::vector<SrqLimitWatch> srq_limits_;
  void CheckSrqLimits();
  int event_socket_ = -1;  // sends completion events to channels
  int fabric_fd_ = -1;     // the attachment to droced: lives as long as this socket
  enum class FabricLink : uint8_t { kAttached, kLost, kReattached };  // kReattached: until the link is up
  FabricLink fabric_link_ = FabricLink::kAttached;
  std::atomic<bool> fabric_lost_{false};
  std::atomic<bool> netdev_down_{false};
  std::atomic<uint32_t> active_mtu_{4096};
  uint32_t netdev_generation_ = 0;
  bool has_netdev_state_ = false;
  fabric::NetdevState first_netdev_state_{};  // read at attach, applied once the device exists
  uint64_t next_attach_ns_ = 0;
  uint64_t fabric_losses_ = 0, fabric_reattaches_ = 0;
  std::vector<int> async_fds_;  // under mu
  uint64_t idle_polls_ = 0;  // under mu: empty polls that ran no round (PollIfBusyLocked)
  bool wakeup_stale_ = false;   // under mu: wakeup_ is for a port that went
  uint64_t next_link_check_ns_ = 0;
  bool memif_client_ = false;
  uint64_t next_reconnect_ns_ = 0;
  uint64_t attempt_ns_ = 0;  // when the pending memif connection attempt started (0: none)
  uint64_t reconnects_ = 0;
  std::atomic<bool> link_up_{false};
  std::atomic<int> armed_channels_{0};
  // The program's polls and posts (NoteAppPoll, RingPosted). Posts
  // without the device lock count: the progress thread stands aside after
  // them as after a poll. A program posting in a long loop (ib_write_bw -q 8
  // posts hundreds of WRs between polls) then rings its own doorbells
  // instead of colliding with the thread's rounds and leaving them to it
  // (measured: 8 % of its posts, and half the rate).
  ProgramCalls app_calls_;
  // Whether the device is a stream's sending end (StreamGauge::sending),
  // noted after every round under mu (PollLocked) and read without it by the
  // progress thread's look-backs (LookBackPacer::TakeOverAfter).
  StreamGauge round_gauge_;
  std::atomic<bool> sending_stream_{false};
  // Fills the page tables of the wire's shared memory when the link comes
  // up (ethdev/prefault.h). Caller holds mu (or is Start).
  void PrefaultWire();
  size_t wire_prefaulted_bytes_ = 0;  // DROCE_STATS
  std::atomic<uint64_t> last_app_call_ns_{0}, app_covered_ns_{0};  // see NoteAppCall
  std::atomic<long> app_tid_{0};  // the program thread that called last (NoteAppCall)
  int wire_armers_ = 0;  // under mu
  // Threads inside WaitForChannel: they drive the dataplane, so the progress
  // thread sleeps meanwhile.
  std::atomic<int> app_waiters_{0};
  std::atomic<uint64_t> last_event_wait_ns_{0};  // when a WaitForChannel last ended
  std::atomic<uint64_t> last_arm_ns_{0};  // when ArmCq last armed a channel
  std::atomic<bool> stop_{false};
  std::thread progress_;
  Stats stats_;
  std::atomic<uint32_t> qps_{0};  // CountQp
};

// The program's side of Runtime::mu. The progress thread holds it for one
// poll round (microseconds), so the program spins for it before sleeping in
// the kernel: a thread woken from a futex on a 2-core machine whose CPUs run
// a spinning program can wait there for a scheduler slice (milliseconds).
class AppLock {
 public:
  explicit AppLock(Runtime* rt);
  ~AppLock();
  AppLock(const AppLock&) = delete;
  AppLock& operator=(const AppLock&) = delete;

 private:
  static constexpr int kSpins = 2000;  // tens of microseconds
  Runtime* rt_;
};

inline AppLock::AppLock(Runtime* rt) : rt_(rt) {
  DeviceMutex& mu = rt_->mu;
  if (mu.try_lock()) return;
  mu.app_waiting.fetch_add(1, std::memory_order_relaxed);
  bool got = false;
  for (int i = 0; i < kSpins && !got; ++i) {
    __builtin_ia32_pause();
    got = mu.try_lock();
  }
  if (!got) mu.lock();
  mu.app_waiting.fetch_sub(1, std::memory_order_relaxed);
}
inline AppLock::~AppLock() { rt_->Unlock(); }

}  // namespace droce::verbs

#endif  // DROCE_DRIVERS_VERBS_RUNTIME_H_
