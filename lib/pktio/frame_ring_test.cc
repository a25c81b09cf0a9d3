#include "pktio/frame_ring.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace droce::pktio {
namespace {

// Zeroed, 64-byte aligned memory for one ring (as a fresh memfd is).
struct RingMemory {
  RingMemory(uint32_t slots, uint32_t slot_bytes) : bytes(FrameRing::Bytes(slots, slot_bytes)) {
    mem = static_cast<uint8_t*>(std::aligned_alloc(64, bytes));
    std::memset(mem, 0, bytes);
  }
  ~RingMemory() { std::free(mem); }
  size_t bytes;
  uint8_t* mem;
};

Frame Buf(std::vector<uint8_t>& storage) {
  return Frame{storage.data(), 0, static_cast<uint32_t>(storage.size()), nullptr};
}

Frame Payload(std::vector<uint8_t>& storage, uint8_t seed) {
  for (size_t i = 0; i < storage.size(); ++i) storage[i] = static_cast<uint8_t>(seed + i);
  return Frame{storage.data(), static_cast<uint32_t>(storage.size()), static_cast<uint32_t>(storage.size()), nullptr};
}

TEST(FrameRing, Geometry) {
  EXPECT_TRUE(FrameRing::ValidGeometry(512, FrameRing::kDefaultSlotBytes));
  EXPECT_FALSE(FrameRing::ValidGeometry(3, 256));         // not a power of two
  EXPECT_FALSE(FrameRing::ValidGeometry(1, 256));
  EXPECT_FALSE(FrameRing::ValidGeometry(1u << 17, 256));  // too many
  EXPECT_FALSE(FrameRing::ValidGeometry(4, 100));         // not a multiple of 64
  EXPECT_FALSE(FrameRing::ValidGeometry(4, 64));          // no room for a frame
  EXPECT_EQ(FrameRing::kDefaultSlotBytes % 64, 0u);
  EXPECT_EQ(FrameRing::Bytes(4, 256), FrameRing::kHeaderBytes + 4 * 256);
}

TEST(FrameRing, FifoAndWraparound) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<uint8_t> in(100), out(256);
  // 10 rounds of 3 through a 4-slot ring: the indices wrap many times.
  uint8_t seed = 0;
  uint8_t expect = 0;
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 3; ++k) {
      in.resize(20 + k * 30);
      Frame f = Payload(in, seed++);
      ASSERT_EQ(prod.Produce(&f, 1), 1);
    }
    EXPECT_EQ(cons.Available(), 3u);
    for (int k = 0; k < 3; ++k) {
      Frame d = Buf(out);
      ASSERT_EQ(cons.Consume(&d, 1), 1);
      ASSERT_EQ(d.len, 20u + k * 30);
      for (uint32_t i = 0; i < d.len; ++i) ASSERT_EQ(d.data[i], static_cast<uint8_t>(expect + i));
      ++expect;
    }
    EXPECT_EQ(cons.Available(), 0u);
  }
  EXPECT_EQ(prod.counters().produced, 30u);
  EXPECT_EQ(cons.counters().consumed, 30u);
}

// Peek views frames in their slots (no copy) and keeps the slots until
// Release: a producer cannot reuse them before; a bad length is a view of 0
// bytes. Forwarded ring to ring: one copy, in order.
TEST(FrameRing, PeekViewsInPlaceUntilRelease) {
  RingMemory m(4, 256), m2(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  FrameRing prod2(m2.mem, 4, 256), cons2(m2.mem, 4, 256);
  std::vector<uint8_t> in(50), out(256);
  for (uint8_t k = 0; k < 4; ++k) {
    Frame f = Payload(in, static_cast<uint8_t>(10 * k));
    ASSERT_EQ(prod.Produce(&f, 1), 1);
  }
  Frame v[8];
  ASSERT_EQ(cons.Peek(v, 8), 4);
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(v[k].len, 50u);
    EXPECT_EQ(v[k].data[0], static_cast<uint8_t>(10 * k));
  }
  Frame more = Payload(in, 99);
  EXPECT_EQ(prod.Produce(&more, 1), 0);  // the slots are still the consumer's
  EXPECT_EQ(prod2.Produce(v, 4), 4);     // forwarded: copied once, into the next ring
  cons.Release(3);
  EXPECT_EQ(cons.Available(), 1u);       // the fourth is viewed again
  ASSERT_EQ(cons.Peek(v, 8), 1);
  EXPECT_EQ(v[0].data[0], 30);
  cons.Release(1);
  EXPECT_EQ(cons.Available(), 0u);
  EXPECT_EQ(prod.Produce(&more, 1), 1);
  for (int k = 0; k < 4; ++k) {
    Frame d = Buf(out);
    ASSERT_EQ(cons2.Consume(&d, 1), 1);
    EXPECT_EQ(d.len, 50u);
    EXPECT_EQ(d.data[0], static_cast<uint8_t>(10 * k));
  }
  // A hostile length (the producer rewrites a published slot's): a view of
  // nothing, counted, and the slot is still freed.
  ASSERT_EQ(cons.Peek(v, 8), 1);
  const uint32_t huge = 100000;
  std::memcpy(v[0].data - FrameRing::kSlotHeader, &huge, sizeof huge);
  ASSERT_EQ(cons.Peek(v, 8), 1);  // looked at again before Release: the same slot
  EXPECT_EQ(v[0].len, 0u);
  EXPECT_EQ(cons.counters().bad_length, 1u);
  cons.Release(1);
  EXPECT_EQ(cons.Available(), 0u);
}

