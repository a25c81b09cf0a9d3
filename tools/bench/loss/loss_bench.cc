// The lossy-network experiment on the deterministic in-memory wire
// (doc/loss-experiment.md):
// goodput of 64 KiB RDMA WRITEs and the completion time of one 64 KiB WRITE
// against packet loss, for go-back-N and selective repeat.
//
// Two core::Devices joined by sim::MemWire, everything in virtual time:
// each direction of the link is a FIFO drained at a line rate followed by a
// fixed propagation delay (PathIo below), then the MemWire, whose seeded
// `drop` impairment loses frames at random; the bursty pattern is a
// Gilbert-Elliott channel applied by PathIo instead. Loss hits both
// directions (requests and ACK/NAKs) after serialization, so a lost frame
// used its share of the link as on a real wire. The devices themselves take
// no virtual time, so goodput is what the protocol gets out of the link, the
// same on a loaded or an idle host, and one seed replays one run exactly.
//
// Prints CSV: one row per (mode, loss pattern). retransmitted_pct is the
// requester's retransmitted packets per packet it had to send once, in %.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"

namespace {

using namespace droce;

// The selective-repeat switch of lib/, set only where DeviceConfig has it:
// A/B runs build an older tree with this file, and there the sr mode is
// reported "unsupported".
template <typename C>
bool SetSelectiveRepeat(C& cfg, bool on) {
  if constexpr (requires { cfg.selective_repeat = true; }) {
    cfg.selective_repeat = on;
    return true;
  } else {
    return !on;
  }
}

// Loss pattern of one direction.
struct LossModel {
  double p = 0;           // Bernoulli loss (applied by MemWire)
  bool gilbert = false;   // Gilbert-Elliott (applied by PathIo)
  double p_gb = 0, p_bg = 1, loss_bad = 1, loss_good = 0;
};

// One direction of the link: serialization at `rate` then `delay`, then the
// MemWire end (which applies the random drop). Frames wait here, in order.
class PathIo final : public pktio::BurstIo {
 public:
  PathIo(pktio::BurstIo* port, const uint64_t* now, double gbps, uint64_t delay_ns, const LossModel& loss,
         uint64_t seed)
      : port_(port), now_(now), ns_per_byte_(8.0 / gbps), delay_ns_(delay_ns), loss_(loss), rng_(seed | 1) {}

  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override { return port_->RxBurst(f, n); }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return port_->AllocTx(f, n); }
  void Release(pktio::Frame* f, uint16_t n) override { port_->Release(f, n); }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      // 24 bytes of preamble, SFD, FCS and inter-frame gap per frame on Ethernet.
      const uint64_t start = std::max(*now_, busy_until_);
      busy_until_ = start + static_cast<uint64_t>((f[i].len + 24) * ns_per_byte_);
      held_.push_back({f[i], busy_until_ + delay_ns_, LoseGilbert()});
    }
    return n;
  }

  // Hands the frames whose time has come to the wire (or drops them).
  void Flush() {
    while (!held_.empty() && held_.front().deliver_ns <= *now_) {
      Held h = held_.front();
      held_.pop_front();
      if (h.lost) {
        port_->Release(&h.frame, 1);
        ++gilbert_dropped_;
      } else if (port_->TxBurst(&h.frame, 1) != 1) {
        port_->Release(&h.frame, 1);
      }
    }
  }
  uint64_t next_delivery() const { return held_.empty() ? UINT64_MAX : held_.front().deliver_ns; }
  uint64_t gilbert_dropped() const { return gilbert_dropped_; }

 private:
  struct Held {
    pktio::Frame frame;
    uint64_t deliver_ns;
    bool lost;
  };
  double Uniform() {  // xorshift64*
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return double((rng_ * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53;
  }
  bool LoseGilbert() {
    if (!loss_.gilbert) return false;
    if (bad_) {
      if (Uniform() < loss_.p_bg) bad_ = false;
    } else if (Uniform() < loss_.p_gb) {
      bad_ = true;
    }
    return Uniform() < (bad_ ? loss_.loss_bad : loss_.loss_good);
  }

  pktio::BurstIo* port_;
  const uint64_t* now_;
  double ns_per_byte_;
  uint64_t delay_ns_;
  LossModel loss_;
  uint64_t rng_;
  bool bad_ = false;
  uint64_t busy_until_ = 0;
  uint64_t gilbert_dropped_ = 0;
  std::deque<Held> held_;
};

// The SR in-flight cap (sr_max_inflight_packets), when asked for and the tree has it.
template <typename C>
void SetSrInflight(C& cfg, uint32_t n) {
  if constexpr (requires { cfg.sr_max_inflight_packets = 1u; }) {
    if (n != 0) cfg.sr_max_inflight_packets = n;
  }
}

// SR's RTO floor in us (sr_rto_min_ns), when asked for and the tree has it.
template <typename C>
void SetSrRtoMin(C& cfg, uint32_t us) {
  if constexpr (requires { cfg.sr_rto_min_ns = 1u; }) {
    if (us != 0) cfg.sr_rto_min_ns = uint64_t{us} * 1000;
  }
}

struct Options {
  std::vector<std::string> modes{"gbn"};
  std::vector<double> losses_pct{0, 0.01, 0.1, 0.5, 1, 2, 5};
  bool bursty = true;           // plus one Gilbert-Elliott pattern
  double ge_avg_pct = 1;        // its average loss
  double ge_burst = 4;          // its mean burst length (frames)
  uint32_t writes = 4000;       // 64 KiB WRITEs streamed for goodput
  uint32_t window = 8;          // outstanding WRITEs while streaming
  uint32_t lat_writes = 2000;   // one at a time, for completion times
  uint32_t size = 65536;
  uint32_t mtu = 1024;
  double gbps = 25;
  uint64_t delay_ns = 5000;     // one way
  uint8_t timeout = 14;         // 4.096 us * 2^14 = 67 ms: ibv's and perftest's default
  uint8_t retry_cnt = 7;
  uint64_t seed = 1;
  uint32_t sr_inflight = 0;     // SR's cap on packets in flight (0: the device's default)
  uint32_t sr_rto_min_us = 0;   // SR's RTO floor (0: the device's default)
};

struct Pattern {
  std::string name;
  double loss_pct;  // average
  LossModel model;
};

struct Outcome {
  bool ok = true;
  std::string error;
  double goodput_gbps = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  uint64_t data_packets = 0, retransmitted = 0, timeouts = 0, dropped = 0;
};

class Pair {
 public:
  Pair(const Options& o, const Pattern& pat, bool sr, uint64_t seed) {
    sim::MemWireConfig wc;
    wc.seed = seed;
    wc.pool_frames = 16384;
    wc.queue_frames = 16384;
    for (auto& d : wc.impair) d.drop = pat.model.gilbert ? 0 : pat.model.p;
    wire_ = std::make_unique<sim::MemWire>(wc);
    for (int i = 0; i < 2; ++i) {
      path_[i] = std::make_unique<PathIo>(&wire_->end(i), &now_, o.gbps, o.delay_ns, pat.model,
                                          seed * 7919 + i + 1);
      core::DeviceConfig cfg;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      SetSelectiveRepeat(cfg, sr);
      SetSrInflight(cfg, o.sr_inflight);
      SetSrRtoMin(cfg, o.sr_rto_min_us);
      ep_[i].dev = std::make_unique<core::Device>(cfg, path_[i].get());
      Endpoint& e = ep_[i];
      e.pd = e.dev->AllocPd();
      e.cq = *e.dev->CreateCq(8192);
      core::QpInitAttr init;
      init.pd = e.pd;
      init.send_cq = init.recv_cq = e.cq;
      init.caps.max_send_wr = 1024;
      e.qpn = *e.dev->CreateQp(init);
      e.mem.assign(size_t(o.size) * 2, uint8_t(0x40 + i));
      e.keys = *e.dev->RegMr(e.pd, e.mem.data(), e.mem.size(), reinterpret_cast<uint64_t>(e.mem.data()),
                             mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
    }
    for (int i = 0; i < 2; ++i) {
      core::ConnectParams c;
      c.peer_gid = ep_[1 - i].dev->gids()[1];
      c.peer_mac = ep_[1 - i].dev->config().mac;
      c.peer_qpn = ep_[1 - i].qpn;
      c.mtu = o.mtu;
      c.timeout = o.timeout;
      c.retry_cnt = o.retry_cnt;
      const absl::Status st = core::ConnectQp(*ep_[i].dev, ep_[i].qpn, c);
      if (!st.ok()) {
        std::fprintf(stderr, "connect: %s\n", std::string(st.message()).c_str());
        std::exit(1);
      }
    }
    wr_.opcode = transport::WrOpcode::kRdmaWrite;
    wr_.flags = transport::kSendSignaled;
    wr_.num_sge = 1;
    wr_.sg_list[0] = {reinterpret_cast<uint64_t>(ep_[0].mem.data()), o.size, ep_[0].keys.lkey};
    wr_.remote_addr = reinterpret_cast<uint64_t>(ep_[1].mem.data());
    wr_.rkey = ep_[1].keys.rkey;
  }

  // Posts `count` WRITEs, at most `window` outstanding, every one signaled;
  // fills `done_ns` with each one's completion time minus its post time.
  // Returns the virtual time from the first post to the last completion.
  bool Run(uint32_t count, uint32_t window, std::vector<uint64_t>* done_ns, std::string* error) {
    std::vector<uint64_t> posted_at(count);
    uint32_t posted = 0, completed = 0;
    const uint64_t start = now_;
    const uint64_t limit = now_ + 3600ull * 1'000'000'000;  // an hour of virtual time
    queue::Completion wc[64];
    while (completed < count) {
      while (posted < count && posted - completed < window) {
        wr_.wr_id = posted;
        if (ep_[0].dev->PostSend(ep_[0].qpn, wr_) != 0) break;
        posted_at[posted++] = now_;
      }
      path_[0]->Flush();
      path_[1]->Flush();
      const uint32_t w = ep_[0].dev->Poll(now_) + ep_[1].dev->Poll(now_);
      const uint32_t n = ep_[0].dev->PollCq(ep_[0].cq, wc, 64);
      for (uint32_t i = 0; i < n; ++i) {
        if (wc[i].status != queue::WcStatus::kSuccess) {
          *error = queue::WcStatusName(wc[i].status);
          return false;
        }
        done_ns->push_back(now_ - posted_at[wc[i].wr_id]);
        ++completed;
      }
      // Devices take no virtual time; the link does. Idle: jump to the next
      // frame's arrival, or 1 us ahead when only a timer can wake things up.
      const uint64_t next = std::min(path_[0]->next_delivery(), path_[1]->next_delivery());
      if (w > 0 || n > 0) {
        now_ += 10;
      } else {
        now_ = next != UINT64_MAX ? std::max(now_ + 10, next) : now_ + 1000;
      }
      if (now_ > limit) {
        *error = "no progress in an hour of virtual time";
        return false;
      }
    }
    total_ns_ = now_ - start;
    return true;
  }

  uint64_t total_ns() const { return total_ns_; }
  const transport::QpCounters& requester() { return ep_[0].dev->qp(ep_[0].qpn)->counters(); }
  uint64_t dropped() const {
    return wire_->counters(0).dropped + wire_->counters(1).dropped + path_[0]->gilbert_dropped() +
           path_[1]->gilbert_dropped();
  }

 private:
  struct Endpoint {
    std::unique_ptr<core::Device> dev;
    uint32_t pd = 0, cq = 0, qpn = 0;
    std::vector<uint8_t> mem;
    mem::MrKeys keys{};
  };
  uint64_t now_ = 1'000'000;
  uint64_t total_ns_ = 0;
  std::unique_ptr<sim::MemWire> wire_;
  std::unique_ptr<PathIo> path_[2];
  Endpoint ep_[2];
  transport::SendWr wr_;
};

double Percentile(std::vector<uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * v.size())) - (q > 0 ? 1 : 0));
  return double(v[i]);
}

