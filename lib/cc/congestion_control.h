// A QP's congestion control, as Linux's tcp_congestion_ops (doc/cc.md "The
// interface"): the transport reports what happens — a packet sent, an
// acknowledgement with its RTT sample, a CNP, a retransmission timeout, a
// deadline the algorithm asked for — and reads back what the algorithm
// decided (Output): a rate, which the pacer here enforces, and a window of
// packets in flight. The transport never knows which algorithm runs.
//
// One file per algorithm fills in an Ops table (dcqcn.cc: kDcqcnOps) and
// adds itself to kAlgorithms (congestion_control.cc); its per-QP state lives
// in a fixed private area (no allocation per QP or per event). The hooks are
// called through the table once per event, and per packet sent only while
// the algorithm limits the rate (the common unlimited case is one inline
// test); an algorithm leaves a hook it does not need null.
#ifndef DROCE_LIB_CC_CONGESTION_CONTROL_H_
#define DROCE_LIB_CC_CONGESTION_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cc/pacer.h"

namespace droce::cc {

// What an algorithm decided, after every event.
struct Output {
  bool rate_limited = false;       // the pacer holds packets to rate_bps
  uint64_t rate_bps = 0;
  uint32_t window_packets = 0;     // packets in flight it allows (0: no window of its own)
  uint64_t next_deadline_ns = 0;   // OnTimer is due then (0: none)
};

inline constexpr size_t kPrivateBytes = 512;

// One algorithm: its name and its hooks. `priv` is the QP's private area
// (kPrivateBytes, 8-byte aligned); `init` builds the state there from the
// algorithm's parameters, `destroy` ends it.
struct Ops {
  const char* name;
  Output (*init)(void* priv, const void* params);
  void (*destroy)(void* priv);
  // A packet of `bytes` left (only while Output::rate_limited).
  Output (*on_sent)(void* priv, uint32_t bytes, uint64_t now_ns);
  // An acknowledgement that carries an RTT sample (selective repeat's
  // timed packets).
  Output (*on_ack)(void* priv, uint64_t rtt_ns, uint64_t now_ns);
  // A CNP for this QP (RoCEv2 A17.9.3).
  Output (*on_cnp)(void* priv, uint64_t now_ns);
  // The retransmission timer fired.
  Output (*on_timeout)(void* priv, uint64_t now_ns);
  // Output::next_deadline_ns came.
  Output (*on_timer)(void* priv, uint64_t now_ns);
};

// The algorithms a QP may run, by name (the device setting's value).
const Ops* FindAlgorithm(std::string_view name);

class CongestionControl {
 public:
  CongestionControl() = default;
  CongestionControl(const CongestionControl&) = delete;
  CongestionControl& operator=(const CongestionControl&) = delete;
  ~CongestionControl() { Stop(); }

  // Control path: run `ops` (null: none) with `params` (the algorithm's own
  // parameter struct, which must outlive the QP); the pacer starts afresh.
  void Start(const Ops* ops, const void* params);
  void Stop();
  const Ops* ops() const { return ops_; }
  // The algorithm's state (the private area): for its own accessors.
  const void* state() const { return priv_; }

  // Events.
  void OnSent(uint32_t bytes, uint64_t now_ns) {
    if (!out_.rate_limited) return;
    out_ = ops_->on_sent(priv_, bytes, now_ns);
    if (out_.rate_limited) pacer_.OnSent(bytes, now_ns, out_.rate_bps);
  }
  void OnAck(uint64_t rtt_ns, uint64_t now_ns) {
    if (ops_ != nullptr && ops_->on_ack != nullptr) out_ = ops_->on_ack(priv_, rtt_ns, now_ns);
  }
  void OnCnp(uint64_t now_ns) {
    if (ops_ != nullptr && ops_->on_cnp != nullptr) out_ = ops_->on_cnp(priv_, now_ns);
  }
  void OnTimeout(uint64_t now_ns) {
    if (ops_ != nullptr && ops_->on_timeout != nullptr) out_ = ops_->on_timeout(priv_, now_ns);
  }
  void OnTimer(uint64_t now_ns) {
    if (out_.next_deadline_ns != 0 && now_ns >= out_.next_deadline_ns) out_ = ops_->on_timer(priv_, now_ns);
  }

  // Outputs.
  const Output& output() const { return out_; }
  bool rate_limited() const { return out_.rate_limited; }
  // The pacer holds the next packet (only while rate limited).
  bool Paced(uint64_t now_ns) const { return out_.rate_limited && !pacer_.MaySend(now_ns); }
  // When the pacer lets the next packet go (0: not rate limited).
  uint64_t paced_until_ns() const { return out_.rate_limited ? pacer_.next_send_ns() : 0; }
  uint64_t next_deadline_ns() const { return out_.next_deadline_ns; }

 private:
  const Ops* ops_ = nullptr;
  Output out_;
  Pacer pacer_;
  alignas(8) unsigned char priv_[kPrivateBytes];
};

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_CONGESTION_CONTROL_H_
