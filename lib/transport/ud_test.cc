// Unreliable Datagram QPs through the device: two devices on an in-memory
// wire and loopback inside one device. Checks the UD state machine, the
// wire format (SEND ONLY + DETH, the QP's UDP source port, ICRC), the GRH
// area at the start of the receive buffer (IPv4 and IPv6), src_qp and the
// flags of the completion, the Q_Key rules and the drops the device counts.
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "sim/wire/mem_wire.h"
#include "transport/ud_qp.h"
#include "wire/packet.h"

namespace droce::core {
namespace {

using queue::Completion;
using queue::WcStatus;
using transport::AddressVector;
using transport::QpAttr;
using transport::QpState;
using transport::RecvWr;
using transport::SendWr;
using transport::WrOpcode;
namespace t = droce::transport;

constexpr uint32_t kQkey = 0x11111111;

struct Node {
  std::unique_ptr<Device> dev;
  uint32_t pd = 0, cq = 0;
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 20);
  mem::MrKeys keys{};
};

struct Captured {
  std::vector<std::vector<uint8_t>> frames;
};

void Tap(void* ctx, int, const uint8_t* data, uint32_t len) {
  static_cast<Captured*>(ctx)->frames.emplace_back(data, data + len);
}

class UdTest : public ::testing::Test {
 protected:
  UdTest() : wire_(WireConfig()) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      cfg.has_ipv6_global = true;
      cfg.ipv6_global = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.qpn_base = 0x100 * (i + 1);
      n_[i].dev = std::make_unique<Device>(cfg, &wire_.end(i));
      Node& n = n_[i];
      n.pd = n.dev->AllocPd();
      n.cq = *n.dev->CreateCq(1024);
      n.keys = *n.dev->RegMr(n.pd, n.mem.data(), n.mem.size(), reinterpret_cast<uint64_t>(n.mem.data()),
                             mem::kLocalWrite);
    }
    for (int i = 0; i < 2; ++i) {
      const Device& peer = *n_[1 - i].dev;
      for (const Gid& g : peer.gids()) n_[i].dev->AddNeighbor(g, peer.config().mac);
    }
    wire_.set_tap(&Tap, &cap_);
  }

  static sim::MemWireConfig WireConfig() {
    sim::MemWireConfig c;
    c.pool_frames = 1024;
    c.queue_frames = 512;
    return c;
  }

  // A UD QP moved RESET -> INIT -> RTR -> RTS with the Q_Key.
  uint32_t UdQp(int node, uint32_t qkey = kQkey, uint32_t port_mtu = 1024) {
    Node& n = n_[node];
    QpInitAttr init;
    init.pd = n.pd;
    init.send_cq = init.recv_cq = n.cq;
    init.caps.type = t::QpType::kUd;
    init.caps.port_mtu = port_mtu;
    const uint32_t qpn = *n.dev->CreateQp(init);
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.qkey = qkey;
    EXPECT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrPkeyIndex | t::kAttrPort | t::kAttrQkey).ok());
    a.qp_state = QpState::kRtr;
    EXPECT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState).ok());
    a.qp_state = QpState::kRts;
    a.sq_psn = 0x123456;
    EXPECT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrSqPsn).ok());
    return qpn;
  }

  uint32_t Ah(int node, const Gid& dgid, uint8_t sgid_index) {
    AddressVector av;
    av.dgid = dgid;
    av.sgid_index = sgid_index;
    absl::StatusOr<uint32_t> ah = n_[node].dev->CreateAh(n_[node].pd, av);
    EXPECT_TRUE(ah.ok()) << ah.status();
    return ah.ok() ? *ah : 0;
  }

  SendWr Send(int node, uint64_t off, uint32_t len, uint32_t ah, uint32_t rqpn, uint32_t qkey = kQkey) {
    SendWr wr;
    wr.wr_id = 0x5000 + off;
    wr.opcode = WrOpcode::kSend;
    wr.flags = t::kSendSignaled;
    wr.num_sge = 1;
    wr.sg_list[0] = {reinterpret_cast<uint64_t>(n_[node].mem.data()) + off, len, n_[node].keys.lkey};
    wr.ah = ah;
    wr.remote_qpn = rqpn;
    wr.remote_qkey = qkey;
    return wr;
  }

  RecvWr Recv(int node, uint64_t id, uint64_t off, uint32_t len) {
    RecvWr wr;
    wr.wr_id = id;
    wr.num_sge = 1;
    wr.sg_list[0] = {reinterpret_cast<uint64_t>(n_[node].mem.data()) + off, len, n_[node].keys.lkey};
    return wr;
  }

  // Polls both devices until the CQs hold `want` completions each.
  void Run(std::vector<Completion>* c0, size_t want0, std::vector<Completion>* c1, size_t want1) {
    Completion buf[16];
    for (int round = 0; round < 200; ++round) {
      now_ += 1000;
      n_[0].dev->Poll(now_);
      n_[1].dev->Poll(now_);
      for (uint32_t k; (k = n_[0].dev->PollCq(n_[0].cq, buf, 16)) > 0;) c0->insert(c0->end(), buf, buf + k);
      for (uint32_t k; (k = n_[1].dev->PollCq(n_[1].cq, buf, 16)) > 0;) c1->insert(c1->end(), buf, buf + k);
      if (c0->size() >= want0 && c1->size() >= want1 && round > 5) return;
    }
  }

  sim::MemWire wire_;
  Node n_[2];
  Captured cap_;
  uint64_t now_ = 1'000'000;
};

