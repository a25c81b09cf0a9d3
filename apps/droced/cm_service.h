// droced's connection manager: what Linux's rdma_cm + ucma + ib_cm do in the
// kernel, for the fabric devices (doc/cm.md). Programs run the unmodified
// librdmacm; its writes to /dev/infiniband/rdma_cm (the ucma ABI of
// <rdma/rdma_user_cm.h>: a rdma_ucm_cmd_hdr and the command struct) reach
// Command() byte for byte, and what Command() returns is what the kernel
// would have written to the command's response pointer. rdma_cm ids belong
// to the control connection (`conn`) that created them, as they belong to
// the open file in Linux; when it closes, its ids are destroyed and their
// peers told (REJ, DREQ) as Linux's cm_destroy_id does.
//
// The CM speaks MADs on QP 1 of each device (cm_gsi.h): `send` is called with
// the device, the path and the MAD; OnGsiFrame takes the frames the switch
// steered to QP 1. Time is injected (now_ms); no I/O, no DPDK: tested in
// memory by cm_service_test.cc.
#ifndef DROCE_APPS_DROCED_CM_SERVICE_H_
#define DROCE_APPS_DROCED_CM_SERVICE_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

#include "apps/droced/cm_gsi.h"
#include "cm/connection.h"
#include "cm/mad.h"
#include "cm/rdma_cm.h"

namespace droce::droced {

struct CmDevice {
  std::string name;
  std::array<uint8_t, 6> mac{};
  uint64_t guid = 0;            // as sysfs node_guid: EUI-64 of the MAC
  std::vector<cm::Gid> gids;    // the port's GID table (index = sgid_index)
  uint8_t path_mtu = 3;         // IBV_MTU_1024
  // Bound to a host interface (doc/netdev.md): the kernel routes to and
  // resolves its peers (SetKernelRouting), and gids has holes (zero GIDs).
  bool netdev = false;
};

struct CmCounters {
  uint64_t commands = 0, commands_failed = 0;
  // GET_EVENTs that found no event waiting: a program polling a channel it
  // made non-blocking (rsockets does) gets EAGAIN, as from the kernel's
  // ucma; a normal answer, not a failure.
  uint64_t get_event_empty = 0;
  // librdmacm's probe for AF_IB (a BIND of an AF_IB address when each
  // process opens its first channel): refused with EAFNOSUPPORT, as a
  // kernel without AF_IB refuses it, so librdmacm uses the IP commands; the
  // expected answer, not a failure.
  uint64_t af_ib_probes = 0;
  uint64_t mads_rx = 0, mads_tx = 0;
  uint64_t mad_errors[static_cast<size_t>(cm::MadError::kCount)] = {};
  uint64_t gsi_drops[static_cast<size_t>(GsiDrop::kCount)] = {};
  uint64_t unmatched = 0;        // a MAD for no connection of ours
  uint64_t ignored = 0;          // a MAD the connection's state machine ignored (stray, duplicate)
  uint64_t rej_no_listener = 0;  // REQs answered with REJ "invalid service ID", SIDR_REQs with "no such service"
};

// rdma_cm event numbers (enum rdma_cm_event_type, the kernel's and librdmacm's).
enum CmEvent : uint32_t {
  kEvAddrResolved = 0,
  kEvAddrError = 1,
  kEvRouteResolved = 2,
  kEvRouteError = 3,
  kEvConnectRequest = 4,
  kEvConnectResponse = 5,
  kEvConnectError = 6,
  kEvUnreachable = 7,
  kEvRejected = 8,
  kEvEstablished = 9,
  kEvDisconnected = 10,
  kEvDeviceRemoval = 11,
  kEvMulticastJoin = 12,
  kEvMulticastError = 13,
  kEvTimewaitExit = 15,
};

class CmService {
 public:
  using SendFn = std::function<void(int device, const GsiPath& path, const std::array<uint8_t, cm::kMadSize>& mad)>;

  CmService(SendFn send, uint64_t seed);

  void SetDevices(std::vector<CmDevice> devices) { devices_ = std::move(devices); }

