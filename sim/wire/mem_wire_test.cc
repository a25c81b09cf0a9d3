#include "sim/wire/mem_wire.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "wire/fields.h"

namespace droce::sim {
namespace {

// A valid RoCEv2 frame (RC SEND ONLY, ECT(0)) whose payload carries `seq`.
std::vector<uint8_t> MakeFrame(uint32_t seq, uint8_t ecn = wire::kEcnEct0) {
  wire::PacketFields f;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.route.tclass = ecn;
  f.bth.opcode = wire::kRcSendOnly;
  f.bth.psn = seq;
  std::vector<uint8_t> payload(64);
  std::memcpy(payload.data(), &seq, 4);
  f.payload = payload;
  std::vector<uint8_t> out(kMaxFrameBytes);
  out.resize(*wire::SerializeFields(f, out.data(), kMaxFrameBytes));
  return out;
}

void Send(MemWire& w, int from, const std::vector<uint8_t>& bytes) {
  Frame f;
  ASSERT_EQ(w.end(from).AllocTx(&f, 1), 1);
  std::memcpy(f.data, bytes.data(), bytes.size());
  f.len = static_cast<uint32_t>(bytes.size());
  ASSERT_EQ(w.end(from).TxBurst(&f, 1), 1);
}

std::vector<uint32_t> ReceiveAll(MemWire& w, int at, int* bad_icrc = nullptr) {
  std::vector<uint32_t> seqs;
  Frame f[32];
  for (uint16_t n; (n = w.end(at).RxBurst(f, 32)) > 0;) {
    for (uint16_t i = 0; i < n; ++i) {
      const wire::ParsedPacket p = wire::ParseAndVerify(f[i].data, f[i].len);
      if (!p.ok()) {
        if (bad_icrc) ++*bad_icrc;
        continue;
      }
      seqs.push_back(wire::BthView(f[i].data + p.bth_offset).psn());
    }
    w.end(at).Release(f, n);
  }
  return seqs;
}

TEST(MemWire, InOrderWithoutImpairments) {
  MemWire w({});
  for (uint32_t i = 0; i < 100; ++i) Send(w, 0, MakeFrame(i));
  const auto got = ReceiveAll(w, 1);
  ASSERT_EQ(got.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(got[i], i);
  EXPECT_TRUE(ReceiveAll(w, 0).empty());  // nothing leaks to the sender's side
  EXPECT_EQ(w.frames_outstanding(), 0u);
  EXPECT_EQ(w.counters(0).delivered, 100u);
}

TEST(MemWire, ImpairmentRatesAndDeterminism) {
  MemWireConfig c;
  c.seed = 42;
  c.impair[0].drop = 0.1;
  c.impair[0].duplicate = 0.05;
  c.impair[0].reorder = 0.05;
  std::vector<uint32_t> first;
  for (int run = 0; run < 2; ++run) {
    MemWire w(c);
    std::vector<uint32_t> got;
    for (uint32_t i = 0; i < 10000; ++i) {
      Send(w, 0, MakeFrame(i));
      if (i % 50 == 49) {
        auto part = ReceiveAll(w, 1);
        got.insert(got.end(), part.begin(), part.end());
      }
    }
    auto rest = ReceiveAll(w, 1);
    got.insert(got.end(), rest.begin(), rest.end());
    const auto& k = w.counters(0);
    EXPECT_NEAR(double(k.dropped) / 10000, 0.1, 0.02);
    EXPECT_NEAR(double(k.duplicated) / 10000, 0.05 * 0.9, 0.015);
    EXPECT_GT(k.reordered, 300u);
    EXPECT_EQ(got.size(), 10000 - k.dropped + k.duplicated);
    bool out_of_order = false;
    for (size_t i = 1; i < got.size(); ++i) out_of_order |= got[i] < got[i - 1];
    EXPECT_TRUE(out_of_order);
    EXPECT_EQ(w.frames_outstanding(), 0u);
    if (run == 0) first = got; else EXPECT_EQ(got, first);  // same seed, same sequence
  }
}

TEST(MemWire, CorruptionIsCaughtByTheIcrc) {
  MemWireConfig c;
  c.impair[0].corrupt = 1.0;
  MemWire w(c);
  const std::vector<uint8_t> original = MakeFrame(7);
  for (uint32_t i = 0; i < 400; ++i) Send(w, 0, original);
  Frame f[32];
  int rejected = 0, accepted = 0;
  for (uint16_t n; (n = w.end(1).RxBurst(f, 32)) > 0;) {
    for (uint16_t i = 0; i < n; ++i) {
      const wire::ParsedPacket p = wire::ParseAndVerify(f[i].data, f[i].len);
      if (!p.ok()) {
        ++rejected;
        continue;
      }
      // The ICRC does not cover the MAC addresses or the masked IP/UDP/BTH
      // fields; everything it covers must be intact in an accepted frame.
      ++accepted;
      EXPECT_EQ(std::memcmp(f[i].data + p.bth_offset + wire::kBthBytes,
                            original.data() + p.bth_offset + wire::kBthBytes,
                            f[i].len - p.bth_offset - wire::kBthBytes),
                0);
      EXPECT_EQ(wire::BthView(f[i].data + p.bth_offset).psn(), 7u);
    }
    w.end(1).Release(f, n);
  }
  EXPECT_EQ(rejected + accepted, 400);
  EXPECT_GT(rejected, 300);  // ~19 of the frame's 122 bytes are not covered
  EXPECT_EQ(w.counters(0).corrupted, 400u);
}

TEST(MemWire, EcnMarksOnlyEctFramesAndKeepsThemValid) {
  MemWireConfig c;
  c.impair[0].ecn_mark = 1.0;
  MemWire w(c);
  Send(w, 0, MakeFrame(1, wire::kEcnEct0));
  Send(w, 0, MakeFrame(2, wire::kEcnNotEct));
  Frame f[2];
  ASSERT_EQ(w.end(1).RxBurst(f, 2), 2);
  const wire::ParsedPacket a = wire::ParseAndVerify(f[0].data, f[0].len);
  const wire::ParsedPacket b = wire::ParseAndVerify(f[1].data, f[1].len);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a.ecn(), wire::kEcnCe);
  EXPECT_EQ(b.ecn(), wire::kEcnNotEct);
  EXPECT_EQ(w.counters(0).ecn_marked, 1u);
  w.end(1).Release(f, 2);
}

TEST(MemWire, QueueFullTailDropsAndPoolRunsDry) {
  MemWireConfig c;
  c.pool_frames = 8;
  c.queue_frames = 4;
  MemWire w(c);
  for (uint32_t i = 0; i < 6; ++i) Send(w, 0, MakeFrame(i));
  EXPECT_EQ(w.counters(0).queue_full, 2u);
  Frame f[8];
  EXPECT_EQ(w.end(0).AllocTx(f, 8), 4);  // four buffers sit in the queue
  w.end(0).Release(f, 4);
  EXPECT_EQ(ReceiveAll(w, 1).size(), 4u);
  EXPECT_EQ(w.frames_outstanding(), 0u);
}

// A burst that wraps the queue's ring and overfills it: the frames that fit
// arrive in order, the rest are tail-dropped and their buffers freed, and
// the counters say so, as frame-by-frame sends do.
TEST(MemWire, BurstWrapsTheQueueAndTailDropsWhatDoesNotFit) {
  MemWireConfig c;
  c.pool_frames = 16;
  c.queue_frames = 4;
  MemWire w(c);
  for (uint32_t i = 0; i < 3; ++i) Send(w, 0, MakeFrame(i));
  EXPECT_EQ(ReceiveAll(w, 1).size(), 3u);  // the queue's head is now at slot 3
  Frame f[6];
  ASSERT_EQ(w.end(0).AllocTx(f, 6), 6);
  for (uint32_t i = 0; i < 6; ++i) {
    const std::vector<uint8_t> bytes = MakeFrame(10 + i);
    std::memcpy(f[i].data, bytes.data(), bytes.size());
    f[i].len = static_cast<uint32_t>(bytes.size());
  }
  ASSERT_EQ(w.end(0).TxBurst(f, 6), 6);
  EXPECT_EQ(w.counters(0).sent, 9u);
  EXPECT_EQ(w.counters(0).delivered, 7u);
  EXPECT_EQ(w.counters(0).queue_full, 2u);
  EXPECT_EQ(ReceiveAll(w, 1), (std::vector<uint32_t>{10, 11, 12, 13}));
  EXPECT_EQ(w.frames_outstanding(), 0u);
}

}  // namespace
}  // namespace droce::sim
