// A QP's congestion control, as Linux's tcp_congestion_ops (doc/cc.md "The
// interface"): the transport reports what happens — a packet sent, an
// acknowledgement with its RTT sample and echoed telemetry, a CNP, a
// retransmission timeout, a deadline the algorithm asked for — and reads back
// what the algorithm decided (Output): a rate, which the pacer here enforces,
// and a window of packets in flight. The transport never knows which
// algorithm runs.
//
// One file per algorithm fills in an Ops table (dcqcn.cc, timely.cc, hpcc.cc,
// swift.cc) and adds itself to kAlgorithms (congestion_control.cc); its
// per-QP state lives in a fixed private area (no allocation per QP or per
// event) and its parameters in a fixed-size struct described by a table
// (Param: name, range, default, help), which the device file, droce-testpmd
// and the simulators set by name (ParseConfig). The hooks are called through
// the table once per event, and per packet sent only while the algorithm
// limits the rate (the common unlimited case is one inline test); an
// algorithm leaves a hook it does not need null.
//
// Every algorithm keeps its rate in [its minimum rate, the line rate] and its
// window in [1, its maximum] whatever the inputs (absurd RTTs, forged
// telemetry): tested with random inputs (cc_property_test.cc).
#ifndef DROCE_LIB_CC_CONGESTION_CONTROL_H_
#define DROCE_LIB_CC_CONGESTION_CONTROL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cc/pacer.h"
#include "wire/int.h"

namespace droce::cc {

// What an algorithm decided, after every event.
struct Output {
  bool rate_limited = false;       // the pacer holds packets to rate_bps
  uint64_t rate_bps = 0;
  uint32_t window_packets = 0;     // packets in flight it allows (0: no window of its own)
  uint64_t next_deadline_ns = 0;   // OnTimer is due then (0: none)
};

// What one acknowledgement tells the requester.
struct AckSample {
  // Send-to-acknowledgement time of one packet it acknowledges, measured
  // with the transport's own clock (0: this ACK carries no sample; a
  // retransmitted packet is never timed).
  uint64_t rtt_ns = 0;
  uint32_t acked_packets = 0;  // packets newly acknowledged
  // The responder's echo of the INT records its data packet collected
  // (wire/int.h), for QPs that agreed on INT; null otherwise.
  const wire::IntStack* telemetry = nullptr;
};

inline constexpr size_t kPrivateBytes = 512;
inline constexpr size_t kParamBytes = 256;

// One tunable of an algorithm's parameter struct.
struct Param {
  enum class Type : uint8_t { kU32, kU64, kDouble };
  const char* name;
  Type type;
  size_t offset;  // in the parameter struct
  double min;
  double max;
  const char* help;  // what it is, in its unit, and where its default comes from
};

// One algorithm: its name, its hooks and its parameters. `priv` is the QP's
// private area (kPrivateBytes, 8-byte aligned); `init` builds the state there
// from the algorithm's parameters, `destroy` ends it.
struct Ops {
  const char* name;
  Output (*init)(void* priv, const void* params);
  void (*destroy)(void* priv);
  // A packet of `bytes` left (only while Output::rate_limited).
  Output (*on_sent)(void* priv, uint32_t bytes, uint64_t now_ns);
  Output (*on_ack)(void* priv, const AckSample& ack, uint64_t now_ns);
  // A CNP for this QP (RoCEv2 A17.9.3).
  Output (*on_cnp)(void* priv, uint64_t now_ns);
  // The retransmission timer fired.
  Output (*on_timeout)(void* priv, uint64_t now_ns);
  // Output::next_deadline_ns came.
  Output (*on_timer)(void* priv, uint64_t now_ns);

  // Parameters: the struct's size, its table, and the defaults (the
  // paper's) for a port of `line_rate_bps`.
  size_t params_size;
  const Param* params;
  size_t nparams;
  void (*defaults)(void* params, uint64_t line_rate_bps);
  // The algorithm needs the switches' telemetry (INT echoed in ACKs): a QP
  // runs it only toward a peer that agreed on INT.
  bool needs_int;
};

// The algorithms a QP may run, by name (the device setting's value): dcqcn,
// timely, hpcc, swift. "none" is no algorithm (null).
const Ops* FindAlgorithm(std::string_view name);
// "dcqcn, timely, hpcc, swift, none": for error messages and help.
std::string AlgorithmNames();

// An algorithm and its parameters, as a device holds them (copyable).
struct Config {
  const Ops* ops = nullptr;  // null: none
  alignas(8) unsigned char params[kParamBytes] = {};
  const void* param_block() const { return params; }
};

// `algorithm` (a name of FindAlgorithm, or "none") with its defaults for
// `line_rate_bps`, then `settings` applied in order: "name=value" items
// separated by commas or spaces, names from the algorithm's table, values in
// its ranges. Any error names the item and says what is allowed.
absl::StatusOr<Config> ParseConfig(std::string_view algorithm, std::string_view settings, uint64_t line_rate_bps);
// A parameter's value by name (for tools and tests); false if unknown.
bool GetParam(const Config& c, std::string_view name, double* value);
// "name=value ..." of every parameter: what a QP runs, for logs and results.
std::string DescribeConfig(const Config& c);

// Events the interface saw for one QP and what they did to its output: the
// per-QP counters (DROCE_STATS, testpmd telemetry, the simulators).
struct Stats {
  uint64_t acks = 0;             // acknowledgements reported
  uint64_t rtt_samples = 0;
  uint64_t telemetry_acks = 0;   // acknowledgements with an INT echo
  uint64_t cnps = 0;
  uint64_t timeouts = 0;
  uint64_t rate_decreases = 0;   // events after which the rate or window was lower
  uint64_t rate_increases = 0;
  uint64_t last_rtt_ns = 0;
  uint64_t min_rtt_ns = 0;       // 0: no sample yet
};

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
  // The same algorithm and parameters from its initial state (a QP back in
  // RESET starts a new connection: nothing of the old path's rate, window,
  // estimates or statistics carries over).
  void Restart() { Start(ops_, params_); }
  const Ops* ops() const { return ops_; }
  const char* name() const { return ops_ != nullptr ? ops_->name : "none"; }
  // The algorithm's state (the private area): for its own accessors.
  const void* state() const { return priv_; }

