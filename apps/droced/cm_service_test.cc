// droced's CM driven through the ucma ABI exactly as librdmacm writes it
// (rdma_ucm_cmd_hdr + command struct), with the GSI frames of both ends
// carried by an in-memory switch: a server and a client on one device and
// on two, a connect to a port nobody listens on, a client that dies
// mid-connection, and bad commands.
#include "apps/droced/cm_service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>

#include <cstring>
#include <deque>
#include <random>

namespace droce::droced {
namespace {

constexpr int kServer = 10;  // control connections (the programs' event channels)
constexpr int kClient = 11;

cm::Gid V4Gid(uint32_t ip) {
  cm::Gid g{};
  g[10] = g[11] = 0xFF;
  g[12] = static_cast<uint8_t>(ip >> 24);
  g[13] = static_cast<uint8_t>(ip >> 16);
  g[14] = static_cast<uint8_t>(ip >> 8);
  g[15] = static_cast<uint8_t>(ip);
  return g;
}

CmDevice Dev(const std::string& name, uint8_t last, uint32_t ip) {
  CmDevice d;
  d.name = name;
  d.mac = {0x02, 0xd0, 0xce, 0, 0, last};
  d.guid = 0x00d0ceFFFE000000ull | last;
  d.gids = {cm::Gid{0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0xd0, 0xce, 0xff, 0xfe, 0, 0, last}, V4Gid(ip)};
  return d;
}

sockaddr_in6 Sin(uint32_t ip, uint16_t port) {
  sockaddr_in6 s6{};
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(ip);
  std::memcpy(&s6, &sin, sizeof sin);
  return s6;
}

class CmServiceTest : public ::testing::Test {
 protected:
  CmServiceTest()
      : cm_([this](int dev, const GsiPath& path, const std::array<uint8_t, cm::kMadSize>& mad) {
              wire_.push_back({dev, path, mad});
            },
            42) {
    cm_.SetDevices({Dev("droce0", 1, 0x0a000001), Dev("droce1", 2, 0x0a000002)});
  }

  template <typename T>
  CmService::Result Cmd(int conn, uint32_t cmd, const T& body, uint16_t out = 512,
                        std::span<const uint8_t> option = {}) {
    std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + sizeof(T));
    const rdma_ucm_cmd_hdr h{cmd, static_cast<uint16_t>(sizeof(T)), out};
    std::memcpy(b.data(), &h, sizeof h);
    std::memcpy(b.data() + sizeof h, &body, sizeof(T));
    return cm_.Command(conn, b, now_, option);
  }

  // The switch: each MAD leaves as a GSI frame and arrives at the device
  // that owns the destination MAC.
  int Pump() {
    int n = 0;
    while (!wire_.empty()) {
      auto [dev, path, mad] = wire_.front();
      wire_.pop_front();
      uint8_t frame[kGsiFrameMax];
      const uint32_t len = BuildGsiFrame(path, mad, 0, frame);
      for (size_t d = 0; d < cm_.devices().size(); ++d) {
        if (cm_.devices()[d].mac == path.dst_mac) cm_.OnGsiFrame(static_cast<int>(d), frame, len, now_);
      }
      ++n;
    }
    return n;
  }

  uint32_t CreateId(int conn, uint64_t uid) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = RDMA_PS_TCP;
    c.qp_type = IBV_QPT_RC;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_CREATE_ID, c);
    EXPECT_EQ(r.error, 0);
    rdma_ucm_create_id_resp resp{};
    std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.id;
  }

  std::optional<rdma_ucm_event_resp> GetEvent(int conn) {
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});
    if (r.error != 0) return std::nullopt;
    rdma_ucm_event_resp e;
    EXPECT_EQ(r.out.size(), sizeof e);
    std::memcpy(&e, r.out.data(), sizeof e);
    return e;
  }

  rdma_ucm_query_route_resp QueryRoute(int conn, uint32_t id) {
    rdma_ucm_query q{};
    q.id = id;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_QUERY_ROUTE, q);
    EXPECT_EQ(r.error, 0);
    rdma_ucm_query_route_resp resp{};
    std::memcpy(&resp, r.out.data(), std::min(r.out.size(), sizeof resp));
    return resp;
  }

  ib_uverbs_qp_attr InitQpAttr(int conn, uint32_t id, uint32_t state, int* err = nullptr) {
    rdma_ucm_init_qp_attr c{};
    c.id = id;
    c.qp_state = state;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_INIT_QP_ATTR, c);
    if (err != nullptr) *err = r.error;
    ib_uverbs_qp_attr a{};
    if (r.error == 0) std::memcpy(&a, r.out.data(), sizeof a);
    return a;
  }

  uint32_t Listen(uint32_t ip, uint16_t port) {
    const uint32_t id = CreateId(kServer, 0x5000);
    rdma_ucm_bind_ip b{};
    b.id = id;
    b.addr = Sin(ip, port);
    EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_BIND_IP, b).error, 0);
    EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{id, 10}).error, 0);
    return id;
  }

  // rdma_resolve_addr + rdma_resolve_route on a new client id.
  uint32_t Resolve(uint32_t src_ip, uint32_t dst_ip, uint16_t port) {
    const uint32_t id = CreateId(kClient, 0xC000);
    rdma_ucm_resolve_ip r{};
    if (src_ip != 0) r.src_addr = Sin(src_ip, 0);
    r.dst_addr = Sin(dst_ip, port);
    r.id = id;
    r.timeout_ms = 2000;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
    auto e = GetEvent(kClient);
    EXPECT_TRUE(e.has_value());
    if (!e) return id;
    EXPECT_EQ(e->event, kEvAddrResolved);
    EXPECT_EQ(e->uid, 0xC000u);
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{id, 2000}).error, 0);
    e = GetEvent(kClient);
    EXPECT_TRUE(e.has_value());
    if (e) {
      EXPECT_EQ(e->event, kEvRouteResolved);
    }
    return id;
  }

  void Connect(uint32_t id, uint32_t qpn, const char* pd = "hello") {
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = qpn;
    c.conn_param.valid = 1;
    c.conn_param.responder_resources = 4;
    c.conn_param.initiator_depth = 4;
    c.conn_param.retry_count = 7;
    c.conn_param.rnr_retry_count = 7;
    c.conn_param.private_data_len = static_cast<uint8_t>(std::strlen(pd));
    std::memcpy(c.conn_param.private_data, pd, std::strlen(pd));
    c.ece.vendor_id = 0x64726f;
    c.ece.attr_mod = 0x5;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_CONNECT, c).error, 0);
  }

  // The whole rping exchange; returns {client id, server's new id}.
  std::pair<uint32_t, uint32_t> Establish(uint32_t client_src, uint32_t dst) {
    Listen(dst, 7174);
    const uint32_t cid = Resolve(client_src, dst, 7174);
    Connect(cid, 0x401);
    Pump();
    auto req = GetEvent(kServer);
    EXPECT_TRUE(req.has_value());
    if (!req) return {cid, 0};
    EXPECT_EQ(req->event, kEvConnectRequest);
    const uint32_t sid = req->id;
    rdma_ucm_accept a{};
    a.uid = 0x5001;
    a.id = sid;
    a.conn_param.valid = 1;
    a.conn_param.qp_num = 0x801;
    a.conn_param.responder_resources = 4;
    a.conn_param.initiator_depth = 4;
    a.conn_param.rnr_retry_count = 7;
    a.ece.vendor_id = 0x64726f;
    EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_ACCEPT, a).error, 0);
    Pump();
    auto resp = GetEvent(kClient);
    EXPECT_TRUE(resp.has_value());
    if (resp) {
      EXPECT_EQ(resp->event, kEvConnectResponse);
    }
    rdma_ucm_accept rtu{};
    rtu.id = cid;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_ACCEPT, rtu).error, 0);
    Pump();
    auto est = GetEvent(kServer);
    EXPECT_TRUE(est.has_value());
    if (est) {
      EXPECT_EQ(est->event, kEvEstablished);
      EXPECT_EQ(est->uid, 0x5001u);  // ACCEPT gave the new id its own uid
    }
    return {cid, sid};
  }

  CmService cm_;
  std::deque<std::tuple<int, GsiPath, std::array<uint8_t, cm::kMadSize>>> wire_;
  uint64_t now_ = 1000;
};