TEST_F(UdTest, StateMachineTakesUdAttributesOnly) {
  Node& n = n_[0];
  QpInitAttr init;
  init.pd = n.pd;
  init.send_cq = init.recv_cq = n.cq;
  init.caps.type = t::QpType::kUd;
  const uint32_t qpn = *n.dev->CreateQp(init);
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.qkey = 0x42;
  // RESET -> INIT needs the Q_Key (IBTA Table 91, UD).
  EXPECT_FALSE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrPkeyIndex | t::kAttrPort).ok());
  // Access flags are an RC/UC attribute.
  EXPECT_FALSE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrPkeyIndex | t::kAttrPort | t::kAttrQkey |
                                           t::kAttrAccessFlags).ok());
  ASSERT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrPkeyIndex | t::kAttrPort | t::kAttrQkey).ok());
  EXPECT_EQ(n.dev->qp(qpn)->attr().qkey, 0x42u);
  // INIT -> RTR: no path, no destination QP.
  a.qp_state = QpState::kRtr;
  EXPECT_FALSE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrDestQpn).ok());
  ASSERT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState).ok());
  // RTR -> RTS needs the SQ PSN; the Q_Key may change on the way.
  a.qp_state = QpState::kRts;
  EXPECT_FALSE(n.dev->ModifyQp(qpn, a, t::kAttrState).ok());
  a.qkey = 0x43;
  ASSERT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrSqPsn | t::kAttrQkey).ok());
  EXPECT_EQ(n.dev->qp(qpn)->attr().qkey, 0x43u);
  a.qp_state = QpState::kSqd;
  ASSERT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState).ok());
  a.qp_state = QpState::kRts;
  ASSERT_TRUE(n.dev->ModifyQp(qpn, a, t::kAttrState | t::kAttrQkey).ok());
}

