// Header prediction on receive (wire/prediction.h, Device::ReceivePredicted):
// two devices in the same state receive the same frames; one predicts its
// QP's headers, the other forgets its predictions before every frame and
// so judges each with the full parse and checks. Every frame - the QP's
// own, and the same with any bit of its headers flipped, any opcode, pad,
// cut, bad ICRC - must be judged alike: the same counters, the same frames
// sent back, the same memory and PSN. The peer's IPv4 ID counts up (rxe,
// ConnectX) or stays the same (droce's template: the whole IPv4 header
// compared, wire/prediction.h).
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "wire/gid.h"
#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"

namespace droce::core {
namespace {

constexpr Mac kPeerMac = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kPeerQpn = 0x99;
constexpr uint32_t kOwnIp = 0x0A000001, kPeerIp = 0x0A000002;
const Gid kPeer6{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2};

struct End {
  sim::ScriptedIo io;
  std::unique_ptr<Device> dev;
  std::vector<uint8_t> mem;
  uint32_t qpn = 0;
  mem::MrKeys keys{};
};

class RxPrediction : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {
 protected:
  bool ipv6() const { return std::get<0>(GetParam()); }
  bool vlan() const { return std::get<1>(GetParam()); }
  bool constant_id() const { return std::get<2>(GetParam()); }

  void SetUp() override {
    for (End* e : {&predicting_, &reference_}) {
      DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, 0x01};
      cfg.ipv4 = kOwnIp;
      cfg.qpn_base = 0x1000;  // both ends' QPs have one number
      cfg.vlan = vlan();
      cfg.vlan_tci = 100;
      e->dev = std::make_unique<Device>(cfg, &e->io);
      const uint32_t pd = e->dev->AllocPd();
      const uint32_t cq = *e->dev->CreateCq(256);
      QpInitAttr init;
      init.pd = pd;
      init.send_cq = init.recv_cq = cq;
      e->qpn = *e->dev->CreateQp(init);
      e->mem.assign(1 << 16, 0);
      e->keys = *e->dev->RegMr(pd, e->mem.data(), e->mem.size(), 0x10000,
                               mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
      ConnectParams c;
      c.peer_gid = ipv6() ? kPeer6 : wire::Ipv4MappedGid(kPeerIp);
      c.sgid_index = ipv6() ? 0 : 1;
      c.peer_mac = kPeerMac;
      c.peer_qpn = kPeerQpn;
      ASSERT_TRUE(ConnectQp(*e->dev, e->qpn, c).ok());
    }
    ASSERT_EQ(predicting_.qpn, reference_.qpn);
    own6_ = predicting_.dev->gids()[0];
  }

  // A WRITE (opcode, 64 bytes by default) from the peer along the QP's path
  // at the PSN the QP expects.
  wire::PacketFields Write(uint8_t opcode = wire::kRcWriteOnly, uint32_t len = 64) {
    wire::PacketFields f;
    f.route.src_mac = kPeerMac;
    f.route.dst_mac = predicting_.dev->config().mac;
    f.route.ipv6 = ipv6();
    f.route.src_ip = ipv6() ? kPeer6 : wire::Ipv4MappedGid(kPeerIp);
    f.route.dst_ip = ipv6() ? own6_ : wire::Ipv4MappedGid(kOwnIp);
    f.route.has_vlan = vlan();
    f.route.vlan_tci = 100;
    f.route.ipv4_id = constant_id() ? uint16_t{0x1234} : static_cast<uint16_t>(next_id_++);
    f.bth.opcode = opcode;
    f.bth.dest_qp = predicting_.qpn;
    f.bth.ack_req = true;
    f.bth.psn = predicting_.dev->qp(predicting_.qpn)->expected_psn();
    f.reth_va = 0x10000 + 64 * (f.bth.psn % 512);
    f.reth_rkey = predicting_.keys.rkey;
    f.reth_length = len;
    payload_.assign(len, static_cast<uint8_t>(f.bth.psn));
    f.payload = payload_;
    return f;
  }

  static std::vector<uint8_t> Frame(const wire::PacketFields& f) {
    std::vector<uint8_t> b(pktio::kMaxFrameBytes);
    b.resize(*wire::SerializeFields(f, b.data(), static_cast<uint32_t>(b.size())));
    return b;
  }