TEST_F(CmServiceTest, RpingExchangeOnOneDevice) {
  const uint32_t lid = Listen(0x0a000001, 7174);
  const auto lroute = QueryRoute(kServer, lid);
  EXPECT_EQ(be64toh(lroute.node_guid), cm_.devices()[0].guid);  // librdmacm finds the ibv device by it
  EXPECT_EQ(lroute.port_num, 1);

  const uint32_t cid = Resolve(0, 0x0a000001, 7174);
  const auto croute = QueryRoute(kClient, cid);
  EXPECT_EQ(be64toh(croute.node_guid), cm_.devices()[0].guid);  // a local address: the same device
  EXPECT_EQ(croute.num_paths, 1u);
  EXPECT_EQ(std::memcmp(croute.ib_route[0].dgid, V4Gid(0x0a000001).data(), 16), 0);
  int err = 0;
  const ib_uverbs_qp_attr init = InitQpAttr(kClient, cid, IBV_QPS_INIT, &err);
  EXPECT_EQ(err, 0);
  EXPECT_EQ(init.qp_attr_mask, unsigned{IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT});
  EXPECT_EQ(init.port_num, 1);
  InitQpAttr(kClient, cid, IBV_QPS_RTR, &err);
  EXPECT_EQ(err, EINVAL);  // no connection yet

  Connect(cid, 0x401, "rping");
  ASSERT_EQ(wire_.size(), 1u);  // the REQ
  EXPECT_EQ(Pump(), 2);         // REQ, then the listener's MRA
  auto req = GetEvent(kServer);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->event, kEvConnectRequest);
  EXPECT_EQ(req->uid, 0x5000u);  // the listener's uid, a new id
  EXPECT_NE(req->id, lid);
  EXPECT_EQ(req->param.conn.qp_num, 0x401u);
  EXPECT_EQ(req->param.conn.private_data_len, 56);  // the REQ's 92 bytes less the RDMA CM header
  EXPECT_EQ(std::memcmp(req->param.conn.private_data, "rping", 5), 0);
  EXPECT_EQ(req->ece.vendor_id, 0x64726fu);
  EXPECT_EQ(req->ece.attr_mod, 0x5u);
  const uint32_t sid = req->id;
  const auto sroute = QueryRoute(kServer, sid);
  EXPECT_EQ(be64toh(sroute.node_guid), cm_.devices()[0].guid);

  const ib_uverbs_qp_attr srtr = InitQpAttr(kServer, sid, IBV_QPS_RTR, &err);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(srtr.dest_qp_num, 0x401u);
  EXPECT_TRUE(srtr.qp_attr_mask & IBV_QP_AV);
  EXPECT_EQ(srtr.ah_attr.is_global, 1);
  EXPECT_EQ(srtr.ah_attr.grh.sgid_index, 1);  // the IPv4 GID
  EXPECT_EQ(srtr.path_mtu, unsigned{IBV_MTU_1024});

  rdma_ucm_accept a{};
  a.uid = 0x5001;
  a.id = sid;
  a.conn_param.valid = 1;
  a.conn_param.qp_num = 0x801;
  a.conn_param.responder_resources = 2;
  a.conn_param.initiator_depth = 2;
  a.conn_param.private_data_len = 3;
  std::memcpy(a.conn_param.private_data, "rep", 3);
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_ACCEPT, a).error, 0);
  EXPECT_EQ(Pump(), 1);  // REP
  auto resp = GetEvent(kClient);
  ASSERT_TRUE(resp.has_value());
  EXPECT_EQ(resp->event, kEvConnectResponse);
  EXPECT_EQ(resp->param.conn.qp_num, 0x801u);
  EXPECT_EQ(std::memcmp(resp->param.conn.private_data, "rep", 3), 0);
  const ib_uverbs_qp_attr crtr = InitQpAttr(kClient, cid, IBV_QPS_RTR, &err);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(crtr.dest_qp_num, 0x801u);
  EXPECT_EQ(crtr.max_dest_rd_atomic, 2);  // min(ours 4, the peer's initiator depth 2)
  const ib_uverbs_qp_attr crts = InitQpAttr(kClient, cid, IBV_QPS_RTS, &err);
  // Each end sends from the starting PSN the other offered (REQ: the
  // client's, REP: the server's), as Linux's ib_cm; a Linux peer offers its
  // own in the REP, so the two directions differ.
  const ib_uverbs_qp_attr srts = InitQpAttr(kServer, sid, IBV_QPS_RTS, &err);
  EXPECT_EQ(crts.sq_psn, srtr.rq_psn);
  EXPECT_EQ(srts.sq_psn, crtr.rq_psn);
  EXPECT_NE(crtr.rq_psn, srtr.rq_psn);
  EXPECT_EQ(crts.max_rd_atomic, 2);
  rdma_ucm_accept rtu{};
  rtu.id = cid;
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_ACCEPT, rtu).error, 0);
  EXPECT_EQ(Pump(), 1);  // RTU
  auto est = GetEvent(kServer);
  ASSERT_TRUE(est.has_value());
  EXPECT_EQ(est->event, kEvEstablished);
  EXPECT_EQ(est->id, sid);

  // rdma_disconnect on the client: DREQ; the server sees DISCONNECTED and
  // answers with its own rdma_disconnect (DREP); the client then sees it too.
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{cid}).error, 0);
  Pump();
  auto sd = GetEvent(kServer);
  ASSERT_TRUE(sd.has_value());
  EXPECT_EQ(sd->event, kEvDisconnected);
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{sid}).error, 0);
  Pump();
  auto cd = GetEvent(kClient);
  ASSERT_TRUE(cd.has_value());
  EXPECT_EQ(cd->event, kEvDisconnected);
  EXPECT_FALSE(GetEvent(kClient).has_value());
  // Disconnecting again (both ends in time wait) succeeds and sends nothing, as Linux's rdma_disconnect.
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{cid}).error, 0);
  EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{sid}).error, 0);
  EXPECT_TRUE(wire_.empty());

  // rdma_destroy_id waits for the events it was told were reported.
  rdma_ucm_destroy_id d{};
  d.id = cid;
  const auto dr = Cmd(kClient, RDMA_USER_CM_CMD_DESTROY_ID, d);
  ASSERT_EQ(dr.error, 0);
  rdma_ucm_destroy_id_resp dresp;
  std::memcpy(&dresp, dr.out.data(), sizeof dresp);
  EXPECT_EQ(dresp.events_reported, 4u);  // ADDR, ROUTE, CONNECT_RESPONSE, DISCONNECTED
  d.id = lid;
  const auto lr = Cmd(kServer, RDMA_USER_CM_CMD_DESTROY_ID, d);
  std::memcpy(&dresp, lr.out.data(), sizeof dresp);
  EXPECT_EQ(dresp.events_reported, 1u);  // the CONNECT_REQUEST counts for the listener
  EXPECT_EQ(cm_.counters().unmatched, 0u);
}

