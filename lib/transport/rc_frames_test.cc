// The RC/UC transport frame by frame: one QP on a device whose port is the
// scripted burst I/O; crafted requests and responses in, the exact frames
// that come back (opcode, PSN, AETH syndrome, MSN, credits, payload) and the
// counters each case moves. Responder (IBTA 9.7.5), completer (9.7.5.2, 9.9),
// UC (9.8.3). These pin the transport's behaviour so that its state machines
// can be rewritten underneath.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"
#include "wire/headers.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using queue::Completion;
using queue::WcStatus;
using transport::QpState;
using namespace droce::wire;

constexpr uint32_t kPeerQpn = 0x99;
constexpr uint64_t kIova = 0x100000;
constexpr uint32_t kMem = 16384;
constexpr uint32_t kMtu = 256;
constexpr uint32_t kRqPsn = 100;
constexpr uint32_t kSqPsn = 500;
constexpr uint8_t kMinRnr = 1;

uint8_t Nak(uint8_t code) { return MakeSyndrome(AethType::kNak, code); }
uint8_t Ack(uint8_t credits) { return MakeSyndrome(AethType::kAck, credits); }

// What the test compares of a frame the device sent.
struct Out {
  uint8_t opcode = 0;
  uint32_t dest_qp = 0;
  uint32_t psn = 0;
  bool ack_req = false;
  uint8_t syndrome = 0;  // AETH, where present
  uint32_t msn = 0;
  uint64_t original = 0;  // ATOMIC ACKNOWLEDGE
  std::vector<uint8_t> payload;
  bool operator==(const Out&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Out& o) {
  return os << OpInfo(o.opcode).name << " qp=" << o.dest_qp << " psn=" << o.psn
            << " ackreq=" << o.ack_req << " syn=0x" << std::hex << int{o.syndrome} << std::dec
            << " msn=" << o.msn << " orig=" << o.original << " payload=" << o.payload.size();
}

Out AckOut(uint32_t psn, uint8_t syndrome, uint32_t msn) {
  return Out{kRcAcknowledge, kPeerQpn, psn, false, syndrome, msn, 0, {}};
}

// One QP (RC or UC) connected to a peer that exists only as the frames the
// test writes.
class Frames : public ::testing::Test {
 protected:
  void SetUp() override { Open(transport::QpType::kRc, 1); }

