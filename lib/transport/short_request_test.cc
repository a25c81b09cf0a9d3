// The requester's short build (Qp::BuildShortRequest): two devices in the
// same state are posted the same work requests and receive the same
// responses; one builds the packets it can through the short build, the
// other every packet through the full one (Qp::UseFullRequestBuild). Every
// opcode (SEND and WRITE with and without immediate, SEND with invalidate,
// READ, both atomics), lengths 0 to past the path MTU, inline and one or
// two SGEs, signaled, unsignaled, solicited and fenced WRs, ACKs now and
// then, over IPv4 and IPv6, both MTUs, DSCP and the ECN codepoints (the
// IPv4 checksum covers the ECT bits), with and without DCQCN: the frames
// byte for byte, the completions, PSNs and counters must be the same, and
// each frame must pass the receive checks (IPv4 checksum, ICRC). The short
// end posts through Device::PostSend (its one-SGE WRITE/SEND step), the full
// end through the verbs producer's slots (the general checks and fill).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"
#include "wire/packet.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using namespace droce::wire;
using transport::WrOpcode;

constexpr Mac kPeerMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kOwnIp = 0x0A000001, kPeerIp = 0x0A000002;
const Gid kPeer6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2};
constexpr uint64_t kIova = 0x100000;
constexpr uint32_t kRegion = 16384;

struct End {
  sim::ScriptedIo io;
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
  uint32_t cq = 0, qpn = 0;
  transport::Qp* qp() { return dev->qp(qpn); }
};

// ipv6, path MTU, DCQCN, ECN codepoint, DSCP.
using Params = std::tuple<bool, uint32_t, bool, uint8_t, uint8_t>;

class ShortRequest : public ::testing::TestWithParam<Params> {
 protected:
  bool ipv6() const { return std::get<0>(GetParam()); }
  uint32_t mtu() const { return std::get<1>(GetParam()); }
  bool dcqcn() const { return std::get<2>(GetParam()); }