TEST_F(CmServiceTest, AcrossTwoDevices) {
  const auto [cid, sid] = Establish(0x0a000002, 0x0a000001);
  ASSERT_NE(sid, 0u);
  EXPECT_EQ(be64toh(QueryRoute(kClient, cid).node_guid), cm_.devices()[1].guid);
  EXPECT_EQ(be64toh(QueryRoute(kServer, sid).node_guid), cm_.devices()[0].guid);
  int err = 0;
  const ib_uverbs_qp_attr rtr = InitQpAttr(kClient, cid, IBV_QPS_RTR, &err);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(std::memcmp(rtr.ah_attr.grh.dgid, V4Gid(0x0a000001).data(), 16), 0);
  const ib_uverbs_qp_attr srtr = InitQpAttr(kServer, sid, IBV_QPS_RTR, &err);
  EXPECT_EQ(std::memcmp(srtr.ah_attr.grh.dgid, V4Gid(0x0a000002).data(), 16), 0);
}

TEST_F(CmServiceTest, ConnectToAPortNobodyListensOnIsRejectedAtOnce) {
  Listen(0x0a000001, 7174);
  const uint32_t cid = Resolve(0, 0x0a000001, 7175);
  Connect(cid, 0x401);
  EXPECT_EQ(Pump(), 2);  // REQ, REJ
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvRejected);
  EXPECT_EQ(e->status, 8u);  // invalid service ID
  EXPECT_EQ(cm_.counters().rej_no_listener, 1u);
  EXPECT_FALSE(cm_.NextDeadline().has_value());  // nothing left to retry
}

TEST_F(CmServiceTest, PeerKilledWhileConnectedGetsDisconnected) {
  const auto [cid, sid] = Establish(0, 0x0a000001);
  ASSERT_NE(sid, 0u);
  // The client's process dies: its control connection closes.
  cm_.ConnectionClosed(kClient, now_);
  EXPECT_EQ(Pump(), 1);  // the DREQ the daemon sends for the dead side (one, no retries)
  auto e = GetEvent(kServer);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvDisconnected);
  EXPECT_EQ(e->id, sid);
}

TEST_F(CmServiceTest, ListenerKilledBeforeAcceptRejects) {
  Listen(0x0a000001, 7174);
  const uint32_t cid = Resolve(0, 0x0a000001, 7174);
  Connect(cid, 0x401);
  Pump();
  ASSERT_EQ(cm_.PendingEvents(kServer), 1u);
  cm_.ConnectionClosed(kServer, now_);
  Pump();
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvRejected);
  EXPECT_EQ(e->status, 28u);  // consumer defined, as Linux's cm_destroy_id
  EXPECT_EQ(cm_.id_count(), 1u);  // only the client's
}

TEST_F(CmServiceTest, ReqWithoutAnswerTimesOutAsUnreachable) {
  Listen(0x0a000001, 7174);
  const uint32_t cid = Resolve(0, 0x0a000001, 7174);
  Connect(cid, 0x401);
  wire_.clear();  // the REQ is lost, and so is every retry
  int sends = 0;
  while (auto d = cm_.NextDeadline()) {
    now_ = *d;
    cm_.OnTimer(now_);
    sends += static_cast<int>(wire_.size());
    wire_.clear();
    if (cm_.PendingEvents(kClient) > 0) break;
  }
  EXPECT_EQ(sends, 15);
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvUnreachable);
  EXPECT_EQ(static_cast<int32_t>(e->status), -ETIMEDOUT);
}

