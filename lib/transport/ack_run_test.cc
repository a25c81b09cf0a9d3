// The completer's run-wise AckUpTo: two devices in the same state post the
// same work requests and receive the same response streams; one retires
// acknowledged WQEs in one walk (one psn_una update, one ring retire), the
// other WQE by WQE (Qp::AckEachWqe, the reference). Coalesced ACKs over
// many WQEs, ACKs of part of a multi-packet message, duplicates, ACKs
// past the last PSN sent, sequence and RNR NAKs, other NAK codes, READ
// responses and atomic acknowledgements (and ACKs past a READ whose
// response was lost: the implied NAK), timeouts and retransmissions must
// give the same frames byte for byte, completions in the same order, the
// same memory, PSNs, state and counters.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"
#include "wire/psn.h"

namespace droce::core {
namespace {

using namespace droce::wire;

constexpr Mac kPeerMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kMtu = 256;
constexpr uint32_t kRegion = 16384;
constexpr uint64_t kIova = 0x100000;
constexpr uint64_t kRemote = 0x900000;
constexpr uint32_t kSqPsn = 0xFFFFA0;  // the PSN wraps within the stream

struct End {
  sim::ScriptedIo io;
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
  uint32_t pd = 0, cq = 0, qpn = 0;
  transport::Qp* qp() { return dev->qp(qpn); }
};

// A request packet the requester sent, as the peer saw it.
struct Sent {
  uint32_t psn;
  uint8_t opcode;
  uint32_t dma_length;
};

struct Variant {
  bool sig_all;
  bool selective_repeat;
};

class AckRun : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    for (End* e : {&run_, &reference_}) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, 0x01};
      cfg.ipv4 = 0x0A000001;
      cfg.qpn_base = 0x1000;
      cfg.selective_repeat = GetParam().selective_repeat;
      e->dev = std::make_unique<Device>(cfg, &e->io);
      e->pd = e->dev->AllocPd();
      e->cq = *e->dev->CreateCq(8192);
      e->mem.assign(kRegion, 0);
      for (uint32_t k = 0; k < kRegion; ++k) e->mem[k] = static_cast<uint8_t>(k * 13);
      e->keys = *e->dev->RegMr(e->pd, e->mem.data(), kRegion, kIova, mem::kLocalWrite | mem::kRemoteWrite);
      QpInitAttr init;
      init.pd = e->pd;
      init.send_cq = init.recv_cq = e->cq;
      init.caps.max_send_wr = 256;
      init.caps.sq_sig_all = GetParam().sig_all;
      e->qpn = *e->dev->CreateQp(init);
    }
    reference_.qp()->AckEachWqe(true);
    Connect();
  }

  void Connect() {
    for (End* e : {&run_, &reference_}) {
      transport::QpAttr reset;
      reset.qp_state = transport::QpState::kReset;
      ASSERT_TRUE(e->dev->ModifyQp(e->qpn, reset, transport::kAttrState).ok());
      ConnectParams c;
      c.peer_gid = Ipv4MappedGid(0x0A000002);
      c.peer_mac = kPeerMac;
      c.peer_qpn = kPeerQpn;
      c.mtu = kMtu;
      c.sq_psn = kSqPsn;
      c.max_rd_atomic = 4;
      c.timeout = 10;  // ~4 ms
      c.retry_cnt = 3;
      c.rnr_retry = 3;
      ASSERT_TRUE(ConnectQp(*e->dev, e->qpn, c).ok());
    }
    sent_.clear();
  }

  // `wr` on both ends, with each end's L_Key (the same IOVA on both).
  void Post(transport::SendWr wr, const std::string& what) {
    wr.sg_list[0].lkey = run_.keys.lkey;
    const int a = run_.dev->PostSend(run_.qpn, wr);
    wr.sg_list[0].lkey = reference_.keys.lkey;
    const int b = reference_.dev->PostSend(reference_.qpn, wr);
    ASSERT_EQ(a, b) << what;
  }

  // Polls both at `now_` and compares; the requests sent are remembered.
  void PollBoth(const std::string& what) {
    for (End* e : {&run_, &reference_}) e->dev->Poll(now_);
    for (const auto& f : reference_.io.sent) {
      const ParsedPacket p = ParsePacket(f.data(), static_cast<uint32_t>(f.size()));
      if (!p.ok()) continue;
      const PacketFields d = DecodeFields(f.data(), p);
      if (d.bth.opcode != kRcAcknowledge) sent_.push_back({d.bth.psn, d.bth.opcode, d.reth_length});
    }
    if (sent_.size() > 512) sent_.erase(sent_.begin(), sent_.end() - 256);
    Compare(what);
  }

  void Feed(PacketFields f, const std::string& what) {
    now_ += 1000;
    std::vector<uint8_t> b(pktio::kMaxFrameBytes);
    b.resize(*SerializeFields(f, b.data(), static_cast<uint32_t>(b.size())));
    for (End* e : {&run_, &reference_}) e->io.rx.push_back(b);
    PollBoth(what);
  }

  void Compare(const std::string& what) {
    ASSERT_EQ(run_.io.sent, reference_.io.sent) << what;
    run_.io.sent.clear();
    reference_.io.sent.clear();
    ASSERT_EQ(run_.mem, reference_.mem) << what;
    ASSERT_EQ(run_.qp()->next_psn(), reference_.qp()->next_psn()) << what;
    ASSERT_EQ(run_.qp()->state(), reference_.qp()->state()) << what;
    ASSERT_EQ(run_.qp()->NextDeadline(), reference_.qp()->NextDeadline()) << what;
    ASSERT_EQ(run_.qp()->HasWork(), reference_.qp()->HasWork()) << what;
    const transport::QpCounters a = run_.qp()->counters(), b = reference_.qp()->counters();
    ASSERT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what;
    queue::Completion wa[256], wb[256];
    const int na = run_.dev->PollCq(run_.cq, wa, 256), nb = reference_.dev->PollCq(reference_.cq, wb, 256);
    ASSERT_EQ(na, nb) << what;
    for (int i = 0; i < na; ++i) {
      ASSERT_EQ(wa[i].wr_id, wb[i].wr_id) << what;
      ASSERT_EQ(wa[i].status, wb[i].status) << what;
      ASSERT_EQ(wa[i].opcode, wb[i].opcode) << what;
      ASSERT_EQ(wa[i].byte_len, wb[i].byte_len) << what;
      ASSERT_EQ(wa[i].qp_num, wb[i].qp_num) << what;
    }
    completions_ += na;
  }

  PacketFields Response(uint8_t opcode, uint32_t psn) {
    PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = run_.dev->config().mac;
    f.route.src_ip = Ipv4MappedGid(0x0A000002);
    f.route.dst_ip = Ipv4MappedGid(0x0A000001);
    f.route.ipv4_id = static_cast<uint16_t>(now_ / 1000);
    f.bth.opcode = opcode;
    f.bth.dest_qp = run_.qpn;
    f.bth.psn = psn;
    f.aeth_syndrome = MakeSyndrome(AethType::kAck, 31);
    f.aeth_msn = msn_;
    return f;
  }

  End run_, reference_;
  std::vector<Sent> sent_;
  uint64_t now_ = 1'000'000;
  uint32_t msn_ = 0;
  uint64_t completions_ = 0;
};

