// Unreliable Datagram (IBTA 9.8.4): the address handle table, the
// datagram sender (one SEND ONLY [WITH IMMEDIATE] packet with a DETH per
// work request) and the receiver (Q_Key check, GRH area, src_qp).
#include "transport/ud_qp.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "wire/icrc.h"
#include "transport/qp.h"
#include "wire/psn.h"

namespace droce::transport {

using queue::WcStatus;
using namespace droce::wire;

int64_t AhTable::Add(uint32_t pd, const AddressVector& av, const wire::Route& route) {
  uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    if (ahs_.size() >= max_) return -1;
    id = static_cast<uint32_t>(ahs_.size());
    ahs_.emplace_back();
  }
  ahs_[id] = AddressHandle{true, pd, av, route};
  ++count_;
  return id;
}

bool AhTable::Remove(uint32_t id) {
  if (Find(id) == nullptr) return false;
  ahs_[id].valid = false;
  free_.push_back(id);
  --count_;
  return true;
}

int Qp::PostUdSend(const SendWr& wr, SendWqe* w) {
  const AddressHandle* ah = env_.ahs != nullptr ? env_.ahs->Find(wr.ah) : nullptr;
  if (ah == nullptr) return EINVAL;
  if (wr.remote_qpn > kPsnMask) return EINVAL;  // 24-bit QPN
  // rxe copies the address vector into the WQE too: the AH may go away.
  SendWqeExt& x = Ext(*w);
  x.ud_route = ah->route;
  x.remote_qpn = wr.remote_qpn;
  x.ud_qkey = (wr.remote_qkey & kControlledQkeyBit) ? attr_.qkey : wr.remote_qkey;
  return 0;
}

void Qp::SkipOversizeUd(SendWqe& w) {
  // C10-93.1.1: a UD message longer than the port MTU emits no packet and
  // raises no error; rxe completes it successfully, and so do we.
  ++counters_.ud_oversize_sends;
  w.next_psn = PsnAdd(w.first_psn, 1);
  w.fully_sent = true;
  w.done = true;
  req_.psn_una = w.next_psn;
}

uint32_t Qp::BuildUdRequest(SendWqe& w, uint8_t* frame) {
  const SendWqeExt& x = Ext(w);
  const Route& r = x.ud_route;
  uint8_t* bth_p = WriteRoute(frame, r);
  StoreBe16(frame + r.l4_offset, ud_src_port_);  // per QP, not per destination (as rxe)
  const bool imm = w.opcode == WrOpcode::kSendWithImm;
  const uint8_t opcode = OpcodeFor(Transport::kUd, Operation::kSend, Position::kOnly,
                                   imm ? Extra::kImmediate : Extra::kNone);
  const OpcodeInfo& op = OpInfo(opcode);
  BthWriter bth(bth_p);
  bth.set_opcode(opcode);
  bth.set_flags((w.flags & kSendSolicited) != 0, /*mig=*/false, 0, 0);  // as rxe's UD packets
  bth.set_pkey(0xFFFF);
  bth.set_ecn_bits(false, false);
  bth.set_dest_qp(x.remote_qpn);
  bth.set_ack_req(false);
  bth.set_psn(w.first_psn);
  DethWriter deth(bth_p + op.deth_offset);
  deth.set_qkey(x.ud_qkey);
  deth.set_src_qp(qpn_);
  if (imm) ImmDtWriter(bth_p + op.immdt_offset).set_wire_order(x.imm_data);
  GatherPayload(w, 0, w.total_len, bth_p + op.header_bytes);
  w.next_psn = PsnAdd(w.first_psn, 1);
  w.fully_sent = true;
  return FinalizeFrame(frame, r, op.header_bytes + w.total_len);
}

