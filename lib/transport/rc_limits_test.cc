// The RC transport frame by frame: one droce device whose QP talks to a
// scripted peer. Crafted requests and responses go in; the exact frames
// droce sends back, its completions and its counters come out. Covers what a
// hostile or broken peer may send: immediate data byte for byte,
// DMA lengths above 2^31, zero-length RDMA, responder resources, duplicate
// READs, NAK syndromes, and the state a move to RESET must clear.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "wire/fields.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using queue::Completion;
using queue::WcOpcode;
using queue::WcStatus;
using transport::QpState;
using transport::RecvWr;
using transport::SendWr;
using transport::WrOpcode;
using wire::PacketFields;

// A port that receives the frames a test queues and keeps every frame sent.
// `tx_room` bounds how many frames it still takes (a READ of gigabytes must
// not fill the test's memory, whatever the transport does); buffers handed
// out and not yet sent or released count against it. The device may hold
// several AllocTx results at once (it gathers a burst across QPs).
class FrameIo final : public pktio::BurstIo {
 public:
  std::deque<std::vector<uint8_t>> rx;
  std::vector<std::vector<uint8_t>> sent;
  size_t tx_room = 64;

  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override {
    uint16_t i = 0;
    for (; i < n && !rx.empty(); ++i) {
      held_.push_back(std::move(rx.front()));
      rx.pop_front();
      auto& b = held_.back();
      f[i] = {b.data(), static_cast<uint32_t>(b.size()), static_cast<uint32_t>(b.size()), nullptr};
    }
    return i;
  }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override {
    n = static_cast<uint16_t>(std::min<size_t>(n, tx_room - allocated_));
    for (uint16_t i = 0; i < n; ++i) {
      tx_.emplace_back(pktio::kMaxFrameBytes, 0);  // a deque: earlier buffers stay where they are
      f[i] = {tx_.back().data(), 0, pktio::kMaxFrameBytes, &kTxTag};
    }
    allocated_ += n;
    return n;
  }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) sent.emplace_back(f[i].data, f[i].data + f[i].len);
    tx_room -= n;
    Returned(n);
    return n;
  }
  void Release(pktio::Frame* f, uint16_t n) override {
    uint16_t tx = 0;
    for (uint16_t i = 0; i < n; ++i) tx += f[i].handle == &kTxTag;
    if (tx < n) held_.clear();
    Returned(tx);
  }

 private:
  void Returned(size_t n) {
    allocated_ -= n;
    if (allocated_ == 0) tx_.clear();
  }
  static inline int kTxTag = 0;
  std::deque<std::vector<uint8_t>> held_;
  std::deque<std::vector<uint8_t>> tx_;
  size_t allocated_ = 0;
};

// A frame droce sent, decoded.
struct Sent {
  std::vector<uint8_t> bytes;
  wire::ParsedPacket p;
  PacketFields f;
};

constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kPeerPsn = 1000;  // the peer's first request PSN (droce's rq_psn)
constexpr uint32_t kOurPsn = 5000;   // droce's sq_psn

