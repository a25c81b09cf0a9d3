#include "wire/fields.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace droce::wire {

static_assert(kSackEthBytes == 4 + kSackBits / 8, "the SACKETH is the base PSN word and the bitmap");

PacketFields DecodeFields(const uint8_t* frame, const ParsedPacket& p) {
  PacketFields f;
  RouteFields& r = f.route;
  EthView eth(frame);
  std::memcpy(r.dst_mac.data(), eth.dst_mac(), 6);
  std::memcpy(r.src_mac.data(), eth.src_mac(), 6);
  r.has_vlan = p.has_vlan;
  r.vlan_tci = p.vlan_tci;
  r.ipv6 = p.ipv6;
  const uint8_t* l3 = frame + p.l3_offset;
  if (p.ipv6) {
    Ipv6View ip(l3);
    r.tclass = ip.traffic_class();
    r.flow_label = ip.flow_label();
    r.ttl = ip.hop_limit();
    std::memcpy(r.src_ip.data(), ip.src(), 16);
    std::memcpy(r.dst_ip.data(), ip.dst(), 16);
  } else {
    Ipv4View ip(l3);
    r.tclass = ip.tos();
    r.ttl = ip.ttl();
    r.ipv4_id = ip.id();
    r.ipv4_flags_fragment = ip.flags_fragment();
    r.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    r.dst_ip = r.src_ip;
    StoreBe32(r.src_ip.data() + 12, ip.src());
    StoreBe32(r.dst_ip.data() + 12, ip.dst());
  }
  UdpView udp(frame + p.l4_offset);
  r.udp_src_port = udp.src_port();
  r.udp_dst_port = udp.dst_port();
  r.udp_checksum = udp.checksum();

  const uint8_t* bth_p = frame + p.bth_offset;
  BthView bth(bth_p);
  f.bth = {bth.opcode(), bth.solicited(), bth.mig_req(), bth.tver(),  bth.pkey(),
           bth.fecn(),   bth.becn(),      bth.resv6(),   bth.dest_qp(), bth.ack_req(),
           bth.resv7(),  bth.psn()};
  f.pad = p.pad;
  const OpcodeInfo& op = p.op();
  if (op.Has(kHdrReth)) {
    RethView v(bth_p + op.reth_offset);
    f.reth_va = v.va();
    f.reth_rkey = v.rkey();
    f.reth_length = v.dma_length();
  }
  if (op.Has(kHdrAeth)) {
    AethView v(bth_p + op.aeth_offset);
    f.aeth_syndrome = v.syndrome();
    f.aeth_msn = v.msn();
  }
  if (op.Has(kHdrAtomicEth)) {
    AtomicEthView v(bth_p + op.atomic_offset);
    f.atomic_va = v.va();
    f.atomic_rkey = v.rkey();
    f.atomic_swap_add = v.swap_add();
    f.atomic_compare = v.compare();
  }
  if (op.Has(kHdrAtomicAckEth)) {
    f.atomic_ack_original = AtomicAckEthView(bth_p + op.atomic_ack_offset).original();
  }
  if (op.Has(kHdrDeth)) {
    DethView v(bth_p + op.deth_offset);
    f.deth_qkey = v.qkey();
    f.deth_resv8 = v.resv8();
    f.deth_src_qp = v.src_qp();
  }
  if (op.Has(kHdrImmDt)) f.imm_data = ImmDtView(bth_p + op.immdt_offset).value();
  if (op.Has(kHdrIeth)) f.ieth_rkey = IethView(bth_p + op.ieth_offset).value();
  if (op.Has(kHdrSrEth)) {
    SrEthView v(bth_p + op.sreth_offset);
    f.sreth_va = v.va();
    f.sreth_rkey = v.rkey();
    f.sreth_length = v.dma_length();
    f.sreth_offset = v.offset();
    f.sreth_recv_seq = v.recv_seq();
  }
  if (op.Has(kHdrSackEth)) {
    SackEthView v(bth_p + op.sacketh_offset);
    f.sack_base_psn = v.base_psn();
    for (uint32_t w = 0; w < kSackBits / 64; ++w) f.sack_bits[w] = v.word(w);
  }
  if (p.int_offset != 0) {
    f.has_int = ParseInt(frame + p.int_offset, p.payload_offset - p.int_offset, &f.int_stack) != 0;
  }
  f.payload = {frame + p.payload_offset, p.payload_len};
  f.icrc = StoredIcrc(frame, p);
  return f;
}