// Another host's address (a Linux rxe host behind the daemon's uplink):
// without an uplink ADDR_ERROR -EHOSTUNREACH at once; with one the daemon
// ARPs for it (every second until the command's timeout) and ADDR_RESOLVED
// follows the answer; the REQ then goes to the neighbour's MAC; an address
// nobody answers for is ADDR_ERROR -ETIMEDOUT.
// A netdev-bound device (doc/netdev.md): the kernel's route picks the
// device and the source address, the kernel's neighbour table the MAC;
// nothing is remembered, and no uplink ARP is sent.
TEST_F(CmServiceTest, NetdevBoundDevicesRouteAndResolveThroughTheKernel) {
  CmDevice nd = Dev("nd0", 3, 0x0a000101);
  nd.netdev = true;
  nd.gids.push_back(cm::Gid{});  // a hole of the kernel-style table
  nd.gids.push_back(V4Gid(0x0a000201));
  cm_.SetDevices({Dev("droce0", 1, 0x0a000001), nd});
  std::vector<std::pair<cm::Gid, bool>> routes;  // destination, with a source
  std::vector<std::tuple<int, cm::Gid, cm::Gid, uint32_t>> asked;
  int arps = 0;
  cm_.SetResolver([&](int, const cm::Gid&, const cm::Gid&) { ++arps; });
  cm_.SetKernelRouting(
      [&](const cm::Gid& dst, const cm::Gid* src) {
        routes.emplace_back(dst, src != nullptr);
        CmService::Route r;
        if (dst == V4Gid(0xc0a80001)) {  // 192.168.0.1: no route by one of ours
          r.error = ENETUNREACH;
          return r;
        }
        r.device = 1;
        r.source = src != nullptr ? *src : V4Gid(0x0a000201);  // the route's preferred source
        return r;
      },
      [&](int dev, const cm::Gid& src, const cm::Gid& dst, uint32_t timeout) { asked.emplace_back(dev, src, dst, timeout); });
  auto resolve_ip = [&](uint32_t dst, uint32_t timeout_ms) {
    const uint32_t id = CreateId(kClient, 0xC100);
    rdma_ucm_resolve_ip r{};
    r.dst_addr = Sin(dst, 7174);
    r.id = id;
    r.timeout_ms = timeout_ms;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
    return id;
  };
  const uint32_t id = resolve_ip(0x0a000202, 1500);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(std::get<0>(asked[0]), 1);
  EXPECT_EQ(std::get<1>(asked[0]), V4Gid(0x0a000201));  // the kernel's source, not the device's first address
  EXPECT_EQ(std::get<2>(asked[0]), V4Gid(0x0a000202));
  EXPECT_EQ(std::get<3>(asked[0]), 1500u);
  EXPECT_FALSE(GetEvent(kClient).has_value());
  const std::array<uint8_t, 6> peer = {0x52, 0x54, 0, 0, 2, 2};
  cm_.KernelNeighbour(1, V4Gid(0x0a000202), 0, peer);
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  EXPECT_EQ(e->id, id);
  EXPECT_EQ(std::memcmp(QueryRoute(kClient, id).ib_route[0].sgid, V4Gid(0x0a000201).data(), 16), 0);
  // Asked again every time (the kernel's table is the only one).
  resolve_ip(0x0a000202, 1500);
  EXPECT_EQ(asked.size(), 2u);
  EXPECT_FALSE(GetEvent(kClient).has_value());
  // The kernel gives up: ADDR_ERROR with its error.
  cm_.KernelNeighbour(1, V4Gid(0x0a000202), EHOSTUNREACH, {});
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrError);
  EXPECT_EQ(static_cast<int32_t>(e->status), -EHOSTUNREACH);
  // No answer at all: -ETIMEDOUT at the deadline, no uplink ARP ever.
  resolve_ip(0x0a000203, 1000);
  now_ += 1001;
  cm_.OnTimer(now_);
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(static_cast<int32_t>(e->status), -ETIMEDOUT);
  EXPECT_EQ(arps, 0);
  // A route by no device of ours, with no uplink answer for it either: the
  // fabric's fallback (the uplink's ARP from the first device).
  resolve_ip(0xc0a80001, 1000);
  EXPECT_EQ(arps, 1);
  // A local device's address is that device, without asking the kernel.
  const size_t n = routes.size();
  resolve_ip(0x0a000001, 1000);
  EXPECT_EQ(routes.size(), n);
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  // Bound to an address first: the route is asked from it.
  const uint32_t bound = CreateId(kClient, 0xC200);
  rdma_ucm_bind_ip b{};
  b.id = bound;
  b.addr = Sin(0x0a000101, 0);
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_BIND_IP, b).error, 0);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = Sin(0x0a000209, 7174);
  r.id = bound;
  r.timeout_ms = 1000;
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
  EXPECT_TRUE(routes.back().second);
  EXPECT_EQ(std::get<1>(asked.back()), V4Gid(0x0a000101));
  // The zero GID of a hole names no address: binding :: is the wildcard, not the hole.
  EXPECT_EQ(cm_.devices()[1].gids[2], cm::Gid{});
}

// Linux binds a loopback address to the first active port; libfabric's
// verbs provider relies on it to find a device and then listens on the id's
// local address, which another host must reach: the device's own address.
TEST_F(CmServiceTest, ALoopbackBindTakesTheFirstDeviceAndItsAddress) {
  const uint32_t id = CreateId(kServer, 0x5100);
  rdma_ucm_bind_ip b{};
  b.id = id;
  b.addr = Sin(0x7f000001, 0);
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_BIND_IP, b).error, 0);
  EXPECT_EQ(be64toh(QueryRoute(kServer, id).node_guid), cm_.devices()[0].guid);
  EXPECT_EQ(std::memcmp(QueryRoute(kServer, id).ib_route[0].sgid, V4Gid(0x0a000001).data(), 16), 0);
  cm_.SetDevices({});
  const uint32_t none = CreateId(kServer, 0x5101);
  b.id = none;
  EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_BIND_IP, b).error, EADDRNOTAVAIL);
}

TEST_F(CmServiceTest, AnotherHostsAddressIsResolvedByArpThroughTheUplink) {
  constexpr uint32_t kRxe = 0xc0a84d0b;  // 192.168.77.11
  auto resolve_ip = [&](uint32_t dst, uint32_t timeout_ms) {
    const uint32_t id = CreateId(kClient, 0xC000);
    rdma_ucm_resolve_ip r{};
    r.dst_addr = Sin(dst, 7174);
    r.id = id;
    r.timeout_ms = timeout_ms;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
    return id;
  };
  resolve_ip(kRxe, 2000);
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrError);
  EXPECT_EQ(static_cast<int32_t>(e->status), -EHOSTUNREACH);

  std::vector<std::tuple<int, cm::Gid, cm::Gid>> arps;
  cm_.SetResolver([&](int dev, const cm::Gid& src, const cm::Gid& dst) { arps.emplace_back(dev, src, dst); });
  const uint32_t cid = resolve_ip(kRxe, 2000);
  ASSERT_EQ(arps.size(), 1u);
  EXPECT_EQ(std::get<0>(arps[0]), 0);
  EXPECT_EQ(std::get<1>(arps[0]), V4Gid(0x0a000001));  // from the first device's IPv4 address
  EXPECT_EQ(std::get<2>(arps[0]), V4Gid(kRxe));
  EXPECT_FALSE(GetEvent(kClient).has_value());  // waits for the answer
  now_ += 1000;
  cm_.OnTimer(now_);
  EXPECT_EQ(arps.size(), 2u);  // asked again
  const std::array<uint8_t, 6> rxe_mac = {0x52, 0x54, 0x00, 0x77, 0x00, 0x11};
  cm_.LearnNeighbour(V4Gid(kRxe), rxe_mac, now_);
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  EXPECT_EQ(e->id, cid);
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{cid, 2000}).error, 0);
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvRouteResolved);
  const auto route = QueryRoute(kClient, cid);
  EXPECT_EQ(be64toh(route.node_guid), cm_.devices()[0].guid);
  EXPECT_EQ(std::memcmp(route.ib_route[0].dgid, V4Gid(kRxe).data(), 16), 0);
  Connect(cid, 0x401);
  ASSERT_EQ(wire_.size(), 1u);  // the REQ, to the neighbour
  EXPECT_EQ(std::get<1>(wire_.front()).dst_mac, rxe_mac);
  EXPECT_EQ(std::get<1>(wire_.front()).src_mac, cm_.devices()[0].mac);
  EXPECT_EQ(std::get<1>(wire_.front()).dst_gid, V4Gid(kRxe));
  wire_.clear();

  // Known now: resolved at once, no ARP.
  resolve_ip(kRxe, 2000);
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  EXPECT_EQ(arps.size(), 2u);

  // Nobody answers: ADDR_ERROR -ETIMEDOUT after the timeout, nothing left to wait for.
  resolve_ip(0xc0a84d0c, 1500);
  EXPECT_EQ(arps.size(), 3u);
  while (auto d = cm_.NextDeadline()) {
    if (*d > now_ + 10000) break;
    now_ = *d;
    cm_.OnTimer(now_);
    if (cm_.PendingEvents(kClient) > 0) break;
  }
  e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrError);
  EXPECT_EQ(static_cast<int32_t>(e->status), -ETIMEDOUT);
  EXPECT_EQ(arps.size(), 4u);  // the first request and one repeat in 1.5 s
}

