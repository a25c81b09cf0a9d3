// A hashed timing wheel of QP deadlines (doc/core.md "Timers").
//
// Entries are identified by a small index (the device's QP slot), each with
// one deadline in nanoseconds. kSlots slots of kTickNs each cover the next
// kSlots x kTickNs (33.5 ms); deadlines further ahead wait in an overflow
// list that is walked every half turn of the wheel and moves what came
// within reach into its slot. Insert, re-arm and cancel are O(1) (doubly
// linked lists through a per-index array sized on the control path, by
// Reserve); Expire(now) visits the slots of the ticks since the last call
// and hands back every entry whose deadline is at or before now, exactly:
// an entry is never handed back early (its deadline is checked, not its
// slot) nor later than the first Expire at or after its deadline. Nothing
// here allocates after Reserve.
#ifndef DROCE_LIB_CORE_TIMER_WHEEL_H_
#define DROCE_LIB_CORE_TIMER_WHEEL_H_

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace droce::core {

class TimerWheel {
 public:
  static constexpr uint32_t kSlots = 4096;   // a power of two
  static constexpr uint32_t kTickShift = 13;  // 8.192 us per slot
  static constexpr uint64_t kTickNs = uint64_t{1} << kTickShift;
  static constexpr uint32_t kNil = UINT32_MAX;

  explicit TimerWheel(uint64_t now_ns = 0);

  // Room for indices [0, n) (control path: the only allocation).
  void Reserve(uint32_t n);
  uint32_t capacity() const { return static_cast<uint32_t>(entries_.size()); }

  // Files `id` at `deadline_ns` (> 0), replacing what it had. A deadline in
  // the past is handed back by the next Expire.
  void Arm(uint32_t id, uint64_t deadline_ns);
  void Cancel(uint32_t id);
  // The deadline `id` is filed at, 0 if none.
  uint64_t deadline(uint32_t id) const { return entries_[id].deadline; }
  bool armed(uint32_t id) const { return entries_[id].where != kNone; }

  // Unfiles and returns every entry whose deadline is <= now_ns (the span
  // stays valid until the next Expire; re-arming from it is allowed).
  std::span<const uint32_t> Expire(uint64_t now_ns);

  // No entry is due at now_ns (every deadline filed is later): what an
  // empty poll asks before it skips a round. One compare while the lower
  // bound it keeps of the deadlines is later than now_ns; else (the earliest
  // came due, or was cancelled or moved later) it finds the earliest deadline
  // anew, looking at the slots ahead up to the first that holds one and at
  // the overflow list, and answers by that.
  bool NoneDueBy(uint64_t now_ns) {
    if (size_ == 0 || earliest_ > now_ns) return true;
    FindEarliest();
    return earliest_ > now_ns;
  }

  uint32_t size() const { return size_; }
  uint32_t overflow_size() const { return overflow_size_; }
  // Entries looked at by Expire since construction (a cost measure for tests).
  uint64_t visited() const { return visited_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;     // Entry::where: not filed
  static constexpr uint32_t kOverflow = kSlots;     // Entry::where: the overflow list
  struct Entry {
    uint64_t deadline = 0;
    uint32_t prev = kNil;
    uint32_t next = kNil;
    uint32_t where = kNone;  // slot, kOverflow or kNone
  };
  static uint64_t TickOf(uint64_t ns) { return ns >> kTickShift; }
  void Link(uint32_t id, uint32_t list);
  void Unlink(uint32_t id);
  // Files an unlinked entry by its deadline, relative to cur_tick_.
  void Place(uint32_t id);
  void ExpireList(uint32_t list, uint64_t now_ns);
  void HandBack(uint32_t id);  // a due entry leaves the wheel for Expire's answer
  void WalkOverflow(uint64_t now_ns);
  void FindEarliest();
  // The first slot holding an entry at or after `start` in the wheel's
  // circular order, kNil if none (occupied_).
  uint32_t FirstOccupiedFrom(uint32_t start) const;

  std::vector<Entry> entries_;
  std::vector<uint32_t> heads_;  // kSlots + 1 lists: the slots, then the overflow
  // One bit per slot, set while its list is not empty: FindEarliest looks at
  // 64 slots a word instead of walking up to kSlots heads.
  static constexpr uint32_t kWords = kSlots / 64;
  std::array<uint64_t, kWords> occupied_{};
  std::vector<uint32_t> due_;
  uint64_t cur_tick_;            // every tick before it has been expired
  uint64_t overflow_walk_tick_ = 0;
  uint32_t size_ = 0;
  uint32_t overflow_size_ = 0;
  uint64_t visited_ = 0;
  // A lower bound of every deadline filed: Arm lowers it; a cancel, an
  // expiry or a deadline moved later leave it low until FindEarliest.
  uint64_t earliest_ = UINT64_MAX;
};

}  // namespace droce::core

#endif  // DROCE_LIB_CORE_TIMER_WHEEL_H_
