// A switch egress port (EgressPort) in front of any BurstIo: frames given to
// TxBurst wait in the port's FIFO until their departure time at the port's
// line rate and go to the real port on the next burst call (any RxBurst or
// TxBurst, or Flush). As they leave, ECN-capable RoCEv2 frames the port
// marks get CE (the ICRC does not cover ECN), so the receiver's notification
// point answers with CNPs; with int_stamp, frames that carry an INT request
// (wire/int.h) get the port's hop record (and a new ICRC). droce-testpmd
// --bottleneck-gbps and the in-memory wire tests use it.
//
// Time comes from a clock the owner supplies: virtual time in tests,
// CLOCK_MONOTONIC on a live port.
#ifndef DROCE_SIM_SWITCH_EGRESS_PORT_IO_H_
#define DROCE_SIM_SWITCH_EGRESS_PORT_IO_H_

#include <cstdint>
#include <vector>

#include "pktio/burst_io.h"
#include "queue/ring.h"
#include "sim/switch/egress_port.h"

namespace droce::sim {

using pktio::BurstIo;
using pktio::Frame;
using pktio::kMaxFrameBytes;

struct EgressPortIoCounters {
  uint64_t accepted = 0;      // entered the FIFO
  uint64_t ce_marked = 0;     // of those, CE-marked (ECN-capable RoCEv2 only)
  uint64_t int_stamped = 0;   // INT requests that got this port's record
  uint64_t dropped = 0;       // tail-dropped by the port (or its frame cap)
  uint64_t forwarded = 0;     // handed to the port
  uint64_t port_refused = 0;  // the port did not take them when they departed
};

// What a port does to a leaving frame: CE if marked and ECN-capable, its INT
// record if `stamp` and the frame asks for one. Returns what it changed.
struct EgressEdits {
  bool marked = false;
  bool stamped = false;
};
EgressEdits EditLeavingFrame(uint8_t* frame, uint32_t len, bool mark, const wire::IntHop* stamp);

class EgressPortIo final : public BurstIo {
 public:
  using Clock = uint64_t (*)(void* ctx);
  // At most `max_held_frames` wait in the port (a fixed ring, the port's
  // max_packets): beyond them a frame is dropped, as the port's tail drop.
  EgressPortIo(BurstIo* port, const EgressPortConfig& config, Clock clock, void* clock_ctx,
               uint32_t max_held_frames = 4096);
  ~EgressPortIo() override;

  uint16_t RxBurst(Frame* frames, uint16_t n) override;
  uint16_t AllocTx(Frame* frames, uint16_t n) override { return port_->AllocTx(frames, n); }
  uint16_t TxBurst(Frame* frames, uint16_t n) override;
  void Release(Frame* frames, uint16_t n) override { port_->Release(frames, n); }

  // Sends every frame whose departure time has come.
  void Flush();
  EgressPort& port() { return port_model_; }
  const EgressPortIoCounters& counters() const { return counters_; }
  uint64_t now() const { return clock_(clock_ctx_); }

 private:
  BurstIo* port_;
  EgressPort port_model_;
  Clock clock_;
  void* clock_ctx_;
  queue::Ring<Frame> held_;  // in the FIFO, in order
  std::vector<Frame> out_;
  EgressPortIoCounters counters_;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_SWITCH_EGRESS_PORT_IO_H_
