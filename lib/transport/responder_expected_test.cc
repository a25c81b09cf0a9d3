// The responder's fast path (Qp::PlaceExpected): two devices in the same
// state receive the same request streams; one places the expected WRITEs
// and SENDs in one step, the other forgets the regions the step relies on
// before every frame and so takes the full IBTA chain for each. Streams of
// every request opcode with WRITE and SEND messages of one to several
// packets, R_Key changes, bad keys and bounds, zero lengths, duplicate and
// future PSNs, broken opcode sequences and lengths, deregistration and
// registration between packets (mid-message too), access-flag changes,
// receive WQEs missing (RNR), scattered over two SGEs, too small, with a
// bad L_Key or in a region without local write, from the QP's receive
// queue or a shared one, and MIDDLE packets with a bad ICRC (placed while
// checked, then resent) must be judged alike: the same ACK/NAK frames byte
// for byte, memory, completions, PSNs, QP state and counters.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using namespace droce::wire;

constexpr Mac kPeerMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kMtu = 256;
constexpr uint32_t kRegion = 8192;
constexpr int kRegions = 3;  // 0: full access (re-registered now and then), 1: remote read only, 2: full access
constexpr uint64_t kIova[kRegions] = {0x100000, 0x200000, 0x300000};
constexpr uint32_t kAllRemote = mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic;
constexpr uint32_t kAccess[kRegions] = {kAllRemote, mem::kRemoteRead, kAllRemote};
constexpr uint32_t kRecvAt = 4096;  // receives land in region 2 from here
constexpr uint32_t kBadKey = 200u << 8 | 0x5A;  // a slot neither end uses

struct End {
  sim::ScriptedIo io;
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> mem[kRegions];
  mem::MrKeys keys[kRegions]{};
  uint32_t pd = 0, cq = 0, qpn = 0;
  int32_t srq = -1;
  // The region-0 L_Key of each receive WQE posted and not yet completed (0:
  // another region): a re-registration must not give region 0 a key one of
  // them carries (keys are random per device, so a stale key that means
  // memory again on one end only would judge the ends apart).
  std::deque<uint32_t> recv_keys;
  transport::Qp* qp() { return dev->qp(qpn); }
};

class ResponderExpected : public ::testing::Test {
 protected:
  explicit ResponderExpected(bool shared_receive_queue = false) : use_srq_(shared_receive_queue) {}