  void Open(transport::QpType type, uint8_t max_dest_rd_atomic, uint32_t rq_psn = kRqPsn,
            uint32_t sq_psn = kSqPsn) {
    DeviceConfig c;
    c.ipv4 = 0x0A000001;
    dev_ = std::make_unique<Device>(c, &io_);
    pd_ = dev_->AllocPd();
    cq_ = *dev_->CreateCq(256);
    mem_.assign(kMem, 0);
    for (uint32_t i = 0; i < kMem; ++i) mem_[i] = static_cast<uint8_t>(i * 7 + 1);
    using namespace droce::mem;
    keys_ = *dev_->RegMr(pd_, mem_.data(), kMem, kIova,
                         kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_recv_wr = 64;
    init.caps.type = type;
    qpn_ = *dev_->CreateQp(init);
    Connect(type, max_dest_rd_atomic, rq_psn, sq_psn);
  }

  // RESET (if not there) -> INIT -> RTR -> RTS.
  void Connect(transport::QpType type, uint8_t max_dest_rd_atomic, uint32_t rq_psn = kRqPsn,
               uint32_t sq_psn = kSqPsn) {
    using namespace droce::mem;
    transport::QpAttr a;
    if (qp().state() != QpState::kReset) {
      a.qp_state = QpState::kReset;
      ASSERT_TRUE(dev_->ModifyQp(qpn_, a, transport::kAttrState).ok());
      (void)Cqes();
    }
    a.qp_state = QpState::kInit;
    a.qp_access_flags = kRemoteWrite | kRemoteRead | kRemoteAtomic;
    ASSERT_TRUE(dev_->ModifyQp(qpn_, a, transport::kAttrState | transport::kAttrPkeyIndex |
                                            transport::kAttrPort | transport::kAttrAccessFlags)
                    .ok());
    a.qp_state = QpState::kRtr;
    a.ah.dgid = kPeerIp;
    a.ah.sgid_index = 1;
    a.ah.dmac_valid = true;
    a.ah.dmac = {2, 0, 0, 0, 0, 2};
    a.path_mtu = kMtu;
    a.dest_qp_num = kPeerQpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = max_dest_rd_atomic;
    a.min_rnr_timer = kMinRnr;
    uint32_t mask = transport::kAttrState | transport::kAttrAv | transport::kAttrPathMtu |
                    transport::kAttrDestQpn | transport::kAttrRqPsn;
    if (type == transport::QpType::kRc) {
      mask |= transport::kAttrMaxDestRdAtomic | transport::kAttrMinRnrTimer;
    }
    ASSERT_TRUE(dev_->ModifyQp(qpn_, a, mask).ok());
    a.qp_state = QpState::kRts;
    a.sq_psn = sq_psn;
    a.timeout = 10;
    a.retry_cnt = 2;
    a.rnr_retry = 1;
    a.max_rd_atomic = 4;
    mask = transport::kAttrState | transport::kAttrSqPsn;
    if (type == transport::QpType::kRc) {
      mask |= transport::kAttrTimeout | transport::kAttrRetryCnt | transport::kAttrRnrRetry |
              transport::kAttrMaxQpRdAtomic;
    }
    ASSERT_TRUE(dev_->ModifyQp(qpn_, a, mask).ok());
    io_.sent.clear();
  }

  transport::Qp& qp() { return *dev_->qp(qpn_); }
  const transport::QpCounters& ctr() { return qp().counters(); }

  // A receive of `len` bytes at mem_[offset].
  void PostRecv(uint64_t id, uint32_t offset = 8192, uint32_t len = 1024, uint32_t lkey = 0) {
    transport::RecvWr r;
    r.wr_id = id;
    r.num_sge = 1;
    r.sg_list[0] = {kIova + offset, len, lkey ? lkey : keys_.lkey};
    ASSERT_EQ(dev_->PostRecv(qpn_, r), 0);
  }

  PacketFields Request(uint8_t opcode, uint32_t psn, bool ack_req = true) {
    PacketFields f;
    f.route.src_mac = {2, 0, 0, 0, 0, 2};
    f.route.dst_mac = dev_->config().mac;
    f.route.src_ip = kPeerIp;
    f.route.dst_ip = dev_->gids()[1];
    f.bth.opcode = opcode;
    f.bth.dest_qp = qpn_;
    f.bth.psn = psn;
    f.bth.ack_req = ack_req;
    return f;
  }
  void In(const PacketFields& f, const std::vector<uint8_t>& payload = {}) {
    PacketFields g = f;
    g.payload = payload;
    std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
    auto n = SerializeFields(g, frame.data(), static_cast<uint32_t>(frame.size()));
    ASSERT_TRUE(n.ok()) << n.status();
    frame.resize(*n);
    io_.rx.push_back(std::move(frame));
  }
  void Send(uint8_t opcode, uint32_t psn, uint32_t len, bool ack_req = true) {
    In(Request(opcode, psn, ack_req), Bytes(len, static_cast<uint8_t>(psn)));
  }
  void Write(uint8_t opcode, uint32_t psn, uint64_t va, uint32_t dma_len, uint32_t len,
             uint32_t rkey = 0, bool ack_req = true) {
    PacketFields f = Request(opcode, psn, ack_req);
    f.reth_va = va;
    f.reth_rkey = rkey ? rkey : keys_.rkey;
    f.reth_length = dma_len;
    In(f, Bytes(len, static_cast<uint8_t>(psn)));
  }
  void Read(uint32_t psn, uint64_t va, uint32_t len, uint32_t rkey = 0) {
    PacketFields f = Request(kRcReadRequest, psn);
    f.reth_va = va;
    f.reth_rkey = rkey ? rkey : keys_.rkey;
    f.reth_length = len;
    In(f);
  }
  void Atomic(uint8_t opcode, uint32_t psn, uint64_t va, uint64_t swap_add, uint64_t compare = 0) {
    PacketFields f = Request(opcode, psn);
    f.atomic_va = va;
    f.atomic_rkey = keys_.rkey;
    f.atomic_swap_add = swap_add;
    f.atomic_compare = compare;
    In(f);
  }
  // A response from the peer to our requester.
  void Response(uint8_t opcode, uint32_t psn, uint8_t syndrome, uint32_t msn,
                const std::vector<uint8_t>& payload = {}, uint64_t original = 0) {
    PacketFields f = Request(opcode, psn, false);
    f.aeth_syndrome = syndrome;
    f.aeth_msn = msn;
    f.atomic_ack_original = original;
    In(f, payload);
  }

  static std::vector<uint8_t> Bytes(uint32_t len, uint8_t seed) {
    std::vector<uint8_t> b(len);
    for (uint32_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(seed + i * 3);
    return b;
  }
  std::vector<uint8_t> MemAt(uint64_t va, uint32_t len) const {
    return {mem_.begin() + static_cast<long>(va - kIova),
            mem_.begin() + static_cast<long>(va - kIova + len)};
  }

  // Runs one poll round (receive, then transmit) and returns what was sent.
  std::vector<Out> Poll(uint64_t advance_ns = 1000) {
    now_ += advance_ns;
    dev_->Poll(now_);
    std::vector<Out> out;
    for (const auto& b : io_.sent) {
      const ParsedPacket p = ParseAndVerify(b.data(), static_cast<uint32_t>(b.size()));
      EXPECT_TRUE(p.ok()) << ParseStatusName(p.status);
      if (!p.ok()) continue;
      const PacketFields f = DecodeFields(b.data(), p);
      EXPECT_EQ(f.route.dst_ip, kPeerIp);
      EXPECT_EQ(f.route.src_ip, dev_->gids()[1]);
      Out o;
      o.opcode = f.bth.opcode;
      o.dest_qp = f.bth.dest_qp;
      o.psn = f.bth.psn;
      o.ack_req = f.bth.ack_req;
      const OpcodeInfo& op = OpInfo(o.opcode);
      if (op.Has(kHdrAeth)) {
        o.syndrome = f.aeth_syndrome;
        o.msn = f.aeth_msn;
      }
      o.original = f.atomic_ack_original;
      o.payload.assign(f.payload.begin(), f.payload.end());
      out.push_back(std::move(o));
    }
    io_.sent.clear();
    return out;
  }
  std::vector<Completion> Cqes() {
    std::vector<Completion> out(64);
    out.resize(dev_->PollCq(cq_, out.data(), 64));
    return out;
  }

  static constexpr Gid kPeerIp = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  sim::ScriptedIo io_;
  std::unique_ptr<Device> dev_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
  std::vector<uint8_t> mem_;
  mem::MrKeys keys_;
  uint64_t now_ = 1'000'000;
};

// --- Responder: the good paths, ACKs, coalescing and credits -------------

TEST_F(Frames, SendOnlyIsAckedWithMsnAndCredits) {
  for (int i = 0; i < 8; ++i) PostRecv(i);
  Send(kRcSendOnly, kRqPsn, 100);
  // 7 receives left: Table 44 encodes 6 as 5 (7 < 8, the next count).
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(5), 1)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 100u);
  EXPECT_EQ(MemAt(kIova + 8192, 100), Bytes(100, kRqPsn));
  EXPECT_EQ(qp().expected_psn(), kRqPsn + 1);
  EXPECT_EQ(ctr().acks_sent, 1u);
  EXPECT_EQ(ctr().naks_sent, 0u);
}

TEST_F(Frames, AcksCoalesceWithinARound) {
  for (int i = 0; i < 20; ++i) PostRecv(i);
  Send(kRcSendOnly, kRqPsn, 10);
  Send(kRcSendOnly, kRqPsn + 1, 10, /*ack_req=*/false);
  Send(kRcSendOnly, kRqPsn + 2, 10);
  // One ACK for the last PSN, MSN 3; 17 receives left: credit code 8 (16..23).
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 2, Ack(8), 3)));
  EXPECT_EQ(ctr().acks_sent, 1u);
  EXPECT_EQ(Cqes().size(), 3u);
}