// One device, one RC QP at RTS connected to a peer the test plays.
class Peer {
 public:
  explicit Peer(uint32_t mtu = 256, uint8_t max_dest_rd_atomic = 4,
                transport::QpType type = transport::QpType::kRc)
      : dev_(Config(), &io_), mtu_(mtu), max_dest_rd_atomic_(max_dest_rd_atomic) {
    pd_ = dev_.AllocPd();
    cq_ = *dev_.CreateCq(4096);
    mem_.assign(64 * 1024, 0);
    for (size_t i = 0; i < mem_.size(); ++i) mem_[i] = static_cast<uint8_t>(i * 13 + 1);
    keys_ = *dev_.RegMr(pd_, mem_.data(), mem_.size(), kIova,
                        mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_recv_wr = 64;
    init.caps.type = type;
    qpn_ = *dev_.CreateQp(init);
    Connect();
  }

  // RESET -> INIT -> RTR -> RTS (also after a move to RESET).
  void Connect() {
    ConnectParams c;
    c.peer_gid = PeerGid();
    c.peer_mac = kPeerMac;
    c.peer_qpn = kPeerQpn;
    c.mtu = mtu_;
    c.rq_psn = kPeerPsn;
    c.sq_psn = kOurPsn;
    c.timeout = 20;  // ~4 s: no retransmission by timer within a test
    c.max_rd_atomic = 16;
    c.max_dest_rd_atomic = max_dest_rd_atomic_;
    ASSERT_TRUE(ConnectQp(dev_, qpn_, c).ok());
  }

  void Reset() {
    transport::QpAttr a;
    a.qp_state = QpState::kReset;
    ASSERT_TRUE(dev_.ModifyQp(qpn_, a, transport::kAttrState).ok());
  }

  // A request (or response) from the peer to droce's QP.
  PacketFields Frame(uint8_t opcode, uint32_t psn) const {
    PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = dev_.config().mac;
    f.route.src_ip = PeerGid();
    f.route.dst_ip = dev_.gids()[1];
    f.bth.opcode = opcode;
    f.bth.dest_qp = qpn_;
    f.bth.psn = psn;
    return f;
  }
  // An RDMA request naming droce's region at `offset`.
  PacketFields Rdma(uint8_t opcode, uint32_t psn, uint64_t offset, uint32_t length) const {
    PacketFields f = Frame(opcode, psn);
    f.reth_va = f.atomic_va = kIova + offset;
    f.reth_rkey = f.atomic_rkey = keys_.rkey;
    f.reth_length = length;
    return f;
  }

  // Feeds frames, polls, and returns what droce sent meanwhile.
  std::vector<Sent> Feed(const std::vector<PacketFields>& frames, int polls = 4) {
    for (const PacketFields& f : frames) {
      std::vector<uint8_t> b(pktio::kMaxFrameBytes);
      auto n = wire::SerializeFields(f, b.data(), static_cast<uint32_t>(b.size()));
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok()) continue;
      b.resize(*n);
      io_.rx.push_back(std::move(b));
    }
    return Poll(polls);
  }
  std::vector<Sent> Feed(const PacketFields& f, int polls = 4) { return Feed(std::vector{f}, polls); }

  std::vector<Sent> Poll(int polls = 4) {
    for (int i = 0; i < polls; ++i) dev_.Poll(now_ += 1000);
    std::vector<Sent> out;
    for (auto& b : io_.sent) {
      Sent s;
      s.bytes = std::move(b);
      s.p = wire::ParseAndVerify(s.bytes.data(), static_cast<uint32_t>(s.bytes.size()));
      EXPECT_TRUE(s.p.ok()) << "droce sent an invalid frame";
      if (s.p.ok()) s.f = wire::DecodeFields(s.bytes.data(), s.p);
      out.push_back(std::move(s));
    }
    io_.sent.clear();
    return out;
  }

  std::vector<Completion> Completions() {
    std::vector<Completion> out;
    Completion c[64];
    for (uint32_t n; (n = dev_.PollCq(cq_, c, 64)) > 0;) out.insert(out.end(), c, c + n);
    return out;
  }

  void PostRecv(uint64_t id, uint64_t offset = 32 * 1024, uint32_t len = 4096) {
    RecvWr r;
    r.wr_id = id;
    r.num_sge = 1;
    r.sg_list[0] = {kIova + offset, len, keys_.lkey};
    ASSERT_EQ(dev_.PostRecv(qpn_, r), 0);
  }
  SendWr Wr(uint64_t id, WrOpcode op, uint64_t offset, uint32_t len) const {
    SendWr w;
    w.wr_id = id;
    w.opcode = op;
    w.flags = transport::kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = {kIova + offset, len, keys_.lkey};
    w.remote_addr = 0x7000000;
    w.rkey = 0x1234;
    return w;
  }
  int Post(const SendWr& w) { return dev_.PostSend(qpn_, w); }

  transport::Qp* qp() { return dev_.qp(qpn_); }
  Device& dev() { return dev_; }
  FrameIo& io() { return io_; }
  std::vector<uint8_t>& mem() { return mem_; }
  uint32_t rkey() const { return keys_.rkey; }
  uint32_t pd() const { return pd_; }
  uint64_t now() const { return now_; }
  static constexpr uint64_t kIova = 0x100000;

