// The verbs runtime's doorbells: a post rung under the device lock
// (batched while posts keep coming), or handed to the progress thread
// (posted doorbells) when the program cannot take the lock at once.

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

uint32_t Runtime::PollLocked(uint64_t now_ns, bool program_polls) {
  if (now_ns >= next_link_check_ns_) {
    CheckLink(now_ns);
    CheckQps();  // once a millisecond, like the link
    // The ring an empty poll looks at (IdleLocked), found again after a
    // reconnection; a sleeper's Arm does the same. Not while a thread sleeps
    // on the wake-up's descriptor, which a new ring replaces (a check after
    // it woke does it).
    if (wakeup_ != nullptr && !wakeup_stale_ && wire_armers_ == 0) wakeup_->Recheck();
  }
  if (PostedPending()) TakePostedLocked(now_ns);  // their QPs are active now: this round sends them
  batcher_.Flushed();  // the round transmits every active QP, deferred ones too
  const uint32_t work = dev_->Poll(now_ns, program_polls && file_.poll_ack_hold);
  round_gauge_.Note(now_ns, dev_->counters().rx_packets, dev_->counters().tx_packets);
  if (round_gauge_.sending() != sending_stream_.load(std::memory_order_relaxed)) {
    sending_stream_.store(round_gauge_.sending(), std::memory_order_relaxed);
  }
  if (!watches_.empty()) DeliverEvents();
  if (!srq_limits_.empty()) CheckSrqLimits();
  return work;
}

uint32_t Runtime::DoorbellLocked(uint32_t qpn, uint64_t now_ns, bool small) {
  if (file_.progress.sched_auto) NoteAppCall(now_ns);  // a post: the program drives
  // A real-time progress thread asleep armed (it serves a program that went
  // quiet) would not take a deferred tail before its sleep's bound.
  small = small && !fifo_armed_.load(std::memory_order_relaxed);
  if (batcher_.Defer(now_ns, small, app_calls_.last_poll_ns())) {
    dev_->DeferDoorbell(qpn);
    return 0;
  }
  return TransmitLocked(qpn, now_ns);
}

uint32_t Runtime::TransmitLocked(uint32_t qpn, uint64_t now_ns) {
  // Doorbell records posts left (deferred ones mostly) join the deferred
  // list, whose QPs this doorbell gathers into its bursts first.
  if (PostedPending()) TakePostedLocked(now_ns);
  const uint32_t work = dev_->Doorbell(qpn, now_ns);
  if (armed_channels_.load(std::memory_order_relaxed) > 0) DeliverEvents();
  if (file_.doorbell_batch > 1) batcher_.PostEnded(NowNs());
  return work;
}

// Not inlined into the posts' frames: a holder's way to the records.
[[gnu::noinline]] bool Runtime::TakePostedLocked(uint64_t now_ns) {
  PostedDoorbell* d = posted_head_.exchange(nullptr, std::memory_order_acquire);
  if (d == nullptr) return false;
  mu.Changed();  // this hold now has work a quiet poll must not skip
  bool send_now = false;
  while (d != nullptr) {
    // next first: once kinds is 0 a poster may push d again (and write next).
    PostedDoorbell* next = d->next;
    // acquire: the WRs a poster published before it marked d are visible.
    const uint8_t kinds = d->kinds.exchange(0, std::memory_order_acq_rel);
    if (kinds & (PostedDoorbell::kSend | PostedDoorbell::kDeferred)) {
      // A count another post adds after this load is the next take's.
      const uint32_t posts = d->deferred_posts.load(std::memory_order_relaxed);
      const bool listed = dev_->DeferDoorbell(d->qpn, posts - d->deferred_counted);  // takes the receives too
      d->deferred_counted = posts;
      if (kinds & PostedDoorbell::kSend) {
        // The deferred list full: this one alone, now.
        if (!listed) (void)dev_->Doorbell(d->qpn, now_ns);
        send_now = send_now || listed;
      }
    } else if (kinds & PostedDoorbell::kRecv) {
      dev_->TakePostedRecvs(d->qpn);
    }
    if (kinds & (PostedDoorbell::kSend | PostedDoorbell::kRecv)) {
      stats_.posts_left_for_owner.fetch_add(1, std::memory_order_relaxed);
    }
    d = next;
  }
  return send_now;
}

