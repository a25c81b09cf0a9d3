// Latency engine (write_lat), as perftest's ib_write_lat measures it: the
// client RDMA-WRITEs a message into the server's slot 0; the server sees its
// last bytes change and WRITEs the same message back; the client's time from
// post to seeing the echo, halved, is one latency sample.
#include <algorithm>
#include <cstring>

#include "apps/testpmd/session.h"

namespace droce::testpmd {
namespace {

uint64_t LastWord(const uint8_t* p, uint32_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p + size - 8, 8);
  return v;
}

// Message `seq`: the usual pattern, with seq also in its last 8 bytes (bytes
// are placed in order, so when the last word shows seq the message is whole).
void Prepare(uint8_t* p, uint32_t size, uint64_t seq) {
  FillPattern(p, size, seq);
  std::memcpy(p + size - 8, &seq, 8);
}

void Write(Session& s, uint64_t seq) {
  transport::SendWr wr;
  wr.wr_id = seq;
  wr.opcode = transport::WrOpcode::kRdmaWrite;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {s.slot_va(1), s.opt.size, s.keys.lkey};
  wr.remote_addr = s.peer_va;  // the peer's slot 0
  wr.rkey = s.peer_rkey;
  if (s.opt.size <= 256) wr.flags |= transport::kSendInline;
  (void)s.dev->PostSend(s.qpn, wr);
}

bool Valid(Session& s, uint64_t seq) {
  std::vector<uint8_t> want(s.opt.size);
  Prepare(want.data(), s.opt.size, seq);
  return std::memcmp(s.slot(0), want.data(), s.opt.size) == 0;
}

void DrainSendCompletions(Session& s) {
  queue::Completion wc[16];
  const uint32_t n = s.PollCompletions(wc, 16);
  for (uint32_t i = 0; i < n; ++i) s.stats.errors += wc[i].status != queue::WcStatus::kSuccess;
}

void LatClient(Session& s, uint64_t deadline) {
  const uint64_t limit = s.opt.iterations ? s.opt.iterations : UINT64_MAX;
  uint64_t seq = 1;
  std::memset(s.slot(0), 0, s.opt.size);  // the last run's echo must not look like this run's
  for (; seq <= limit && !s.Expired(deadline) && s.stats.errors == 0; ++seq) {
    Prepare(s.slot(1), s.opt.size, seq);
    const uint64_t t0 = s.NowNs();
    Write(s, seq);
    while (LastWord(s.slot(0), s.opt.size) != seq) {
      s.Progress();
      DrainSendCompletions(s);
      if (s.NowNs() - t0 > 5'000'000'000ull) {
        ++s.stats.errors;  // the echo never came
        break;
      }
    }
    s.stats.latencies_us.push_back(double(s.NowNs() - t0) / 2000.0);
    if (!Valid(s, seq)) ++s.stats.verify_failures;
    ++s.stats.messages;
    s.stats.bytes += s.opt.size;
  }
  s.SendCtrl(CtrlType::kBye, seq - 1);
}

void LatPrepare(Session& s) { std::memset(s.slot(0), 0, s.opt.size); }

void LatServer(Session& s) {
  uint64_t seen = 0;
  while (!s.HasCtrl(CtrlType::kBye)) {
    if (s.StopRequested()) return;  // this side quits mid-run
    s.Progress();
    DrainSendCompletions(s);
    const uint64_t seq = LastWord(s.slot(0), s.opt.size);
    if (seq != seen && seq == seen + 1) {
      if (!Valid(s, seq)) ++s.stats.verify_failures;
      std::memcpy(s.slot(1), s.slot(0), s.opt.size);  // echo what arrived
      Write(s, seq);
      seen = seq;
      ++s.stats.messages;
      s.stats.bytes += s.opt.size;
    }
  }
  s.TakeCtrl(CtrlType::kBye);
}

}  // namespace

extern const Engine kWriteLat{"write_lat", "RDMA WRITE ping-pong latency", LatClient, LatServer, LatPrepare};

}  // namespace droce::testpmd