  void SetUp() override {
    for (End* e : {&fast_, &reference_}) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, 0x01};
      cfg.ipv4 = 0x0A000001;
      cfg.qpn_base = 0x1000;  // both ends' QPs have one number
      e->dev = std::make_unique<Device>(cfg, &e->io);
      e->pd = e->dev->AllocPd();
      e->cq = *e->dev->CreateCq(4096);
      for (int r = 0; r < kRegions; ++r) {
        e->mem[r].assign(kRegion, 0);
        for (uint32_t k = 0; k < kRegion; ++k) e->mem[r][k] = static_cast<uint8_t>(k * 7 + r);
        e->keys[r] = *e->dev->RegMr(e->pd, e->mem[r].data(), kRegion, kIova[r], kAccess[r]);
      }
      QpInitAttr init;
      init.pd = e->pd;
      init.send_cq = init.recv_cq = e->cq;
      init.caps.max_recv_wr = 256;
      if (use_srq_) init.srq = e->srq = static_cast<int32_t>(*e->dev->CreateSrq(256));
      e->qpn = *e->dev->CreateQp(init);
    }
    Connect();
  }

  void Connect() {
    for (End* e : {&fast_, &reference_}) {
      transport::QpAttr reset;
      reset.qp_state = transport::QpState::kReset;
      ASSERT_TRUE(e->dev->ModifyQp(e->qpn, reset, transport::kAttrState).ok());
      ConnectParams c;
      c.peer_gid = Ipv4MappedGid(0x0A000002);
      c.peer_mac = kPeerMac;
      c.peer_qpn = kPeerQpn;
      c.mtu = kMtu;
      c.rq_psn = 0xFFFFF0;  // the PSN wraps within the first stream
      c.max_dest_rd_atomic = 4;
      ASSERT_TRUE(ConnectQp(*e->dev, e->qpn, c).ok());
    }
    for (int i = 0; i < 8; ++i) PostRecv();
  }

  // A receive WQE: mostly one SGE of 1,024 bytes in region 2; now and then
  // two SGEs, one in region 0 (re-registered now and then: its key goes
  // stale), a bad L_Key, or region 1 (no local write).
  void PostRecv(uint32_t kind = 0) {
    ++recv_id_;
    for (End* e : {&fast_, &reference_}) {
      transport::RecvWr r;
      r.wr_id = recv_id_;
      r.num_sge = 1;
      r.sg_list[0] = {kIova[2] + kRecvAt, 1024, e->keys[2].lkey};
      if (kind == 1) {
        r.num_sge = 2;
        r.sg_list[0].length = 300;
        r.sg_list[1] = {kIova[2] + kRecvAt + 512, 2048, e->keys[2].lkey};
      } else if (kind == 2) {
        r.sg_list[0] = {kIova[0] + kRecvAt, 2048, e->keys[0].lkey};
      } else if (kind == 3) {
        r.sg_list[0].lkey = kBadKey;
      } else if (kind == 4) {
        r.sg_list[0] = {kIova[1] + kRecvAt, 1024, e->keys[1].lkey};
      }
      // A full receive queue refuses it on both.
      const int refused = e->srq >= 0 ? e->dev->PostSrqRecv(static_cast<uint32_t>(e->srq), r)
                                      : e->dev->PostRecv(e->qpn, r);
      if (refused == 0) e->recv_keys.push_back(kind == 2 ? r.sg_list[0].lkey : 0);
    }
  }

  // Deregisters region 0 and registers it again (a new key) on both ends.
  void Reregister() {
    for (End* e : {&fast_, &reference_}) {
      for (int tries = 0;; ++tries) {
        ASSERT_LT(tries, 100);
        ASSERT_TRUE(e->dev->DeregMr(e->keys[0].lkey).ok());
        e->keys[0] = *e->dev->RegMr(e->pd, e->mem[0].data(), kRegion, kIova[0], kAccess[0]);
        if (std::find(e->recv_keys.begin(), e->recv_keys.end(), e->keys[0].lkey) == e->recv_keys.end()) break;
      }
    }
  }

  void SetAccess(uint32_t access) {
    for (End* e : {&fast_, &reference_}) {
      transport::QpAttr a;
      a.qp_access_flags = access;
      ASSERT_TRUE(e->dev->ModifyQp(e->qpn, a, transport::kAttrAccessFlags).ok());
    }
  }

  // The request `f` with each end's R_Key for `region` (-1: a key neither
  // has). `bad_icrc`: its ICRC broken, and not compared (a payload placed
  // while checked may be in memory until the packet is resent).
  void Feed(PacketFields f, int region, const std::string& what, bool bad_icrc = false) {
    now_ += 1000;
    for (End* e : {&fast_, &reference_}) {
      const uint32_t rkey = region < 0 ? kBadKey : e->keys[region].rkey;
      f.reth_rkey = f.atomic_rkey = f.ieth_rkey = rkey;
      std::vector<uint8_t> b(pktio::kMaxFrameBytes);
      b.resize(*SerializeFields(f, b.data(), static_cast<uint32_t>(b.size())));
      if (bad_icrc) b.back() ^= 0x40;
      if (e == &reference_) e->qp()->ForgetExpectedRegion();
      if (e == &fast_) {
        const ParsedPacket p = ParsePacket(b.data(), static_cast<uint32_t>(b.size()));
        log_.push_back(what + ": " + DescribePacket(b.data(), p) + " held=" + std::to_string(e->qp()->posted_receives()));
        if (log_.size() > 12) log_.erase(log_.begin());
      }
      e->io.rx.push_back(std::move(b));
      e->dev->Poll(now_);
    }
    if (!bad_icrc) Compare(what);
  }

  void Compare(const std::string& what) {
    if (fast_.io.sent != reference_.io.sent) {
      for (auto& l : log_) std::printf("%s\n", l.c_str());
      for (End* e : {&fast_, &reference_}) {
        for (auto& f : e->io.sent) {
          const ParsedPacket p = ParsePacket(f.data(), static_cast<uint32_t>(f.size()));
          std::printf("%s: %s\n", e == &fast_ ? "fast" : "ref", DescribePacket(f.data(), p).c_str());
        }
      }
    }
    ASSERT_EQ(fast_.io.sent, reference_.io.sent) << what;
    fast_.io.sent.clear();
    reference_.io.sent.clear();
    for (int r = 0; r < kRegions; ++r) ASSERT_EQ(fast_.mem[r], reference_.mem[r]) << what << " region " << r;
    ASSERT_EQ(fast_.qp()->expected_psn(), reference_.qp()->expected_psn()) << what;
    ASSERT_EQ(fast_.qp()->state(), reference_.qp()->state()) << what;
    transport::QpCounters a = fast_.qp()->counters(), b = reference_.qp()->counters();
    EXPECT_EQ(b.expected_requests, 0u);
    EXPECT_EQ(b.recv_warm_bytes, 0u);  // the fast path's alone, like expected_requests
    a.expected_requests = b.expected_requests = 0;
    a.recv_warm_bytes = b.recv_warm_bytes = 0;
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what;
    queue::Completion wa[64], wb[64];
    const int na = fast_.dev->PollCq(fast_.cq, wa, 64), nb = reference_.dev->PollCq(reference_.cq, wb, 64);
    ASSERT_EQ(na, nb) << what;
    for (End* e : {&fast_, &reference_}) {
      for (int i = 0; i < na && !e->recv_keys.empty(); ++i) e->recv_keys.pop_front();  // one WQE each
    }
    for (int i = 0; i < na; ++i) {
      EXPECT_EQ(wa[i].wr_id, wb[i].wr_id) << what;
      EXPECT_EQ(wa[i].status, wb[i].status) << what;
      EXPECT_EQ(wa[i].opcode, wb[i].opcode) << what;
      EXPECT_EQ(wa[i].byte_len, wb[i].byte_len) << what;
      EXPECT_EQ(wa[i].flags, wb[i].flags) << what;
      EXPECT_EQ(wa[i].imm_or_inv, wb[i].imm_or_inv) << what;
      EXPECT_EQ(wa[i].qp_num, wb[i].qp_num) << what;
    }
  }

  void Streams(uint64_t seed);  // random request streams, fed to both

  PacketFields Request(uint8_t opcode, uint32_t psn) {
    PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = fast_.dev->config().mac;
    f.route.src_ip = Ipv4MappedGid(0x0A000002);
    f.route.dst_ip = Ipv4MappedGid(0x0A000001);
    f.route.ipv4_id = static_cast<uint16_t>(now_ / 1000);
    f.bth.opcode = opcode;
    f.bth.dest_qp = fast_.qpn;
    f.bth.psn = psn;
    f.imm_data = 0x01020304;
    return f;
  }

  const bool use_srq_;
  std::vector<std::string> log_;
  End fast_, reference_;
  uint64_t now_ = 1'000'000;
  uint64_t recv_id_ = 0;
};

