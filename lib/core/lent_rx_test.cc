// Lent frames (pktio::Frame::lent, BurstIo::StartLending): a port whose
// frames arrive in memory the sender shares (the direct rings) hands a long
// frame over with only its headers copied; the device reads its payload
// where it is, once, while placing it, and copies any other frame whole
// first (doc/rx-checks.md "Lent frames"). The port here plays the ring: it
// puts each long frame into a "slot" of its own, leaves garbage past the
// headers in the frame's buffer (so whatever reads the payload from there
// reads garbage), lets a hook play a hostile sender that rewrites the slot
// after handing it over, and poisons the slot when the frame is released
// (the sender reuses it).
#include <algorithm>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"
#include "tests/support/device_pair.h"
#include "tests/support/long_messages.h"
#include "wire/packet.h"

namespace droce::core {
namespace {

using transport::WrOpcode;

constexpr uint32_t kLendFrom = 1024;
constexpr uint32_t kHead = 128;
constexpr uint8_t kGarbage = 0xEE;
constexpr uint8_t kPoison = 0xDD;

class LendingPort final : public testing::ForwardingPort {
 public:
  LendingPort(pktio::BurstIo* inner, bool lend) : ForwardingPort(inner), lends(lend) {}
  bool StartLending() override { return lends; }
  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override {
    const uint16_t got = inner()->RxBurst(f, n);
    if (slots_.size() < n) slots_.resize(n, std::vector<uint8_t>(pktio::kMaxFrameBytes));
    for (uint16_t i = 0; i < got; ++i) {
      f[i].Lend(nullptr, 0);
      if (f[i].len < kLendFrom) continue;
      if (!lends) {  // a port of a wire: the hook writes the frame itself
        if (hostile) hostile(f[i].data, f[i].len, ++lent);
        continue;
      }
      std::vector<uint8_t>& slot = slots_[i];
      std::memcpy(slot.data(), f[i].data, f[i].len);
      std::memset(f[i].data + kHead, kGarbage, f[i].len - kHead);
      f[i].Lend(slot.data(), kHead);
      ++lent;
      if (hostile) hostile(slot.data(), f[i].len, lent);
    }
    return got;
  }
  void Release(pktio::Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      // Still lent: the device read its payload where it was, never from
      // the buffer, which still holds the garbage.
      if (f[i].lent() != nullptr) {
        ++placed_from_slot;
        EXPECT_EQ(f[i].data[kHead], kGarbage);
        EXPECT_EQ(f[i].data[f[i].len - 1], kGarbage);
      }
      f[i].Lend(nullptr, 0);
    }
    for (std::vector<uint8_t>& s : slots_) std::memset(s.data(), kPoison, s.size());  // the sender reuses them
    inner()->Release(f, n);
  }
  // Called for every lent frame once it is in its slot: the sender writing
  // the slot after handing it over. `nth` counts lent frames from 1.
  std::function<void(uint8_t* slot, uint32_t len, uint64_t nth)> hostile;
  uint64_t lent = 0, placed_from_slot = 0;
  bool lends = true;  // false: a port that never lends (every other wire)

 private:
  std::vector<std::vector<uint8_t>> slots_;
};

using testing::Pattern;
using testing::RoomyWire;

struct LendingPair {
  explicit LendingPair(uint32_t mtu, bool trust_lent = false, bool lends = true)
      : wire(RoomyWire()),
        port{LendingPort(&wire.end(0), lends), LendingPort(&wire.end(1), lends)},
        p(&port[0], &port[1], Options(mtu, trust_lent)) {}
  static testing::DevicePairOptions Options(uint32_t mtu, bool trust_lent) {
    testing::DevicePairOptions o;
    o.mem_bytes = 1 << 20;
    o.mtu = mtu;
    o.config.rx_icrc_trust_lent = trust_lent;
    return o;
  }
  sim::MemWire wire;
  LendingPort port[2];
  testing::DevicePair p;
};

constexpr uint64_t kRounds = 5'000'000;

uint64_t BadIcrc(const Device& d) {
  return d.counters().rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)];
}

