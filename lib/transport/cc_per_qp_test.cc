// Congestion control per QP (doc/cc.md "Per QP"): QPs of one device run
// different algorithms, chosen before RTR (Device::SetQpCongestionControl,
// which the verbs provider calls when ECE picked one), through one queued
// switch port (sim::EgressPortIo: a FIFO at the line rate, RED/ECN). Each
// algorithm sees what it reacts to through the transport's hooks: DCQCN the
// CNPs for the marks, TIMELY and Swift the queueing delay in their RTT
// samples. Virtual time; the numbers asserted are what the events must
// produce, not speeds.
#include <gmock/gmock.h>

#include "cc/hpcc.h"
#include "cc/swift.h"
#include "cc/timely.h"
#include "sim/switch/egress_port_io.h"
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;

constexpr uint32_t kMtu = 1024;
constexpr uint32_t kMsg = 64 * 1024;
constexpr uint32_t kDepth = 16;           // WRITEs outstanding per QP
constexpr uint64_t kRate = 1'000'000'000;  // the switch port: 8.2 us per 1 KiB frame

struct Flow {
  uint32_t qpn[2] = {};  // on a, on b
  const char* algorithm = "none";
  uint32_t posted = 0, completed = 0;
};

class SharedPort {
 public:
  // `algorithms`: one flow (a QP on a, its peer on b) each; `int_stamp`: the
  // port stamps INT requests; `device_cc`, `device_params`: device a's cc=
  // and cc_params= (what a QP choosing that algorithm runs);
  // `selective_repeat`: every QP of both devices.
  explicit SharedPort(std::vector<const char*> algorithms, bool int_stamp = false, const char* device_cc = nullptr,
                      const char* device_params = "", bool selective_repeat = false)
      : wire_(WireConfig()), port_(&wire_.end(0), PortConfig(int_stamp), &Clock, &now_, 16 * 1024) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      if (i == 0 && device_cc != nullptr) {
        absl::StatusOr<cc::Config> c = cc::ParseConfig(device_cc, device_params, kRate);
        EXPECT_TRUE(c.ok()) << c.status();
        if (c.ok()) cfg.cc = *c;
      }
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      cfg.cc_line_rate_bps = kRate;
      cfg.min_time_between_cnps_ns = 50'000;
      cfg.selective_repeat = selective_repeat;
      OpenSide(s_[i], cfg, i == 0 ? static_cast<pktio::BurstIo*>(&port_) : &wire_.end(1), kDepth * kMsg * 4);
    }
    for (size_t f = 0; f < algorithms.size(); ++f) {
      Flow fl;
      fl.algorithm = algorithms[f];
      for (int i = 0; i < 2; ++i) {
        if (f == 0) {
          fl.qpn[i] = s_[i].qpn;
        } else {
          QpInitAttr init;
          init.pd = s_[i].pd;
          init.send_cq = init.recv_cq = s_[i].cq;
          init.caps.max_send_wr = 1024;
          init.caps.max_recv_wr = 1024;
          fl.qpn[i] = *s_[i].dev->CreateQp(init);
        }
      }
      const absl::Status st = s_[0].dev->SetQpCongestionControl(fl.qpn[0], fl.algorithm);
      EXPECT_TRUE(st.ok()) << st;
      flows_.push_back(fl);
    }
    for (const Flow& fl : flows_) {
      for (int i = 0; i < 2; ++i) {
        ConnectParams c;
        c.peer_gid = s_[1 - i].dev->gids()[1];
        c.peer_mac = s_[1 - i].dev->config().mac;
        c.peer_qpn = fl.qpn[1 - i];
        c.mtu = kMtu;
        EXPECT_TRUE(ConnectQp(*s_[i].dev, fl.qpn[i], c).ok());
      }
    }
  }

  // Every flow keeps kDepth WRITEs of kMsg outstanding until `writes` of
  // each completed (or virtual time runs out). Returns the virtual ns taken.
  uint64_t Run(uint32_t writes, uint64_t max_ns) {
    const uint64_t start = now_, end = now_ + max_ns;
    const auto post = [&](size_t f) {
      Flow& fl = flows_[f];
      const uint64_t off = (f * kDepth + fl.posted % kDepth) * uint64_t{kMsg};
      SendWr wr = MakeWr(f << 32 | fl.posted, WrOpcode::kRdmaWrite, s_[0], off, kMsg, s_[1], off);
      EXPECT_EQ(s_[0].dev->PostSend(fl.qpn[0], wr), 0);
      ++fl.posted;
    };
    for (size_t f = 0; f < flows_.size(); ++f) {
      while (flows_[f].posted < kDepth) post(f);
    }
    Completion buf[64];
    while (now_ < end) {
      const uint32_t work = s_[0].dev->Poll(now_) + s_[1].dev->Poll(now_);
      port_.Flush();
      bool all = true;
      for (uint32_t k; (k = s_[0].dev->PollCq(s_[0].cq, buf, 64)) > 0;) {
        for (uint32_t i = 0; i < k; ++i) {
          EXPECT_EQ(buf[i].status, WcStatus::kSuccess);
          const size_t f = buf[i].wr_id >> 32;
          ++flows_[f].completed;
          if (flows_[f].posted < writes) post(f);
        }
      }
      for (const Flow& fl : flows_) all = all && fl.completed >= writes;
      if (all) return now_ - start;
      now_ += work > 0 ? 1000 : 5000;
    }
    return now_ - start;
  }

  const cc::CongestionControl& cc(size_t f) { return s_[0].dev->qp(flows_[f].qpn[0])->congestion_control(); }
  const Flow& flow(size_t f) const { return flows_[f]; }
  Side& a() { return s_[0]; }
  uint64_t now() const { return now_; }
  sim::EgressPortIo& port() { return port_; }

 private:
  static uint64_t Clock(void* ctx) { return *static_cast<uint64_t*>(ctx); }
  static sim::MemWireConfig WireConfig() {
    sim::MemWireConfig c;
    c.seed = 7;
    c.pool_frames = 32 * 1024;
    c.queue_frames = 8192;
    return c;
  }
  static sim::EgressPortConfig PortConfig(bool int_stamp) {
    sim::EgressPortConfig c;
    c.int_stamp = int_stamp;
    c.line_rate_bps = kRate;
    c.kmin_bytes = 20'000;
    c.kmax_bytes = 200'000;
    c.pmax = 0.2;
    c.seed = 3;
    return c;
  }

  uint64_t now_ = 1'000'000;
  sim::MemWire wire_;
  sim::EgressPortIo port_;
  Side s_[2];
  std::vector<Flow> flows_;
};

