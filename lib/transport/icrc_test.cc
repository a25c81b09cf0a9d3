// Two RC QPs whose every frame — including payloads gathered and CRCed in
// one pass by the requester and the responder's READ responses — carries
// the reference ICRC (wire/icrc_reference_test.h). The ICRC itself is
// tested in lib/wire/icrc_test.cc.
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "mem/mr_table.h"
#include "queue/completion.h"
#include "transport/qp.h"
#include "wire/fields.h"
#include "wire/icrc_reference_test.h"

namespace droce::transport {
namespace {

using namespace droce::wire;

using wire::testing::SampleRoute;

// Two QPs joined by hand; every frame must pass the reference parser.
class QpPair : public ::testing::TestWithParam<bool> {
 protected:
  static absl::Status Route(void* ctx, const AddressVector&, uint32_t, uint32_t,
                            wire::Route* out) {
    *out = MakeRoute(SampleRoute(*static_cast<bool*>(ctx), false));
    return absl::OkStatus();
  }

  void SetUp() override {
    ipv6_ = GetParam();
    pd_ = mrs_.AllocPd();
    for (int i = 0; i < 2; ++i) {
      mem_[i].assign(1 << 20, static_cast<uint8_t>(i));
      keys_[i] = *mrs_.Register(pd_, mem_[i].data(), mem_[i].size(),
                                reinterpret_cast<uint64_t>(mem_[i].data()),
                                mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
      QpEnv env;
      env.mrs = &mrs_;
      env.send_cq = env.recv_cq = &cq_[i];
      env.pd = pd_;
      env.make_route = &QpPair::Route;
      env.route_ctx = &ipv6_;
      QpCaps caps;
      caps.max_send_wr = caps.max_recv_wr = 256;
      qp_[i] = std::make_unique<Qp>(0x11 + i, caps, env);
    }
    for (int i = 0; i < 2; ++i) {
      QpAttr a;
      a.qp_state = QpState::kInit;
      a.qp_access_flags = mem::kRemoteWrite | mem::kRemoteRead;
      ASSERT_TRUE(qp_[i]->Modify(a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags).ok());
      a.qp_state = QpState::kRtr;
      a.path_mtu = 4096;
      a.dest_qp_num = 0x12 - i;
      a.max_dest_rd_atomic = 16;
      ASSERT_TRUE(qp_[i]->Modify(a, kAttrState | kAttrAv | kAttrPathMtu | kAttrDestQpn |
                                        kAttrRqPsn | kAttrMaxDestRdAtomic | kAttrMinRnrTimer)
                      .ok());
      a.qp_state = QpState::kRts;
      a.max_rd_atomic = 16;
      ASSERT_TRUE(qp_[i]->Modify(a, kAttrState | kAttrSqPsn | kAttrTimeout | kAttrRetryCnt |
                                        kAttrRnrRetry | kAttrMaxQpRdAtomic)
                      .ok());
    }
  }

  // Moves frames both ways, handing each to deliver(receiver, frame, len),
  // until both QPs are quiet; with `fire_timers`, quiet QPs with timers left
  // get one late OnTimer (retransmission) before it stops.
  template <typename Deliver>
  void Shuttle(Deliver&& deliver, bool fire_timers) {
    std::vector<uint8_t> storage(16 * pktio::kMaxFrameBytes);
    pktio::Frame frames[16];
    for (int round = 0; round < 100000; ++round) {
      uint32_t moved = 0;
      for (int i = 0; i < 2; ++i) {
        for (int k = 0; k < 16; ++k) {
          frames[k] = {storage.data() + k * pktio::kMaxFrameBytes, 0, pktio::kMaxFrameBytes, nullptr};
        }
        const uint32_t n = qp_[i]->Transmit(frames, 16, now_);
        for (uint32_t k = 0; k < n; ++k) deliver(*qp_[1 - i], frames[k].data, frames[k].len);
        moved += n;
      }
      now_ += 1000;
      if (moved > 0) continue;
      bool timers = false;
      for (int i = 0; i < 2; ++i) timers |= qp_[i]->HasWork();
      if (!fire_timers || !timers) return;
      now_ += 1'000'000'000;
      for (int i = 0; i < 2; ++i) qp_[i]->OnTimer(now_);
    }
    FAIL() << "did not settle";
  }

  // `corrupt` may change a frame (and return true) before delivery: such
  // frames go through OnUnverifiedPacket when the QP verifies them while
  // placing, else they must fail the reference check.
  template <typename Corrupt>
  void RunWith(Corrupt&& corrupt) {
    Shuttle(
        [&](Qp& to, uint8_t* frame, uint32_t len) {
          ASSERT_TRUE(ParseAndVerify(frame, len).ok());
          ASSERT_TRUE(wire::testing::ReferenceIcrcMatches(frame, ParsePacket(frame, len)));
          const bool corrupted = corrupt(frame, len);
          const ParsedPacket p = ParsePacket(frame, len);
          if (!p.ok()) return;
          if (Qp::VerifiesWhilePlacing(p)) {
            const uint32_t epsn = to.expected_psn();
            const bool accepted = to.OnUnverifiedPacket(frame, p, now_);
            EXPECT_EQ(accepted, !corrupted);
            if (!accepted) {
              ++dropped_;
              EXPECT_EQ(to.expected_psn(), epsn);
            }
          } else if (wire::IcrcMatches(frame, p)) {
            to.OnPacket(frame, p, now_);
          } else {
            ++dropped_;
          }
        },
        /*fire_timers=*/true);
  }
  uint32_t dropped_ = 0;

  // Every frame must pass the reference check and goes the ordinary way.
  void Run() {
    Shuttle(
        [&](Qp& to, uint8_t* frame, uint32_t len) {
          const ParsedPacket p = ParseAndVerify(frame, len);
          ASSERT_TRUE(p.ok()) << ParseStatusName(p.status);
          ASSERT_TRUE(wire::testing::ReferenceIcrcMatches(frame, p));
          to.OnPacket(frame, p, now_);
        },
        /*fire_timers=*/false);
  }

  bool ipv6_ = false;
  uint64_t now_ = 1;
  mem::MrTable mrs_;
  uint32_t pd_ = 0;
  std::vector<uint8_t> mem_[2];
  mem::MrKeys keys_[2];
  queue::CompletionQueue cq_[2]{queue::CompletionQueue(1024), queue::CompletionQueue(1024)};
  std::unique_ptr<Qp> qp_[2];
};

TEST_P(QpPair, FusedGatherFramesPassTheReferenceIcrc) {
  std::mt19937 rng(9);
  for (auto& b : mem_[0]) b = static_cast<uint8_t>(rng());
  uint64_t remote = 0;
  uint32_t posted = 0;
  // Sizes around the fused-gather threshold and MTU; several SGEs.
  for (uint32_t size : {1u, 3u, 511u, 512u, 513u, 4095u, 4096u, 4097u, 65536u, 100003u}) {
    SendWr wr;
    wr.wr_id = posted++;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kSendSignaled;
    const uint32_t half = size / 2;
    wr.num_sge = half > 0 ? 2 : 1;
    uint64_t base = reinterpret_cast<uint64_t>(mem_[0].data()) + (rng() % 1000);
    wr.sg_list[0] = {base, half > 0 ? half : size, keys_[0].lkey};
    if (half > 0) wr.sg_list[1] = {base + 200000, size - half, keys_[0].lkey};
    wr.remote_addr = reinterpret_cast<uint64_t>(mem_[1].data()) + remote;
    wr.rkey = keys_[1].rkey;
    ASSERT_EQ(qp_[0]->PostSend(wr), 0);
    Run();
    ASSERT_EQ(std::memcmp(mem_[1].data() + remote, reinterpret_cast<uint8_t*>(base), wr.sg_list[0].length), 0);
    if (half > 0) {
      ASSERT_EQ(std::memcmp(mem_[1].data() + remote + half, reinterpret_cast<uint8_t*>(base + 200000),
                            size - half),
                0);
    }
    remote += size + 5;
  }
  // READ back (the responder's fused READ responses) into another place.
  SendWr rd;
  rd.wr_id = posted++;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.flags = kSendSignaled;
  rd.num_sge = 1;
  rd.sg_list[0] = {reinterpret_cast<uint64_t>(mem_[0].data()) + 600000, 70001, keys_[0].lkey};
  rd.remote_addr = reinterpret_cast<uint64_t>(mem_[1].data());
  rd.rkey = keys_[1].rkey;
  ASSERT_EQ(qp_[0]->PostSend(rd), 0);
  Run();
  EXPECT_EQ(std::memcmp(mem_[0].data() + 600000, mem_[1].data(), 70001), 0);
  queue::Completion wc[64];
  const uint32_t n = cq_[0].Poll(wc, 64);
  ASSERT_EQ(n, posted);
  for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(wc[i].status, queue::WcStatus::kSuccess);
}

// A WRITE MIDDLE whose payload or headers were corrupted on the wire is
// dropped after it was placed: nothing in the QP changes, no byte outside the
// WRITE's own target is touched, and the retransmission leaves the right data.
TEST_P(QpPair, CorruptedMiddleIsDroppedAndRewritten) {
  std::mt19937 rng(21);
  for (auto& b : mem_[0]) b = static_cast<uint8_t>(rng());
  constexpr uint32_t kSize = 6 * 4096;
  std::fill(mem_[1].begin(), mem_[1].end(), 0xEE);
  const uint32_t target = 8192;
  for (int trial = 0; trial < 40; ++trial) {
    SendWr wr;
    wr.wr_id = static_cast<uint64_t>(trial);
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kSendSignaled;
    wr.num_sge = 1;
    const uint64_t src = reinterpret_cast<uint64_t>(mem_[0].data()) + 4096 * trial;
    wr.sg_list[0] = {src, kSize, keys_[0].lkey};
    wr.remote_addr = reinterpret_cast<uint64_t>(mem_[1].data()) + target;
    wr.rkey = keys_[1].rkey;
    ASSERT_EQ(qp_[0]->PostSend(wr), 0);
    int middles = 0;
    const int victim = 1 + trial % 4;  // which MIDDLE (1..4) is hit the first time round
    bool hit = false;
    RunWith([&](uint8_t* f, uint32_t len) {
      const ParsedPacket p = ParsePacket(f, len);
      if (hit || !p.ok() || p.opcode != kRcWriteMiddle || ++middles != victim) return false;
      hit = true;
      // Flip a bit: in the payload, the PSN, the dest QP or the ICRC itself.
      const uint32_t where[] = {p.payload_offset + static_cast<uint32_t>(rng() % p.payload_len),
                                p.bth_offset + 11u, p.bth_offset + 7u, p.icrc_offset};
      f[where[trial % 4]] ^= static_cast<uint8_t>(1u << (rng() % 8));
      return true;
    });
    ASSERT_TRUE(hit);
    ASSERT_EQ(std::memcmp(mem_[1].data() + target, reinterpret_cast<uint8_t*>(src), kSize), 0) << trial;
    for (uint32_t i = 0; i < target; ++i) ASSERT_EQ(mem_[1][i], 0xEE) << "before the target";
    for (size_t i = target + kSize; i < mem_[1].size(); ++i) ASSERT_EQ(mem_[1][i], 0xEE) << "after";
    queue::Completion wc;
    ASSERT_EQ(cq_[0].Poll(&wc, 1), 1u);
    EXPECT_EQ(wc.status, queue::WcStatus::kSuccess);
    EXPECT_EQ(wc.wr_id, static_cast<uint64_t>(trial));
  }
  EXPECT_GE(dropped_, 40u);
  EXPECT_EQ(qp_[0]->state(), QpState::kRts);
  EXPECT_EQ(qp_[1]->state(), QpState::kRts);
}

INSTANTIATE_TEST_SUITE_P(Ip, QpPair, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

}  // namespace
}  // namespace droce::transport