  void SetUp() override {
    unanswered_.clear();
    any_sent_ = false;
    for (End* e : {&short_, &full_}) {
      e->io.rx.clear();
      e->io.sent.clear();
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, 0x01};
      cfg.ipv4 = kOwnIp;
      cfg.qpn_base = 0x1000;  // both ends' QPs have one number
      cfg.dcqcn = dcqcn();
      cfg.ecn = std::get<3>(GetParam());
      cfg.dscp = std::get<4>(GetParam());
      e->dev = std::make_unique<Device>(cfg, &e->io);
      const uint32_t pd = e->dev->AllocPd();
      e->cq = *e->dev->CreateCq(4096);
      QpInitAttr init;
      init.pd = pd;
      init.send_cq = init.recv_cq = e->cq;
      init.caps.max_send_wr = 64;
      e->qpn = *e->dev->CreateQp(init);
      e->mem.resize(kRegion);
      for (uint32_t k = 0; k < kRegion; ++k) e->mem[k] = static_cast<uint8_t>(k * 13 + 5);
      e->keys = *e->dev->RegMr(pd, e->mem.data(), kRegion, kIova, mem::kLocalWrite | mem::kRemoteWrite);
      ASSERT_TRUE(ConnectQp(*e->dev, e->qpn, ToPeer()).ok());
    }
    ASSERT_EQ(short_.qpn, full_.qpn);
    full_.qp()->UseFullRequestBuild();
    own_gid_ = short_.dev->gids()[0];
  }

  ConnectParams ToPeer() const {
    ConnectParams c;
    c.peer_gid = ipv6() ? kPeer6 : Ipv4MappedGid(kPeerIp);
    c.sgid_index = ipv6() ? 0 : 1;
    c.peer_mac = kPeerMac;
    c.peer_qpn = kPeerQpn;
    c.mtu = mtu();
    c.sq_psn = 0xFFFFF0;  // the PSN wraps within the stream
    return c;
  }

  // A response from the peer (opcode, PSN, READ payload, atomic original) to both ends.
  void Respond(uint8_t opcode, uint32_t psn, uint32_t payload_len = 0) {
    PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = short_.dev->config().mac;
    f.route.ipv6 = ipv6();
    f.route.src_ip = ipv6() ? kPeer6 : Ipv4MappedGid(kPeerIp);
    f.route.dst_ip = ipv6() ? own_gid_ : Ipv4MappedGid(kOwnIp);
    f.bth.opcode = opcode;
    f.bth.dest_qp = short_.qpn;
    f.bth.psn = psn;
    f.aeth_syndrome = 0x1F;  // ACK, credits invalid
    f.aeth_msn = ++msn_;
    f.atomic_ack_original = 0x0102030405060708ull + psn;
    std::vector<uint8_t> payload(payload_len, static_cast<uint8_t>(psn));
    f.payload = payload;
    std::vector<uint8_t> b(pktio::kMaxFrameBytes);
    b.resize(*SerializeFields(f, b.data(), static_cast<uint32_t>(b.size())));
    short_.io.rx.push_back(b);
    full_.io.rx.push_back(b);
  }

  // The peer answers every request sent so far, in order: READs with their
  // responses, atomics with their acknowledgement, the rest with one
  // coalesced ACK after the last of them.
  void AnswerAll() {
    bool ack_due = false;
    uint32_t last = 0;
    for (const Sent& r : unanswered_) {
      if (r.opcode == kRcReadRequest) {
        const uint32_t n = r.read_len == 0 ? 1 : (r.read_len + mtu() - 1) / mtu();
        for (uint32_t i = 0; i < n; ++i) {
          const uint8_t op = n == 1 ? kRcReadResponseOnly
                             : i == 0 ? kRcReadResponseFirst
                             : i + 1 == n ? kRcReadResponseLast : kRcReadResponseMiddle;
          Respond(op, PsnAdd(r.psn, static_cast<int32_t>(i)), std::min(mtu(), r.read_len - i * mtu()));
        }
        ack_due = false;
      } else if (r.opcode == kRcCompareSwap || r.opcode == kRcFetchAdd) {
        Respond(kRcAtomicAcknowledge, r.psn);
        ack_due = false;
      } else {
        ack_due = true;
        last = r.psn;
      }
    }
    if (ack_due) Respond(kRcAcknowledge, last);
    unanswered_.clear();
  }

  // Both ends poll at the same instant; what they did must be the same.
  void PollAndCompare(const std::string& what) {
    now_ += 1000;
    short_.dev->Poll(now_);
    full_.dev->Poll(now_);
    ASSERT_EQ(short_.io.sent, full_.io.sent) << what;
    for (const auto& frame : short_.io.sent) {
      const ParsedPacket p = ParseAndVerify(frame.data(), static_cast<uint32_t>(frame.size()));
      ASSERT_TRUE(p.ok()) << what << ": " << ParseStatusName(p.status);
      const uint32_t psn = BthView(frame.data() + p.bth_offset).psn();
      if (p.opcode < 0x20 && (!any_sent_ || PsnLess(highest_sent_, psn))) {  // a new RC request
        any_sent_ = true;
        highest_sent_ = psn;
        const uint32_t read_len = p.opcode == kRcReadRequest ? RethView(frame.data() + p.bth_offset + kBthBytes).dma_length() : 0;
        unanswered_.push_back({p.opcode, psn, read_len});
      }
      ++frames_;
    }
    short_.io.sent.clear();
    full_.io.sent.clear();
    ASSERT_EQ(short_.qp()->next_psn(), full_.qp()->next_psn()) << what;
    ASSERT_EQ(short_.qp()->state(), full_.qp()->state()) << what;
    transport::QpCounters a = short_.qp()->counters(), b = full_.qp()->counters();
    EXPECT_EQ(b.short_requests, 0u);
    shorts_ = a.short_requests;
    a.short_requests = b.short_requests = 0;
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what;
    queue::Completion wa[64], wb[64];
    const int na = short_.dev->PollCq(short_.cq, wa, 64), nb = full_.dev->PollCq(full_.cq, wb, 64);
    ASSERT_EQ(na, nb) << what;
    for (int i = 0; i < na; ++i) {
      EXPECT_EQ(wa[i].wr_id, wb[i].wr_id) << what;
      EXPECT_EQ(wa[i].status, wb[i].status) << what;
      EXPECT_EQ(wa[i].opcode, wb[i].opcode) << what;
      EXPECT_EQ(wa[i].byte_len, wb[i].byte_len) << what;
    }
  }

  End short_, full_;
  Gid own_gid_{};
  uint64_t now_ = 1'000'000;
  uint32_t msn_ = 0;
  struct Sent {
    uint8_t opcode;
    uint32_t psn;
    uint32_t read_len;
  };
  std::vector<Sent> unanswered_;  // new requests the peer has not answered, in order
  bool any_sent_ = false;
  uint32_t highest_sent_ = 0;
  uint64_t frames_ = 0;
  uint64_t shorts_ = 0;
};

