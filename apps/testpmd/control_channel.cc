#include "apps/testpmd/control_channel.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace droce::testpmd {
namespace {

constexpr uint64_t kSendWrId = kCtrlWrIdBase - 1;
constexpr uint32_t kSlotBytes = 64;
constexpr uint32_t kRecvOffset = 2048;
static_assert(sizeof(CtrlMsg) <= kSlotBytes);
static_assert(kRecvOffset + kCtrlRecvs * kSlotBytes <= kCtrlAreaBytes);

}  // namespace

std::string RunShapeMismatch(const RunShape& own, const RunShape& peer) {
  std::vector<std::string> differ;
  if (peer.mtu != own.mtu) {
    differ.push_back(absl::StrFormat("the peer's path MTU is %u, this side's %u: give both the same --mtu (or set mtu on both)",
                                     peer.mtu, own.mtu));
  }
  if (peer.outstanding != own.outstanding) {
    differ.push_back(absl::StrFormat("the peer runs --outstanding %u, this side %u: give both the same",
                                     peer.outstanding, own.outstanding));
  }
  if (peer.size != own.size) {
    differ.push_back(absl::StrFormat("the peer runs --size %u, this side %u: give both the same", peer.size, own.size));
  }
  return absl::StrJoin(differ, "; ");
}

void ControlChannel::PostRecv(uint32_t k) {
  transport::RecvWr r;
  r.wr_id = kCtrlWrIdBase + k;
  r.num_sge = 1;
  r.sg_list[0] = {area_va_ + kRecvOffset + k * kSlotBytes, kSlotBytes, lkey_};
  (void)dev_.PostRecv(qpn_, r);
}

void ControlChannel::Send(CtrlType type, uint64_t value) {
  // Eight send slots in turn: a message is gathered when it is transmitted,
  // so one slot could be overwritten by the next message before that.
  const CtrlMsg m{kCtrlMagic, static_cast<uint32_t>(type), rkey_, va_, value};
  const uint64_t off = (sends_++ % 8) * kSlotBytes;
  std::memcpy(area_ + off, &m, sizeof m);
  transport::SendWr wr;
  wr.wr_id = kSendWrId;
  wr.opcode = transport::WrOpcode::kSend;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {area_va_ + off, sizeof m, lkey_};
  (void)dev_.PostSend(qpn_, wr);
}

absl::Status ControlChannel::StartHello(const core::ConnectParams& c, uint64_t value) {
  params_ = c;
  hello_value_ = value;
  in_hello_ = true;
  hello_acked_ = have_peer_hello_ = false;
  if (absl::Status st = core::ConnectQp(dev_, qpn_, params_); !st.ok()) return st;
  for (uint32_t k = 0; k < kCtrlRecvs; ++k) PostRecv(k);
  Send(CtrlType::kHello, hello_value_);
  return absl::OkStatus();
}

absl::Status ControlChannel::Restart() {
  // What the receive side expects survives the reset: the peer's next
  // message after a hello we took carries the next PSN.
  params_.rq_psn = dev_.qp(qpn_)->expected_psn();
  transport::QpAttr reset;
  reset.qp_state = transport::QpState::kReset;
  if (absl::Status st = dev_.ModifyQp(qpn_, reset, transport::kAttrState); !st.ok()) return st;
  if (absl::Status st = core::ConnectQp(dev_, qpn_, params_); !st.ok()) return st;
  for (uint32_t k = 0; k < kCtrlRecvs; ++k) PostRecv(k);
  hello_acked_ = false;
  Send(CtrlType::kHello, hello_value_);
  ++restarts_;
  return absl::OkStatus();
}

absl::StatusOr<bool> ControlChannel::HelloDone() {
  if (!in_hello_) return true;
  if (!have_peer_hello_ && Has(CtrlType::kHello)) {
    peer_hello_ = Take(CtrlType::kHello);
    have_peer_hello_ = true;
  }
  if (have_peer_hello_ && hello_acked_) {
    in_hello_ = false;
    return true;
  }
  if (dev_.qp(qpn_)->state() == transport::QpState::kErr) {
    if (absl::Status st = Restart(); !st.ok()) return st;
  }
  return false;
}

bool ControlChannel::Consume(const queue::Completion& wc, uint64_t* errors) {
  if (wc.wr_id < kSendWrId) return false;
  if (wc.status != queue::WcStatus::kSuccess) {
    if (!in_hello_) ++*errors;
    return true;
  }
  if (wc.wr_id == kSendWrId) {
    hello_acked_ = true;  // during the exchange the hello is the only message sent
    return true;
  }
  if (wc.opcode == queue::WcOpcode::kRecv) {
    const uint32_t slot = static_cast<uint32_t>(wc.wr_id - kCtrlWrIdBase);
    CtrlMsg m;
    std::memcpy(&m, area_ + kRecvOffset + slot * kSlotBytes, sizeof m);
    if (m.magic == kCtrlMagic) inbox_.push_back(m);
    PostRecv(slot);
  }
  return true;
}

bool ControlChannel::Has(CtrlType type) const {
  return std::any_of(inbox_.begin(), inbox_.end(),
                     [&](const CtrlMsg& m) { return m.type == static_cast<uint32_t>(type); });
}

CtrlMsg ControlChannel::Take(CtrlType type) {
  auto it = std::find_if(inbox_.begin(), inbox_.end(),
                         [&](const CtrlMsg& m) { return m.type == static_cast<uint32_t>(type); });
  const CtrlMsg m = *it;
  inbox_.erase(it);
  return m;
}

}  // namespace droce::testpmd
