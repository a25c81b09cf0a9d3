#include "apps/ccsim/sim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <queue>
#include <random>
#include <sstream>

#include "sim/switch/egress_port.h"
#include "cc/dcqcn.h"

namespace droce::ccsim {
namespace {

constexpr uint32_t kFrameOverhead = 58;  // Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4
constexpr uint64_t kNever = UINT64_MAX;

enum class Ev : uint8_t { kSend, kWake, kArrive, kDepart, kCnp, kSample };

struct Event {
  uint64_t t;
  uint64_t seq;  // FIFO among equal times: runs are deterministic
  Ev type;
  int flow;
  uint64_t gen;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Sender {
  explicit Sender(const cc::DcqcnParams& p) : rp(p) {}
  cc::ReactionPoint rp;
  cc::Pacer pacer;
  uint64_t start_ns = 0;
  bool started = false;
  uint64_t send_gen = 0;      // a kSend event with another gen is stale
  uint64_t send_at = kNever;
  uint64_t wake_at = kNever;  // pending kWake (others are stale)
  uint64_t last_cnp_ns = 0;   // receiver side (notification point) for this flow
  bool cnp_sent = false;
  uint64_t delivered = 0;     // bytes, current sample
  uint64_t delivered_half = 0;  // bytes, second half
};

class Simulation {
 public:
  Simulation(const SimConfig& cfg, const cc::DcqcnParams& params)
      : cfg_(cfg), params_(params), bn_(PortConfigFor(cfg)) {
    line_bps_ = static_cast<uint64_t>(cfg.line_rate_gbps * 1e9 + 0.5);
    frame_ = cfg.mtu + kFrameOverhead;
    end_ns_ = static_cast<uint64_t>(cfg.duration_ms * 1e6);
    half_ns_ = end_ns_ / 2;
    sample_ns_ = std::max<uint64_t>(1, static_cast<uint64_t>(cfg.sample_us * 1e3));
    feedback_ns_ = static_cast<uint64_t>(cfg.feedback_delay_us * 1e3);
    cnp_interval_ns_ = cfg.cnp_interval_us >= 0
                           ? static_cast<uint64_t>(cfg.cnp_interval_us * 1e3)
                           : uint64_t{params.min_time_between_cnps_us} * 1000;
    for (int i = 0; i < cfg.senders; ++i) senders_.emplace_back(params);
    jitter_ns_ = static_cast<uint64_t>(cfg.jitter_ns);
    jitter_rng_.seed(cfg.seed ^ 0x9e3779b97f4a7c15ull);
  }

  void Run(SimResult* r) {
    r->flows.assign(senders_.size(), {});
    for (size_t i = 0; i < senders_.size(); ++i) {
      Sender& s = senders_[i];
      s.start_ns = (cfg_.late_join_ms >= 0 && i + 1 == senders_.size())
                       ? static_cast<uint64_t>(cfg_.late_join_ms * 1e6)
                       : 0;
      ScheduleSend(static_cast<int>(i), s.start_ns);
    }
    Push(sample_ns_, Ev::kSample, -1, 0);
    bool half_done = false;
    while (!q_.empty()) {
      const Event e = q_.top();
      if (e.t > end_ns_) break;
      q_.pop();
      if (!half_done && e.t >= half_ns_) {
        HalfTime();
        half_done = true;
      }
      switch (e.type) {
        case Ev::kSend: OnSend(e); break;
        case Ev::kWake: OnWake(e); break;
        case Ev::kArrive: OnArrive(e); break;
        case Ev::kDepart: OnDepart(e.t); break;
        case Ev::kCnp: OnCnp(e); break;
        case Ev::kSample: OnSample(e.t, r); break;
      }
    }
    if (!half_done) HalfTime();
    Summarize(r);
  }