TEST_F(Frames, NoAckRequestNoAck) {
  PostRecv(1);
  Send(kRcSendOnly, kRqPsn, 10, /*ack_req=*/false);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_EQ(qp().expected_psn(), kRqPsn + 1);
}

TEST_F(Frames, MultiPacketSendAcksTheLastAndCountsOneMessage) {
  PostRecv(1);
  Send(kRcSendFirst, kRqPsn, kMtu, false);
  Send(kRcSendMiddle, kRqPsn + 1, kMtu, false);
  Send(kRcSendLast, kRqPsn + 2, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 2, Ack(0), 1)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].byte_len, 2 * kMtu + 10);
}

TEST_F(Frames, WriteOnlyIsAckedWithNoCredits) {
  // No receive posted: the ACK advertises 0 credits.
  Write(kRcWriteOnly, kRqPsn, kIova + 64, 32, 32);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(0), 1)));
  EXPECT_EQ(MemAt(kIova + 64, 32), Bytes(32, kRqPsn));
}

TEST_F(Frames, PsnWrapsAt24Bits) {
  Open(transport::QpType::kRc, 1, /*rq_psn=*/0xFFFFFE);
  for (int i = 0; i < 4; ++i) PostRecv(i);
  Send(kRcSendOnly, 0xFFFFFE, 8, false);
  Send(kRcSendOnly, 0xFFFFFF, 8, false);
  Send(kRcSendOnly, 0, 8);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(0, Ack(1), 3)));  // 1 receive left
  EXPECT_EQ(qp().expected_psn(), 1u);
  // 0xFFFFFF is now behind: a duplicate, answered with the latest PSN.
  Send(kRcSendOnly, 0xFFFFFF, 8);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(0, Ack(1), 3)));
  EXPECT_EQ(ctr().duplicates_received, 1u);
}

// --- Responder NAKs -------------------------------------------------------

TEST_F(Frames, PsnSequenceErrorNakedOnceUntilTheExpectedPsn) {
  PostRecv(1);
  Send(kRcSendOnly, kRqPsn + 2, 10);
  Send(kRcSendOnly, kRqPsn + 3, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakPsnSequenceError), 0)));
  EXPECT_EQ(ctr().out_of_sequence, 2u);
  EXPECT_EQ(ctr().seq_naks_sent, 1u);
  EXPECT_EQ(ctr().naks_sent, 1u);
  EXPECT_EQ(qp().state(), QpState::kRts);  // class B: no state change
  // The expected PSN re-arms it.
  Send(kRcSendOnly, kRqPsn, 10);
  Send(kRcSendOnly, kRqPsn + 5, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(0), 1),
                                             AckOut(kRqPsn + 1, Nak(kNakPsnSequenceError), 1)));
  EXPECT_EQ(ctr().seq_naks_sent, 2u);
}

TEST_F(Frames, InvalidRequestOutOfOrderOpcode) {
  PostRecv(1);
  Send(kRcSendMiddle, kRqPsn, kMtu);  // no SEND in progress
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakInvalidRequest), 0)));
  EXPECT_EQ(qp().state(), QpState::kErr);
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kRequestError);
  EXPECT_EQ(ctr().naks_sent, 1u);
  const auto c = Cqes();  // the posted receive is flushed
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kWrFlushErr);
}

TEST_F(Frames, InvalidRequestWrongLengthHoldsTheReceive) {
  PostRecv(1);
  PostRecv(2);
  Send(kRcSendFirst, kRqPsn, kMtu, false);
  Send(kRcSendMiddle, kRqPsn + 1, kMtu - 4);  // a MIDDLE must be a full MTU
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 1, Nak(kNakInvalidRequest), 0)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(c[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kRequestError);
}

TEST_F(Frames, InvalidRequestWriteLongerThanItsReth) {
  Write(kRcWriteFirst, kRqPsn, kIova, kMtu + 10, kMtu, 0, false);
  Write(kRcWriteLast, kRqPsn + 1, 0, 0, 20);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 1, Nak(kNakInvalidRequest), 0)));
  EXPECT_EQ(qp().state(), QpState::kErr);
}

TEST_F(Frames, InvalidRequestDmaLengthAboveTwoGiB) {
  Write(kRcWriteFirst, kRqPsn, kIova, (1u << 31) + 1, kMtu);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakInvalidRequest), 0)));
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kRequestError);
}

TEST_F(Frames, InvalidRequestMisalignedAtomic) {
  Atomic(kRcFetchAdd, kRqPsn, kIova + 4, 1);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakInvalidRequest), 0)));
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kRequestError);
}

TEST_F(Frames, InvalidRequestBeyondMaxDestRdAtomic) {
  // max_dest_rd_atomic 1: a second READ before the first is answered.
  Read(kRqPsn, kIova, 16);
  Read(kRqPsn + 1, kIova, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcReadResponseOnly, kPeerQpn, kRqPsn, false, Ack(0), 1, 0,
                              MemAt(kIova, 16)},
                          AckOut(kRqPsn + 1, Nak(kNakInvalidRequest), 1)));
  EXPECT_EQ(ctr().rd_atomic_overflows, 1u);
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kRequestError);
}

