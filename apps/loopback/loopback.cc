// droce-loopback: two droce devices in one process, joined by an in-memory
// wire that loses, reorders, duplicates and corrupts packets, running a mix
// of RDMA operations with every byte verified. Shows the RC transport
// recovering, with its counters, without any network or DPDK port.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"

namespace {

using namespace droce;

struct Options {
  uint32_t messages = 2000;
  uint32_t size = 65536;
  uint32_t mtu = 1024;
  double loss = 0.01;
  double reorder = 0.01;
  double duplicate = 0.01;
  double corrupt = 0.005;
  uint64_t seed = 1;
};

[[noreturn]] void Usage(const char* error) {
  if (error) std::fprintf(stderr, "droce-loopback: %s\n", error);
  std::fprintf(stderr,
               "usage: droce-loopback [--messages N] [--size BYTES] [--mtu 256..4096]\n"
               "                      [--loss P] [--reorder P] [--duplicate P] [--corrupt P] [--seed N]\n");
  std::exit(error ? 2 : 0);
}

double ParseProbability(const char* name, const char* v) {
  char* end;
  const double p = std::strtod(v, &end);
  if (*end != '\0' || p < 0 || p > 0.5) Usage((std::string(name) + " must be a number in [0, 0.5]").c_str());
  return p;
}

uint64_t ParseCount(const char* name, const char* v, uint64_t lo, uint64_t hi) {
  char* end;
  errno = 0;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0' || errno != 0 || x < lo || x > hi) {
    Usage((std::string(name) + " must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]").c_str());
  }
  return x;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") Usage(nullptr);
    if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    if (a == "--messages") o.messages = ParseCount("--messages", v, 1, 10'000'000);
    else if (a == "--size") o.size = ParseCount("--size", v, 0, 1 << 24);
    else if (a == "--mtu") {
      o.mtu = ParseCount("--mtu", v, 256, 4096);
      if (transport::MtuBytesToEnum(o.mtu) == 0) Usage("--mtu must be 256, 512, 1024, 2048 or 4096");
    } else if (a == "--loss") o.loss = ParseProbability("--loss", v);
    else if (a == "--reorder") o.reorder = ParseProbability("--reorder", v);
    else if (a == "--duplicate") o.duplicate = ParseProbability("--duplicate", v);
    else if (a == "--corrupt") o.corrupt = ParseProbability("--corrupt", v);
    else if (a == "--seed") o.seed = ParseCount("--seed", v, 0, UINT64_MAX);
    else Usage(("unknown option " + a).c_str());
  }
  return o;
}

struct Node {
  std::unique_ptr<core::Device> dev;
  uint32_t pd = 0, cq = 0, qpn = 0;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
};

