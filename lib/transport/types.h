// Work requests, QP attributes and their masks. Numeric values equal those of
// <infiniband/verbs.h> (ibv_wr_opcode, ibv_send_flags, ibv_qp_state,
// ibv_qp_attr_mask, ibv_mtu) so the verbs provider passes them through
// (static_asserted in drivers/verbs/enums_test.cc).
#ifndef DROCE_LIB_TRANSPORT_TYPES_H_
#define DROCE_LIB_TRANSPORT_TYPES_H_

#include <array>
#include <cstdint>

namespace droce::transport {

inline constexpr uint32_t kMaxSge = 8;
inline constexpr uint32_t kMaxInlineData = 256;
inline constexpr uint32_t kMaxRdAtomic = 128;  // as rxe: peers (perftest) may ask for that many
// IBTA 9.4.x: a DMA length (a message, a RETH's length) is 0..2^31 bytes
// (max_msg_sz). Longer requests are NAKed invalid request, as rxe does.
inline constexpr uint32_t kMaxMessageBytes = 1u << 31;

enum class WrOpcode : uint8_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
  kAtomicCmpAndSwp = 5,
  kAtomicFetchAndAdd = 6,
  kLocalInv = 7,
  kBindMw = 8,
  kSendWithInv = 9,
};

enum SendFlags : uint32_t {
  kSendFence = 1 << 0,
  kSendSignaled = 1 << 1,
  kSendSolicited = 1 << 2,
  kSendInline = 1 << 3,
};

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// BIND_MW: ibv_mw_bind_info, the window and the key it gets.
struct BindWr {
  uint32_t mw_handle = 0;  // the window's slot (mem::MrTable::MwHandle)
  uint32_t new_key = 0;    // its low 8 bits become the window's key variant
  uint32_t mr_lkey = 0;
  uint32_t access = 0;     // mem::Access bits the window grants
  uint64_t addr = 0;
  uint64_t length = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg_list{};
  uint64_t remote_addr = 0;  // RDMA and atomic
  uint32_t rkey = 0;
  uint32_t imm_data = 0;         // a __be32 as verbs holds it: its bytes are the wire bytes, in order
  uint32_t invalidate_rkey = 0;  // SEND_WITH_INV, LOCAL_INV
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  BindWr bind;  // BIND_MW
  // UD (ibv_send_wr.wr.ud): the address handle (Device::CreateAh), the
  // destination QP and its Q_Key; a Q_Key with the high bit set means the
  // QP's own (controlled Q_Key, IBTA 10.2.5).
  uint32_t ah = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
};

// A WRITE or SEND of one SGE without inline data (Qp::PublishOneSge): the
// fields such a WR carries, which the verbs post fills from the program's
// WR and the QP writes straight into its WQE.
struct OneSgeWr {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;  // kRdmaWrite or kSend
  uint32_t flags = 0;                 // SendFlags but kSendInline
  std::array<Sge, 1> sg_list{};
  uint64_t remote_addr = 0;  // kRdmaWrite
  uint32_t rkey = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg_list{};
};

enum class QpState : uint8_t {
  kReset = 0,
  kInit = 1,
  kRtr = 2,
  kRts = 3,
  kSqd = 4,
  kSqe = 5,
  kErr = 6,
};
const char* QpStateName(QpState s);

enum AttrMask : uint32_t {
  kAttrState = 1 << 0,
  kAttrCurState = 1 << 1,
  kAttrEnSqdAsyncNotify = 1 << 2,
  kAttrAccessFlags = 1 << 3,
  kAttrPkeyIndex = 1 << 4,
  kAttrPort = 1 << 5,
  kAttrQkey = 1 << 6,
  kAttrAv = 1 << 7,
  kAttrPathMtu = 1 << 8,
  kAttrTimeout = 1 << 9,
  kAttrRetryCnt = 1 << 10,
  kAttrRnrRetry = 1 << 11,
  kAttrRqPsn = 1 << 12,
  kAttrMaxQpRdAtomic = 1 << 13,
  kAttrAltPath = 1 << 14,
  kAttrMinRnrTimer = 1 << 15,
  kAttrSqPsn = 1 << 16,
  kAttrMaxDestRdAtomic = 1 << 17,
  kAttrPathMigState = 1 << 18,
  kAttrCap = 1 << 19,
  kAttrDestQpn = 1 << 20,
};

// Address vector for RoCEv2: GRH addressing plus the resolved next-hop MAC.
struct AddressVector {
  std::array<uint8_t, 16> dgid{};
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;  // DSCP << 2 | ECN; ECN bits are replaced by the device's policy
  uint32_t flow_label = 0;
  std::array<uint8_t, 6> dmac{};
  bool dmac_valid = false;  // false: the device resolves it from its neighbour table
};

struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  uint32_t qp_access_flags = 0;  // mem::Access bits for incoming requests
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  uint32_t qkey = 0;
  AddressVector ah;
  uint32_t path_mtu = 1024;  // bytes: 256, 512, 1024, 2048, 4096
  uint8_t timeout = 14;      // 4.096 us * 2^timeout; 0 = infinite
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;     // 7 = infinite
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  uint8_t min_rnr_timer = 12;
  uint32_t dest_qp_num = 0;
};

// ibv_mtu enum (1..5) <-> bytes.
uint32_t MtuEnumToBytes(uint32_t mtu_enum);
uint32_t MtuBytesToEnum(uint32_t bytes);

// IBTA 9.7.5.2.8, Table 45: RNR timer field -> nanoseconds.
uint64_t RnrTimerNs(uint8_t code);
// IBTA 9.7.6.1.3 local ACK timeout: 4.096 us * 2^timeout; 0 means infinite (returns 0).
inline uint64_t AckTimeoutNs(uint8_t timeout) {
  return timeout == 0 ? 0 : 4096ull << (timeout > 31 ? 31 : timeout);
}

}  // namespace droce::transport

#endif  // DROCE_LIB_TRANSPORT_TYPES_H_
