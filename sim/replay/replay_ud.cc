// Capture replay for UD traffic (doc/replay.md "UD captures"): a droce UD QP
// in the receiver's place must deliver every datagram of the capture as
// rxe's receiver got it (GRH area, payload, src_qp, immediate); a droce UD
// QP in the sender's place, given the same work requests, must put the same
// packets on the wire.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/str_format.h"
#include "core/device.h"
#include "sim/replay/replay.h"
#include "sim/wire/scripted_io.h"
#include "transport/ud_qp.h"
#include "wire/packet.h"

namespace droce::sim {
namespace {

using namespace droce::wire;
using namespace droce::core;

struct Datagram {
  size_t index;  // frame number, 1-based
  const std::vector<uint8_t>* bytes;
  ParsedPacket p;
  uint32_t dest_qp, src_qp, qkey, psn;
  bool solicited;
};

struct Endpoints {
  Gid src{}, dst{};
  Mac src_mac{}, dst_mac{};
  bool operator<(const Endpoints& o) const { return std::tie(src, dst) < std::tie(o.src, o.dst); }
};

Gid AddressGid(const uint8_t* f, const ParsedPacket& p, bool source) {
  Gid g{};
  const uint8_t* l3 = f + p.l3_offset;
  if (p.ipv6) {
    std::memcpy(g.data(), l3 + (source ? 8 : 24), 16);
  } else {
    g[10] = g[11] = 0xFF;
    std::memcpy(g.data() + 12, l3 + (source ? 12 : 16), 4);
  }
  return g;
}

std::string Text(const Gid& g) {
  if (IsIpv4MappedGid(g)) return absl::StrFormat("%u.%u.%u.%u", g[12], g[13], g[14], g[15]);
  std::string s;
  for (int i = 0; i < 16; i += 2) absl::StrAppendFormat(&s, "%s%x", i ? ":" : "", LoadBe16(&g[i]));
  return s;
}

constexpr uint32_t kSlot = 8192;  // receive / send buffer per datagram

// The device of one end: its MAC, address and QPN as the capture shows them.
std::unique_ptr<Device> MakeEnd(ScriptedIo* io, const Mac& mac, const Gid& gid, uint32_t qpn) {
  DeviceConfig cfg;
  cfg.mac = mac;
  if (IsIpv4MappedGid(gid)) cfg.ipv4 = LoadBe32(gid.data() + 12);
  cfg.ecn = kEcnNotEct;  // rxe sends Not-ECT
  cfg.cnp_enabled = false;
  cfg.qpn_base = qpn;
  cfg.max_qp = 1;
  return std::make_unique<Device>(cfg, io);
}

uint32_t UdQp(Device& dev, uint32_t pd, uint32_t cq, uint32_t qkey, uint32_t sq_psn) {
  QpInitAttr init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  init.caps.type = transport::QpType::kUd;
  init.caps.max_send_wr = init.caps.max_recv_wr = 4096;
  const uint32_t qpn = *dev.CreateQp(init);
  transport::QpAttr a;
  a.qp_state = transport::QpState::kInit;
  a.qkey = qkey;
  (void)dev.ModifyQp(qpn, a, transport::kAttrState | transport::kAttrPkeyIndex | transport::kAttrPort |
                                 transport::kAttrQkey);
  a.qp_state = transport::QpState::kRtr;
  (void)dev.ModifyQp(qpn, a, transport::kAttrState);
  a.qp_state = transport::QpState::kRts;
  a.sq_psn = sq_psn;
  (void)dev.ModifyQp(qpn, a, transport::kAttrState | transport::kAttrSqPsn);
  return qpn;
}

ReplayResult Receive(const Endpoints& e, const std::vector<Datagram>& dgs) {
  ReplayResult r;
  r.direction = Text(e.src) + " -> " + Text(e.dst) + " (UD receiver)";
  r.mtu = 4096;  // the port MTU of the droce end (a datagram is one packet)
  if (!IsIpv4MappedGid(e.dst)) {
    r.skipped = true;
    r.skip_reason = "UD over IPv6: not in the reference captures yet";
    return r;
  }
  ScriptedIo io;
  std::unique_ptr<Device> dev = MakeEnd(&io, e.dst_mac, e.dst, dgs[0].dest_qp);
  const uint32_t pd = dev->AllocPd();
  const uint32_t cq = *dev->CreateCq(1 << 16);
  std::vector<uint8_t> mem(dgs.size() * kSlot, 0);
  const mem::MrKeys keys = *dev->RegMr(pd, mem.data(), mem.size(), 0x10000000, mem::kLocalWrite);
  const uint32_t qpn = UdQp(*dev, pd, cq, dgs[0].qkey, 0);
  for (size_t i = 0; i < dgs.size(); ++i) {
    transport::RecvWr w;
    w.wr_id = i;
    w.num_sge = 1;
    w.sg_list[0] = {0x10000000 + i * kSlot, kSlot, keys.lkey};
    (void)dev->PostRecv(qpn, w);
  }
  uint64_t now = 1'000'000;
  std::vector<queue::Completion> got;
  for (const Datagram& d : dgs) {
    io.rx.push_back(*d.bytes);
    dev->Poll(now += 1000);
    queue::Completion c[4];
    for (uint32_t k; (k = dev->PollCq(cq, c, 4)) > 0;) got.insert(got.end(), c, c + k);
    ++r.requests_fed;
  }
  r.reference_responses = static_cast<uint32_t>(dgs.size());
  r.droce_responses = static_cast<uint32_t>(got.size());
  if (got.size() != dgs.size()) {
    r.mismatches.push_back(absl::StrFormat("%u datagrams delivered, the capture has %u", got.size(), dgs.size()));
    return r;
  }
  for (size_t i = 0; i < dgs.size(); ++i) {
    const Datagram& d = dgs[i];
    const queue::Completion& c = got[i];
    const uint8_t* f = d.bytes->data();
    const uint8_t* buf = mem.data() + c.wr_id * kSlot;
    std::string diff;
    if (c.status != queue::WcStatus::kSuccess) diff += absl::StrFormat(" status %s", queue::WcStatusName(c.status));
    if (c.wr_id != i) diff += " out of order";
    if (c.byte_len != transport::kGrhBytes + d.p.payload_len) diff += absl::StrFormat(" byte_len %u", c.byte_len);
    if (c.src_qp != d.src_qp) diff += absl::StrFormat(" src_qp 0x%x", c.src_qp);
    if (!(c.flags & queue::kWcGrh)) diff += " no IBV_WC_GRH";
    if (d.p.op().Has(kHdrImmDt) &&
        (!(c.flags & queue::kWcWithImm) ||
         std::memcmp(&c.imm_or_inv, f + d.p.bth_offset + d.p.op().immdt_offset, 4) != 0)) {
      diff += " immediate";
    }
    static constexpr uint8_t kZero[20] = {};
    if (std::memcmp(buf, kZero, 20) != 0 || std::memcmp(buf + 20, f + d.p.l3_offset, 20) != 0) {
      diff += " GRH area (20 zero bytes + the IPv4 header)";
    }
    if (std::memcmp(buf + transport::kGrhBytes, f + d.p.payload_offset, d.p.payload_len) != 0) diff += " payload";
    if (!diff.empty()) r.mismatches.push_back(absl::StrFormat("frame %u:%s", d.index, diff));
  }
  return r;
}

ReplayResult Send(const Endpoints& e, const std::vector<Datagram>& dgs) {
  ReplayResult r;
  r.direction = Text(e.src) + " -> " + Text(e.dst) + " (UD sender)";
  r.mtu = 4096;
  if (!IsIpv4MappedGid(e.src)) {
    r.skipped = true;
    r.skip_reason = "UD over IPv6: not in the reference captures yet";
    return r;
  }
  ScriptedIo io;
  std::unique_ptr<Device> dev = MakeEnd(&io, e.src_mac, e.src, dgs[0].src_qp);
  dev->AddNeighbor(e.dst, e.dst_mac);
  const uint32_t pd = dev->AllocPd();
  const uint32_t cq = *dev->CreateCq(1 << 16);
  std::vector<uint8_t> mem(dgs.size() * kSlot, 0);
  const mem::MrKeys keys = *dev->RegMr(pd, mem.data(), mem.size(), 0x10000000, mem::kLocalWrite);
  const uint32_t qpn = UdQp(*dev, pd, cq, dgs[0].qkey, dgs[0].psn);
  const uint8_t* f0 = dgs[0].bytes->data();
  transport::AddressVector av;
  av.dgid = e.dst;
  av.sgid_index = 1;
  av.hop_limit = f0[dgs[0].p.l3_offset + 8];       // IPv4 TTL
  av.traffic_class = f0[dgs[0].p.l3_offset + 1];   // TOS
  absl::StatusOr<uint32_t> ah = dev->CreateAh(pd, av);
  if (!ah.ok()) {
    r.skipped = true;
    r.skip_reason = std::string(ah.status().message());
    return r;
  }
  uint64_t now = 1'000'000;
  for (size_t i = 0; i < dgs.size(); ++i) {
    const Datagram& d = dgs[i];
    const uint8_t* f = d.bytes->data();
    std::memcpy(mem.data() + i * kSlot, f + d.p.payload_offset, d.p.payload_len);
    transport::SendWr w;
    w.wr_id = i;
    w.opcode = d.p.op().Has(kHdrImmDt) ? transport::WrOpcode::kSendWithImm : transport::WrOpcode::kSend;
    w.flags = transport::kSendSignaled | (d.solicited ? uint32_t{transport::kSendSolicited} : 0u);
    w.num_sge = 1;
    w.sg_list[0] = {0x10000000 + i * kSlot, d.p.payload_len, keys.lkey};
    if (d.p.op().Has(kHdrImmDt)) std::memcpy(&w.imm_data, f + d.p.bth_offset + d.p.op().immdt_offset, 4);
    w.ah = *ah;
    w.remote_qpn = d.dest_qp;
    w.remote_qkey = d.qkey;
    if (dev->PostSend(qpn, w) != 0) r.mismatches.push_back(absl::StrFormat("frame %u: post_send failed", d.index));
    dev->Poll(now += 1000);
    ++r.requests_fed;
  }
  for (int i = 0; i < 10; ++i) dev->Poll(now += 1000);
  queue::Completion c[64];
  uint32_t ok = 0;
  for (uint32_t k; (k = dev->PollCq(cq, c, 64)) > 0;) {
    for (uint32_t j = 0; j < k; ++j) ok += c[j].status == queue::WcStatus::kSuccess;
  }
  if (ok != dgs.size()) r.mismatches.push_back(absl::StrFormat("%u of %u sends completed", ok, dgs.size()));
  r.reference_responses = static_cast<uint32_t>(dgs.size());
  r.droce_responses = static_cast<uint32_t>(io.sent.size());
  if (io.sent.size() != dgs.size()) {
    r.mismatches.push_back(absl::StrFormat("droce sent %u packets, rxe %u", io.sent.size(), dgs.size()));
    return r;
  }
  for (size_t i = 0; i < dgs.size(); ++i) {
    const std::vector<uint8_t>& ref = *dgs[i].bytes;
    const std::vector<uint8_t>& got = io.sent[i];
    const ParsedPacket gp = ParseAndVerify(got.data(), static_cast<uint32_t>(got.size()));
    std::string diff;
    if (!gp.ok()) diff += absl::StrFormat(" does not verify (%s)", ParseStatusName(gp.status));
    if (got.size() != ref.size()) diff += absl::StrFormat(" length %u vs %u", got.size(), ref.size());
    // Every byte but the IPv4 identification and header checksum (the
    // sender's IP stack's choice) and the ICRC, which covers the
    // identification; droce's ICRC is checked above.
    const uint32_t l3 = dgs[i].p.l3_offset;
    const uint32_t n = static_cast<uint32_t>(std::min(got.size(), ref.size())) - kIcrcBytes;
    for (uint32_t b = 0; b < n; ++b) {
      if (b == l3 + 4 || b == l3 + 5 || b == l3 + 10 || b == l3 + 11) continue;
      if (got[b] != ref[b]) {
        diff += absl::StrFormat(" byte %u: 0x%02x vs 0x%02x", b, got[b], ref[b]);
        break;
      }
    }
    if (!diff.empty()) r.mismatches.push_back(absl::StrFormat("frame %u:%s", dgs[i].index, diff));
  }
  return r;
}

}  // namespace

bool IsUdCapture(const std::vector<CapturedFrame>& frames) {
  for (const CapturedFrame& fr : frames) {
    const ParsedPacket p = ParsePacket(fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()));
    if (p.ok()) return p.op().transport == Transport::kUd;
  }
  return false;
}

