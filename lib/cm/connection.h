// The CM state machine of one connection (IBTA vol 1 12.9, the state
// diagrams of figures 144-147; the same states and transitions as Linux's
// ib_cm, drivers/infiniband/core/cm.c). Pure: no I/O and no clock — every
// input takes `now_ms`, and each step returns at most one MAD to send and at
// most one event for the owner (the rdma_cm layer). The owner keeps the table
// that routes received MADs to connections by communication id; a REQ for no
// listener is answered by RejectUnmatchedReq without a connection.
#ifndef DROCE_LIB_CM_CONNECTION_H_
#define DROCE_LIB_CM_CONNECTION_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/statusor.h"
#include "cm/mad.h"

namespace droce::cm {

enum class State : uint8_t {
  kIdle,
  kReqSent,
  kReqRcvd,
  kMraReqSent,
  kMraReqRcvd,
  kRepSent,
  kRepRcvd,
  kMraRepSent,
  kMraRepRcvd,
  kEstablished,
  kDreqSent,
  kDreqRcvd,
  kTimewait,
  kSidrReqSent,
  kSidrReqRcvd,
  kCount,
};
std::string_view StateName(State s);

// What the owner is told (Linux's enum ib_cm_event_type, the subset without LAP/APR).
enum class Upcall : uint8_t {
  kNone,
  kReqReceived,
  kReqError,  // no REP/REJ after the last REQ retry
  kRepReceived,
  kRepError,  // no RTU after the last REP retry
  kRtuReceived,
  kUserEstablished,  // CommEstablished(): a packet arrived on the QP before the RTU
  kMraReceived,
  kRejReceived,
  kDreqReceived,
  kDreqError,  // no DREP after the last DREQ retry
  kDrepReceived,
  kTimewaitExit,
  kSidrReqReceived,
  kSidrReqError,
  kSidrRepReceived,
  kCount,
};
std::string_view UpcallName(Upcall u);

// Why a received MAD changed nothing (counted by the owner).
enum class Ignored : uint8_t {
  kNo,
  kWrongState,   // not expected in this state (a late or stray message)
  kWrongCommId,  // the communication ids do not name this connection
  kDuplicate,    // a retransmission already answered (perhaps by resending our last MAD)
};

struct Step {
  std::optional<CmMessage> send;  // the MAD to send to the peer's QP1
  Upcall upcall = Upcall::kNone;
  Ignored ignored = Ignored::kNo;
};

struct ConnectionConfig {
  // The path's packet life time in IBTA time encoding; rdma_cm uses 16 on
  // RoCE (CMA_IBOE_PACKET_LIFETIME). Retry timeouts add twice its value;
  // time wait lasts CmTimeoutMs(packet_life_time + 1), as Linux's av.timeout.
  uint8_t packet_life_time = 16;
};

class Connection {
 public:
  Connection(uint32_t local_comm_id, ConnectionConfig config = {})
      : local_comm_id_(local_comm_id), config_(config) {}

  State state() const { return state_; }
  uint32_t local_comm_id() const { return local_comm_id_; }
  uint32_t remote_comm_id() const { return remote_comm_id_; }
  uint64_t remote_ca_guid() const { return remote_ca_guid_; }
  uint32_t remote_qpn() const { return remote_qpn_; }
  // When OnTimer has something to do; nothing when no timer runs.
  std::optional<uint64_t> deadline_ms() const { return deadline_ms_; }
  // Sends of the outstanding MAD left before it gives up.
  int retries_left() const { return retries_left_; }

