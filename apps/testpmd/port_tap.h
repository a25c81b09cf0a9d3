// A BurstIo decorator for droce-testpmd: writes every frame sent and
// received to a pcap file (--pcap-out) and drops transmitted frames with a
// seeded probability (--drop-rate) to exercise go-back-N end to end on a
// real port. One indirect call per burst, as underneath.
#ifndef DROCE_APPS_TESTPMD_PORT_TAP_H_
#define DROCE_APPS_TESTPMD_PORT_TAP_H_

#include <time.h>

#include <cstdint>
#include <optional>

#include "drivers/pcap/pcap_io.h"
#include "pktio/burst_io.h"

namespace droce::testpmd {

class PortTap final : public pktio::BurstIo {
 public:
  PortTap(pktio::BurstIo* inner, double drop_rate, uint64_t seed, std::optional<pcapio::PcapWriter> pcap)
      : inner_(inner), drop_threshold_(static_cast<uint64_t>(drop_rate * 18446744073709551615.0)),
        state_(seed * 0x9E3779B97F4A7C15ull + 1), pcap_(std::move(pcap)) {}

  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override {
    const uint16_t got = inner_->RxBurst(f, n);
    if (pcap_) Capture(f, got);
    return got;
  }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return inner_->AllocTx(f, n); }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override {
    if (pcap_) Capture(f, n);
    if (drop_threshold_ == 0) return inner_->TxBurst(f, n);
    // Dropped frames count as sent (the wire lost them): release, compact the rest.
    pktio::Frame keep[64];
    uint16_t kept = 0;
    for (uint16_t i = 0; i < n; ++i) {
      if (Next() < drop_threshold_) {
        inner_->Release(&f[i], 1);
        ++dropped_;
      } else {
        keep[kept++] = f[i];
      }
    }
    const uint16_t sent = inner_->TxBurst(keep, kept);
    if (sent < kept) {
      // Keep the caller's contract: unsent frames are the tail it still owns.
      inner_->Release(keep + sent, kept - sent);
    }
    return n;
  }
  void Release(pktio::Frame* f, uint16_t n) override { inner_->Release(f, n); }
  uint64_t dropped() const { return dropped_; }
  uint64_t captured() const { return pcap_ ? pcap_->packets_written() : 0; }

 private:
  uint64_t Next() {  // xorshift64*
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  void Capture(const pktio::Frame* f, uint16_t n) {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const int64_t now = int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    for (uint16_t i = 0; i < n; ++i) (void)pcap_->Write({f[i].data, f[i].len}, now);
    // Flush per burst: a run that ends in an error exit keeps its capture.
    if (n > 0) (void)pcap_->Flush();
  }

  pktio::BurstIo* inner_;
  uint64_t drop_threshold_;
  uint64_t state_;
  std::optional<pcapio::PcapWriter> pcap_;
  uint64_t dropped_ = 0;
};

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_PORT_TAP_H_
