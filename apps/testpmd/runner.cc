#include "apps/testpmd/runner.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"

namespace droce::testpmd {
namespace {

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

int EngineIndex(const Engine* e) {
  const auto& all = AllEngines();
  return static_cast<int>(std::find(all.begin(), all.end(), e) - all.begin());
}

void SleepUs(long us) {
  const timespec ts{0, us * 1000};
  nanosleep(&ts, nullptr);
}

}  // namespace

uint64_t Runner::Deadline(uint64_t start) const {
  // Interactive runs without --duration/--iterations go on until stop.
  if (opt_.interactive && !opt_.duration_set) return UINT64_MAX;
  return start + static_cast<uint64_t>(opt_.duration * 1e9);
}

// The result line: one fputs, so a line printed by the dataplane thread never
// interleaves with the prompt's output.
int Runner::Report(const Engine* engine, double secs) {
  Stats& st = s_.stats;
  if (secs <= 0) secs = 1e-9;
  // At the prompt, a run that ended by itself prints after "droce> ": start a line.
  std::string line = opt_.interactive && !s_.StopRequested() ? "\n" : "";
  line += absl::StrFormat(
      "%s %s: messages=%u bytes=%u seconds=%.3f gbps=%.3f mmsgps=%.4f errors=%u verify_failures=%u",
      opt_.role, engine->name, st.messages, st.bytes, secs, st.bytes * 8 / secs / 1e9, st.messages / secs / 1e6,
      st.errors, st.verify_failures);
  if (!st.latencies_us.empty()) {
    absl::StrAppendFormat(&line, " lat_us_p50=%.2f p99=%.2f p999=%.2f", Percentile(st.latencies_us, 0.5),
                          Percentile(st.latencies_us, 0.99), Percentile(st.latencies_us, 0.999));
  }
  const bool raw = opt_.fwd.rfind("raw_", 0) == 0 && !connected();
  transport::QpCounters qc;
  for (uint32_t q : s_.qpns) {
    const auto& c = s_.dev->qp(q)->counters();
    qc.retransmitted_packets += c.retransmitted_packets;
    qc.timeouts += c.timeouts;
    qc.naks_received += c.naks_received;
    qc.rnr_naks_received += c.rnr_naks_received;
    qc.cnps_sent += c.cnps_sent;
    qc.cnps_received += c.cnps_received;
    qc.ce_marked_received += c.ce_marked_received;
  }
  absl::StrAppendFormat(&line, " retransmitted=%u timeouts=%u naks_rx=%u rnr_rx=%u dropped_on_purpose=%u captured=%u",
                        qc.retransmitted_packets, qc.timeouts, qc.naks_received, qc.rnr_naks_received, tap_.dropped(),
                        tap_.captured());
  // Congestion control: CNPs both ways, the first QP's reaction point, the bottleneck.
  absl::StrAppendFormat(&line, " ce_rx=%u cnps_tx=%u cnps_rx=%u", qc.ce_marked_received, qc.cnps_sent,
                        qc.cnps_received);
  if (const cc::ReactionPoint* rp = s_.dev->qp(s_.qpn)->reaction_point()) {
    absl::StrAppendFormat(&line, " rc_gbps=%.3f rt_gbps=%.3f alpha=%.4f", rp->current_rate_bps() / 1e9,
                          rp->target_rate_bps() / 1e9, rp->alpha());
  }
  if (bottleneck_) {
    const auto& b = bottleneck_->counters();
    absl::StrAppendFormat(&line, " cp_marked=%u cp_dropped=%u cp_port_refused=%u cp_queue_max_kb=%.1f", b.ce_marked,
                          b.dropped, b.port_refused, bottleneck_->port().max_queue_bytes() / 1e3);
  }
  if (!raw) {
    // Heap bytes each QP's creation left allocated (alloc_meter.h): data QP 0,
    // and all QPs with the control QP.
    uint64_t total = 0;
    for (uint64_t b : s_.qp_memory) total += b;
    absl::StrAppendFormat(&line, " qp_memory_bytes=%u qp_memory_total_bytes=%u", s_.qp_memory.front(), total);
  }
  line += "\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  return (st.errors == 0 && st.verify_failures == 0 && st.messages > 0) ? 0 : 1;
}

int Runner::ClientRun(const Engine* engine) {
  if (!connected()) {
    if (absl::Status st = s_.Connect(); !st.ok()) {
      std::fprintf(stderr, "droce-testpmd: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    connected_.store(true, std::memory_order_release);
  }
  const uint64_t start_at = static_cast<uint64_t>(opt_.start_at * 1e9);
  while (s_.NowNs() < start_at && !s_.StopRequested()) s_.Progress();  // idle: it yields the CPU
  s_.stats = Stats{};
  s_.SendCtrl(CtrlType::kStart, static_cast<uint64_t>(EngineIndex(engine)));
  CtrlMsg ready;
  // Not stoppable: once asked, the server runs until it gets a bye.
  if (!s_.WaitCtrl(CtrlType::kReady, s_.NowNs() + 30'000'000'000ull, &ready)) {
    std::fprintf(stderr, "droce-testpmd: the server did not get ready for %s\n", engine->name);
    return 1;
  }
  s_.set_running(true);
  const uint64_t start = s_.NowNs();
  engine->client(s_, Deadline(start));
  const double secs = double(s_.NowNs() - start) / 1e9;
  s_.set_running(false);
  return Report(engine, secs);
}

void Runner::ClientFinish() {
  if (connected()) s_.SendCtrl(CtrlType::kQuit, 0);
  // Let the last ACKs, the bye and the quit drain before the port goes away:
  // until no QP has anything unacknowledged (or 2 s).
  queue::Completion wc[64];
  const uint64_t until = s_.NowNs() + 2'000'000'000ull;
  const uint64_t at_least = s_.NowNs() + 50'000'000ull;
  while (connected() && s_.NowNs() < until) {
    s_.Progress();
    s_.PollCompletions(wc, 64);
    bool busy = s_.dev->qp(s_.ctrl_qpn)->HasWork();
    for (uint32_t q : s_.qpns) busy |= s_.dev->qp(q)->HasWork();
    if (!busy && s_.NowNs() >= at_least) break;
  }
}

int Runner::Serve() {
  if (absl::Status st = s_.Connect(); !st.ok()) {
    std::fprintf(stderr, "droce-testpmd: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  connected_.store(true, std::memory_order_release);
  int status = 0, runs = 0;
  queue::Completion wc[64];
  uint64_t link_down_since = 0;
  for (;;) {
    // Wait for the client's start (or quit).
    while (!s_.HasCtrl(CtrlType::kStart) && !s_.HasCtrl(CtrlType::kQuit) && !s_.StopRequested()) {
      s_.Progress();
      const uint32_t n = s_.PollCompletions(wc, 64);
      for (uint32_t i = 0; i < n; ++i) s_.stats.errors += wc[i].status != queue::WcStatus::kSuccess;
      const uint64_t now = s_.NowNs();
      if (s_.port->LinkUp()) {
        link_down_since = 0;
      } else if (link_down_since == 0) {
        link_down_since = now;
      } else if (now - link_down_since > 2'000'000'000ull) {
        std::fprintf(stderr, "droce-testpmd: the link went down; the client is gone\n");
        return 1;
      }
    }
    if (!s_.HasCtrl(CtrlType::kStart)) break;  // quit or stop
    const CtrlMsg start = s_.TakeCtrl(CtrlType::kStart);
    if (start.value >= AllEngines().size()) {
      std::fprintf(stderr, "droce-testpmd: the client asked for unknown engine %llu\n",
                   (unsigned long long)start.value);
      return 1;
    }
    const Engine* engine = AllEngines()[start.value];
    s_.stats = Stats{};
    if (engine->prepare) engine->prepare(s_);
    s_.SendCtrl(CtrlType::kReady, 0);
    s_.set_running(true);
    const uint64_t t0 = s_.NowNs();
    engine->server(s_);
    const double secs = double(s_.NowNs() - t0) / 1e9;
    s_.set_running(false);
    status |= Report(engine, secs);
    ++runs;
  }
  // Let the ACK of the quit leave.
  const uint64_t until = s_.NowNs() + 100'000'000ull;
  while (s_.NowNs() < until) {
    s_.Progress();
    s_.PollCompletions(wc, 64);
  }
  return runs > 0 ? status : 1;
}

int Runner::RawRun(const Engine* engine) {
  s_.stats = Stats{};
  s_.set_running(true);
  const uint64_t start = s_.NowNs();
  if (opt_.role == "client") {
    engine->client(s_, Deadline(start));
  } else {
    engine->server(s_);
  }
  const double secs = double(s_.NowNs() - start) / 1e9;
  s_.set_running(false);
  // Give the peer a moment to drain the ring (and the end marker in it)
  // before this side's port goes away; memif takes its rings along.
  if (opt_.role == "client") SleepUs(200'000);
  return Report(engine, secs);
}

Dataplane::Dataplane(Runner& runner, Session& s, bool server) : runner_(runner), s_(s), server_(server) {
  thread_ = std::thread([this] { Loop(); });
}

Dataplane::~Dataplane() { Quit(); }

void Dataplane::Loop() {
  if (server_) {
    running_.store(true, std::memory_order_release);
    const bool raw = s_.opt.fwd.rfind("raw_", 0) == 0;
    status_.store(raw ? runner_.RawRun(FindEngine(s_.opt.fwd)) : runner_.Serve());
    running_.store(false, std::memory_order_release);
    return;
  }
  while (!quit_.load(std::memory_order_acquire)) {
    const int index = pending_.exchange(-1, std::memory_order_acq_rel);
    if (index >= 0) {
      const Engine* e = AllEngines()[index];
      const bool raw = std::string(e->name).rfind("raw_", 0) == 0;
      if ((raw ? runner_.RawRun(e) : runner_.ClientRun(e)) != 0) status_.store(1);
      running_.store(false, std::memory_order_release);
      runs_done_.fetch_add(1, std::memory_order_release);
      continue;
    }
    // Idle between runs: keep the device answering (ACKs, ARP/ND) and
    // serve the prompt's snapshots.
    if (runner_.connected()) {
      queue::Completion wc[64];
      const uint32_t work = s_.Progress();
      s_.PollCompletions(wc, 64);
      if (work == 0) SleepUs(200);
    } else {
      s_.ServeRequests();
      SleepUs(200);
    }
  }
  runner_.ClientFinish();
}

bool Dataplane::Start(int index) {
  if (server_ || running()) return false;
  ever_started_.store(true, std::memory_order_release);
  running_.store(true, std::memory_order_release);
  pending_.store(index, std::memory_order_release);
  return true;
}

bool Dataplane::Stop() {
  if (!running()) return false;
  s_.RequestStop(true);
  while (running()) SleepUs(1000);
  s_.RequestStop(false);
  return true;
}

int Dataplane::Quit() {
  if (joined_) return status_.load();
  if (server_) {
    s_.RequestStop(true);
  } else {
    Stop();
  }
  quit_.store(true, std::memory_order_release);
  thread_.join();
  joined_ = true;
  return status_.load();
}

}  // namespace droce::testpmd