  using Mutation = std::function<void(std::vector<uint8_t>&)>;
  // Feeds the frame of `f` (with each end's R_Key: the keys differ), after
  // `mutate`, to both ends and expects the same outcome; true if the
  // predicting end took it by prediction.
  bool Feed(wire::PacketFields f, const std::string& what, const Mutation& mutate = {}) {
    const uint64_t predicted = predicting_.dev->counters().rx_predicted;
    // The reference end forgets its predictions first (new addresses: the same ones).
    reference_.dev->SetGids(std::vector<Gid>(reference_.dev->gids()));
    now_ += 1000;
    for (End* e : {&predicting_, &reference_}) {
      f.reth_rkey = e->keys.rkey;
      std::vector<uint8_t> frame = Frame(f);
      if (mutate) mutate(frame);
      e->io.rx.push_back(frame);
      e->dev->Poll(now_);
    }
    EXPECT_EQ(reference_.dev->counters().rx_predicted, 0u);
    std::vector<std::string> a, b;
    ForEachDeviceCounter(predicting_.dev->counters(), [&](const char* n, uint64_t v) {
      if (std::string(n) != "rx_predicted") a.push_back(std::string(n) + "=" + std::to_string(v));
    });
    ForEachDeviceCounter(reference_.dev->counters(), [&](const char* n, uint64_t v) {
      if (std::string(n) != "rx_predicted") b.push_back(std::string(n) + "=" + std::to_string(v));
    });
    EXPECT_EQ(a, b) << what;
    // The QP's own receive counters: which frames its OnPacket judged and dropped.
    auto qp_counters = [](const End& e) {
      const transport::QpCounters& c = e.dev->qp(e.qpn)->counters();
      return std::vector<uint64_t>{c.rx_packets,      c.rx_bytes,   c.dropped_wrong_state, c.sr_dropped,
                                   c.out_of_sequence, c.naks_sent,  c.duplicates_received, c.uc_messages_dropped,
                                   c.expected_requests};
    };
    EXPECT_EQ(qp_counters(predicting_), qp_counters(reference_)) << what;
    EXPECT_EQ(predicting_.io.sent, reference_.io.sent) << what;
    EXPECT_EQ(predicting_.mem, reference_.mem) << what;
    EXPECT_EQ(predicting_.dev->qp(predicting_.qpn)->expected_psn(),
              reference_.dev->qp(reference_.qpn)->expected_psn()) << what;
    EXPECT_EQ(predicting_.dev->qp(predicting_.qpn)->state(), reference_.dev->qp(reference_.qpn)->state()) << what;
    return predicting_.dev->counters().rx_predicted != predicted;
  }
  // Changes a header byte and makes the ICRC right again: only the receive
  // checks, not the ICRC, can tell the change.
  static void Resealed(std::vector<uint8_t>& b, const std::function<void(uint8_t*)>& change) {
    const wire::ParsedPacket q = wire::ParsePacket(b.data(), static_cast<uint32_t>(b.size()));
    change(b.data());
    if (q.ok()) {
      wire::StoreLe32(b.data() + q.icrc_offset,
                      wire::ComputeIcrc(b.data() + q.l3_offset, q.icrc_offset - q.l3_offset, q.ipv6));
    }
  }

