// The RC engine alone: two devices on one core joined by a perfect,
// zero-copy in-memory wire (sim::MemWire without impairments), so
// what is measured is droce's protocol work — header building, ICRC, parsing,
// MR checks, payload copies, ACK processing — and nothing else.
//
// Prints CSV rows: metric,value,unit and the memcpy reference measured in
// the same run.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/connect.h"
#include "core/device.h"
#include "pktio/frame_ring.h"
#include "sim/wire/mem_wire.h"

namespace {

using namespace droce;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// DROCE_ENGINE_RING=copy|gather: each device's transmitted frames cross a
// pktio::FrameRing of 64 slots first, as between two processes on a direct
// ring (Produce), and are copied out of it onto the wire right after, on
// this thread (the receiving process's copy, here paid by the sender's port
// call). `gather`: the port takes gather frames (BurstIo::TakesGather), so
// long payloads are copied into the slots from the registered memory;
// `copy`: the frames are built whole first. callgrind then counts the
// sender's build (Qp::Transmit) and its copy into the ring (FrameRing::Produce)
// per frame either way.
class RingPort final : public pktio::BurstIo {
 public:
  RingPort(pktio::BurstIo* inner, bool gather)
      : inner_(inner), gather_(gather), mem_(pktio::FrameRing::Bytes(kSlots, kSlotBytes) + 64) {
    uint8_t* at = mem_.data() + (64 - reinterpret_cast<uintptr_t>(mem_.data()) % 64) % 64;
    prod_ = pktio::FrameRing(at, kSlots, kSlotBytes);
    cons_ = pktio::FrameRing(at, kSlots, kSlotBytes);
  }
  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override { return inner_->RxBurst(f, n); }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return inner_->AllocTx(f, n); }
  void Release(pktio::Frame* f, uint16_t n) override { inner_->Release(f, n); }
  bool TakesGather() const override { return gather_; }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    const uint16_t took = prod_.Produce(f, n);
    inner_->Release(f, took);  // copied into the ring
    pktio::FlattenEach(f + took, n - took);
    // The ring's frames onto the wire (the receiving side's copy).
    for (uint32_t avail = cons_.Available(); avail > 0; avail = cons_.Available()) {
      pktio::Frame b[64];
      const uint16_t k = inner_->AllocTx(b, static_cast<uint16_t>(std::min<uint32_t>(avail, 64)));
      if (k == 0) break;
      const uint16_t c = cons_.Consume(b, k);
      const uint16_t sent = inner_->TxBurst(b, c);
      if (sent < k) inner_->Release(b + sent, static_cast<uint16_t>(k - sent));
    }
    return took;
  }

 private:
  static constexpr uint32_t kSlots = 64;
  static constexpr uint32_t kSlotBytes = pktio::FrameRing::kDefaultSlotBytes;
  pktio::BurstIo* inner_;
  bool gather_;
  std::vector<uint8_t> mem_;
  pktio::FrameRing prod_, cons_;
};

// The port a device of the benchmark sees (DROCE_ENGINE_RING), or null for the wire itself.
std::unique_ptr<RingPort> MaybeRing(pktio::BurstIo* wire) {
  const char* mode = std::getenv("DROCE_ENGINE_RING");
  if (mode == nullptr || *mode == '\0') return nullptr;
  return std::make_unique<RingPort>(wire, std::string(mode) == "gather");
}

struct Endpoint {
  std::unique_ptr<core::Device> dev;
  uint32_t pd, cq, qpn;
  std::vector<uint8_t> mem;
  mem::MrKeys keys;
};

void Connect(Endpoint& s, Endpoint& peer, uint32_t mtu) {
  core::ConnectParams c;
  c.peer_gid = peer.dev->gids()[1];
  c.peer_mac = peer.dev->config().mac;
  c.peer_qpn = peer.qpn;
  c.mtu = mtu;
  (void)core::ConnectQp(*s.dev, s.qpn, c);
}

// DROCE_ENGINE_RX_ICRC_TRUST=1: both devices take the wire's frames
// without the ICRC check (DeviceConfig::rx_icrc_trusted; a perfect
// in-memory wire). Through `requires`: vs.sh builds this file against
// older trees too, which lack the setting.
template <typename Config>
void ApplyBenchSettings(Config& cfg) {
  static const bool trust = std::getenv("DROCE_ENGINE_RX_ICRC_TRUST") != nullptr &&
                            std::string(std::getenv("DROCE_ENGINE_RX_ICRC_TRUST")) == "1";
  if constexpr (requires { cfg.rx_icrc_trusted; }) cfg.rx_icrc_trusted = trust;
}