 private:
  static DeviceConfig Config() {
    DeviceConfig c;
    c.ipv4 = 0x0A000001;
    c.ecn = wire::kEcnNotEct;
    return c;
  }
  static Gid PeerGid() { return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2}; }
  static constexpr Mac kPeerMac = {2, 0, 0, 0, 0, 2};

  FrameIo io_;
  Device dev_;
  uint32_t mtu_;
  uint8_t max_dest_rd_atomic_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
  std::vector<uint8_t> mem_;
  mem::MrKeys keys_{};
  uint64_t now_ = 1'000'000;
};

std::vector<uint8_t> Bytes(uint32_t v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}
uint32_t FromBytes(std::initializer_list<uint8_t> b) {
  uint32_t v;
  std::memcpy(&v, std::data(b), 4);
  return v;
}
std::vector<uint8_t> ImmOnWire(const Sent& s) {
  const uint8_t* p = s.bytes.data() + s.p.bth_offset + s.p.op().immdt_offset;
  return {p, p + 4};
}

// --- Immediate data: verbs' imm_data is a __be32; its
// bytes are the wire bytes, both ways, byte for byte.

TEST(Immediate, RequesterPutsTheProgramsBytesOnTheWire) {
  Peer peer;
  // What `wr.imm_data = htonl(0xA0000001)` holds in memory.
  const uint32_t imm = FromBytes({0xA0, 0x00, 0x00, 0x01});
  SendWr send = peer.Wr(1, WrOpcode::kSendWithImm, 0, 61);
  send.imm_data = imm;
  SendWr write = peer.Wr(2, WrOpcode::kRdmaWriteWithImm, 0, 600);  // FIRST, MIDDLE, LAST with ImmDt
  write.imm_data = FromBytes({0x12, 0x34, 0x56, 0x78});
  ASSERT_EQ(peer.Post(send), 0);
  ASSERT_EQ(peer.Post(write), 0);
  const auto out = peer.Poll();
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcSendOnlyImm);
  EXPECT_EQ(ImmOnWire(out[0]), (std::vector<uint8_t>{0xA0, 0x00, 0x00, 0x01}));
  EXPECT_EQ(out[0].f.imm_data, 0xA0000001u);  // as Wireshark shows it
  EXPECT_EQ(out[3].p.opcode, wire::kRcWriteLastImm);
  EXPECT_EQ(ImmOnWire(out[3]), (std::vector<uint8_t>{0x12, 0x34, 0x56, 0x78}));
}

TEST(Immediate, ResponderDeliversTheWireBytes) {
  Peer peer;
  peer.PostRecv(1);
  peer.PostRecv(2);
  PacketFields send = peer.Frame(wire::kRcSendOnlyImm, kPeerPsn);
  send.imm_data = 0xA0000001;  // wire bytes a0 00 00 01
  const std::vector<uint8_t> payload(61, 7);
  send.payload = payload;
  PacketFields write = peer.Rdma(wire::kRcWriteOnlyImm, kPeerPsn + 1, 0, 16);
  write.imm_data = 0xA0000002;
  write.payload = std::span(payload).first(16);
  write.bth.ack_req = true;
  peer.Feed({send, write});
  const auto c = peer.Completions();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecv);
  EXPECT_EQ(Bytes(c[0].imm_or_inv), (std::vector<uint8_t>{0xA0, 0x00, 0x00, 0x01}));
  EXPECT_EQ(c[1].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(Bytes(c[1].imm_or_inv), (std::vector<uint8_t>{0xA0, 0x00, 0x00, 0x02}));
}

TEST(Immediate, UcResponderDeliversTheWireBytes) {
  Peer peer(256, 16, transport::QpType::kUc);
  peer.PostRecv(1);
  PacketFields send = peer.Frame(wire::kUcSendOnlyImm, kPeerPsn);
  send.imm_data = 0xA0000003;
  peer.Feed(send);
  const auto c = peer.Completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(Bytes(c[0].imm_or_inv), (std::vector<uint8_t>{0xA0, 0x00, 0x00, 0x03}));
}


