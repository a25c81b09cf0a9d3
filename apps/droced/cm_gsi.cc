#include "apps/droced/cm_gsi.h"

#include <cstring>

#include "wire/headers.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace droce::droced {

bool IsIpv4MappedGid(const cm::Gid& g) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  return std::memcmp(g.data(), kPrefix, sizeof kPrefix) == 0;
}

uint32_t BuildGsiFrame(const GsiPath& path, std::span<const uint8_t, cm::kMadSize> mad, uint32_t psn,
                       uint8_t* out) {
  wire::RouteFields f;
  f.src_mac = path.src_mac;
  f.dst_mac = path.dst_mac;
  f.ipv6 = !IsIpv4MappedGid(path.dst_gid);
  f.tclass = path.tclass;
  f.ttl = path.hop_limit;
  f.src_ip = path.src_gid;
  f.dst_ip = path.dst_gid;
  // Linux's rxe picks the UDP source port from the QP pair's flow label.
  f.udp_src_port = wire::UdpSourcePortForFlowLabel(wire::FlowLabelForQpPair(cm::kGsiQpn, cm::kGsiQpn));
  const wire::Route route = wire::MakeRoute(f);
  uint8_t* bth = wire::WriteRoute(out, route);
  wire::BthWriter b(bth);
  b.set_opcode(static_cast<uint8_t>(wire::Opcode::kUdSendOnly));
  b.set_flags(false, false, 0, 0);
  b.set_pkey(path.pkey);
  b.set_ecn_bits(false, false);
  b.set_dest_qp(cm::kGsiQpn);
  b.set_ack_req(false);
  b.set_psn(psn & 0xFFFFFF);
  wire::DethWriter d(bth + wire::kBthBytes);
  d.set_qkey(cm::kGsiQkey);
  d.set_src_qp(cm::kGsiQpn);
  std::memcpy(bth + wire::kBthBytes + wire::kDethBytes, mad.data(), mad.size());
  return wire::FinalizeFrame(out, route, wire::kBthBytes + wire::kDethBytes + cm::kMadSize);
}

GsiPacket ParseGsiFrame(const uint8_t* frame, uint32_t len) {
  GsiPacket g;
  const wire::ParsedPacket p = wire::ParseAndVerify(frame, len);
  if (!p.ok()) return g;
  if (p.opcode != static_cast<uint8_t>(wire::Opcode::kUdSendOnly)) {
    g.drop = GsiDrop::kNotUdSend;
    return g;
  }
  const wire::BthView bth(frame + p.bth_offset);
  const wire::DethView deth(frame + p.bth_offset + wire::kBthBytes);
  if (deth.qkey() != cm::kGsiQkey) {
    g.drop = GsiDrop::kBadQkey;
    return g;
  }
  if (p.payload_len != cm::kMadSize) {
    g.drop = GsiDrop::kBadLength;
    return g;
  }
  std::memcpy(g.from.dst_mac.data(), frame, 6);
  std::memcpy(g.from.src_mac.data(), frame + 6, 6);
  const uint8_t* l3 = frame + p.l3_offset;
  if (p.ipv6) {
    std::memcpy(g.from.src_gid.data(), l3 + 8, 16);
    std::memcpy(g.from.dst_gid.data(), l3 + 24, 16);
    g.from.hop_limit = l3[7];
  } else {
    g.from.src_gid = cm::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    g.from.dst_gid = g.from.src_gid;
    std::memcpy(g.from.src_gid.data() + 12, l3 + 12, 4);
    std::memcpy(g.from.dst_gid.data() + 12, l3 + 16, 4);
    g.from.hop_limit = l3[8];
  }
  g.from.tclass = p.tclass;
  g.from.pkey = bth.pkey();
  g.src_qp = deth.src_qp();
  g.mad = std::span<const uint8_t>(frame + p.payload_offset, p.payload_len);
  g.drop = GsiDrop::kNone;
  (void)bth.dest_qp();
  return g;
}

GsiPath ReplyPath(const GsiPath& r) {
  GsiPath p = r;
  p.src_mac = r.dst_mac;
  p.dst_mac = r.src_mac;
  p.src_gid = r.dst_gid;
  p.dst_gid = r.src_gid;
  p.hop_limit = 64;
  return p;
}

std::string_view GsiDropName(GsiDrop d) {
  static constexpr std::string_view kNames[] = {"none", "gsi_bad_packet", "gsi_not_ud_send", "gsi_bad_qkey",
                                                "gsi_bad_length"};
  static_assert(std::size(kNames) == static_cast<size_t>(GsiDrop::kCount));
  const auto i = static_cast<size_t>(d);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

}  // namespace droce::droced