TEST(FrameRing, FullRefusesAndKeepsOrder) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<std::vector<uint8_t>> st(6, std::vector<uint8_t>(10));
  Frame fs[6];
  for (int i = 0; i < 6; ++i) fs[i] = Payload(st[i], static_cast<uint8_t>(i * 16));
  EXPECT_EQ(prod.Produce(fs, 6), 4);  // a prefix: the caller keeps fs[4..6)
  EXPECT_EQ(prod.counters().full, 1u);
  EXPECT_EQ(prod.Produce(fs + 4, 2), 0);
  std::vector<uint8_t> o1(256), o2(256);
  Frame d[2] = {Buf(o1), Buf(o2)};
  ASSERT_EQ(cons.Consume(d, 2), 2);
  EXPECT_EQ(d[0].data[0], 0);
  EXPECT_EQ(d[1].data[0], 16);
  EXPECT_EQ(prod.Produce(fs + 4, 2), 2);  // room again
  uint8_t firsts[4];
  for (int i = 0; i < 4; ++i) {
    Frame x = Buf(o1);
    ASSERT_EQ(cons.Consume(&x, 1), 1);
    firsts[i] = x.data[0];
  }
  EXPECT_EQ(firsts[0], 32);
  EXPECT_EQ(firsts[1], 48);
  EXPECT_EQ(firsts[2], 64);
  EXPECT_EQ(firsts[3], 80);
}

TEST(FrameRing, TooLongFrameIsRefused) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256);
  std::vector<uint8_t> big(256 - FrameRing::kSlotHeader + 1), ok(256 - FrameRing::kSlotHeader);
  Frame fs[2] = {Payload(ok, 1), Payload(big, 2)};
  EXPECT_EQ(prod.Produce(fs, 2), 1);
  EXPECT_EQ(prod.counters().too_long, 1u);
}

// A gather frame goes into the slot whole: its headers, the gathered bytes
// read where they are, then what follows them in its buffer; changing the
// gathered memory afterwards changes nothing in the ring. A gather frame
// whose pieces do not add up is refused (too_long) without a byte read.
TEST(FrameRing, GatherFrameIsCopiedInItsThreePieces) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<uint8_t> head(40), payload(150), out(256);
  for (size_t i = 0; i < head.size(); ++i) head[i] = static_cast<uint8_t>(0xa0 + i);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(3 * i + 1);
  // The buffer holds 30 header bytes, then the 10 that follow the payload.
  Frame f{head.data(), 30 + 150 + 10, static_cast<uint32_t>(head.size()), nullptr};
  f.gather = payload.data();
  f.gather_len = 150;
  f.gather_at = 30;
  Frame bad = f;
  bad.gather_at = 41;  // 41 + 150 > 190: the pieces overrun the frame
  Frame fs[2] = {f, bad};
  ASSERT_EQ(prod.Produce(fs, 2), 1);
  EXPECT_EQ(prod.counters().too_long, 1u);
  std::memset(payload.data(), 0xee, payload.size());  // the sender's memory moves on
  Frame d = Buf(out);
  ASSERT_EQ(cons.Consume(&d, 1), 1);
  ASSERT_EQ(d.len, 190u);
  for (uint32_t i = 0; i < 30; ++i) EXPECT_EQ(d.data[i], static_cast<uint8_t>(0xa0 + i)) << i;
  for (uint32_t i = 0; i < 150; ++i) EXPECT_EQ(d.data[30 + i], static_cast<uint8_t>(3 * i + 1)) << i;
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(d.data[180 + i], static_cast<uint8_t>(0xa0 + 30 + i)) << i;
}