  // Events.
  void OnSent(uint32_t bytes, uint64_t now_ns) {
    if (!out_.rate_limited) return;
    if (ops_->on_sent != nullptr) Apply(ops_->on_sent(priv_, bytes, now_ns), false);
    if (out_.rate_limited) pacer_.OnSent(bytes, now_ns, out_.rate_bps);
  }
  void OnAck(const AckSample& ack, uint64_t now_ns) {
    if (ops_ == nullptr) return;
    NoteAck(ack);
    if (ops_->on_ack != nullptr) Apply(ops_->on_ack(priv_, ack, now_ns), true);
  }
  // An acknowledgement whose only news is an RTT sample.
  void OnAck(uint64_t rtt_ns, uint64_t now_ns) {
    AckSample a;
    a.rtt_ns = rtt_ns;
    OnAck(a, now_ns);
  }
  void OnCnp(uint64_t now_ns) {
    if (ops_ == nullptr) return;
    ++stats_.cnps;
    if (ops_->on_cnp != nullptr) Apply(ops_->on_cnp(priv_, now_ns), true);
  }
  void OnTimeout(uint64_t now_ns) {
    if (ops_ == nullptr) return;
    ++stats_.timeouts;
    if (ops_->on_timeout != nullptr) Apply(ops_->on_timeout(priv_, now_ns), true);
  }
  void OnTimer(uint64_t now_ns) {
    if (out_.next_deadline_ns != 0 && now_ns >= out_.next_deadline_ns) Apply(ops_->on_timer(priv_, now_ns), true);
  }

  // Outputs.
  const Output& output() const { return out_; }
  bool rate_limited() const { return out_.rate_limited; }
  // The pacer holds the next packet (only while rate limited).
  bool Paced(uint64_t now_ns) const { return out_.rate_limited && !pacer_.MaySend(now_ns); }
  // When the pacer lets the next packet go (0: not rate limited).
  uint64_t paced_until_ns() const { return out_.rate_limited ? pacer_.next_send_ns() : 0; }
  uint64_t next_deadline_ns() const { return out_.next_deadline_ns; }
  const Stats& stats() const { return stats_; }

 private:
  // A new output: counts a decrease or increase and, after an event (not
  // a packet sent: the pacer takes that packet's rate itself), re-spaces the
  // gap the pacer is in when the rate changed, as a hardware rate limiter
  // applies a new rate to the gap in progress.
  void Apply(const Output& o, bool event) {
    if (o.rate_bps != out_.rate_bps || o.rate_limited != out_.rate_limited ||
        o.window_packets != out_.window_packets) {
      const bool down = (o.rate_limited && (!out_.rate_limited || o.rate_bps < out_.rate_bps)) ||
                        (o.window_packets != 0 && (out_.window_packets == 0 || o.window_packets < out_.window_packets));
      stats_.rate_decreases += down;
      stats_.rate_increases += !down;
      if (event && o.rate_limited && out_.rate_limited && o.rate_bps != out_.rate_bps) pacer_.Retime(o.rate_bps);
    }
    out_ = o;
  }
  void NoteAck(const AckSample& ack) {
    ++stats_.acks;
    stats_.telemetry_acks += ack.telemetry != nullptr;
    if (ack.rtt_ns == 0) return;
    ++stats_.rtt_samples;
    stats_.last_rtt_ns = ack.rtt_ns;
    if (stats_.min_rtt_ns == 0 || ack.rtt_ns < stats_.min_rtt_ns) stats_.min_rtt_ns = ack.rtt_ns;
  }

  const Ops* ops_ = nullptr;
  const void* params_ = nullptr;  // the caller's, as Start was given them
  Output out_;
  Pacer pacer_;
  Stats stats_;
  alignas(8) unsigned char priv_[kPrivateBytes];
};

}  // namespace droce::cc

#endif  // DROCE_LIB_CC_CONGESTION_CONTROL_H_