std::vector<ReplayResult> ReplayUd(const std::vector<CapturedFrame>& frames, bool sender) {
  std::map<Endpoints, std::vector<Datagram>> directions;
  for (size_t i = 0; i < frames.size(); ++i) {
    const CapturedFrame& fr = frames[i];
    const ParsedPacket probe = ParsePacket(fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()));
    if (IsForeign(probe.status)) continue;
    ReplayResult skip;
    skip.skipped = true;
    if (fr.wire_len > fr.bytes.size()) {
      skip.skip_reason = "capture cut at snaplen: payloads and ICRCs missing";
      return {skip};
    }
    const ParsedPacket p = ParseAndVerify(fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()));
    if (!p.ok() || p.op().transport != Transport::kUd) {
      skip.skip_reason = absl::StrFormat("frame %u: not a valid UD packet", i + 1);
      return {skip};
    }
    const uint8_t* f = fr.bytes.data();
    Endpoints e;
    e.src = AddressGid(f, p, true);
    e.dst = AddressGid(f, p, false);
    std::memcpy(e.dst_mac.data(), f, 6);
    std::memcpy(e.src_mac.data(), f + 6, 6);
    const BthView bth(f + p.bth_offset);
    const DethView deth(f + p.bth_offset + p.op().deth_offset);
    directions[e].push_back(
        {i + 1, &fr.bytes, p, bth.dest_qp(), deth.src_qp(), deth.qkey(), bth.psn(), bth.solicited()});
  }
  std::vector<ReplayResult> results;
  for (const auto& [e, dgs] : directions) results.push_back(sender ? Send(e, dgs) : Receive(e, dgs));
  if (results.empty()) {
    ReplayResult r;
    r.skipped = true;
    r.skip_reason = "no UD datagrams in the capture";
    results.push_back(r);
  }
  return results;
}

}  // namespace droce::sim
