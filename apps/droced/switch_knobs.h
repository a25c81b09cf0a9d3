// The network's knobs in droced's switch, per fabric device (doc/droced.md,
// "Switch knobs"): on the frames the switch delivers to the device's
// processes (the device's switch port, egress), in this order:
//   loss     drop each frame with probability `loss` (seeded);
//   bottleneck  lib/cc/bottleneck's emulated congestion point as a phantom
//            queue: every frame is enqueued into a FIFO that drains at
//            `rate` and gets its RED/ECN verdict from it (CE mark between
//            kmin and kmax with probability up to pmax, always above kmax;
//            tail drop beyond `limit` bytes), but the frame itself is not
//            delayed (the daemon has no timers: it would have to wake for
//            every departure). Senders faster than `rate` build the queue,
//            get marked and, with DCQCN, slow down; the queue then drains.
//   reorder  with probability `reorder` a frame is held back and sent after
//            the port's next frame;
//   mirror   every frame delivered is written to a pcap file.
// Set with `droce-ctl switch set DEV ...`; decisions here (pure, seeded,
// testable), the mbufs and the file in droced.cc.
#ifndef DROCE_APPS_DROCED_SWITCH_KNOBS_H_
#define DROCE_APPS_DROCED_SWITCH_KNOBS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "sim/switch/bottleneck.h"
#include "drivers/fabric/protocol.h"

namespace droce::droced {

struct KnobCounters {
  uint64_t loss_dropped = 0;
  uint64_t queue_dropped = 0;  // the bottleneck's tail drop
  uint64_t ce_marked = 0;      // frames the bottleneck marked (ECN-capable ones only are rewritten)
  uint64_t reordered = 0;
  uint64_t mirrored = 0;
};

struct EgressVerdict {
  bool drop = false;
  bool mark = false;
  bool hold = false;  // reorder: send after the port's next frame
};

class SwitchKnobs {
 public:
  // Checks a request's knobs (every field, whatever `set` says); applies
  // the ones `set` names. Fails without changing anything.
  static absl::Status Validate(const fabric::KnobRequest& k);
  void Apply(const fabric::KnobRequest& k);

  bool active() const { return loss_ppm_ != 0 || bottleneck_ != nullptr || reorder_ppm_ != 0; }
  EgressVerdict Egress(uint32_t bytes, uint64_t now_ns);

  const std::string& mirror_path() const { return mirror_; }
  KnobCounters& counters() { return counters_; }
  std::string Describe() const;  // one line for `daemon status`
  uint64_t queue_bytes(uint64_t now_ns) { return bottleneck_ ? bottleneck_->queue_bytes(now_ns) : 0; }

 private:
  bool Chance(uint32_t ppm) { return ppm != 0 && rng_() % 1'000'000 < ppm; }
  uint32_t loss_ppm_ = 0, reorder_ppm_ = 0;
  uint64_t seed_ = 1;
  std::mt19937_64 rng_{1};
  sim::BottleneckConfig bn_cfg_;
  std::unique_ptr<sim::Bottleneck> bottleneck_;
  std::string mirror_;
  KnobCounters counters_;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_SWITCH_KNOBS_H_
