#include "cm/mad.h"

#include <algorithm>
#include <cstring>

#include "wire/byte_order.h"

namespace droce::cm {
namespace {

using wire::LoadBe16;
using wire::LoadBe24;
using wire::LoadBe32;
using wire::LoadBe64;
using wire::StoreBe16;
using wire::StoreBe24;
using wire::StoreBe32;
using wire::StoreBe64;

// IBTA numbers bits from the most significant bit of a byte: bit offset 0 is
// 0x80. Get/Put take (offset from the MSB, width).
constexpr uint8_t GetBits(uint8_t byte, int msb_offset, int width) {
  return static_cast<uint8_t>((byte >> (8 - msb_offset - width)) & ((1u << width) - 1));
}
constexpr uint8_t PutBits(uint8_t value, int msb_offset, int width) {
  return static_cast<uint8_t>((value & ((1u << width) - 1)) << (8 - msb_offset - width));
}

constexpr uint32_t kMask24 = 0xFFFFFF;

template <size_t N>
void CopyIn(std::array<uint8_t, N>& dst, const uint8_t* src) {
  std::memcpy(dst.data(), src, N);
}
template <size_t N>
void CopyOut(uint8_t* dst, const std::array<uint8_t, N>& src) {
  std::memcpy(dst, src.data(), N);
}

// A path of a REQ at data offset `p` (44 bytes).
CmPath LoadPath(const uint8_t* p) {
  CmPath c;
  c.local_lid = LoadBe16(p + 0);
  c.remote_lid = LoadBe16(p + 2);
  std::memcpy(c.local_gid.data(), p + 4, 16);
  std::memcpy(c.remote_gid.data(), p + 20, 16);
  c.flow_label = LoadBe32(p + 36) >> 12;
  c.packet_rate = GetBits(p[39], 2, 6);
  c.traffic_class = p[40];
  c.hop_limit = p[41];
  c.sl = GetBits(p[42], 0, 4);
  c.subnet_local = GetBits(p[42], 4, 1) != 0;
  c.local_ack_timeout = GetBits(p[43], 0, 5);
  return c;
}
void StorePath(uint8_t* p, const CmPath& c, bool sap_supported) {
  StoreBe16(p + 0, c.local_lid);
  StoreBe16(p + 2, c.remote_lid);
  std::memcpy(p + 4, c.local_gid.data(), 16);
  std::memcpy(p + 20, c.remote_gid.data(), 16);
  StoreBe32(p + 36, (c.flow_label & 0xFFFFF) << 12);
  p[39] = PutBits(c.packet_rate, 2, 6);
  p[40] = c.traffic_class;
  p[41] = c.hop_limit;
  p[42] = static_cast<uint8_t>(PutBits(c.sl, 0, 4) | PutBits(c.subnet_local, 4, 1));
  p[43] = static_cast<uint8_t>(PutBits(c.local_ack_timeout, 0, 5) | PutBits(sap_supported, 5, 1));
}

Req LoadReq(const uint8_t* d) {
  Req r;
  r.local_comm_id = LoadBe32(d + 0);
  r.vendor_id = LoadBe24(d + 5);
  r.service_id = LoadBe64(d + 8);
  r.local_ca_guid = LoadBe64(d + 16);
  r.local_qkey = LoadBe32(d + 28);
  r.local_qpn = LoadBe24(d + 32);
  r.responder_resources = d[35];
  r.local_eecn = LoadBe24(d + 36);
  r.initiator_depth = d[39];
  r.remote_eecn = LoadBe24(d + 40);
  r.remote_cm_response_timeout = GetBits(d[43], 0, 5);
  r.transport = static_cast<TransportType>(GetBits(d[43], 5, 2));
  r.end_to_end_flow_control = GetBits(d[43], 7, 1) != 0;
  r.starting_psn = LoadBe24(d + 44);
  r.local_cm_response_timeout = GetBits(d[47], 0, 5);
  r.retry_count = GetBits(d[47], 5, 3);
  r.pkey = LoadBe16(d + 48);
  r.path_mtu = GetBits(d[50], 0, 4);
  r.rdc_exists = GetBits(d[50], 4, 1) != 0;
  r.rnr_retry_count = GetBits(d[50], 5, 3);
  r.max_cm_retries = GetBits(d[51], 0, 4);
  r.srq = GetBits(d[51], 4, 1) != 0;
  r.extended_transport = GetBits(d[51], 5, 3);
  r.primary = LoadPath(d + 52);
  r.alternate = LoadPath(d + 96);
  r.sap_supported = GetBits(d[139], 5, 1) != 0;
  CopyIn(r.private_data, d + 140);
  return r;
}
void StoreReq(uint8_t* d, const Req& r) {
  StoreBe32(d + 0, r.local_comm_id);
  StoreBe24(d + 5, r.vendor_id & kMask24);
  StoreBe64(d + 8, r.service_id);
  StoreBe64(d + 16, r.local_ca_guid);
  StoreBe32(d + 28, r.local_qkey);
  StoreBe24(d + 32, r.local_qpn & kMask24);
  d[35] = r.responder_resources;
  StoreBe24(d + 36, r.local_eecn & kMask24);
  d[39] = r.initiator_depth;
  StoreBe24(d + 40, r.remote_eecn & kMask24);
  d[43] = static_cast<uint8_t>(PutBits(r.remote_cm_response_timeout, 0, 5) |
                               PutBits(static_cast<uint8_t>(r.transport), 5, 2) |
                               PutBits(r.end_to_end_flow_control, 7, 1));
  StoreBe24(d + 44, r.starting_psn & kMask24);
  d[47] = static_cast<uint8_t>(PutBits(r.local_cm_response_timeout, 0, 5) | PutBits(r.retry_count, 5, 3));
  StoreBe16(d + 48, r.pkey);
  d[50] = static_cast<uint8_t>(PutBits(r.path_mtu, 0, 4) | PutBits(r.rdc_exists, 4, 1) |
                               PutBits(r.rnr_retry_count, 5, 3));
  d[51] = static_cast<uint8_t>(PutBits(r.max_cm_retries, 0, 4) | PutBits(r.srq, 4, 1) |
                               PutBits(r.extended_transport, 5, 3));
  StorePath(d + 52, r.primary, false);
  StorePath(d + 96, r.alternate, r.sap_supported);
  CopyOut(d + 140, r.private_data);
}

Rep LoadRep(const uint8_t* d) {
  Rep r;
  r.local_comm_id = LoadBe32(d + 0);
  r.remote_comm_id = LoadBe32(d + 4);
  r.local_qkey = LoadBe32(d + 8);
  r.local_qpn = LoadBe24(d + 12);
  r.vendor_id = (uint32_t{d[15]} << 16) | (uint32_t{d[19]} << 8) | d[23];
  r.local_eecn = LoadBe24(d + 16);
  r.starting_psn = LoadBe24(d + 20);
  r.responder_resources = d[24];
  r.initiator_depth = d[25];
  r.target_ack_delay = GetBits(d[26], 0, 5);
  r.failover_accepted = GetBits(d[26], 5, 2);
  r.end_to_end_flow_control = GetBits(d[26], 7, 1) != 0;
  r.rnr_retry_count = GetBits(d[27], 0, 3);
  r.srq = GetBits(d[27], 3, 1) != 0;
  r.local_ca_guid = LoadBe64(d + 28);
  CopyIn(r.private_data, d + 36);
  return r;
}
void StoreRep(uint8_t* d, const Rep& r) {
  StoreBe32(d + 0, r.local_comm_id);
  StoreBe32(d + 4, r.remote_comm_id);
  StoreBe32(d + 8, r.local_qkey);
  StoreBe24(d + 12, r.local_qpn & kMask24);
  d[15] = static_cast<uint8_t>(r.vendor_id >> 16);
  StoreBe24(d + 16, r.local_eecn & kMask24);
  d[19] = static_cast<uint8_t>(r.vendor_id >> 8);
  StoreBe24(d + 20, r.starting_psn & kMask24);
  d[23] = static_cast<uint8_t>(r.vendor_id);
  d[24] = r.responder_resources;
  d[25] = r.initiator_depth;
  d[26] = static_cast<uint8_t>(PutBits(r.target_ack_delay, 0, 5) | PutBits(r.failover_accepted, 5, 2) |
                               PutBits(r.end_to_end_flow_control, 7, 1));
  d[27] = static_cast<uint8_t>(PutBits(r.rnr_retry_count, 0, 3) | PutBits(r.srq, 3, 1));
  StoreBe64(d + 28, r.local_ca_guid);
  CopyOut(d + 36, r.private_data);
}

bool ParseBody(AttrId id, const uint8_t* d, CmBody& body) {
  switch (id) {
    case AttrId::kReq:
      body = LoadReq(d);
      return true;
    case AttrId::kMra: {
      Mra m;
      m.local_comm_id = LoadBe32(d + 0);
      m.remote_comm_id = LoadBe32(d + 4);
      const uint8_t ref = GetBits(d[8], 0, 2);
      if (ref > 2) return false;
      m.message_mraed = static_cast<MsgRef>(ref);
      m.service_timeout = GetBits(d[9], 0, 5);
      CopyIn(m.private_data, d + 10);
      body = m;
      return true;
    }
    case AttrId::kRej: {
      Rej r;
      r.local_comm_id = LoadBe32(d + 0);
      r.remote_comm_id = LoadBe32(d + 4);
      const uint8_t ref = GetBits(d[8], 0, 2);
      if (ref > 2) return false;
      r.message_rejected = static_cast<MsgRef>(ref);
      r.ari_length = GetBits(d[9], 0, 7);
      if (r.ari_length > kRejAriSize) return false;
      r.reason = LoadBe16(d + 10);
      CopyIn(r.ari, d + 12);
      CopyIn(r.private_data, d + 84);
      body = r;
      return true;
    }
    case AttrId::kRep:
      body = LoadRep(d);
      return true;
    case AttrId::kRtu: {
      Rtu r;
      r.local_comm_id = LoadBe32(d + 0);
      r.remote_comm_id = LoadBe32(d + 4);
      CopyIn(r.private_data, d + 8);
      body = r;
      return true;
    }
    case AttrId::kDreq: {
      Dreq r;
      r.local_comm_id = LoadBe32(d + 0);
      r.remote_comm_id = LoadBe32(d + 4);
      r.remote_qpn = LoadBe24(d + 8);
      CopyIn(r.private_data, d + 12);
      body = r;
      return true;
    }
    case AttrId::kDrep: {
      Drep r;
      r.local_comm_id = LoadBe32(d + 0);
      r.remote_comm_id = LoadBe32(d + 4);
      CopyIn(r.private_data, d + 8);
      body = r;
      return true;
    }
    case AttrId::kSidrReq: {
      SidrReq r;
      r.request_id = LoadBe32(d + 0);
      r.pkey = LoadBe16(d + 4);
      r.service_id = LoadBe64(d + 8);
      CopyIn(r.private_data, d + 16);
      body = r;
      return true;
    }
    case AttrId::kSidrRep: {
      SidrRep r;
      r.request_id = LoadBe32(d + 0);
      if (d[4] > static_cast<uint8_t>(SidrStatus::kUnsupportedVersion)) return false;
      r.status = static_cast<SidrStatus>(d[4]);
      r.info_length = d[5];
      if (r.info_length > kSidrRepInfoSize) return false;
      r.vendor_id = (uint32_t{LoadBe16(d + 6)} << 8) | d[11];
      r.qpn = LoadBe24(d + 8);
      r.service_id = LoadBe64(d + 12);
      r.qkey = LoadBe32(d + 20);
      CopyIn(r.info, d + 24);
      CopyIn(r.private_data, d + 96);
      body = r;
      return true;
    }
    default:
      return false;
  }
}

struct StoreVisitor {
  uint8_t* d;
  void operator()(const Req& r) const { StoreReq(d, r); }
  void operator()(const Mra& m) const {
    StoreBe32(d + 0, m.local_comm_id);
    StoreBe32(d + 4, m.remote_comm_id);
    d[8] = PutBits(static_cast<uint8_t>(m.message_mraed), 0, 2);
    d[9] = PutBits(m.service_timeout, 0, 5);
    CopyOut(d + 10, m.private_data);
  }
  void operator()(const Rej& r) const {
    StoreBe32(d + 0, r.local_comm_id);
    StoreBe32(d + 4, r.remote_comm_id);
    d[8] = PutBits(static_cast<uint8_t>(r.message_rejected), 0, 2);
    d[9] = PutBits(std::min<uint8_t>(r.ari_length, kRejAriSize), 0, 7);
    StoreBe16(d + 10, r.reason);
    CopyOut(d + 12, r.ari);
    CopyOut(d + 84, r.private_data);
  }
  void operator()(const Rep& r) const { StoreRep(d, r); }
  void operator()(const Rtu& r) const {
    StoreBe32(d + 0, r.local_comm_id);
    StoreBe32(d + 4, r.remote_comm_id);
    CopyOut(d + 8, r.private_data);
  }
  void operator()(const Dreq& r) const {
    StoreBe32(d + 0, r.local_comm_id);
    StoreBe32(d + 4, r.remote_comm_id);
    StoreBe24(d + 8, r.remote_qpn & kMask24);
    CopyOut(d + 12, r.private_data);
  }
  void operator()(const Drep& r) const {
    StoreBe32(d + 0, r.local_comm_id);
    StoreBe32(d + 4, r.remote_comm_id);
    CopyOut(d + 8, r.private_data);
  }
  void operator()(const SidrReq& r) const {
    StoreBe32(d + 0, r.request_id);
    StoreBe16(d + 4, r.pkey);
    StoreBe64(d + 8, r.service_id);
    CopyOut(d + 16, r.private_data);
  }
  void operator()(const SidrRep& r) const {
    StoreBe32(d + 0, r.request_id);
    d[4] = static_cast<uint8_t>(r.status);
    d[5] = std::min<uint8_t>(r.info_length, kSidrRepInfoSize);
    StoreBe16(d + 6, static_cast<uint16_t>(r.vendor_id >> 8));
    StoreBe24(d + 8, r.qpn & kMask24);
    d[11] = static_cast<uint8_t>(r.vendor_id);
    StoreBe64(d + 12, r.service_id);
    StoreBe32(d + 20, r.qkey);
    CopyOut(d + 24, r.info);
    CopyOut(d + 96, r.private_data);
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