TEST_F(UdTest, PostSendRejectsWhatUdCannotSend) {
  const uint32_t q = UdQp(0);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  SendWr wr = Send(0, 0, 16, ah, 0x200);
  wr.opcode = WrOpcode::kRdmaWrite;
  EXPECT_EQ(n_[0].dev->PostSend(q, wr), EINVAL);
  wr.opcode = WrOpcode::kRdmaRead;
  EXPECT_EQ(n_[0].dev->PostSend(q, wr), EINVAL);
  wr = Send(0, 0, 16, ah + 7, 0x200);  // no such AH
  EXPECT_EQ(n_[0].dev->PostSend(q, wr), EINVAL);
  ASSERT_TRUE(n_[0].dev->DestroyAh(ah).ok());
  EXPECT_EQ(n_[0].dev->PostSend(q, Send(0, 0, 16, ah, 0x200)), EINVAL);  // destroyed
  EXPECT_FALSE(n_[0].dev->DestroyAh(ah).ok());
}

TEST_F(UdTest, DatagramOverIpv4CarriesDethAndFillsTheGrhArea) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  for (uint32_t i = 0; i < 512; ++i) n_[0].mem[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 77, 4096, 40 + 512)), 0);
  SendWr wr = Send(0, 0, 512, ah, qb);
  wr.opcode = WrOpcode::kSendWithImm;
  wr.imm_data = 0x01020304;
  wr.flags |= t::kSendSolicited;
  ASSERT_EQ(n_[0].dev->PostSend(qa, wr), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 1);
  ASSERT_EQ(c0.size(), 1u);
  EXPECT_EQ(c0[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c0[0].opcode, queue::WcOpcode::kSend);
  ASSERT_EQ(c1.size(), 1u);
  const Completion& r = c1[0];
  EXPECT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(r.wr_id, 77u);
  EXPECT_EQ(r.opcode, queue::WcOpcode::kRecv);
  EXPECT_EQ(r.byte_len, 40u + 512u);
  EXPECT_EQ(r.src_qp, qa);
  EXPECT_EQ(r.qp_num, qb);
  EXPECT_EQ(r.flags & (queue::kWcGrh | queue::kWcWithImm), queue::kWcGrh | queue::kWcWithImm);
  EXPECT_EQ(r.imm_or_inv, 0x01020304u);
  // ibv_wc.sl says the GRH area holds an IPv4 header (UCX's ud_verbs then
  // reads the destination address from its last 4 bytes, not a 16-byte GID).
  EXPECT_EQ(r.sl, t::kRoceL3Ipv4);
  // GRH area: 20 zero bytes, then the IPv4 header (10.0.0.1 -> 10.0.0.2).
  const uint8_t* grh = n_[1].mem.data() + 4096;
  for (int i = 0; i < 20; ++i) ASSERT_EQ(grh[i], 0) << i;
  EXPECT_EQ(grh[20], 0x45);
  EXPECT_EQ(grh[20 + 9], 17);  // UDP
  const uint8_t src[4] = {10, 0, 0, 1}, dst[4] = {10, 0, 0, 2};
  EXPECT_EQ(std::memcmp(grh + 20 + 12, src, 4), 0);
  EXPECT_EQ(std::memcmp(grh + 20 + 16, dst, 4), 0);
  EXPECT_EQ(std::memcmp(grh + 40, n_[0].mem.data(), 512), 0);
  // On the wire: one UD SEND ONLY WITH IMMEDIATE, DETH with the Q_Key and
  // the source QPN, the QP's UDP source port, a good ICRC.
  ASSERT_EQ(cap_.frames.size(), 1u);
  const std::vector<uint8_t>& f = cap_.frames[0];
  const wire::ParsedPacket p = wire::ParseAndVerify(f.data(), static_cast<uint32_t>(f.size()));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.opcode, wire::kUdSendOnlyImm);
  const wire::BthView bth(f.data() + p.bth_offset);
  EXPECT_EQ(bth.dest_qp(), qb);
  EXPECT_EQ(bth.psn(), 0x123456u);
  EXPECT_TRUE(bth.solicited());
  EXPECT_FALSE(bth.mig_req());
  EXPECT_FALSE(bth.ack_req());
  const wire::DethView deth(f.data() + p.bth_offset + p.op().deth_offset);
  EXPECT_EQ(deth.qkey(), kQkey);
  EXPECT_EQ(deth.src_qp(), qa);
  EXPECT_EQ(wire::LoadBe16(f.data() + p.l4_offset), t::UdSourcePort(qa));
  EXPECT_EQ(p.payload_len, 512u);
}

