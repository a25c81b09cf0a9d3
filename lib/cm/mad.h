// Communication Management MADs (IBTA vol 1 ch. 12 and 13.4): the 24-byte
// common MAD header and the CM messages REQ, MRA, REJ, REP, RTU, DREQ, DREP,
// SIDR_REQ and SIDR_REP, parsed from and serialised to the 256-byte MAD that a
// GSI (QP1) UD SEND carries. Field offsets are those of IBTA tables 99-120
// (the same layout Linux's ib_cm speaks, include/rdma/ibta_vol1_c12.h), with
// the ECE vendor id of IBA comment #9434 (REQ bytes 5-7, REP bytes 15/19/23,
// SIDR_REP bytes 6-7/11) and the ECE options in the MAD attribute modifier.
// Pure: no I/O, no allocation, every field read through byte_order.h.
#ifndef DROCE_LIB_CM_MAD_H_
#define DROCE_LIB_CM_MAD_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

namespace droce::cm {

inline constexpr uint32_t kMadSize = 256;
inline constexpr uint32_t kMadHeaderSize = 24;
inline constexpr uint32_t kMadDataSize = kMadSize - kMadHeaderSize;  // 232
inline constexpr uint8_t kMadBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kCmClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;
inline constexpr uint32_t kGsiQpn = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000;

// CM attribute ids (IBTA table 98).
enum class AttrId : uint16_t {
  kClassPortInfo = 0x0001,
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
  kLap = 0x0019,
  kApr = 0x001A,
};
std::string_view AttrName(AttrId id);

using Gid = std::array<uint8_t, 16>;

// Private data areas (IBTA table 100 "private data" sizes).
inline constexpr uint32_t kReqPrivateDataSize = 92;
inline constexpr uint32_t kMraPrivateDataSize = 222;
inline constexpr uint32_t kRejPrivateDataSize = 148;
inline constexpr uint32_t kRejAriSize = 72;
inline constexpr uint32_t kRepPrivateDataSize = 196;
inline constexpr uint32_t kRtuPrivateDataSize = 224;
inline constexpr uint32_t kDreqPrivateDataSize = 220;
inline constexpr uint32_t kDrepPrivateDataSize = 224;
inline constexpr uint32_t kSidrReqPrivateDataSize = 216;
inline constexpr uint32_t kSidrRepPrivateDataSize = 136;
inline constexpr uint32_t kSidrRepInfoSize = 72;

struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMethodSend;
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t tid = 0;
  AttrId attr_id = AttrId::kReq;
  uint32_t attr_mod = 0;  // ECE options in REQ/REP (IBA comment #9434)
  bool operator==(const MadHeader&) const = default;
};

// One path of a REQ (IBTA table 99, 44 bytes). On RoCE the LIDs are 0xFFFF
// (permissive) and the GIDs, flow label, traffic class and hop limit are
// the IP addressing of the connection.
struct CmPath {
  uint16_t local_lid = 0;
  uint16_t remote_lid = 0;
  Gid local_gid{};
  Gid remote_gid{};
  uint32_t flow_label = 0;  // 20 bits
  uint8_t packet_rate = 0;  // 6 bits
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;  // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits
  bool operator==(const CmPath&) const = default;
};

// Transport service type of a REQ (2 bits) and the extended type used for XRC.
enum class TransportType : uint8_t { kRc = 0, kUc = 1, kRd = 2, kExtended = 3 };

struct Req {
  uint32_t local_comm_id = 0;
  uint32_t vendor_id = 0;  // 24 bits (ECE)
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;  // 24 bits
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;                // 24 bits
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  TransportType transport = TransportType::kRc;
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;              // 24 bits
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;                // 3 bits
  uint16_t pkey = 0;
  uint8_t path_mtu = 0;  // 4 bits, IB MTU enum 1..5
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  uint8_t max_cm_retries = 0;   // 4 bits
  bool srq = false;
  uint8_t extended_transport = 0;  // 3 bits
  CmPath primary;
  CmPath alternate;
  bool sap_supported = false;
  std::array<uint8_t, kReqPrivateDataSize> private_data{};
  bool operator==(const Req&) const = default;
};

// What an MRA or REJ refers to (2 bits).
enum class MsgRef : uint8_t { kReq = 0, kRep = 1, kOther = 2 };  // kOther: LAP for MRA

struct Mra {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MsgRef message_mraed = MsgRef::kReq;
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, kMraPrivateDataSize> private_data{};
  bool operator==(const Mra&) const = default;
};