// --- DMA lengths: a message is 0..2^31 bytes (IBTA 9.4,
// max_msg_sz); more is NAKed invalid request, as rxe's check_length does,
// and a READ's PSN count never wraps.

// 4 GiB + 4 KiB of address space the responder may lend, none of it backed
// until touched (a READ reads zero pages).
class BigRegion {
 public:
  static constexpr uint64_t kBytes = (1ull << 32) + 4096;
  static constexpr uint64_t kIova = 0x1000000000;
  explicit BigRegion(Peer& peer) {
    host_ = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    EXPECT_NE(host_, MAP_FAILED);
    rkey_ = peer.dev().RegMr(peer.pd(), host_, kBytes, kIova, mem::kLocalWrite | mem::kRemoteRead | mem::kRemoteWrite)->rkey;
  }
  ~BigRegion() { munmap(host_, kBytes); }
  uint32_t rkey() const { return rkey_; }

 private:
  void* host_;
  uint32_t rkey_;
};

PacketFields BigRequest(const Peer& peer, const BigRegion& big, uint8_t opcode, uint32_t psn, uint32_t len) {
  PacketFields f = peer.Frame(opcode, psn);
  f.reth_va = BigRegion::kIova;
  f.reth_rkey = big.rkey();
  f.reth_length = len;
  return f;
}

void ExpectNak(const std::vector<Sent>& out, uint8_t code, uint32_t psn, const char* what) {
  ASSERT_EQ(out.size(), 1u) << what;
  EXPECT_EQ(out[0].p.opcode, wire::kRcAcknowledge) << what;
  EXPECT_EQ(out[0].f.aeth_syndrome, wire::MakeSyndrome(wire::AethType::kNak, code)) << what;
  EXPECT_EQ(out[0].f.bth.psn, psn) << what;
}

TEST(DmaLength, ReadAbove2To31IsNakedInvalidRequest) {
  for (uint32_t len : {0xFFFFFFFFu, 0x80000001u}) {
    Peer peer(1024);
    BigRegion big(peer);
    // A READ of 0xFFFFFFFF bytes at MTU 1024 used to count (len + 1023) / 1024
    // in 32 bits: one PSN, while 4 M responses went out on the PSNs after it.
    ExpectNak(peer.Feed(BigRequest(peer, big, wire::kRcReadRequest, kPeerPsn, len)), wire::kNakInvalidRequest,
              kPeerPsn, "READ");
    EXPECT_EQ(peer.qp()->expected_psn(), kPeerPsn);
    EXPECT_EQ(peer.qp()->state(), QpState::kErr);
  }
}

TEST(DmaLength, WriteAbove2To31IsNakedInvalidRequest) {
  Peer peer(256);
  BigRegion big(peer);
  const std::vector<uint8_t> payload(256, 1);
  PacketFields first = BigRequest(peer, big, wire::kRcWriteFirst, kPeerPsn, 0x80000001u);
  first.payload = payload;
  ExpectNak(peer.Feed(first), wire::kNakInvalidRequest, kPeerPsn, "WRITE FIRST");
  EXPECT_EQ(peer.qp()->state(), QpState::kErr);
}

TEST(DmaLength, Exactly2To31IsServedAndCountsItsPsns) {
  Peer peer(256);
  BigRegion big(peer);
  // A WRITE of 2^31 bytes starts (its FIRST is acknowledged when asked).
  const std::vector<uint8_t> payload(256, 1);
  PacketFields first = BigRequest(peer, big, wire::kRcWriteFirst, kPeerPsn, 0x80000000u);
  first.payload = payload;
  first.bth.ack_req = true;
  auto out = peer.Feed(first);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcAcknowledge);
  EXPECT_EQ(wire::SyndromeType(out[0].f.aeth_syndrome), wire::AethType::kAck);
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);

  // A READ of 2^31 bytes at MTU 256 takes 2^23 PSNs.
  Peer reader(256);
  BigRegion big2(reader);
  reader.io().tx_room = 4;  // the first responses only
  out = reader.Feed(BigRequest(reader, big2, wire::kRcReadRequest, kPeerPsn, 0x80000000u));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcReadResponseFirst);
  EXPECT_EQ(out[3].f.bth.psn, kPeerPsn + 3);
  EXPECT_EQ(reader.qp()->expected_psn(), wire::PsnAdd(kPeerPsn, 1 << 23));
  EXPECT_EQ(reader.qp()->state(), QpState::kRts);
}