// The same over IPv6: a global source address (not the link-local GID 0)
// and a neighbour solicitation's answer.
TEST_F(CmServiceTest, AnotherHostsIpv6AddressIsResolvedThroughTheUplink) {
  const cm::Gid ours = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const cm::Gid theirs = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3};
  CmDevice d = Dev("droce0", 1, 0x0a000001);
  d.gids.push_back(ours);
  cm_.SetDevices({d});
  std::vector<std::pair<cm::Gid, cm::Gid>> asked;
  cm_.SetResolver([&](int, const cm::Gid& src, const cm::Gid& dst) { asked.emplace_back(src, dst); });
  const uint32_t id = CreateId(kClient, 0xC000);
  rdma_ucm_resolve_ip r{};
  r.id = id;
  r.timeout_ms = 2000;
  r.dst_addr.sin6_family = AF_INET6;
  r.dst_addr.sin6_port = htons(7174);
  std::memcpy(&r.dst_addr.sin6_addr, theirs.data(), 16);
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].first, ours);  // not fe80::...: a global peer gets a global source
  EXPECT_EQ(asked[0].second, theirs);
  EXPECT_FALSE(GetEvent(kClient).has_value());
  cm_.LearnNeighbour(theirs, {0x02, 0, 0, 0, 0, 0x33}, now_);
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{id, 2000}).error, 0);
  ASSERT_TRUE(GetEvent(kClient).has_value());
  Connect(id, 0x401);
  ASSERT_EQ(wire_.size(), 1u);
  EXPECT_EQ(std::get<1>(wire_.front()).src_gid, ours);
  EXPECT_EQ(std::get<1>(wire_.front()).dst_gid, theirs);
}

// An uplink flooded with ARP answers from made-up addresses: the table stays
// bounded, the newest neighbours stay usable.
TEST_F(CmServiceTest, UplinkNeighbourFloodIsBounded) {
  std::vector<cm::Gid> asked;
  cm_.SetResolver([&](int, const cm::Gid&, const cm::Gid& dst) { asked.push_back(dst); });
  const size_t flood = CmService::kMaxUplinkNeighbours * 4;
  for (uint32_t i = 0; i < flood; ++i) {
    cm_.LearnNeighbour(V4Gid(0xc0a80000 + i), {0x02, 0, 0, 0, uint8_t(i >> 8), uint8_t(i)}, now_);
  }
  EXPECT_EQ(cm_.neighbour_count(), CmService::kMaxUplinkNeighbours);
  // The last one learnt resolves at once; the first was evicted and is asked for.
  const uint32_t last = 0xc0a80000 + uint32_t(flood - 1);
  for (const uint32_t dst : {last, 0xc0a80000u}) {
    const uint32_t id = CreateId(kClient, 0xC000);
    rdma_ucm_resolve_ip r{};
    r.dst_addr = Sin(dst, 7174);
    r.id = id;
    r.timeout_ms = 2000;
    ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
  }
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  EXPECT_FALSE(GetEvent(kClient).has_value());
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], V4Gid(0xc0a80000));
}

TEST_F(CmServiceTest, BadCommandsAreRefused) {
  // Short, long and unknown commands.
  std::vector<uint8_t> shorty(4, 0);
  EXPECT_EQ(cm_.Command(kClient, shorty, now_).error, EINVAL);
  rdma_ucm_cmd_hdr h{RDMA_USER_CM_CMD_CREATE_ID, 100, 4};
  std::vector<uint8_t> lying(sizeof h + 8);
  std::memcpy(lying.data(), &h, sizeof h);
  EXPECT_EQ(cm_.Command(kClient, lying, now_).error, EINVAL);
  EXPECT_EQ(Cmd(kClient, 999, rdma_ucm_disconnect{1}).error, ENOSYS);
  // Ids are per connection.
  const uint32_t id = CreateId(kClient, 1);
  EXPECT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{id}).error, EINVAL);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{id + 100}).error, EINVAL);
  // The response must fit what the program asked for.
  rdma_ucm_query q{};
  q.id = id;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_QUERY_ROUTE, q, 8).error, ENOSPC);
  // AF_IB (librdmacm's probe): refused, so it uses the IP commands.
  rdma_ucm_bind b{};
  b.id = id;
  b.addr_size = sizeof(sockaddr_in6);
  b.addr.ss_family = 27;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_BIND, b).error, EAFNOSUPPORT);
  EXPECT_EQ(cm_.counters().af_ib_probes, 1u);  // librdmacm's probe: an expected refusal, not a failure
  const uint64_t failed = cm_.counters().commands_failed;
  b.addr.ss_family = AF_UNIX;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_BIND, b).error, EAFNOSUPPORT);
  EXPECT_EQ(cm_.counters().af_ib_probes, 1u);
  EXPECT_EQ(cm_.counters().commands_failed, failed + 1);
  // An address no device has; an address in use.
  rdma_ucm_bind_ip bi{};
  bi.id = id;
  bi.addr = Sin(0x0b000001, 1);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_BIND_IP, bi).error, EADDRNOTAVAIL);
  Listen(0x0a000001, 7174);
  bi.addr = Sin(0x0a000001, 7174);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_BIND_IP, bi).error, EADDRINUSE);
  // CONNECT before the route; no event waiting.
  rdma_ucm_connect early{};
  early.id = CreateId(kClient, 2);
  early.conn_param.valid = 1;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_CONNECT, early).error, EINVAL);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{}).error, EAGAIN);
  // An unreachable destination: ADDR_ERROR.
  const uint32_t u = CreateId(kClient, 3);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = Sin(0x0b000009, 1);
  r.id = u;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
  auto e = GetEvent(kClient);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrError);
  // Options: TOS goes into the path.
  const uint8_t tos = 0x60;
  rdma_ucm_set_option o{};
  o.id = u;
  o.level = RDMA_OPTION_ID;
  o.optname = RDMA_OPTION_ID_TOS;
  o.optlen = 1;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_SET_OPTION, o, 0, std::span<const uint8_t>(&tos, 1)).error, 0);
  o.optlen = 4;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_SET_OPTION, o, 0, std::span<const uint8_t>(&tos, 1)).error, EINVAL);
}