// The other process writes the same memory: whatever it writes, neither side
// reads or writes outside the region (ASan checks), and bad lengths are counted.
TEST(FrameRing, HostilePeerStaysInBounds) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<uint8_t> in(50), out(256), small(10);
  Frame f = Payload(in, 7);
  ASSERT_EQ(prod.Produce(&f, 1), 1);
  // A length beyond the slot, and one beyond the consumer's buffer.
  uint32_t huge = 1u << 30;
  std::memcpy(m.mem + FrameRing::kHeaderBytes, &huge, 4);
  Frame d = Buf(out);
  EXPECT_EQ(cons.Consume(&d, 1), 0);
  EXPECT_EQ(cons.counters().bad_length, 1u);
  ASSERT_EQ(prod.Produce(&f, 1), 1);
  Frame s = Buf(small);
  EXPECT_EQ(cons.Consume(&s, 1), 0);
  EXPECT_EQ(cons.counters().bad_length, 2u);
  // A head far ahead: at most `slots` frames, each within its slot.
  uint32_t far = 1000;
  std::memcpy(m.mem, &far, 4);
  EXPECT_EQ(cons.Available(), 4u);
  std::vector<std::vector<uint8_t>> outs(8, std::vector<uint8_t>(256));
  Frame ds[8];
  for (int i = 0; i < 8; ++i) ds[i] = Buf(outs[i]);
  EXPECT_LE(cons.Consume(ds, 8), 4);
  // A tail that overtook the producer's head: once the producer reads it
  // (its cached tail left room for at most 2 more), it sees no room.
  uint32_t bogus_tail = 77;
  std::memcpy(m.mem + 64, &bogus_tail, 4);
  uint32_t took = 0;
  for (int i = 0; i < 6; ++i) took += prod.Produce(&f, 1);
  EXPECT_LE(took, 2u);
  EXPECT_EQ(prod.Produce(&f, 1), 0);
}

// The producer's cached tail: a full ring is seen as full without the
// consumer's tail being trusted beyond what it said, and the slots the
// consumer frees become usable (the cache is refreshed when it is short).
// Every frame comes out once, in order, intact: none was overwritten.
TEST(FrameRing, CachedTailIsRefreshedAndNeverOverwrites) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<std::vector<uint8_t>> st(16, std::vector<uint8_t>(40));
  Frame fs[16];
  for (int i = 0; i < 16; ++i) fs[i] = Payload(st[i], static_cast<uint8_t>(i * 8));
  std::vector<uint8_t> out(256);
  int next_in = 0, next_out = 0;
  auto consume = [&](int k) {
    for (int j = 0; j < k; ++j) {
      Frame d = Buf(out);
      ASSERT_EQ(cons.Consume(&d, 1), 1);
      ASSERT_EQ(d.len, 40u);
      for (uint32_t i = 0; i < d.len; ++i) ASSERT_EQ(d.data[i], static_cast<uint8_t>(next_out * 8 + i));
      ++next_out;
    }
  };
  next_in += prod.Produce(fs + next_in, 3);
  EXPECT_EQ(next_in, 3);
  consume(1);                                   // one slot freed
  next_in += prod.Produce(fs + next_in, 3);     // room for 2 of them: the tail is read again
  EXPECT_EQ(next_in, 5);
  EXPECT_EQ(prod.Produce(fs + next_in, 1), 0);  // full
  consume(2);
  next_in += prod.Produce(fs + next_in, 1);     // the cache said full: refreshed, 2 free
  next_in += prod.Produce(fs + next_in, 1);
  EXPECT_EQ(next_in, 7);
  EXPECT_EQ(prod.Produce(fs + next_in, 1), 0);
  consume(4);
  for (int round = 0; round < 3; ++round) {     // wrap around with the cache
    next_in += prod.Produce(fs + next_in, 3);
    consume(3);
  }
  EXPECT_EQ(next_in, 16);
  EXPECT_EQ(next_out, 16);
  EXPECT_EQ(cons.Available(), 0u);
}

