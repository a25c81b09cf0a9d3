// The models behind host_model.h: a core::Device on a burst port fed by the
// simulator, and sim::EgressPort holding the frames it queues.
#include "sim/ns3/host_model.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "core/connect.h"
#include "core/device.h"
#include "sim/switch/egress_port.h"
#include "sim/switch/egress_port_io.h"

namespace droce::ns3glue {
namespace {

using pktio::Frame;
using pktio::kMaxFrameBytes;

// The device's port: frames the simulator delivered wait in a ring for
// RxBurst; transmitted frames go to the TransmitFn at once, as many as the
// link takes. Buffers come from one pool allocated up front.
class LinkIo final : public pktio::BurstIo {
 public:
  LinkIo(TransmitFn tx, void* ctx, HostCounters* counters)
      : tx_(tx), ctx_(ctx), counters_(counters), storage_(new uint8_t[size_t{kPoolFrames} * kMaxFrameBytes]) {
    free_.reserve(kPoolFrames);
    for (uint32_t i = kPoolFrames; i-- > 0;) free_.push_back(i);
    rx_.resize(kRxRing);
  }

  // Copies a delivered frame into the receive ring (dropped when the ring or the pool is full).
  void Deliver(const uint8_t* frame, uint32_t len) {
    if (rx_count_ == kRxRing || free_.empty() || len > kMaxFrameBytes) {
      ++counters_->rx_dropped;
      return;
    }
    const uint32_t slot = free_.back();
    free_.pop_back();
    std::memcpy(Slot(slot), frame, len);
    rx_[(rx_head_ + rx_count_) % kRxRing] = {slot, len};
    ++rx_count_;
    ++counters_->frames_in;
  }
  bool rx_pending() const { return rx_count_ != 0; }

  uint16_t RxBurst(Frame* frames, uint16_t n) override {
    uint16_t k = 0;
    for (; k < n && rx_count_ > 0; ++k) {
      const Rx& r = rx_[rx_head_];
      frames[k] = MakeFrame(r.slot, r.len);
      rx_head_ = (rx_head_ + 1) % kRxRing;
      --rx_count_;
    }
    return k;
  }
  uint16_t AllocTx(Frame* frames, uint16_t n) override {
    uint16_t k = 0;
    for (; k < n && !free_.empty(); ++k) {
      frames[k] = MakeFrame(free_.back(), 0);
      free_.pop_back();
    }
    return k;
  }
  uint16_t TxBurst(Frame* frames, uint16_t n) override {
    uint16_t k = 0;
    for (; k < n; ++k) {
      if (!tx_(ctx_, frames[k].data, frames[k].len)) {
        counters_->tx_refused += n - k;
        break;
      }
      ++counters_->frames_out;
      Release(&frames[k], 1);
    }
    return k;
  }
  void Release(Frame* frames, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) free_.push_back(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(frames[i].handle)));
  }

 private:
  static constexpr uint32_t kPoolFrames = 8192;
  static constexpr uint32_t kRxRing = 4096;
  struct Rx {
    uint32_t slot = 0, len = 0;
  };
  uint8_t* Slot(uint32_t slot) { return storage_.get() + size_t{slot} * kMaxFrameBytes; }
  Frame MakeFrame(uint32_t slot, uint32_t len) {
    return Frame{Slot(slot), len, kMaxFrameBytes, reinterpret_cast<void*>(uintptr_t{slot})};
  }

  TransmitFn tx_;
  void* ctx_;
  HostCounters* counters_;
  std::unique_ptr<uint8_t[]> storage_;
  std::vector<uint32_t> free_;
  std::vector<Rx> rx_;
  uint32_t rx_head_ = 0, rx_count_ = 0;
};

struct FlowState {
  FlowProgress progress;
  uint32_t qpn = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t msg_bytes = 0, depth = 0;
  uint64_t posted_bytes = 0;
  uint32_t outstanding = 0;
  uint32_t next_msg = 0;
};

}  // namespace

