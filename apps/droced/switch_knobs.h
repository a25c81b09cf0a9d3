// The network's knobs in droced's switch, per fabric device (doc/droced.md,
// "Switch knobs"): on the frames the switch delivers to the device's
// processes (the device's switch port, egress), in this order:
//   loss     drop each frame with probability `loss` (seeded);
//   bottleneck  a switch egress port (sim/switch/egress_port.h): frames wait
//            in a FIFO drained at `rate`, so a queue adds delay; RED/ECN
//            marking between kmin and kmax (probability up to pmax, always
//            above kmax) at enqueue or at dequeue; tail drop beyond `limit`
//            bytes; with `int`, frames that carry an INT request get the
//            port's record (queue, bytes sent, clock, rate) as they leave;
//            with `pfc`, an ingress port (a sending process) that has more
//            than xoff bytes queued here is not read until it is back at
//            xon (PFC-style pause: its ring fills and its transmit waits);
//   reorder  with probability `reorder` a frame is held back and sent after
//            the port's next frame;
//   mirror   every frame delivered is written to a pcap file.
// Set with `droce-ctl switch set DEV ...`; decisions here (pure, seeded,
// testable, frames as opaque pointers), the mbufs and the file in droced.cc.
#ifndef DROCE_APPS_DROCED_SWITCH_KNOBS_H_
#define DROCE_APPS_DROCED_SWITCH_KNOBS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "drivers/fabric/protocol.h"
#include "queue/ring.h"
#include "sim/switch/egress_port.h"

namespace droce::droced {

struct KnobCounters {
  uint64_t loss_dropped = 0;
  uint64_t queue_dropped = 0;  // the bottleneck's tail drop
  uint64_t ce_marked = 0;      // frames the bottleneck marked (ECN-capable ones only are rewritten)
  uint64_t int_stamped = 0;    // INT requests the bottleneck stamped
  uint64_t reordered = 0;
  uint64_t mirrored = 0;
  uint64_t pfc_pauses = 0;     // times an ingress port went above xoff
};

struct EgressVerdict {
  bool drop = false;
  bool mark = false;    // set CE now (marking at enqueue)
  bool queue = false;   // the frame joins the bottleneck's queue: hand it to Hold
  bool hold = false;    // reorder: send after the port's next frame
};

// Which ingress ports PFC holds, over every device's port: droced does not
// read a held one. Keyed by the ingress id the caller gives Hold (droced:
// the ethdev port id).
class PfcBoard {
 public:
  static constexpr uint32_t kIds = 1024;
  bool held(uint32_t id) const { return id < kIds && holds_[id] != 0; }
  void Hold(uint32_t id) {
    if (id < kIds) ++holds_[id];
  }
  void Release(uint32_t id) {
    if (id < kIds && holds_[id] != 0) --holds_[id];
  }

 private:
  uint16_t holds_[kIds] = {};
};

// A frame the bottleneck let go: what the caller does to it before sending.
struct Released {
  void* frame = nullptr;
  uint32_t port = 0;        // the caller's egress port for it
  uint32_t port_tag = 0;    // and what the caller said of that port (droced: its memif id)
  bool mark = false;        // set CE (marking at dequeue)
  bool stamp = false;       // write `hop` into its INT request
  wire::IntHop hop;
};

class SwitchKnobs {
 public:
  // Frames a bottleneck holds at most (droced's whole mbuf pool is 16383):
  // its FIFO is a ring of this many, allocated when the bottleneck is set,
  // and a frame beyond them is tail-dropped.
  static constexpr uint32_t kMaxQueuedFrames = 16384;
  // Checks a request's knobs (every field, whatever `set` says); applies
  // the ones `set` names. Fails without changing anything.
  static absl::Status Validate(const fabric::KnobRequest& k);
  // `board`: where PFC holds go (null: process_board()).
  void Apply(const fabric::KnobRequest& k, PfcBoard* board = nullptr);

  bool active() const { return loss_ppm_ != 0 || port_ != nullptr || reorder_ppm_ != 0; }
  // Loss, then the bottleneck's admission (tail drop, marking at enqueue),
  // or, without one, reorder.
  EgressVerdict Egress(uint32_t bytes, uint64_t now_ns);
  // After Egress said queue: the frame waits in the bottleneck, to leave
  // for `port` (`port_tag` comes back with it: the caller checks the port is
  // still the one it meant); `ingress` is where it came from (PFC).
  void Hold(void* frame, uint32_t bytes, uint32_t port, uint32_t port_tag, uint32_t ingress);
  // The oldest queued frame whose departure time has come, if any.
  bool Release(uint64_t now_ns, Released* out);
  // Reorder on a frame the bottleneck released (or that never queued).
  bool HoldBack() {
    if (!Chance(reorder_ppm_)) return false;
    ++counters_.reordered;
    return true;
  }
  size_t queued_frames() const { return held_.size(); }
  uint64_t next_release_ns() const { return port_ ? port_->next_departure_ns() : UINT64_MAX; }

  // How queued frames are freed when the bottleneck is replaced or removed,
  // or the device goes away (droced: rte_pktmbuf_free), for every device;
  // and the board PFC holds go to when Apply is given none.
  using FrameFree = void (*)(void* frame);
  static void set_frame_free(FrameFree f);
  static PfcBoard& process_board();

  SwitchKnobs() = default;
  SwitchKnobs(const SwitchKnobs&) = delete;
  SwitchKnobs& operator=(const SwitchKnobs&) = delete;
  ~SwitchKnobs() { DropQueued(); }

  const std::string& mirror_path() const { return mirror_; }
  KnobCounters& counters() { return counters_; }
  std::string Describe() const;  // one line for `daemon status`
  uint64_t queue_bytes(uint64_t now_ns) { return port_ ? port_->queue_bytes(now_ns) : 0; }
  sim::EgressPort* port() { return port_.get(); }

 private:
  struct Held {
    void* frame;
    uint32_t bytes;
    uint32_t port;
    uint32_t port_tag;
    uint32_t ingress;
  };
  bool Chance(uint32_t ppm) { return ppm != 0 && rng_() % 1'000'000 < ppm; }
  void DropQueued();
  uint32_t loss_ppm_ = 0, reorder_ppm_ = 0;
  uint64_t seed_ = 1;
  std::mt19937_64 rng_{1};
  sim::EgressPortConfig port_cfg_;
  uint32_t pfc_xoff_ = 0, pfc_xon_ = 0;
  std::unique_ptr<sim::EgressPort> port_;
  std::unique_ptr<sim::PfcIngress> pfc_;
  PfcBoard* board_ = nullptr;
  queue::Ring<Held> held_;  // in the port's FIFO order
  uint64_t held_bytes_ = 0;
  std::string mirror_;
  KnobCounters counters_;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_SWITCH_KNOBS_H_
