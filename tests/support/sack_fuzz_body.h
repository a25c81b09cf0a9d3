// Feeds arbitrary SACKs (and ACKs, READ responses, atomic acknowledgements)
// to a selective-repeat requester with WRITEs, a READ and an atomic in
// flight (doc/transport.md "Selective repeat"), and checks what must hold
// whatever the peer says: every frame the requester sends parses and
// verifies, PSNs stay inside what was assigned, WRs complete at most once
// and in posting order. Shared by the libFuzzer target
// (tests/fuzz/sack_fuzz.cc) and a deterministic unit test
// (lib/core/sack_fuzz_test.cc).
#ifndef DROCE_TESTS_SUPPORT_SACK_FUZZ_BODY_H_
#define DROCE_TESTS_SUPPORT_SACK_FUZZ_BODY_H_

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/support/fuzz_peer.h"
#include "wire/psn.h"

namespace droce::core::fuzz {

class SackedRequester : public FuzzPeerQp {
 public:
  SackedRequester() : FuzzPeerQp(Config()) {
    pd_ = dev_.AllocPd();
    cq_ = *dev_.CreateCq(1024);
    mem_.assign(1 << 16, 0x5A);
    keys_ = *dev_.RegMr(pd_, mem_.data(), mem_.size(), kIova, mem::kLocalWrite);
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    qpn_ = *dev_.CreateQp(init);
    ToRtr(/*access=*/0, /*rq_psn=*/7);
    transport::QpAttr a;
    a.qp_state = transport::QpState::kRts;
    a.sq_psn = kFirstPsn;
    a.timeout = 10;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    (void)dev_.ModifyQp(qpn_, a, transport::kAttrState | transport::kAttrSqPsn | transport::kAttrTimeout |
                                     transport::kAttrRetryCnt | transport::kAttrRnrRetry |
                                     transport::kAttrMaxQpRdAtomic);
    // WRITEs of 1-20 packets, a READ of 8 responses, an atomic, more WRITEs.
    const transport::WrOpcode ops[] = {transport::WrOpcode::kRdmaWrite, transport::WrOpcode::kRdmaWrite,
                                       transport::WrOpcode::kRdmaRead, transport::WrOpcode::kAtomicFetchAndAdd,
                                       transport::WrOpcode::kRdmaWrite, transport::WrOpcode::kSend};
    const uint32_t lens[] = {5000, 256, 2048, 8, 1, 3000};
    for (uint32_t i = 0; i < 6; ++i) {
      transport::SendWr wr;
      wr.wr_id = i;
      wr.opcode = ops[i];
      wr.flags = transport::kSendSignaled;
      wr.num_sge = 1;
      wr.sg_list[0] = {kIova + i * 8192, lens[i], keys_.lkey};
      wr.remote_addr = 0x1000;
      wr.rkey = 0x77;
      if (dev_.PostSend(qpn_, wr) == 0) ++posted_;
    }
  }

  bool selective_repeat() { return dev_.qp(qpn_)->selective_repeat(); }

  void Run(const uint8_t* data, size_t size) {
    FuzzInput in(data, size);
    uint64_t now = 1'000'000;
    dev_.Poll(now);
    Check();
    while (in.more()) {
      wire::PacketFields f = FromPeer();
      static constexpr uint8_t kOps[] = {wire::kSrSack, wire::kSrSack, wire::kSrSack, wire::kRcAcknowledge,
                                         wire::kRcReadResponseFirst, wire::kRcReadResponseLast,
                                         wire::kRcAtomicAcknowledge};
      const uint8_t sel = static_cast<uint8_t>(in.Take(1));
      f.bth.opcode = kOps[sel % sizeof(kOps)];
      f.bth.dest_qp = qpn_;
      // Near the requester's PSNs most of the time.
      const int16_t delta = static_cast<int16_t>(in.Take(2));
      f.bth.psn = wire::PsnAdd(kFirstPsn, (sel & 0x80) ? delta : delta % 64);
      f.aeth_syndrome = static_cast<uint8_t>(in.Take(1)) & ((sel & 0x40) ? 0xFF : 0x1F);
      f.aeth_msn = static_cast<uint32_t>(in.Take(3));
      f.sack_base_psn = (sel & 0x20) ? static_cast<uint32_t>(in.Take(3)) : wire::PsnAdd(f.bth.psn, 1);
      f.sack_bits[0] = in.Take(8);
      f.sack_bits[1] = in.Take(8);
      f.atomic_ack_original = 42;
      std::vector<uint8_t> payload;
      if (wire::OpInfo(f.bth.opcode).roles & wire::kRolePayload) payload.assign(in.Take(1) & 1 ? 256 : 100, 0xAB);
      f.payload = payload;
      if (!Queue(f)) continue;
      now += (in.Take(1) & 3) == 0 ? 5'000'000 : 1'000;  // sometimes past a timeout
      dev_.Poll(now);
      Check();
    }
    for (int i = 0; i < 4; ++i) dev_.Poll(now += 50'000'000);
    Check();
  }

  uint64_t completions() const { return next_wr_; }

 private:
  static DeviceConfig Config() {
    DeviceConfig c = BaseConfig();
    c.selective_repeat = true;
    c.sr_max_inflight_packets = 16;
    return c;
  }
  static constexpr uint32_t kFirstPsn = 0xFFFFF8;  // the run crosses 2^24
  static constexpr uint64_t kIova = 0x100000;

  void Check() {
    const transport::Qp& q = *dev_.qp(qpn_);
    CheckSent([&q](const std::vector<uint8_t>& b, const wire::ParsedPacket& p) {
      const uint32_t psn = wire::BthView(b.data() + p.bth_offset).psn();
      // Requests carry PSNs the requester assigned.
      if ((p.op().roles & wire::kRoleRequest) &&
          (wire::PsnLess(psn, kFirstPsn) || !wire::PsnLess(psn, q.next_psn()))) {
        std::abort();
      }
    });
    queue::Completion c[16];
    for (uint32_t k; (k = dev_.PollCq(cq_, c, 16)) > 0;) {
      for (uint32_t i = 0; i < k; ++i) {
        if (c[i].wr_id != next_wr_ || next_wr_ >= posted_) std::abort();  // once each, in order
        ++next_wr_;
      }
    }
  }

  std::vector<uint8_t> mem_;
  mem::MrKeys keys_{};
  uint64_t posted_ = 0;
  uint64_t next_wr_ = 0;
};

}  // namespace droce::core::fuzz

#endif  // DROCE_TESTS_SUPPORT_SACK_FUZZ_BODY_H_
