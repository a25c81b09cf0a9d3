// A BurstIo for drivers that feed frames by hand: frames pushed into `rx`
// are received in order, and every transmitted frame is kept in `sent`.
// Used by capture replay and the responder fuzz harness.
#ifndef DROCE_SIM_WIRE_SCRIPTED_IO_H_
#define DROCE_SIM_WIRE_SCRIPTED_IO_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>
#include <vector>

#include "pktio/burst_io.h"

namespace droce::sim {

using pktio::BurstIo;
using pktio::Frame;
using pktio::kMaxFrameBytes;

class ScriptedIo final : public BurstIo {
 public:
  std::deque<std::vector<uint8_t>> rx;
  std::vector<std::vector<uint8_t>> sent;
  // How many more buffers AllocTx hands out: 0 is a port out of transmit
  // buffers, whose device keeps its responses queued.
  uint64_t tx_buffers = UINT64_MAX;

  uint16_t RxBurst(Frame* f, uint16_t n) override {
    uint16_t i = 0;
    for (; i < n && !rx.empty(); ++i) {
      auto b = std::make_unique<std::vector<uint8_t>>(std::move(rx.front()));
      rx.pop_front();
      f[i] = {b->data(), static_cast<uint32_t>(b->size()), static_cast<uint32_t>(b->size()), b.get()};
      held_.emplace(b.get(), std::move(b));
    }
    return i;
  }
  uint16_t AllocTx(Frame* f, uint16_t n) override {
    if (n > tx_buffers) n = static_cast<uint16_t>(tx_buffers);
    tx_buffers -= n;
    for (uint16_t i = 0; i < n; ++i) {
      auto b = std::make_unique<std::vector<uint8_t>>(kMaxFrameBytes, 0);
      f[i] = {b->data(), 0, kMaxFrameBytes, b.get()};
      held_.emplace(b.get(), std::move(b));
    }
    return n;
  }
  uint16_t TxBurst(Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      sent.emplace_back(f[i].data, f[i].data + f[i].len);
      held_.erase(f[i].handle);
    }
    return n;
  }
  // Buffers stay valid until released (or sent), so a loopback can hold a
  // transmitted frame and hand it back as a received one.
  void Release(Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) held_.erase(f[i].handle);
  }

 private:
  std::unordered_map<void*, std::unique_ptr<std::vector<uint8_t>>> held_;
};

}  // namespace droce::sim

#endif  // DROCE_SIM_WIRE_SCRIPTED_IO_H_
