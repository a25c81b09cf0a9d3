#include "apps/testpmd/session.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/connect.h"

namespace droce::testpmd {

void FillPattern(uint8_t* p, uint32_t n, uint64_t seq) {
  uint64_t x = seq * 0x9E3779B97F4A7C15ull + 1;
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = i == 0 ? seq : (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(seq + i);
}

bool CheckPattern(const uint8_t* p, uint32_t n, uint64_t seq) {
  std::vector<uint8_t> want(n);
  FillPattern(want.data(), n, seq);
  return std::memcmp(p, want.data(), n) == 0;
}

Session::Session(const Options& o, ethdev::EthdevPort* p, pktio::BurstIo* io) : opt(o), port(p) {
  core::DeviceConfig cfg;
  cfg.mac = o.mac;
  cfg.ipv4 = o.ip;
  if (o.dcqcn != "off") {
    const uint64_t line = static_cast<uint64_t>(o.line_rate_gbps * 1e9);
    cfg.dcqcn = true;
    cfg.dcqcn_params = o.dcqcn == "paper" ? cc::PaperProfile(line) : cc::Mlx5Profile(line);
    cfg.min_time_between_cnps_ns = uint64_t{cfg.dcqcn_params.min_time_between_cnps_us} * 1000;
  }
  dev = std::make_unique<core::Device>(cfg, io);
  core::Gid peer{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  wire::StoreBe32(peer.data() + 12, o.peer_ip);
  if (o.peer_mac_static) dev->AddNeighbor(peer, o.peer_mac);  // else ARP in Connect()
  pd = dev->AllocPd();
  cq = *dev->CreateCq(8192);
  core::QpInitAttr init;
  init.pd = pd;
  init.send_cq = init.recv_cq = cq;
  // Queues sized to the share of the outstanding window each QP carries.
  const uint32_t per_qp = std::clamp<uint32_t>(2 * o.outstanding / o.qps + 8, 16, 2048);
  init.caps.max_send_wr = per_qp;
  init.caps.max_recv_wr = per_qp;
  for (uint32_t i = 0; i < o.qps; ++i) qpns.push_back(*dev->CreateQp(init));
  qpn = qpns.front();
  buf.assign(uint64_t{o.outstanding} * o.size + 4096, 0);
  va = reinterpret_cast<uint64_t>(buf.data());
  keys = *dev->RegMr(pd, buf.data(), buf.size(), va,
                     mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
}

uint64_t Session::NowNs() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void Session::MaybePrintStats(uint64_t now) {
  if (opt.stats_period <= 0) return;
  if (next_stats_ns_ == 0) {
    next_stats_ns_ = now + static_cast<uint64_t>(opt.stats_period * 1e9);
    last_stats_ns_ = now;
    return;
  }
  if (now < next_stats_ns_) return;
  const double secs = double(now - last_stats_ns_) / 1e9;
  const core::DeviceCounters& c = dev->counters();
  std::printf("stats %s: messages=%llu interval_gbps=%.3f rx_packets=%llu tx_packets=%llu rx_bad_icrc=%llu\n",
              opt.role.c_str(), (unsigned long long)stats.messages,
              double(stats.bytes - last_stats_bytes_) * 8 / secs / 1e9, (unsigned long long)c.rx_packets,
              (unsigned long long)c.tx_packets, (unsigned long long)c.rx_bad_icrc());
  std::fflush(stdout);
  last_stats_bytes_ = stats.bytes;
  last_stats_ns_ = now;
  next_stats_ns_ = now + static_cast<uint64_t>(opt.stats_period * 1e9);
}

uint32_t Session::Progress() {
  const uint64_t now = NowNs();
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

void Session::PostCtrlRecv() {
  const uint64_t id = ctrl_recv_id_++;
  transport::RecvWr r;
  r.wr_id = kCtrlWrIdBase + id;
  r.num_sge = 1;
  r.sg_list[0] = {va + ctrl_offset() + 2048 + (id % 8) * 64, 64, keys.lkey};
  (void)dev->PostRecv(qpn, r);
}

void Session::SendCtrl(CtrlType type, uint64_t value) {
  CtrlMsg m{kCtrlMagic, static_cast<uint32_t>(type), keys.rkey, va, value};
  std::memcpy(buf.data() + ctrl_offset(), &m, sizeof m);
  transport::SendWr wr;
  wr.wr_id = kCtrlWrIdBase - 1;
  wr.opcode = transport::WrOpcode::kSend;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {va + ctrl_offset(), sizeof m, keys.lkey};
  (void)dev->PostSend(qpn, wr);
}

uint32_t Session::PollCompletions(queue::Completion* out, uint32_t n) {
  queue::Completion wc[64];
  const uint32_t got = dev->PollCq(cq, wc, n < 64 ? n : 64);
  uint32_t k = 0;
  for (uint32_t i = 0; i < got; ++i) {
    if (wc[i].wr_id >= kCtrlWrIdBase - 1) {
      if (wc[i].status != queue::WcStatus::kSuccess) {
        ++stats.errors;
        continue;
      }
      if (wc[i].opcode == queue::WcOpcode::kRecv) {
        CtrlMsg m;
        std::memcpy(&m, buf.data() + ctrl_offset() + 2048 + ((wc[i].wr_id - kCtrlWrIdBase) % 8) * 64, sizeof m);
        if (m.magic == kCtrlMagic) ctrl_inbox.push_back(m);
      }
      continue;
    }
    out[k++] = wc[i];
  }
  return k;
}

bool Session::WaitCtrl(CtrlType type, uint64_t deadline_ns, CtrlMsg* out) {
  queue::Completion wc[64];
  while (NowNs() < deadline_ns) {
    for (size_t i = 0; i < ctrl_inbox.size(); ++i) {
      if (ctrl_inbox[i].type == static_cast<uint32_t>(type)) {
        *out = ctrl_inbox[i];
        ctrl_inbox.erase(ctrl_inbox.begin() + i);
        return true;
      }
    }
    Progress();
    const uint32_t n = PollCompletions(wc, 64);
    stats.errors += n;  // nothing else is expected while waiting for control
  }
  return false;
}

absl::Status Session::Connect() {
  // Resolve the peer by ARP. This also waits for it: a peer that is not
  // running yet does not answer, and no QP burns its retries into the void
  // (af_packet's link is up long before the far end listens).
  core::Gid peer{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  wire::StoreBe32(peer.data() + 12, opt.peer_ip);
  const uint64_t arp_deadline = NowNs() + 30'000'000'000ull;
  for (uint64_t next_request = 0; !dev->HasNeighbor(peer);) {
    const uint64_t now = NowNs();
    if (now >= arp_deadline) return absl::DeadlineExceededError("the peer did not answer ARP within 30 s");
    if (now >= next_request) {
      dev->RequestArp(opt.peer_ip);
      next_request = now + 100'000'000;
    }
    Progress();
  }
  core::ConnectParams c;
  c.peer_gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  wire::StoreBe32(c.peer_gid.data() + 12, opt.peer_ip);
  c.peer_mac_known = false;  // the static neighbour entry
  c.mtu = opt.mtu;
  c.timeout = 14;  // 67 ms
  absl::Status st;
  for (uint32_t i = 0; i < qpns.size() && st.ok(); ++i) {
    c.peer_qpn = core::Device::kFirstQpn + i;  // both sides create the same QPs: numbers agree
    st = core::ConnectQp(*dev, qpns[i], c);
  }
  if (!st.ok()) return st;
  // Exactly one receive for the peer's hello: after it, receives belong to
  // the engine (send_bw's data receives also take the client's bye).
  PostCtrlRecv();
  SendCtrl(CtrlType::kHello, 0);
  CtrlMsg hello;
  if (!WaitCtrl(CtrlType::kHello, NowNs() + 30'000'000'000ull, &hello)) {
    return absl::DeadlineExceededError("no hello from the peer within 30 s");
  }
  peer_va = hello.va;
  peer_rkey = hello.rkey;
  return absl::OkStatus();
}

}  // namespace droce::testpmd