struct Result {
  double msgs_per_s;
  double gbit_per_s;
};

enum class StreamOp { kWrite, kSend, kRead };

// Streams `count` RDMA WRITEs (kSend: SENDs, into receives B keeps
// posted; kRead: READs of B's memory into A's) of `size` bytes from A to B
// with up to `outstanding` in flight (every 16th signaled), all on this
// thread.
Result WriteStream(uint32_t size, uint32_t mtu, uint64_t count, uint32_t outstanding,
                   StreamOp stream_op = StreamOp::kWrite) {
  const bool send = stream_op == StreamOp::kSend;
  sim::MemWireConfig wire_config;  // no impairments: a perfect wire
  wire_config.pool_frames = 8192;
  wire_config.queue_frames = 8192;
  sim::MemWire wire(wire_config);
  std::unique_ptr<RingPort> ring[2];  // outlive the devices
  Endpoint ep[2];
  for (int i = 0; i < 2; ++i) {
    core::DeviceConfig cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
    cfg.ipv4 = 0x0A000001 + i;
    ApplyBenchSettings(cfg);
    ring[i] = MaybeRing(&wire.end(i));
    ep[i].dev = std::make_unique<core::Device>(cfg, ring[i] ? static_cast<pktio::BurstIo*>(ring[i].get()) : &wire.end(i));
    ep[i].pd = ep[i].dev->AllocPd();
    ep[i].cq = *ep[i].dev->CreateCq(8192);
    core::QpInitAttr init;
    init.pd = ep[i].pd;
    init.send_cq = init.recv_cq = ep[i].cq;
    init.caps.max_send_wr = 4096;
    ep[i].qpn = *ep[i].dev->CreateQp(init);
    ep[i].mem.assign(std::max<size_t>(size, 4096) * 2, 0x5A);
    ep[i].keys = *ep[i].dev->RegMr(ep[i].pd, ep[i].mem.data(), ep[i].mem.size(),
                                   reinterpret_cast<uint64_t>(ep[i].mem.data()),
                                   mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
  }
  Connect(ep[0], ep[1], mtu);
  Connect(ep[1], ep[0], mtu);
  transport::SendWr wr;
  wr.opcode = send                              ? transport::WrOpcode::kSend
              : stream_op == StreamOp::kRead ? transport::WrOpcode::kRdmaRead
                                             : transport::WrOpcode::kRdmaWrite;
  wr.num_sge = 1;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(ep[0].mem.data()), size, ep[0].keys.lkey};
  wr.remote_addr = reinterpret_cast<uint64_t>(ep[1].mem.data());
  wr.rkey = ep[1].keys.rkey;
  transport::RecvWr recv;
  recv.num_sge = 1;
  recv.sg_list[0] = {reinterpret_cast<uint64_t>(ep[1].mem.data()), size, ep[1].keys.lkey};
  for (uint32_t i = 0; send && i < outstanding + 8; ++i) (void)ep[1].dev->PostRecv(ep[1].qpn, recv);
  // Signal often enough that a full window always contains a signaled WR.
  const uint32_t kSignalEvery = std::min<uint32_t>(16, outstanding);
  uint64_t posted = 0, completed = 0, now = 0;
  queue::Completion wc[64];
  const uint64_t start = NowNs();
  while (completed < count) {
    while (posted < count && posted - completed < outstanding) {
      wr.wr_id = posted;
      wr.flags = (posted % kSignalEvery == kSignalEvery - 1 || posted == count - 1) ? uint32_t{transport::kSendSignaled} : 0u;
      if (ep[0].dev->PostSend(ep[0].qpn, wr) != 0) break;
      ++posted;
    }
    now += 100;
    ep[0].dev->Poll(now);
    ep[1].dev->Poll(now);
    if (send) {
      for (uint32_t k = ep[1].dev->PollCq(ep[1].cq, wc, 64); k > 0; --k) (void)ep[1].dev->PostRecv(ep[1].qpn, recv);
    }
    const uint32_t n = ep[0].dev->PollCq(ep[0].cq, wc, 64);
    for (uint32_t i = 0; i < n; ++i) {
      if (wc[i].status != queue::WcStatus::kSuccess) {
        std::fprintf(stderr, "completion error %s\n", queue::WcStatusName(wc[i].status));
        std::exit(1);
      }
      completed = wc[i].wr_id + 1;
    }
  }
  const double secs = double(NowNs() - start) / 1e9;
  return {double(count) / secs, double(count) * size * 8 / secs / 1e9};
}