TEST_F(Frames, InvalidRequestSendWithInvalidateOfARegion) {
  PostRecv(1);
  PacketFields f = Request(kRcSendOnlyInv, kRqPsn);
  f.ieth_rkey = keys_.rkey;  // a region, not a type-2 window
  In(f, Bytes(8, 1));
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakInvalidRequest), 0)));
  const auto c = Cqes();
  ASSERT_GE(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRemInvReqErr);
}

TEST_F(Frames, RemoteAccessErrorBadRkeyWrite) {
  const std::vector<uint8_t> before = mem_;
  Write(kRcWriteOnly, kRqPsn, kIova, 16, 16, keys_.rkey + 1);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakRemoteAccessError), 0)));
  EXPECT_EQ(qp().state(), QpState::kErr);
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kAccessError);
  EXPECT_EQ(ctr().naks_sent, 1u);
  EXPECT_TRUE(mem_ == before);
}

TEST_F(Frames, RemoteAccessErrorReadOutOfBounds) {
  Read(kRqPsn, kIova + kMem - 8, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakRemoteAccessError), 0)));
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kAccessError);
}

TEST_F(Frames, RemoteAccessErrorAtomicBadRkey) {
  PacketFields f = Request(kRcCompareSwap, kRqPsn);
  f.atomic_va = kIova;
  f.atomic_rkey = keys_.rkey ^ 0x100;
  In(f);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakRemoteAccessError), 0)));
}

TEST_F(Frames, RemoteAccessErrorQpLacksTheRight) {
  transport::QpAttr a;
  a.qp_access_flags = mem::kRemoteRead;
  ASSERT_TRUE(dev_->ModifyQp(qpn_, a, transport::kAttrAccessFlags).ok());
  Write(kRcWriteOnly, kRqPsn, kIova, 16, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakRemoteAccessError), 0)));
}

TEST_F(Frames, RemoteOperationalErrorReceiveBufferNotWritable) {
  PostRecv(7, 8192, 64, keys_.lkey + 0x100);  // an lkey that names nothing
  Send(kRcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(),
              ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakRemoteOperationalError), 0)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 7u);
  EXPECT_EQ(c[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(qp().error_event(), transport::QpEvent::kFatal);
}

TEST_F(Frames, InvalidRequestReceiveTooSmall) {
  PostRecv(7, 8192, 8);
  Send(kRcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Nak(kNakInvalidRequest), 0)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kLocLenErr);
}

TEST_F(Frames, RnrNakDoesNotConsumeThePsn) {
  Send(kRcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          AckOut(kRqPsn, MakeSyndrome(AethType::kRnrNak, kMinRnr), 0)));
  EXPECT_EQ(ctr().rnr_naks_sent, 1u);
  EXPECT_EQ(ctr().naks_sent, 0u);
  EXPECT_EQ(qp().expected_psn(), kRqPsn);
  EXPECT_EQ(qp().state(), QpState::kRts);
  PostRecv(1);
  Send(kRcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(0), 1)));
}

TEST_F(Frames, RnrNakForWriteWithImmediate) {
  const std::vector<uint8_t> before = mem_;
  Write(kRcWriteOnlyImm, kRqPsn, kIova, 16, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          AckOut(kRqPsn, MakeSyndrome(AethType::kRnrNak, kMinRnr), 0)));
  EXPECT_TRUE(mem_ == before);  // checked before memory is touched
  EXPECT_EQ(ctr().rnr_naks_sent, 1u);
}

// --- Responder duplicates -------------------------------------------------

TEST_F(Frames, DuplicateSendIsAckedNotRedelivered) {
  PostRecv(1);
  PostRecv(2);
  Send(kRcSendOnly, kRqPsn, 10);
  Send(kRcSendOnly, kRqPsn + 1, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 1, Ack(0), 2)));
  Send(kRcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn + 1, Ack(0), 2)));
  EXPECT_EQ(ctr().duplicates_received, 1u);
  EXPECT_EQ(ctr().acks_sent, 2u);  // counted once each
  EXPECT_EQ(Cqes().size(), 2u);
}

TEST_F(Frames, DuplicateWriteIsAckedNotRewritten) {
  Write(kRcWriteOnly, kRqPsn, kIova, 16, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(0), 1)));
  mem_[0] = 0xEE;
  Write(kRcWriteOnly, kRqPsn, kIova, 16, 16);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(kRqPsn, Ack(0), 1)));
  EXPECT_EQ(mem_[0], 0xEE);
  EXPECT_EQ(ctr().duplicates_received, 1u);
}

TEST_F(Frames, ReadIsAnsweredFirstMiddleLast) {
  Read(kRqPsn, kIova + 10, 2 * kMtu + 5);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcReadResponseFirst, kPeerQpn, kRqPsn, false, Ack(0), 1, 0,
                              MemAt(kIova + 10, kMtu)},
                          Out{kRcReadResponseMiddle, kPeerQpn, kRqPsn + 1, false, 0, 0, 0,
                              MemAt(kIova + 10 + kMtu, kMtu)},
                          Out{kRcReadResponseLast, kPeerQpn, kRqPsn + 2, false, Ack(0), 1, 0,
                              MemAt(kIova + 10 + 2 * kMtu, 5)}));
  EXPECT_EQ(qp().expected_psn(), kRqPsn + 3);
}