TEST(CcPerQp, AnUnknownAlgorithmOrALateChoiceIsRefused) {
  SharedPort p({"timely"});
  Device& dev = *p.a().dev;
  EXPECT_EQ(dev.SetQpCongestionControl(12345, "timely").code(), absl::StatusCode::kNotFound);
  // The connection is at RTS: its algorithm is fixed, as selective repeat is.
  EXPECT_EQ(dev.SetQpCongestionControl(p.flow(0).qpn[0], "hpcc").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_STREQ(p.cc(0).name(), "timely");
  QpInitAttr init;
  init.pd = p.a().pd;
  init.send_cq = init.recv_cq = p.a().cq;
  const uint32_t fresh = *dev.CreateQp(init);
  const absl::Status bad = dev.SetQpCongestionControl(fresh, "cubic");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("dcqcn, timely, hpcc, swift, none"));
  ASSERT_TRUE(dev.SetQpCongestionControl(fresh, "swift").ok());
  EXPECT_STREQ(dev.qp(fresh)->congestion_control().name(), "swift");
  ASSERT_TRUE(dev.SetQpCongestionControl(fresh, "none").ok());
  EXPECT_EQ(dev.qp(fresh)->congestion_control().ops(), nullptr);
}

// Two QPs of one device, DCQCN and TIMELY, share the port: each runs its
// own algorithm, DCQCN cuts on the CNPs the port's marks bring back, TIMELY
// on the queueing delay its RTT samples show (above t_high, 500 us: 60 KiB
// queued at 1 Gb/s), and both move all their data.
TEST(CcPerQp, TwoQpsOfOneDeviceRunDifferentAlgorithmsThroughOneQueue) {
  SharedPort p({"dcqcn", "timely"});
  ASSERT_STREQ(p.cc(0).name(), "dcqcn");
  ASSERT_STREQ(p.cc(1).name(), "timely");
  const uint64_t ns = p.Run(64, 5'000'000'000ull);
  const cc::Stats& d = p.cc(0).stats();
  const cc::Stats& t = p.cc(1).stats();
  std::printf("dcqcn: done %u cnps %lu decreases %lu rate %.3f Gb/s | timely: done %u samples %lu min_rtt %.1f us "
              "last_rtt %.1f us decreases %lu rate %.3f Gb/s | port max queue %.1f KB, %.1f ms\n",
              p.flow(0).completed, d.cnps, d.rate_decreases, p.cc(0).output().rate_bps / 1e9, p.flow(1).completed,
              t.rtt_samples, t.min_rtt_ns / 1e3, t.last_rtt_ns / 1e3, t.rate_decreases,
              p.cc(1).output().rate_bps / 1e9, p.port().port().max_queue_bytes() / 1e3, ns / 1e6);
  ASSERT_GE(p.flow(0).completed, 64u);
  ASSERT_GE(p.flow(1).completed, 64u);
  EXPECT_GT(d.cnps, 0u);
  EXPECT_GT(d.rate_decreases, 0u);
  EXPECT_GT(t.rtt_samples, 10u);
  // Queueing delay: the largest sample is well above the smallest.
  const cc::TimelyState* ts = cc::TimelyStateOf(p.cc(1));
  ASSERT_NE(ts, nullptr);
  EXPECT_GT(ts->updates, 5u);
  EXPECT_GT(t.rate_decreases, 0u);
  EXPECT_GT(p.port().port().max_queue_bytes(), 60'000u);
}

// Swift holds the delay near its target with a window: started at 256
// packets (its max_cwnd here; the default, one BDP at the 25 us target, is
// 3 packets at 1 Gb/s and never builds a queue), it sees the queue's delay
// far above its target and shrinks the window, so the port's mean queue
// stays far below what an unlimited QP keeps.
TEST(CcPerQp, SwiftSeesTheQueueAndShrinksItsWindow) {
  SharedPort swift({"swift"}, /*int_stamp=*/false, "swift", "max_cwnd=256");
  const uint64_t ns = swift.Run(64, 2'000'000'000ull);
  ASSERT_GE(swift.flow(0).completed, 64u);
  const cc::SwiftState* s = cc::SwiftStateOf(swift.cc(0));
  ASSERT_NE(s, nullptr);
  SharedPort none({"none"});
  const uint64_t ns_none = none.Run(64, 2'000'000'000ull);
  ASSERT_GE(none.flow(0).completed, 64u);
  sim::EgressPort& sp = swift.port().port();
  sim::EgressPort& np = none.port().port();
  std::printf("swift: samples %lu min_rtt %.1f us srtt %.1f us cwnd %.2f decreases %lu, port mean queue %.1f KB, "
              "%.2f ms | none: mean queue %.1f KB, %.2f ms\n",
              swift.cc(0).stats().rtt_samples, swift.cc(0).stats().min_rtt_ns / 1e3, s->srtt_ns / 1e3, s->cwnd,
              s->decreases, sp.MeanQueueBytes(swift.now()) / 1e3, ns / 1e6, np.MeanQueueBytes(none.now()) / 1e3,
              ns_none / 1e6);
  EXPECT_GT(swift.cc(0).stats().rtt_samples, 10u);
  EXPECT_GT(s->decreases, 0u);
  EXPECT_LT(s->cwnd, 64);
  EXPECT_LT(sp.MeanQueueBytes(swift.now()) * 4, np.MeanQueueBytes(none.now()));
}

// HPCC on two QPs through a port that stamps INT: the requests carry the
// INT header, the port fills its record (queue, bytes sent, clock, rate),
// the responder echoes it in its ACKs and HPCC's window follows the
// utilisation it computes — the queue stays far below what two unlimited
// QPs build. Without INT from the port the echoes carry no hops and HPCC
// never updates.
TEST(CcPerQp, HpccReactsToTheUtilisationItsTelemetryReports) {
  constexpr const char* kHpcc = "base_rtt_ns=40000";
  SharedPort hpcc({"hpcc", "hpcc"}, /*int_stamp=*/true, "hpcc", kHpcc);
  const uint64_t ns = hpcc.Run(32, 2'000'000'000ull);
  ASSERT_GE(hpcc.flow(0).completed, 32u);
  ASSERT_GE(hpcc.flow(1).completed, 32u);
  EXPECT_GT(hpcc.port().counters().int_stamped, 1000u);
  double u_max = 0;
  for (size_t f = 0; f < 2; ++f) {
    const cc::HpccState* h = cc::HpccStateOf(hpcc.cc(f));
    ASSERT_NE(h, nullptr);
    EXPECT_GT(hpcc.cc(f).stats().telemetry_acks, 100u) << f;
    EXPECT_GT(h->updates, 10u) << f;
    EXPECT_GT(hpcc.cc(f).stats().rate_decreases, 0u) << f;
    u_max = std::max(u_max, h->u);
    std::printf("hpcc flow %zu: echoes %lu updates %lu fast %lu U %.3f W %.0f B rate %.3f Gb/s min_rtt %.1f us\n", f,
                hpcc.cc(f).stats().telemetry_acks, h->updates, h->fast_reactions, h->u, h->w,
                hpcc.cc(f).output().rate_bps / 1e9, hpcc.cc(f).stats().min_rtt_ns / 1e3);
  }
  sim::EgressPort& hp = hpcc.port().port();
  SharedPort none({"none", "none"});
  const uint64_t ns_none = none.Run(32, 2'000'000'000ull);
  sim::EgressPort& np = none.port().port();
  std::printf("hpcc: port max queue %.1f KB, p99 %.1f KB, %.2f ms | none: max %.1f KB, p99 %.1f KB, %.2f ms\n",
              hp.max_queue_bytes() / 1e3, hp.QueuePercentile(0.99, hpcc.now()) / 1e3, ns / 1e6, np.max_queue_bytes() / 1e3,
              np.QueuePercentile(0.99, none.now()) / 1e3, ns_none / 1e6);
  EXPECT_LT(hp.max_queue_bytes() * 4, np.max_queue_bytes());

  SharedPort blind({"hpcc"}, /*int_stamp=*/false, "hpcc", kHpcc);
  blind.Run(8, 2'000'000'000ull);
  EXPECT_EQ(cc::HpccStateOf(blind.cc(0))->updates, 0u);
}

// With selective repeat the responder acknowledges with its own ACKs and
// SACKs: they carry the INT echo too, so HPCC sees the port's records.
TEST(CcPerQp, HpccGetsItsEchoesWithSelectiveRepeat) {
  SharedPort sr({"hpcc"}, /*int_stamp=*/true, "hpcc", "base_rtt_ns=40000", /*selective_repeat=*/true);
  sr.Run(16, 2'000'000'000ull);
  ASSERT_GE(sr.flow(0).completed, 16u);
  EXPECT_GT(sr.port().counters().int_stamped, 100u);
  EXPECT_GT(sr.cc(0).stats().telemetry_acks, 10u);
  EXPECT_GT(cc::HpccStateOf(sr.cc(0))->updates, 0u);
}

// A QP back in RESET starts a new connection: its algorithm (the same one,
// with the same parameters) starts from its initial state, not from the
// window, rate and statistics the old path left.
TEST(CcPerQp, ResetRestartsTheAlgorithm) {
  SharedPort swift({"swift"}, /*int_stamp=*/false, "swift", "max_cwnd=256");
  const uint32_t initial_window = swift.cc(0).output().window_packets;
  swift.Run(64, 2'000'000'000ull);
  ASSERT_GE(swift.flow(0).completed, 64u);
  ASSERT_GT(swift.cc(0).stats().rtt_samples, 10u);
  ASSERT_LT(swift.cc(0).output().window_packets, initial_window);
  transport::QpAttr attr;
  attr.qp_state = transport::QpState::kReset;
  ASSERT_TRUE(swift.a().dev->ModifyQp(swift.flow(0).qpn[0], attr, transport::kAttrState).ok());
  EXPECT_STREQ(swift.cc(0).name(), "swift");
  EXPECT_EQ(swift.cc(0).output().window_packets, initial_window);
  EXPECT_EQ(swift.cc(0).stats().rtt_samples, 0u);
  EXPECT_EQ(swift.cc(0).stats().rate_decreases, 0u);
}

}  // namespace
}  // namespace droce::core
