// A BurstIo for drivers that feed frames by hand: frames pushed into `rx`
// are received in order, and every transmitted frame is kept in `sent`.
// Used by capture replay and the responder fuzz harness.
#ifndef DROCE_LIB_PKTIO_SCRIPTED_IO_H_
#define DROCE_LIB_PKTIO_SCRIPTED_IO_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "pktio/burst_io.h"

namespace droce::pktio {

class ScriptedIo final : public BurstIo {
 public:
  std::deque<std::vector<uint8_t>> rx;
  std::vector<std::vector<uint8_t>> sent;

  uint16_t RxBurst(Frame* f, uint16_t n) override {
    uint16_t i = 0;
    for (; i < n && !rx.empty(); ++i) {
      held_.push_back(std::move(rx.front()));  // deque: earlier frames stay put
      rx.pop_front();
      auto& b = held_.back();
      f[i] = {b.data(), static_cast<uint32_t>(b.size()), static_cast<uint32_t>(b.size()), nullptr};
    }
    return i;
  }
  uint16_t AllocTx(Frame* f, uint16_t n) override {
    tx_.resize(n);
    for (uint16_t i = 0; i < n; ++i) {
      tx_[i].assign(kMaxFrameBytes, 0);
      f[i] = {tx_[i].data(), 0, kMaxFrameBytes, nullptr};
    }
    return n;
  }
  uint16_t TxBurst(Frame* f, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) sent.emplace_back(f[i].data, f[i].data + f[i].len);
    return n;
  }
  void Release(Frame*, uint16_t) override { held_.clear(); }

 private:
  std::deque<std::vector<uint8_t>> held_;
  std::vector<std::vector<uint8_t>> tx_;
};

}  // namespace droce::pktio

#endif  // DROCE_LIB_PKTIO_SCRIPTED_IO_H_