  // Addresses beyond the fabric's devices, reached through the daemon's
  // uplink (doc/droced.md "Uplinks"): RESOLVE_IP for such an address asks
  // `resolve` (the daemon sends an ARP request or, for IPv6, a neighbour
  // solicitation out of the uplink from device `device`, source address
  // `source`) and completes when
  // LearnNeighbour hears the answer, or fails with ADDR_ERROR -ETIMEDOUT
  // after the command's timeout (the request is repeated every second), as
  // Linux's rdma_resolve_addr does over its neighbour table. Without a
  // resolver such a destination is ADDR_ERROR -EHOSTUNREACH at once.
  using ResolveFn = std::function<void(int device, const cm::Gid& source, const cm::Gid& target)>;
  void SetResolver(ResolveFn resolve) { resolve_ = std::move(resolve); }
  // The kernel's routing, for netdev-bound devices (doc/netdev.md):
  // rdma_resolve_addr to an address no device here owns asks `route` which
  // device the kernel's route leaves by and from which source address (for
  // an id bound to an address, from that one); if it is a netdev-bound
  // device, `resolve` asks the kernel for the next hop's MAC and
  // KernelNeighbour brings the answer (ADDR_RESOLVED, or ADDR_ERROR with the
  // kernel's error; -ETIMEDOUT after the command's timeout). Nothing is
  // remembered: the kernel's neighbour table is the only one.
  struct Route {
    int device = -1;  // -1: the route leaves by no device of ours
    int error = 0;    // why not (a positive errno)
    cm::Gid source{};
  };
  using RouteFn = std::function<Route(const cm::Gid& dst, const cm::Gid* src)>;
  using KernelResolveFn =
      std::function<void(int device, const cm::Gid& source, const cm::Gid& target, uint32_t timeout_ms)>;
  void SetKernelRouting(RouteFn route, KernelResolveFn resolve) {
    route_ = std::move(route);
    kernel_resolve_ = std::move(resolve);
  }
  void KernelNeighbour(int device, const cm::Gid& target, int error, const std::array<uint8_t, 6>& mac);
  // An IP-to-MAC binding heard on the uplink (an ARP request or reply's
  // sender, a neighbour advertisement's target, a solicitation's source).
  void LearnNeighbour(const cm::Gid& ip, const std::array<uint8_t, 6>& mac, uint64_t now_ms);
  // At most this many uplink neighbours are kept; the oldest learnt gives way.
  static constexpr size_t kMaxUplinkNeighbours = 1024;
  size_t neighbour_count() const { return neighbours_.size(); }
  const std::vector<CmDevice>& devices() const { return devices_; }

  struct Result {
    int error = 0;              // 0 or a positive errno (what write() would fail with)
    std::vector<uint8_t> out;   // the response (at most the header's `out` bytes)
  };
  // One ucma command: the header and its `in` bytes. `option` carries what
  // a SET_OPTION's optval points to (the caller copies it from the program).
  Result Command(int conn, std::span<const uint8_t> cmd, uint64_t now_ms,
                 std::span<const uint8_t> option = {});
  // Events queued for the connection (its event channel is readable).
  size_t PendingEvents(int conn) const;
  void ConnectionClosed(int conn, uint64_t now_ms);

  void OnGsiFrame(int device, const uint8_t* frame, uint32_t len, uint64_t now_ms);
  void OnMad(int device, const GsiPath& from, std::span<const uint8_t> mad, uint64_t now_ms);
  void OnTimer(uint64_t now_ms);
  std::optional<uint64_t> NextDeadline() const;

  const CmCounters& counters() const { return counters_; }
  size_t id_count() const { return ids_.size(); }
  size_t mcast_count() const { return mcasts_.size(); }
  std::string StatusText() const;