// Many QPs, each with one 64 B WRITE outstanding, toward a peer that
// answers late: device B is polled once every `ack_every` rounds of A, so
// most of A's rounds find every QP waiting for its ACK (retransmission
// timer armed, nothing to send). Returns the message rate and A's cost per
// Poll round (ns; B's rounds are timed apart and not counted).
struct ManyQpResult {
  double msgs_per_s;
  double ns_per_round;
};
ManyQpResult ManyQpWrites(uint32_t nqp, uint64_t count, uint32_t ack_every) {
  sim::MemWireConfig wire_config;
  wire_config.pool_frames = 16384;
  wire_config.queue_frames = 16384;
  sim::MemWire wire(wire_config);
  Endpoint ep[2];
  std::vector<uint32_t> qpns[2];
  for (int i = 0; i < 2; ++i) {
    core::DeviceConfig cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
    cfg.ipv4 = 0x0A000001 + i;
    cfg.max_qp = std::max<uint32_t>(1024, nqp);
    ep[i].dev = std::make_unique<core::Device>(cfg, &wire.end(i));
    ep[i].pd = ep[i].dev->AllocPd();
    ep[i].cq = *ep[i].dev->CreateCq(std::max<uint32_t>(4096, 2 * nqp));
    core::QpInitAttr init;
    init.pd = ep[i].pd;
    init.send_cq = init.recv_cq = ep[i].cq;
    init.caps.max_send_wr = 4;
    init.caps.max_recv_wr = 4;
    for (uint32_t k = 0; k < nqp; ++k) qpns[i].push_back(*ep[i].dev->CreateQp(init));
    ep[i].mem.assign(8192, 0x5A);
    ep[i].keys = *ep[i].dev->RegMr(ep[i].pd, ep[i].mem.data(), ep[i].mem.size(),
                                   reinterpret_cast<uint64_t>(ep[i].mem.data()),
                                   mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead);
  }
  for (int i = 0; i < 2; ++i) {
    for (uint32_t k = 0; k < nqp; ++k) {
      core::ConnectParams c;
      c.peer_gid = ep[1 - i].dev->gids()[1];
      c.peer_mac = ep[1 - i].dev->config().mac;
      c.peer_qpn = qpns[1 - i][k];
      (void)core::ConnectQp(*ep[i].dev, qpns[i][k], c);
    }
  }
  transport::SendWr wr;
  wr.opcode = transport::WrOpcode::kRdmaWrite;
  wr.num_sge = 1;
  wr.flags = transport::kSendSignaled;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(ep[0].mem.data()), 64, ep[0].keys.lkey};
  wr.remote_addr = reinterpret_cast<uint64_t>(ep[1].mem.data());
  wr.rkey = ep[1].keys.rkey;
  uint64_t posted = 0, completed = 0, now = 0, rounds = 0, a_ns = 0;
  queue::Completion wc[256];
  auto post = [&](uint32_t qpn) {
    if (posted >= count) return;
    wr.wr_id = qpn;
    if (ep[0].dev->PostSend(qpn, wr) == 0) ++posted;
  };
  for (uint32_t qpn : qpns[0]) post(qpn);
  const uint64_t start = NowNs();
  while (completed < count) {
    now += 100;
    const uint64_t t = NowNs();
    ep[0].dev->Poll(now);
    a_ns += NowNs() - t;
    ++rounds;
    if (rounds % ack_every == 0) ep[1].dev->Poll(now);
    for (uint32_t n; (n = ep[0].dev->PollCq(ep[0].cq, wc, 256)) > 0;) {
      for (uint32_t i = 0; i < n; ++i) {
        if (wc[i].status != queue::WcStatus::kSuccess) {
          std::fprintf(stderr, "completion error %s\n", queue::WcStatusName(wc[i].status));
          std::exit(1);
        }
        ++completed;
        post(static_cast<uint32_t>(wc[i].wr_id));
      }
    }
  }
  const double secs = double(NowNs() - start) / 1e9;
  return {double(count) / secs, double(a_ns) / double(rounds)};
}