// A program polling its channel (non-blocking, as rsockets does) asks for
// events that are not there yet: EAGAIN, as the kernel's ucma answers, and
// counted as such, not as a failed command.
TEST_F(CmServiceTest, PollingAnEmptyChannelIsNotAFailure) {
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(GetEvent(kClient).has_value());
  EXPECT_EQ(cm_.counters().commands, 5u);
  EXPECT_EQ(cm_.counters().get_event_empty, 5u);
  EXPECT_EQ(cm_.counters().commands_failed, 0u);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{77}).error, EINVAL);
  EXPECT_EQ(cm_.counters().commands_failed, 1u);
  EXPECT_NE(cm_.StatusText().find("commands 6 (failed 1, get_event with none waiting 5, AF_IB probes 0)"), std::string::npos)
      << cm_.StatusText();
}

TEST_F(CmServiceTest, AcceptedConnectionsDoNotHoldTheListenersPort) {
  // perftest -R: its first (parameter exchange) listener goes, its connection
  // stays, and a second listener binds the same port.
  const auto [cid, sid] = Establish(0, 0x0a000001);
  ASSERT_NE(sid, 0u);
  uint32_t lid = 0;
  for (uint32_t h = 1; h < sid; ++h) {
    rdma_ucm_query q{};
    q.id = h;
    if (Cmd(kServer, RDMA_USER_CM_CMD_QUERY_ROUTE, q).error == 0) lid = h;
  }
  ASSERT_NE(lid, 0u);
  rdma_ucm_destroy_id d{};
  d.id = lid;
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_DESTROY_ID, d).error, 0);
  Listen(0x0a000001, 7174);  // asserts the bind and listen succeed
}

TEST_F(CmServiceTest, MigrateIdMovesTheIdAndItsEvents) {
  constexpr int kOther = 12;
  const uint32_t id = CreateId(kClient, 7);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = Sin(0x0a000001, 1);
  r.id = id;
  ASSERT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
  ASSERT_EQ(cm_.PendingEvents(kClient), 1u);
  // Written to the destination channel; names the current one.
  rdma_ucm_migrate_id m{};
  m.id = id;
  const int from = kClient;
  const auto res = Cmd(kOther, RDMA_USER_CM_CMD_MIGRATE_ID, m, 4,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&from), sizeof from));
  ASSERT_EQ(res.error, 0);
  EXPECT_EQ(cm_.PendingEvents(kClient), 0u);
  EXPECT_EQ(cm_.PendingEvents(kOther), 1u);
  auto e = GetEvent(kOther);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->event, kEvAddrResolved);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{id, 1}).error, EINVAL);
  EXPECT_EQ(Cmd(kOther, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{id, 1}).error, 0);
  // A channel that does not hold the id cannot take it.
  const int wrong = 99;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_MIGRATE_ID, m, 4,
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&wrong), sizeof wrong))
                .error,
            EINVAL);
  // Closing the new channel destroys the id.
  cm_.ConnectionClosed(kOther, now_);
  EXPECT_EQ(cm_.id_count(), 0u);
}

TEST_F(CmServiceTest, RandomCommandsAndMadsLeaveItWorking) {
  std::mt19937 rng(7);
  // Some ids to hit, on both connections.
  for (int i = 0; i < 4; ++i) CreateId(i % 2 ? kServer : kClient, 100 + i);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t cmd = rng() % 26;
    const uint16_t in = static_cast<uint16_t>(rng() % 320);
    std::vector<uint8_t> b(sizeof(rdma_ucm_cmd_hdr) + in);
    const rdma_ucm_cmd_hdr h{cmd, in, static_cast<uint16_t>(rng() % 400)};
    std::memcpy(b.data(), &h, sizeof h);
    for (size_t k = sizeof h; k < b.size(); ++k) b[k] = static_cast<uint8_t>(rng() % 4 == 0 ? rng() : 0);
    if (in >= 4 && rng() % 2) {  // a plausible id somewhere near the front
      const uint32_t id = 1 + rng() % 6;
      const size_t at = (rng() % 3) * 4;
      if (at + sizeof id <= in) std::memcpy(b.data() + sizeof h + at, &id, sizeof id);
    }
    if (rng() % 8 == 0) b.resize(rng() % (b.size() + 1));  // a length that lies
    std::vector<uint8_t> opt(rng() % 6);
    for (auto& x : opt) x = static_cast<uint8_t>(rng());
    (void)cm_.Command(i % 3 == 0 ? kServer : kClient, b, now_, opt);
    if (i % 64 == 0) {
      std::array<uint8_t, cm::kMadSize> mad{};
      for (auto& x : mad) x = static_cast<uint8_t>(rng() % 3 == 0 ? rng() : 0);
      mad[0] = 1;
      mad[1] = 7;
      mad[2] = 2;
      mad[3] = 3;
      mad[17] = static_cast<uint8_t>(0x10 + rng() % 9);
      GsiPath p;
      p.dst_mac = cm_.devices()[rng() % 2].mac;
      cm_.OnMad(static_cast<int>(rng() % 2), p, mad, now_);
      Pump();
    }
    now_ += rng() % 50;
    cm_.OnTimer(now_);
    wire_.clear();
  }
  cm_.ConnectionClosed(kServer, now_);
  cm_.ConnectionClosed(kClient, now_);
  EXPECT_EQ(cm_.id_count(), 0u);
  wire_.clear();
  const auto [cid, sid] = Establish(0x0a000002, 0x0a000001);
  EXPECT_NE(sid, 0u);
}

