// An emulated congestion point on a port: a BurstIo that sends what it is
// given through a Bottleneck (a switch egress FIFO drained at a line
// rate, RED/ECN marking, optional tail drop) before handing it to the real
// port. Marking sets CE on ECN-capable RoCEv2 frames (the ICRC does not
// cover ECN), so the receiver's notification point answers with CNPs and the
// sender's reaction point slows down, as behind a real switch.
//
// Time comes from a clock the owner supplies: virtual time in tests,
// CLOCK_MONOTONIC on a live port. Frames wait in the FIFO until their
// departure time and leave on the next call (any RxBurst or TxBurst).
#ifndef DROCE_SIM_SWITCH_BOTTLENECK_IO_H_
#define DROCE_SIM_SWITCH_BOTTLENECK_IO_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "sim/switch/bottleneck.h"
#include "pktio/burst_io.h"

namespace droce::sim {

using pktio::BurstIo;
using pktio::Frame;
using pktio::kMaxFrameBytes;

struct BottleneckIoCounters {
  uint64_t accepted = 0;      // entered the FIFO
  uint64_t ce_marked = 0;     // of those, CE-marked (ECN-capable RoCEv2 only)
  uint64_t dropped = 0;       // tail-dropped by the bottleneck (or its frame cap)
  uint64_t forwarded = 0;     // handed to the port
  uint64_t port_refused = 0;  // the port did not take them when they departed
};

class BottleneckIo final : public BurstIo {
 public:
  using Clock = uint64_t (*)(void* ctx);
  BottleneckIo(BurstIo* port, const BottleneckConfig& config, Clock clock, void* clock_ctx,
               uint32_t max_held_frames = 4096);
  ~BottleneckIo() override;

  uint16_t RxBurst(Frame* frames, uint16_t n) override;
  uint16_t AllocTx(Frame* frames, uint16_t n) override { return port_->AllocTx(frames, n); }
  uint16_t TxBurst(Frame* frames, uint16_t n) override;
  void Release(Frame* frames, uint16_t n) override { port_->Release(frames, n); }

  // Sends every frame whose departure time has come.
  void Flush();
  Bottleneck& bottleneck() { return bn_; }
  const BottleneckIoCounters& counters() const { return counters_; }
  uint64_t now() const { return clock_(clock_ctx_); }

 private:
  BurstIo* port_;
  Bottleneck bn_;
  Clock clock_;
  void* clock_ctx_;
  uint32_t max_held_;
  std::deque<Frame> held_;  // in the FIFO, in order
  std::vector<Frame> out_;
  BottleneckIoCounters counters_;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_SWITCH_BOTTLENECK_IO_H_
