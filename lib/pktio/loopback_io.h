// A NIC's internal loopback in front of any BurstIo: frames addressed to the
// device's own MAC never reach the wire; they come back on the next RxBurst,
// ahead of what the wire delivered. rxe does the same in rxe_net.c (a packet
// whose destination is the device's own address is handed to its receive
// path), and the pyverbs conformance suite depends on it: it connects two QPs
// of one device to each other.
//
// The frames are the transmit buffers themselves (no copy): the inner backend
// still owns them, and Release() on the receive side returns them to it.
// A full loopback ring refuses frames exactly like a full port (TxBurst
// returns fewer), so the device's backpressure handling applies unchanged.
#ifndef DROCE_LIB_PKTIO_LOOPBACK_IO_H_
#define DROCE_LIB_PKTIO_LOOPBACK_IO_H_

#include <array>
#include <cstdint>
#include <vector>

#include "pktio/burst_io.h"

namespace droce::pktio {

struct LoopbackCounters {
  uint64_t looped = 0;       // frames turned around to the receive side
  uint64_t ring_full = 0;    // times a loopback frame was refused (ring full)
  uint64_t dropped = 0;      // gather frames too long to flatten (none a transport builds)
};

class LoopbackIo final : public BurstIo {
 public:
  // `inner` may be null (a device model with no port: nothing moves).
  LoopbackIo(BurstIo* inner, const std::array<uint8_t, 6>& own_mac, uint32_t ring_frames = 1024);
  ~LoopbackIo() override;
  LoopbackIo(const LoopbackIo&) = delete;
  LoopbackIo& operator=(const LoopbackIo&) = delete;

  uint16_t RxBurst(Frame* frames, uint16_t n) override;
  uint16_t AllocTx(Frame* frames, uint16_t n) override { return inner_->AllocTx(frames, n); }
  uint16_t TxBurst(Frame* frames, uint16_t n) override;
  void Release(Frame* frames, uint16_t n) override { inner_->Release(frames, n); }
  bool ReadConcurrently() const override { return inner_ == nullptr || inner_->ReadConcurrently(); }
  // Looped gather frames are flattened (TxBurst); the rest go to inner.
  bool TakesGather() const override { return inner_ != nullptr && inner_->TakesGather(); }
  // Looped frames are whole; the port's may be lent.
  bool StartLending() override { return inner_ != nullptr && inner_->StartLending(); }

  // On a shared port (a droced fabric: other processes own the device's
  // other QPs) only RoCEv2 frames for QPNs [first, first + count) are this
  // process's; frames to the device's MAC for any other QPN leave through
  // the port (the switch steers them). By default every QPN is ours.
  void SetOwnQpns(uint32_t first, uint32_t count) {
    own_qpn_first_ = first;
    own_qpn_count_ = count;
  }

  const LoopbackCounters& counters() const { return counters_; }
  uint32_t pending() const { return count_; }

 private:
  bool IsOwn(const Frame& f, uint32_t mac_lo, uint16_t mac_hi) const;

  BurstIo* inner_;
  std::array<uint8_t, 6> mac_;
  uint32_t own_qpn_first_ = 0;
  uint32_t own_qpn_count_ = 1u << 24;  // every QPN
  std::vector<Frame> ring_;  // looped frames waiting for RxBurst, FIFO
  uint32_t head_ = 0;
  uint32_t count_ = 0;
  LoopbackCounters counters_;
};

}  // namespace droce::pktio

#endif  // DROCE_LIB_PKTIO_LOOPBACK_IO_H_