uint32_t WriteTransportHeaders(const PacketFields& f, uint8_t* bth_p) {
  const OpcodeInfo& op = OpInfo(f.bth.opcode);
  BthWriter bth(bth_p);
  bth.set_opcode(f.bth.opcode);
  bth.set_flags(f.bth.solicited, f.bth.mig_req, 0, f.bth.tver);
  bth.set_pkey(f.bth.pkey);
  bth.set_ecn_bits(f.bth.fecn, f.bth.becn, f.bth.resv6);
  bth.set_dest_qp(f.bth.dest_qp);
  bth.set_ack_req(f.bth.ack_req, f.bth.resv7);
  bth.set_psn(f.bth.psn);
  // Headers such as the CNP's 16 reserved bytes are zero unless set below.
  std::memset(bth_p + kBthBytes, 0, op.header_bytes - kBthBytes);
  if (op.Has(kHdrReth)) {
    RethWriter v(bth_p + op.reth_offset);
    v.set_va(f.reth_va);
    v.set_rkey(f.reth_rkey);
    v.set_dma_length(f.reth_length);
  }
  if (op.Has(kHdrAeth)) {
    AethWriter v(bth_p + op.aeth_offset);
    v.set_syndrome(f.aeth_syndrome);
    v.set_msn(f.aeth_msn);
  }
  if (op.Has(kHdrAtomicEth)) {
    AtomicEthWriter v(bth_p + op.atomic_offset);
    v.set_va(f.atomic_va);
    v.set_rkey(f.atomic_rkey);
    v.set_swap_add(f.atomic_swap_add);
    v.set_compare(f.atomic_compare);
  }
  if (op.Has(kHdrAtomicAckEth)) {
    AtomicAckEthWriter(bth_p + op.atomic_ack_offset).set_original(f.atomic_ack_original);
  }
  if (op.Has(kHdrDeth)) {
    DethWriter v(bth_p + op.deth_offset);
    v.set_qkey(f.deth_qkey);
    v.set_src_qp(f.deth_src_qp, f.deth_resv8);
  }
  if (op.Has(kHdrImmDt)) ImmDtWriter(bth_p + op.immdt_offset).set_value(f.imm_data);
  if (op.Has(kHdrIeth)) IethWriter(bth_p + op.ieth_offset).set_value(f.ieth_rkey);
  if (op.Has(kHdrSrEth)) {
    SrEthWriter v(bth_p + op.sreth_offset);
    v.set_va(f.sreth_va);
    v.set_rkey(f.sreth_rkey);
    v.set_dma_length(f.sreth_length);
    v.set_offset(f.sreth_offset);
    v.set_recv_seq(f.sreth_recv_seq);
  }
  if (op.Has(kHdrSackEth)) {
    SackEthWriter v(bth_p + op.sacketh_offset);
    v.set_base_psn(f.sack_base_psn);
    for (uint32_t w = 0; w < kSackBits / 64; ++w) v.set_word(w, f.sack_bits[w]);
  }
  if (!f.has_int) return op.header_bytes;
  bth_p[4] |= kBthIntFlag;
  return op.header_bytes + WriteInt(bth_p + op.header_bytes, f.int_stack);
}

absl::StatusOr<uint32_t> SerializeFields(const PacketFields& f, uint8_t* out, uint32_t capacity) {
  const OpcodeInfo& op = OpInfo(f.bth.opcode);
  if (!op.valid()) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown opcode 0x%02x", f.bth.opcode));
  }
  if (!f.payload.empty() && !(op.roles & kRolePayload)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s carries no payload", op.name));
  }
  const Route route = MakeRoute(f.route);
  const uint64_t need = uint64_t{route.bytes.size()} + op.header_bytes + (f.has_int ? kIntMaxBytes : 0) +
                        f.payload.size() + 3 + kIcrcBytes;
  if (need > capacity || need > 0xFFFF) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("frame of up to %d bytes does not fit in %u", need, capacity));
  }
  uint8_t* bth = WriteRoute(out, route);
  const uint32_t hdr = WriteTransportHeaders(f, bth);
  if (!f.payload.empty()) std::memcpy(bth + hdr, f.payload.data(), f.payload.size());
  return FinalizeFrame(out, route, hdr + static_cast<uint32_t>(f.payload.size()));
}

std::string AethDescription(uint8_t syndrome) {
  const uint8_t v = SyndromeValue(syndrome);
  switch (SyndromeType(syndrome)) {
    case AethType::kAck: return absl::StrFormat("ACK credits=%u", v);
    case AethType::kRnrNak: return absl::StrFormat("RNR-NAK timer=%u", v);
    case AethType::kReserved: return absl::StrFormat("reserved(0x%02x)", syndrome);
    case AethType::kNak: {
      static constexpr const char* kNames[] = {"PSN-seq-err", "invalid-req", "remote-access-err",
                                               "remote-op-err", "invalid-rd-req"};
      return v < 5 ? absl::StrFormat("NAK %s", kNames[v]) : absl::StrFormat("NAK code=%u", v);
    }
  }
  return "?";
}