 private:
  static sim::EgressPortConfig PortConfigFor(const SimConfig& cfg) {
    sim::EgressPortConfig b;
    b.line_rate_bps = static_cast<uint64_t>(cfg.line_rate_gbps * 1e9 + 0.5);
    b.kmin_bytes = cfg.kmin_bytes;
    b.kmax_bytes = cfg.kmax_bytes;
    b.pmax = cfg.pmax;
    b.ecn = true;  // the switch marks either way; with DCQCN off nobody reacts
    b.buffer_bytes = cfg.buffer_bytes;
    b.mark_at = cfg.mark_on_dequeue ? sim::MarkAt::kDequeue : sim::MarkAt::kEnqueue;
    b.seed = cfg.seed;
    b.stats_bin_bytes = 64;
    return b;
  }

  // Queue statistics cover the second half; counters the whole run.
  void HalfTime() {
    dropped_before_half_ = bn_.dropped_packets();
    marked_before_half_ = bn_.marked_packets();
    max_before_half_ = bn_.max_queue_bytes();
    bn_.ResetStats(half_ns_);
  }

  void Push(uint64_t t, Ev type, int flow, uint64_t gen) {
    q_.push(Event{t, seq_++, type, flow, gen});
  }

  uint64_t RateOf(Sender& s) { return cfg_.dcqcn ? s.rp.current_rate_bps() : line_bps_; }

  void ScheduleSend(int i, uint64_t t) {
    Sender& s = senders_[i];
    s.send_at = t;
    Push(t, Ev::kSend, i, ++s.send_gen);
  }

  // The reaction point may change the rate before the next send (timer T, a
  // pending decrease): wake then so the pacer re-spaces the gap in progress.
  void ScheduleWake(int i) {
    Sender& s = senders_[i];
    if (!cfg_.dcqcn) return;
    const uint64_t d = s.rp.next_deadline_ns();
    if (d < s.send_at && d != s.wake_at) {
      s.wake_at = d;
      Push(d, Ev::kWake, i, 0);
    }
  }

  // After anything that may have changed RC: apply it to the gap in progress.
  void ApplyRate(int i, uint64_t now) {
    Sender& s = senders_[i];
    if (!s.started) return;
    const uint64_t rate = RateOf(s);
    if (rate != s.pacer.rate_bps()) {
      s.pacer.Retime(rate);
      const uint64_t t = std::max(now, s.pacer.next_send_ns());
      if (t != s.send_at) ScheduleSend(i, t);
    }
    ScheduleWake(i);
  }

  void OnSend(const Event& e) {
    Sender& s = senders_[e.flow];
    if (e.gen != s.send_gen) return;
    const uint64_t now = e.t;
    s.started = true;
    if (cfg_.dcqcn) s.rp.Advance(now);
    const uint64_t rate = RateOf(s);
    if (rate != s.pacer.rate_bps()) s.pacer.Retime(rate);
    if (!s.pacer.MaySend(now)) {  // the rate went down since this was scheduled
      ScheduleSend(e.flow, s.pacer.next_send_ns());
      ScheduleWake(e.flow);
      return;
    }
    if (jitter_ns_ == 0) {
      Arrive(e.flow, now);
    } else {
      Push(now + jitter_rng_() % jitter_ns_, Ev::kArrive, e.flow, 0);
    }
    if (cfg_.dcqcn) s.rp.OnBytesSent(frame_, now);
    s.pacer.OnSent(frame_, now, RateOf(s));
    ScheduleSend(e.flow, s.pacer.next_send_ns());
    ScheduleWake(e.flow);
  }

  void OnArrive(const Event& e) { Arrive(e.flow, e.t); }

  void Arrive(int flow, uint64_t now) {
    const bool was_empty = bn_.next_departure_ns() == kNever;
    bn_.Enqueue(frame_, now, static_cast<uint64_t>(flow));
    if (was_empty && bn_.next_departure_ns() != kNever) Push(bn_.next_departure_ns(), Ev::kDepart, -1, 0);
  }

  void OnWake(const Event& e) {
    Sender& s = senders_[e.flow];
    if (e.t != s.wake_at) return;
    s.wake_at = kNever;
    s.rp.Advance(e.t);
    ApplyRate(e.flow, e.t);
  }

  void OnCnp(const Event& e) {
    Sender& s = senders_[e.flow];
    s.rp.OnCnp(e.t);
    ApplyRate(e.flow, e.t);
  }

