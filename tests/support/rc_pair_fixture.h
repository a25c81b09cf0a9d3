// Test fixture: two devices with one connected RC QP each, on a seeded
// lossy link, driven in virtual time.
#ifndef DROCE_TESTS_SUPPORT_RC_PAIR_FIXTURE_H_
#define DROCE_TESTS_SUPPORT_RC_PAIR_FIXTURE_H_
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/mem_wire.h"
#include "wire/psn.h"

namespace droce::core::testing {

using transport::QpAttr;
using transport::SendWr;
using transport::RecvWr;
using transport::WrOpcode;
using queue::Completion;
using queue::WcStatus;

// Impairments both directions of the test link apply (sim/wire/mem_wire.h).
struct Impairments {
  double drop = 0, duplicate = 0, reorder = 0, corrupt = 0;
};

struct Side {
  std::unique_ptr<Device> dev;
  uint32_t pd = 0, cq = 0, qpn = 0;
  std::vector<uint8_t> mem;
  mem::MrKeys keys{};
};

// One end of a test pair: a device on `io`, its PD, one CQ, one QP and
// `mem_bytes` of registered memory open to every remote access.
inline void OpenSide(Side& s, const DeviceConfig& cfg, pktio::BurstIo* io, uint32_t mem_bytes,
                     transport::QpType type = transport::QpType::kRc) {
  s.dev = std::make_unique<Device>(cfg, io);
  s.pd = s.dev->AllocPd();
  s.cq = *s.dev->CreateCq(4096);
  QpInitAttr init;
  init.pd = s.pd;
  init.send_cq = init.recv_cq = s.cq;
  init.caps.max_send_wr = 1024;
  init.caps.max_recv_wr = 1024;
  init.caps.type = type;
  s.qpn = *s.dev->CreateQp(init);
  s.mem.resize(mem_bytes);
  s.keys = *s.dev->RegMr(s.pd, s.mem.data(), s.mem.size(), reinterpret_cast<uint64_t>(s.mem.data()),
                         mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
}

// Connects the RC QPs of two sides to each other (PSNs 0).
inline void ConnectSides(Side* s, uint32_t mtu, uint8_t timeout, uint8_t retry_cnt = 7, uint8_t max_rd_atomic = 16) {
  for (int i = 0; i < 2; ++i) {
    ConnectParams c;
    c.peer_gid = s[1 - i].dev->gids()[1];
    c.peer_mac = s[1 - i].dev->config().mac;
    c.peer_qpn = s[1 - i].qpn;
    c.mtu = mtu;
    c.timeout = timeout;
    c.retry_cnt = retry_cnt;
    c.max_rd_atomic = c.max_dest_rd_atomic = max_rd_atomic;
    EXPECT_TRUE(ConnectQp(*s[i].dev, s[i].qpn, c).ok());
  }
}

class RcPair {
 public:
  RcPair(Impairments imp, uint32_t seed, uint32_t mtu = 1024, uint32_t mem_bytes = 4 << 20,
         uint32_t start_psn_a = 0, uint32_t start_psn_b = 0, uint8_t timeout = 8,
         uint8_t retry = 7, uint8_t rnr_retry = 7,
         transport::QpType type = transport::QpType::kRc,
         uint64_t min_time_between_cnps_ns = 4000, const cc::DcqcnParams* dcqcn_a = nullptr,
         uint32_t pool_frames = 16384, bool selective_repeat_a = false,
         bool selective_repeat_b = false, uint64_t sr_rto_low_ns = 200'000, uint8_t max_rd_atomic = 16)
      : link_(LinkConfig(imp, seed, pool_frames)) {
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg;
      cfg.selective_repeat = i == 0 ? selective_repeat_a : selective_repeat_b;  // doc/transport.md
      cfg.sr_rto_low_ns = sr_rto_low_ns;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      cfg.min_time_between_cnps_ns = min_time_between_cnps_ns;
      if (i == 0 && dcqcn_a != nullptr) {
        cfg.dcqcn = true;
        cfg.dcqcn_params = *dcqcn_a;
      }
      OpenSide(s_[i], cfg, &link_.end(i), mem_bytes, type);
    }
    const uint32_t psn[2] = {start_psn_a, start_psn_b};
    for (int i = 0; i < 2; ++i) {
      Side& s = s_[i];
      Side& peer = s_[1 - i];
      ConnectParams c;
      c.peer_gid = peer.dev->gids()[1];
      c.peer_mac = peer.dev->config().mac;
      c.peer_qpn = peer.qpn;
      c.mtu = mtu;
      c.rq_psn = psn[1 - i];
      c.sq_psn = psn[i];
      c.timeout = timeout;
      c.retry_cnt = retry;
      c.rnr_retry = rnr_retry;
      c.max_rd_atomic = c.max_dest_rd_atomic = max_rd_atomic;
      const absl::Status st = ConnectQp(*s.dev, s.qpn, c);
      EXPECT_TRUE(st.ok()) << st;
    }
  }

  Side& a() { return s_[0]; }
  Side& b() { return s_[1]; }
  sim::MemWire& link() { return link_; }
  uint64_t now() const { return now_; }

  // Advances virtual time in 1 us steps, polling both devices, until `want`
  // completions have been collected from each side's CQ (or time runs out).
  bool Run(std::vector<Completion>* ca, size_t want_a, std::vector<Completion>* cb, size_t want_b,
           uint64_t max_ns = 5'000'000'000ull) {
    const uint64_t end = now_ + max_ns;
    Completion buf[64];
    while (now_ < end) {
      const uint32_t w = s_[0].dev->Poll(now_) + s_[1].dev->Poll(now_);
      for (uint32_t k; (k = s_[0].dev->PollCq(s_[0].cq, buf, 64)) > 0;) ca->insert(ca->end(), buf, buf + k);
      for (uint32_t k; (k = s_[1].dev->PollCq(s_[1].cq, buf, 64)) > 0;) cb->insert(cb->end(), buf, buf + k);
      if (ca->size() >= want_a && cb->size() >= want_b) return true;
      now_ += w > 0 ? 1000 : 50'000;  // jump ahead when the wire is idle
    }
    return false;
  }

 private:
  static sim::MemWireConfig LinkConfig(Impairments imp, uint32_t seed, uint32_t pool_frames) {
    sim::MemWireConfig c;
    c.seed = seed;
    c.pool_frames = pool_frames;  // a small pool stops a sender mid-message
    c.queue_frames = 8192;
    for (auto& d : c.impair) {
      d.drop = imp.drop;
      d.duplicate = imp.duplicate;
      d.reorder = imp.reorder;
      d.corrupt = imp.corrupt;
    }
    return c;
  }

  sim::MemWire link_;
  Side s_[2];
  uint64_t now_ = 1'000'000;
};

inline SendWr MakeWr(uint64_t id, WrOpcode op, Side& local, uint64_t off, uint32_t len, Side& remote,
              uint64_t roff) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = op;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(local.mem.data()) + off, len, local.keys.lkey};
  wr.remote_addr = reinterpret_cast<uint64_t>(remote.mem.data()) + roff;
  wr.rkey = remote.keys.rkey;
  return wr;
}

inline RecvWr MakeRecv(uint64_t id, Side& s, uint64_t off, uint32_t len) {
  RecvWr wr;
  wr.wr_id = id;
  wr.num_sge = 1;
  wr.sg_list[0] = {reinterpret_cast<uint64_t>(s.mem.data()) + off, len, s.keys.lkey};
  return wr;
}

inline void Fill(std::vector<uint8_t>& m, uint64_t off, uint32_t len, uint32_t seed) {
  for (uint32_t i = 0; i < len; ++i) m[off + i] = static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 8)) ^ seed);
}

}  // namespace droce::core::testing

#endif  // DROCE_TESTS_SUPPORT_RC_PAIR_FIXTURE_H_