// WRITEs, SENDs and READs of sizes around the MTU, from odd offsets; each
// arrives exact, and only the bytes its target range holds change.
void Transfers(testing::DevicePair& p, uint32_t mtu) {
  const uint32_t sizes[] = {1023, 1024, 1025, mtu - 1, mtu, mtu + 3, 3 * mtu + 1026, 65536 + 5};
  uint64_t wr = 0, src = 0, dst = 0;
  for (uint32_t len : sizes) {
    SCOPED_TRACE(::testing::Message() << "MTU " << mtu << " len " << len);
    src += 13;
    dst += 7;
    Pattern(p.mem[0], src, len, static_cast<uint8_t>(len));
    std::vector<uint8_t> before = p.mem[1];
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(WrOpcode::kRdmaWrite, len, src, dst, ++wr)), 0);
    std::vector<queue::Completion> done = p.RunUntil(1, kRounds);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    std::memcpy(before.data() + dst, p.mem[0].data() + src, len);
    EXPECT_TRUE(before == p.mem[1]) << "a WRITE changed bytes outside its target";
    const uint64_t rdst = dst + 300000;
    transport::RecvWr r;
    r.wr_id = 1000 + wr;
    r.num_sge = 1;
    r.sg_list[0] = {reinterpret_cast<uint64_t>(p.mem[1].data()) + rdst, len, p.keys[1].lkey};
    ASSERT_EQ(p.dev[1]->PostRecv(p.qpn[1][0], r), 0);
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(WrOpcode::kSend, len, src, 0, ++wr)), 0);
    done = p.RunUntil(1, kRounds);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    std::memcpy(before.data() + rdst, p.mem[0].data() + src, len);
    EXPECT_TRUE(before == p.mem[1]) << "a SEND changed bytes outside its receive buffer";
    // A READ of the WRITE's bytes back into device 0, further on.
    const uint64_t back = src + 600000;
    std::vector<uint8_t> before0 = p.mem[0];
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(WrOpcode::kRdmaRead, len, back, dst, ++wr)), 0);
    done = p.RunUntil(1, kRounds);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    std::memcpy(before0.data() + back, p.mem[1].data() + dst, len);
    EXPECT_TRUE(before0 == p.mem[0]) << "a READ changed bytes outside its destination";
  }
}

class LentRx : public ::testing::TestWithParam<uint32_t> {};

// Long frames are placed from their slots (the garbage past the headers in
// their buffers never read); the rest copied whole first.
TEST_P(LentRx, PayloadsArePlacedFromTheSlotExactly) {
  LendingPair g(GetParam());
  Transfers(g.p, GetParam());
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(g.port[i].lent, 0u);
    EXPECT_GT(g.port[i].placed_from_slot, 0u) << "no payload was read where it was lent";
    EXPECT_LT(g.port[i].placed_from_slot, g.port[i].lent) << "a FIRST or ONLY is judged whole";
    EXPECT_EQ(BadIcrc(*g.p.dev[i]), 0u);
  }
}

// A sender that rewrites every header byte of a slot after handing it over
// (addresses, the BTH's destination QP, opcode and PSN, a RETH's address,
// key and length) changes nothing: the device judged and used the headers
// it copied, and CRCs its copy of them with the payload it placed.
TEST_P(LentRx, SlotHeadersRewrittenAfterHandOverAreNeverRead) {
  LendingPair g(GetParam());
  for (LendingPort& port : g.port) {
    port.hostile = [](uint8_t* slot, uint32_t len, uint64_t nth) {
      const wire::ParsedPacket p = wire::ParsePacket(slot, len);
      ASSERT_TRUE(p.ok());
      for (uint32_t i = 0; i < p.payload_offset; ++i) slot[i] = static_cast<uint8_t>(slot[i] ^ (0x5A + nth + i));
    };
  }
  Transfers(g.p, GetParam());
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(g.port[i].placed_from_slot, 0u);
    EXPECT_EQ(BadIcrc(*g.p.dev[i]), 0u) << "a header was read from the slot";
  }
}

// A payload byte changed in the slot of a frame in the middle of a message:
// the frame fails its ICRC and is dropped, the retransmission rewrites the
// range, and the buffer ends exact.
TEST_P(LentRx, PayloadChangedInTheSlotFailsItsIcrcAndIsResent) {
  LendingPair g(GetParam());
  for (LendingPort& port : g.port) {
    port.hostile = [](uint8_t* slot, uint32_t len, uint64_t nth) {
      if (nth % 5 == 3) slot[len - 40] ^= 0x01;
    };
  }
  Transfers(g.p, GetParam());
  EXPECT_GT(BadIcrc(*g.p.dev[0]) + BadIcrc(*g.p.dev[1]), 0u);
}

