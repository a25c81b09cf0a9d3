// Two RC QPs whose every frame — including payloads gathered and CRCed in
// one pass by the requester and the responder's READ responses — carries
// the reference ICRC (wire/icrc_reference_test.h). The ICRC itself is
// tested in lib/wire/icrc_test.cc.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <tuple>
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
    Connect();
  }

  // Fresh memory (side i filled with i), regions and connected QPs.
  void Connect() {
    for (int i = 0; i < 2; ++i) {
      if (qp_[i] != nullptr) (void)mrs_.Deregister(keys_[i].lkey);  // a test may have done it already
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
      env.srq = i == 1 ? srq1_ : nullptr;
      QpCaps caps;
      caps.max_send_wr = caps.max_recv_wr = 256;
      qp_[i] = std::make_unique<Qp>(0x11 + i, caps, env);
      cq_[i] = queue::CompletionQueue(1024);
      if (selective_repeat_) {
        ASSERT_TRUE(qp_[i]->SetSelectiveRepeat(true).ok());
      }
    }
    for (int i = 0; i < 2; ++i) {
      QpAttr a;
      a.qp_state = QpState::kInit;
      a.qp_access_flags = mem::kRemoteWrite | mem::kRemoteRead;
      ASSERT_TRUE(qp_[i]->Modify(a, kAttrState | kAttrPkeyIndex | kAttrPort | kAttrAccessFlags).ok());
      a.qp_state = QpState::kRtr;
      a.path_mtu = path_mtu_;
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

  // One frame to `to`: through OnUnverifiedPacket when `fused` and the QP
  // verifies such packets while placing them, else checked, then OnPacket.
  void Deliver(bool fused, Qp& to, uint8_t* f, uint32_t len, uint32_t* dropped) {
    const ParsedPacket p = ParsePacket(f, len);
    if (!p.ok()) {
      ++*dropped;
    } else if (fused && Qp::VerifiesWhilePlacing(p)) {
      if (!to.OnUnverifiedPacket(f, p, now_)) ++*dropped;
    } else if (wire::IcrcMatches(f, p)) {
      to.OnPacket(f, p, now_);
    } else {
      ++*dropped;
    }
  }

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
  uint32_t path_mtu_ = 4096;       // for Connect
  bool selective_repeat_ = false;  // for Connect: both QPs
  Srq* srq1_ = nullptr;  // side 1's receives come from it when set (before Connect)
  std::vector<std::unique_ptr<Srq>> srqs_;  // outlive every QP that used them
  uint64_t now_ = 1;
  mem::MrTable mrs_;
  uint32_t pd_ = 0;
  std::vector<uint8_t> mem_[2];
  mem::MrKeys keys_[2];
  queue::CompletionQueue cq_[2]{queue::CompletionQueue(1024), queue::CompletionQueue(1024)};
  std::unique_ptr<Qp> qp_[2];
};

// Each SEND packet placed into a receive WQE fetches the same bytes of the
// next WQE's buffer ahead (Qp::WarmNextRecv): a FIRST, MIDDLE or LAST at
// its offset, an ONLY its own length, so a message warms as much of the
// next buffer as it filled of its own, below kRecvWarmMax, bounded by the
// SGE and the region; nothing when the region is not yet resolved, no WQE
// is posted, or the next WQE names another L_Key.
TEST_P(QpPair, PlacedSendWarmsTheNextReceiveBuffer) {
  Srq& srq = *srqs_.emplace_back(std::make_unique<Srq>(64));
  srq1_ = &srq;
  Connect();
  srq1_ = nullptr;
  const uint64_t base = reinterpret_cast<uint64_t>(mem_[1].data());
  auto post_recv = [&](uint64_t wr_id, uint64_t at, uint32_t len, uint32_t lkey) {
    RecvWr r;
    r.wr_id = wr_id;
    r.num_sge = 1;
    r.sg_list[0] = {base + at, len, lkey};
    ASSERT_TRUE(srq.ring().Push(r));
  };
  auto send = [&](uint32_t size) {
    SendWr wr;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kSendSignaled;
    wr.num_sge = 1;
    wr.sg_list[0] = {reinterpret_cast<uint64_t>(mem_[0].data()), size, keys_[0].lkey};
    ASSERT_EQ(qp_[0]->PostSend(wr), 0);
    uint32_t dropped = 0;
    Shuttle([&](Qp& to, uint8_t* f, uint32_t len) { Deliver(true, to, f, len, &dropped); },
            /*fire_timers=*/false);
    EXPECT_EQ(dropped, 0u);
  };
  const uint64_t& warmed = qp_[1]->counters().recv_warm_bytes;
  post_recv(1, 0, 20000, keys_[1].lkey);
  post_recv(2, 20000, 20000, keys_[1].lkey);
  post_recv(3, 40000, 20000, keys_[1].lkey);
  post_recv(4, 60000, 20000, keys_[1].lkey);
  post_recv(5, 80000, 3000, keys_[1].lkey);
  send(8192);  // FIRST, LAST: the first receive resolves the region, so only the LAST warms receive 2
  EXPECT_EQ(warmed, 4096u);
  send(8192);  // FIRST and LAST: their 8 KiB of receive 3
  EXPECT_EQ(warmed, 4096u + 8192u);
  send(3 * 4096 + 808);  // FIRST, two MIDDLEs, LAST: all of it, 13,096 B of receive 4
  EXPECT_EQ(warmed, 12288u + 13096u);
  send(1000);  // an ONLY: its own length of receive 5
  EXPECT_EQ(warmed, 25384u + 1000u);
  send(9000);  // a FIRST into receive 5, too small; nothing posted after it
  EXPECT_EQ(warmed, 26384u);
  post_recv(6, 100000, 2000, keys_[1].lkey);
  EXPECT_EQ(qp_[1]->WarmNextRecv(0, 8192), 2000u);  // the SGE's length bounds it
  EXPECT_EQ(qp_[1]->WarmNextRecv(0, 100), 100u);
  EXPECT_EQ(qp_[1]->WarmNextRecv(1500, 4096), 500u);
  EXPECT_EQ(qp_[1]->WarmNextRecv(2000, 100), 0u);
  queue::Completion wc[8];
  EXPECT_EQ(cq_[1].Poll(wc, 8), 5u);  // every SEND landed
  srq.ring().Pop();                    // receive 6 taken away
  post_recv(7, 200000, 20000, keys_[1].lkey);
  EXPECT_EQ(qp_[1]->WarmNextRecv(16000, 4096), 384u);  // kRecvWarmMax bounds it
  EXPECT_EQ(qp_[1]->WarmNextRecv(16384, 64), 0u);
  srq.ring().Pop();
  post_recv(8, mem_[1].size() - 100, 4096, keys_[1].lkey);  // the region's end bounds it
  EXPECT_EQ(qp_[1]->WarmNextRecv(0, 4096), 100u);
  EXPECT_EQ(qp_[1]->WarmNextRecv(60, 4096), 40u);
  EXPECT_EQ(qp_[1]->WarmNextRecv(100, 4096), 0u);
  srq.ring().Pop();  // one with another L_Key next
  post_recv(9, 0, 4096, keys_[1].lkey + 1);
  EXPECT_EQ(qp_[1]->WarmNextRecv(0, 4096), 0u);
}

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

// The faults the placement tests below inject into the frames one side
// receives (each test takes those that apply to it).
enum class Fault {
  kNone, kLost, kSwapped, kCorruptPayload, kCorruptIcrc, kCorruptPsn, kRnr, kTooSmall, kDeregistered
};

// What the fused and the two-pass receive paths must agree on: memory,
// completions on both sides, QP states and counters.
struct Outcome {
  std::vector<uint8_t> memory;
  std::vector<std::tuple<uint64_t, int, uint32_t>> completions;  // wr_id, status, byte_len
  QpState state;
  uint64_t rx_packets, duplicates, out_of_sequence, retransmitted, bad_responses, rnr_naks_sent;
  uint32_t dropped;
  bool placed_before_check = false;  // a corrupted packet's payload was seen in place before its drop
  bool operator==(const Outcome& o) const {
    return memory == o.memory && completions == o.completions && state == o.state && rx_packets == o.rx_packets &&
           duplicates == o.duplicates && out_of_sequence == o.out_of_sequence && retransmitted == o.retransmitted &&
           bad_responses == o.bad_responses && rnr_naks_sent == o.rnr_naks_sent && dropped == o.dropped;
  }
};

// The bytes of [offset, offset + n) of a message scattered over `sges`.
std::vector<uint8_t> Gathered(const Sge* sges, uint32_t num_sge, uint32_t offset, uint32_t n) {
  std::vector<uint8_t> out;
  for (uint32_t i = 0; i < num_sge && n > 0; ++i) {
    const Sge& g = sges[i];
    if (offset >= g.length) {
      offset -= g.length;
      continue;
    }
    const uint32_t k = std::min(n, g.length - offset);
    const uint8_t* h = reinterpret_cast<const uint8_t*>(g.addr) + offset;
    out.insert(out.end(), h, h + k);
    n -= k;
    offset = 0;
  }
  return out;
}

// Scatter lists of `num` uneven pieces of `size` bytes in side `side`'s
// memory from `offset`, 1000 bytes apart (a packet's payload crosses them).
uint32_t UnevenSges(Sge* out, uint32_t num, uint32_t size, uint64_t base, uint32_t lkey) {
  uint32_t left = size;
  uint64_t at = base;
  for (uint32_t i = 0; i < num; ++i) {
    const uint32_t n = i + 1 == num ? left : std::min(left, size / num + 1234 * (i + 1));
    out[i] = {at, n, lkey};
    at += n + 1000;
    left -= n;
  }
  return num;
}

// A message stream from one side to the other, moved by the fused or the
// two-pass receive path, with one fault on one of the receiver's frames.
class Placement : public QpPair {
 protected:
  // What a test says of its frames: which ones the victim is counted
  // among, which of those a corruption hits (another one is delivered
  // untouched), and the bytes where a corrupted one's payload would land.
  struct Frames {
    std::function<bool(const ParsedPacket&)> counted;
    std::function<bool(const ParsedPacket&)> corruptible;
    std::function<std::vector<uint8_t>(const ParsedPacket&)> landing;
    std::function<void()> post_recvs;  // kRnr: the receives, posted after the victim was refused
  };

  // Shuttles the frames until both sides are quiet, `fault` on the
  // `victim`-th counted frame to side `receiver` (the first time): lost,
  // held back until after the next counted frame (swapped), a bit flipped
  // in its payload, ICRC or PSN, or delivered and then the receiver's
  // region deregistered or (kRnr) its receives posted.
  void ShuttleWithFault(bool fused, int receiver, Fault fault, int victim, const Frames& frames, Outcome* out) {
    out->dropped = 0;
    int counted = 0;
    bool done = false;
    std::vector<uint8_t> held;
    auto deliver = [&](Qp& to, uint8_t* f, uint32_t len) { Deliver(fused, to, f, len, &out->dropped); };
    Shuttle(
        [&](Qp& to, uint8_t* f, uint32_t len) {
          const ParsedPacket p = ParsePacket(f, len);
          const bool count = &to == qp_[receiver].get() && p.ok() && frames.counted(p);
          if (!done && count && ++counted == victim) {
            switch (fault) {
              case Fault::kNone:
              case Fault::kTooSmall: break;
              case Fault::kLost: done = true; return;
              case Fault::kSwapped: done = true; held.assign(f, f + len); return;
              case Fault::kCorruptPayload:
              case Fault::kCorruptIcrc:
              case Fault::kCorruptPsn: {
                if (!frames.corruptible(p)) break;
                done = true;
                const uint32_t where = fault == Fault::kCorruptPayload ? p.payload_offset + p.payload_len / 2
                                       : fault == Fault::kCorruptIcrc  ? p.icrc_offset
                                                                       : p.bth_offset + 11;
                f[where] ^= 0x10;
                std::vector<uint8_t> payload(f + p.payload_offset, f + p.payload_offset + p.payload_len);
                deliver(to, f, len);
                out->placed_before_check = frames.landing(p) == payload;
                return;
              }
              case Fault::kRnr:
                done = true;
                deliver(to, f, len);  // refused: nothing posted yet
                frames.post_recvs();
                return;
              case Fault::kDeregistered:
                done = true;
                deliver(to, f, len);
                EXPECT_TRUE(mrs_.Deregister(keys_[receiver].lkey).ok());
                return;
            }
          }
          deliver(to, f, len);
          if (!held.empty() && count) {
            std::vector<uint8_t> late;
            late.swap(held);
            deliver(to, late.data(), static_cast<uint32_t>(late.size()));
          }
        },
        /*fire_timers=*/true);
  }

  // The receiver's memory, state and counters, both sides' completions
  // (the receiver's first), the requester's (side 0's) retransmissions.
  void Collect(int receiver, Outcome* out) {
    out->memory = mem_[receiver];
    for (int side : {receiver, 1 - receiver}) {
      queue::Completion wc[8];
      for (uint32_t i = 0, n = cq_[side].Poll(wc, 8); i < n; ++i) {
        out->completions.emplace_back(wc[i].wr_id, static_cast<int>(wc[i].status), wc[i].byte_len);
      }
    }
    const QpCounters& k = qp_[receiver]->counters();
    out->state = qp_[receiver]->state();
    out->rx_packets = k.rx_packets;
    out->duplicates = k.duplicates_received;
    out->out_of_sequence = k.out_of_sequence;
    out->retransmitted = qp_[0]->counters().retransmitted_packets;
    out->bad_responses = k.dropped_bad_response;
    out->rnr_naks_sent = k.rnr_naks_sent;
  }
};

// READ RESPONSE FIRST, MIDDLE and LAST are checked and placed in one pass
// (OnUnverifiedPacket); everything a READ's requester ends with must be what
// the two-pass path (check, then OnPacket) leaves: memory, completions, QP
// state and counters, for READs of 1..6 MTUs scattered over SGEs, at path
// MTU 1024 and 4096, go-back-N and selective repeat, with a response lost,
// two swapped, a FIRST, MIDDLE, LAST or ONLY corrupted (and asked for
// again) and the destination deregistered mid-READ. A READ that succeeds
// leaves exactly the responder's bytes in its SGEs.
class ReadPlacement : public Placement {
 protected:
  // READs of `mtus` MTUs plus `extra` bytes from side 1 into side 0, over
  // `sges` SGEs, with `fault` on the `victim`-th response frame (first time).
  Outcome Run(bool fused, uint32_t mtus, uint32_t extra, uint32_t sges, Fault fault, int victim) {
    Connect();
    std::mt19937 rng(mtus * 131 + extra + sges);
    for (auto& b : mem_[1]) b = static_cast<uint8_t>(rng());
    std::fill(mem_[0].begin(), mem_[0].end(), 0xEE);
    const uint32_t size = mtus * path_mtu_ + extra;
    SendWr rd;
    rd.wr_id = 7;
    rd.opcode = WrOpcode::kRdmaRead;
    rd.flags = kSendSignaled;
    rd.num_sge = UnevenSges(rd.sg_list.data(), sges, size, reinterpret_cast<uint64_t>(mem_[0].data()) + 100,
                            keys_[0].lkey);
    rd.remote_addr = reinterpret_cast<uint64_t>(mem_[1].data()) + 333;
    rd.rkey = keys_[1].rkey;
    EXPECT_EQ(qp_[0]->PostSend(rd), 0);
    Frames frames;
    frames.counted = [](const ParsedPacket& p) { return (p.op().roles & kRoleReadResponse) != 0; };
    frames.corruptible = [](const ParsedPacket& p) { return (p.op().roles & kRoleReadResponse) != 0; };
    // Where the payload would land: the READ's bytes of the victim's MTU over its SGEs.
    frames.landing = [&](const ParsedPacket& p) {
      return Gathered(rd.sg_list.data(), rd.num_sge, static_cast<uint32_t>(victim - 1) * path_mtu_, p.payload_len);
    };
    Outcome out;
    ShuttleWithFault(fused, /*receiver=*/0, fault, victim, frames, &out);
    Collect(/*receiver=*/0, &out);
    if (fault != Fault::kDeregistered) {
      EXPECT_EQ(Gathered(rd.sg_list.data(), rd.num_sge, 0, size),
                std::vector<uint8_t>(mem_[1].begin() + 333, mem_[1].begin() + 333 + size));
    }
    return out;
  }
};

TEST_P(ReadPlacement, OnePassEqualsTwoPasses) {
  struct Case {
    uint32_t mtus, extra, sges;
    Fault fault;
    int victim;
  };
  const Case cases[] = {
      {0, 100, 1, Fault::kNone, 0},          {1, 0, 1, Fault::kNone, 0},
      {1, 1, 1, Fault::kNone, 0},            {2, 0, 1, Fault::kNone, 0},
      {3, 0, 1, Fault::kNone, 0},            {6, 17, 1, Fault::kNone, 0},
      {6, 17, 3, Fault::kNone, 0},           {5, 0, 8, Fault::kNone, 0},
      {6, 0, 1, Fault::kLost, 3},            {6, 0, 3, Fault::kLost, 2},
      {6, 0, 1, Fault::kLost, 6},            {6, 0, 1, Fault::kSwapped, 2},
      {6, 0, 3, Fault::kSwapped, 4},         {6, 0, 1, Fault::kCorruptPayload, 3},
      {6, 5, 3, Fault::kCorruptPayload, 2},  {6, 0, 1, Fault::kCorruptIcrc, 4},
      {6, 0, 1, Fault::kCorruptPsn, 2},      {6, 0, 1, Fault::kDeregistered, 2},
      {6, 0, 3, Fault::kDeregistered, 4},    {6, 0, 1, Fault::kCorruptPayload, 1},
      {6, 17, 3, Fault::kCorruptPayload, 7}, {6, 0, 1, Fault::kCorruptIcrc, 6},
      {2, 0, 1, Fault::kCorruptIcrc, 1},     {2, 0, 3, Fault::kCorruptPayload, 2},
      {0, 1000, 1, Fault::kCorruptPayload, 1}, {0, 100, 1, Fault::kCorruptPayload, 1},
      {0, 1000, 1, Fault::kCorruptPsn, 1},   {6, 0, 1, Fault::kDeregistered, 1},
      {1, 700, 1, Fault::kLost, 2},
  };
  for (const bool sr : {false, true}) {
    for (const uint32_t mtu : {1024u, 4096u}) {
      selective_repeat_ = sr;
      path_mtu_ = mtu;
      for (const Case& c : cases) {
        SCOPED_TRACE(::testing::Message() << (sr ? "selective repeat, " : "go-back-N, ") << "MTU " << mtu << ", "
                                          << c.mtus << " MTUs + " << c.extra << " over " << c.sges
                                          << " SGEs, fault " << static_cast<int>(c.fault) << " on response "
                                          << c.victim);
        const Outcome two = Run(false, c.mtus, c.extra, c.sges, c.fault, c.victim);
        const Outcome one = Run(true, c.mtus, c.extra, c.sges, c.fault, c.victim);
        EXPECT_TRUE(one == two);
        ASSERT_EQ(one.completions.size(), 1u);
        if (c.fault == Fault::kDeregistered) {
          EXPECT_EQ(std::get<1>(one.completions[0]), static_cast<int>(queue::WcStatus::kLocProtErr));
        } else {
          EXPECT_EQ(std::get<1>(one.completions[0]), static_cast<int>(queue::WcStatus::kSuccess));
          EXPECT_EQ(one.state, QpState::kRts);
        }
        // A FIRST, MIDDLE or LAST whose payload or ICRC is corrupted reaches
        // the buffer before its check fails only on the one-pass path of
        // go-back-N (so it is the one under test); a corrupted PSN, an ONLY
        // and selective repeat's responses go the ordinary way.
        const bool only = c.mtus * mtu + c.extra <= mtu;
        EXPECT_EQ(one.placed_before_check,
                  !sr && !only && (c.fault == Fault::kCorruptPayload || c.fault == Fault::kCorruptIcrc));
        EXPECT_FALSE(two.placed_before_check);
        if (c.fault == Fault::kCorruptPayload || c.fault == Fault::kCorruptIcrc || c.fault == Fault::kCorruptPsn) {
          EXPECT_EQ(one.dropped, 1u);  // counted as a bad ICRC, asked for again
        }
      }
    }
  }
}

// SEND LAST payloads are checked and placed in one pass, as MIDDLE ones
// (OnUnverifiedPacket); both ends must end as the two-pass path leaves
// them: the receiver's memory, both sides' completions, states and
// counters, for two SENDs of one size into receive WQEs of 1 or 3 SGEs
// (a QP's own receive queue or a shared one), with a request lost, two
// swapped, a FIRST/ONLY/LAST corrupted (payload, ICRC, PSN), no receive
// posted (RNR), a receive too small, and the receive buffer deregistered
// mid-message.
class SendPlacement : public Placement {
 protected:
  // Two SENDs of `size` bytes from side 0 to side 1, `fault` on the
  // `victim`-th request frame side 1 gets (the first time).
  Outcome Run(bool fused, uint32_t size, uint32_t sges, bool shared, Fault fault, int victim) {
    Srq& srq = *srqs_.emplace_back(std::make_unique<Srq>(64));
    srq1_ = shared ? &srq : nullptr;
    Connect();
    srq1_ = nullptr;
    std::mt19937 rng(size * 7 + sges);
    for (auto& b : mem_[0]) b = static_cast<uint8_t>(rng());
    std::fill(mem_[1].begin(), mem_[1].end(), 0xEE);
    RecvWr recvs[2];
    auto post_recv = [&](const RecvWr& r) {
      if (shared) {
        EXPECT_TRUE(srq.ring().Push(r));
      } else {
        EXPECT_EQ(qp_[1]->PostRecv(r), 0);
      }
    };
    for (uint32_t m = 0; m < 2; ++m) {
      const uint32_t room = fault == Fault::kTooSmall && m == 0 ? size - 100 : size;
      recvs[m].wr_id = 100 + m;
      recvs[m].num_sge = UnevenSges(recvs[m].sg_list.data(), sges, room,
                                    reinterpret_cast<uint64_t>(mem_[1].data()) + 100 + m * 300000, keys_[1].lkey);
      if (fault != Fault::kRnr) post_recv(recvs[m]);
      SendWr wr;
      wr.wr_id = 7 + m;
      wr.opcode = WrOpcode::kSend;
      wr.flags = kSendSignaled;
      wr.num_sge = 1;
      wr.sg_list[0] = {reinterpret_cast<uint64_t>(mem_[0].data()) + 333 + m * 300000, size, keys_[0].lkey};
      EXPECT_EQ(qp_[0]->PostSend(wr), 0);
    }
    Frames frames;
    frames.counted = [](const ParsedPacket& p) { return (p.op().roles & kRoleRequest) != 0; };
    frames.corruptible = [](const ParsedPacket& p) {
      return p.opcode == kRcSendFirst || p.opcode == kRcSendLast || p.opcode == kRcSendOnly;
    };
    // A FIRST/ONLY starts its message's receive, a LAST ends it.
    frames.landing = [&](const ParsedPacket& p) {
      const RecvWr& r = recvs[(victim - 1) / ((size + 4095) / 4096)];
      const uint32_t offset = p.opcode == kRcSendLast ? size - p.payload_len : 0;
      return Gathered(r.sg_list.data(), r.num_sge, offset, p.payload_len);
    };
    frames.post_recvs = [&] {
      for (const RecvWr& r : recvs) post_recv(r);
    };
    Outcome out;
    ShuttleWithFault(fused, /*receiver=*/1, fault, victim, frames, &out);
    Collect(/*receiver=*/1, &out);
    return out;
  }
};

TEST_P(SendPlacement, OnePassEqualsTwoPasses) {
  struct Case {
    uint32_t size, sges;
    Fault fault;
    int victim;
    bool placed;  // the corrupted packet reaches the buffer before its check (one-pass path)
  };
  // 8 KiB is a UCX eager fragment (FIRST + LAST at MTU 4096). A SEND ONLY
  // of 100 B is checked first (Qp::kFusedSendOnlyBytes); 1000 B fits the
  // first of 3 SGEs, a FIRST of 8 KiB's 3 SGEs does not. The first SEND of
  // a QP takes the ordinary path: no receive's region is known yet.
  const Case cases[] = {
      {8192, 1, Fault::kNone, 0, false},           {4097, 1, Fault::kNone, 0, false},
      {3 * 4096 + 17, 1, Fault::kNone, 0, false},  {6 * 4096, 1, Fault::kNone, 0, false},
      {3 * 4096 + 17, 3, Fault::kNone, 0, false},  {8192, 3, Fault::kNone, 0, false},
      {100, 1, Fault::kNone, 0, false},            {1000, 3, Fault::kNone, 0, false},
      {4096, 1, Fault::kNone, 0, false},           {8192, 1, Fault::kLost, 1, false},
      {8192, 1, Fault::kLost, 2, false},           {8192, 1, Fault::kLost, 3, false},
      {3 * 4096 + 17, 1, Fault::kLost, 4, false},  {1000, 1, Fault::kLost, 1, false},
      {8192, 1, Fault::kSwapped, 1, false},        {8192, 1, Fault::kSwapped, 2, false},
      {3 * 4096 + 17, 3, Fault::kSwapped, 3, false}, {1000, 1, Fault::kSwapped, 1, false},
      {8192, 1, Fault::kCorruptPayload, 3, true},  {8192, 1, Fault::kCorruptPayload, 2, true},
      {8192, 3, Fault::kCorruptPayload, 3, false}, {8192, 1, Fault::kCorruptPayload, 1, false}, {3 * 4096 + 17, 1, Fault::kCorruptPayload, 4, true},
      {1000, 3, Fault::kCorruptPayload, 2, true},  {100, 1, Fault::kCorruptPayload, 2, false},
      {4097, 1, Fault::kCorruptIcrc, 2, true},     {4096, 1, Fault::kCorruptIcrc, 2, true},
      {8192, 1, Fault::kCorruptPsn, 1, false},     {8192, 1, Fault::kCorruptPsn, 2, false},
      {8192, 1, Fault::kRnr, 1, false},            {1000, 1, Fault::kRnr, 1, false},
      {8192, 1, Fault::kTooSmall, 0, false},       {8192, 3, Fault::kTooSmall, 0, false},
      {1000, 1, Fault::kTooSmall, 0, false},       {8192, 1, Fault::kDeregistered, 1, false},
      {8192, 1, Fault::kDeregistered, 2, false},   {3 * 4096 + 17, 1, Fault::kDeregistered, 2, false},
      {1000, 1, Fault::kDeregistered, 1, false},
  };
  for (bool shared : {false, true}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << c.size << " B into " << c.sges << " SGEs" << (shared ? " (SRQ)" : "")
                                        << ", fault " << static_cast<int>(c.fault) << " on request " << c.victim);
      const Outcome two = Run(false, c.size, c.sges, shared, c.fault, c.victim);
      const Outcome one = Run(true, c.size, c.sges, shared, c.fault, c.victim);
      EXPECT_TRUE(one == two);
      if (c.fault == Fault::kTooSmall || c.fault == Fault::kDeregistered) {
        EXPECT_EQ(one.state, QpState::kErr);
      } else {
        EXPECT_EQ(one.state, QpState::kRts);
        ASSERT_EQ(one.completions.size(), 4u);
        for (const auto& [wr_id, status, byte_len] : one.completions) {
          EXPECT_EQ(status, static_cast<int>(queue::WcStatus::kSuccess)) << wr_id;
        }
        EXPECT_EQ(std::get<2>(one.completions[0]), c.size);
      }
      if (c.fault == Fault::kRnr) {
        EXPECT_GE(one.rnr_naks_sent, 1u);
      }
      // A packet whose payload or ICRC is corrupted reaches the buffer before
      // its check fails only on the one-pass path (so it is the one under
      // test); a corrupted PSN sends it the ordinary way.
      EXPECT_EQ(one.placed_before_check, c.placed);
      EXPECT_FALSE(two.placed_before_check);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ip, SendPlacement, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

INSTANTIATE_TEST_SUITE_P(Ip, ReadPlacement, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

INSTANTIATE_TEST_SUITE_P(Ip, QpPair, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

// The packets the poll loop hands over unverified are exactly the ones the
// QP places while it checks the ICRC (OnUnverifiedPacket): every opcode of
// the 8-bit space, with SEND ONLY's length threshold on both sides.
TEST(VerifiesWhilePlacing, NamesExactlyTheFusedOpcodes) {
  for (uint32_t op = 0; op < 256; ++op) {
    for (const uint32_t len : {0u, 64u, Qp::kFusedSendOnlyBytes - 1, Qp::kFusedSendOnlyBytes, 4096u}) {
      ParsedPacket p{};
      p.opcode = static_cast<uint8_t>(op);
      p.payload_len = len;
      const bool want = op == kRcWriteMiddle || op == kRcSendFirst || op == kRcSendMiddle || op == kRcSendLast ||
                        op == kRcReadResponseFirst || op == kRcReadResponseMiddle || op == kRcReadResponseLast ||
                        (op == kRcSendOnly && len >= Qp::kFusedSendOnlyBytes);
      EXPECT_EQ(Qp::VerifiesWhilePlacing(p), want) << "opcode " << op << " length " << len;
    }
  }
}

}  // namespace
}  // namespace droce::transport