  // Active side. The REQ's local_comm_id is set to this connection's.
  // `attr_mod`: the MAD's attribute modifier (ECE options, with the vendor id in the REQ/REP).
  absl::StatusOr<Step> SendReq(const Req& req, uint64_t tid, uint64_t now_ms, uint32_t attr_mod = 0);
  absl::StatusOr<Step> SendRtu(const Rtu& rtu);
  // Both sides: MRA for a received REQ or REP (service_timeout: IBTA encoding).
  absl::StatusOr<Step> SendMra(uint8_t service_timeout, std::span<const uint8_t> private_data = {});
  // Passive side.
  absl::StatusOr<Step> SendRep(const Rep& rep, uint64_t now_ms, uint32_t attr_mod = 0);
  absl::StatusOr<Step> SendRej(uint16_t reason, uint64_t now_ms, std::span<const uint8_t> private_data = {},
                               std::span<const uint8_t> ari = {});
  absl::StatusOr<Step> SendDreq(uint64_t tid, uint64_t now_ms, std::span<const uint8_t> private_data = {});
  absl::StatusOr<Step> SendDrep(uint64_t now_ms, std::span<const uint8_t> private_data = {});
  // A packet arrived on the connection's QP while the RTU is outstanding.
  Step CommEstablished();
  // SIDR (UD service id resolution): one request, one reply, no connection.
  absl::StatusOr<Step> SendSidrReq(const SidrReq& req, uint64_t tid, uint8_t timeout, uint8_t max_retries,
                                   uint64_t now_ms);
  absl::StatusOr<Step> SendSidrRep(const SidrRep& rep);

  // The owner is gone (destroy, process exit): what Linux's cm_destroy_id
  // sends — REJ while connecting, one DREQ (no retries) when established,
  // DREP for a received DREQ — and the connection is left in IDLE or TIMEWAIT
  // (the owner keeps it until OnTimer reports kTimewaitExit).
  Step Destroy(uint64_t now_ms);

  Step OnMad(const CmMessage& m, uint64_t now_ms);
  Step OnTimer(uint64_t now_ms);

 private:
  Step Sent(CmMessage m, uint64_t timeout_ms, int retries, uint64_t now_ms);
  Step SendOnce(CmMessage m);
  void EnterTimewait(uint64_t now_ms);
  void ResetToIdle();
  CmMessage Message(CmBody body) const;
  Rej MakeRej(uint16_t reason, std::span<const uint8_t> pd, std::span<const uint8_t> ari) const;
  Dreq MakeDreq(std::span<const uint8_t> pd) const;
  Drep MakeDrep(std::span<const uint8_t> pd) const;
  uint64_t PathMs() const { return 2 * CmTimeoutMs(config_.packet_life_time); }

  Step OnReq(const CmMessage& m, const Req& req, uint64_t now_ms);
  Step OnMra(const Mra& mra, uint64_t now_ms);
  Step OnRej(const Rej& rej, uint64_t now_ms);
  Step OnRep(const Rep& rep);
  Step OnRtu(const Rtu& rtu);
  Step OnDreq(const CmMessage& m, const Dreq& dreq);
  Step OnDrep(const Drep& drep, uint64_t now_ms);
  Step OnSidrReq(const CmMessage& m, const SidrReq& req);
  Step OnSidrRep(const SidrRep& rep);

  const uint32_t local_comm_id_;
  const ConnectionConfig config_;
  State state_ = State::kIdle;
  uint32_t remote_comm_id_ = 0;
  uint64_t remote_ca_guid_ = 0;
  uint32_t remote_qpn_ = 0;
  uint32_t local_qpn_ = 0;
  uint64_t local_ca_guid_ = 0;
  uint64_t tid_ = 0;
  uint8_t max_cm_retries_ = 15;
  uint64_t response_timeout_ms_ = 0;  // the peer's CM response time for what we send
  uint32_t sidr_request_id_ = 0;
  std::optional<CmMessage> last_sent_;  // retransmitted on timeout, resent for duplicates
  std::optional<uint64_t> deadline_ms_;
  uint64_t timeout_ms_ = 0;
  int retries_left_ = 0;
};

// The REJ for a REQ that matched no listener (reason kInvalidServiceId) or
// could not be taken (e.g. kNoResources): built from the REQ alone, as
// Linux's cm_issue_rej, with the REQ's transaction id.
CmMessage RejectUnmatchedReq(const CmMessage& req, RejReason reason);

}  // namespace droce::cm

#endif  // DROCE_LIB_CM_CONNECTION_H_