TEST(FrameRing, WakeupRequestedOnlyWhileArmed) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<uint8_t> in(30), out(256);
  Frame f = Payload(in, 1);
  ASSERT_EQ(prod.Produce(&f, 1), 1);
  EXPECT_FALSE(prod.TakeWakeupRequest());  // the consumer polls: no notification
  EXPECT_FALSE(cons.Arm());                // a frame is there: do not sleep
  Frame d = Buf(out);
  ASSERT_EQ(cons.Consume(&d, 1), 1);
  EXPECT_TRUE(cons.Arm());
  ASSERT_EQ(prod.Produce(&f, 1), 1);
  EXPECT_TRUE(prod.TakeWakeupRequest());
  EXPECT_FALSE(prod.TakeWakeupRequest());  // one per sleep
  cons.Disarm();
  ASSERT_EQ(prod.Produce(&f, 1), 1);
  EXPECT_FALSE(prod.TakeWakeupRequest());
}

TEST(FrameRing, ProducerWakeupRequestedOnlyWhileArmed) {
  RingMemory m(4, 256);
  FrameRing prod(m.mem, 4, 256), cons(m.mem, 4, 256);
  std::vector<uint8_t> in(30), out(256);
  Frame fs[5];
  for (Frame& f : fs) f = Payload(in, 1);
  ASSERT_EQ(prod.Produce(fs, 5), 4);  // full
  Frame d = Buf(out);
  ASSERT_EQ(cons.Consume(&d, 1), 1);
  EXPECT_FALSE(cons.TakeProducerWakeup());  // the producer did not ask
  ASSERT_EQ(prod.Produce(fs, 2), 1);        // full again
  prod.ArmProducer();
  EXPECT_EQ(prod.Produce(fs, 1), 0);  // the poll after arming: still full, sleep
  ASSERT_EQ(cons.Consume(&d, 1), 1);
  EXPECT_TRUE(cons.TakeProducerWakeup());
  EXPECT_FALSE(cons.TakeProducerWakeup());  // one per sleep
  ASSERT_EQ(prod.Produce(fs, 1), 1);
  prod.ArmProducer();
  prod.DisarmProducer();  // woken otherwise: no wake-up wanted
  ASSERT_EQ(cons.Consume(&d, 1), 1);
  EXPECT_FALSE(cons.TakeProducerWakeup());
  // Release (a forwarder's Peek) frees slots as Consume does.
  ASSERT_EQ(prod.Produce(fs, 2), 1);
  prod.ArmProducer();
  Frame v[4];
  ASSERT_EQ(cons.Peek(v, 4), 4);
  cons.Release(2);
  EXPECT_TRUE(cons.TakeProducerWakeup());
  EXPECT_EQ(prod.Produce(fs, 2), 2);
}

