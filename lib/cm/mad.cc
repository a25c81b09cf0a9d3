#include "cm/mad.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "wire/byte_order.h"

namespace droce::cm {
namespace {

using wire::LoadBe16;
using wire::LoadBe32;
using wire::LoadBe64;
using wire::StoreBe16;
using wire::StoreBe32;
using wire::StoreBe64;

// Each attribute's layout is a table of fields (IBTA vol 1 12.6, tables
// 98-121, as Linux's ibta_vol1_c12.h writes them): where a field sits in the
// attribute data (byte, bit offset from that byte's most significant bit,
// width in bits; a field may span bytes) and which member holds it. One
// routine reads a table (LoadFields) and one writes it (StoreFields), as
// lib/wire does for headers; nothing walks a message by hand.

// A big-endian bit field of at most 64 bits starting `bit` bits below the MSB of d[byte].
uint64_t GetField(const uint8_t* d, uint32_t byte, uint32_t bit, uint32_t width) {
  const uint32_t nbytes = (bit + width + 7) / 8;
  uint64_t raw = 0;
  for (uint32_t i = 0; i < nbytes; ++i) raw = (raw << 8) | d[byte + i];
  const uint64_t mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  return (raw >> (nbytes * 8 - bit - width)) & mask;
}
// Writes one into zeroed bytes (the fields of a byte are ORed together).
void PutField(uint8_t* d, uint32_t byte, uint32_t bit, uint32_t width, uint64_t v) {
  const uint32_t nbytes = (bit + width + 7) / 8;
  const uint64_t mask = width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  const uint64_t raw = (v & mask) << (nbytes * 8 - bit - width);
  for (uint32_t i = 0; i < nbytes; ++i) d[byte + i] |= static_cast<uint8_t>(raw >> (8 * (nbytes - 1 - i)));
}

// A scalar field: member M of T (an integer, bool or enum).
template <typename T, typename M>
struct Field {
  M T::*member;
  uint16_t byte;
  uint8_t bit;
  uint8_t width;
  uint8_t shift = 0;   // part of the member: its bits from `shift` up (an ECE vendor id split over bytes)
  uint64_t max = 0;    // a larger value is a malformed MAD (0: any)
  bool clamp = false;  // written as at most `max`
  bool part = false;   // one of several fields that make up the member
};
// A byte array (GIDs, ARI, additional info, private data) at `byte`.
template <typename T, size_t N>
struct BytesField {
  std::array<uint8_t, N> T::*member;
  uint16_t byte;
};
// A nested layout (a REQ's paths) at `byte`.
template <typename T, typename M, typename Table>
struct SubField {
  M T::*member;
  uint16_t byte;
  const Table* table;
};

template <typename T, typename M>
constexpr Field<T, M> F(M T::*member, uint16_t byte, uint8_t bit, uint8_t width) {
  return {member, byte, bit, width};
}
template <typename T, typename M>
constexpr Field<T, M> Part(M T::*member, uint16_t byte, uint8_t width, uint8_t shift) {
  return {member, byte, 0, width, shift, 0, false, true};
}
template <typename T, typename M>
constexpr Field<T, M> Bounded(M T::*member, uint16_t byte, uint8_t bit, uint8_t width, uint64_t max, bool clamp) {
  return {member, byte, bit, width, 0, max, clamp};
}
template <typename T, size_t N>
constexpr BytesField<T, N> B(std::array<uint8_t, N> T::*member, uint16_t byte) {
  return {member, byte};
}

template <typename T, typename M>
bool LoadField(const uint8_t* d, T& obj, const Field<T, M>& f) {
  const uint64_t v = GetField(d, f.byte, f.bit, f.width);
  if (f.max != 0 && v > f.max) return false;
  if constexpr (std::is_same_v<M, bool>) {
    obj.*f.member = v != 0;
  } else if (f.part) {
    obj.*f.member = static_cast<M>(static_cast<uint64_t>(obj.*f.member) | (v << f.shift));
  } else {
    obj.*f.member = static_cast<M>(v);
  }
  return true;
}
template <typename T, size_t N>
bool LoadField(const uint8_t* d, T& obj, const BytesField<T, N>& f) {
  std::memcpy((obj.*f.member).data(), d + f.byte, N);
  return true;
}
template <typename T, typename... Fs>
bool LoadFields(const uint8_t* d, T& obj, const std::tuple<Fs...>& table);
template <typename T, typename M, typename Table>
bool LoadField(const uint8_t* d, T& obj, const SubField<T, M, Table>& f) {
  return LoadFields(d + f.byte, obj.*f.member, *f.table);
}
template <typename T, typename... Fs>
bool LoadFields(const uint8_t* d, T& obj, const std::tuple<Fs...>& table) {
  return std::apply([&](const auto&... f) { return (LoadField(d, obj, f) && ...); }, table);
}

template <typename T, typename M>
void StoreField(uint8_t* d, const T& obj, const Field<T, M>& f) {
  uint64_t v = static_cast<uint64_t>(obj.*f.member) >> f.shift;
  if (f.clamp) v = std::min(v, f.max);
  PutField(d, f.byte, f.bit, f.width, v);
}
template <typename T, size_t N>
void StoreField(uint8_t* d, const T& obj, const BytesField<T, N>& f) {
  std::memcpy(d + f.byte, (obj.*f.member).data(), N);
}
template <typename T, typename... Fs>
void StoreFields(uint8_t* d, const T& obj, const std::tuple<Fs...>& table);
template <typename T, typename M, typename Table>
void StoreField(uint8_t* d, const T& obj, const SubField<T, M, Table>& f) {
  StoreFields(d + f.byte, obj.*f.member, *f.table);
}
template <typename T, typename... Fs>
void StoreFields(uint8_t* d, const T& obj, const std::tuple<Fs...>& table) {
  std::apply([&](const auto&... f) { (StoreField(d, obj, f), ...); }, table);
}

constexpr uint64_t kMaxMsgRef = static_cast<uint64_t>(MsgRef::kOther);

// A path of a REQ (44 bytes; table 99's primary/alternate fields).
constexpr auto kPathFields = std::tuple{
    F(&CmPath::local_lid, 0, 0, 16),    F(&CmPath::remote_lid, 2, 0, 16),  B(&CmPath::local_gid, 4),
    B(&CmPath::remote_gid, 20),         F(&CmPath::flow_label, 36, 0, 20), F(&CmPath::packet_rate, 39, 2, 6),
    F(&CmPath::traffic_class, 40, 0, 8), F(&CmPath::hop_limit, 41, 0, 8),  F(&CmPath::sl, 42, 0, 4),
    F(&CmPath::subnet_local, 42, 4, 1), F(&CmPath::local_ack_timeout, 43, 0, 5),
};

constexpr auto kReqFields = std::tuple{
    F(&Req::local_comm_id, 0, 0, 32),
    F(&Req::vendor_id, 5, 0, 24),
    F(&Req::service_id, 8, 0, 64),
    F(&Req::local_ca_guid, 16, 0, 64),
    F(&Req::local_qkey, 28, 0, 32),
    F(&Req::local_qpn, 32, 0, 24),
    F(&Req::responder_resources, 35, 0, 8),
    F(&Req::local_eecn, 36, 0, 24),
    F(&Req::initiator_depth, 39, 0, 8),
    F(&Req::remote_eecn, 40, 0, 24),
    F(&Req::remote_cm_response_timeout, 43, 0, 5),
    F(&Req::transport, 43, 5, 2),
    F(&Req::end_to_end_flow_control, 43, 7, 1),
    F(&Req::starting_psn, 44, 0, 24),
    F(&Req::local_cm_response_timeout, 47, 0, 5),
    F(&Req::retry_count, 47, 5, 3),
    F(&Req::pkey, 48, 0, 16),
    F(&Req::path_mtu, 50, 0, 4),
    F(&Req::rdc_exists, 50, 4, 1),
    F(&Req::rnr_retry_count, 50, 5, 3),
    F(&Req::max_cm_retries, 51, 0, 4),
    F(&Req::srq, 51, 4, 1),
    F(&Req::extended_transport, 51, 5, 3),
    SubField<Req, CmPath, decltype(kPathFields)>{&Req::primary, 52, &kPathFields},
    SubField<Req, CmPath, decltype(kPathFields)>{&Req::alternate, 96, &kPathFields},
    F(&Req::sap_supported, 139, 5, 1),  // in the alternate path's last byte
    B(&Req::private_data, 140),
};

constexpr auto kMraFields = std::tuple{
    F(&Mra::local_comm_id, 0, 0, 32),
    F(&Mra::remote_comm_id, 4, 0, 32),
    Bounded(&Mra::message_mraed, 8, 0, 2, kMaxMsgRef, false),
    F(&Mra::service_timeout, 9, 0, 5),
    B(&Mra::private_data, 10),
};

constexpr auto kRejFields = std::tuple{
    F(&Rej::local_comm_id, 0, 0, 32),
    F(&Rej::remote_comm_id, 4, 0, 32),
    Bounded(&Rej::message_rejected, 8, 0, 2, kMaxMsgRef, false),
    Bounded(&Rej::ari_length, 9, 0, 7, kRejAriSize, true),
    F(&Rej::reason, 10, 0, 16),
    B(&Rej::ari, 12),
    B(&Rej::private_data, 84),
};

constexpr auto kRepFields = std::tuple{
    F(&Rep::local_comm_id, 0, 0, 32),
    F(&Rep::remote_comm_id, 4, 0, 32),
    F(&Rep::local_qkey, 8, 0, 32),
    F(&Rep::local_qpn, 12, 0, 24),
    Part(&Rep::vendor_id, 15, 8, 16),  // ECE: the vendor id's bytes after the QPN, EECN and PSN
    F(&Rep::local_eecn, 16, 0, 24),
    Part(&Rep::vendor_id, 19, 8, 8),
    F(&Rep::starting_psn, 20, 0, 24),
    Part(&Rep::vendor_id, 23, 8, 0),
    F(&Rep::responder_resources, 24, 0, 8),
    F(&Rep::initiator_depth, 25, 0, 8),
    F(&Rep::target_ack_delay, 26, 0, 5),
    F(&Rep::failover_accepted, 26, 5, 2),
    F(&Rep::end_to_end_flow_control, 26, 7, 1),
    F(&Rep::rnr_retry_count, 27, 0, 3),
    F(&Rep::srq, 27, 3, 1),
    F(&Rep::local_ca_guid, 28, 0, 64),
    B(&Rep::private_data, 36),
};

constexpr auto kRtuFields = std::tuple{
    F(&Rtu::local_comm_id, 0, 0, 32),
    F(&Rtu::remote_comm_id, 4, 0, 32),
    B(&Rtu::private_data, 8),
};

constexpr auto kDreqFields = std::tuple{
    F(&Dreq::local_comm_id, 0, 0, 32),
    F(&Dreq::remote_comm_id, 4, 0, 32),
    F(&Dreq::remote_qpn, 8, 0, 24),
    B(&Dreq::private_data, 12),
};

constexpr auto kDrepFields = std::tuple{
    F(&Drep::local_comm_id, 0, 0, 32),
    F(&Drep::remote_comm_id, 4, 0, 32),
    B(&Drep::private_data, 8),
};

constexpr auto kSidrReqFields = std::tuple{
    F(&SidrReq::request_id, 0, 0, 32),
    F(&SidrReq::pkey, 4, 0, 16),
    F(&SidrReq::service_id, 8, 0, 64),
    B(&SidrReq::private_data, 16),
};

constexpr auto kSidrRepFields = std::tuple{
    F(&SidrRep::request_id, 0, 0, 32),
    Bounded(&SidrRep::status, 4, 0, 8, static_cast<uint64_t>(SidrStatus::kUnsupportedVersion), false),
    Bounded(&SidrRep::info_length, 5, 0, 8, kSidrRepInfoSize, true),
    Part(&SidrRep::vendor_id, 6, 16, 8),  // ECE: bytes 6-7 and 11
    F(&SidrRep::qpn, 8, 0, 24),
    Part(&SidrRep::vendor_id, 11, 8, 0),
    F(&SidrRep::service_id, 12, 0, 64),
    F(&SidrRep::qkey, 20, 0, 32),
    B(&SidrRep::info, 24),
    B(&SidrRep::private_data, 96),
};

// Each message's table.
template <typename T>
constexpr int kLayout = 0;  // every message has its specialisation below
template <> constexpr const auto& kLayout<Req> = kReqFields;
template <> constexpr const auto& kLayout<Mra> = kMraFields;
template <> constexpr const auto& kLayout<Rej> = kRejFields;
template <> constexpr const auto& kLayout<Rep> = kRepFields;
template <> constexpr const auto& kLayout<Rtu> = kRtuFields;
template <> constexpr const auto& kLayout<Dreq> = kDreqFields;
template <> constexpr const auto& kLayout<Drep> = kDrepFields;
template <> constexpr const auto& kLayout<SidrReq> = kSidrReqFields;
template <> constexpr const auto& kLayout<SidrRep> = kSidrRepFields;

template <typename T>
bool LoadBody(const uint8_t* d, CmBody& body) {
  T m;
  if (!LoadFields(d, m, kLayout<T>)) return false;
  body = m;
  return true;
}

bool ParseBody(AttrId id, const uint8_t* d, CmBody& body) {
  switch (id) {
    case AttrId::kReq: return LoadBody<Req>(d, body);
    case AttrId::kMra: return LoadBody<Mra>(d, body);
    case AttrId::kRej: return LoadBody<Rej>(d, body);
    case AttrId::kRep: return LoadBody<Rep>(d, body);
    case AttrId::kRtu: return LoadBody<Rtu>(d, body);
    case AttrId::kDreq: return LoadBody<Dreq>(d, body);
    case AttrId::kDrep: return LoadBody<Drep>(d, body);
    case AttrId::kSidrReq: return LoadBody<SidrReq>(d, body);
    case AttrId::kSidrRep: return LoadBody<SidrRep>(d, body);
    default: return false;
  }
}

struct StoreVisitor {
  uint8_t* d;
  template <typename T>
  void operator()(const T& m) const {
    StoreFields(d, m, kLayout<T>);
  }
};

struct AttrVisitor {
  AttrId operator()(const Req&) const { return AttrId::kReq; }
  AttrId operator()(const Mra&) const { return AttrId::kMra; }
  AttrId operator()(const Rej&) const { return AttrId::kRej; }
  AttrId operator()(const Rep&) const { return AttrId::kRep; }
  AttrId operator()(const Rtu&) const { return AttrId::kRtu; }
  AttrId operator()(const Dreq&) const { return AttrId::kDreq; }
  AttrId operator()(const Drep&) const { return AttrId::kDrep; }
  AttrId operator()(const SidrReq&) const { return AttrId::kSidrReq; }
  AttrId operator()(const SidrRep&) const { return AttrId::kSidrRep; }
};

}  // namespace

AttrId AttrOf(const CmBody& body) { return std::visit(AttrVisitor{}, body); }

ParsedMad ParseMad(std::span<const uint8_t> mad) {
  ParsedMad out;
  if (mad.size() != kMadSize) {
    out.error = MadError::kBadLength;
    return out;
  }
  const uint8_t* h = mad.data();
  MadHeader& hdr = out.message.header;
  hdr.base_version = h[0];
  hdr.mgmt_class = h[1];
  hdr.class_version = h[2];
  hdr.method = h[3];
  hdr.status = LoadBe16(h + 4);
  hdr.class_specific = LoadBe16(h + 6);
  hdr.tid = LoadBe64(h + 8);
  hdr.attr_id = static_cast<AttrId>(LoadBe16(h + 16));
  hdr.attr_mod = LoadBe32(h + 20);
  if (hdr.base_version != kMadBaseVersion) {
    out.error = MadError::kBadBaseVersion;
  } else if (hdr.mgmt_class != kMgmtClassCm) {
    out.error = MadError::kBadClass;
  } else if (hdr.class_version != kCmClassVersion) {
    out.error = MadError::kBadClassVersion;
  } else if ((hdr.method & 0x80) != 0) {
    out.error = MadError::kResponseBit;
  } else if (hdr.method != kMethodSend) {
    out.error = MadError::kBadMethod;
  } else if (hdr.attr_id < AttrId::kReq || hdr.attr_id > AttrId::kSidrRep) {
    out.error = MadError::kUnknownAttribute;
  } else if (!ParseBody(hdr.attr_id, h + kMadHeaderSize, out.message.body)) {
    out.error = MadError::kBadField;
  }
  return out;
}

std::array<uint8_t, kMadSize> SerializeMad(const CmMessage& m) {
  std::array<uint8_t, kMadSize> out{};
  uint8_t* h = out.data();
  h[0] = m.header.base_version;
  h[1] = m.header.mgmt_class;
  h[2] = m.header.class_version;
  h[3] = m.header.method;
  StoreBe16(h + 4, m.header.status);
  StoreBe16(h + 6, m.header.class_specific);
  StoreBe64(h + 8, m.header.tid);
  // The attribute id always names the body that is written.
  StoreBe16(h + 16, static_cast<uint16_t>(AttrOf(m.body)));
  StoreBe32(h + 20, m.header.attr_mod);
  std::visit(StoreVisitor{h + kMadHeaderSize}, m.body);
  return out;
}

std::string_view AttrName(AttrId id) {
  switch (id) {
    case AttrId::kClassPortInfo: return "ClassPortInfo";
    case AttrId::kReq: return "REQ";
    case AttrId::kMra: return "MRA";
    case AttrId::kRej: return "REJ";
    case AttrId::kRep: return "REP";
    case AttrId::kRtu: return "RTU";
    case AttrId::kDreq: return "DREQ";
    case AttrId::kDrep: return "DREP";
    case AttrId::kSidrReq: return "SIDR_REQ";
    case AttrId::kSidrRep: return "SIDR_REP";
    case AttrId::kLap: return "LAP";
    case AttrId::kApr: return "APR";
  }
  return "unknown";
}

std::string_view MadErrorName(MadError e) {
  static constexpr std::string_view kNames[] = {
      "ok", "bad_length", "bad_base_version", "bad_class", "bad_class_version",
      "bad_method", "response_bit", "unknown_attribute", "bad_field",
  };
  static_assert(std::size(kNames) == static_cast<size_t>(MadError::kCount));
  const auto i = static_cast<size_t>(e);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::string_view RejReasonName(uint16_t reason) {
  static constexpr std::string_view kNames[] = {
      "",                              // 0
      "no_qp",                         // 1
      "no_eec",                        // 2
      "no_resources",                  // 3
      "timeout",                       // 4
      "unsupported",                   // 5
      "invalid_comm_id",               // 6
      "invalid_comm_instance",         // 7
      "invalid_service_id",            // 8
      "invalid_transport_type",        // 9
      "stale_conn",                    // 10
      "rdc_not_exist",                 // 11
      "invalid_gid",                   // 12
      "invalid_lid",                   // 13
      "invalid_sl",                    // 14
      "invalid_traffic_class",         // 15
      "invalid_hop_limit",             // 16
      "invalid_packet_rate",           // 17
      "invalid_alt_gid",               // 18
      "invalid_alt_lid",               // 19
      "invalid_alt_sl",                // 20
      "invalid_alt_traffic_class",     // 21
      "invalid_alt_hop_limit",         // 22
      "invalid_alt_packet_rate",       // 23
      "port_cm_redirect",              // 24
      "port_redirect",                 // 25
      "invalid_mtu",                   // 26
      "insufficient_resp_resources",   // 27
      "consumer_defined",              // 28
      "invalid_rnr_retry",             // 29
      "duplicate_local_comm_id",       // 30
      "invalid_class_version",         // 31
      "invalid_flow_label",            // 32
      "invalid_alt_flow_label",        // 33
      "",                              // 34
      "vendor_option_not_supported",   // 35
  };
  if (reason < std::size(kNames) && !kNames[reason].empty()) return kNames[reason];
  return "unknown";
}

}  // namespace droce::cm
