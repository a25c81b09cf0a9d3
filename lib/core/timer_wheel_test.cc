#include "core/timer_wheel.h"

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace droce::core {
namespace {

std::vector<uint32_t> Sorted(std::span<const uint32_t> s) {
  std::vector<uint32_t> v(s.begin(), s.end());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(TimerWheel, HandsBackAnEntryAtItsDeadlineNotBefore) {
  TimerWheel w(1'000'000);
  w.Reserve(4);
  w.Arm(2, 1'000'500);  // the same tick as now
  w.Arm(3, 1'050'000);  // a few ticks ahead
  EXPECT_TRUE(w.Expire(1'000'499).empty());
  EXPECT_EQ(Sorted(w.Expire(1'000'500)), std::vector<uint32_t>{2});
  EXPECT_FALSE(w.armed(2));
  EXPECT_TRUE(w.Expire(1'049'999).empty());
  EXPECT_EQ(Sorted(w.Expire(1'060'000)), std::vector<uint32_t>{3});
  EXPECT_EQ(w.size(), 0u);
}

// NoneDueBy answers exactly at every instant, across re-arms, cancels,
// expiries and deadlines beyond a turn of the wheel (the overflow list): an
// empty poll skips its round only while no deadline has come.
TEST(TimerWheel, NoneDueByIsExactAcrossRandomUse) {
  std::mt19937_64 rng(7);
  TimerWheel w(5'000'000);
  constexpr uint32_t kIds = 16;
  w.Reserve(kIds);
  uint64_t now = 5'000'000;
  EXPECT_TRUE(w.NoneDueBy(now));
  for (int step = 0; step < 20000; ++step) {
    const uint32_t id = static_cast<uint32_t>(rng() % kIds);
    switch (rng() % 4) {
      case 0: {  // near, far, beyond a turn
        const uint64_t spans[3] = {20'000, 2'000'000, 100'000'000};
        w.Arm(id, now + 1 + rng() % spans[rng() % 3]);
        break;
      }
      case 1:
        w.Cancel(id);
        break;
      default:
        now += rng() % 30'000;
        if (rng() % 3 == 0) w.Expire(now);
        break;
    }
    uint64_t earliest = UINT64_MAX;
    for (uint32_t i = 0; i < kIds; ++i) {
      if (w.armed(i)) earliest = std::min(earliest, w.deadline(i));
    }
    ASSERT_EQ(w.NoneDueBy(now), earliest > now) << "step " << step;
  }
}

// The earliest deadline is found in whichever slot holds it, also one just
// behind the current tick's in the wheel's circular order (almost a turn
// ahead) and across a word of the occupancy bits.
TEST(TimerWheel, NoneDueByFindsTheFirstOccupiedSlotAroundTheWheel) {
  const uint64_t start = 70 * TimerWheel::kTickNs;  // slot 70: the second word of bits
  TimerWheel w(start);
  w.Reserve(3);
  const uint64_t almost_a_turn = start + (TimerWheel::kSlots - 1) * TimerWheel::kTickNs;
  w.Arm(0, almost_a_turn);                               // slot 69
  w.Arm(1, start + 10);                                  // slot 70, the current one
  w.Cancel(1);                                           // the lower bound stays low until found anew
  EXPECT_TRUE(w.NoneDueBy(start + 100));                 // found in slot 69, a turn ahead
  EXPECT_TRUE(w.NoneDueBy(almost_a_turn - 1));
  EXPECT_FALSE(w.NoneDueBy(almost_a_turn));
  w.Arm(2, start + 200 * TimerWheel::kTickNs);           // slot 270, ahead of slot 69's entry
  w.Arm(1, start + 10);
  w.Cancel(1);
  EXPECT_TRUE(w.NoneDueBy(start + 100));
  EXPECT_FALSE(w.NoneDueBy(start + 200 * TimerWheel::kTickNs));
  EXPECT_EQ(Sorted(w.Expire(almost_a_turn)), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(w.NoneDueBy(almost_a_turn + TimerWheel::kSlots * TimerWheel::kTickNs));
}

TEST(TimerWheel, ArmReplacesAndCancelRemoves) {
  TimerWheel w(0);
  w.Reserve(3);
  w.Arm(0, 100'000);
  w.Arm(0, 500'000);  // re-armed later: not due at the first deadline
  w.Arm(1, 200'000);
  w.Cancel(1);
  EXPECT_TRUE(w.Expire(300'000).empty());
  EXPECT_EQ(w.deadline(0), 500'000u);
  w.Arm(0, 250'000);  // re-armed earlier
  EXPECT_EQ(Sorted(w.Expire(300'000)), std::vector<uint32_t>{0});
  EXPECT_EQ(w.size(), 0u);
}

TEST(TimerWheel, DeadlinesInThePastComeBackAtTheNextExpire) {
  TimerWheel w(10'000'000);
  w.Reserve(1);
  w.Expire(20'000'000);
  w.Arm(0, 5);
  EXPECT_EQ(Sorted(w.Expire(20'000'001)), std::vector<uint32_t>{0});
}

// RC timeouts are seconds: far deadlines wait in the overflow list and come
// back on time, across any pattern of Expire calls (small steps and jumps).
TEST(TimerWheel, FarDeadlinesComeBackOnTime) {
  TimerWheel w(0);
  w.Reserve(3);
  const uint64_t horizon = TimerWheel::kSlots * TimerWheel::kTickNs;
  w.Arm(0, 3 * horizon + 12345);
  w.Arm(1, 2'000'000'000);  // 2 s
  w.Arm(2, horizon + 1);
  EXPECT_EQ(w.overflow_size(), 3u);
  uint64_t now = 0;
  std::vector<std::pair<uint32_t, uint64_t>> fired;
  while (now < 2'100'000'000) {
    now += (now / 7) % 3 == 0 ? 997 : 1'000'003;
    for (uint32_t id : w.Expire(now)) fired.push_back({id, now});
  }
  ASSERT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0].first, 2u);
  EXPECT_EQ(fired[1].first, 0u);
  EXPECT_EQ(fired[2].first, 1u);
  // At the first Expire at or after each deadline.
  const uint64_t d[3] = {3 * horizon + 12345, 2'000'000'000, horizon + 1};
  for (auto [id, at] : fired) {
    EXPECT_GE(at, d[id]);
    EXPECT_LT(at - d[id], 1'000'004u);
  }
}

// Against a reference model: random arms (near, within the wheel, beyond
// it), cancels, re-arms of due entries, and Expire steps from 1 ns to 100 ms.
TEST(TimerWheel, MatchesAReferenceModel) {
  std::mt19937_64 rng(17);
  constexpr uint32_t kIds = 300;
  TimerWheel w(5'000);
  w.Reserve(kIds);
  std::map<uint32_t, uint64_t> model;
  uint64_t now = 5'000;
  for (int step = 0; step < 20'000; ++step) {
    const int ops = static_cast<int>(rng() % 8);
    for (int k = 0; k < ops; ++k) {
      const uint32_t id = static_cast<uint32_t>(rng() % kIds);
      const uint32_t kind = static_cast<uint32_t>(rng() % 10);
      if (kind == 0) {
        w.Cancel(id);
        model.erase(id);
        continue;
      }
      uint64_t ahead;
      switch (kind % 4) {
        case 0: ahead = rng() % 10'000; break;                // same or next tick
        case 1: ahead = rng() % 30'000'000; break;            // within the wheel
        case 2: ahead = 30'000'000 + rng() % 500'000'000; break;  // overflow
        default: ahead = rng() % 2'000'000; break;
      }
      const uint64_t d = kind == 9 && now > 20'000 ? now - rng() % 20'000 : now + ahead;  // some in the past
      w.Arm(id, std::max<uint64_t>(d, 1));
      model[id] = std::max<uint64_t>(d, 1);
    }
    const uint32_t jump = static_cast<uint32_t>(rng() % 100);
    now += jump < 60 ? rng() % 3'000 : jump < 95 ? rng() % 300'000 : rng() % 100'000'000;
    std::vector<uint32_t> want;
    for (auto it = model.begin(); it != model.end();) {
      if (it->second <= now) {
        want.push_back(it->first);
        it = model.erase(it);
      } else {
        ++it;
      }
    }
    ASSERT_EQ(Sorted(w.Expire(now)), want) << "step " << step << " now " << now;
    ASSERT_EQ(w.size(), model.size());
    for (auto [id, d] : model) ASSERT_EQ(w.deadline(id), d);
  }
}

// The point of the wheel: 1024 entries a second ahead cost nothing per
// Expire while nothing is due (a scan would look at all of them each time).
TEST(TimerWheel, EntriesNotDueAreNotVisited) {
  TimerWheel w(0);
  w.Reserve(1024);
  for (uint32_t i = 0; i < 1024; ++i) w.Arm(i, 67'000'000 + i * 1000);  // 67 ms: the default RC timeout
  uint64_t now = 0;
  for (int round = 0; round < 10'000; ++round) {
    now += 1000;  // 10 ms of 1 us rounds
    EXPECT_TRUE(w.Expire(now).empty());
  }
  EXPECT_EQ(w.visited(), 0u);
  // ... and each entry is looked at a bounded number of times until it fires:
  // by the overflow walks (every half turn), then in its slot at each Expire
  // of its tick (eight 1 us rounds per 8 us tick).
  size_t fired = 0;
  while (fired < 1024) {
    now += 1000;
    fired += w.Expire(now).size();
  }
  EXPECT_LT(w.visited(), 1024u * 12);
}

}  // namespace
}  // namespace droce::core