class ResponderExpectedSrq : public ResponderExpected {
 protected:
  ResponderExpectedSrq() : ResponderExpected(/*shared_receive_queue=*/true) {}
};

TEST_F(ResponderExpected, StreamsAreJudgedAsTheFullChainJudgesThem) { Streams(20261129); }
TEST_F(ResponderExpectedSrq, StreamsAreJudgedAsTheFullChainJudgesThem) { Streams(20261130); }

void ResponderExpected::Streams(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  static constexpr uint8_t kOthers[] = {
      kRcSendFirst,   kRcSendMiddle,  kRcSendLast,   kRcSendLastImm, kRcSendOnly,    kRcSendOnlyImm,
      kRcSendLastInv, kRcSendOnlyInv, kRcWriteFirst, kRcWriteMiddle, kRcWriteLast,   kRcWriteLastImm,
      kRcWriteOnly,   kRcWriteOnlyImm, kRcReadRequest, kRcCompareSwap, kRcFetchAdd};
  // The WRITE in progress as the stream's author sees it, and the SEND (its
  // MIDDLE packets still to come).
  uint32_t left = 0;
  int write_region = 0;
  uint32_t send_middles = 0;
  bool sending = false;
  std::vector<uint8_t> payload;
  for (int step = 0; step < 60000; ++step) {
    const std::string what = "step " + std::to_string(step);
    if (fast_.qp()->state() == transport::QpState::kErr) {
      Connect();
      left = 0;
      sending = false;
    }
    const uint32_t roll = pick(1000);
    if (roll < 8) {
      Reregister();  // between packets, sometimes inside a WRITE
      continue;
    }
    if (roll < 12) {
      SetAccess(pick(4) == 0 ? uint32_t{mem::kRemoteRead} : kAllRemote);
      continue;
    }
    if (roll < 60) {
      const uint32_t k = pick(100);
      PostRecv(k < 75 ? 0 : k < 85 ? 1 : k < 93 ? 2 : k < 97 ? 3 : 4);
      continue;
    }
    const uint32_t epsn = fast_.qp()->expected_psn();
    const uint32_t psn_roll = pick(100);
    const uint32_t psn = psn_roll < 90 ? epsn : PsnAdd(epsn, psn_roll < 96 ? -1 - int32_t(pick(3)) : 1 + pick(3));
    uint8_t opcode;
    int region = 0;
    uint32_t len = 0, dma = 0;
    uint64_t va = 0;
    if (sending && pick(50) != 0) {
      // The SEND in progress continues (now and then with a wrong length).
      opcode = send_middles > 0 ? uint8_t{kRcSendMiddle} : pick(4) == 0 ? uint8_t{kRcSendLastImm} : uint8_t{kRcSendLast};
      len = opcode == kRcSendMiddle ? kMtu : 1 + pick(kMtu);
      if (pick(40) == 0) len = pick(kMtu + 8);
    } else if (left > 0 && pick(50) != 0) {
      // The WRITE in progress continues (now and then with a wrong length).
      opcode = left > kMtu ? uint8_t{kRcWriteMiddle} : pick(4) == 0 ? uint8_t{kRcWriteLastImm} : uint8_t{kRcWriteLast};
      len = std::min(left, kMtu);
      if (pick(40) == 0) len = pick(kMtu + 8);
      region = write_region;
    } else {
      const uint32_t o = pick(100);
      opcode = o < 40   ? uint8_t{kRcWriteOnly}
               : o < 55 ? uint8_t{kRcWriteFirst}
               : o < 70 ? uint8_t{kRcSendOnly}
               : o < 80 ? uint8_t{kRcSendFirst}
                        : kOthers[pick(sizeof kOthers)];
      const uint32_t r = pick(100);
      region = r < 80 ? 0 : r < 90 ? 2 : r < 96 ? 1 : -1;
      const uint32_t where = pick(100);
      const uint32_t off = where < 90 ? pick(kRegion / 2) : where < 95 ? kRegion - pick(600) : 0;
      va = where < 98 ? kIova[std::max(region, 0)] + off : kIova[std::max(region, 0)] - 1 - pick(64);
      const OpcodeInfo& info = OpInfo(opcode);
      if (opcode == kRcWriteFirst) {
        dma = kMtu * (1 + pick(4)) + pick(kMtu);
        len = kMtu;
      } else if (info.Has(kHdrReth)) {
        dma = pick(20) == 0 ? 0 : 1 + pick(kMtu);
        len = (info.roles & kRolePayload) ? dma : 0;
      } else if (info.roles & kRolePayload) {
        len = (info.roles & kRoleLast) ? 1 + pick(kMtu) : kMtu;
      }
      if (pick(50) == 0) len = pick(kMtu + 8);  // a length the chain refuses
      if (info.Has(kHdrAtomicEth)) va &= ~uint64_t{7};
    }
    PacketFields f = Request(opcode, psn);
    f.bth.ack_req = pick(4) == 0;
    f.reth_va = f.atomic_va = va;
    f.reth_length = dma;
    f.atomic_swap_add = rng();
    f.atomic_compare = rng();
    payload.assign((OpInfo(opcode).roles & kRolePayload) ? std::min<uint32_t>(len, kMtu + 8) : 0,
                   static_cast<uint8_t>(step));
    f.payload = payload;
    if ((opcode == kRcSendMiddle || opcode == kRcWriteMiddle) && pick(30) == 0) {
      Feed(f, region, what + " bad icrc", /*bad_icrc=*/true);  // dropped; resent next
    }
    Feed(f, region, what);
    if (HasFatalFailure()) return;
    // What the author believes is in progress: what it sent at the expected PSN.
    if (psn == epsn) {
      sending = opcode == kRcSendFirst || (opcode == kRcSendMiddle && sending);
      if (opcode == kRcSendFirst) send_middles = pick(6);
      if (opcode == kRcSendMiddle && send_middles > 0) --send_middles;
      if (opcode == kRcSendFirst || opcode == kRcSendMiddle) continue;
      if (opcode == kRcWriteFirst) {
        left = dma - std::min(dma, len);
        write_region = region;
      } else if (opcode == kRcWriteMiddle) {
        left -= std::min(left, len);
      } else {
        left = 0;
      }
    }
  }
  const transport::QpCounters& c = fast_.qp()->counters();
  std::printf("expected %lu rx %lu naks %lu duplicates %lu\n", c.expected_requests, c.rx_packets, c.naks_sent,
              c.duplicates_received);
  // The fast path took a good share, the chain the rest, NAKs and duplicates included.
  EXPECT_GT(c.expected_requests, c.rx_packets / 4);
  EXPECT_LT(c.expected_requests, c.rx_packets * 3 / 4);
  EXPECT_GT(c.naks_sent, 100u);
  EXPECT_GT(c.duplicates_received, 100u);
}

