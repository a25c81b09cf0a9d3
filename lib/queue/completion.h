// Completion queue entries and the CQ itself. Status and opcode values are
// numerically those of ibv_wc_status / ibv_wc_opcode so the verbs provider
// copies them without translation tables.
#ifndef DROCE_LIB_QUEUE_COMPLETION_H_
#define DROCE_LIB_QUEUE_COMPLETION_H_

#include <cstdint>
#include <utility>

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
  // ibv_wc.sl. RoCE has no service level; a UD receive carries here the L3
  // header type of the datagram (transport::kRoceL3Ipv4 / kRoceL3Ipv6), as
  // mlx5 does. IBTA A17.4.5.1 asks the CQE to say whether a RoCEv2 datagram
  // came over IPv4 or IPv6 (the GRH area holds either header), and verbs has
  // no other field for it: UCX's ud_verbs reads it from sl to find the
  // destination GID in the GRH area.
  uint8_t sl = 0;
  uint32_t byte_len = 0;
  uint32_t imm_or_inv = 0;  // imm_data: the wire bytes unswapped (a __be32, as ibv_wc); or the invalidated rkey
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
};

// A CQ that never overwrites: when full, further completions are counted as
// overflow and the CQ is in error (IBTA 11.4.2.1: CQ overrun is an
// asynchronous error; the consumer must not lose track of completions).
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

  uint32_t Poll(Completion* out, uint32_t n) {
    uint32_t i = 0;
    return PollEach(n, [&](const Completion& c) { out[i++] = c; });
  }

  // Hands the oldest completions (up to n) to f(const Completion&) in
  // order, straight from their slots, then pops them: a consumer that
  // converts each (the verbs provider's ibv_wc) copies it once. Their flags
  // still carry kWcSolicited. How many.
  template <typename F>
  uint32_t PollEach(uint32_t n, F&& f) {
    const uint32_t k = n < ring_.size() ? n : ring_.size();
    const uint32_t head = ring_.head();
    for (uint32_t i = 0; i < k; ++i) f(ring_.at(head + i));
    ring_.Pop(k);
    return k;
  }

  // Drops the queued completions of one QP, keeping the others in order
  // (a QP moved to RESET: rdma-core's mlx5 provider cleans its CQs so).
  void RemoveQp(uint32_t qpn) {
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
  // Control path: allocates.
  bool Resize(uint32_t depth) {
    if (depth == 0 || ring_.size() > depth) return false;
    Ring<Completion> next(depth);
    while (!ring_.empty()) {
      next.Push(ring_.front());
      ring_.Pop();
    }
    ring_ = std::move(next);
    return true;
  }
  bool overflowed() const { return overflowed_; }
  uint64_t overflow_count() const { return overflow_count_; }

  // Internal flag kept in Completion::flags while queued: marks a completion
  // of a solicited message for solicited-only notification.
  static constexpr uint8_t kWcSolicited = 1 << 7;

 private:
  Ring<Completion> ring_;
  bool overflowed_ = false;
  uint64_t overflow_count_ = 0;
  bool notify_armed_ = false;
  bool solicited_only_ = false;
  uint64_t notifications_ = 0;
};

}  // namespace droce::queue

#endif  // DROCE_LIB_QUEUE_COMPLETION_H_