struct HostModel::Impl {
  HostCounters counters;
  LinkIo io;
  core::DeviceConfig cfg;
  std::unique_ptr<core::Device> dev;
  uint32_t pd = 0, cq = 0;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
  std::vector<FlowState> flows;
  std::vector<uint32_t> qpns;
  uint32_t last_work = 0;         // packets the last Poll moved
  uint64_t refused_at_poll = 0;   // counters.tx_refused before the last Poll

  Impl(TransmitFn tx, void* ctx) : io(tx, ctx, &counters) {}

  uint64_t mem_addr() const { return reinterpret_cast<uint64_t>(mem.data()); }

  void Post(int id) {
    FlowState& f = flows[id];
    while (f.outstanding < f.depth && f.posted_bytes < f.progress.bytes) {
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(f.msg_bytes, f.progress.bytes - f.posted_bytes));
      const uint64_t off = uint64_t{f.next_msg % f.depth} * f.msg_bytes;
      transport::SendWr wr;
      wr.wr_id = uint64_t(id) << 32 | f.next_msg;
      wr.opcode = transport::WrOpcode::kRdmaWrite;
      wr.flags = transport::kSendSignaled;
      wr.num_sge = 1;
      wr.sg_list[0] = {mem_addr() + off, len, keys.lkey};
      wr.remote_addr = f.remote_addr + off;
      wr.rkey = f.rkey;
      if (dev->PostSend(f.qpn, wr) != 0) return;  // the send queue is full: retried after a completion
      f.posted_bytes += len;
      ++f.outstanding;
      ++f.next_msg;
    }
  }

  void Complete(const queue::Completion& c, uint64_t now_ns) {
    const size_t id = c.wr_id >> 32;
    if (id >= flows.size()) return;
    FlowState& f = flows[id];
    const uint64_t msg = c.wr_id & 0xFFFFFFFF;
    const uint64_t begin = msg * f.msg_bytes;
    f.progress.bytes_acked += std::min<uint64_t>(f.msg_bytes, f.progress.bytes - begin);
    --f.outstanding;
    if (c.status != queue::WcStatus::kSuccess) f.progress.failed = true;
    if (f.progress.bytes_acked == f.progress.bytes || f.progress.failed) {
      if (!f.progress.done) {
        f.progress.done = true;
        f.progress.finish_ns = now_ns;
      }
      return;
    }
    Post(static_cast<int>(id));
  }
};

HostModel::HostModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HostModel::~HostModel() = default;

