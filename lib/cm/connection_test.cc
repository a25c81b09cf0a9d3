// The CM state machine frame by frame: two Connection objects exchange the
// MADs each step returns (through SerializeMad/ParseMad, as on the wire), and
// the tests assert on states, upcalls and what is sent.
#include "cm/connection.h"

#include <gtest/gtest.h>

#include "cm/rdma_cm.h"

namespace droce::cm {
namespace {

constexpr uint64_t kActiveGuid = 0x0202020202020202;
constexpr uint64_t kPassiveGuid = 0x0303030303030303;

Req MakeReq() {
  Req r;
  r.service_id = ServiceId(PortSpace::kTcp, 7174);
  r.local_ca_guid = kActiveGuid;
  r.local_qpn = 0x400;
  r.starting_psn = 0x111;
  r.remote_cm_response_timeout = 20;  // 4096 ms, rdma_cm's value
  r.local_cm_response_timeout = 20;
  r.max_cm_retries = 15;
  r.path_mtu = 3;
  return r;
}

Rep MakeRep() {
  Rep r;
  r.local_qpn = 0x800;
  r.starting_psn = 0x222;
  r.local_ca_guid = kPassiveGuid;
  return r;
}

// What crosses the wire: the serialised MAD, parsed again.
CmMessage Wire(const std::optional<CmMessage>& m) {
  EXPECT_TRUE(m.has_value());
  const auto bytes = SerializeMad(*m);
  const ParsedMad p = ParseMad(bytes);
  EXPECT_TRUE(p.ok()) << MadErrorName(p.error);
  return p.message;
}

AttrId Sent(const Step& s) { return s.send ? AttrOf(s.send->body) : AttrId::kClassPortInfo; }

struct Pair {
  Connection active{0x1001};
  Connection passive{0x2002};
  uint64_t now = 1000;

