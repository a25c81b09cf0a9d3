// Completion queue entries and the CQ itself. Status and opcode values are
// numerically those of ibv_wc_status / ibv_wc_opcode so the verbs provider
// copies them without translation tables.
#ifndef DROCE_LIB_QUEUE_COMPLETION_H_
#define DROCE_LIB_QUEUE_COMPLETION_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "queue/ring.h"

namespace droce::queue {

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kLocRddViolErr = 14,
  kRemInvRdReqErr = 15,
  kRemAbortErr = 16,
  kInvEecnErr = 17,
  kInvEecStateErr = 18,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};
const char* WcStatusName(WcStatus s);

enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kBindMw = 5,
  kLocalInv = 6,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

enum WcFlags : uint8_t {
  kWcGrh = 1 << 0,           // IBV_WC_GRH: the receive buffer starts with the 40-byte GRH area
  kWcWithImm = 1 << 1,       // IBV_WC_WITH_IMM
  kWcWithInv = 1 << 3,       // IBV_WC_WITH_INV
};

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint8_t flags = 0;
  uint32_t byte_len = 0;
  uint32_t imm_or_inv = 0;  // imm_data: the wire bytes unswapped (a __be32, as ibv_wc); or the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
};

// The consumer side's lock of a CompletionQueue: threads polling one CQ
// take it in turn, and the control operations that rewrite the ring
// (Resize, RemoveQp) take it to keep pollers out. Held for a copy of a few
// completions, so a waiter spins (and yields if the holder was preempted);
// unlock is a plain store.
class ConsumerLock {
 public:
  bool try_lock() {
    uint32_t expected = 0;
    return word_.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void lock() {
    for (uint32_t i = 0; !try_lock(); ++i) {
      while (word_.load(std::memory_order_relaxed) != 0) {
        if (++i % 256 == 0) {
          std::this_thread::yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
    }
  }
  void unlock() { word_.store(0, std::memory_order_release); }

 private:
  std::atomic<uint32_t> word_{0};
};

// A CQ that never overwrites: when full, further completions are counted as
// overflow and the CQ is in error (IBTA 11.4.2.1: CQ overrun is an
// asynchronous error; the consumer must not lose track of completions).
//
// Threads: one producer at a time (the engine: Push, ArmNotify and the
// notification/overflow state are the device's, under whatever lock the
// device runs under) and any number of consumers (Poll), which need no lock
// of the producer's: the ring is single-producer single-consumer (ring.h)
// and consumers take turns under the CQ's own ConsumerLock. Resize and
// RemoveQp are both sides at once: the caller excludes the producer, they
// take the consumer lock.
class CompletionQueue {
 public:
  explicit CompletionQueue(uint32_t depth) : ring_(depth) {}

  bool Push(const Completion& c) {
    if (ring_.Push(c)) {
      if (notify_armed_ && (!solicited_only_ || c.flags & kWcSolicited)) {
        notify_armed_ = false;
        ++notifications_;
      }
      return true;
    }
    overflowed_ = true;
    ++overflow_count_;
    return false;
  }

  // Up to n completions, oldest first, without the internal kWcSolicited
  // flag. Any thread; an empty CQ costs two loads and no lock.
  uint32_t Poll(Completion* out, uint32_t n) {
    if (ring_.empty()) return 0;
    std::lock_guard<ConsumerLock> lock(consumer_);
    const uint32_t head = ring_.head();
    const uint32_t avail = ring_.tail() - head;
    const uint32_t got = avail < n ? avail : n;
    for (uint32_t i = 0; i < got; ++i) {
      out[i] = ring_.at(head + i);
      out[i].flags &= ~kWcSolicited;
    }
    if (got != 0) ring_.Pop(got);
    return got;
  }

  // Drops the queued completions of one QP, keeping the others in order
  // (a QP moved to RESET: rdma-core's mlx5 provider cleans its CQs so).
  // Caller excludes the producer.
  void RemoveQp(uint32_t qpn) {
    std::lock_guard<ConsumerLock> lock(consumer_);
    for (uint32_t n = ring_.size(); n > 0; --n) {
      const Completion c = ring_.front();
      ring_.Pop();
      if (c.qp_num != qpn) ring_.Push(c);
    }
  }

  // ibv_req_notify_cq: the next (solicited) completion raises a notification.
  void ArmNotify(bool solicited_only) {
    notify_armed_ = true;
    solicited_only_ = solicited_only;
  }
  uint64_t notifications() const { return notifications_; }

  uint32_t size() const { return ring_.size(); }
  uint32_t depth() const { return ring_.depth(); }

  // ibv_resize_cq: a new depth, keeping the queued completions in order.
  // False (nothing changed) when more completions are queued than it holds.
  // Control path: allocates. Caller excludes the producer.
  bool Resize(uint32_t depth) {
    std::lock_guard<ConsumerLock> lock(consumer_);
    if (depth == 0 || ring_.size() > depth) return false;
    std::vector<Completion> queued;
    queued.reserve(ring_.size());
    for (uint32_t i = ring_.head(); i != ring_.tail(); ++i) queued.push_back(ring_.at(i));
    ring_.Reset(depth);
    for (const Completion& c : queued) ring_.Push(c);
    return true;
  }
  bool overflowed() const { return overflowed_; }
  uint64_t overflow_count() const { return overflow_count_; }

  // Internal flag kept in Completion::flags while queued: marks a completion
  // of a solicited message for solicited-only notification.
  static constexpr uint8_t kWcSolicited = 1 << 7;

 private:
  Ring<Completion> ring_;
  ConsumerLock consumer_;
  bool overflowed_ = false;
  uint64_t overflow_count_ = 0;
  bool notify_armed_ = false;
  bool solicited_only_ = false;
  uint64_t notifications_ = 0;
};

}  // namespace droce::queue

#endif  // DROCE_LIB_QUEUE_COMPLETION_H_