// Not inlined into RingPosted (flattened): a holder's rare way out.
[[gnu::noinline]] void Runtime::DrainPostedLocked(uint64_t now_ns) {
  if (!TakePostedLocked(now_ns)) return;  // deferred doorbells wait for the next transmit or round
  batcher_.Flushed();
  (void)dev_->FlushDeferredDoorbells(now_ns);
  if (armed_channels_.load(std::memory_order_relaxed) > 0) DeliverEvents();
}

// Flattened: most posts of a burst only defer their doorbell, and that is
// then all they do, in one frame: the batcher's compares and the QP's
// doorbell record, with no device lock; three of four such posts read no
// clock either (DoorbellBatcher::DeferUnread): they leave the program's
// stamps (ProgramCalls, NoteAppCall) to the next post that reads it, a
// post or three later.
[[gnu::flatten]] void Runtime::RingPosted(PostedDoorbell* d, uint8_t kind, bool small) {
  if (kind == PostedDoorbell::kSend) {
    // A real-time progress thread asleep armed (it serves a program that
    // went quiet) would not take a deferred tail before its sleep's bound.
    small = small && !fifo_armed_.load(std::memory_order_relaxed);
    const uint64_t last_poll = app_calls_.last_poll_ns();
    if (batcher_.DeferUnread(small, last_poll)) {
      MarkDeferred(d);
      return;
    }
    const uint64_t now_ns = NowNs();
    app_calls_.Posted(now_ns);
    if (file_.progress.sched_auto) NoteAppCall(now_ns);  // a post: the program drives
    if (batcher_.Defer(now_ns, small, last_poll)) {
      MarkDeferred(d);
      return;
    }
    if (mu.try_lock()) [[likely]] {
      (void)TransmitLocked(d->qpn, now_ns);
      Unlock();
      return;
    }
  } else {
    app_calls_.Posted(NowNs());
    if (mu.try_lock()) {
      dev_->TakePostedRecvs(d->qpn);
      Unlock();
      return;
    }
  }
  LeavePosted(d, kind);
}

// The doorbell record of a post that deferred. One writer (the send post
// lock), so no read-modify-write for the count; the mark is one: an owner
// that takes d's kinds sees the WRs published before (release), and a mark
// made after the owner took d finds kinds 0 and pushes d again, after the
// owner's read of d->next (acquire). A plain store there could be missed:
// it may wait in this thread's store buffer while the owner takes d, and
// this thread would not know.
inline void Runtime::MarkDeferred(PostedDoorbell* d) {
  d->deferred_posts.store(d->deferred_posts.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (d->kinds.fetch_or(PostedDoorbell::kDeferred, std::memory_order_acq_rel) == 0) PushPosted(d);
}

// Onto the list of doorbell records (the caller's fetch_or found d's kinds 0).
[[gnu::noinline]] void Runtime::PushPosted(PostedDoorbell* d) {
  PostedDoorbell* head = posted_head_.load(std::memory_order_relaxed);
  do {
    d->next = head;
  } while (!posted_head_.compare_exchange_weak(head, d, std::memory_order_release, std::memory_order_relaxed));
}

// The device was held: the doorbell goes on the owner's list. Out of line,
// so that RingPosted's common case (the device free) saves fewer registers.
[[gnu::noinline]] void Runtime::LeavePosted(PostedDoorbell* d, uint8_t kind) {
  if (d->kinds.fetch_or(kind, std::memory_order_acq_rel) == 0) PushPosted(d);
  // The owner drains before it lets go and looks again after (Unlock); what
  // it can miss is a push that came after its look while its freeing store
  // still sat in its store buffer. That store is visible well within
  // kPostedHandoverNs: until then, a lock still held means that owner's
  // last look is still to come, or a newer owner (who took the lock after
  // this push, a locked instruction) drains it. Free: this thread takes the
  // device and runs the list itself. Rare: a post stamps app_calls_,
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

}  // namespace droce::verbs