TEST_F(Frames, DuplicateReadIsReExecutedInFullOrInPart) {
  Read(kRqPsn, kIova, 2 * kMtu + 5);
  ASSERT_EQ(Poll().size(), 3u);
  mem_[kMtu + 1] = 0xAB;  // re-executed: the current memory is read again
  // The whole READ again.
  Read(kRqPsn, kIova, 2 * kMtu + 5);
  auto out = Poll();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].payload, MemAt(kIova + kMtu, kMtu));
  // A part: from the second packet on, at the second PSN.
  Read(kRqPsn + 1, kIova + kMtu, kMtu + 5);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcReadResponseFirst, kPeerQpn, kRqPsn + 1, false, Ack(0), 1, 0,
                              MemAt(kIova + kMtu, kMtu)},
                          Out{kRcReadResponseLast, kPeerQpn, kRqPsn + 2, false, Ack(0), 1, 0,
                              MemAt(kIova + 2 * kMtu, 5)}));
  EXPECT_EQ(ctr().duplicates_received, 2u);
  EXPECT_EQ(qp().expected_psn(), kRqPsn + 3);
}

TEST_F(Frames, DuplicateReadAskingForMoreIsDropped) {
  Read(kRqPsn, kIova, 100);
  ASSERT_EQ(Poll().size(), 1u);
  Read(kRqPsn, kIova, 101);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_EQ(ctr().dropped_bad_duplicates, 1u);
  Read(kRqPsn, kIova + 8, 100);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_EQ(ctr().dropped_bad_duplicates, 2u);
}

TEST_F(Frames, AtomicExecutesOnceAndReplays) {
  uint64_t v = 40;
  std::memcpy(mem_.data() + 64, &v, 8);
  Atomic(kRcFetchAdd, kRqPsn, kIova + 64, 2);
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcAtomicAcknowledge, kPeerQpn, kRqPsn, false, Ack(0), 1, 40, {}}));
  std::memcpy(&v, mem_.data() + 64, 8);
  EXPECT_EQ(v, 42u);
  Atomic(kRcFetchAdd, kRqPsn, kIova + 64, 2);  // duplicate: replayed, not re-executed
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcAtomicAcknowledge, kPeerQpn, kRqPsn, false, Ack(0), 1, 40, {}}));
  std::memcpy(&v, mem_.data() + 64, 8);
  EXPECT_EQ(v, 42u);
  EXPECT_EQ(ctr().duplicates_received, 1u);
}

TEST_F(Frames, CompareAndSwap) {
  Open(transport::QpType::kRc, 4);  // two atomics in one round
  uint64_t v = 7;
  std::memcpy(mem_.data() + 64, &v, 8);
  Atomic(kRcCompareSwap, kRqPsn, kIova + 64, 9, 7);
  Atomic(kRcCompareSwap, kRqPsn + 1, kIova + 64, 11, 7);  // fails: 9 != 7
  EXPECT_THAT(Poll(), ::testing::ElementsAre(
                          Out{kRcAtomicAcknowledge, kPeerQpn, kRqPsn, false, Ack(0), 1, 7, {}},
                          Out{kRcAtomicAcknowledge, kPeerQpn, kRqPsn + 1, false, Ack(0), 2, 9, {}}));
  std::memcpy(&v, mem_.data() + 64, 8);
  EXPECT_EQ(v, 9u);
}

TEST_F(Frames, DuplicateAtomicAtAReadPsnIsIgnored) {
  Read(kRqPsn, kIova, 16);
  ASSERT_EQ(Poll().size(), 1u);
  Atomic(kRcFetchAdd, kRqPsn, kIova + 64, 2);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
}

// A port out of transmit buffers while a retrying requester's duplicates
// arrive: each replayed atomic response and each duplicate WRITE's ACK
// takes a slot of the response queue (an ACK coalesces only with an ACK at
// the tail), until it is full. The new WRITE behind them asks for its ACK:
// that ACK must leave once the port takes frames again, since nothing else
// would acknowledge a window's last request before the requester's timer.
// The queue keeps its last slot for an ACK and refuses the replay beyond.
TEST_F(Frames, AnAckAskedForWhileTheResponseQueueIsFullIsSent) {
  Write(kRcWriteOnly, kRqPsn, kIova + 128, 8, 8);
  Atomic(kRcFetchAdd, kRqPsn + 1, kIova + 64, 2);
  ASSERT_EQ(Poll().size(), 2u);  // the ACK and the ATOMIC ACKNOWLEDGE
  io_.tx_buffers = 0;
  const uint32_t depth = transport::kMaxRdAtomic * 2 + 8;  // the response queue's
  for (uint32_t i = 0; i + 2 < depth; i += 2) {
    Atomic(kRcFetchAdd, kRqPsn + 1, kIova + 64, 2);  // a replayed response
    Write(kRcWriteOnly, kRqPsn, kIova + 128, 8, 8);  // an ACK behind it
  }
  Atomic(kRcFetchAdd, kRqPsn + 1, kIova + 64, 2);  // the second-to-last slot
  Atomic(kRcFetchAdd, kRqPsn + 1, kIova + 64, 2);  // the last slot is an ACK's: refused
  Write(kRcWriteOnly, kRqPsn + 2, kIova + 128, 8, 8);  // new, AckReq
  while (!io_.rx.empty()) ASSERT_THAT(Poll(), ::testing::IsEmpty());
  io_.tx_buffers = UINT64_MAX;
  std::vector<Out> out;
  for (std::vector<Out> round = Poll(); !round.empty(); round = Poll()) {
    out.insert(out.end(), round.begin(), round.end());
  }
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), AckOut(kRqPsn + 2, Ack(0), 3));
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](const Out& o) { return o.opcode == kRcAtomicAcknowledge; }),
            depth / 2);
  EXPECT_EQ(ctr().responses_refused, 1u);
  EXPECT_EQ(ctr().duplicates_received, depth);
}

// --- Completer ------------------------------------------------------------