TEST_P(ShortRequest, FramesAreTheFullBuildsByteForByte) {
  std::mt19937_64 rng(20261129 + mtu() + ipv6() * 7 + dcqcn() * 13);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  static constexpr WrOpcode kOpcodes[] = {
      WrOpcode::kRdmaWrite, WrOpcode::kRdmaWrite,        WrOpcode::kSend,         WrOpcode::kSend,
      WrOpcode::kRdmaWriteWithImm, WrOpcode::kSendWithImm, WrOpcode::kSendWithInv, WrOpcode::kRdmaRead,
      WrOpcode::kAtomicCmpAndSwp,  WrOpcode::kAtomicFetchAndAdd};
  const uint32_t lengths[] = {0, 1, 2, 3, 4, 15, 16, 17, 63, 64, 65, 255, 256, 257, 511, 512, mtu() - 1, mtu(),
                              mtu() + 1};
  uint32_t outstanding = 0;
  for (int step = 0; step < 4000; ++step) {
    const std::string what = "step " + std::to_string(step);
    ASSERT_NE(short_.qp()->state(), transport::QpState::kErr) << what;
    const uint32_t action = pick(10);
    if (action < 7 && outstanding < 48) {
      transport::SendWr wr;
      wr.wr_id = static_cast<uint64_t>(step);
      wr.opcode = kOpcodes[pick(std::size(kOpcodes))];
      const bool atomic = wr.opcode == WrOpcode::kAtomicCmpAndSwp || wr.opcode == WrOpcode::kAtomicFetchAndAdd;
      uint32_t len = pick(4) == 0 ? pick(mtu() + 2) : lengths[pick(std::size(lengths))];
      if (atomic) len = 8;
      const uint32_t at = pick(kRegion - 4096 - 256) & ~7u;  // room for two SGEs 64 B apart
      const uint32_t flag = pick(8);
      wr.flags = (pick(3) == 0 ? uint32_t{transport::kSendSignaled} : 0u) | (flag == 0 ? uint32_t{transport::kSendSolicited} : 0u) |
                 (flag == 1 ? uint32_t{transport::kSendFence} : 0u);
      const bool inline_data = len <= transport::kMaxInlineData && pick(4) == 0 &&
                               wr.opcode != WrOpcode::kRdmaRead && !atomic;
      if (inline_data) wr.flags |= transport::kSendInline;
      if (len > 1 && pick(4) == 0 && !atomic) {
        const uint32_t first = 1 + pick(len - 1);
        wr.num_sge = 2;
        wr.sg_list[0] = {kIova + at, first, 0};
        wr.sg_list[1] = {kIova + at + first + 64, len - first, 0};
      } else if (len > 0 || pick(2) == 0) {
        wr.num_sge = 1;
        wr.sg_list[0] = {kIova + at, len, 0};
      }
      wr.remote_addr = 0x7000000000 + pick(1 << 20);
      wr.rkey = 0x1234500 + pick(256);
      wr.imm_data = static_cast<uint32_t>(rng());
      wr.invalidate_rkey = static_cast<uint32_t>(rng());
      wr.compare_add = rng();
      wr.swap = rng();
      // Each end's L_Key (the same buffer offsets, each in its own memory;
      // inline data is read from the program's address when posted).
      int rc[2];
      for (int k = 0; k < 2; ++k) {
        End* e = k == 0 ? &short_ : &full_;
        transport::SendWr mine = wr;
        for (uint32_t i = 0; i < mine.num_sge; ++i) {
          mine.sg_list[i].lkey = e->keys.lkey;
          if (inline_data) mine.sg_list[i].addr = reinterpret_cast<uint64_t>(e->mem.data()) + (mine.sg_list[i].addr - kIova);
        }
        if (k == 0) {
          rc[k] = e->dev->PostSend(e->qpn, mine);
        } else {  // the verbs producer's path: the general validation and fill
          transport::SendWr* slot = e->qp()->NextSendSlot();
          ASSERT_NE(slot, nullptr) << what;
          *slot = mine;
          rc[k] = e->qp()->PublishSend();
          e->dev->DeferDoorbell(e->qpn);
        }
      }
      ASSERT_EQ(rc[0], rc[1]) << what;
      ++outstanding;
    } else if (action < 9) {
      AnswerAll();
      outstanding = 0;
    } else if (pick(8) == 0) {
      // Idle: an unsolicited tail is solicited, or (rarely) the transport
      // timer resends from the oldest unacknowledged packet.
      now_ += pick(16) == 0 ? 100'000'000 : 700'000;
    }
    PollAndCompare(what);
  }
  const transport::QpCounters& c = short_.qp()->counters();
  std::printf("frames %lu tx %lu short %lu\n", static_cast<unsigned long>(frames_),
              static_cast<unsigned long>(c.tx_packets), static_cast<unsigned long>(shorts_));
  EXPECT_GT(c.tx_packets, 2000u);
  EXPECT_GT(c.ack_solicits, 0u);
  if (dcqcn()) {
    EXPECT_EQ(shorts_, 0u);  // congestion control takes the full build
  } else {
    EXPECT_GT(shorts_, c.tx_packets / 5);
  }
}