// UD rdma_cm (RDMA_PS_UDP, udaddy's exchange): SIDR_REQ / SIDR_REP.
TEST_F(CmServiceTest, UdServiceIdResolution) {
  auto create = [&](int conn, uint64_t uid) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = RDMA_PS_UDP;
    c.qp_type = IBV_QPT_UD;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_CREATE_ID, c);
    EXPECT_EQ(r.error, 0);
    rdma_ucm_create_id_resp resp{};
    std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.id;
  };
  rdma_ucm_create_id bad{};
  bad.ps = 0x0999;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_CREATE_ID, bad).error, EINVAL);  // no such port space

  const uint32_t lid = create(kServer, 0x7000);
  rdma_ucm_bind_ip b{};
  b.id = lid;
  b.addr = Sin(0x0a000001, 7174);
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_BIND_IP, b).error, 0);
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{lid, 10}).error, 0);

  auto resolve = [&](uint16_t port) {
    const uint32_t id = create(kClient, 0x8000 + port);
    rdma_ucm_resolve_ip r{};
    r.src_addr = Sin(0x0a000002, 0);
    r.dst_addr = Sin(0x0a000001, port);
    r.id = id;
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
    EXPECT_EQ(GetEvent(kClient)->event, kEvAddrResolved);
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{id, 100}).error, 0);
    EXPECT_EQ(GetEvent(kClient)->event, kEvRouteResolved);
    int err = 0;
    const ib_uverbs_qp_attr init = InitQpAttr(kClient, id, IBV_QPS_INIT, &err);
    EXPECT_EQ(err, 0);
    EXPECT_TRUE(init.qp_attr_mask & IBV_QP_QKEY);
    EXPECT_EQ(init.qkey, 0x01234567u);  // RDMA_UDP_QKEY
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = 0x405;
    c.conn_param.valid = 1;
    c.conn_param.private_data_len = 4;
    std::memcpy(c.conn_param.private_data, "udpd", 4);
    EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_CONNECT, c).error, 0);
    return id;
  };

  const uint32_t cid = resolve(7174);
  EXPECT_EQ(Pump(), 1);  // SIDR_REQ
  auto req = GetEvent(kServer);
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->event, kEvConnectRequest);
  EXPECT_EQ(req->uid, 0x7000u);
  EXPECT_EQ(std::memcmp(req->param.ud.private_data, "udpd", 4), 0);
  EXPECT_EQ(std::memcmp(req->param.ud.ah_attr.grh.dgid, V4Gid(0x0a000002).data(), 16), 0);
  rdma_ucm_accept a{};
  a.uid = 0x7001;
  a.id = req->id;
  a.conn_param.valid = 1;
  a.conn_param.qp_num = 0x805;
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_ACCEPT, a).error, 0);
  EXPECT_EQ(Pump(), 1);  // SIDR_REP
  auto est = GetEvent(kClient);
  ASSERT_TRUE(est.has_value());
  EXPECT_EQ(est->event, kEvEstablished);
  EXPECT_EQ(est->id, cid);
  EXPECT_EQ(est->param.ud.qp_num, 0x805u);
  EXPECT_EQ(est->param.ud.qkey, 0x01234567u);
  EXPECT_EQ(est->param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(std::memcmp(est->param.ud.ah_attr.grh.dgid, V4Gid(0x0a000001).data(), 16), 0);
  EXPECT_EQ(est->param.ud.ah_attr.grh.sgid_index, 1);

  // Nobody listens on the port: SIDR_REP "no such service", UNREACHABLE with that status.
  resolve(7999);
  EXPECT_EQ(Pump(), 2);
  auto un = GetEvent(kClient);
  ASSERT_TRUE(un.has_value());
  EXPECT_EQ(un->event, kEvUnreachable);
  EXPECT_EQ(un->status, 1u);
  // The listener rejects: status 2.
  resolve(7174);
  Pump();
  auto req2 = GetEvent(kServer);
  ASSERT_TRUE(req2.has_value());
  rdma_ucm_reject rj{};
  rj.id = req2->id;
  ASSERT_EQ(Cmd(kServer, RDMA_USER_CM_CMD_REJECT, rj).error, 0);
  Pump();
  auto rejected = GetEvent(kClient);
  ASSERT_TRUE(rejected.has_value());
  EXPECT_EQ(rejected->event, kEvUnreachable);
  EXPECT_EQ(rejected->status, 2u);
  // Nobody answers: retried, then UNREACHABLE -ETIMEDOUT.
  resolve(7174);
  wire_.clear();
  while (auto d = cm_.NextDeadline()) {
    now_ = *d;
    cm_.OnTimer(now_);
    wire_.clear();
    if (cm_.PendingEvents(kClient) > 0) break;
  }
  auto to = GetEvent(kClient);
  ASSERT_TRUE(to.has_value());
  EXPECT_EQ(to->event, kEvUnreachable);
  EXPECT_EQ(static_cast<int32_t>(to->status), -ETIMEDOUT);
  cm_.ConnectionClosed(kServer, now_);
  cm_.ConnectionClosed(kClient, now_);
  EXPECT_EQ(cm_.id_count(), 0u);
}