class Completer : public Frames {
 protected:
  // Posts a signaled WR and returns the request frames it produced.
  std::vector<Out> Post(uint64_t id, transport::WrOpcode op, uint32_t len, uint32_t local = 0) {
    transport::SendWr wr;
    wr.wr_id = id;
    wr.opcode = op;
    wr.flags = transport::kSendSignaled;
    wr.num_sge = 1;
    wr.sg_list[0] = {kIova + local, len, keys_.lkey};
    wr.remote_addr = 0x5000;
    wr.rkey = 0x1234;
    wr.compare_add = 3;
    EXPECT_EQ(dev_->PostSend(qpn_, wr), 0);
    return Poll();
  }
};

TEST_F(Completer, SendAndAck) {
  const auto req = Post(1, transport::WrOpcode::kSend, kMtu + 4);
  ASSERT_EQ(req.size(), 2u);
  EXPECT_EQ(req[0].opcode, kRcSendFirst);
  EXPECT_EQ(req[0].psn, kSqPsn);
  EXPECT_EQ(req[0].dest_qp, kPeerQpn);
  EXPECT_EQ(req[0].payload, MemAt(kIova, kMtu));
  EXPECT_EQ(req[1].opcode, kRcSendLast);
  EXPECT_EQ(req[1].psn, kSqPsn + 1);
  EXPECT_TRUE(req[1].ack_req);
  Response(kRcAcknowledge, kSqPsn, Ack(0), 0);  // part of the message
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_TRUE(Cqes().empty());
  Response(kRcAcknowledge, kSqPsn + 1, Ack(0), 1);
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ctr().acks_received, 2u);
  // Stale: an ACK already seen, and one for a PSN never sent.
  Response(kRcAcknowledge, kSqPsn, Ack(0), 1);
  Response(kRcAcknowledge, kSqPsn + 7, Ack(0), 1);
  (void)Poll();
  EXPECT_EQ(ctr().duplicates_received, 1u);
  EXPECT_EQ(ctr().dropped_bad_response, 1u);
}

struct CompleterNak {
  uint8_t code;
  WcStatus status;
};

TEST_F(Completer, NakCodesCompleteWithTheirStatus) {
  // IBTA 9.9.2 / rxe check_ack: the invalid RD request code and reserved
  // codes complete REM_OP_ERR.
  const CompleterNak cases[] = {{kNakInvalidRequest, WcStatus::kRemInvReqErr},
                                {kNakRemoteAccessError, WcStatus::kRemAccessErr},
                                {kNakRemoteOperationalError, WcStatus::kRemOpErr},
                                {kNakInvalidRdRequest, WcStatus::kRemOpErr},
                                {7, WcStatus::kRemOpErr}};
  for (const CompleterNak& k : cases) {
    Open(transport::QpType::kRc, 1);
    ASSERT_EQ(Post(1, transport::WrOpcode::kRdmaWrite, 16).size(), 1u);
    Response(kRcAcknowledge, kSqPsn, Nak(k.code), 0);
    (void)Poll();
    const auto c = Cqes();
    ASSERT_EQ(c.size(), 1u) << int{k.code};
    EXPECT_EQ(c[0].status, k.status) << int{k.code};
    EXPECT_EQ(qp().state(), QpState::kErr) << int{k.code};
    EXPECT_EQ(ctr().naks_received, 1u);
  }
}

TEST_F(Completer, SequenceNakRetransmitsFromItsPsn) {
  auto req = Post(1, transport::WrOpcode::kRdmaWrite, 3 * kMtu);
  ASSERT_EQ(req.size(), 3u);
  Response(kRcAcknowledge, kSqPsn + 1, Nak(kNakPsnSequenceError), 0);
  req = Poll();
  // The NAK acknowledges kSqPsn; kSqPsn+1 and +2 go again.
  ASSERT_EQ(req.size(), 2u);
  EXPECT_EQ(req[0].opcode, kRcWriteMiddle);
  EXPECT_EQ(req[0].psn, kSqPsn + 1);
  EXPECT_EQ(req[1].opcode, kRcWriteLast);
  EXPECT_EQ(req[1].psn, kSqPsn + 2);
  EXPECT_EQ(ctr().naks_received, 1u);
  EXPECT_EQ(ctr().retransmitted_packets, 2u);
  Response(kRcAcknowledge, kSqPsn + 2, Ack(0), 1);
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
}

TEST_F(Completer, RnrNakWaitsThenResendsThenExhausts) {
  ASSERT_EQ(Post(1, transport::WrOpcode::kSend, 16).size(), 1u);
  Response(kRcAcknowledge, kSqPsn, MakeSyndrome(AethType::kRnrNak, 1), 0);  // 0.01 ms
  EXPECT_THAT(Poll(100), ::testing::IsEmpty());
  const auto again = Poll(20'000);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].psn, kSqPsn);
  EXPECT_EQ(ctr().rnr_naks_received, 1u);
  // rnr_retry 1: the second RNR NAK without progress ends it.
  Response(kRcAcknowledge, kSqPsn, MakeSyndrome(AethType::kRnrNak, 1), 0);
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(qp().state(), QpState::kErr);
}

TEST_F(Completer, ReadResponsesAreScatteredAndComplete) {
  const auto req = Post(1, transport::WrOpcode::kRdmaRead, kMtu + 3, 4096);
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].opcode, kRcReadRequest);
  const auto a = Bytes(kMtu, 9), b = Bytes(3, 10);
  Response(kRcReadResponseFirst, kSqPsn, Ack(0), 1, a);
  Response(kRcReadResponseLast, kSqPsn + 1, Ack(0), 1, b);
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, kMtu + 3);
  EXPECT_EQ(MemAt(kIova + 4096, kMtu), a);
  EXPECT_EQ(MemAt(kIova + 4096 + kMtu, 3), b);
}

