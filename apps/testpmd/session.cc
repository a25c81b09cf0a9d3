#include "apps/testpmd/session.h"

#include <arpa/inet.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "apps/testpmd/alloc_meter.h"
#include "core/connect.h"
#include "wire/gid.h"

namespace droce::testpmd {

Session::Session(const Options& o, ethdev::EthdevPort* p, pktio::BurstIo* io) : opt(o), port(p) {
  core::DeviceConfig cfg;
  cfg.mac = o.mac;
  if (core::IsIpv4MappedGid(o.ip)) {
    cfg.ipv4 = wire::LoadBe32(o.ip.data() + 12);
  } else {
    cfg.has_ipv6_global = true;
    cfg.ipv6_global = o.ip;
  }
  cfg.dscp = o.dscp;
  cfg.ecn = o.ecn;
  cfg.vlan = o.vlan >= 0;
  cfg.vlan_tci = static_cast<uint16_t>((o.pcp << 13) | (o.vlan > 0 ? o.vlan : 0));
  cfg.max_qp = o.qps + 1;  // the data QPs and the control QP
  // Both ends derive the peer's QPNs (Connect): a fixed base, not the
  // random one a verbs program gets (on the fabric: the range asked for).
  cfg.qpn_base = o.qpn_base;
  if (o.dcqcn != "off") {
    const uint64_t line = static_cast<uint64_t>(o.line_rate_gbps * 1e9);
    cfg.dcqcn = true;
    cfg.dcqcn_params = o.dcqcn == "paper" ? cc::PaperProfile(line) : cc::Mlx5Profile(line);
    cfg.min_time_between_cnps_ns = uint64_t{cfg.dcqcn_params.min_time_between_cnps_us} * 1000;
  }
  if (o.cc != "none") {  // main() checked it
    cfg.cc = *cc::ParseConfig(o.cc, o.cc_params, static_cast<uint64_t>(o.line_rate_gbps * 1e9));
    cfg.cc_line_rate_bps = static_cast<uint64_t>(o.line_rate_gbps * 1e9);
    double cnp_us = 0;
    if (cc::GetParam(cfg.cc, "min_time_between_cnps_us", &cnp_us)) {
      cfg.min_time_between_cnps_ns = static_cast<uint64_t>(cnp_us) * 1000;
    }
  }
  dev = std::make_unique<core::Device>(cfg, io);
  // On the fabric the device's other QPNs live in other processes: only
  // frames for our own range turn around inside the process.
  if (!o.device.empty()) dev->loopback().SetOwnQpns(dev->qpn_base(), cfg.max_qp);
  for (uint32_t i = 0; i < dev->gids().size(); ++i) {
    if (dev->gids()[i] == o.ip) sgid_index = static_cast<uint8_t>(i);
  }
  peer_gid = o.peer_ip;
  if (o.peer_mac_static) dev->AddNeighbor(peer_gid, o.peer_mac);  // else ARP/ND in Connect()
  pd = dev->AllocPd();
  cq = *dev->CreateCq(8192);
  core::QpInitAttr init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  // Queues sized to the share of the outstanding window each QP carries.
  const uint32_t per_qp = std::clamp<uint32_t>(2 * o.outstanding / o.qps + 8, 16, 2048);
  init.caps.max_send_wr = per_qp;
  init.caps.max_recv_wr = per_qp;
  auto create = [&](const core::QpInitAttr& a) {
    AllocMeter meter;  // everything the QP allocates happens at creation
    const uint32_t q = *dev->CreateQp(a);
    qp_memory.push_back(static_cast<uint64_t>(std::max<int64_t>(meter.bytes(), 0)));
    return q;
  };
  for (uint32_t i = 0; i < o.qps; ++i) qpns.push_back(create(init));
  qpn = qpns.front();
  init.caps.max_send_wr = init.caps.max_recv_wr = 2 * kCtrlRecvs;
  ctrl_qpn = create(init);
  snapshot_.qps.resize(qpns.size() + 1);  // filled in place by the owner: no allocation then
  const uint64_t ctrl_offset = uint64_t{o.outstanding} * o.size;
  buf.assign(ctrl_offset + kCtrlAreaBytes, 0);
  va = reinterpret_cast<uint64_t>(buf.data());
  keys = *dev->RegMr(pd, buf.data(), buf.size(), va,
                     mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
  ctrl_.emplace(*dev, ctrl_qpn, buf.data() + ctrl_offset, va + ctrl_offset, keys.lkey, keys.rkey, va);
}

uint64_t Session::NowNs() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void Session::MaybePrintStats(uint64_t now) {
  if (opt.stats_period <= 0 || !running_.load(std::memory_order_relaxed)) {
    next_stats_ns_ = 0;
    return;
  }
  if (next_stats_ns_ == 0) {
    next_stats_ns_ = now + static_cast<uint64_t>(opt.stats_period * 1e9);
    last_stats_ns_ = now;
    last_stats_bytes_ = stats.bytes;
    return;
  }
  if (now < next_stats_ns_) return;
  const double secs = double(now - last_stats_ns_) / 1e9;
  const core::DeviceCounters& c = dev->counters();
  // t_s is CLOCK_MONOTONIC, so the lines of several processes (and other
  // samplers on the host) share one time axis; the cc fields are the first
  // data QP's (rate 0: not rate limited, window 0: no window).
  const transport::Qp* q = dev->qp(qpn);
  const cc::Output& cc_out = q->congestion_control().output();
  const cc::Stats& cc_st = q->congestion_control().stats();
  std::printf("stats %s: t_s=%.6f messages=%llu interval_gbps=%.3f rx_packets=%llu tx_packets=%llu rx_bad_icrc=%llu "
              "cc_rate_gbps=%.4f cc_window=%u rtt_us=%.1f min_rtt_us=%.1f cnps_rx=%llu retransmitted=%llu\n",
              opt.role.c_str(), double(now) / 1e9, (unsigned long long)stats.messages,
              double(stats.bytes - last_stats_bytes_) * 8 / secs / 1e9, (unsigned long long)c.rx_packets,
              (unsigned long long)c.tx_packets, (unsigned long long)c.rx_bad_icrc(),
              cc_out.rate_limited ? double(cc_out.rate_bps) / 1e9 : 0.0, cc_out.window_packets,
              double(cc_st.last_rtt_ns) / 1e3, double(cc_st.min_rtt_ns) / 1e3,
              (unsigned long long)q->counters().cnps_received,
              (unsigned long long)q->counters().retransmitted_packets);
  std::fflush(stdout);
  last_stats_bytes_ = stats.bytes;
  last_stats_ns_ = now;
  next_stats_ns_ = now + static_cast<uint64_t>(opt.stats_period * 1e9);
}

uint32_t Session::Progress() {
  const uint64_t now = NowNs();
  ServeRequests();
  MaybePrintStats(now);
  const uint32_t work = dev->Poll(now);
  if (work > 0) {
    idle_ = 0;
  } else if (++idle_ > opt.idle_spins) {
    // Idle: give the core away (two pollers share two cores here) and
    // re-check the link so a vanished peer stops the port being polled.
    port->RefreshLink();
    sched_yield();
  }
  return work;
}

bool Session::RequestSnapshot(Snapshot* out, int timeout_ms) {
  std::lock_guard<std::mutex> lock(mu_);  // requesters only: the owner never takes it
  want_snapshot_ = true;
  const uint64_t req = requests_.fetch_add(1, std::memory_order_release) + 1;
  for (int waited_us = 0; waited_us < timeout_ms * 1000; waited_us += 100) {
    if (served_.load(std::memory_order_acquire) >= req) {
      *out = snapshot_;
      return true;
    }
    const timespec ts{0, 100'000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

void Session::RequestClearStats() {
  std::lock_guard<std::mutex> lock(mu_);
  want_clear_ = true;
  requests_.fetch_add(1, std::memory_order_release);
}

// The owner's side of the handshake (want_* are written before the requester's
// release increment and read after this acquire load).
void Session::ServeSlow() {
  const uint64_t req = requests_.load(std::memory_order_acquire);
  if (want_clear_) {
    stats.messages = stats.bytes = stats.errors = stats.verify_failures = 0;
    stats.latencies_us.clear();
    want_clear_ = false;
  }
  if (want_snapshot_) {
    Snapshot& s = snapshot_;
    s.link_up = port->LinkUp();
    s.port = port->stats();
    s.dev = dev->counters();
    for (size_t i = 0; i < s.qps.size(); ++i) {
      const uint32_t q = i < qpns.size() ? qpns[i] : ctrl_qpn;
      const transport::Qp* qp = dev->qp(q);
      s.qps[i].qpn = q;
      s.qps[i].state = qp->state();
      s.qps[i].counters = qp->counters();
      s.qps[i].memory_bytes = qp_memory[i];
      s.qps[i].control = q == ctrl_qpn;
      s.qps[i].cc_name = qp->congestion_control().name();
      s.qps[i].cc_output = qp->congestion_control().output();
      s.qps[i].cc_stats = qp->congestion_control().stats();
    }
    s.running = running_.load(std::memory_order_relaxed);
    s.messages = stats.messages;
    s.bytes = stats.bytes;
    s.errors = stats.errors;
    s.verify_failures = stats.verify_failures;
    want_snapshot_ = false;
  }
  served_.store(req, std::memory_order_release);
}

void Session::SendCtrl(CtrlType type, uint64_t value) { ctrl_->Send(type, value); }

uint32_t Session::PollCompletions(queue::Completion* out, uint32_t n) {
  queue::Completion wc[64];
  const uint32_t got = dev->PollCq(cq, wc, n < 64 ? n : 64);
  uint32_t k = 0;
  for (uint32_t i = 0; i < got; ++i) {
    if (!ctrl_->Consume(wc[i], &stats.errors)) out[k++] = wc[i];
  }
  return k;
}

bool Session::HasCtrl(CtrlType type) const { return ctrl_->Has(type); }

CtrlMsg Session::TakeCtrl(CtrlType type) { return ctrl_->Take(type); }

bool Session::WaitCtrl(CtrlType type, uint64_t deadline_ns, CtrlMsg* out) {
  queue::Completion wc[64];
  while (NowNs() < deadline_ns) {
    if (HasCtrl(type)) {
      *out = TakeCtrl(type);
      return true;
    }
    Progress();
    const uint32_t n = PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) {
      // Between runs only a send_bw receive flushed by an error may show up.
      stats.errors += wc[i].status != queue::WcStatus::kSuccess;
    }
  }
  return false;
}

absl::Status Session::Connect() {
  // Resolve the peer by ARP (IPv4) or neighbour discovery (IPv6). This also
  // waits for it: a peer that is not running yet does not answer, and no QP
  // burns its retries into the void (af_packet's link is up long before the
  // far end listens).
  const uint64_t resolve_deadline = NowNs() + 30'000'000'000ull;
  for (uint64_t next_request = 0; !dev->HasNeighbor(peer_gid);) {
    const uint64_t now = NowNs();
    if (StopRequested()) return absl::CancelledError("stopped while resolving the peer");
    if (now >= resolve_deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "the peer %s did not answer %s within 30 s", wire::GidAddressText(peer_gid),
          core::IsIpv4MappedGid(peer_gid) ? "ARP" : "neighbour solicitations"));
    }
    if (now >= next_request) {
      dev->RequestNeighbor(peer_gid);
      next_request = now + 100'000'000;
    }
    Progress();
  }
  core::ConnectParams c;
  c.peer_gid = peer_gid;
  c.sgid_index = sgid_index;
  c.peer_mac_known = false;  // the neighbour table
  c.mtu = opt.mtu;
  c.timeout = 14;  // 67 ms
  // Both sides create the same QPs in the same order: numbers agree.
  for (uint32_t i = 0; i < qpns.size(); ++i) {
    c.peer_qpn = opt.peer_qpn_base + i;
    if (absl::Status st = core::ConnectQp(*dev, qpns[i], c); !st.ok()) return st;
  }
  c.peer_qpn = opt.peer_qpn_base + static_cast<uint32_t>(qpns.size());
  // On the fabric the link is up as soon as droced is: until the peer has
  // attached, the switch drops our hello (rx_no_owner) and the control QP
  // runs out of retries; the channel starts it over (control_channel.h).
  const RunShape own_shape{opt.mtu, opt.outstanding, opt.size};
  if (absl::Status st = ctrl_->StartHello(c, EncodeRunShape(own_shape)); !st.ok()) return st;
  const uint64_t deadline = NowNs() + 30'000'000'000ull;
  queue::Completion wc[64];
  for (;;) {
    absl::StatusOr<bool> done = ctrl_->HelloDone();
    if (!done.ok()) return done.status();
    if (*done) break;
    if (NowNs() >= deadline) {
      return absl::DeadlineExceededError(ctrl_->have_peer_hello()
                                             ? "the peer did not acknowledge this side's hello within 30 s"
                                             : "no hello from the peer within 30 s");
    }
    Progress();
    const uint32_t n = PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) stats.errors += wc[i].status != queue::WcStatus::kSuccess;
  }
  const CtrlMsg& hello = ctrl_->peer_hello();
  // A mismatch is an error here rather than failed transfers or failed
  // verification later (RunShape).
  if (const std::string differ = RunShapeMismatch(own_shape, DecodeRunShape(hello.value)); !differ.empty()) {
    // The peer's hello may still need our ACK (a lost one is answered when
    // it comes again): give it a second, so that the peer can say the same
    // instead of timing out.
    for (const uint64_t until = NowNs() + 1'000'000'000; NowNs() < until;) Progress();
    return absl::FailedPreconditionError(differ);
  }
  peer_va = hello.va;
  peer_rkey = hello.rkey;
  return absl::OkStatus();
}

}  // namespace droce::testpmd
