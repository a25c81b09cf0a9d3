// An in-memory Ethernet link between two BurstIo ends, with seeded
// impairments: drop, duplicate, reorder, corrupt and ECN-mark. Deterministic
// for a given seed and call sequence, like eRPC's fake transport, so protocol
// tests and experiments replay exactly.
//
// Single-threaded by design: one thread drives both ends (tests, the engine
// benchmark, in-process demos). Frames live in a pool allocated once; frames
// move between the ends by index, never by allocation.
#ifndef DROCE_SIM_WIRE_MEM_WIRE_H_
#define DROCE_SIM_WIRE_MEM_WIRE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "pktio/burst_io.h"

namespace droce::sim {

using pktio::BurstIo;
using pktio::Frame;
using pktio::kMaxFrameBytes;

// Probabilities per frame, applied in this order: drop, corrupt, ECN-mark,
// duplicate, reorder (hold the frame back behind the next 1..reorder_depth).
struct Impairments {
  double drop = 0;
  double duplicate = 0;
  double reorder = 0;
  double corrupt = 0;    // flip one random bit: receivers reject it (ICRC)
  double ecn_mark = 0;   // set CE on ECN-capable RoCEv2 frames (ICRC stays valid)
  uint32_t reorder_depth = 3;
  bool roce_only = true;  // leave non-RoCEv2 frames (ARP, ...) untouched
};

struct MemWireConfig {
  uint32_t pool_frames = 4096;   // buffers shared by both directions
  uint32_t queue_frames = 2048;  // per direction; beyond it frames are tail-dropped
  uint64_t seed = 1;
  Impairments impair[2];         // [0]: end 0 -> end 1, [1]: end 1 -> end 0
};

struct MemWireCounters {
  uint64_t sent = 0;
  uint64_t delivered = 0;
  uint64_t dropped = 0;       // by the drop impairment
  uint64_t queue_full = 0;    // tail drops
  uint64_t duplicated = 0;
  uint64_t reordered = 0;
  uint64_t corrupted = 0;
  uint64_t ecn_marked = 0;
};

class MemWire {
 public:
  explicit MemWire(const MemWireConfig& config);
  MemWire(const MemWire&) = delete;
  MemWire& operator=(const MemWire&) = delete;

  BurstIo& end(int i) { return ends_[i]; }
  // Counters of the direction leaving end `from`.
  const MemWireCounters& counters(int from) const { return dir_[from].counters; }
  void set_impairments(int from, const Impairments& imp) {
    dir_[from].impair = imp;
    dir_[from].impaired = Impaired(imp);
  }
  // Called for every frame that enters the far end's queue (for captures).
  using Tap = void (*)(void* ctx, int from, const uint8_t* data, uint32_t len);
  void set_tap(Tap tap, void* ctx) {
    tap_ = tap;
    tap_ctx_ = ctx;
  }
  // Buffers not in the pool: queued, held back, or owned by a caller.
  uint32_t frames_outstanding() const {
    return static_cast<uint32_t>(config_.pool_frames - free_.size());
  }

 private:
  class End final : public BurstIo {
   public:
    End() = default;
    End(MemWire* wire, int side) : wire_(wire), side_(side) {}
    uint16_t RxBurst(Frame* frames, uint16_t n) override;
    uint16_t AllocTx(Frame* frames, uint16_t n) override;
    uint16_t TxBurst(Frame* frames, uint16_t n) override;
    void Release(Frame* frames, uint16_t n) override;

   private:
    MemWire* wire_ = nullptr;
    int side_ = 0;
  };

  struct Held {
    uint32_t slot;
    uint32_t countdown;  // frames still to pass before this one is delivered
  };

  struct Direction {
    Impairments impair;
    bool impaired = false;  // some probability above zero: Transmit draws for each frame
    std::vector<uint32_t> queue;  // ring of slots
    uint32_t head = 0, count = 0;
    std::vector<Held> held;
    MemWireCounters counters;
  };

  uint8_t* SlotData(uint32_t slot) { return storage_.get() + size_t{slot} * kMaxFrameBytes; }
  Frame FrameFor(uint32_t slot, uint32_t len) {
    return Frame{SlotData(slot), len, kMaxFrameBytes, reinterpret_cast<void*>(uintptr_t{slot})};
  }
  static bool Impaired(const Impairments& imp);
  bool Enqueue(int from, uint32_t slot);
  bool TailDrop(Direction& d, uint32_t slot);
  void CallTap(int from, uint32_t slot);
  void Deliver(int from, uint32_t slot);
  void PassHeld(int from);
  void Transmit(int from, uint32_t slot);
  void TransmitImpaired(int from, uint32_t slot);
  double Uniform();
  uint64_t Next();

  MemWireConfig config_;
  // Not cleared: a frame's bytes are written before anyone reads them, and
  // the pool (tens of MB) is touched only as far as it is used.
  std::unique_ptr<uint8_t[]> storage_;
  std::vector<uint32_t> lengths_;
  std::vector<uint32_t> free_;
  Direction dir_[2];
  End ends_[2];
  uint64_t rng_[2];
  Tap tap_ = nullptr;
  void* tap_ctx_ = nullptr;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_WIRE_MEM_WIRE_H_