TEST_F(Completer, LostReadResponseIsAnImpliedNak) {
  ASSERT_EQ(Post(1, transport::WrOpcode::kRdmaRead, 2 * kMtu + 3, 4096).size(), 1u);
  Response(kRcReadResponseMiddle, kSqPsn + 1, 0, 0, Bytes(kMtu, 1));  // FIRST lost
  const auto again = Poll();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].opcode, kRcReadRequest);
  EXPECT_EQ(again[0].psn, kSqPsn);
  EXPECT_EQ(ctr().out_of_sequence, 1u);
}

TEST_F(Completer, AtomicAcknowledgeLandsTheOriginal) {
  const auto req = Post(1, transport::WrOpcode::kAtomicFetchAndAdd, 8, 4096);
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].opcode, kRcFetchAdd);
  Response(kRcAtomicAcknowledge, kSqPsn, Ack(0), 1, {}, 0x1122334455667788ull);
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  uint64_t v;
  std::memcpy(&v, mem_.data() + 4096, 8);
  EXPECT_EQ(v, 0x1122334455667788ull);
}

TEST_F(Completer, RetryExhaustedAfterTimeouts) {
  ASSERT_EQ(Post(1, transport::WrOpcode::kSend, 16).size(), 1u);
  // timeout 10: 4.096 us << 10 ~ 4.2 ms; retry_cnt 2.
  for (int i = 0; i < 2; ++i) {
    const auto again = Poll(5'000'000);
    ASSERT_EQ(again.size(), 1u) << i;
    EXPECT_EQ(again[0].psn, kSqPsn);
  }
  (void)Poll(5'000'000);
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(ctr().timeouts, 3u);
}

// A response the completer cannot use still shows the responder at work on
// this QP's requests: the transport timer restarts, the retry budget does
// not (only progress restores it). rxe's completer re-arms its timer after
// every response it processes.
TEST_F(Completer, DuplicatesRestartTheTimerButNotTheRetryBudget) {
  const uint64_t timeout = transport::AckTimeoutNs(10);
  ASSERT_EQ(Post(1, transport::WrOpcode::kRdmaWrite, 3 * kMtu).size(), 3u);
  Response(kRcAcknowledge, kSqPsn, Ack(0), 0);  // progress: kSqPsn+1 and +2 wait
  (void)Poll();
  const uint64_t deadline = qp().NextDeadline();
  EXPECT_EQ(deadline, now_ + timeout);
  // retry_cnt 2: the third timeout without progress fails the WR, however
  // many duplicates come meanwhile; each one moves the deadline.
  for (int timeouts = 0; timeouts < 3; ++timeouts) {
    for (int i = 0; i < 3; ++i) {
      const uint64_t before = qp().NextDeadline();
      Response(kRcAcknowledge, kSqPsn, Ack(0), 0);  // below psn_una: a duplicate
      EXPECT_THAT(Poll(timeout / 2), ::testing::IsEmpty());
      EXPECT_EQ(qp().NextDeadline(), now_ + timeout) << timeouts << " " << i;
      EXPECT_GT(qp().NextDeadline(), before);
    }
    (void)Poll(timeout);
    EXPECT_EQ(ctr().timeouts, static_cast<uint64_t>(timeouts + 1));
  }
  EXPECT_EQ(ctr().duplicates_received, 9u);
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kRetryExcErr);
}

// Go-back-N's responses past a lost one: the rest of the READ, and a later
// READ's (the responder serves its queue in order). The first asks the READ
// again from the missing response (implied NAK); none is a bad response,
// and each restarts the timer.
TEST_F(Completer, ResponsesPastALostOneRestartTheTimer) {
  ASSERT_EQ(Post(1, transport::WrOpcode::kRdmaRead, 3 * kMtu, 0).size(), 1u);       // kSqPsn..+2
  ASSERT_EQ(Post(2, transport::WrOpcode::kRdmaRead, 2 * kMtu, 4096).size(), 1u);    // kSqPsn+3..+4
  Response(kRcReadResponseFirst, kSqPsn, Ack(0), 0, Bytes(kMtu, 1));
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  Response(kRcReadResponseLast, kSqPsn + 2, Ack(0), 0, Bytes(kMtu, 3));  // kSqPsn+1 lost
  const auto again = Poll();
  ASSERT_EQ(again.size(), 2u);  // go-back-N: the first READ from its missing response, the second whole
  EXPECT_EQ(again[0].opcode, kRcReadRequest);
  EXPECT_EQ(again[0].psn, kSqPsn + 1);
  EXPECT_EQ(again[1].psn, kSqPsn + 3);
  for (uint32_t psn : {kSqPsn + 3, kSqPsn + 4}) {
    Response(psn == kSqPsn + 3 ? kRcReadResponseFirst : kRcReadResponseLast, psn, Ack(0), 0, Bytes(kMtu, 4));
    EXPECT_THAT(Poll(1'000'000), ::testing::IsEmpty());  // no second request for the same gap
    EXPECT_EQ(qp().NextDeadline(), now_ + transport::AckTimeoutNs(10));
  }
  EXPECT_EQ(ctr().out_of_sequence, 3u);
  EXPECT_EQ(ctr().dropped_bad_response, 0u);
  EXPECT_EQ(ctr().timeouts, 0u);
  // The answers to the requests asked again complete both.
  Response(kRcReadResponseMiddle, kSqPsn + 1, 0, 0, Bytes(kMtu, 2));
  Response(kRcReadResponseLast, kSqPsn + 2, Ack(0), 0, Bytes(kMtu, 3));
  Response(kRcReadResponseFirst, kSqPsn + 3, Ack(0), 0, Bytes(kMtu, 4));
  Response(kRcReadResponseLast, kSqPsn + 4, Ack(0), 0, Bytes(kMtu, 5));
  (void)Poll();
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
  EXPECT_EQ(MemAt(kIova + kMtu, kMtu), Bytes(kMtu, 2));
  EXPECT_EQ(MemAt(kIova + 4096 + kMtu, kMtu), Bytes(kMtu, 5));
}

