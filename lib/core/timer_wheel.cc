#include "core/timer_wheel.h"

#include <algorithm>

namespace droce::core {

TimerWheel::TimerWheel(uint64_t now_ns) : heads_(kSlots + 1, kNil), cur_tick_(TickOf(now_ns)) {}

void TimerWheel::Reserve(uint32_t n) {
  if (n <= entries_.size()) return;
  entries_.resize(n);
  due_.reserve(n);
}

void TimerWheel::Link(uint32_t id, uint32_t list) {
  Entry& e = entries_[id];
  e.where = list;
  e.prev = kNil;
  e.next = heads_[list];
  if (e.next != kNil) entries_[e.next].prev = id;
  heads_[list] = id;
  if (list == kOverflow) {
    ++overflow_size_;
  } else {
    occupied_[list / 64] |= uint64_t{1} << (list % 64);
  }
}

void TimerWheel::Unlink(uint32_t id) {
  Entry& e = entries_[id];
  if (e.prev != kNil) {
    entries_[e.prev].next = e.next;
  } else {
    heads_[e.where] = e.next;
  }
  if (e.next != kNil) entries_[e.next].prev = e.prev;
  if (e.where == kOverflow) {
    --overflow_size_;
  } else if (heads_[e.where] == kNil) {
    occupied_[e.where / 64] &= ~(uint64_t{1} << (e.where % 64));
  }
  e.where = kNone;
  e.prev = e.next = kNil;
}

void TimerWheel::Place(uint32_t id) {
  const uint64_t tick = TickOf(entries_[id].deadline);
  if (tick <= cur_tick_) {
    Link(id, static_cast<uint32_t>(cur_tick_ % kSlots));  // due: the next Expire visits this slot
  } else if (tick - cur_tick_ < kSlots) {
    Link(id, static_cast<uint32_t>(tick % kSlots));
  } else {
    if (overflow_size_ == 0) overflow_walk_tick_ = cur_tick_ + kSlots / 2;
    Link(id, kOverflow);
  }
}

void TimerWheel::Arm(uint32_t id, uint64_t deadline_ns) {
  Entry& e = entries_[id];
  if (e.where != kNone) {
    Unlink(id);
  } else {
    ++size_;
  }
  e.deadline = deadline_ns;
  Place(id);
  if (deadline_ns < earliest_) earliest_ = deadline_ns;
}

void TimerWheel::Cancel(uint32_t id) {
  Entry& e = entries_[id];
  if (e.where == kNone) return;
  Unlink(id);
  e.deadline = 0;
  --size_;
}

void TimerWheel::HandBack(uint32_t id) {
  Unlink(id);
  entries_[id].deadline = 0;
  --size_;
  due_.push_back(id);
}

void TimerWheel::ExpireList(uint32_t list, uint64_t now_ns) {
  for (uint32_t id = heads_[list]; id != kNil;) {
    Entry& e = entries_[id];
    const uint32_t next = e.next;
    ++visited_;
    if (e.deadline <= now_ns) {
      HandBack(id);
    }
    id = next;
  }
}

// Due entries are handed back; those now within a turn of the wheel move to
// their slot; the rest wait for the next walk, half a turn later: an entry
// filed here is at least a turn ahead, so a walk comes before its tick does.
void TimerWheel::WalkOverflow(uint64_t now_ns) {
  for (uint32_t id = heads_[kOverflow]; id != kNil;) {
    Entry& e = entries_[id];
    const uint32_t next = e.next;
    ++visited_;
    if (e.deadline <= now_ns) {
      HandBack(id);
    } else if (TickOf(e.deadline) - cur_tick_ < kSlots) {
      Unlink(id);
      Place(id);
    }
    id = next;
  }
  overflow_walk_tick_ = cur_tick_ + kSlots / 2;
}

uint32_t TimerWheel::FirstOccupiedFrom(uint32_t start) const {
  uint32_t w = start / 64;
  uint64_t bits = occupied_[w] & (~uint64_t{0} << (start % 64));
  // kWords + 1 looks: the last is start's word again, whole (its slots
  // before start come last in circular order; those from start are empty).
  for (uint32_t i = 0; i <= kWords; ++i) {
    if (bits != 0) return w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
    w = (w + 1) % kWords;
    bits = occupied_[w];
  }
  return kNil;
}

void TimerWheel::FindEarliest() {
  uint64_t e = UINT64_MAX;
  // The first slot ahead that holds an entry: every entry of it is due by
  // its tick's end; a later slot's are not earlier (the current slot may
  // also hold entries due before it).
  const uint32_t slot = FirstOccupiedFrom(static_cast<uint32_t>(cur_tick_ % kSlots));
  if (slot != kNil) {
    for (uint32_t id = heads_[slot]; id != kNil; id = entries_[id].next) e = std::min(e, entries_[id].deadline);
  }
  for (uint32_t id = heads_[kOverflow]; id != kNil; id = entries_[id].next) e = std::min(e, entries_[id].deadline);
  earliest_ = e;
}

std::span<const uint32_t> TimerWheel::Expire(uint64_t now_ns) {
  due_.clear();
  const uint64_t now_tick = TickOf(now_ns);
  if (now_tick < cur_tick_) {  // the clock went back: only the current slot
    ExpireList(static_cast<uint32_t>(cur_tick_ % kSlots), now_ns);
    return due_;
  }
  if (size_ > overflow_size_) {
    if (now_tick - cur_tick_ >= kSlots) {
      for (uint32_t s = 0; s < kSlots; ++s) ExpireList(s, now_ns);
    } else {
      for (uint64_t t = cur_tick_; t <= now_tick; ++t) ExpireList(static_cast<uint32_t>(t % kSlots), now_ns);
    }
  }
  // The current tick's slot may still hold entries due later in the tick:
  // it is visited again by the next Expire.
  cur_tick_ = now_tick;
  if (overflow_size_ > 0 && now_tick >= overflow_walk_tick_) WalkOverflow(now_ns);
  return due_;
}

}  // namespace droce::core
