// libFuzzer target for in-band telemetry (wire/int.h) and what reads it:
// any bytes as an INT header (a parsed header re-encodes to the same bytes;
// a switch's stamp never writes outside it), as the INT header and payload
// of a RoCEv2 WRITE whose BTH says INT follows (ParsePacket, StampInt,
// DescribePacket), and as a stream of echoes and RTTs fed to HPCC and Swift,
// whose rates must stay in [min rate, line rate]. ASan catches any read or
// write outside the input.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cc/congestion_control.h"
#include "wire/fields.h"
#include "wire/int.h"
#include "wire/packet.h"

namespace {

using namespace droce;

void Header(const uint8_t* data, size_t size) {
  std::vector<uint8_t> buf(data, data + size);  // exactly sized: ASan sees overreads
  wire::IntStack s;
  const uint32_t n = wire::ParseInt(buf.data(), static_cast<uint32_t>(size), &s);
  if (n == 0) {
    if (wire::PushIntHop(buf.data(), static_cast<uint32_t>(size), wire::IntHop{1, 2, 3, 4})) std::abort();
    return;
  }
  if (n > size || s.hops > s.slots || s.slots > wire::kIntMaxHops) std::abort();
  std::vector<uint8_t> again(wire::kIntMaxBytes);
  if (wire::WriteInt(again.data(), s) != n || std::memcmp(again.data(), buf.data(), n) != 0) std::abort();
  const bool pushed = wire::PushIntHop(buf.data(), n, wire::IntHop{5, 6, 7, 8});
  if (pushed != (!s.echo && s.hops < s.slots)) std::abort();
}

void Frame(const uint8_t* data, size_t size) {
  wire::PacketFields f;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.bth.opcode = wire::kRcWriteOnly;
  f.reth_length = static_cast<uint32_t>(size);
  f.payload = {data, size};
  std::vector<uint8_t> frame(size + 200);
  auto n = wire::SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
  if (!n.ok()) return;
  frame.resize(*n);
  wire::ParsedPacket p = wire::ParsePacket(frame.data(), *n);
  if (!p.ok()) std::abort();
  frame[p.bth_offset + 4] |= wire::kBthIntFlag;  // the payload now starts with the INT header
  p = wire::ParsePacket(frame.data(), *n);
  if (!p.ok()) return;
  if (p.int_offset == 0 || p.payload_offset > p.icrc_offset) std::abort();
  (void)wire::DescribePacket(frame.data(), p);
  if (wire::StampInt(frame.data(), p, wire::IntHop{9, 9, 9, 9})) {
    const wire::ParsedPacket q = wire::ParseAndVerify(frame.data(), *n);
    if (!q.ok() || q.payload_offset != p.payload_offset) std::abort();
  }
}

void Algorithms(const uint8_t* data, size_t size) {
  constexpr uint64_t kLine = 100'000'000'000ull;
  for (const char* name : {"hpcc", "swift", "timely"}) {
    auto cfg = cc::ParseConfig(name, "", kLine);
    if (!cfg.ok()) std::abort();
    double min_rate = 0;
    cc::GetParam(*cfg, "min_rate_bps", &min_rate);
    cc::CongestionControl ctl;
    ctl.Start(cfg->ops, cfg->params);
    uint64_t now = 1;
    // Each 32-byte record: an RTT, a time step, acked packets, an echo's hop count.
    for (size_t at = 0; at + 32 <= size; at += 32) {
      uint64_t rtt, step;
      uint32_t acked;
      std::memcpy(&rtt, data + at, 8);
      std::memcpy(&step, data + at + 8, 8);
      std::memcpy(&acked, data + at + 16, 4);
      now += step >> 40;
      wire::IntStack s;
      cc::AckSample a;
      a.rtt_ns = rtt;
      a.acked_packets = acked;
      if ((data[at + 20] & 0x80) != 0) {
        // A decoded echo as a forging peer could make it: a hop count that
        // may exceed what fits, records from the bytes of the record.
        s.hops = s.slots = data[at + 20] % (wire::kIntMaxHops + 3);
        for (uint32_t i = 0; i < wire::kIntMaxHops; ++i) {
          std::memcpy(&s.hop[i], data + at + (i % 2) * 16, sizeof s.hop[i]);
          s.hop[i].timestamp_ns += static_cast<uint32_t>(now);
        }
        a.telemetry = &s;
      }
      ctl.OnSent(static_cast<uint32_t>(rtt), now);
      ctl.OnAck(a, now);
      if ((acked & 7) == 0) ctl.OnTimeout(now);
      const cc::Output& o = ctl.output();
      if (o.rate_bps > kLine || (o.rate_limited && o.rate_bps < static_cast<uint64_t>(min_rate))) std::abort();
      if (o.window_packets > 1'000'000) std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  switch (data[0] % 3) {
    case 0: Header(data + 1, size - 1); break;
    case 1: Frame(data + 1, size - 1); break;
    default: Algorithms(data + 1, size - 1); break;
  }
  return 0;
}