// A timeout resends the oldest unacknowledged packet alone, asking for an
// ACK (the retry probe), not the window: a responder slower than the window
// may still be working through it. The first ACK at or past the probe's
// PSN decides: for exactly it, the responder holds nothing past it and the
// rest goes again at once (go-back-N); past it, the rest is arriving and
// nothing else is resent.
TEST_F(Completer, TimeoutsResendTheOldestPacketAloneAndItsAnswerDecidesTheRest) {
  const uint64_t timeout = transport::AckTimeoutNs(10);
  ASSERT_EQ(Post(1, transport::WrOpcode::kRdmaWrite, 4 * kMtu).size(), 4u);  // kSqPsn..+3
  auto out = Poll(timeout);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].opcode, kRcWriteFirst);
  EXPECT_EQ(out[0].psn, kSqPsn);
  EXPECT_TRUE(out[0].ack_req);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());  // nothing follows the probe
  // Its answer acknowledges exactly it: the rest was lost, and goes again.
  Response(kRcAcknowledge, kSqPsn, Ack(0), 0);
  out = Poll();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].psn, kSqPsn + 1);
  EXPECT_EQ(out[2].psn, kSqPsn + 3);
  // The next timeout's probe is answered past it: the rest is arriving.
  out = Poll(timeout);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn, kSqPsn + 1);
  Response(kRcAcknowledge, kSqPsn + 2, Ack(0), 0);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  // A sequence NAK's retry is the window from its PSN; a timeout after it
  // sends the probe only.
  Response(kRcAcknowledge, kSqPsn + 3, Nak(kNakPsnSequenceError), 0);
  out = Poll();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn, kSqPsn + 3);
  out = Poll(timeout);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].psn, kSqPsn + 3);
  EXPECT_TRUE(out[0].ack_req);
  Response(kRcAcknowledge, kSqPsn + 3, Ack(0), 0);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ctr().timeouts, 3u);
  EXPECT_EQ(ctr().retransmitted_packets, 7u);
}

// --- RESET forgets the connection --------------------------------------

TEST_F(Frames, ResetForgetsTheCnpRateLimit) {
  // A CE-marked request makes the QP send a CNP (A17.9), at most one per
  // min_time_between_cnps (4 us) -- per connection: a move to RESET
  // value-initialises the notification point with the rest.
  auto ce_write = [&](uint32_t psn) {
    PacketFields f = Request(kRcWriteOnly, psn);
    f.route.tclass = kEcnCe;
    f.reth_va = kIova;
    f.reth_rkey = keys_.rkey;
    f.reth_length = 8;
    In(f, Bytes(8, 1));
  };
  auto cnps = [](const std::vector<Out>& out) {
    return std::count_if(out.begin(), out.end(), [](const Out& o) { return o.opcode == kCnp; });
  };
  ce_write(kRqPsn);
  EXPECT_EQ(cnps(Poll()), 1);
  ce_write(kRqPsn + 1);
  EXPECT_EQ(cnps(Poll()), 0);  // within 4 us of the last one
  Connect(transport::QpType::kRc, 1, 7000);
  ce_write(7000);
  EXPECT_EQ(cnps(Poll()), 1);
  EXPECT_EQ(ctr().cnps_sent, 2u);
}

TEST_F(Frames, ResetForgetsAHalfReceivedMessage) {
  PostRecv(1);
  Send(kRcSendFirst, kRqPsn, kMtu, false);
  (void)Poll();
  Connect(transport::QpType::kRc, 1, 7000);
  PostRecv(2);
  Send(kRcSendOnly, 7000, 10);  // a FIRST would be refused inside the old SEND
  EXPECT_THAT(Poll(), ::testing::ElementsAre(AckOut(7000, Ack(0), 1)));
  const auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 2u);
  EXPECT_EQ(c[0].byte_len, 10u);
}

// --- UC: the same pipeline, silent drops ----------------------------------

TEST_F(Frames, UcNeverAcksAndDropsSilently) {
  Open(transport::QpType::kUc, 1);
  PostRecv(1);
  PostRecv(2);
  auto uc = [&](uint8_t op, uint32_t psn, uint32_t len) {
    In(Request(op, psn), Bytes(len, static_cast<uint8_t>(psn)));
  };
  uc(kUcSendOnly, kRqPsn, 10);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  auto c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  // A gap inside a message drops the message, no NAK.
  uc(kUcSendFirst, kRqPsn + 1, kMtu);
  uc(kUcSendLast, kRqPsn + 3, 10);
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_TRUE(Cqes().empty());
  EXPECT_EQ(ctr().uc_messages_dropped, 1u);
  EXPECT_EQ(ctr().out_of_sequence, 1u);
  // A WRITE with a bad R_Key: dropped, the QP stays up.
  PacketFields f = Request(kUcWriteOnly, kRqPsn + 4);
  f.reth_va = kIova;
  f.reth_rkey = keys_.rkey + 1;
  f.reth_length = 8;
  In(f, Bytes(8, 1));
  EXPECT_THAT(Poll(), ::testing::IsEmpty());
  EXPECT_EQ(ctr().uc_messages_dropped, 2u);
  EXPECT_EQ(qp().state(), QpState::kRts);
  // The next message is received.
  uc(kUcSendOnly, kRqPsn + 5, 10);
  (void)Poll();
  c = Cqes();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ctr().naks_sent, 0u);
}

}  // namespace
}  // namespace droce::core