TEST_F(UdTest, UdSourcePortIsRxes) {
  // rxe's QP 0x14 sends from port 0xe8ea (../shared/pcaps/ud_pingpong_512.pcap).
  EXPECT_EQ(t::UdSourcePort(0x14), 0xe8ea);
}

TEST_F(UdTest, DatagramOverIpv6PutsTheIpv6HeaderInTheGrhArea) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[2], 2);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 1, 0, 40 + 100)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 100, ah, qb)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c1[0].byte_len, 140u);
  EXPECT_EQ(c1[0].sl, t::kRoceL3Ipv6);
  const uint8_t* grh = n_[1].mem.data();
  EXPECT_EQ(grh[0] >> 4, 6);
  EXPECT_EQ(grh[6], 17);  // next header UDP
  EXPECT_EQ(std::memcmp(grh + 8, n_[0].dev->gids()[2].data(), 16), 0);
  EXPECT_EQ(std::memcmp(grh + 24, n_[1].dev->gids()[2].data(), 16), 0);
  EXPECT_EQ(std::memcmp(grh + 40, n_[0].mem.data(), 100), 0);
}

TEST_F(UdTest, GrhAndPayloadScatterAcrossSges) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  for (uint32_t i = 0; i < 64; ++i) n_[0].mem[i] = static_cast<uint8_t>(0xA0 + i);
  RecvWr r = Recv(1, 9, 0, 30);  // GRH split 30 + 10, then the payload
  r.num_sge = 2;
  r.sg_list[1] = {reinterpret_cast<uint64_t>(n_[1].mem.data()) + 1000, 200, n_[1].keys.lkey};
  ASSERT_EQ(n_[1].dev->PostRecv(qb, r), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 64, ah, qb)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].status, WcStatus::kSuccess);
  const uint8_t src[4] = {10, 0, 0, 1};  // GRH bytes 32..35: the IPv4 source address
  EXPECT_EQ(std::memcmp(n_[1].mem.data() + 1002, src, 4), 0);
  EXPECT_EQ(std::memcmp(n_[1].mem.data() + 1010, n_[0].mem.data(), 64), 0);
}

TEST_F(UdTest, QkeyMismatchIsDroppedAndCountedControlledQkeyUsesTheQps) {
  const uint32_t qa = UdQp(0, /*qkey=*/0x80001234);
  const uint32_t qb = UdQp(1, /*qkey=*/0x80001234);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 1, 0, 256)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, qb, /*qkey=*/0x1234)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 0);
  EXPECT_EQ(c0.size(), 1u);
  EXPECT_TRUE(c1.empty());
  EXPECT_EQ(n_[1].dev->counters().rx_ud_drop_qkey, 1u);
  EXPECT_EQ(n_[1].dev->qp(qb)->counters().ud_dropped_qkey, 1u);
  // High bit set in the WR: the sending QP's own Q_Key goes on the wire.
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, qb, /*qkey=*/0x80000000)), 0);
  Run(&c0, 2, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].status, WcStatus::kSuccess);
  EXPECT_EQ(n_[1].dev->counters().rx_ud_drop_qkey, 1u);
}

TEST_F(UdTest, NoReceivePostedDropsTheDatagram) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, qb)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 0);
  ASSERT_EQ(c0.size(), 1u);
  EXPECT_EQ(c0[0].status, WcStatus::kSuccess);  // UD: no RNR, the sender never knows
  EXPECT_EQ(n_[1].dev->counters().rx_ud_no_recv, 1u);
  // The next datagram finds its receive.
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 2, 0, 256)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, qb)), 0);
  Run(&c0, 2, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].wr_id, 2u);
}