std::unique_ptr<HostModel> HostModel::Create(const HostModelConfig& cfg, TransmitFn tx, void* tx_ctx,
                                             std::string* error) {
  auto impl = std::make_unique<Impl>(tx, tx_ctx);
  core::DeviceConfig& d = impl->cfg;
  std::memcpy(d.mac.data(), cfg.mac, 6);
  d.ipv4 = cfg.ipv4;
  d.cc_line_rate_bps = cfg.line_rate_bps;
  d.min_time_between_cnps_ns = 50'000;  // DCQCN's notification point: one CNP per 50 us per QP
  // QPNs from a fixed base, not the random one a real device picks: ECMP hashes the UDP source port, which
  // comes from the QPN, so a random base would give every run other paths and no run could be repeated.
  d.qpn_base = 16;
  d.max_qp = 1u << 16;  // a QP per flow: a long workload creates thousands per host
  absl::StatusOr<cc::Config> c = cc::ParseConfig(cfg.cc, cfg.cc_params, cfg.line_rate_bps);
  if (!c.ok()) {
    *error = std::string(c.status().message());
    return nullptr;
  }
  d.cc = *c;
  impl->dev = std::make_unique<core::Device>(d, &impl->io);
  impl->pd = impl->dev->AllocPd();
  impl->cq = *impl->dev->CreateCq(4096);
  impl->mem.resize(cfg.mem_bytes);
  absl::StatusOr<mem::MrKeys> keys =
      impl->dev->RegMr(impl->pd, impl->mem.data(), impl->mem.size(), impl->mem_addr(),
                       mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
  if (!keys.ok()) {
    *error = std::string(keys.status().message());
    return nullptr;
  }
  impl->keys = *keys;
  return std::unique_ptr<HostModel>(new HostModel(std::move(impl)));
}

void HostModel::Receive(const uint8_t* frame, uint32_t len) { impl_->io.Deliver(frame, len); }

uint32_t HostModel::Poll(uint64_t now_ns) {
  Impl& m = *impl_;
  m.refused_at_poll = m.counters.tx_refused;
  const uint32_t work = m.dev->Poll(now_ns);
  m.last_work = work;
  queue::Completion buf[64];
  for (uint32_t k; (k = m.dev->PollCq(m.cq, buf, 64)) > 0;) {
    for (uint32_t i = 0; i < k; ++i) m.Complete(buf[i], now_ns);
  }
  return work;
}

uint64_t HostModel::NextPollNs(uint64_t now_ns, uint64_t busy_period_ns) const {
  const Impl& m = *impl_;
  if (m.last_work > 0 || m.io.rx_pending() || m.counters.tx_refused != m.refused_at_poll ||
      m.dev->active_qps() > 0 || m.dev->deferred_doorbells() > 0) {
    return now_ns + busy_period_ns;
  }
  uint64_t next = UINT64_MAX;
  for (uint32_t qpn : m.qpns) {
    const uint64_t d = m.dev->qp(qpn)->NextDeadline();
    if (d != 0 && d < next) next = d;
  }
  return next == UINT64_MAX ? next : std::max(next, now_ns + 1);
}

uint32_t HostModel::CreateQp(std::string* error, uint32_t max_send_wr) {
  core::QpInitAttr init;
  init.pd = impl_->pd;
  init.send_cq = init.recv_cq = impl_->cq;
  init.caps.max_send_wr = max_send_wr;
  init.caps.max_recv_wr = 16;
  absl::StatusOr<uint32_t> qpn = impl_->dev->CreateQp(init);
  if (!qpn.ok()) {
    *error = std::string(qpn.status().message());
    return 0;
  }
  impl_->qpns.push_back(*qpn);
  return *qpn;
}

bool HostModel::ConnectQp(uint32_t qpn, const HostModel& peer, uint32_t peer_qpn, uint32_t mtu, std::string* error) {
  const core::Device& p = *peer.impl_->dev;
  core::ConnectParams c;
  c.peer_gid = p.gids()[1];
  c.peer_mac = p.config().mac;
  c.peer_qpn = peer_qpn;
  c.mtu = mtu;
  const absl::Status st = core::ConnectQp(*impl_->dev, qpn, c);
  if (!st.ok()) *error = std::string(st.message());
  return st.ok();
}

int HostModel::StartFlow(uint32_t qpn, const HostModel& peer, uint64_t bytes, uint32_t msg_bytes, uint32_t depth,
                         uint64_t now_ns, std::string* error) {
  Impl& m = *impl_;
  if (bytes == 0 || msg_bytes == 0 || depth == 0 || uint64_t{msg_bytes} * depth > m.mem.size() ||
      uint64_t{msg_bytes} * depth > peer.impl_->mem.size()) {
    *error = "a flow needs bytes > 0 and msg_bytes x depth within both hosts' memory";
    return -1;
  }
  if (m.dev->qp(qpn) == nullptr) {
    *error = "no such QP";
    return -1;
  }
  FlowState f;
  f.qpn = qpn;
  f.remote_addr = peer.impl_->mem_addr();
  f.rkey = peer.impl_->keys.rkey;
  f.msg_bytes = msg_bytes;
  f.depth = depth;
  f.progress.bytes = bytes;
  f.progress.start_ns = now_ns;
  m.flows.push_back(f);
  const int id = static_cast<int>(m.flows.size() - 1);
  m.Post(id);
  return id;
}

const FlowProgress& HostModel::Flow(int id) const { return impl_->flows[id].progress; }

CcView HostModel::Cc(uint32_t qpn) const {
  CcView v;
  const transport::Qp* q = impl_->dev->qp(qpn);
  if (q == nullptr) return v;
  const cc::CongestionControl& c = q->congestion_control();
  v.algorithm = c.name();
  v.rate_limited = c.output().rate_limited;
  v.rate_bps = c.output().rate_bps;
  v.window_packets = c.output().window_packets;
  v.rtt_samples = c.stats().rtt_samples;
  v.last_rtt_ns = c.stats().last_rtt_ns;
  v.min_rtt_ns = c.stats().min_rtt_ns;
  v.telemetry_acks = c.stats().telemetry_acks;
  v.cnps = c.stats().cnps;
  v.rate_decreases = c.stats().rate_decreases;
  return v;
}

QpView HostModel::Qp(uint32_t qpn) const {
  QpView v;
  const transport::Qp* q = impl_->dev->qp(qpn);
  if (q == nullptr) return v;
  const transport::QpCounters& c = q->counters();
  v.tx_packets = c.tx_packets;
  v.retransmitted_packets = c.retransmitted_packets;
  v.timeouts = c.timeouts;
  v.naks_received = c.naks_received;
  v.out_of_sequence = c.out_of_sequence;
  v.duplicates_received = c.duplicates_received;
  return v;
}

const HostCounters& HostModel::counters() const { return impl_->counters; }

std::string HostModel::DescribeCounters() const {
  std::string out;
  const auto add = [&out](const char* name, uint64_t v) {
    if (v == 0) return;
    if (!out.empty()) out += ' ';
    out += name;
    out += '=';
    out += std::to_string(v);
  };
  core::ForEachDeviceCounter(impl_->dev->counters(), add);
  for (uint32_t qpn : impl_->qpns) {
    const transport::QpCounters& c = impl_->dev->qp(qpn)->counters();
    const std::string q = "qp" + std::to_string(qpn) + "_";
    for (const auto& [name, v] : {std::pair<const char*, uint64_t>{"acks_received", c.acks_received},
                                  {"acks_sent", c.acks_sent},
                                  {"ack_solicits", c.ack_solicits},
                                  {"timeouts", c.timeouts},
                                  {"retransmitted", c.retransmitted_packets},
                                  {"naks_received", c.naks_received},
                                  {"naks_sent", c.naks_sent},
                                  {"out_of_sequence", c.out_of_sequence},
                                  {"duplicates_received", c.duplicates_received},
                                  {"dropped_wrong_state", c.dropped_wrong_state},
                                  {"dropped_bad_response", c.dropped_bad_response}}) {
      add((q + name).c_str(), v);
    }
  }
  const HostCounters& h = impl_->counters;
  add("link_frames_in", h.frames_in);
  add("link_frames_out", h.frames_out);
  add("link_tx_refused", h.tx_refused);
  add("link_rx_dropped", h.rx_dropped);
  return out;
}

struct SwitchPortModel::Impl {
  explicit Impl(const sim::EgressPortConfig& c) : port(c) {}
  sim::EgressPort port;
  std::deque<std::vector<uint8_t>> held;  // the frames in the FIFO, in order
  std::vector<uint8_t> out;               // the frame Dequeue handed out last
  uint64_t stamped = 0, marked = 0;
};

SwitchPortModel::SwitchPortModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SwitchPortModel::~SwitchPortModel() = default;

std::unique_ptr<SwitchPortModel> SwitchPortModel::Create(const SwitchPortConfig& cfg) {
  sim::EgressPortConfig c;
  c.line_rate_bps = cfg.line_rate_bps;
  c.ecn = cfg.ecn;
  c.kmin_bytes = cfg.kmin_bytes;
  c.kmax_bytes = cfg.kmax_bytes;
  c.pmax = cfg.pmax;
  c.mark_at = cfg.mark_at_dequeue ? sim::MarkAt::kDequeue : sim::MarkAt::kEnqueue;
  c.buffer_bytes = cfg.buffer_bytes;
  c.int_stamp = cfg.int_stamp;
  c.seed = cfg.seed;
  c.stats_bin_bytes = 256;
  return std::unique_ptr<SwitchPortModel>(new SwitchPortModel(std::make_unique<Impl>(c)));
}

bool SwitchPortModel::Enqueue(const uint8_t* frame, uint32_t len, uint64_t now_ns) {
  const sim::EnqueueResult r = impl_->port.Enqueue(len, now_ns);
  if (r.dropped) return false;
  impl_->held.emplace_back(frame, frame + len);
  if (r.ce_marked) impl_->marked += sim::EditLeavingFrame(impl_->held.back().data(), len, true, nullptr).marked;
  return true;
}

uint64_t SwitchPortModel::NextDepartureNs() const { return impl_->port.next_departure_ns(); }

const uint8_t* SwitchPortModel::Dequeue(uint64_t now_ns, uint32_t* len) {
  Impl& m = *impl_;
  sim::Departure d;
  if (m.held.empty() || !m.port.Dequeue(now_ns, &d)) return nullptr;
  m.out.swap(m.held.front());
  m.held.pop_front();
  const bool mark = d.ce_marked && m.port.config().mark_at == sim::MarkAt::kDequeue;
  const sim::EgressEdits e =
      sim::EditLeavingFrame(m.out.data(), static_cast<uint32_t>(m.out.size()), mark,
                            m.port.config().int_stamp ? &d.int_hop : nullptr);
  m.marked += e.marked;
  m.stamped += e.stamped;
  *len = static_cast<uint32_t>(m.out.size());
  return m.out.data();
}

uint64_t SwitchPortModel::QueueBytes(uint64_t now_ns) { return impl_->port.queue_bytes(now_ns); }

SwitchPortStats SwitchPortModel::Stats(uint64_t now_ns) {
  sim::EgressPort& p = impl_->port;
  SwitchPortStats s;
  s.queue_bytes = p.queue_bytes(now_ns);
  s.max_queue_bytes = p.max_queue_bytes();
  s.mean_queue_bytes = p.MeanQueueBytes(now_ns);
  s.p50_queue_bytes = p.QueuePercentile(0.5, now_ns);
  s.p99_queue_bytes = p.QueuePercentile(0.99, now_ns);
  s.enqueued = p.enqueued_packets();
  s.dropped = p.dropped_packets();
  s.marked = impl_->marked;
  s.stamped = impl_->stamped;
  s.departed_bytes = p.departed_bytes();
  s.pauses = p.pauses();
  s.paused_ns = p.paused_ns(now_ns);
  return s;
}

void SwitchPortModel::Pause(uint64_t now_ns) { impl_->port.Pause(now_ns); }
void SwitchPortModel::Resume(uint64_t now_ns) { impl_->port.Resume(now_ns); }

const std::vector<uint64_t>& SwitchPortModel::QueueHistogramNs(uint64_t now_ns) {
  return impl_->port.queue_histogram_ns(now_ns);
}
uint32_t SwitchPortModel::histogram_bin_bytes() const { return impl_->port.config().stats_bin_bytes; }

struct PfcModel::Impl {
  sim::PfcIngress pfc;
};

PfcModel::PfcModel(uint32_t ingresses, uint64_t xoff_bytes, uint64_t xon_bytes)
    : impl_(new Impl{sim::PfcIngress(ingresses, xoff_bytes, xon_bytes)}) {}
PfcModel::~PfcModel() = default;
PfcModel::Signal PfcModel::Add(uint32_t ingress, uint32_t bytes) {
  return static_cast<Signal>(impl_->pfc.Add(ingress, bytes));
}
PfcModel::Signal PfcModel::Remove(uint32_t ingress, uint32_t bytes) {
  return static_cast<Signal>(impl_->pfc.Remove(ingress, bytes));
}
uint64_t PfcModel::pause_frames() const { return impl_->pfc.pause_frames(); }

}  // namespace droce::ns3glue