// A producer that sleeps whenever its ring is full, a consumer that frees
// slots in small steps at its own pace: 400000 frames through 8 slots. A
// slot freed after the producer's last look found the ring full, without
// the doorbell ringing since it armed, is a lost wake-up.
TEST(FrameRing, FullRingProducerIsWokenAndNoWakeupIsLost) {
  constexpr uint32_t kFrames = 400000;
  constexpr uint32_t kSlots = 8;
  RingMemory m(kSlots, 256);
  FrameRing prod(m.mem, kSlots, 256), cons(m.mem, kSlots, 256);
  std::atomic<uint32_t> doorbell{0};
  // Frames the consumer has freed and then checked for a request (after
  // TakeProducerWakeup and its doorbell).
  std::atomic<uint32_t> checked{0};
  std::atomic<bool> stop{false};
  uint32_t sleeps = 0;
  std::thread producer([&] {
    std::vector<uint8_t> st(64);
    uint32_t seq = 0;
    while (seq < kFrames && !stop.load(std::memory_order_relaxed)) {
      Frame fs[4];
      uint16_t n = 0;
      for (; n < 4 && seq + n < kFrames; ++n) fs[n] = Frame{st.data(), 8, 64, nullptr};
      uint16_t took = prod.Produce(fs, n);
      if (took == 0) {
        const uint32_t before = doorbell.load(std::memory_order_acquire);
        prod.ArmProducer();
        took = prod.Produce(fs, n);  // the poll after arming
        if (took == 0) {
          // Full as of that look: slots freed after it are past
          // seq - kSlots and must ring.
          ++sleeps;
          while (doorbell.load(std::memory_order_acquire) == before) {
            if (checked.load(std::memory_order_acquire) > seq - kSlots &&
                doorbell.load(std::memory_order_acquire) == before) {
              ADD_FAILURE() << "producer wake-up lost at frame " << seq;
              stop.store(true, std::memory_order_relaxed);
              return;
            }
            std::this_thread::yield();
          }
        }
        prod.DisarmProducer();
      }
      seq += took;
    }
  });
  uint32_t got_total = 0;
  std::vector<uint8_t> out(256);
  while (got_total < kFrames && !stop.load(std::memory_order_relaxed)) {
    Frame d = Buf(out);
    const uint16_t got = cons.Consume(&d, 1);
    got_total += got;
    if (got > 0 && cons.TakeProducerWakeup()) doorbell.fetch_add(1, std::memory_order_release);
    checked.store(got_total, std::memory_order_release);
    if (got == 0 || (got_total & 7) == 0) std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(got_total, kFrames);
  EXPECT_GT(sleeps, 0u);
}

// Two threads, 20000 frames of varying length through 32 slots: every
// frame arrives once, in order, intact; no wake-up request is lost (the
// consumer sleeps on a flag the producer must set after each request).
TEST(FrameRing, ConcurrentProducerConsumer) {
  constexpr uint32_t kFrames = 20000;
  RingMemory m(32, 320);
  FrameRing prod(m.mem, 32, 320), cons(m.mem, 32, 320);
  std::atomic<uint32_t> doorbell{0};
  // Frames the producer has put in the ring, published after it rang for
  // them: a frame counted here that the consumer has not seen was produced
  // after the consumer armed on an empty ring, so its doorbell must have
  // rung already.
  std::atomic<uint32_t> produced{0};
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    std::vector<uint8_t> buf(256);
    uint32_t seq = 0;
    while (seq < kFrames && !stop.load(std::memory_order_relaxed)) {
      Frame fs[4];
      std::vector<uint8_t> st[4];
      uint16_t n = 0;
      for (; n < 4 && seq + n < kFrames; ++n) {
        const uint32_t s = seq + n;
        st[n].resize(8 + s % 240);
        std::memcpy(st[n].data(), &s, 4);
        for (size_t i = 4; i < st[n].size(); ++i) st[n][i] = static_cast<uint8_t>(s * 31 + i);
        fs[n] = Frame{st[n].data(), static_cast<uint32_t>(st[n].size()), static_cast<uint32_t>(st[n].size()), nullptr};
      }
      const uint16_t took = prod.Produce(fs, n);
      seq += took;
      if (took > 0 && prod.TakeWakeupRequest()) doorbell.fetch_add(1, std::memory_order_release);
      produced.store(seq, std::memory_order_release);
      if (took == 0) std::this_thread::yield();
    }
  });
  uint32_t expect = 0, sleeps = 0;
  std::vector<uint8_t> outs[4];
  for (auto& o : outs) o.resize(256);
  while (expect < kFrames) {
    Frame ds[4];
    for (int i = 0; i < 4; ++i) ds[i] = Buf(outs[i]);
    const uint16_t got = cons.Consume(ds, 4);
    for (uint16_t i = 0; i < got; ++i) {
      uint32_t s;
      std::memcpy(&s, ds[i].data, 4);
      ASSERT_EQ(s, expect);
      ASSERT_EQ(ds[i].len, 8 + s % 240);
      for (size_t k = 4; k < ds[i].len; ++k) ASSERT_EQ(ds[i].data[k], static_cast<uint8_t>(s * 31 + k));
      ++expect;
    }
    // (The doorbell is read before arming: a ring that answers this arm
    // can come at once.)
    const uint32_t before = doorbell.load(std::memory_order_acquire);
    if (got == 0 && (expect & 0xff) == 0 && cons.Arm()) {
      // Sleep until the producer rings. Armed with nothing there: frames
      // come only with a doorbell, so a frame produced past `expect` with
      // the doorbell still silent is a lost wake-up request.
      bool lost = false;
      while (doorbell.load(std::memory_order_acquire) == before) {
        if (produced.load(std::memory_order_acquire) > expect && doorbell.load(std::memory_order_acquire) == before) {
          lost = true;
          break;
        }
        std::this_thread::yield();
      }
      if (lost) {
        ADD_FAILURE() << "wake-up lost at frame " << expect;
        stop.store(true, std::memory_order_relaxed);
        break;
      }
      cons.Disarm();
      ++sleeps;
    }
  }
  producer.join();
  EXPECT_EQ(cons.counters().consumed, kFrames);
  EXPECT_EQ(cons.counters().bad_length, 0u);
  EXPECT_GT(sleeps, 0u);
}

}  // namespace
}  // namespace droce::pktio