 private:
  enum class IdState : uint8_t {
    kIdle, kAddrBound, kAddrQuery, kAddrResolved, kRouteResolved, kListen, kConnect, kConnected, kDisconnected,
  };
  struct Addr {
    bool v6 = false;
    cm::IpAddr ip{};  // cma_ip_addr form: IPv4 in the last 4 bytes, rest zero
    uint16_t port = 0;
    bool any() const;
  };
  struct Id {
    uint32_t handle = 0;
    int conn = -1;
    uint64_t uid = 0;
    uint16_t ps = 0;
    uint8_t qp_type = 0;
    IdState state = IdState::kIdle;
    int device = -1;
    Addr src, dst;
    bool reuseaddr = false;
    bool owns_port = false;  // bound (explicitly or by resolve/listen), not accepted
    uint8_t tos = 0;
    bool tos_set = false;
    std::optional<uint8_t> ack_timeout;
    uint32_t events_reported = 0;
    bool disconnected_reported = false;
    // The connection.
    std::optional<cm::Connection> cm;
    GsiPath path;
    // Starting PSNs, as Linux's ib_cm: each end offers its own (rdma_cm's
    // random seq_num) in its REQ or REP, and that is the PSN it expects to
    // receive; it sends from the one the peer offered.
    uint32_t seq_num = 0;  // ours: our receive queue's (and a UD id's send) starting PSN
    uint32_t sq_psn = 0;   // the peer's REQ/REP starting PSN: our send queue's
    uint32_t local_qpn = 0, remote_qpn = 0;
    uint8_t responder_resources = 0, initiator_depth = 0;
    uint8_t retry_count = 7, rnr_retry_count = 7;
    uint8_t path_mtu = 3;
    uint64_t remote_guid = 0;
    uint32_t remote_comm_id = 0;
    uint32_t qkey = 0x01234567;  // UD ids: RDMA_UDP_QKEY, or the peer's from its SIDR_REP
    // kAddrQuery: waiting for the neighbour's ARP answer until resolve_deadline_ms.
    uint64_t resolve_deadline_ms = 0, resolve_retry_ms = 0;
  };
  Id IncomingId(const Id& listener, int device, const cm::CmaHeader& hdr, uint16_t port);
  struct Event {
    int conn;
    uint32_t handle;  // the id the event is counted for (the listener's for CONNECT_REQUEST)
    std::vector<uint8_t> resp;  // struct rdma_ucm_event_resp
    uint32_t mc = 0;  // a MULTICAST_JOIN's group membership: counted for it too
  };
  // A multicast group an id joined (rdma_join_multicast): Linux's
  // ucma_multicast. Its handle is the JOIN's response and LEAVE's argument.
  struct Mcast {
    uint32_t id_handle = 0;
    uint64_t uid = 0;  // librdmacm's struct cma_multicast
    cm::Gid mgid{};
    bool send_only = false;
    uint32_t events_reported = 0;
  };