  void OnDepart(uint64_t now) {
    sim::Departure d;
    while (bn_.Dequeue(now, &d)) {
      Sender& s = senders_[d.tag];
      s.delivered += d.bytes;
      if (d.depart_ns > half_ns_) s.delivered_half += d.bytes;
      // Notification point: at most one CNP per flow per interval.
      if (cfg_.dcqcn && d.ce_marked &&
          (!s.cnp_sent || now - s.last_cnp_ns >= cnp_interval_ns_)) {
        s.cnp_sent = true;
        s.last_cnp_ns = now;
        ++cnps_;
        Push(now + feedback_ns_, Ev::kCnp, static_cast<int>(d.tag), 0);
      }
    }
    if (bn_.next_departure_ns() != kNever) Push(bn_.next_departure_ns(), Ev::kDepart, -1, 0);
  }

  void OnSample(uint64_t now, SimResult* r) {
    r->t_us.push_back(now / 1e3);
    r->queue_bytes.push_back(bn_.queue_bytes(now));
    for (size_t i = 0; i < senders_.size(); ++i) {
      Sender& s = senders_[i];
      const double rc = !s.started ? 0.0 : RateOf(s) / 1e9;
      r->flows[i].rc_gbps.push_back(rc);
      r->flows[i].thr_gbps.push_back(s.delivered * 8.0 / static_cast<double>(sample_ns_));
      s.delivered = 0;
    }
    if (now + sample_ns_ <= end_ns_) Push(now + sample_ns_, Ev::kSample, -1, 0);
  }

  void Summarize(SimResult* r) {
    std::vector<double> half;
    uint64_t total = 0;
    for (const Sender& s : senders_) {
      half.push_back(static_cast<double>(s.delivered_half));
      total += s.delivered_half;
      r->flow_gbps.push_back(s.delivered_half * 8.0 / static_cast<double>(end_ns_ - half_ns_));
    }
    r->jain = Jain(half);
    r->utilization = total * 8.0 / (static_cast<double>(line_bps_) * (end_ns_ - half_ns_) / 1e9);
    r->queue_p50 = bn_.QueuePercentile(0.5, end_ns_);
    r->queue_p99 = bn_.QueuePercentile(0.99, end_ns_);
    r->queue_max = bn_.max_queue_bytes();
    r->queue_max_run = std::max(max_before_half_, bn_.max_queue_bytes());
    r->drops = dropped_before_half_ + bn_.dropped_packets();
    r->drops_2h = bn_.dropped_packets();
    r->marks = marked_before_half_ + bn_.marked_packets();
    r->cnps = cnps_;

    uint64_t from_ns = 0;
    for (const Sender& s : senders_) from_ns = std::max(from_ns, s.start_ns);
    std::vector<std::vector<double>> thr;
    for (const FlowSeries& f : r->flows) thr.push_back(f.thr_gbps);
    const Convergence c = ConvergenceTimes(thr, cfg_.sample_us, from_ns / 1e3, cfg_.conv_window_us,
                                           cfg_.line_rate_gbps / cfg_.senders, 0.10);
    r->converge_ms = c.first_us < 0 ? -1 : c.first_us / 1e3;
    r->stable_ms = c.stable_us < 0 ? -1 : c.stable_us / 1e3;
  }

