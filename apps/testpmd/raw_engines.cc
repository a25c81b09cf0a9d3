// Raw-wire baselines on the same port, bypassing droce entirely, so droce's
// numbers can be read as ratios of what the wire itself does:
//   raw_lat:    the client sends one --size frame, the server echoes it; half
//               the round trip is one sample;
//   raw_stream: the client streams --size frames for the duration, --burst
//               of them per transmit burst; the server counts what arrives,
//               and with --raw-ack answers each receive burst with one 64 B
//               frame (the shape of droce's coalesced ACK), which the client
//               drains. With --memif-direct both ends use the verbs runtime's
//               memif path (MemifTx/MemifRx), so `--size 138 --raw-ack` is
//               the wire a 64 B RDMA WRITE stream takes, without droce.
// Frames are plain Ethernet (EtherType 0x88B5, local experimental), so droce
// would ignore them anyway.
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "apps/testpmd/session.h"

namespace droce::testpmd {
namespace {

constexpr uint16_t kRawEtherType = 0x88B5;
constexpr uint64_t kStop = ~0ull;

// Builds up to n frames of `len` bytes, sequence numbers seq, seq + 1, ...,
// and sends them in one burst; returns how many the port took.
uint32_t SendFrames(Session& s, uint64_t seq, uint32_t n, uint32_t len) {
  pktio::Frame f[32];
  const uint16_t got = s.port->AllocTx(f, static_cast<uint16_t>(std::min<uint32_t>(n, 32)));
  for (uint16_t i = 0; i < got; ++i) {
    uint8_t* d = f[i].data;
    std::memset(d, 0, 64);
    std::memcpy(d, s.opt.peer_mac.data(), 6);
    std::memcpy(d + 6, s.opt.mac.data(), 6);
    d[12] = kRawEtherType >> 8;
    d[13] = kRawEtherType & 0xFF;
    const uint64_t q = seq + i;
    std::memcpy(d + 14, &q, 8);
    f[i].len = len;
  }
  const uint16_t sent = got != 0 ? s.port->TxBurst(f, got) : 0;
  if (sent < got) s.port->Release(f + sent, static_cast<uint16_t>(got - sent));
  return sent;
}

bool SendFrame(Session& s, uint64_t seq) { return SendFrames(s, seq, 1, std::max<uint32_t>(s.opt.size, 64)) == 1; }

// Receives raw frames; returns how many, and the sequence number of the
// last; *stops += how many of them were end markers.
uint32_t Receive(Session& s, uint64_t* last_seq, uint32_t* stops = nullptr) {
  pktio::Frame f[32];
  const uint16_t n = s.port->RxBurst(f, 32);
  uint32_t raw = 0;
  for (uint16_t i = 0; i < n; ++i) {
    if (f[i].len >= 22 && f[i].data[12] == (kRawEtherType >> 8) && f[i].data[13] == (kRawEtherType & 0xFF)) {
      std::memcpy(last_seq, f[i].data + 14, 8);
      ++raw;
      if (stops != nullptr && *last_seq == kStop) ++*stops;
    }
  }
  if (n) s.port->Release(f, n);
  return raw;
}

// Returns false once the link is down: the peer left (memif takes the rings,
// and any end marker still in them, with it).
bool Idle(Session& s, uint32_t* idle) {
  s.ServeRequests();
  if (++*idle > s.opt.idle_spins) {
    sched_yield();
    return s.port->RefreshLink();
  }
  return true;
}

// The end marker must get through a full ring: retry for up to a second.
void SendStop(Session& s) {
  const uint64_t until = s.NowNs() + 1'000'000'000;
  for (int sent = 0; sent < 3 && s.NowNs() < until;) sent += SendFrame(s, kStop) ? 1 : 0;
}

void LatClient(Session& s, uint64_t deadline) {
  uint64_t seq = 0;
  while (!s.Expired(deadline)) {
    const uint64_t t0 = s.NowNs();
    if (!SendFrame(s, seq)) continue;
    uint64_t got = kStop;
    uint32_t idle = 0;
    const uint64_t give_up = s.NowNs() + 1'000'000'000;
    while (got != seq && s.NowNs() < give_up) {
      if (Receive(s, &got) == 0 && !Idle(s, &idle)) break;
    }
    if (got != seq) {
      ++s.stats.errors;
      break;
    }
    s.stats.latencies_us.push_back(double(s.NowNs() - t0) / 2000.0);
    ++s.stats.messages;
    ++seq;
  }
  SendStop(s);
}

void LatServer(Session& s) {
  uint32_t idle = 0;
  for (;;) {
    uint64_t seq;
    if (Receive(s, &seq) == 0) {
      if (!Idle(s, &idle)) break;
      continue;
    }
    idle = 0;
    if (seq == kStop) break;
    SendFrame(s, seq);
    ++s.stats.messages;
  }
}

// Takes whatever arrived (the server's answers) and gives it back; returns
// how many frames.
uint32_t Drain(Session& s) {
  pktio::Frame f[32];
  const uint16_t n = s.port->RxBurst(f, 32);
  if (n) s.port->Release(f, n);
  return n;
}

void StreamClient(Session& s, uint64_t deadline) {
  uint64_t seq = 0;
  const uint32_t len = std::max<uint32_t>(s.opt.size, 64);
  uint64_t answers = 0;
  while (!s.Expired(deadline)) {
    s.ServeRequests();
    if (s.opt.raw_ack) answers += Drain(s);
    const uint32_t sent = SendFrames(s, seq, s.opt.burst, len);
    seq += sent;
    s.stats.messages += sent;
    s.stats.bytes += uint64_t{sent} * s.opt.size;
  }
  // A server asked to answer every burst that answered none is broken.
  if (s.opt.raw_ack && s.stats.messages > 0 && answers == 0) ++s.stats.errors;
  SendStop(s);
}

void StreamServer(Session& s) {
  uint32_t idle = 0;
  const uint64_t start = s.NowNs();
  for (;;) {
    uint64_t seq = 0;
    uint32_t stops = 0;
    const uint32_t n = Receive(s, &seq, &stops);
    if (n == 0) {
      if (!Idle(s, &idle) || s.NowNs() - start > 600'000'000'000ull) break;
      continue;
    }
    idle = 0;
    // The stream's last frames may share the end marker's burst.
    const uint32_t data = n - stops;
    if (data != 0 && s.opt.raw_ack) SendFrames(s, seq, 1, 64);
    s.stats.messages += data;
    s.stats.bytes += uint64_t{data} * s.opt.size;
    if (stops != 0) break;
  }
}

}  // namespace

extern const Engine kRawLat{"raw_lat", "raw frame ping-pong (no droce)", LatClient, LatServer, nullptr};
extern const Engine kRawStream{"raw_stream", "raw frame stream (no droce)", StreamClient, StreamServer, nullptr};

}  // namespace droce::testpmd
