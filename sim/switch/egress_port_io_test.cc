// A switch egress port in front of a port: frames leave at the line rate,
// in order, CE-marked by RED once the queue passes Kmin (ICRC still valid),
// tail-dropped when the buffer is full, INT requests stamped as they leave.
#include "sim/switch/egress_port_io.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "sim/wire/mem_wire.h"
#include "wire/fields.h"

namespace droce::sim {
namespace {

std::vector<uint8_t> Roce(uint32_t seq, uint32_t payload_bytes, uint8_t int_slots = 0) {
  wire::PacketFields f;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.route.tclass = wire::kEcnEct0;
  f.bth.opcode = wire::kRcSendOnly;
  f.bth.psn = seq;
  std::vector<uint8_t> payload(payload_bytes);
  std::memcpy(payload.data(), &seq, 4);
  f.payload = payload;
  f.has_int = int_slots != 0;
  f.int_stack.slots = int_slots;
  std::vector<uint8_t> out(kMaxFrameBytes);
  out.resize(*wire::SerializeFields(f, out.data(), kMaxFrameBytes));
  return out;
}

struct VirtualClock {
  uint64_t ns = 0;
  static uint64_t Now(void* self) { return static_cast<VirtualClock*>(self)->ns; }
};

struct Received {
  std::vector<uint32_t> seqs;
  int ce = 0, bad = 0;
};

void Drain(MemWire& w, Received* r) {
  Frame f[32];
  for (uint16_t n; (n = w.end(1).RxBurst(f, 32)) > 0;) {
    for (uint16_t i = 0; i < n; ++i) {
      const wire::ParsedPacket p = wire::ParseAndVerify(f[i].data, f[i].len);
      if (!p.ok()) {
        ++r->bad;
        continue;
      }
      uint32_t seq;
      std::memcpy(&seq, f[i].data + p.payload_offset, 4);
      r->seqs.push_back(seq);
      r->ce += p.ecn() == wire::kEcnCe;
    }
    w.end(1).Release(f, n);
  }
}

TEST(EgressPortIo, PacesAtLineRateInOrderAndMarksWhenTheQueueBuilds) {
  MemWire wire(MemWireConfig{});
  VirtualClock clock;
  EgressPortConfig cfg;
  cfg.line_rate_bps = 1'000'000'000;  // 1 Gb/s: 8 ns per byte
  cfg.kmin_bytes = 10'000;
  cfg.kmax_bytes = 40'000;
  cfg.pmax = 1.0;
  EgressPortIo bio(&wire.end(0), cfg, &VirtualClock::Now, &clock);
  std::vector<uint8_t> bytes;
  for (uint32_t i = 0; i < 100; ++i) {  // ~1.1 KB each, all at t=0: a 110 KB burst
    bytes = Roce(i, 1024);
    Frame f;
    ASSERT_EQ(bio.AllocTx(&f, 1), 1);
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = static_cast<uint32_t>(bytes.size());
    ASSERT_EQ(bio.TxBurst(&f, 1), 1);
  }
  const uint64_t per_frame_ns = bytes.size() * 8;
  Received r;
  Drain(wire, &r);
  EXPECT_LE(r.seqs.size(), 1u);  // nothing has had time to leave
  clock.ns = 10 * per_frame_ns;
  bio.Flush();
  Drain(wire, &r);
  EXPECT_EQ(r.seqs.size(), 10u);  // exactly what the line rate allows
  clock.ns = 1'000'000;
  bio.Flush();
  Drain(wire, &r);
  ASSERT_EQ(r.seqs.size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(r.seqs[i], i);  // FIFO
  EXPECT_EQ(r.bad, 0);            // marking keeps the ICRC valid
  EXPECT_GT(r.ce, 50);            // the queue passed Kmax for most of the burst
  EXPECT_LT(r.ce, 100);           // the first ~10 KB saw a short queue
  EXPECT_EQ(bio.counters().ce_marked, static_cast<uint64_t>(r.ce)) << "bottleneck marked " << bio.port().marked_packets();
}

TEST(EgressPortIo, TailDropsBeyondTheBuffer) {
  MemWire wire(MemWireConfig{});
  VirtualClock clock;
  EgressPortConfig cfg;
  cfg.line_rate_bps = 1'000'000'000;
  cfg.ecn = false;
  cfg.buffer_bytes = 20'000;
  EgressPortIo bio(&wire.end(0), cfg, &VirtualClock::Now, &clock);
  for (uint32_t i = 0; i < 50; ++i) {
    const std::vector<uint8_t> bytes = Roce(i, 1024);
    Frame f;
    ASSERT_EQ(bio.AllocTx(&f, 1), 1);
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = static_cast<uint32_t>(bytes.size());
    bio.TxBurst(&f, 1);
  }
  clock.ns = 10'000'000;
  bio.Flush();
  Received r;
  Drain(wire, &r);
  EXPECT_EQ(r.ce, 0);
  EXPECT_GT(bio.counters().dropped, 25u);
  EXPECT_EQ(r.seqs.size() + bio.counters().dropped, 50u);
}

TEST(EgressPortIo, StampsIntRequestsAsTheyLeave) {
  MemWire wire(MemWireConfig{});
  VirtualClock clock;
  EgressPortConfig cfg;
  cfg.line_rate_bps = 25'000'000'000;
  cfg.ecn = false;
  cfg.int_stamp = true;
  EgressPortIo bio(&wire.end(0), cfg, &VirtualClock::Now, &clock);
  for (uint32_t i = 0; i < 3; ++i) {
    const std::vector<uint8_t> bytes = Roce(i, 1024, i == 2 ? 0 : 2);  // the last asks for nothing
    Frame f;
    ASSERT_EQ(bio.AllocTx(&f, 1), 1);
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = static_cast<uint32_t>(bytes.size());
    bio.TxBurst(&f, 1);
  }
  clock.ns = 1'000'000;
  bio.Flush();
  Frame f[4];
  const uint16_t n = wire.end(1).RxBurst(f, 4);
  ASSERT_EQ(n, 3);
  uint32_t prev_tx = 0;
  for (uint16_t i = 0; i < 2; ++i) {
    const wire::ParsedPacket p = wire::ParseAndVerify(f[i].data, f[i].len);
    ASSERT_TRUE(p.ok()) << wire::ParseStatusName(p.status);  // the stamp rewrote the ICRC
    const wire::PacketFields g = wire::DecodeFields(f[i].data, p);
    ASSERT_TRUE(g.has_int);
    ASSERT_EQ(g.int_stack.hops, 1);
    EXPECT_EQ(g.int_stack.hop[0].line_rate_mbps, 25'000u);
    EXPECT_GT(g.int_stack.hop[0].tx_bytes, prev_tx);
    prev_tx = g.int_stack.hop[0].tx_bytes;
  }
  EXPECT_EQ(wire::ParseAndVerify(f[2].data, f[2].len).int_offset, 0);
  EXPECT_EQ(bio.counters().int_stamped, 2u);
  wire.end(1).Release(f, n);
}

}  // namespace
}  // namespace droce::sim