TEST_F(UdTest, LongerThanThePortMtuSendsNothingAndCompletes) {
  const uint32_t qa = UdQp(0, kQkey, /*port_mtu=*/1024);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 1, 0, 4096)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 1025, ah, qb)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 1024, ah, qb)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 2, &c1, 1);
  ASSERT_EQ(c0.size(), 2u);
  EXPECT_EQ(c0[0].status, WcStatus::kSuccess);  // C10-93.1.1: no packet, no error (as rxe)
  EXPECT_EQ(c0[1].status, WcStatus::kSuccess);
  EXPECT_EQ(cap_.frames.size(), 1u);  // only the 1024-byte one went out
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].byte_len, 40u + 1024u);
  EXPECT_EQ(n_[0].dev->qp(qa)->counters().ud_oversize_sends, 1u);
}

TEST_F(UdTest, ReceiveTooSmallCompletesWithLengthErrorAndTheQpGoesOn) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 1, 0, 40 + 99)), 0);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 2, 4096, 40 + 100)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 100, ah, qb)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 100, ah, qb)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 2, &c1, 2);
  ASSERT_EQ(c1.size(), 2u);
  EXPECT_EQ(c1[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(c1[1].status, WcStatus::kSuccess);
  EXPECT_EQ(n_[1].dev->qp(qb)->state(), QpState::kRts);
}

TEST_F(UdTest, LoopbackBetweenTwoQpsOfOneDevice) {
  const uint32_t q1 = UdQp(0);
  const uint32_t q2 = UdQp(0);
  const uint32_t ah = Ah(0, n_[0].dev->gids()[1], 1);  // our own GID
  for (uint32_t i = 0; i < 32; ++i) n_[0].mem[i] = static_cast<uint8_t>(i + 3);
  ASSERT_EQ(n_[0].dev->PostRecv(q2, Recv(0, 5, 8192, 256)), 0);
  ASSERT_EQ(n_[0].dev->PostSend(q1, Send(0, 0, 32, ah, q2)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 2, &c1, 0);
  ASSERT_EQ(c0.size(), 2u);
  const Completion& r = c0[0].opcode == queue::WcOpcode::kRecv ? c0[0] : c0[1];
  EXPECT_EQ(r.status, WcStatus::kSuccess);
  EXPECT_EQ(r.src_qp, q1);
  EXPECT_EQ(r.qp_num, q2);
  EXPECT_EQ(std::memcmp(n_[0].mem.data() + 8192 + 40, n_[0].mem.data(), 32), 0);
  EXPECT_TRUE(cap_.frames.empty());  // turned around inside the device
}

TEST_F(UdTest, RcPacketToAUdQpIsNotDelivered) {
  const uint32_t qb = UdQp(1);
  ASSERT_EQ(n_[1].dev->PostRecv(qb, Recv(1, 1, 0, 256)), 0);
  // An RC QP on node 0 aimed at the UD QP's number.
  QpInitAttr init;
  init.pd = n_[0].pd;
  init.send_cq = init.recv_cq = n_[0].cq;
  const uint32_t rc = *n_[0].dev->CreateQp(init);
  QpAttr a;
  a.qp_state = QpState::kInit;
  ASSERT_TRUE(n_[0].dev->ModifyQp(rc, a, t::kAttrState | t::kAttrPkeyIndex | t::kAttrPort | t::kAttrAccessFlags).ok());
  a.qp_state = QpState::kRtr;
  a.ah.dgid = n_[1].dev->gids()[1];
  a.ah.sgid_index = 1;
  a.dest_qp_num = qb;
  ASSERT_TRUE(n_[0].dev->ModifyQp(rc, a, t::kAttrState | t::kAttrAv | t::kAttrPathMtu | t::kAttrDestQpn |
                                             t::kAttrRqPsn | t::kAttrMaxDestRdAtomic | t::kAttrMinRnrTimer).ok());
  a.qp_state = QpState::kRts;
  ASSERT_TRUE(n_[0].dev->ModifyQp(rc, a, t::kAttrState | t::kAttrSqPsn | t::kAttrTimeout | t::kAttrRetryCnt |
                                             t::kAttrRnrRetry | t::kAttrMaxQpRdAtomic).ok());
  SendWr wr = Send(0, 0, 8, 0, 0);
  ASSERT_EQ(n_[0].dev->PostSend(rc, wr), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 0, &c1, 0);
  EXPECT_TRUE(c1.empty());
  EXPECT_GE(n_[1].dev->counters().rx_unknown_qp, 1u);
}

Gid V4Group(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

// ibv_resize_cq (pyverbs' test_resize_cq fills a CQ with UD send completions).
TEST_F(UdTest, ResizeCqKeepsCompletionsAndRefusesToDropThem) {
  const uint32_t qa = UdQp(0);
  const uint32_t qb = UdQp(1);
  const uint32_t ah = Ah(0, n_[1].dev->gids()[1], 1);
  Device& a = *n_[0].dev;
  ASSERT_TRUE(a.ResizeCq(n_[0].cq, 1).ok());
  ASSERT_TRUE(a.ResizeCq(n_[0].cq, 7).ok());
  EXPECT_EQ(a.cq(n_[0].cq)->depth(), 7u);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(a.PostSend(qa, Send(0, 0, 8, ah, qb)), 0);
  for (int i = 0; i < 5; ++i) a.Poll(now_ += 1000);
  ASSERT_EQ(a.cq(n_[0].cq)->size(), 6u);
  EXPECT_FALSE(a.ResizeCq(n_[0].cq, 1).ok());  // would lose completions
  ASSERT_TRUE(a.ResizeCq(n_[0].cq, 6).ok());
  Completion c[8];
  ASSERT_EQ(a.PollCq(n_[0].cq, c, 8), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i].status, WcStatus::kSuccess);
  EXPECT_FALSE(a.ResizeCq(n_[0].cq + 9, 4).ok());
}

// QPN 0xFFFFFF is the multicast QPN: a device whose range ends there never
// gives it to a QP (a unicast datagram to it would be taken for multicast).
TEST(UdMulticast, NoQpGetsTheMulticastQpn) {
  DeviceConfig cfg;
  cfg.qpn_base = 0xFFFFFC;
  cfg.max_qp = 4;
  Device dev(cfg, nullptr);
  ASSERT_EQ(dev.qpn_base(), 0xFFFFFCu);
  const uint32_t pd = dev.AllocPd();
  const uint32_t cq = *dev.CreateCq(16);
  QpInitAttr init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  init.caps.type = t::QpType::kUd;
  std::vector<uint32_t> qpns;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<uint32_t> q = dev.CreateQp(init);
    if (q.ok()) qpns.push_back(*q);
  }
  EXPECT_EQ(qpns, (std::vector<uint32_t>{0xFFFFFC, 0xFFFFFD, 0xFFFFFE}));
}

TEST(UdMulticast, GroupMacsAreRfc1112AndRfc2464) {
  EXPECT_EQ(*MulticastMac(V4Group(239, 129, 2, 3)), (Mac{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  const Gid v6{0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0x12, 0x34};
  EXPECT_EQ(*MulticastMac(v6), (Mac{0x33, 0x33, 0xde, 0xad, 0x12, 0x34}));
  EXPECT_FALSE(MulticastMac(V4Group(10, 0, 0, 1)).has_value());
  EXPECT_FALSE(MulticastMac(Gid{0xfe, 0x80}).has_value());
}

TEST_F(UdTest, MulticastReachesEveryAttachedQpAndOnlyThem) {
  const uint32_t qa = UdQp(0);
  const uint32_t m1 = UdQp(1);
  const uint32_t m2 = UdQp(1);
  const uint32_t other = UdQp(1);
  const Gid group = V4Group(239, 1, 2, 3);
  Device& b = *n_[1].dev;
  // Only UD QPs, only multicast GIDs.
  EXPECT_FALSE(b.AttachMcast(m1, V4Group(10, 0, 0, 2)).ok());
  QpInitAttr rc;
  rc.pd = n_[1].pd;
  rc.send_cq = rc.recv_cq = n_[1].cq;
  EXPECT_FALSE(b.AttachMcast(*b.CreateQp(rc), group).ok());
  const uint32_t ah = Ah(0, group, 1);
  uint64_t slot = 0;
  for (uint32_t q : {m1, m2, other}) {
    for (int k = 0; k < 3; ++k, ++slot) ASSERT_EQ(b.PostRecv(q, Recv(1, slot, slot * 256, 256)), 0);
  }
  // Not joined yet: the group's MAC is not accepted.
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, t::kMulticastQpn)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 0);
  EXPECT_TRUE(c1.empty());
  EXPECT_EQ(b.counters().rx_drop_dst_mac, 1u);
  ASSERT_EQ(cap_.frames.size(), 1u);
  EXPECT_EQ(std::memcmp(cap_.frames[0].data(), MulticastMac(group)->data(), 6), 0);
  const uint8_t dst_ip[4] = {239, 1, 2, 3};
  EXPECT_EQ(std::memcmp(cap_.frames[0].data() + 14 + 16, dst_ip, 4), 0);
  ASSERT_TRUE(b.AttachMcast(m1, group).ok());
  ASSERT_TRUE(b.AttachMcast(m2, group).ok());
  ASSERT_TRUE(b.AttachMcast(m2, group).ok());  // twice: still once (as rxe)
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, t::kMulticastQpn)), 0);
  c1.clear();
  Run(&c0, 2, &c1, 2);
  ASSERT_EQ(c1.size(), 2u);
  for (const Completion& c : c1) {
    EXPECT_EQ(c.status, WcStatus::kSuccess);
    EXPECT_TRUE(c.qp_num == m1 || c.qp_num == m2);
    EXPECT_EQ(c.src_qp, qa);
  }
  EXPECT_NE(c1[0].qp_num, c1[1].qp_num);
  EXPECT_EQ(b.counters().rx_mcast, 1u);
  // Detached: m2 only.
  ASSERT_TRUE(b.DetachMcast(m1, group).ok());
  EXPECT_FALSE(b.DetachMcast(m1, group).ok());
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, t::kMulticastQpn)), 0);
  c1.clear();
  Run(&c0, 3, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].qp_num, m2);
  // The last member destroyed: the group is gone, its MAC refused again.
  ASSERT_TRUE(b.DestroyQp(m2).ok());
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 8, ah, t::kMulticastQpn)), 0);
  c1.clear();
  Run(&c0, 4, &c1, 0);
  EXPECT_TRUE(c1.empty());
  EXPECT_EQ(b.counters().rx_drop_dst_mac, 2u);
}

TEST_F(UdTest, Ipv6MulticastGroup) {
  const uint32_t qa = UdQp(0);
  const uint32_t m = UdQp(1);
  const Gid group{0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34};
  ASSERT_TRUE(n_[1].dev->AttachMcast(m, group).ok());
  ASSERT_EQ(n_[1].dev->PostRecv(m, Recv(1, 1, 0, 256)), 0);
  const uint32_t ah = Ah(0, group, 2);
  ASSERT_EQ(n_[0].dev->PostSend(qa, Send(0, 0, 16, ah, t::kMulticastQpn)), 0);
  std::vector<Completion> c0, c1;
  Run(&c0, 1, &c1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(n_[1].mem.data() + 24, group.data(), 16), 0);  // GRH: destination = the group
}

}  // namespace
}  // namespace droce::core