// rdma_cm multicast on RoCE (mckey's exchange), as Linux's
// cma_iboe_join_multicast: the group address resolves on the bound device,
// JOIN answers with a handle and MULTICAST_JOIN follows with the group's
// address handle; LEAVE is event-free and counts the events delivered.
TEST_F(CmServiceTest, MulticastJoinAndLeave) {
  auto create = [&](int conn, uint64_t uid, uint16_t ps = RDMA_PS_UDP) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = ps;
    c.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_CREATE_ID, c);
    EXPECT_EQ(r.error, 0);
    rdma_ucm_create_id_resp resp{};
    std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.id;
  };
  auto resolve_group = [&](int conn, uint32_t id, uint32_t src, uint32_t group) {
    rdma_ucm_bind_ip b{};
    b.id = id;
    b.addr = Sin(src, 0);
    EXPECT_EQ(Cmd(conn, RDMA_USER_CM_CMD_BIND_IP, b).error, 0);
    rdma_ucm_resolve_ip r{};
    r.src_addr = Sin(src, 0);
    r.dst_addr = Sin(group, 0);
    r.id = id;
    EXPECT_EQ(Cmd(conn, RDMA_USER_CM_CMD_RESOLVE_IP, r).error, 0);
    auto e = GetEvent(conn);
    EXPECT_TRUE(e.has_value());
    if (e) {
      EXPECT_EQ(e->event, kEvAddrResolved);  // not ADDR_ERROR: a group is reachable on the source's device
    }
  };
  auto join_ip = [&](int conn, uint32_t id, uint64_t uid, uint32_t group, int* err = nullptr) {
    rdma_ucm_join_ip_mcast j{};
    j.uid = uid;
    j.id = id;
    j.addr = Sin(group, 0);
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_JOIN_IP_MCAST, j);
    if (err != nullptr) *err = r.error;
    rdma_ucm_create_id_resp resp{};
    if (r.error == 0) std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.id;
  };
  auto leave = [&](int conn, uint32_t mc, int* err) {
    rdma_ucm_destroy_id l{};
    l.id = mc;
    const auto r = Cmd(conn, RDMA_USER_CM_CMD_LEAVE_MCAST, l);
    *err = r.error;
    rdma_ucm_destroy_id_resp resp{};
    if (r.error == 0) std::memcpy(&resp, r.out.data(), sizeof resp);
    return resp.events_reported;
  };

  // A receiver on droce0 (mckey -m 239.1.1.1 -b 10.0.0.1).
  const uint32_t rid = create(kServer, 0x9000);
  resolve_group(kServer, rid, 0x0a000001, 0xEF010101);
  EXPECT_EQ(QueryRoute(kServer, rid).node_guid, htobe64(cm_.devices()[0].guid));
  int err = -1;
  const ib_uverbs_qp_attr init = InitQpAttr(kServer, rid, IBV_QPS_INIT, &err);
  EXPECT_EQ(err, 0);
  EXPECT_EQ(init.qkey, 0x01234567u);
  const uint32_t mc = join_ip(kServer, rid, 0xAAAA, 0xEF010101, &err);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(wire_.size(), 0u);  // no SA, no MAD
  auto ev = GetEvent(kServer);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, 12u);  // RDMA_CM_EVENT_MULTICAST_JOIN in librdmacm's <rdma/rdma_cma.h>
  EXPECT_EQ(ev->status, 0u);
  EXPECT_EQ(ev->uid, 0xAAAAu);  // the join's uid: librdmacm's struct cma_multicast
  EXPECT_EQ(ev->id, mc);
  EXPECT_EQ(ev->param.ud.qp_num, 0xFFFFFFu);
  EXPECT_EQ(ev->param.ud.qkey, 0x01234567u);
  EXPECT_EQ(ev->param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(ev->param.ud.ah_attr.port_num, 1);
  EXPECT_EQ(ev->param.ud.ah_attr.dlid, 0);
  EXPECT_EQ(ev->param.ud.ah_attr.grh.hop_limit, 64);
  EXPECT_EQ(ev->param.ud.ah_attr.grh.sgid_index, 1);  // the bound address's GID
  EXPECT_EQ(std::memcmp(ev->param.ud.ah_attr.grh.dgid, V4Gid(0xEF010101).data(), 16), 0);  // ::ffff:239.1.1.1

  // A sender on droce1 joins send-only through JOIN_MCAST (the AF_IB-era command).
  const uint32_t sid = create(kClient, 0x9100);
  resolve_group(kClient, sid, 0x0a000002, 0xEF010101);
  rdma_ucm_join_mcast jm{};
  jm.uid = 0xBBBB;
  jm.id = sid;
  jm.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
  jm.addr_size = sizeof(sockaddr_in);
  const sockaddr_in6 g = Sin(0xEF010101, 0);
  std::memcpy(&jm.addr, &g, sizeof(sockaddr_in));
  auto r = Cmd(kClient, RDMA_USER_CM_CMD_JOIN_MCAST, jm);
  ASSERT_EQ(r.error, 0);
  ev = GetEvent(kClient);
  ASSERT_TRUE(ev.has_value());
  EXPECT_EQ(ev->event, kEvMulticastJoin);
  EXPECT_EQ(ev->uid, 0xBBBBu);
  EXPECT_EQ(std::memcmp(ev->param.ud.ah_attr.grh.dgid, V4Gid(0xEF010101).data(), 16), 0);
  EXPECT_EQ(cm_.mcast_count(), 2u);
  // Refused as Linux refuses them.
  rdma_ucm_join_mcast bad = jm;
  bad.join_flags = 7;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_JOIN_MCAST, bad).error, EINVAL);  // no such join state
  bad = jm;
  bad.addr_size = sizeof(sockaddr_in6);
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_JOIN_MCAST, bad).error, EINVAL);  // size not the family's
  bad = jm;
  bad.id = rid;  // another channel's id
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_JOIN_MCAST, bad).error, EINVAL);
  join_ip(kClient, sid, 1, 0, &err);
  EXPECT_EQ(err, EINVAL);  // the zero address
  rdma_ucm_join_ip_mcast j6{};
  j6.id = sid;
  j6.addr.sin6_family = AF_INET6;
  j6.addr.sin6_addr.s6_addr[0] = 0xff;
  j6.addr.sin6_addr.s6_addr[1] = 0x0e;
  EXPECT_EQ(Cmd(kClient, RDMA_USER_CM_CMD_JOIN_IP_MCAST, j6).error, EOPNOTSUPP);  // IPv6 on RoCEv2
  const uint32_t unbound = create(kClient, 0x9200);
  join_ip(kClient, unbound, 1, 0xEF010101, &err);
  EXPECT_EQ(err, EINVAL);  // no device yet
  const uint32_t rc = create(kClient, 0x9300, RDMA_PS_TCP);
  resolve_group(kClient, rc, 0x0a000002, 0xEF010101);
  join_ip(kClient, rc, 1, 0xEF010101, &err);
  EXPECT_EQ(err, EINVAL);  // not UD
  EXPECT_EQ(cm_.mcast_count(), 2u);

  // LEAVE: no event; it counts the one MULTICAST_JOIN delivered.
  EXPECT_EQ(leave(kServer, mc, &err), 1u);
  EXPECT_EQ(err, 0);
  EXPECT_FALSE(GetEvent(kServer).has_value());
  leave(kServer, mc, &err);
  EXPECT_EQ(err, ENOENT);  // already left
  // A join whose event was never read: LEAVE takes the event away, counts none.
  const uint32_t mc2 = join_ip(kServer, rid, 0xCCCC, 0xEF010102, &err);
  ASSERT_EQ(err, 0);
  EXPECT_EQ(cm_.PendingEvents(kServer), 1u);
  leave(kClient, mc2, &err);
  EXPECT_EQ(err, EINVAL);  // not the owner's channel
  EXPECT_EQ(leave(kServer, mc2, &err), 0u);
  EXPECT_EQ(err, 0);
  EXPECT_EQ(cm_.PendingEvents(kServer), 0u);
  // DESTROY_ID counts the id's events, joins included, and leaves its groups.
  join_ip(kServer, rid, 0xDDDD, 0xEF010103, &err);
  ASSERT_EQ(err, 0);
  ASSERT_TRUE(GetEvent(kServer).has_value());
  const auto d = Cmd(kServer, RDMA_USER_CM_CMD_DESTROY_ID, rdma_ucm_destroy_id{0, rid, 0});
  ASSERT_EQ(d.error, 0);
  rdma_ucm_destroy_id_resp dr{};
  std::memcpy(&dr, d.out.data(), sizeof dr);
  EXPECT_EQ(dr.events_reported, 3u);  // ADDR_RESOLVED, two MULTICAST_JOINs
  EXPECT_EQ(cm_.mcast_count(), 1u);   // the sender's
  EXPECT_NE(cm_.StatusText().find("1 multicast joins"), std::string::npos);
  // The sender's program exits: its joins go with its ids.
  cm_.ConnectionClosed(kClient, now_);
  EXPECT_EQ(cm_.mcast_count(), 0u);
  EXPECT_EQ(cm_.id_count(), 0u);
}

TEST_F(CmServiceTest, MalformedMadsAreCountedAndDropped) {
  std::array<uint8_t, cm::kMadSize> mad{};
  mad[0] = 1;
  mad[1] = 0x07;
  mad[2] = 1;  // class version 1
  GsiPath p;
  p.dst_mac = cm_.devices()[0].mac;
  cm_.OnMad(0, p, mad, now_);
  mad[2] = 2;
  mad[3] = 0x03;
  mad[17] = 0x14;  // an RTU for no connection
  cm_.OnMad(0, p, mad, now_);
  uint8_t frame[kGsiFrameMax];
  const uint32_t len = BuildGsiFrame(p, mad, 0, frame);
  frame[len - 1] ^= 1;  // bad ICRC
  cm_.OnGsiFrame(0, frame, len, now_);
  EXPECT_EQ(cm_.counters().mad_errors[static_cast<size_t>(cm::MadError::kBadClassVersion)], 1u);
  EXPECT_EQ(cm_.counters().unmatched, 1u);
  EXPECT_EQ(cm_.counters().gsi_drops[static_cast<size_t>(GsiDrop::kBadPacket)], 1u);
  EXPECT_TRUE(wire_.empty());
  EXPECT_NE(cm_.StatusText().find("bad_class_version 1"), std::string::npos);
}

}  // namespace
}  // namespace droce::droced