  void Establish() {
    auto req = active.SendReq(MakeReq(), 0xABC, now);
    ASSERT_TRUE(req.ok());
    ASSERT_EQ(passive.OnMad(Wire(req->send), now).upcall, Upcall::kReqReceived);
    auto rep = passive.SendRep(MakeRep(), now);
    ASSERT_TRUE(rep.ok());
    ASSERT_EQ(active.OnMad(Wire(rep->send), now).upcall, Upcall::kRepReceived);
    auto rtu = active.SendRtu(Rtu{});
    ASSERT_TRUE(rtu.ok());
    ASSERT_EQ(passive.OnMad(Wire(rtu->send), now).upcall, Upcall::kRtuReceived);
    ASSERT_EQ(active.state(), State::kEstablished);
    ASSERT_EQ(passive.state(), State::kEstablished);
  }
};

TEST(CmConnection, StateNamesCoverEveryState) {
  for (int s = 0; s < static_cast<int>(State::kCount); ++s) {
    EXPECT_NE(StateName(static_cast<State>(s)), "UNKNOWN");
  }
  EXPECT_EQ(StateName(State::kMraReqRcvd), "MRA_REQ_RCVD");
  for (int u = 0; u < static_cast<int>(Upcall::kCount); ++u) {
    EXPECT_NE(UpcallName(static_cast<Upcall>(u)), "unknown");
  }
}

TEST(CmConnection, ReqRepRtuEstablishesBothSides) {
  Pair p;
  auto req = p.active.SendReq(MakeReq(), 0xABC, p.now);
  ASSERT_TRUE(req.ok());
  EXPECT_EQ(p.active.state(), State::kReqSent);
  const CmMessage req_msg = Wire(req->send);
  EXPECT_EQ(req_msg.header.tid, 0xABCu);
  EXPECT_EQ(std::get<Req>(req_msg.body).local_comm_id, 0x1001u);
  EXPECT_EQ(p.active.deadline_ms(), p.now + 2 * 256 + 4096);  // 2 x packet life time + response timeout

  EXPECT_EQ(p.passive.OnMad(req_msg, p.now).upcall, Upcall::kReqReceived);
  EXPECT_EQ(p.passive.state(), State::kReqRcvd);
  EXPECT_EQ(p.passive.remote_comm_id(), 0x1001u);
  EXPECT_EQ(p.passive.remote_qpn(), 0x400u);

  auto rep = p.passive.SendRep(MakeRep(), p.now);
  ASSERT_TRUE(rep.ok());
  const CmMessage rep_msg = Wire(rep->send);
  EXPECT_EQ(rep_msg.header.tid, 0xABCu);  // the REQ's transaction id, as Linux
  EXPECT_EQ(std::get<Rep>(rep_msg.body).local_comm_id, 0x2002u);
  EXPECT_EQ(std::get<Rep>(rep_msg.body).remote_comm_id, 0x1001u);
  EXPECT_EQ(p.passive.state(), State::kRepSent);

  EXPECT_EQ(p.active.OnMad(rep_msg, p.now).upcall, Upcall::kRepReceived);
  EXPECT_EQ(p.active.state(), State::kRepRcvd);
  EXPECT_FALSE(p.active.deadline_ms().has_value());
  EXPECT_EQ(p.active.remote_qpn(), 0x800u);

  auto rtu = p.active.SendRtu(Rtu{});
  ASSERT_TRUE(rtu.ok());
  EXPECT_EQ(p.passive.OnMad(Wire(rtu->send), p.now).upcall, Upcall::kRtuReceived);
  EXPECT_EQ(p.active.state(), State::kEstablished);
  EXPECT_EQ(p.passive.state(), State::kEstablished);
  EXPECT_FALSE(p.passive.deadline_ms().has_value());
}

TEST(CmConnection, LocalCallsInTheWrongStateFail) {
  Connection c(1);
  EXPECT_FALSE(c.SendRtu(Rtu{}).ok());
  EXPECT_FALSE(c.SendRep(Rep{}, 0).ok());
  EXPECT_FALSE(c.SendMra(1).ok());
  EXPECT_FALSE(c.SendDreq(1, 0).ok());
  EXPECT_FALSE(c.SendDrep(0).ok());
  EXPECT_FALSE(c.SendRej(28, 0).ok());
  ASSERT_TRUE(c.SendReq(MakeReq(), 1, 0).ok());
  EXPECT_FALSE(c.SendReq(MakeReq(), 1, 0).ok());
  std::array<uint8_t, kRejPrivateDataSize + 1> big{};
  EXPECT_FALSE(c.SendRej(28, 0, big).ok());
  EXPECT_EQ(c.state(), State::kReqSent);
}

TEST(CmConnection, ReqIsRetriedThenReportsReqError) {
  Connection c(7);
  Req req = MakeReq();
  req.max_cm_retries = 2;
  ASSERT_TRUE(c.SendReq(req, 1, 0).ok());
  const uint64_t t = 2 * 256 + 4096;
  EXPECT_FALSE(c.OnTimer(t - 1).send.has_value());
  Step s = c.OnTimer(t);
  EXPECT_EQ(Sent(s), AttrId::kReq);
  s = c.OnTimer(2 * t);
  EXPECT_EQ(Sent(s), AttrId::kReq);
  s = c.OnTimer(3 * t);
  EXPECT_FALSE(s.send.has_value());
  EXPECT_EQ(s.upcall, Upcall::kReqError);
  EXPECT_EQ(c.state(), State::kIdle);
  EXPECT_FALSE(c.deadline_ms().has_value());
}

TEST(CmConnection, NoListenerRejectWithInvalidServiceId) {
  Connection active(0x55);
  auto req = active.SendReq(MakeReq(), 0x77, 0);
  ASSERT_TRUE(req.ok());
  const CmMessage rej = Wire(RejectUnmatchedReq(Wire(req->send), RejReason::kInvalidServiceId));
  EXPECT_EQ(rej.header.tid, 0x77u);
  const Rej& r = std::get<Rej>(rej.body);
  EXPECT_EQ(r.remote_comm_id, 0x55u);
  EXPECT_EQ(r.message_rejected, MsgRef::kReq);
  Step s = active.OnMad(rej, 10);
  EXPECT_EQ(s.upcall, Upcall::kRejReceived);
  EXPECT_EQ(active.state(), State::kIdle);
  EXPECT_FALSE(active.deadline_ms().has_value());  // no retry after a REJ: fails at once
}

TEST(CmConnection, MraExtendsTheReqTimeoutAndADuplicateReqGetsTheMraAgain) {
  Pair p;
  auto req = p.active.SendReq(MakeReq(), 1, 0);
  ASSERT_TRUE(req.ok());
  const CmMessage req_msg = Wire(req->send);
  ASSERT_EQ(p.passive.OnMad(req_msg, 0).upcall, Upcall::kReqReceived);
  auto mra = p.passive.SendMra(24);  // 2^16 ms
  ASSERT_TRUE(mra.ok());
  EXPECT_EQ(p.passive.state(), State::kMraReqSent);
  Step s = p.active.OnMad(Wire(mra->send), 100);
  EXPECT_EQ(s.upcall, Upcall::kMraReceived);
  EXPECT_EQ(p.active.state(), State::kMraReqRcvd);
  EXPECT_EQ(p.active.deadline_ms(), 100 + 512 + 65536);
  // The REQ is retried (it crossed the MRA): the passive side answers with its MRA.
  s = p.passive.OnMad(req_msg, 200);
  EXPECT_EQ(s.ignored, Ignored::kDuplicate);
  EXPECT_EQ(Sent(s), AttrId::kMra);
  // A REP still completes the exchange from MRA_REQ_RCVD.
  auto rep = p.passive.SendRep(MakeRep(), 300);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(p.active.OnMad(Wire(rep->send), 300).upcall, Upcall::kRepReceived);
}

TEST(CmConnection, DuplicateRepGetsTheRtuAgain) {
  Pair p;
  auto req = p.active.SendReq(MakeReq(), 1, 0);
  p.passive.OnMad(Wire(req->send), 0);
  auto rep = p.passive.SendRep(MakeRep(), 0);
  const CmMessage rep_msg = Wire(rep->send);
  p.active.OnMad(rep_msg, 0);
  auto rtu = p.active.SendRtu(Rtu{});
  ASSERT_TRUE(rtu.ok());
  // The RTU was lost: the passive side retries its REP.
  Step retry = p.passive.OnTimer(*p.passive.deadline_ms());
  EXPECT_EQ(Sent(retry), AttrId::kRep);
  Step s = p.active.OnMad(Wire(retry.send), 10);
  EXPECT_EQ(s.ignored, Ignored::kDuplicate);
  EXPECT_EQ(Sent(s), AttrId::kRtu);
  EXPECT_EQ(p.passive.OnMad(Wire(s.send), 10).upcall, Upcall::kRtuReceived);
}

TEST(CmConnection, RepWithoutRtuEndsInRepErrorUnlessTrafficArrives) {
  Pair p;
  Req req = MakeReq();
  req.max_cm_retries = 1;
  auto sreq = p.active.SendReq(req, 1, 0);
  p.passive.OnMad(Wire(sreq->send), 0);
  ASSERT_TRUE(p.passive.SendRep(MakeRep(), 0).ok());
  Connection other = p.passive;
  // Traffic on the QP before the RTU establishes the connection (IBTA 12.9.7.3).
  EXPECT_EQ(other.CommEstablished().upcall, Upcall::kUserEstablished);
  EXPECT_EQ(other.state(), State::kEstablished);
  EXPECT_EQ(Sent(p.passive.OnTimer(*p.passive.deadline_ms())), AttrId::kRep);
  Step s = p.passive.OnTimer(*p.passive.deadline_ms());
  EXPECT_EQ(s.upcall, Upcall::kRepError);
  EXPECT_EQ(p.passive.state(), State::kIdle);
}

TEST(CmConnection, DisconnectDreqDrepTimewait) {
  Pair p;
  p.Establish();
  auto dreq = p.active.SendDreq(0x99, 5000);
  ASSERT_TRUE(dreq.ok());
  EXPECT_EQ(p.active.state(), State::kDreqSent);
  const CmMessage dreq_msg = Wire(dreq->send);
  EXPECT_EQ(std::get<Dreq>(dreq_msg.body).remote_qpn, 0x800u);
  EXPECT_EQ(p.passive.OnMad(dreq_msg, 5000).upcall, Upcall::kDreqReceived);
  EXPECT_EQ(p.passive.state(), State::kDreqRcvd);
  auto drep = p.passive.SendDrep(5000);
  ASSERT_TRUE(drep.ok());
  const CmMessage drep_msg = Wire(drep->send);
  EXPECT_EQ(drep_msg.header.tid, 0x99u);
  EXPECT_EQ(p.passive.state(), State::kTimewait);
  EXPECT_EQ(p.active.OnMad(drep_msg, 5001).upcall, Upcall::kDrepReceived);
  EXPECT_EQ(p.active.state(), State::kTimewait);
  // A retried DREQ in time wait gets the DREP again.
  Step again = p.passive.OnMad(dreq_msg, 5002);
  EXPECT_EQ(Sent(again), AttrId::kDrep);
  // Time wait lasts CmTimeoutMs(packet life time + 1) = 512 ms, then the id may go.
  EXPECT_EQ(p.active.deadline_ms(), 5001 + 512);
  EXPECT_EQ(p.active.OnTimer(5001 + 511).upcall, Upcall::kNone);
  EXPECT_EQ(p.active.OnTimer(5001 + 512).upcall, Upcall::kTimewaitExit);
  EXPECT_EQ(p.active.state(), State::kIdle);
}

TEST(CmConnection, DreqWithoutDrepEndsInDreqErrorAndTimewait) {
  Pair p;
  p.Establish();
  ASSERT_TRUE(p.active.SendDreq(2, 0).ok());
  int sends = 0;
  Step s;
  for (;;) {
    s = p.active.OnTimer(*p.active.deadline_ms());
    if (!s.send) break;
    ++sends;
  }
  EXPECT_EQ(sends, 15);  // max_cm_retries of the REQ
  EXPECT_EQ(s.upcall, Upcall::kDreqError);
  EXPECT_EQ(p.active.state(), State::kTimewait);
}

TEST(CmConnection, DestroyOfAnEstablishedConnectionSendsOneDreq) {
  // The owner was killed: the peer must learn it (DISCONNECTED in rdma_cm).
  Pair p;
  p.Establish();
  Step s = p.active.Destroy(100);
  EXPECT_EQ(Sent(s), AttrId::kDreq);
  EXPECT_EQ(p.active.state(), State::kTimewait);
  EXPECT_EQ(p.active.retries_left(), 0);
  EXPECT_EQ(p.passive.OnMad(Wire(s.send), 100).upcall, Upcall::kDreqReceived);
  EXPECT_EQ(p.active.OnTimer(*p.active.deadline_ms()).upcall, Upcall::kTimewaitExit);
}

TEST(CmConnection, DestroyWhileConnectingRejects) {
  Pair p;
  auto req = p.active.SendReq(MakeReq(), 1, 0);
  ASSERT_EQ(p.passive.OnMad(Wire(req->send), 0).upcall, Upcall::kReqReceived);
  // The listener's process died before it accepted: REJ consumer-defined.
  Step s = p.passive.Destroy(0);
  ASSERT_EQ(Sent(s), AttrId::kRej);
  const CmMessage rej = Wire(s.send);
  EXPECT_EQ(std::get<Rej>(rej.body).reason, static_cast<uint16_t>(RejReason::kConsumerDefined));
  EXPECT_EQ(std::get<Rej>(rej.body).local_comm_id, 0u);  // REQ_RCVD: our id was never given
  EXPECT_EQ(p.active.OnMad(rej, 1).upcall, Upcall::kRejReceived);
  EXPECT_EQ(p.active.state(), State::kIdle);

  // The connecting process died: REJ timeout with its CA GUID as ARI.
  Connection a(9);
  auto req2 = a.SendReq(MakeReq(), 2, 0);
  Connection b(10);
  b.OnMad(Wire(req2->send), 0);
  Step d = a.Destroy(0);
  const CmMessage rej_msg = Wire(d.send);
  const Rej& r = std::get<Rej>(rej_msg.body);
  EXPECT_EQ(r.reason, static_cast<uint16_t>(RejReason::kTimeout));
  EXPECT_EQ(r.ari_length, 8);
  EXPECT_EQ(r.ari[0], 0x02);
  CmMessage forged = Wire(d.send);
  std::get<Rej>(forged.body).ari[7] ^= 1;  // another CA's connection with the same id
  EXPECT_EQ(b.OnMad(forged, 0).ignored, Ignored::kWrongCommId);
  EXPECT_EQ(b.state(), State::kReqRcvd);
  EXPECT_EQ(b.OnMad(Wire(d.send), 0).upcall, Upcall::kRejReceived);
  EXPECT_EQ(b.state(), State::kIdle);
}

TEST(CmConnection, StrayMessagesAreIgnoredAndNamed) {
  Pair p;
  p.Establish();
  Rtu rtu;
  rtu.local_comm_id = 0x2002;
  rtu.remote_comm_id = 0x9999;  // not ours
  EXPECT_EQ(p.active.OnMad(CmMessage{MadHeader{}, rtu}, 0).ignored, Ignored::kWrongCommId);
  rtu.remote_comm_id = 0x1001;
  rtu.local_comm_id = 0x2002;
  EXPECT_EQ(p.active.OnMad(CmMessage{MadHeader{}, rtu}, 0).ignored, Ignored::kWrongState);
  Dreq dreq{.local_comm_id = 0x1001, .remote_comm_id = 0x2002, .remote_qpn = 0x123};  // wrong QPN
  EXPECT_EQ(p.passive.OnMad(CmMessage{MadHeader{}, dreq}, 0).ignored, Ignored::kWrongCommId);
  EXPECT_EQ(p.passive.state(), State::kEstablished);
  Mra mra{.local_comm_id = 0x2002, .remote_comm_id = 0x1001};
  EXPECT_EQ(p.active.OnMad(CmMessage{MadHeader{}, mra}, 0).ignored, Ignored::kWrongState);
}

TEST(CmConnection, StaleReqInTimewaitIsRejected) {
  Pair p;
  p.Establish();
  auto dreq = p.active.SendDreq(3, 0);
  p.passive.OnMad(Wire(dreq->send), 0);
  ASSERT_TRUE(p.passive.SendDrep(0).ok());
  Req req = MakeReq();
  req.local_comm_id = 0x1001;
  Step s = p.passive.OnMad(CmMessage{MadHeader{}, req}, 1);
  ASSERT_EQ(Sent(s), AttrId::kRej);
  EXPECT_EQ(std::get<Rej>(s.send->body).reason, static_cast<uint16_t>(RejReason::kStaleConn));
}

TEST(CmConnection, RejDuringDisconnectAndStaleRejEnterTimewait) {
  Pair p;
  auto req = p.active.SendReq(MakeReq(), 1, 0);
  p.passive.OnMad(Wire(req->send), 0);
  auto rej = p.passive.SendRej(static_cast<uint16_t>(RejReason::kStaleConn), 0);
  ASSERT_TRUE(rej.ok());
  EXPECT_EQ(p.passive.state(), State::kIdle);
  EXPECT_EQ(p.active.OnMad(Wire(rej->send), 0).upcall, Upcall::kRejReceived);
  EXPECT_EQ(p.active.state(), State::kTimewait);
}

TEST(CmConnection, SidrRequestAndReply) {
  Connection client(0x31);
  Connection server(0x32);
  SidrReq req{.pkey = 0xFFFF, .service_id = ServiceId(PortSpace::kUdp, 7174)};
  auto s = client.SendSidrReq(req, 5, 20, 2, 0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(client.state(), State::kSidrReqSent);
  EXPECT_EQ(server.OnMad(Wire(s->send), 0).upcall, Upcall::kSidrReqReceived);
  auto rep = server.SendSidrRep(SidrRep{.status = SidrStatus::kOk, .qpn = 0x401, .qkey = 0x1234});
  ASSERT_TRUE(rep.ok());
  const CmMessage rep_msg = Wire(rep->send);
  EXPECT_EQ(std::get<SidrRep>(rep_msg.body).request_id, 0x31u);
  EXPECT_EQ(rep_msg.header.tid, 5u);
  EXPECT_EQ(client.OnMad(rep_msg, 1).upcall, Upcall::kSidrRepReceived);
  EXPECT_EQ(client.state(), State::kIdle);
  // With nobody answering, the request is retried and then fails.
  Connection lone(0x33);
  ASSERT_TRUE(lone.SendSidrReq(req, 6, 20, 1, 0).ok());
  EXPECT_EQ(Sent(lone.OnTimer(*lone.deadline_ms())), AttrId::kSidrReq);
  EXPECT_EQ(lone.OnTimer(*lone.deadline_ms()).upcall, Upcall::kSidrReqError);
}

}  // namespace
}  // namespace droce::cm