UdRx Qp::OnUdPacket(const uint8_t* frame, const ParsedPacket& p) {
  ++counters_.rx_packets;
  counters_.rx_bytes += p.payload_len;
  // A UD QP receives from RTR on (IBTA 10.3.1); RESET, INIT and ERR drop.
  if (!ud() || p.op().transport != Transport::kUd || state_ == QpState::kReset ||
      state_ == QpState::kInit || state_ == QpState::kErr) {
    ++counters_.dropped_wrong_state;
    return UdRx::kWrongState;
  }
  const OpcodeInfo& op = p.op();
  const uint8_t* bth_p = frame + p.bth_offset;
  const DethView deth(bth_p + op.deth_offset);
  // IBTA 10.2.5 / C9-49: a datagram whose Q_Key is not the QP's is dropped
  // silently (rxe's check_keys; the port's bad Q_Key counter counts it).
  if (deth.qkey() != attr_.qkey) {
    ++counters_.ud_dropped_qkey;
    return UdRx::kBadQkey;
  }
  // No receive WQE: UD has no RNR NAK, the datagram is lost (9.8.4).
  if (!TakeRecvWqe()) {
    ++counters_.ud_dropped_no_recv;
    return UdRx::kNoRecv;
  }
  // The GRH area first (IBTA 11.4.1.1): RoCEv2 over IPv6 puts the IPv6
  // header there, over IPv4 the IPv4 header in its last 20 bytes.
  uint8_t grh[kGrhBytes] = {};
  const uint8_t* l3 = frame + p.l3_offset;
  if (p.ipv6) {
    std::memcpy(grh, l3, kGrhBytes);
  } else {
    std::memcpy(grh + 20, l3, 20);
  }
  const uint32_t len = p.payload_len;
  const uint8_t* payload = frame + p.payload_offset;
  uint64_t room = 0;
  for (uint32_t i = 0; i < resp_.recv_wqe.num_sge; ++i) room += resp_.recv_wqe.sg_list[i].length;
  queue::Completion c;
  c.wr_id = resp_.recv_wqe.wr_id;
  c.opcode = queue::WcOpcode::kRecv;
  c.qp_num = qpn_;
  resp_.recv_wqe_held = false;
  if (room < kGrhBytes + uint64_t{len}) {
    // Class D (rxe RESPST_ERR_LENGTH for UD): the WQE completes in error,
    // the QP keeps running.
    c.status = WcStatus::kLocLenErr;
    env_.recv_cq->Push(c);
    return UdRx::kError;
  }
  // Scatter [GRH | payload] across the SGEs.
  const uint8_t* src = grh;
  uint32_t src_left = kGrhBytes;
  bool in_payload = false;
  for (uint32_t i = 0; i < resp_.recv_wqe.num_sge && (src_left > 0 || !in_payload); ++i) {
    const Sge& sge = resp_.recv_wqe.sg_list[i];
    uint32_t off = 0;
    while (off < sge.length) {
      if (src_left == 0) {
        if (in_payload) break;
        in_payload = true;
        src = payload;
        src_left = len;
        if (src_left == 0) break;
      }
      const uint32_t n = std::min(src_left, sge.length - off);
      const auto r = env_.mrs->CheckLocal(sge.lkey, env_.pd, sge.addr + off, n, true);
      if (r.result != mem::AccessResult::kOk) {
        c.status = WcStatus::kLocProtErr;
        env_.recv_cq->Push(c);
        return UdRx::kError;
      }
      std::memcpy(r.host, src, n);
      src += n;
      src_left -= n;
      off += n;
    }
  }
  const bool imm = op.Has(kHdrImmDt);
  c.status = WcStatus::kSuccess;
  c.byte_len = kGrhBytes + len;
  c.flags = static_cast<uint8_t>(queue::kWcGrh | (imm ? queue::kWcWithImm : 0) |
                                 (BthView(bth_p).solicited() ? queue::CompletionQueue::kWcSolicited : 0));
  c.imm_or_inv = imm ? ImmDtView(bth_p + op.immdt_offset).wire_order() : 0;
  c.src_qp = deth.src_qp();
  c.sl = p.ipv6 ? kRoceL3Ipv6 : kRoceL3Ipv4;
  env_.recv_cq->Push(c);
  return UdRx::kDelivered;
}

}  // namespace droce::transport