  Result Join(int conn, uint32_t handle, uint64_t uid, const Addr& group, uint16_t join_flags);
  // One handler per ucma command (Cmd<Name> for RDMA_USER_CM_CMD_<NAME>),
  // reached through kCommandTable: each reads its command's struct from
  // `in` and answers it.
  using Handler = Result (CmService::*)(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                                        std::span<const uint8_t> option);
  using CommandTable = std::array<Handler, RDMA_USER_CM_CMD_JOIN_MCAST + 1>;
  static const CommandTable kCommandTable;
  Result Dispatch(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                  std::span<const uint8_t> option);
  Result CmdCreateId(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                     std::span<const uint8_t> option);
  Result CmdDestroyId(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                      std::span<const uint8_t> option);
  Result CmdBind(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                 std::span<const uint8_t> option);
  Result CmdResolveAddr(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                        std::span<const uint8_t> option);
  Result CmdResolveRoute(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                         std::span<const uint8_t> option);
  Result CmdQueryRoute(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                       std::span<const uint8_t> option);
  Result CmdQuery(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                  std::span<const uint8_t> option);
  Result CmdListen(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                   std::span<const uint8_t> option);
  Result CmdConnect(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                    std::span<const uint8_t> option);
  Result CmdAccept(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                   std::span<const uint8_t> option);
  Result CmdReject(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                   std::span<const uint8_t> option);
  Result CmdDisconnect(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                       std::span<const uint8_t> option);
  Result CmdInitQpAttr(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                       std::span<const uint8_t> option);
  Result CmdGetEvent(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                     std::span<const uint8_t> option);
  Result CmdSetOption(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                      std::span<const uint8_t> option);
  Result CmdNotify(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                   std::span<const uint8_t> option);
  Result CmdMigrateId(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                      std::span<const uint8_t> option);
  Result CmdJoinIpMcast(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                        std::span<const uint8_t> option);
  Result CmdJoinMcast(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                      std::span<const uint8_t> option);
  Result CmdLeaveMcast(int conn, uint32_t cmd, std::span<const uint8_t> in, uint64_t now_ms,
                       std::span<const uint8_t> option);
  Id* Find(int conn, uint32_t handle);
  // A command's fixed part and the id it names (its `id` field), as the
  // kernel's ucma copies the command and then looks up its context:
  // nullptr when the command is short or the id is not this connection's.
  template <typename Command>
  Id* LoadForId(int conn, std::span<const uint8_t> in, Command* c) {
    if (in.size() < sizeof(Command)) return nullptr;
    std::memcpy(c, in.data(), sizeof(Command));
    return Find(conn, c->id);
  }
  int DeviceOfIp(const Addr& a) const;
  int GidIndex(int device, const cm::Gid& gid) const;
  cm::Gid GidOf(const Addr& a) const;
  bool PortInUse(uint16_t ps, uint16_t port, const Addr& a, const Id* except) const;
  uint16_t EphemeralPort(uint16_t ps, const Addr& a);
  int Bind(Id& id, const Addr& a);
  int BindLoopback(Id& id, const Addr& a);
  void QueueEvent(const Id& id, uint32_t event, int32_t status, const void* param = nullptr, size_t param_len = 0,
                  uint32_t ece_vendor = 0, uint32_t ece_mod = 0, uint64_t uid_override = 0,
                  uint32_t counted_handle = 0);
  void Send(const Id& id, const cm::CmMessage& m);
  void Apply(Id& id, const cm::Step& step, const cm::CmMessage* received, uint64_t now_ms);
  // A command's message, built by the id's connection: refused (EINVAL) if
  // the connection could not build it, else the id moves to `then` (if
  // given) and the step is applied (Apply).
  Result SendStep(Id& id, const absl::StatusOr<cm::Step>& step, uint64_t now_ms,
                  std::optional<IdState> then = std::nullopt);
  void DestroyId(uint32_t handle, uint64_t now_ms);
  void HandleReq(int device, const GsiPath& from, const cm::CmMessage& m, uint64_t now_ms);
  void HandleSidrReq(int device, const GsiPath& from, const cm::CmMessage& m, uint64_t now_ms);
  void FillAh(const Id& id, ib_uverbs_ah_attr* ah) const;
  Id* FindByLocalComm(uint32_t comm_id);
  std::vector<uint8_t> QueryRoute(const Id& id) const;
  void AddrResolved(Id& id, const std::array<uint8_t, 6>& dst_mac);
  std::vector<uint8_t> InitQpAttr(const Id& id, uint32_t qp_state, int* error) const;

  SendFn send_;
  std::mt19937_64 rng_;
  std::vector<CmDevice> devices_;
  ResolveFn resolve_;
  RouteFn route_;
  KernelResolveFn kernel_resolve_;
  std::map<cm::Gid, std::array<uint8_t, 6>> neighbours_;  // learnt on the uplink
  std::deque<cm::Gid> neighbour_order_;  // neighbours_' keys, oldest learnt first
  std::map<uint32_t, Id> ids_;  // by handle
  uint32_t next_handle_ = 1;
  std::map<uint32_t, uint32_t> by_comm_id_;  // local comm id -> handle
  // Destroyed ids' connections in time wait: they still answer a retried DREQ.
  std::map<uint32_t, std::pair<cm::Connection, std::pair<int, GsiPath>>> zombies_;
  std::deque<Event> events_;
  std::map<uint32_t, Mcast> mcasts_;  // by multicast handle
  uint32_t next_mc_handle_ = 1;
  uint64_t next_tid_ = 1;
  CmCounters counters_;
};

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_CM_SERVICE_H_