TEST(DmaLength, RequesterRefusesMoreThan2To31) {
  Peer peer;
  SendWr read = peer.Wr(1, WrOpcode::kRdmaRead, 0, 0);
  read.sg_list[0].length = 0x80000001u;
  EXPECT_EQ(peer.Post(read), EINVAL);
  SendWr write = peer.Wr(2, WrOpcode::kRdmaWrite, 0, 0);
  write.num_sge = 2;
  write.sg_list[0].length = 0x80000000u;
  write.sg_list[1] = {Peer::kIova, 1, write.sg_list[0].lkey};
  EXPECT_EQ(peer.Post(write), EINVAL);
  EXPECT_TRUE(peer.Poll().empty());
}


// --- Zero-length RDMA: no R_Key or VA check (IBTA 9.4,
// rxe's check_rkey); WRITE with immediate still takes a receive; READ
// answers one response without payload.

constexpr uint32_t kJunkRkey = 0xDEADBEEF;
constexpr uint64_t kJunkVa = 0xFFFFFFFFFFFFF000;

TEST(ZeroLength, WriteNeedsNoKeyOrAddress) {
  Peer peer;
  const std::vector<uint8_t> before = peer.mem();
  PacketFields w = peer.Frame(wire::kRcWriteOnly, kPeerPsn);
  w.reth_rkey = kJunkRkey;
  w.reth_va = kJunkVa;
  w.bth.ack_req = true;
  const auto out = peer.Feed(w);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcAcknowledge);
  EXPECT_EQ(wire::SyndromeType(out[0].f.aeth_syndrome), wire::AethType::kAck);
  EXPECT_EQ(out[0].f.bth.psn, kPeerPsn);
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);
  EXPECT_EQ(peer.qp()->expected_psn(), kPeerPsn + 1);
  EXPECT_TRUE(peer.mem() == before);
}

TEST(ZeroLength, WriteWithImmediateConsumesAReceive) {
  Peer peer;
  PacketFields w = peer.Frame(wire::kRcWriteOnlyImm, kPeerPsn);
  w.reth_rkey = kJunkRkey;
  w.reth_va = kJunkVa;
  w.imm_data = 0xA0000007;
  w.bth.ack_req = true;
  // No receive posted: RNR NAK, PSN not consumed.
  auto out = peer.Feed(w);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::SyndromeType(out[0].f.aeth_syndrome), wire::AethType::kRnrNak);
  EXPECT_EQ(peer.qp()->expected_psn(), kPeerPsn);
  peer.PostRecv(9);
  out = peer.Feed(w);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(wire::SyndromeType(out[0].f.aeth_syndrome), wire::AethType::kAck);
  const auto c = peer.Completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 9u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(c[0].byte_len, 0u);
  EXPECT_EQ(Bytes(c[0].imm_or_inv), (std::vector<uint8_t>{0xA0, 0x00, 0x00, 0x07}));
  EXPECT_EQ(peer.qp()->posted_receives(), 0u);
}

TEST(ZeroLength, ReadAnswersOneEmptyResponse) {
  Peer peer;
  PacketFields r = peer.Frame(wire::kRcReadRequest, kPeerPsn);
  r.reth_rkey = kJunkRkey;
  r.reth_va = kJunkVa;
  const auto out = peer.Feed(r);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcReadResponseOnly);
  EXPECT_EQ(out[0].f.bth.psn, kPeerPsn);
  EXPECT_EQ(out[0].p.payload_len, 0u);
  EXPECT_EQ(wire::SyndromeType(out[0].f.aeth_syndrome), wire::AethType::kAck);
  EXPECT_EQ(peer.qp()->expected_psn(), kPeerPsn + 1);
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);
}

TEST(ZeroLength, UcWriteNeedsNoKey) {
  Peer peer(256, 16, transport::QpType::kUc);
  peer.PostRecv(3);
  PacketFields w = peer.Frame(wire::kUcWriteOnlyImm, kPeerPsn);
  w.reth_rkey = kJunkRkey;
  w.reth_va = kJunkVa;
  w.imm_data = 0xA0000008;
  EXPECT_TRUE(peer.Feed(w).empty());
  const auto c = peer.Completions();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(c[0].byte_len, 0u);
}