  End predicting_, reference_;
  Gid own6_{};
  std::vector<uint8_t> payload_;
  uint32_t next_id_ = 1;
  uint64_t now_ = 1'000'000;
};

TEST_P(RxPrediction, TheQpsFramesArePredictedAfterTheFirst) {
  EXPECT_FALSE(Feed(Write(), "first"));  // learnt from
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(Feed(Write(), "next"));
  // A multi-packet WRITE: its MIDDLE packets are verified while placed.
  for (uint8_t op : {wire::kRcWriteFirst, wire::kRcWriteMiddle, wire::kRcWriteMiddle, wire::kRcWriteLast}) {
    EXPECT_TRUE(Feed(Write(op, 1024), "write"));
  }
  // A MIDDLE packet with a bad ICRC: counted as the full path counts it.
  Feed(Write(wire::kRcWriteFirst, 1024), "first");
  Feed(Write(wire::kRcWriteMiddle, 1024), "middle with a bad ICRC",
       [](std::vector<uint8_t>& b) { b[b.size() - 100] ^= 1; });
  EXPECT_EQ(predicting_.dev->counters().rx_bad_icrc(), 1u);
}

TEST_P(RxPrediction, EveryBitOfTheHeadersIsJudgedAsByTheFullChecks) {
  Feed(Write(), "learn");
  std::vector<uint8_t> probe = Frame(Write());
  const wire::ParsedPacket p = wire::ParsePacket(probe.data(), static_cast<uint32_t>(probe.size()));
  ASSERT_TRUE(p.ok());
  int fell_back = 0;
  for (uint32_t i = 0; i < p.bth_offset + wire::kBthBytes; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      fell_back += !Feed(Write(), "byte " + std::to_string(i) + " bit " + std::to_string(bit),
                         [&](std::vector<uint8_t>& b) { Resealed(b, [&](uint8_t* f) { f[i] ^= 1 << bit; }); });
      Feed(Write(), "again");  // learn again, after any change the flip made
    }
  }
  EXPECT_GT(fell_back, 0);
}

TEST_P(RxPrediction, PerPacketFieldsAreJudgedAsByTheFullChecks) {
  Feed(Write(), "learn");
  const uint32_t bth = [&] {
    std::vector<uint8_t> b = Frame(Write());
    return wire::ParsePacket(b.data(), static_cast<uint32_t>(b.size())).bth_offset;
  }();
  for (int op = 0; op < 256; ++op) {
    for (int pad = 0; pad < 4; ++pad) {
      Feed(Write(), "opcode " + std::to_string(op) + " pad " + std::to_string(pad), [&](std::vector<uint8_t>& b) {
        Resealed(b, [&](uint8_t* f) {
          f[bth] = static_cast<uint8_t>(op);
          f[bth + 1] = static_cast<uint8_t>((f[bth + 1] & ~0x30) | (pad << 4));
        });
      });
      Feed(Write(), "again");
    }
  }
  for (uint32_t cut = 1; cut < 40; ++cut) {
    EXPECT_FALSE(Feed(Write(), "cut " + std::to_string(cut), [&](std::vector<uint8_t>& b) { b.resize(b.size() - cut); }));
  }
  EXPECT_FALSE(Feed(Write(), "icrc", [](std::vector<uint8_t>& b) { b.back() ^= 0x10; }));
  EXPECT_EQ(predicting_.dev->counters().rx_bad_icrc(), 1u);
  EXPECT_TRUE(Feed(Write(), "after"));
}

// A frame the prediction takes whose opcode the QP's OnPacket refuses (of
// the other transport; of selective repeat, not agreed): dropped by the QP
// as the full path drops it, and the QP's own frames still taken after.
TEST_P(RxPrediction, OpcodesTheQpRefusesAreJudgedByOnPacket) {
  Feed(Write(), "learn");
  EXPECT_TRUE(Feed(Write(), "predicted"));
  const uint64_t dropped = predicting_.dev->qp(predicting_.qpn)->counters().dropped_wrong_state;
  EXPECT_TRUE(Feed(Write(wire::kUcWriteOnly), "UC WRITE to an RC QP"));
  EXPECT_EQ(predicting_.dev->qp(predicting_.qpn)->counters().dropped_wrong_state, dropped + 1);
  EXPECT_TRUE(Feed(Write(), "predicted again"));
}

TEST_P(RxPrediction, NewAddressesAreJudgedAfresh) {
  Feed(Write(), "learn");
  EXPECT_TRUE(Feed(Write(), "predicted"));
  // The device's addresses go: the prediction with them.
  for (End* e : {&predicting_, &reference_}) e->dev->SetGids({});
  EXPECT_FALSE(Feed(Write(), "no addresses"));
  EXPECT_EQ(predicting_.dev->counters().rx_drop_dst_ip, 1u);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RxPrediction,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Ipv6" : "Ipv4") +
                                  (std::get<1>(info.param) ? "Vlan" : "") +
                                  (std::get<2>(info.param) ? "ConstantId" : "");
                         });

}  // namespace
}  // namespace droce::core
