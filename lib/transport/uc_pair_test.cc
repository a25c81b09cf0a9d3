// Unreliable Connection: messages arrive whole or not at all, in order,
// never corrupted; the sender completes each WR once it is on the wire.
#include <cerrno>

#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using queue::Completion;
using queue::WcStatus;
using transport::SendWr;
using transport::WrOpcode;

RcPair MakeUcPair(Impairments imp) {
  return RcPair(imp, 77, 1024, 4 << 20, 0xFFFFF8, 10, 8, 7, 7, transport::QpType::kUc);
}

TEST(UcPair, CleanLinkDeliversEveryMessage) {
  RcPair pair = MakeUcPair({});
  Side& a = pair.a();
  Side& b = pair.b();
  uint64_t id = 0;
  for (uint32_t len : {0u, 1u, 1023u, 1024u, 1025u, 65536u}) {
    for (WrOpcode op : {WrOpcode::kSend, WrOpcode::kRdmaWrite, WrOpcode::kRdmaWriteWithImm}) {
      ++id;
      Fill(a.mem, 0, len, static_cast<uint32_t>(id));
      std::memset(b.mem.data() + (1 << 20), 0, len + 8);
      const bool recv = op != WrOpcode::kRdmaWrite;
      if (recv) {
        ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(id, b, 1 << 20, len + 8)), 0);
      }
      SendWr wr = MakeWr(id, op, a, 0, len, b, 1 << 20);
      wr.imm_data = 0xABCD0000u + static_cast<uint32_t>(id);
      ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
      std::vector<Completion> ca, cb;
      ASSERT_TRUE(pair.Run(&ca, 1, &cb, recv ? 1 : 0)) << "len " << len;
      EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
      if (recv) {
        EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
        EXPECT_EQ(cb[0].byte_len, len);
      }
      // A plain WRITE has no completion at the target: poll the wire empty.
      pair.Run(&ca, 99, &cb, 99, 200'000);
      EXPECT_EQ(std::memcmp(b.mem.data() + (1 << 20), a.mem.data(), len), 0) << "len " << len;
    }
  }
  EXPECT_EQ(b.dev->qp(b.qpn)->counters().acks_sent, 0u);  // UC never acknowledges
}

TEST(UcPair, LossDropsWholeMessagesOnly) {
  RcPair pair = MakeUcPair({0.05, 0, 0.02, 0});
  Side& a = pair.a();
  Side& b = pair.b();
  constexpr uint32_t kLen = 4000;  // four packets at MTU 1024
  constexpr int kMessages = 200;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(i, b, uint64_t(i) * 8192, 8192)), 0);
  }
  for (int i = 0; i < kMessages; ++i) {
    Fill(a.mem, uint64_t(i) * 8192, kLen, i + 1);
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kSend, a, uint64_t(i) * 8192, kLen, b, 0)), 0);
  }
  std::vector<Completion> ca, cb;
  pair.Run(&ca, kMessages, &cb, kMessages, 50'000'000);
  ASSERT_EQ(ca.size(), size_t{kMessages});  // every send completes
  EXPECT_LT(cb.size(), size_t{kMessages});  // some messages were lost
  EXPECT_GT(cb.size(), size_t{kMessages / 2});
  for (const Completion& c : cb) {
    ASSERT_EQ(c.status, WcStatus::kSuccess);
    ASSERT_EQ(c.byte_len, kLen);
    // Receive WQE i may hold any later message; its content must be one whole message.
    const uint8_t* got = b.mem.data() + c.wr_id * 8192;
    bool matches_some = false;
    for (int m = 0; m < kMessages && !matches_some; ++m) {
      matches_some = std::memcmp(got, a.mem.data() + uint64_t(m) * 8192, kLen) == 0;
    }
    EXPECT_TRUE(matches_some) << "receive " << c.wr_id << " holds a torn message";
  }
  EXPECT_GT(b.dev->qp(b.qpn)->counters().uc_messages_dropped, 0u);
}

TEST(UcPair, ReadAndAtomicsAreRejected) {
  RcPair pair = MakeUcPair({});
  EXPECT_EQ(pair.a().dev->PostSend(pair.a().qpn, MakeWr(1, WrOpcode::kRdmaRead, pair.a(), 0, 8, pair.b(), 0)), EINVAL);
  EXPECT_EQ(pair.a().dev->PostSend(pair.a().qpn, MakeWr(1, WrOpcode::kAtomicFetchAndAdd, pair.a(), 0, 8, pair.b(), 0)), EINVAL);
}

}  // namespace
}  // namespace droce::core