bool Connect(Node& n, Node& peer, uint32_t mtu) {
  core::ConnectParams c;
  c.peer_gid = peer.dev->gids()[1];
  c.peer_mac = peer.dev->config().mac;
  c.peer_qpn = peer.qpn;
  c.mtu = mtu;
  c.timeout = 8;  // ~1 ms of virtual time
  const absl::Status s = core::ConnectQp(*n.dev, n.qpn, c);
  if (!s.ok()) std::fprintf(stderr, "droce-loopback: connect: %s\n", std::string(s.message()).c_str());
  return s.ok();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  sim::MemWireConfig wc;
  wc.seed = o.seed;
  wc.pool_frames = 16384;
  wc.queue_frames = 8192;
  for (auto& d : wc.impair) {
    d.drop = o.loss;
    d.reorder = o.reorder;
    d.duplicate = o.duplicate;
    d.corrupt = o.corrupt;
  }
  sim::MemWire wire(wc);
  Node nodes[2];
  const uint64_t region = uint64_t{o.size} * 4 + 4096;
  for (int i = 0; i < 2; ++i) {
    core::DeviceConfig cfg;
    cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
    cfg.ipv4 = 0x0A000001 + i;  // 10.0.0.1 and 10.0.0.2, inside this process only
    Node& n = nodes[i];
    n.dev = std::make_unique<core::Device>(cfg, &wire.end(i));
    n.pd = n.dev->AllocPd();
    n.cq = *n.dev->CreateCq(4096);
    core::QpInitAttr init;
    init.pd = n.pd;
    init.send_cq = init.recv_cq = n.cq;
    n.qpn = *n.dev->CreateQp(init);
    n.mem.resize(region);
    n.keys = *n.dev->RegMr(n.pd, n.mem.data(), n.mem.size(), reinterpret_cast<uint64_t>(n.mem.data()),
                           mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
  }
  if (!Connect(nodes[0], nodes[1], o.mtu) || !Connect(nodes[1], nodes[0], o.mtu)) return 1;
  Node& a = nodes[0];
  Node& b = nodes[1];
  const uint64_t a_base = reinterpret_cast<uint64_t>(a.mem.data());
  const uint64_t b_base = reinterpret_cast<uint64_t>(b.mem.data());

  std::printf("droce-loopback: %u messages of %u bytes, MTU %u, loss %.3f reorder %.3f duplicate %.3f "
              "corrupt %.3f, seed %llu\n",
              o.messages, o.size, o.mtu, o.loss, o.reorder, o.duplicate, o.corrupt,
              static_cast<unsigned long long>(o.seed));
  static const transport::WrOpcode kOps[] = {transport::WrOpcode::kRdmaWrite, transport::WrOpcode::kRdmaRead,
                                             transport::WrOpcode::kSend, transport::WrOpcode::kRdmaWriteWithImm};
  static const char* kNames[] = {"WRITE", "READ", "SEND", "WRITE_IMM"};
  uint64_t now = 1'000'000, bytes = 0, errors = 0;
  uint64_t per_op[4] = {};
  for (uint32_t m = 0; m < o.messages; ++m) {
    const int k = m % 4;
    const transport::WrOpcode op = kOps[k];
    // Fresh pattern at the source, poison at the destination.
    Node& src = op == transport::WrOpcode::kRdmaRead ? b : a;
    Node& dst = op == transport::WrOpcode::kRdmaRead ? a : b;
    for (uint32_t i = 0; i < o.size; ++i) src.mem[i] = static_cast<uint8_t>(i * 31 + m);
    std::memset(dst.mem.data() + 2 * uint64_t{o.size}, 0xEE, o.size);
    if (op == transport::WrOpcode::kSend || op == transport::WrOpcode::kRdmaWriteWithImm) {
      transport::RecvWr r;
      r.wr_id = m;
      r.num_sge = 1;
      r.sg_list[0] = {b_base + 2 * uint64_t{o.size}, o.size, b.keys.lkey};
      (void)b.dev->PostRecv(b.qpn, r);
    }
    transport::SendWr wr;
    wr.wr_id = m;
    wr.opcode = op;
    wr.flags = transport::kSendSignaled;
    wr.num_sge = 1;
    wr.imm_data = m;
    if (op == transport::WrOpcode::kRdmaRead) {
      wr.sg_list[0] = {a_base + 2 * uint64_t{o.size}, o.size, a.keys.lkey};
      wr.remote_addr = b_base;
    } else {
      wr.sg_list[0] = {a_base, o.size, a.keys.lkey};
      wr.remote_addr = b_base + 2 * uint64_t{o.size};
    }
    wr.rkey = b.keys.rkey;
    if (int err = a.dev->PostSend(a.qpn, wr); err != 0) {
      std::fprintf(stderr, "droce-loopback: post_send: %s\n", std::strerror(err));
      return 1;
    }
    const bool recv = op == transport::WrOpcode::kSend || op == transport::WrOpcode::kRdmaWriteWithImm;
    int need_a = 1, need_b = recv ? 1 : 0;
    queue::Completion wc[8];
    while (need_a > 0 || need_b > 0) {
      const uint32_t work = a.dev->Poll(now) + b.dev->Poll(now);
      for (uint32_t n = a.dev->PollCq(a.cq, wc, 8), i = 0; i < n; ++i, --need_a) errors += wc[i].status != queue::WcStatus::kSuccess;
      for (uint32_t n = b.dev->PollCq(b.cq, wc, 8), i = 0; i < n; ++i, --need_b) errors += wc[i].status != queue::WcStatus::kSuccess;
      now += work ? 1000 : 100'000;  // virtual time: jump ahead when idle
    }
    if (std::memcmp(dst.mem.data() + 2 * uint64_t{o.size}, src.mem.data(), o.size) != 0) {
      std::fprintf(stderr, "droce-loopback: data mismatch in message %u (%s)\n", m, kNames[k]);
      return 1;
    }
    bytes += o.size;
    ++per_op[k];
  }
  const auto& ca = a.dev->qp(a.qpn)->counters();
  const auto& cb = b.dev->qp(b.qpn)->counters();
  std::printf("verified %llu messages (%llu WRITE, %llu READ, %llu SEND, %llu WRITE_IMM), %.1f MiB, "
              "%llu completion errors, %.1f ms of virtual time\n",
              (unsigned long long)o.messages, (unsigned long long)per_op[0], (unsigned long long)per_op[1],
              (unsigned long long)per_op[2], (unsigned long long)per_op[3], bytes / 1048576.0,
              (unsigned long long)errors, (now - 1'000'000) / 1e6);
  std::printf("wire  a->b: sent %llu dropped %llu reordered %llu duplicated %llu corrupted %llu\n",
              (unsigned long long)wire.counters(0).sent, (unsigned long long)wire.counters(0).dropped,
              (unsigned long long)wire.counters(0).reordered, (unsigned long long)wire.counters(0).duplicated,
              (unsigned long long)wire.counters(0).corrupted);
  std::printf("wire  b->a: sent %llu dropped %llu reordered %llu duplicated %llu corrupted %llu\n",
              (unsigned long long)wire.counters(1).sent, (unsigned long long)wire.counters(1).dropped,
              (unsigned long long)wire.counters(1).reordered, (unsigned long long)wire.counters(1).duplicated,
              (unsigned long long)wire.counters(1).corrupted);
  std::printf("requester: tx %llu retransmitted %llu timeouts %llu naks %llu rnr %llu | responder: "
              "duplicates %llu out-of-sequence %llu naks sent %llu | icrc drops %llu + %llu\n",
              (unsigned long long)ca.tx_packets, (unsigned long long)ca.retransmitted_packets,
              (unsigned long long)ca.timeouts, (unsigned long long)ca.naks_received,
              (unsigned long long)ca.rnr_naks_received, (unsigned long long)cb.duplicates_received,
              (unsigned long long)cb.out_of_sequence, (unsigned long long)cb.naks_sent,
              (unsigned long long)a.dev->counters().rx_bad_icrc(), (unsigned long long)b.dev->counters().rx_bad_icrc());
  return errors == 0 ? 0 : 1;
}