// --- Responder errors raise the event verbs defines:
// access violation -> QP_ACCESS_ERR, invalid request -> QP_REQ_ERR, else
// QP_FATAL (IBTA 11.6.3.1, C9-222.1.1). lib/transport reports the kind,
// the verbs runtime turns it into the ibv_event_type (tests/verbs checks that).

TEST(ErrorEvent, ResponderAccessViolationIsAnAccessError) {
  Peer peer;
  PacketFields w = peer.Rdma(wire::kRcWriteOnly, kPeerPsn, 0, 16);
  w.reth_rkey ^= 0x100;
  const std::vector<uint8_t> payload(16, 1);
  w.payload = payload;
  ExpectNak(peer.Feed(w), wire::kNakRemoteAccessError, kPeerPsn, "bad rkey");
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kAccessError);
}

TEST(ErrorEvent, ResponderInvalidRequestIsARequestError) {
  Peer peer;
  const std::vector<uint8_t> payload(256, 1);
  PacketFields m = peer.Frame(wire::kRcWriteMiddle, kPeerPsn);  // no WRITE in progress
  m.payload = payload;
  ExpectNak(peer.Feed(m), wire::kNakInvalidRequest, kPeerPsn, "MIDDLE without FIRST");
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kRequestError);
}

TEST(ErrorEvent, RequesterErrorsAreFatalAndTheProgramsMoveIsNone) {
  Peer peer;
  ASSERT_EQ(peer.Post(peer.Wr(1, WrOpcode::kRdmaWrite, 0, 16)), 0);
  ASSERT_EQ(peer.Poll().size(), 1u);
  PacketFields nak = peer.Frame(wire::kRcAcknowledge, kOurPsn);
  nak.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kNak, wire::kNakRemoteAccessError);
  peer.Feed(nak);
  EXPECT_EQ(peer.qp()->state(), QpState::kErr);
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kFatal);
  peer.Reset();
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kNone);
  peer.Connect();
  transport::QpAttr a;
  a.qp_state = QpState::kErr;
  ASSERT_TRUE(peer.dev().ModifyQp(peer.qp()->qpn(), a, transport::kAttrState).ok());
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kNone);
}

// --- max_dest_rd_atomic: more READ/atomic requests
// outstanding than the responder resources negotiated is an invalid request
// (IBTA 9.9.3.1.3 class C; rxe NAKs invalid request when it has none). A
// request is outstanding until its last response left: a requester that keeps
// to its max_rd_atomic can never exceed it.

TEST(RdAtomicResources, OneMoreThanMaxDestRdAtomicIsNakedInvalidRequest) {
  Peer peer(256, /*max_dest_rd_atomic=*/2);
  peer.io().tx_room = 0;  // the responses wait in the queue
  const uint32_t p = kPeerPsn;
  peer.Feed({peer.Rdma(wire::kRcReadRequest, p, 0, 512), peer.Rdma(wire::kRcFetchAdd, p + 2, 8, 8)});
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);
  peer.Feed(peer.Rdma(wire::kRcReadRequest, p + 3, 0, 256));
  EXPECT_EQ(peer.qp()->state(), QpState::kErr);
  EXPECT_EQ(peer.qp()->error_event(), transport::QpEvent::kRequestError);
  EXPECT_EQ(peer.qp()->counters().rd_atomic_overflows, 1u);
  peer.io().tx_room = 64;
  const auto out = peer.Poll();
  ASSERT_EQ(out.size(), 4u);  // READ FIRST, LAST, atomic ACK, then the NAK
  EXPECT_EQ(out[0].p.opcode, wire::kRcReadResponseFirst);
  EXPECT_EQ(out[1].p.opcode, wire::kRcReadResponseLast);
  EXPECT_EQ(out[2].p.opcode, wire::kRcAtomicAcknowledge);
  ExpectNak({out[3]}, wire::kNakInvalidRequest, p + 3, "third READ/atomic");
}