// A WRITE whose L_Key the MR table refuses (a key it never gave, an SGE
// past the region's end, a region deregistered after the post) fails with
// LOC_PROT_ERR as the full steps fail it, after WRITEs that went well
// through the same key (the region the short step resolved last).
TEST_P(ShortRequest, ALocalKeyRefusedFailsTheWqeAsTheFullStepsDo) {
  for (int bad = 0; bad < 3; ++bad) {
    SCOPED_TRACE(bad);
    if (bad > 0) SetUp();
    for (int k = 0; k < 4; ++k) {
      transport::SendWr wr;
      wr.wr_id = static_cast<uint64_t>(k);
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.flags = transport::kSendSignaled;
      wr.num_sge = 1;
      wr.remote_addr = 0x7000000000;
      wr.rkey = 0x1234500;
      for (End* e : {&short_, &full_}) {
        wr.sg_list[0] = {kIova + 64 * k, 64, e->keys.lkey};
        if (k == 3 && bad == 0) wr.sg_list[0].lkey = e->keys.lkey + 0x100;
        if (k == 3 && bad == 1) wr.sg_list[0].addr = kIova + kRegion - 32;
        ASSERT_EQ(e->dev->PostSend(e->qpn, wr), 0);
        if (k == 3 && bad == 2) {
          ASSERT_TRUE(e->dev->DeregMr(e->keys.lkey).ok());
        }
      }
      PollAndCompare("write " + std::to_string(k));
      AnswerAll();
      PollAndCompare("answer " + std::to_string(k));
    }
    EXPECT_EQ(short_.qp()->state(), transport::QpState::kErr);
    EXPECT_EQ(shorts_, dcqcn() ? 0u : 3u);  // congestion control takes the full steps
  }
}

// PostSend's one-SGE WRITE/SEND step refuses what the general checks refuse:
// an SGE on a QP created without any, a message past max_msg_sz.
TEST_P(ShortRequest, OneSgePostRefusesWhatTheGeneralChecksRefuse) {
  for (End* e : {&short_, &full_}) {
    QpInitAttr init;
    init.pd = e->dev->AllocPd();
    init.send_cq = init.recv_cq = e->cq;
    init.caps.max_send_wr = 8;
    init.caps.max_send_sge = 0;
    e->qpn = *e->dev->CreateQp(init);
    ASSERT_TRUE(ConnectQp(*e->dev, e->qpn, ToPeer()).ok());
  }
  for (const WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kSend}) {
    for (const uint32_t len : {64u, transport::kMaxMessageBytes + 1}) {
      transport::SendWr wr;
      wr.opcode = op;
      wr.num_sge = 1;
      wr.sg_list[0] = {kIova, len, short_.keys.lkey};
      EXPECT_EQ(short_.dev->PostSend(short_.qpn, wr), EINVAL);
      transport::SendWr* slot = full_.qp()->NextSendSlot();
      ASSERT_NE(slot, nullptr);
      *slot = wr;
      EXPECT_EQ(full_.qp()->PublishSend(), EINVAL);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ShortRequest,
                         ::testing::Values(Params{false, 1024, false, kEcnEct0, 0},
                                           Params{false, 256, false, kEcnNotEct, 26},
                                           Params{false, 4096, false, kEcnEct1, 46},
                                           Params{true, 1024, false, kEcnEct0, 26},
                                           Params{true, 256, false, kEcnNotEct, 0},
                                           Params{false, 1024, true, kEcnEct0, 26},
                                           Params{true, 4096, true, kEcnEct1, 0}));

}  // namespace
}  // namespace droce::core
