#include "wire/packet.h"

#include <algorithm>
#include <cstring>

#include "wire/crc32.h"

namespace droce::wire {

const char* ParseStatusName(ParseStatus s) {
  switch (s) {
    case ParseStatus::kOk: return "ok";
    case ParseStatus::kNotIp: return "not_ip";
    case ParseStatus::kNotUdp: return "not_udp";
    case ParseStatus::kNotRoce: return "not_roce";
    case ParseStatus::kIpFragment: return "ip_fragment";
    case ParseStatus::kTruncated: return "truncated";
    case ParseStatus::kBadIpHeader: return "bad_ip_header";
    case ParseStatus::kBadIpChecksum: return "bad_ip_checksum";
    case ParseStatus::kIpTtlZero: return "ip_ttl_zero";
    case ParseStatus::kBadUdpLength: return "bad_udp_length";
    case ParseStatus::kBadBthVersion: return "bad_bth_version";
    case ParseStatus::kUnknownOpcode: return "unknown_opcode";
    case ParseStatus::kBadPad: return "bad_pad";
    case ParseStatus::kLengthMismatch: return "length_mismatch";
    case ParseStatus::kBadIcrc: return "bad_icrc";
    case ParseStatus::kBadInt: return "bad_int";
    case ParseStatus::kCount: break;
  }
  return "?";
}

namespace {

ParsedPacket Fail(ParsedPacket p, ParseStatus s) {
  p.status = s;
  return p;
}

// With `cut`, the frame may end before the IP length says (a capture cut by
// its snaplen): every check that the available bytes allow still runs, and
// the headers up to the payload must be present.
ParsedPacket Parse(const uint8_t* f, uint32_t len, bool cut) {
  ParsedPacket p;
  if (len < kEthBytes) return Fail(p, ParseStatus::kTruncated);
  uint16_t ether_type = EthView(f).ether_type();
  uint32_t off = kEthBytes;
  if (ether_type == kEtherTypeVlan) {
    if (len < off + kVlanTagBytes) return Fail(p, ParseStatus::kTruncated);
    VlanView vlan(f + off);
    p.has_vlan = true;
    p.vlan_tci = vlan.tci();
    ether_type = vlan.inner_ether_type();
    off += kVlanTagBytes;
  }
  p.l3_offset = static_cast<uint16_t>(off);

  uint32_t ip_end;  // one past the last byte the IP header says belongs to the packet
  uint32_t l4;
  if (ether_type == kEtherTypeIpv4) {
    p.ipv6 = false;
    if (len < off + kIpv4MinBytes) return Fail(p, ParseStatus::kTruncated);
    Ipv4View ip(f + off);
    const uint32_t ihl = ip.header_bytes();
    if (ip.version() != 4 || ihl < kIpv4MinBytes || ip.total_length() < ihl) {
      return Fail(p, ParseStatus::kBadIpHeader);
    }
    if (ip.protocol() != kIpProtoUdp) return Fail(p, ParseStatus::kNotUdp);
    if (ip.is_fragment()) return Fail(p, ParseStatus::kIpFragment);
    p.tclass = ip.tos();
    l4 = off + ihl;
    ip_end = off + ip.total_length();
  } else if (ether_type == kEtherTypeIpv6) {
    p.ipv6 = true;
    if (len < off + kIpv6Bytes) return Fail(p, ParseStatus::kTruncated);
    Ipv6View ip(f + off);
    if (ip.version() != 6) return Fail(p, ParseStatus::kBadIpHeader);
    // Extension headers never precede RoCEv2's UDP header in practice.
    if (ip.next_header() != kIpProtoUdp) return Fail(p, ParseStatus::kNotUdp);
    p.tclass = ip.traffic_class();
    l4 = off + kIpv6Bytes;
    ip_end = l4 + ip.payload_length();
  } else {
    return Fail(p, ParseStatus::kNotIp);
  }
  p.l4_offset = static_cast<uint16_t>(l4);
  if (len < l4 + kUdpBytes) return Fail(p, ParseStatus::kTruncated);
  UdpView udp(f + l4);
  if (udp.dst_port() != kRoceV2Port) return Fail(p, ParseStatus::kNotRoce);
  if (!p.ipv6) {
    // The whole IPv4 header is present (l4 + UDP bytes are); only RoCEv2
    // frames are checked: foreign ones are not ours to judge.
    const uint8_t* ip = f + p.l3_offset;
    if (Ipv4View(ip).ttl() == 0) return Fail(p, ParseStatus::kIpTtlZero);
    if (!Ipv4HeaderChecksumOk(ip, l4 - p.l3_offset)) return Fail(p, ParseStatus::kBadIpChecksum);
  }
  if (ip_end < l4 + kUdpBytes || udp.length() != ip_end - l4) {
    return Fail(p, ParseStatus::kBadUdpLength);
  }
  // Offsets are 16-bit: a maximal IP length behind Ethernet/VLAN would put the
  // ICRC past 0xFFFF and wrap icrc_offset (no Ethernet frame is that long).
  if (ip_end > 0xFFFF) return Fail(p, ParseStatus::kLengthMismatch);
  if (ip_end > len && !cut) return Fail(p, ParseStatus::kTruncated);
  const uint32_t bth = l4 + kUdpBytes;
  p.bth_offset = static_cast<uint16_t>(bth);
  if (ip_end < bth + kBthBytes + kIcrcBytes) return Fail(p, ParseStatus::kLengthMismatch);
  if (len < bth + kBthBytes) return Fail(p, ParseStatus::kTruncated);

  BthView bth_view(f + bth);
  p.opcode = bth_view.opcode();
  if (bth_view.tver() != 0) return Fail(p, ParseStatus::kBadBthVersion);
  const OpcodeInfo& op = OpInfo(p.opcode);
  if (!op.valid()) return Fail(p, ParseStatus::kUnknownOpcode);

  const uint32_t icrc = ip_end - kIcrcBytes;
  uint32_t payload = bth + op.header_bytes;
  if (payload > icrc) return Fail(p, ParseStatus::kLengthMismatch);
  if (payload > len) return Fail(p, ParseStatus::kTruncated);
  if ((f[bth + 4] & kBthIntFlag) != 0) {
    IntStack unused;
    const uint32_t avail = (cut ? std::min(len, icrc) : icrc) - payload;
    const uint32_t int_bytes = ParseInt(f + payload, avail, &unused);
    if (int_bytes == 0) return Fail(p, cut && len < icrc ? ParseStatus::kTruncated : ParseStatus::kBadInt);
    p.int_offset = static_cast<uint16_t>(payload);
    payload += int_bytes;
  }
  const uint32_t area = icrc - payload;
  const uint8_t pad = bth_view.pad_count();
  if (area % 4 != 0) return Fail(p, ParseStatus::kLengthMismatch);
  if (pad > area) return Fail(p, ParseStatus::kBadPad);
  if (!(op.roles & kRolePayload) && area != 0) return Fail(p, ParseStatus::kLengthMismatch);

  p.pad = pad;
  p.payload_offset = static_cast<uint16_t>(payload);
  p.payload_len = static_cast<uint16_t>(area - pad);
  p.icrc_offset = static_cast<uint16_t>(icrc);
  p.status = ParseStatus::kOk;
  return p;
}

}  // namespace

ParsedPacket ParsePacket(const uint8_t* frame, uint32_t len) { return Parse(frame, len, false); }

ParsedPacket ParseHeaders(const uint8_t* frame, uint32_t caplen) {
  return Parse(frame, caplen, true);
}

ParsedPacket ParseAndVerify(const uint8_t* frame, uint32_t len) {
  ParsedPacket p = ParsePacket(frame, len);
  if (p.ok() && !IcrcMatches(frame, p)) p.status = ParseStatus::kBadIcrc;
  return p;
}

bool StampInt(uint8_t* frame, const ParsedPacket& p, const IntHop& h) {
  if (!p.ok() || p.int_offset == 0) return false;
  if (!PushIntHop(frame + p.int_offset, p.payload_offset - p.int_offset, h)) return false;
  StoreLe32(frame + p.icrc_offset, ComputeIcrc(frame + p.l3_offset, p.icrc_offset - p.l3_offset, p.ipv6));
  return true;
}

uint32_t StoredIcrc(const uint8_t* frame, const ParsedPacket& p) {
  return LoadLe32(frame + p.icrc_offset);
}

bool IcrcMatches(const uint8_t* frame, const ParsedPacket& p) {
  return ComputeIcrc(frame + p.l3_offset, p.icrc_offset - p.l3_offset, p.ipv6) ==
         LoadLe32(frame + p.icrc_offset);  // StoredIcrc
}

uint16_t Ipv4HeaderChecksum(const uint8_t* ip, uint32_t header_bytes) {
  uint32_t sum = 0;
  for (uint32_t i = 0; i < header_bytes; i += 2) {
    if (i == 10) continue;  // the checksum field itself counts as zero
    sum += LoadBe16(ip + i);
  }
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

Route MakeRoute(const RouteFields& f) {
  Route r;
  uint8_t* b = r.bytes.data();
  EthWriter eth(b);
  eth.set_dst_mac(f.dst_mac.data());
  eth.set_src_mac(f.src_mac.data());
  uint32_t off = kEthBytes;
  const uint16_t l3_type = f.ipv6 ? kEtherTypeIpv6 : kEtherTypeIpv4;
  if (f.has_vlan) {
    eth.set_ether_type(kEtherTypeVlan);
    VlanWriter vlan(b + off);
    vlan.set_tci(f.vlan_tci);
    vlan.set_inner_ether_type(l3_type);
    off += kVlanTagBytes;
  } else {
    eth.set_ether_type(l3_type);
  }
  r.l3_offset = static_cast<uint8_t>(off);
  r.ipv6 = f.ipv6;
  if (f.ipv6) {
    Ipv6Writer ip(b + off);
    ip.set_version_class_flow(f.tclass, f.flow_label);
    ip.set_payload_length(0);
    ip.set_next_header(kIpProtoUdp);
    ip.set_hop_limit(f.ttl);
    ip.set_src(f.src_ip.data());
    ip.set_dst(f.dst_ip.data());
    off += kIpv6Bytes;
  } else {
    Ipv4Writer ip(b + off);
    ip.set_version_ihl(0x45);
    ip.set_tos(f.tclass);
    ip.set_total_length(0);
    ip.set_id(f.ipv4_id);
    ip.set_flags_fragment(f.ipv4_flags_fragment);
    ip.set_ttl(f.ttl);
    ip.set_protocol(kIpProtoUdp);
    ip.set_checksum(0);
    ip.set_src(LoadBe32(f.src_ip.data() + 12));
    ip.set_dst(LoadBe32(f.dst_ip.data() + 12));
    for (uint32_t i = 0; i < kIpv4MinBytes; i += 2) r.ipv4_partial_sum += LoadBe16(b + off + i);
    off += kIpv4MinBytes;
  }
  r.l4_offset = static_cast<uint8_t>(off);
  UdpWriter udp(b + off);
  udp.set_src_port(f.udp_src_port);
  udp.set_dst_port(f.udp_dst_port);
  udp.set_length(0);
  udp.set_checksum(f.udp_checksum);
  off += kUdpBytes;
  r.len = static_cast<uint8_t>(off);
  return r;
}

Route WithTrafficClass(const Route& r, uint8_t tclass) {
  Route out = r;
  uint8_t* l3 = out.bytes.data() + out.l3_offset;
  if (out.ipv6) {
    Ipv6Writer ip(l3);
    ip.set_version_class_flow(tclass, ip.flow_label());
  } else {
    Ipv4Writer(l3).set_tos(tclass);
    out.ipv4_partial_sum = 0;  // length and checksum are zero in a route
    for (uint32_t i = 0; i < kIpv4MinBytes; i += 2) out.ipv4_partial_sum += LoadBe16(l3 + i);
  }
  return out;
}


uint32_t FinishHeaders(uint8_t* frame, const Route& r, uint32_t transport_len) {
  return FinishLengths(frame, r, transport_len);
}

HeaderTemplate MakeHeaderTemplate(const Route& r, uint16_t pkey, uint32_t dest_qp) {
  HeaderTemplate t;
  t.route = r;
  std::memcpy(t.bytes.data(), r.bytes.data(), r.len);
  BthWriter bth(t.bytes.data() + r.len);
  bth.set_flags(false, true, 0, 0);  // MigReq set: no APM, like rxe
  bth.set_pkey(pkey);
  bth.set_dest_qp(dest_qp);
  const uint8_t* l3 = t.bytes.data() + r.l3_offset;
  const uint32_t headers = r.len + kBthBytes - r.l3_offset;
  // The register with the per-packet bytes zero: remove what they add.
  t.icrc_base = IcrcBegin(l3, headers, r.ipv6) ^ IcrcPerPacketBytes(l3, r.ipv6);
  return t;
}

uint32_t IcrcTemplateBegin(const uint8_t* frame, const HeaderTemplate& t, uint32_t after_bth) {
  return TemplateRegister(frame, t, after_bth);
}

uint32_t FinishTemplateFrame(uint8_t* frame, const HeaderTemplate& t, uint32_t transport_len) {
  return FinishTemplateFrameInline(frame, t, transport_len);
}

bool MarkCe(uint8_t* frame, uint32_t len) {
  const L3Info l3 = ReadL3(frame, len);
  uint8_t* ip = frame + l3.l3_offset;
  if (l3.ether_type == kEtherTypeIpv4 && len >= l3.l3_offset + kIpv4MinBytes) {
    Ipv4Writer v4(ip);
    const uint32_t ihl = v4.header_bytes();
    if (v4.ecn() == kEcnNotEct || v4.ecn() == kEcnCe || ihl < kIpv4MinBytes || len < l3.l3_offset + ihl) return false;
    v4.set_ecn(kEcnCe);
    v4.set_checksum(Ipv4HeaderChecksum(ip, ihl));
    return true;
  }
  if (l3.ether_type == kEtherTypeIpv6 && len >= l3.l3_offset + kIpv6Bytes) {
    Ipv6Writer v6(ip);
    if (v6.ecn() == kEcnNotEct || v6.ecn() == kEcnCe) return false;
    v6.set_ecn(kEcnCe);
    return true;
  }
  return false;
}

uint32_t FlowLabelForQpPair(uint32_t local_qpn, uint32_t remote_qpn) {
  uint64_t v = uint64_t{local_qpn} * remote_qpn;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<uint32_t>(v & 0xFFFFF);
}

uint16_t UdpSourcePortForFlowLabel(uint32_t flow_label) {
  uint32_t low = flow_label & 0x3FFF;
  const uint32_t high = flow_label & 0xFC000;
  low ^= high >> 14;
  return static_cast<uint16_t>(low | 0xC000);
}

}  // namespace droce::wire