TEST(RdAtomicResources, AResponseSentFreesItsResource) {
  Peer peer(256, /*max_dest_rd_atomic=*/1);
  for (uint32_t i = 0; i < 4; ++i) {
    const auto out = peer.Feed(peer.Rdma(i % 2 ? wire::kRcCompareSwap : wire::kRcReadRequest, kPeerPsn + i, 8, 8));
    ASSERT_EQ(out.size(), 1u) << i;
    EXPECT_NE(out[0].p.opcode, wire::kRcAcknowledge) << i;
  }
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);
}

TEST(RdAtomicResources, NoneNegotiatedNaksEveryRead) {
  Peer peer(256, /*max_dest_rd_atomic=*/0);
  ExpectNak(peer.Feed(peer.Rdma(wire::kRcReadRequest, kPeerPsn, 0, 8)), wire::kNakInvalidRequest, kPeerPsn,
            "READ with no responder resources");
}

// --- Duplicate READs: re-executed only for the original's
// range or a part of it, with its R_Key, inside its PSNs (rxe's
// duplicate_request); anything else is dropped.

TEST(DuplicateRead, AskingForMoreThanTheOriginalIsIgnored) {
  Peer peer(256);
  const uint32_t p = kPeerPsn;
  ASSERT_EQ(peer.Feed(peer.Rdma(wire::kRcReadRequest, p, 0, 512)).size(), 2u);  // PSNs p, p+1
  ASSERT_EQ(peer.qp()->expected_psn(), p + 2);
  // The whole READ again at its second PSN would be answered on p+1 and p+2.
  EXPECT_TRUE(peer.Feed(peer.Rdma(wire::kRcReadRequest, p + 1, 0, 512)).empty());
  // More bytes than the original, at its first PSN.
  EXPECT_TRUE(peer.Feed(peer.Rdma(wire::kRcReadRequest, p, 0, 1024)).empty());
  // Bytes before it, another R_Key.
  EXPECT_TRUE(peer.Feed(peer.Rdma(wire::kRcReadRequest, p, 8, 512)).empty());
  PacketFields other = peer.Rdma(wire::kRcReadRequest, p, 0, 512);
  other.reth_rkey ^= 0x100;
  EXPECT_TRUE(peer.Feed(other).empty());
  EXPECT_EQ(peer.qp()->counters().dropped_bad_duplicates, 4u);
  // What a requester retrying the lost second response asks for is answered.
  auto out = peer.Feed(peer.Rdma(wire::kRcReadRequest, p + 1, 256, 256));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].p.opcode, wire::kRcReadResponseOnly);
  EXPECT_EQ(out[0].f.bth.psn, p + 1);
  EXPECT_EQ(std::vector<uint8_t>(out[0].f.payload.begin(), out[0].f.payload.end()),
            std::vector<uint8_t>(peer.mem().begin() + 256, peer.mem().begin() + 512));
  // And the whole READ again from its first PSN.
  out = peer.Feed(peer.Rdma(wire::kRcReadRequest, p, 0, 512));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].f.bth.psn, p + 1);
  EXPECT_EQ(peer.qp()->state(), QpState::kRts);
  EXPECT_EQ(peer.qp()->expected_psn(), p + 2);
}

// --- NAK codes the requester does not know: Invalid RD
// Request (an RD-only code, syndrome 0x64) and the reserved codes complete
// REM_OP_ERR, as rxe's completer does.

TEST(NakSyndrome, UnknownCodesCompleteRemoteOperationalError) {
  struct Case {
    uint8_t code;
    WcStatus status;
  };
  for (Case c : {Case{1, WcStatus::kRemInvReqErr}, Case{2, WcStatus::kRemAccessErr}, Case{3, WcStatus::kRemOpErr},
                 Case{4, WcStatus::kRemOpErr}, Case{5, WcStatus::kRemOpErr}, Case{0x1F, WcStatus::kRemOpErr}}) {
    Peer peer;
    ASSERT_EQ(peer.Post(peer.Wr(1, WrOpcode::kRdmaWrite, 0, 16)), 0);
    ASSERT_EQ(peer.Poll().size(), 1u);
    PacketFields nak = peer.Frame(wire::kRcAcknowledge, kOurPsn);
    nak.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kNak, c.code);
    peer.Feed(nak);
    const auto wc = peer.Completions();
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, c.status) << "NAK code " << int(c.code) << ": " << queue::WcStatusName(wc[0].status);
  }
}