// REJ reasons (IBTA table 108; names as Linux's enum ib_cm_rej_reason).
enum class RejReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupported = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConn = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,
};
std::string_view RejReasonName(uint16_t reason);

struct Rej {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MsgRef message_rejected = MsgRef::kReq;
  uint8_t ari_length = 0;  // 7 bits, at most kRejAriSize
  uint16_t reason = 0;
  std::array<uint8_t, kRejAriSize> ari{};
  std::array<uint8_t, kRejPrivateDataSize> private_data{};
  bool operator==(const Rej&) const = default;
};

struct Rep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;   // 24 bits
  uint32_t vendor_id = 0;   // 24 bits, split over bytes 15, 19, 23 (ECE)
  uint32_t local_eecn = 0;  // 24 bits
  uint32_t starting_psn = 0;  // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;   // 5 bits
  uint8_t failover_accepted = 0;  // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;  // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  std::array<uint8_t, kRepPrivateDataSize> private_data{};
  bool operator==(const Rep&) const = default;
};

struct Rtu {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kRtuPrivateDataSize> private_data{};
  bool operator==(const Rtu&) const = default;
};

struct Dreq {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn = 0;  // 24 bits (QPN or EECN)
  std::array<uint8_t, kDreqPrivateDataSize> private_data{};
  bool operator==(const Dreq&) const = default;
};

struct Drep {
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kDrepPrivateDataSize> private_data{};
  bool operator==(const Drep&) const = default;
};

struct SidrReq {
  uint32_t request_id = 0;
  uint16_t pkey = 0;
  uint64_t service_id = 0;
  std::array<uint8_t, kSidrReqPrivateDataSize> private_data{};
  bool operator==(const SidrReq&) const = default;
};

// SIDR_REP status (IBTA table 121).
enum class SidrStatus : uint8_t {
  kOk = 0,
  kNoSuchService = 1,  // Linux IB_SIDR_UNSUPPORTED
  kReject = 2,
  kNoQp = 3,
  kRedirect = 4,
  kUnsupportedVersion = 5,
};

struct SidrRep {
  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kOk;
  uint8_t info_length = 0;  // at most kSidrRepInfoSize
  uint32_t vendor_id = 0;   // 24 bits: bytes 6-7 and 11 (ECE)
  uint32_t qpn = 0;         // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  std::array<uint8_t, kSidrRepInfoSize> info{};
  std::array<uint8_t, kSidrRepPrivateDataSize> private_data{};
  bool operator==(const SidrRep&) const = default;
};

using CmBody = std::variant<Req, Mra, Rej, Rep, Rtu, Dreq, Drep, SidrReq, SidrRep>;

struct CmMessage {
  MadHeader header;
  CmBody body;
  bool operator==(const CmMessage&) const = default;
};

// Why a received MAD was not a CM message this CM handles. Each has a
// counter in the daemon; the names are the counter names.
enum class MadError : uint8_t {
  kOk = 0,
  kBadLength,        // not exactly 256 bytes
  kBadBaseVersion,   // base version not 1
  kBadClass,         // management class not 0x07
  kBadClassVersion,  // class version not 2
  kBadMethod,        // not a Send (CM messages are all Send, IBTA 12.6.1)
  kResponseBit,      // method's response bit set
  kUnknownAttribute, // attribute id not REQ..SIDR_REP (LAP, APR, ClassPortInfo included)
  kBadField,         // an enumerated field out of range (MRA/REJ message, REJ ARI or SIDR info length)
  kCount,
};
std::string_view MadErrorName(MadError e);

struct ParsedMad {
  MadError error = MadError::kOk;
  CmMessage message;
  bool ok() const { return error == MadError::kOk; }
};

// Parses a MAD (the UD payload after the DETH). Nothing outside `mad` is read.
ParsedMad ParseMad(std::span<const uint8_t> mad);

// Writes the 256-byte MAD for `m`; reserved bits are zero. Values wider than
// their field are truncated to it.
std::array<uint8_t, kMadSize> SerializeMad(const CmMessage& m);

// The attribute id that belongs to a body alternative.
AttrId AttrOf(const CmBody& body);

// Linux's cm_convert_to_ms: a 5-bit CM timeout (4.096 us * 2^t) rounded to a
// power-of-two number of milliseconds, at least 1.
constexpr uint64_t CmTimeoutMs(uint8_t iba_time) {
  return uint64_t{1} << (iba_time > 8 ? iba_time - 8 : 0);
}

}  // namespace droce::cm

#endif  // DROCE_LIB_CM_MAD_H_