 private:
  SimConfig cfg_;
  cc::DcqcnParams params_;
  sim::EgressPort bn_;
  std::vector<Sender> senders_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  uint64_t seq_ = 0;
  uint64_t line_bps_ = 0;
  uint32_t frame_ = 0;
  uint64_t end_ns_ = 0, half_ns_ = 0, sample_ns_ = 0, feedback_ns_ = 0, cnp_interval_ns_ = 0;
  uint64_t cnps_ = 0;
  uint64_t jitter_ns_ = 0;
  std::mt19937_64 jitter_rng_;
  uint64_t dropped_before_half_ = 0, marked_before_half_ = 0, max_before_half_ = 0;
};

}  // namespace

double Jain(const std::vector<double>& x) {
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  if (x.empty() || sq == 0) return 1.0;
  return sum * sum / (static_cast<double>(x.size()) * sq);
}

Convergence ConvergenceTimes(const std::vector<std::vector<double>>& thr, double sample_us,
                             double from_us, double window_us, double fair, double tol) {
  Convergence c;
  if (thr.empty()) return c;
  const size_t n = thr[0].size();
  const size_t per = std::max<size_t>(1, static_cast<size_t>(std::llround(window_us / sample_us)));
  const size_t first = static_cast<size_t>(std::ceil(from_us / sample_us - 1e-9));
  if (first >= n) return c;
  const size_t windows = (n - first) / per;
  long last_bad = -1;
  for (size_t w = 0; w < windows; ++w) {
    bool good = true;
    for (const auto& f : thr) {
      double sum = 0;
      for (size_t k = 0; k < per; ++k) sum += f[first + w * per + k];
      const double avg = sum / static_cast<double>(per);
      if (std::fabs(avg - fair) > tol * fair) good = false;
    }
    if (good && c.first_us < 0) c.first_us = static_cast<double>((w + 1) * per) * sample_us;
    if (!good) last_bad = static_cast<long>(w);
  }
  if (windows > 0 && last_bad + 1 < static_cast<long>(windows))
    c.stable_us = static_cast<double>(last_bad + 1) * static_cast<double>(per) * sample_us;
  return c;
}

bool SetKnob(cc::DcqcnParams* p, const std::string& name, double v) {
  if (!(v >= 0) || v != std::floor(v)) return false;
  struct U32 { const char* name; uint32_t cc::DcqcnParams::*field; };
  static constexpr U32 kU32[] = {
      {"rpg_time_reset_us", &cc::DcqcnParams::rpg_time_reset_us},
      {"rpg_threshold", &cc::DcqcnParams::rpg_threshold},
      {"rpg_ai_rate_mbps", &cc::DcqcnParams::rpg_ai_rate_mbps},
      {"rpg_hai_rate_mbps", &cc::DcqcnParams::rpg_hai_rate_mbps},
      {"rpg_gd", &cc::DcqcnParams::rpg_gd},
      {"rpg_min_dec_fac", &cc::DcqcnParams::rpg_min_dec_fac},
      {"rpg_min_rate_mbps", &cc::DcqcnParams::rpg_min_rate_mbps},
      {"rate_to_set_on_first_cnp_mbps", &cc::DcqcnParams::rate_to_set_on_first_cnp_mbps},
      {"rate_reduce_monitor_period_us", &cc::DcqcnParams::rate_reduce_monitor_period_us},
      {"dce_tcp_g", &cc::DcqcnParams::dce_tcp_g},
      {"dce_tcp_rtt_us", &cc::DcqcnParams::dce_tcp_rtt_us},
      {"initial_alpha_value", &cc::DcqcnParams::initial_alpha_value},
      {"min_time_between_cnps_us", &cc::DcqcnParams::min_time_between_cnps_us},
  };
  if (name == "rpg_byte_reset") {
    if (v > 1e15) return false;
    p->rpg_byte_reset = static_cast<uint64_t>(v);
    return true;
  }
  for (const U32& k : kU32) {
    if (name == k.name) {
      if (v > UINT32_MAX) return false;
      p->*k.field = static_cast<uint32_t>(v);
      return true;
    }
  }
  return false;
}

bool RunSim(const SimConfig& cfg, SimResult* out, std::string* error) {
  if (cfg.senders < 1) return *error = "--senders must be >= 1", false;
  if (cfg.line_rate_gbps <= 0) return *error = "--line-rate-gbps must be > 0", false;
  if (cfg.duration_ms <= 0) return *error = "--duration-ms must be > 0", false;
  if (cfg.kmax_bytes < cfg.kmin_bytes) return *error = "--kmax must be >= --kmin", false;
  if (cfg.pmax < 0 || cfg.pmax > 1) return *error = "--pmax must be in [0, 1]", false;
  if (cfg.sample_us <= 0 || cfg.conv_window_us < cfg.sample_us)
    return *error = "--sample-us must be > 0 and <= --conv-window-us", false;
  if (cfg.jitter_ns < 0) return *error = "--jitter-ns must be >= 0", false;
  if (cfg.late_join_ms >= cfg.duration_ms) return *error = "--late-join-ms must be < --duration-ms", false;
  const uint64_t line = static_cast<uint64_t>(cfg.line_rate_gbps * 1e9 + 0.5);
  cc::DcqcnParams p;
  if (cfg.profile == "paper") {
    p = cc::PaperProfile(line);
  } else if (cfg.profile == "mlx5") {
    p = cc::Mlx5Profile(line);
  } else {
    return *error = "--profile must be paper or mlx5", false;
  }
  for (const auto& [name, value] : cfg.overrides) {
    if (!SetKnob(&p, name, value)) return *error = "--set: no knob " + name + " taking " + std::to_string(value), false;
  }
  Simulation sim(cfg, p);
  *out = SimResult{};
  sim.Run(out);
  return true;
}

std::string SummaryLine(const SimConfig& cfg, const SimResult& r) {
  char conv[32] = "never", stable[32] = "never";
  if (r.converge_ms >= 0) std::snprintf(conv, sizeof conv, "%.3f", r.converge_ms);
  if (r.stable_ms >= 0) std::snprintf(stable, sizeof stable, "%.3f", r.stable_ms);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "senders=%d profile=%s rate_gbps=%g dcqcn=%s late_join_ms=%g duration_ms=%g "
                "kmin=%llu kmax=%llu pmax=%g buffer=%llu "
                "jain=%.4f converge_ms=%s stable_ms=%s queue_p50=%llu queue_p99=%llu queue_max=%llu "
                "queue_max_run=%llu drops=%llu drops_2h=%llu cnps=%llu marks=%llu util=%.4f flow_gbps=",
                cfg.senders, cfg.profile.c_str(), cfg.line_rate_gbps, cfg.dcqcn ? "on" : "off",
                cfg.late_join_ms, cfg.duration_ms, static_cast<unsigned long long>(cfg.kmin_bytes),
                static_cast<unsigned long long>(cfg.kmax_bytes), cfg.pmax,
                static_cast<unsigned long long>(cfg.buffer_bytes), r.jain,
                conv, stable,
                static_cast<unsigned long long>(r.queue_p50),
                static_cast<unsigned long long>(r.queue_p99),
                static_cast<unsigned long long>(r.queue_max),
                static_cast<unsigned long long>(r.queue_max_run),
                static_cast<unsigned long long>(r.drops),
                static_cast<unsigned long long>(r.drops_2h), static_cast<unsigned long long>(r.cnps),
                static_cast<unsigned long long>(r.marks), r.utilization);
  std::ostringstream os;
  os << "set=";
  if (cfg.overrides.empty()) os << "none";
  for (size_t i = 0; i < cfg.overrides.size(); ++i) {
    os << (i ? "+" : "") << cfg.overrides[i].first << ':' << static_cast<unsigned long long>(cfg.overrides[i].second);
  }
  os << ' ' << buf;
  for (size_t i = 0; i < r.flow_gbps.size(); ++i) {
    char f[32];
    std::snprintf(f, sizeof f, "%s%.3f", i ? "," : "", r.flow_gbps[i]);
    os << f;
  }
  return os.str();
}

bool WriteCsv(const SimResult& r, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "t_us,queue_bytes");
  for (size_t i = 0; i < r.flows.size(); ++i) std::fprintf(f, ",rc_gbps_%zu", i);
  for (size_t i = 0; i < r.flows.size(); ++i) std::fprintf(f, ",thr_gbps_%zu", i);
  std::fprintf(f, "\n");
  for (size_t s = 0; s < r.t_us.size(); ++s) {
    std::fprintf(f, "%.1f,%llu", r.t_us[s], static_cast<unsigned long long>(r.queue_bytes[s]));
    for (const FlowSeries& fl : r.flows) std::fprintf(f, ",%.4f", fl.rc_gbps[s]);
    for (const FlowSeries& fl : r.flows) std::fprintf(f, ",%.4f", fl.thr_gbps[s]);
    std::fprintf(f, "\n");
  }
  return std::fclose(f) == 0;
}

}  // namespace droce::ccsim