// --- Counters and the state RESET clears.

TEST(Counters, ADuplicateRequestsAckIsCountedOnce) {
  Peer peer;
  peer.PostRecv(1);
  PacketFields send = peer.Frame(wire::kRcSendOnly, kPeerPsn);
  send.bth.ack_req = true;
  size_t acks = peer.Feed(send).size();
  acks += peer.Feed(send).size();  // the duplicate is acknowledged again
  EXPECT_EQ(acks, 2u);
  EXPECT_EQ(peer.qp()->counters().duplicates_received, 1u);
  EXPECT_EQ(peer.qp()->counters().acks_sent, acks);
}

bool AnyOpcode(const std::vector<Sent>& out, uint8_t opcode) {
  return std::any_of(out.begin(), out.end(), [&](const Sent& s) { return s.p.opcode == opcode; });
}

TEST(Reset, ACnpOwedByTheOldConnectionIsNotSent) {
  Peer peer;
  peer.qp()->OnCongestionMark(peer.now());  // a CE-marked packet arrived; the CNP is not sent yet
  peer.Reset();
  peer.Connect();
  ASSERT_EQ(peer.Post(peer.Wr(1, WrOpcode::kRdmaWrite, 0, 16)), 0);
  const auto out = peer.Poll();
  EXPECT_FALSE(AnyOpcode(out, wire::kCnp));
  EXPECT_EQ(peer.qp()->counters().cnps_sent, 0u);
}

// The old connection's implied NAK (a READ response lost) must not stop the
// new one from asking again for its own READ at the same PSN.
TEST(Reset, AnImpliedNakOfTheOldConnectionIsForgotten) {
  Peer peer;
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(peer.Post(peer.Wr(1, WrOpcode::kRdmaRead, 0, 16)), 0);     // PSN kOurPsn
    ASSERT_EQ(peer.Post(peer.Wr(2, WrOpcode::kRdmaWrite, 64, 16)), 0);   // PSN kOurPsn + 1
    ASSERT_EQ(peer.Poll().size(), 2u) << round;
    PacketFields ack = peer.Frame(wire::kRcAcknowledge, kOurPsn + 1);  // no READ response came
    ack.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kAck, 0x1F);
    const auto out = peer.Feed(ack);
    ASSERT_FALSE(out.empty()) << "round " << round << ": the READ was not asked again";
    EXPECT_EQ(out[0].p.opcode, wire::kRcReadRequest) << round;
    EXPECT_EQ(out[0].f.bth.psn, kOurPsn) << round;
    peer.Reset();
    peer.Connect();
  }
}

// The old connection's RNR NAK must not make the new one take a sequence NAK
// for the same PSN as its echo.
TEST(Reset, AnRnrNakOfTheOldConnectionIsForgotten) {
  Peer peer;
  ASSERT_EQ(peer.Post(peer.Wr(1, WrOpcode::kSend, 0, 16)), 0);
  ASSERT_EQ(peer.Poll().size(), 1u);
  PacketFields rnr = peer.Frame(wire::kRcAcknowledge, kOurPsn);
  rnr.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kRnrNak, 20);
  peer.Feed(rnr);
  peer.Reset();
  peer.Connect();
  ASSERT_EQ(peer.Post(peer.Wr(2, WrOpcode::kSend, 0, 16)), 0);
  ASSERT_EQ(peer.Poll().size(), 1u);
  PacketFields seq = peer.Frame(wire::kRcAcknowledge, kOurPsn);
  seq.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kNak, wire::kNakPsnSequenceError);
  const auto out = peer.Feed(seq);
  ASSERT_EQ(out.size(), 1u) << "the sequence NAK was taken for an old RNR NAK's echo";
  EXPECT_EQ(out[0].p.opcode, wire::kRcSendOnly);
  EXPECT_EQ(out[0].f.bth.psn, kOurPsn);
}

}  // namespace
}  // namespace droce::core