TEST_P(AckRun, ResponseStreamsRetireAsWqeByWqe) {
  std::mt19937_64 rng(20261129 + GetParam().sig_all * 2 + GetParam().selective_repeat);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  uint64_t wr_id = 0;
  std::vector<uint8_t> payload;
  for (int step = 0; step < 30000; ++step) {
    const std::string what = "step " + std::to_string(step);
    if (run_.qp()->state() == transport::QpState::kErr) {
      Connect();
      if (HasFatalFailure()) return;
    }
    const uint32_t roll = pick(100);
    if (roll < 40) {
      // Post a few work requests: WRITEs and SENDs of one to several
      // packets (zero-length too), READs, atomics; most unsignalled.
      for (uint32_t k = 1 + pick(6); k > 0; --k) {
        transport::SendWr wr;
        wr.wr_id = ++wr_id;
        const uint32_t o = pick(100);
        wr.opcode = o < 60   ? transport::WrOpcode::kRdmaWrite
                    : o < 80 ? transport::WrOpcode::kSend
                    : o < 93 ? transport::WrOpcode::kRdmaRead
                             : transport::WrOpcode::kAtomicFetchAndAdd;
        const bool atomic = wr.opcode == transport::WrOpcode::kAtomicFetchAndAdd;
        const uint32_t len = atomic ? 8 : pick(10) == 0 ? 0 : pick(3) == 0 ? 1 + pick(4 * kMtu) : 1 + pick(kMtu);
        wr.num_sge = len > 0 ? 1 : 0;
        wr.sg_list[0] = {kIova + pick(kRegion / 2) / 8 * 8, len, 0};
        wr.remote_addr = kRemote + 8 * pick(64);
        wr.rkey = 0x1234;
        wr.compare_add = 1;
        wr.flags = pick(8) == 0 ? uint32_t{transport::kSendSignaled} : 0u;
        Post(wr, what);
        if (HasFatalFailure()) return;
      }
      now_ += 100;
      PollBoth(what);
      if (HasFatalFailure()) return;
      continue;
    }
    if (roll < 45 || sent_.empty()) {
      now_ += pick(4) == 0 ? 5'000'000 : 1000;  // sometimes past the retransmission timeout
      PollBoth(what);
      if (HasFatalFailure()) return;
      continue;
    }
    // A response to one of the request packets sent lately (or just past them).
    const Sent& s = sent_[sent_.size() - 1 - pick(std::min<uint32_t>(sent_.size(), 40))];
    const uint32_t kind = pick(100);
    uint32_t psn = s.psn;
    if (pick(20) == 0) psn = PsnAdd(psn, 1 + pick(3));  // past what was sent
    if (kind < 60) {
      Feed(Response(kRcAcknowledge, psn), what + " ack");
    } else if (kind < 70) {
      PacketFields f = Response(kRcAcknowledge, psn);
      f.aeth_syndrome = MakeSyndrome(AethType::kNak, kNakPsnSequenceError);
      Feed(f, what + " sequence nak");
    } else if (kind < 76) {
      PacketFields f = Response(kRcAcknowledge, psn);
      f.aeth_syndrome = MakeSyndrome(AethType::kRnrNak, 1);
      Feed(f, what + " rnr nak");
    } else if (kind < 78) {
      PacketFields f = Response(kRcAcknowledge, psn);
      f.aeth_syndrome = MakeSyndrome(AethType::kNak, pick(2) == 0 ? kNakRemoteAccessError : kNakInvalidRequest);
      Feed(f, what + " nak");
    } else if (s.opcode == kRcReadRequest) {
      // The READ's responses from one of its packets on (sometimes one skipped).
      const uint32_t packets = std::max<uint32_t>(1, (s.dma_length + kMtu - 1) / kMtu);
      for (uint32_t k = pick(packets); k < packets; ++k) {
        if (pick(10) == 0) continue;  // lost
        const bool first = k == 0, last = k == packets - 1;
        const uint8_t opcode = first && last ? kRcReadResponseOnly
                               : first       ? kRcReadResponseFirst
                               : last        ? kRcReadResponseLast
                                             : kRcReadResponseMiddle;
        PacketFields f = Response(opcode, PsnAdd(s.psn, k));
        payload.assign(last ? s.dma_length - k * kMtu : kMtu, static_cast<uint8_t>(step + k));
        f.payload = payload;
        Feed(f, what + " read response " + std::to_string(k));
        if (HasFatalFailure()) return;
      }
      continue;
    } else if (s.opcode == kRcFetchAdd) {
      PacketFields f = Response(kRcAtomicAcknowledge, s.psn);
      f.atomic_ack_original = rng();
      Feed(f, what + " atomic ack");
    } else {
      Feed(Response(kRcAcknowledge, psn), what + " ack");
    }
    if (HasFatalFailure()) return;
    ++msn_;
  }
  const transport::QpCounters& c = run_.qp()->counters();
  std::printf("completions %lu acks %lu naks %lu rnr %lu duplicates %lu\n", completions_, c.acks_received,
              c.naks_received, c.rnr_naks_received, c.duplicates_received);
  EXPECT_GT(completions_, 2000u);
  EXPECT_GT(c.acks_received, 5000u);
  EXPECT_GT(c.naks_received, 500u);
  EXPECT_GT(c.rnr_naks_received, 500u);
  EXPECT_GT(c.duplicates_received, 500u);
}

INSTANTIATE_TEST_SUITE_P(Variants, AckRun,
                         ::testing::Values(Variant{false, false}, Variant{true, false}, Variant{false, true}),
                         [](const ::testing::TestParamInfo<Variant>& i) {
                           return std::string(i.param.sig_all ? "SigAll" : "SomeSignaled") +
                                  (i.param.selective_repeat ? "SelectiveRepeat" : "GoBackN");
                         });

}  // namespace
}  // namespace droce::core