double MemcpyGbps(uint32_t size, uint64_t total_bytes) {
  std::vector<uint8_t> src(size, 1), dst(size);
  const uint64_t iters = total_bytes / size;
  const uint64_t start = NowNs();
  for (uint64_t i = 0; i < iters; ++i) {
    std::memcpy(dst.data(), src.data(), size);
    asm volatile("" : : "r"(dst.data()) : "memory");
    src[i % size] = static_cast<uint8_t>(i);
  }
  return double(iters) * size * 8 / (double(NowNs() - start) / 1e9) / 1e9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// Usage: droce-engine-bench [trials] [outstanding_64KiB] [messages_64B] [small|large|send|read|send2|send8k|manyqp|all]
// send: 64 KiB SENDs (20,000, as large's WRITEs) against memcpy.
// read: 64 KiB READs at MTU 4096 (messages_64B of them, up to
// outstanding_64KiB in flight): 16 READ responses each (FIRST, 14 MIDDLE,
// LAST), the frames of an MPI rendezvous (tools/bench/stacks/results.md).
// send2: messages_64B SENDs of two frames each (1,500 B at MTU 1024: FIRST,
// LAST, FIRST...), the stream header prediction takes through the frame
// before the last on every frame (check_instructions.sh guards its cost).
// send8k: messages_64B SENDs of 8,256 B at MTU 4096 (FIRST, MIDDLE and a
// 64-byte LAST each): UCX's rc_verbs bcopy segment, the fragment MPI's
// 64-192 KiB eager messages are made of (tools/bench/stacks/results.md).
// manyqp: 1, 64 and 1024 QPs with one 64 B WRITE outstanding each, the
// peer polled every 8th round (messages_64B / 4 messages per case).
int main(int argc, char** argv) {
  const int trials = argc > 1 ? std::atoi(argv[1]) : 5;
  const uint32_t outstanding_large = argc > 2 ? std::atoi(argv[2]) : 8;
  const uint64_t small_count = argc > 3 ? std::atoll(argv[3]) : 1'000'000;
  const std::string only = argc > 4 ? argv[4] : "all";
  const bool many = only == "manyqp";
  constexpr uint32_t kManyQps[] = {1, 64, 1024};
  std::vector<double> small, large, memcpy_gbps, many_rate[3], many_round[3], two_frame, seg8k, reads;
  for (int t = 0; t < trials; ++t) {
    if (only == "send2") {
      two_frame.push_back(WriteStream(1500, 1024, small_count, 64, StreamOp::kSend).msgs_per_s);
      continue;
    }
    if (only == "send8k") {
      seg8k.push_back(WriteStream(8256, 4096, small_count, 64, StreamOp::kSend).gbit_per_s);
      continue;
    }
    if (only == "read") {
      reads.push_back(WriteStream(65536, 4096, small_count, outstanding_large, StreamOp::kRead).gbit_per_s);
      continue;
    }
    if (many) {
      for (int k = 0; k < 3; ++k) {
        const ManyQpResult r = ManyQpWrites(kManyQps[k], std::max<uint64_t>(small_count / 4, 2 * kManyQps[k]), 8);
        many_rate[k].push_back(r.msgs_per_s);
        many_round[k].push_back(r.ns_per_round);
      }
      continue;
    }
    if (only != "large" && only != "send") small.push_back(WriteStream(64, 1024, small_count, 512).msgs_per_s);
    if (only != "small") {
      large.push_back(
          WriteStream(65536, 4096, 20000, outstanding_large, only == "send" ? StreamOp::kSend : StreamOp::kWrite)
              .gbit_per_s);
      memcpy_gbps.push_back(MemcpyGbps(65536, 8ull << 30));
    }
  }
  std::printf("metric,value,unit\n");
  for (int k = 0; k < 3 && many; ++k) {
    std::printf("manyqp_%u_write_64B_msg_rate,%.3f,Mmsg/s\n", kManyQps[k], Median(many_rate[k]) / 1e6);
    std::printf("manyqp_%u_ns_per_poll_round,%.1f,ns\n", kManyQps[k], Median(many_round[k]));
  }
  if (!small.empty()) std::printf("write_64B_msg_rate,%.3f,Mmsg/s\n", Median(small) / 1e6);
  if (!two_frame.empty()) std::printf("send_2frame_1500B_msg_rate,%.3f,Mmsg/s\n", Median(two_frame) / 1e6);
  if (!seg8k.empty()) std::printf("send_8256B_goodput,%.2f,Gbit/s\n", Median(seg8k));
  if (!reads.empty()) std::printf("read_64KiB_goodput,%.2f,Gbit/s\n", Median(reads));
  if (!large.empty()) {
    const double m = Median(memcpy_gbps);
    const char* op = only == "send" ? "send" : "write";
    std::printf("%s_64KiB_goodput,%.2f,Gbit/s\n", op, Median(large));
    std::printf("memcpy_64KiB,%.2f,Gbit/s\n", m);
    std::printf("%s_64KiB_vs_memcpy,%.3f,ratio\n", op, Median(large) / m);
  }
  return 0;
}
