// Feeds arbitrary RC requests to a responder whose memory is fenced by
// canaries, and checks that nothing outside what a request may touch changed.
// Shared by the libFuzzer target (tests/fuzz/responder_fuzz.cc) and a
// deterministic random-input unit test (lib/core/responder_fuzz_test.cc).
#ifndef DROCE_TESTS_SUPPORT_RESPONDER_FUZZ_BODY_H_
#define DROCE_TESTS_SUPPORT_RESPONDER_FUZZ_BODY_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/support/fuzz_peer.h"
#include "wire/psn.h"

namespace droce::core::fuzz {

// Memory layout: three separately allocated regions so ASan's redzones
// catch any access outside them; each is also wrapped in canary bytes.
class FencedResponder : public FuzzPeerQp {
 public:
  static constexpr uint32_t kRegion = 8192;
  static constexpr uint32_t kCanary = 64;
  static constexpr uint8_t kCanaryByte = 0xC5;

  FencedResponder() : FuzzPeerQp(BaseConfig()) {
    pd_ = dev_.AllocPd();
    other_pd_ = dev_.AllocPd();
    cq_ = *dev_.CreateCq(1024);
    for (int i = 0; i < 3; ++i) {
      buf_[i].assign(kRegion + 2 * kCanary, kCanaryByte);
      for (uint32_t k = 0; k < kRegion; ++k) buf_[i][kCanary + k] = static_cast<uint8_t>(k * 7 + i);
    }
    using namespace droce::mem;
    // 0: full access; 1: remote read only; 2: full access but in another PD.
    keys_[0] = *dev_.RegMr(pd_, region(0), kRegion, kIova[0],
                           kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
    keys_[1] = *dev_.RegMr(pd_, region(1), kRegion, kIova[1], kRemoteRead);
    keys_[2] = *dev_.RegMr(other_pd_, region(2), kRegion, kIova[2],
                           kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic);
    pristine_[1] = buf_[1];
    pristine_[2] = buf_[2];
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_recv_wr = 64;
    qpn_ = *dev_.CreateQp(init);
    Connect();
  }

  // RESET -> INIT -> RTR, as a responder-only QP; used again after errors.
  void Connect() {
    using namespace droce::mem;
    transport::QpAttr reset;
    reset.qp_state = transport::QpState::kReset;
    (void)dev_.ModifyQp(qpn_, reset, transport::kAttrState);
    ToRtr(kRemoteWrite | kRemoteRead | kRemoteAtomic, /*rq_psn=*/100, /*min_rnr_timer=*/1);
    for (int i = 0; i < 8; ++i) PostRecv(i);
  }

  // Interprets `data` as a sequence of requests and runs them. Aborts if any
  // byte outside what the requests may change has changed.
  void Run(const uint8_t* data, size_t size) {
    FuzzInput in(data, size);
    uint64_t now = 1'000'000;
    while (in.more()) {
      wire::PacketFields f = FromPeer();
      static constexpr uint8_t kOps[] = {
          wire::kRcSendFirst,       wire::kRcSendMiddle,   wire::kRcSendLast,
          wire::kRcSendLastImm,     wire::kRcSendOnly,     wire::kRcSendOnlyImm,
          wire::kRcWriteFirst,      wire::kRcWriteMiddle,  wire::kRcWriteLast,
          wire::kRcWriteLastImm,    wire::kRcWriteOnly,    wire::kRcWriteOnlyImm,
          wire::kRcReadRequest,     wire::kRcCompareSwap,  wire::kRcFetchAdd,
          wire::kRcSendLastInv,     wire::kRcSendOnlyInv,  wire::kRcAcknowledge,
          wire::kRcReadResponseOnly};
      const uint8_t sel = static_cast<uint8_t>(in.Take(1));
      f.bth.opcode = kOps[sel % sizeof(kOps)];
      f.bth.dest_qp = (sel & 0x80) ? qpn_ + 1 : qpn_;
      f.bth.ack_req = in.Take(1) & 1;
      // PSN near the expected one most of the time.
      const int8_t psn_delta = static_cast<int8_t>(in.Take(1));
      const uint32_t epsn = dev_.qp(qpn_)->expected_psn();
      f.bth.psn = wire::PsnAdd(epsn, psn_delta % 4 == 0 ? psn_delta / 4 : 0);
      const uint8_t region_sel = static_cast<uint8_t>(in.Take(1)) % 4;
      const uint64_t base = region_sel < 3 ? kIova[region_sel] : in.Take(8);
      const int64_t offset = static_cast<int16_t>(in.Take(2));
      const uint32_t rkey = region_sel < 3 ? keys_[region_sel].rkey ^ static_cast<uint32_t>(in.Take(1) == 0xFF)
                                           : static_cast<uint32_t>(in.Take(4));
      const uint32_t len = static_cast<uint32_t>(in.Take(2)) % (3 * 256);
      f.reth_va = f.atomic_va = base + offset;
      f.reth_rkey = f.atomic_rkey = f.ieth_rkey = rkey;
      f.reth_length = (in.Take(1) & 1) ? len : static_cast<uint32_t>(in.Take(4));
      f.atomic_swap_add = in.Take(8);
      f.atomic_compare = in.Take(8);
      f.imm_data = 0x12345678;
      const wire::OpcodeInfo& op = wire::OpInfo(f.bth.opcode);
      std::vector<uint8_t> payload;
      if (op.roles & wire::kRolePayload) {
        const uint32_t n = std::min<uint32_t>(len, 256 + (len % 7 == 0 ? 4 : 0));
        payload.assign(n, static_cast<uint8_t>(in.Take(1)));
      }
      f.payload = payload;
      if (!Queue(f)) continue;
      dev_.Poll(now);
      CheckSent();
      now += 10'000;
      if (in.Take(1) % 8 == 0) PostRecv(static_cast<uint32_t>(in.pos()));
      CheckFences();
      if (dev_.qp(qpn_)->state() == transport::QpState::kErr) {
        ++errors_;
        Connect();
      }
    }
    for (int i = 0; i < 4; ++i) dev_.Poll(now += 10'000'000);
    CheckSent();
    CheckFences();
  }

 private:
  static constexpr uint64_t kIova[3] = {0x100000, 0x200000, 0x300000};

  uint8_t* region(int i) { return buf_[i].data() + kCanary; }

  void PostRecv(uint32_t id) {
    transport::RecvWr r;
    r.wr_id = id;
    r.num_sge = 1;
    // Receives land in region 0 at a fixed window.
    r.sg_list[0] = {kIova[0] + 4096, 600, keys_[0].lkey};
    (void)dev_.PostRecv(qpn_, r);
  }

  // Every response droce emits must itself be a valid packet.
  void CheckSent() {
    FuzzPeerQp::CheckSent([](const std::vector<uint8_t>&, const wire::ParsedPacket&) {});
  }

  void CheckFences() {
    for (int i = 0; i < 3; ++i) {
      for (uint32_t k = 0; k < kCanary; ++k) {
        if (buf_[i][k] != kCanaryByte || buf_[i][kCanary + kRegion + k] != kCanaryByte) std::abort();
      }
    }
    // Read-only and foreign-PD regions never change.
    if (buf_[1] != pristine_[1] || buf_[2] != pristine_[2]) std::abort();
  }

  uint32_t other_pd_ = 0;
  std::vector<uint8_t> buf_[3];
  std::vector<uint8_t> pristine_[3];
  mem::MrKeys keys_[3];
  uint64_t errors_ = 0;

 public:
  uint64_t errors() const { return errors_; }
  const transport::QpCounters& counters() { return dev_.qp(qpn_)->counters(); }
};

}  // namespace droce::core::fuzz

#endif  // DROCE_TESTS_SUPPORT_RESPONDER_FUZZ_BODY_H_