Outcome Measure(const Options& o, const Pattern& pat, bool sr) {
  Outcome out;
  std::vector<uint64_t> times;
  {
    Pair stream(o, pat, sr, o.seed);
    if (!stream.Run(o.writes, o.window, &times, &out.error)) {
      out.ok = false;
      return out;
    }
    out.goodput_gbps = double(o.writes) * o.size * 8 / double(stream.total_ns());
    const auto& c = stream.requester();
    out.data_packets = c.tx_packets;
    out.retransmitted = c.retransmitted_packets;
    out.timeouts = c.timeouts;
    out.dropped = stream.dropped();
    // The stream's repair times (doc/transport.md "Selective repeat", counters), on stderr.
    if constexpr (requires { c.sr_repairs_timed; }) {
      if (sr) {
        uint64_t samples = 0;
        for (uint64_t v : c.sr_rtt_hist) samples += v;
        const auto avg = [](uint64_t sum, uint64_t n) { return n == 0 ? 0.0 : double(sum) / double(n) / 1000; };
        std::fprintf(stderr,
                     "repair %s %g%%: rtt_min_us %.1f inflight_at_rtt %.1f "
                     "hole_to_resend n %llu avg_us %.1f max_us %.1f resend_to_ack n %llu avg_us %.1f >=512us %llu\n",
                     pat.name.c_str(), pat.loss_pct, c.sr_rtt_min_ns / 1000.0,
                     samples == 0 ? 0.0 : double(c.sr_rtt_inflight_sum) / double(samples),
                     (unsigned long long)c.sr_repair_waits, avg(c.sr_repair_wait_ns, c.sr_repair_waits),
                     c.sr_repair_wait_max_ns / 1000.0, (unsigned long long)c.sr_repairs_timed,
                     avg(c.sr_repair_ns, c.sr_repairs_timed),
                     (unsigned long long)(c.sr_repair_hist[4] + c.sr_repair_hist[5] + c.sr_repair_hist[6] +
                                          c.sr_repair_hist[7]));
      }
    }
  }
  times.clear();
  Pair single(o, pat, sr, o.seed + 1000);
  if (!single.Run(o.lat_writes, 1, &times, &out.error)) {
    out.ok = false;
    return out;
  }
  out.p50_us = Percentile(times, 0.5) / 1000;
  out.p99_us = Percentile(times, 0.99) / 1000;
  out.max_us = Percentile(times, 1.0) / 1000;
  return out;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

[[noreturn]] void Usage() {
  std::fprintf(stderr,
               "usage: droce-loss-bench [--modes gbn,sr] [--losses 0,0.01,...(%%)] [--no-bursty]\n"
               "  [--ge-avg PCT] [--ge-burst FRAMES] [--writes N] [--window W] [--lat-writes N] [--sr-inflight N] [--sr-rto-min-us US]\n"
               "  [--size B] [--mtu 1024|4096] [--gbps G] [--delay-us US] [--timeout T] [--retry N] [--seed S]\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (a == "--modes") o.modes = Split(val());
    else if (a == "--losses") {
      o.losses_pct.clear();
      for (const auto& s : Split(val())) o.losses_pct.push_back(std::atof(s.c_str()));
    } else if (a == "--no-bursty") o.bursty = false;
    else if (a == "--ge-avg") o.ge_avg_pct = std::atof(val().c_str());
    else if (a == "--ge-burst") o.ge_burst = std::atof(val().c_str());
    else if (a == "--writes") o.writes = std::atoi(val().c_str());
    else if (a == "--window") o.window = std::atoi(val().c_str());
    else if (a == "--lat-writes") o.lat_writes = std::atoi(val().c_str());
    else if (a == "--size") o.size = std::atoi(val().c_str());
    else if (a == "--mtu") o.mtu = std::atoi(val().c_str());
    else if (a == "--gbps") o.gbps = std::atof(val().c_str());
    else if (a == "--delay-us") o.delay_ns = uint64_t(std::atof(val().c_str()) * 1000);
    else if (a == "--timeout") o.timeout = uint8_t(std::atoi(val().c_str()));
    else if (a == "--retry") o.retry_cnt = uint8_t(std::atoi(val().c_str()));
    else if (a == "--seed") o.seed = std::strtoull(val().c_str(), nullptr, 0);
    else if (a == "--sr-inflight") o.sr_inflight = uint32_t(std::atoi(val().c_str()));
    else if (a == "--sr-rto-min-us") o.sr_rto_min_us = uint32_t(std::atoi(val().c_str()));
    else Usage();
  }
  std::vector<Pattern> patterns;
  for (double p : o.losses_pct) {
    Pattern pat;
    char name[32];
    std::snprintf(name, sizeof name, "random");
    pat.name = name;
    pat.loss_pct = p;
    pat.model.p = p / 100;
    patterns.push_back(pat);
  }
  if (o.bursty) {
    // Gilbert-Elliott: every frame lost in the bad state, none in the good
    // one; mean bad run ge_burst frames, average loss ge_avg_pct.
    Pattern pat;
    pat.name = "gilbert";
    pat.loss_pct = o.ge_avg_pct;
    pat.model.gilbert = true;
    pat.model.p_bg = 1 / o.ge_burst;
    const double pi_bad = o.ge_avg_pct / 100;
    pat.model.p_gb = pi_bad * pat.model.p_bg / (1 - pi_bad);
    patterns.push_back(pat);
  }
  std::printf("setup,mode,pattern,loss_pct,timeout,goodput_gbps,goodput_vs_lossless,p50_us,p99_us,"
              "p99_vs_lossless,max_us,retransmitted_pct,timeouts,dropped,status\n");
  for (const std::string& mode : o.modes) {
    const bool sr = mode == "sr";
    if (mode != "gbn" && mode != "sr") Usage();
    core::DeviceConfig probe;
    if (!SetSelectiveRepeat(probe, sr)) {
      std::fprintf(stderr, "mode %s skipped: this tree's core::DeviceConfig has no selective_repeat\n",
                   mode.c_str());
      for (const Pattern& pat : patterns)
        std::printf("inmem,%s,%s,%g,%u,,,,,,,,,,unsupported\n", mode.c_str(), pat.name.c_str(), pat.loss_pct,
                    o.timeout);
      std::fflush(stdout);
      continue;
    }
    double base_goodput = 0, base_p99 = 0;
    for (const Pattern& pat : patterns) {
      const Outcome r = Measure(o, pat, sr);
      if (!r.ok) {
        std::printf("inmem,%s,%s,%g,%u,,,,,,,,,,%s\n", mode.c_str(), pat.name.c_str(), pat.loss_pct,
                    o.timeout, r.error.c_str());
        std::fflush(stdout);
        continue;
      }
      if (pat.loss_pct == 0 && !pat.model.gilbert) {
        base_goodput = r.goodput_gbps;
        base_p99 = r.p99_us;
      }
      std::printf("inmem,%s,%s,%g,%u,%.3f,%.3f,%.1f,%.1f,%.2f,%.1f,%.2f,%llu,%llu,ok\n", mode.c_str(),
                  pat.name.c_str(), pat.loss_pct, o.timeout, r.goodput_gbps,
                  base_goodput > 0 ? r.goodput_gbps / base_goodput : 0, r.p50_us, r.p99_us,
                  base_p99 > 0 ? r.p99_us / base_p99 : 0, r.max_us,
                  r.data_packets > r.retransmitted ? 100.0 * r.retransmitted / (r.data_packets - r.retransmitted) : 0,
                  (unsigned long long)r.timeouts, (unsigned long long)r.dropped);
      std::fflush(stdout);
    }
  }
  return 0;
}