// The bench's stream: one region, WRITE ONLY after WRITE ONLY; the first
// resolves the region, the rest are placed by the fast path until the MR
// table changes, then one takes the chain again.
TEST_F(ResponderExpected, WriteOnlyStreamsTakeTheFastPathAfterTheFirst) {
  std::vector<uint8_t> payload(64, 0xAB);
  auto write = [&](uint32_t i) {
    PacketFields f = Request(kRcWriteOnly, fast_.qp()->expected_psn());
    f.bth.ack_req = true;
    f.reth_va = kIova[0] + 64 * i;
    f.reth_length = 64;
    f.payload = payload;
    const uint64_t before = fast_.qp()->counters().expected_requests;
    Feed(f, 0, "write " + std::to_string(i));
    return fast_.qp()->counters().expected_requests - before;
  };
  EXPECT_EQ(write(0), 0u);
  for (uint32_t i = 1; i < 10; ++i) EXPECT_EQ(write(i), 1u);
  Reregister();
  EXPECT_EQ(write(10), 0u);
  EXPECT_EQ(write(11), 1u);
  SetAccess(kAllRemote);
  EXPECT_EQ(write(12), 0u);
  EXPECT_EQ(write(13), 1u);
}

// SENDs into receive WQEs of one SGE: the first resolves the WQE's L_Key
// through the full scatter, the next packets through the same key are
// placed by the fast path (MIDDLE ones while their ICRC is checked), until
// a WQE scatters over two SGEs.
TEST_F(ResponderExpected, SendStreamsTakeTheFastPathAfterTheFirst) {
  std::vector<uint8_t> payload(kMtu, 0xCD);
  auto send = [&](uint8_t opcode, uint32_t len) {
    PacketFields f = Request(opcode, fast_.qp()->expected_psn());
    f.bth.ack_req = true;
    payload.assign(len, static_cast<uint8_t>(len));
    f.payload = payload;
    const uint64_t before = fast_.qp()->counters().expected_requests;
    Feed(f, 0, std::string(OpInfo(opcode).name) + " " + std::to_string(len));
    return fast_.qp()->counters().expected_requests - before;
  };
  EXPECT_EQ(send(kRcSendOnly, 64), 0u);
  EXPECT_EQ(send(kRcSendOnly, 100), 1u);
  EXPECT_EQ(send(kRcSendFirst, kMtu), 1u);
  EXPECT_EQ(send(kRcSendMiddle, kMtu), 1u);
  EXPECT_EQ(send(kRcSendMiddle, kMtu), 1u);
  EXPECT_EQ(send(kRcSendLast, 10), 1u);
  EXPECT_EQ(send(kRcSendOnlyImm, 10), 0u);  // immediate data: the chain
  PostRecv(/*two SGEs of 300 and 2,048 bytes*/ 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(send(kRcSendOnly, 8), 1u);  // the receive queue's older WQEs
  EXPECT_EQ(send(kRcSendFirst, kMtu), 1u);                           // the first 300 bytes: one SGE
  EXPECT_EQ(send(kRcSendMiddle, kMtu), 0u);                          // across the two: the chain
  EXPECT_EQ(send(kRcSendLast, kMtu), 1u);                            // inside the second
  EXPECT_EQ(send(kRcSendOnly, 8), 0u);  // no receive WQE left: RNR NAK from the chain
}

}  // namespace
}  // namespace droce::core