std::string DescribePacket(const uint8_t* frame, const ParsedPacket& p) {
  const PacketFields f = DecodeFields(frame, p);
  const OpcodeInfo& op = p.op();
  std::string s = absl::StrFormat("%-30s qp=0x%06x psn=%u", op.name, f.bth.dest_qp, f.bth.psn);
  if (f.bth.ack_req) s += " ackreq";
  if (f.bth.solicited) s += " se";
  if (f.bth.fecn) s += " fecn";
  if (f.bth.becn) s += " becn";
  if (op.Has(kHdrReth)) {
    absl::StrAppendFormat(&s, " reth(va=0x%x rkey=0x%x len=%u)", f.reth_va, f.reth_rkey,
                          f.reth_length);
  }
  if (op.Has(kHdrAeth)) {
    absl::StrAppendFormat(&s, " aeth(%s msn=%u)", AethDescription(f.aeth_syndrome), f.aeth_msn);
  }
  if (op.Has(kHdrAtomicEth)) {
    absl::StrAppendFormat(&s, " atomic(va=0x%x rkey=0x%x swap_add=0x%x cmp=0x%x)", f.atomic_va,
                          f.atomic_rkey, f.atomic_swap_add, f.atomic_compare);
  }
  if (op.Has(kHdrAtomicAckEth)) absl::StrAppendFormat(&s, " orig=0x%x", f.atomic_ack_original);
  if (op.Has(kHdrDeth)) absl::StrAppendFormat(&s, " deth(qkey=0x%x srcqp=0x%06x)", f.deth_qkey, f.deth_src_qp);
  if (op.Has(kHdrImmDt)) absl::StrAppendFormat(&s, " imm=0x%08x", f.imm_data);
  if (op.Has(kHdrIeth)) absl::StrAppendFormat(&s, " inv_rkey=0x%x", f.ieth_rkey);
  if (op.Has(kHdrSrEth)) {
    absl::StrAppendFormat(&s, " sreth(va=0x%x rkey=0x%x len=%u off=%u rseq=%u)", f.sreth_va, f.sreth_rkey,
                          f.sreth_length, f.sreth_offset, f.sreth_recv_seq);
  }
  if (op.Has(kHdrSackEth)) {
    // The PSNs held past the first missing one, as ranges: sack(missing=100 held=102-105,110).
    absl::StrAppendFormat(&s, " sack(missing=%u held=", f.sack_base_psn);
    bool any = false;
    for (uint32_t i = 0; i < kSackBits;) {
      if (!((f.sack_bits[i / 64] >> (i % 64)) & 1)) {
        ++i;
        continue;
      }
      uint32_t j = i;
      while (j + 1 < kSackBits && ((f.sack_bits[(j + 1) / 64] >> ((j + 1) % 64)) & 1)) ++j;
      const uint32_t lo = (f.sack_base_psn + 1 + i) & 0xFFFFFF, hi = (f.sack_base_psn + 1 + j) & 0xFFFFFF;
      if (any) s += ',';
      absl::StrAppendFormat(&s, "%u", lo);
      if (hi != lo) absl::StrAppendFormat(&s, "-%u", hi);
      any = true;
      i = j + 1;
    }
    if (!any) s += "none";
    s += ")";
  }
  if (f.has_int) {
    // int(echo 2/5 q=1200,3000 tx=...): hops filled of the slots, then each hop's queue (bytes).
    absl::StrAppendFormat(&s, " int(%s%u/%u", f.int_stack.echo ? "echo " : "", f.int_stack.hops, f.int_stack.slots);
    for (uint32_t i = 0; i < f.int_stack.hops; ++i) {
      const IntHop& h = f.int_stack.hop[i];
      absl::StrAppendFormat(&s, " [ts=%u tx=%u q=%u rate=%u]", h.timestamp_ns, h.tx_bytes, h.qlen_bytes,
                            h.line_rate_mbps);
    }
    s += ")";
  }
  absl::StrAppendFormat(&s, " payload=%u pad=%u", p.payload_len, p.pad);
  static constexpr const char* kEcn[] = {"not-ect", "ect1", "ect0", "CE"};
  absl::StrAppendFormat(&s, " %s ecn=%s sport=%u", p.ipv6 ? "ipv6" : "ipv4", kEcn[p.ecn()],
                        f.route.udp_src_port);
  if (p.has_vlan) absl::StrAppendFormat(&s, " vlan=%u pcp=%u", p.vlan_tci & 0xFFF, p.vlan_tci >> 13);
  return s;
}

}  // namespace droce::wire