// One WRITE of FIRST, two MIDDLEs and a LAST, every frame lent; `hostile`
// flips payload byte kFlipAt (past the copied headers) of every MIDDLE and of
// the first FIRST and LAST seen. Returns the completion's status.
constexpr uint64_t kSrc = 13, kDst = 70001;
constexpr uint32_t kFlipAt = 100;
uint32_t FlipsLen(uint32_t mtu) { return 3 * mtu + 1000; }
queue::WcStatus WriteWithFlips(LendingPair& g, uint32_t mtu) {
  const uint32_t len = FlipsLen(mtu);
  Pattern(g.p.mem[0], kSrc, len, 0x31);
  for (LendingPort& port : g.port) {
    port.hostile = [firsts = 0, lasts = 0](uint8_t* slot, uint32_t n, uint64_t) mutable {
      const wire::ParsedPacket p = wire::ParsePacket(slot, n);
      if (!p.ok()) return;
      if (p.opcode == wire::kRcWriteMiddle || (p.opcode == wire::kRcWriteFirst && firsts++ == 0) ||
          (p.opcode == wire::kRcWriteLast && lasts++ == 0)) {
        slot[p.payload_offset + kFlipAt] ^= 0x40;
      }
    };
  }
  EXPECT_EQ(g.p.dev[0]->PostSend(g.p.qpn[0][0], g.p.Wr(WrOpcode::kRdmaWrite, len, kSrc, kDst, 1)), 0);
  std::vector<queue::Completion> done = g.p.RunUntil(1, kRounds);
  return done.size() == 1 ? done[0].status : queue::WcStatus::kGeneralErr;
}

// DeviceConfig::rx_icrc_trust_lent: a lent frame its QP places (WRITE
// MIDDLE at the expected PSN) is placed unchecked, so a payload byte its
// sender changed lands as changed; the FIRST and LAST, lent but judged
// whole, are still checked: dropped once and resent.
TEST_P(LentRx, TrustedLentFramesArePlacedUnchecked) {
  const uint32_t mtu = GetParam();
  LendingPair g(mtu, /*trust_lent=*/true);
  ASSERT_EQ(WriteWithFlips(g, mtu), queue::WcStatus::kSuccess);
  const Device& rx = *g.p.dev[1];
  EXPECT_GE(rx.counters().rx_icrc_trusted, 2u);
  // The flipped FIRST fails; the MIDDLEs and the flipped LAST after it are
  // not at the expected PSN, so judged whole, and fail too; the resent
  // MIDDLEs are placed unchecked.
  EXPECT_EQ(BadIcrc(rx), 4u);
  std::vector<uint8_t> want(g.p.mem[0].begin() + kSrc, g.p.mem[0].begin() + kSrc + FlipsLen(mtu));
  want[mtu + kFlipAt] ^= 0x40;
  want[2 * mtu + kFlipAt] ^= 0x40;
  EXPECT_TRUE(std::equal(want.begin(), want.end(), g.p.mem[1].begin() + kDst))
      << "the MIDDLEs' bytes are placed as their sender wrote them";
}

// Without the setting the MIDDLEs fail their ICRC every time: the WRITE
// never completes with success.
TEST_P(LentRx, UntrustedLentFramesAreChecked) {
  const uint32_t mtu = GetParam();
  LendingPair g(mtu, /*trust_lent=*/false);
  EXPECT_NE(WriteWithFlips(g, mtu), queue::WcStatus::kSuccess);
  EXPECT_EQ(g.p.dev[1]->counters().rx_icrc_trusted, 0u);
  EXPECT_GT(BadIcrc(*g.p.dev[1]), 2u);
}

// The setting on, a port that does not lend (every wire but the direct
// rings): each frame is checked; a corrupted one is dropped and resent, and
// the WRITE arrives exact.
TEST_P(LentRx, TrustLentChecksFramesThatAreNotLent) {
  const uint32_t mtu = GetParam();
  LendingPair g(mtu, /*trust_lent=*/true, /*lends=*/false);
  const uint32_t len = 3 * mtu + 1026;
  Pattern(g.p.mem[0], kSrc, len, 0x52);
  for (LendingPort& port : g.port) {
    port.hostile = [](uint8_t* frame, uint32_t n, uint64_t nth) {
      const wire::ParsedPacket p = wire::ParsePacket(frame, n);
      if (p.ok() && p.opcode == wire::kRcWriteMiddle && nth <= 6) frame[p.payload_offset + 5] ^= 0x40;
    };
  }
  ASSERT_EQ(g.p.dev[0]->PostSend(g.p.qpn[0][0], g.p.Wr(WrOpcode::kRdmaWrite, len, kSrc, kDst, 1)), 0);
  std::vector<queue::Completion> done = g.p.RunUntil(1, kRounds);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
  EXPECT_EQ(g.p.dev[1]->counters().rx_icrc_trusted, 0u);
  EXPECT_GT(BadIcrc(*g.p.dev[1]), 0u);
  EXPECT_TRUE(std::equal(g.p.mem[0].begin() + kSrc, g.p.mem[0].begin() + kSrc + len, g.p.mem[1].begin() + kDst));
}

INSTANTIATE_TEST_SUITE_P(Mtu, LentRx, ::testing::Values(1024u, 4096u));

}  // namespace
}  // namespace droce::core
