// The control QP of a droce-testpmd session: small SENDs that open the
// session (the hello: the peer's buffer address, rkey and run shape) and
// start and end the runs (doc/testpmd.md). No DPDK here: the unit test runs
// two channels over sim::MemWire on virtual time.
//
// The hello exchange is done once this side holds the peer's hello and the
// peer acknowledged ours; holding the peer's hello alone is not enough. A
// control QP that ran out of retries while the peer was absent (on the
// fabric the switch drops frames for a QPN nobody owns yet) is started over,
// and the peer's hello may arrive just before such a QP errs: a side that
// stopped there would go on with a QP that never delivers its own hello,
// and the peer would wait for that hello until its deadline. So until both
// hold, a control QP in the error state is started over: its receive side
// keeps the PSN it expects (a peer whose hello it took sends its next
// message with the next PSN), its hello goes again with the first PSN (a
// peer that took it but whose ACK was lost sees a duplicate and
// acknowledges it again).
#ifndef DROCE_APPS_TESTPMD_CONTROL_CHANNEL_H_
#define DROCE_APPS_TESTPMD_CONTROL_CHANNEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/connect.h"
#include "core/device.h"

namespace droce::testpmd {

// One run: client start(engine) -> server ready -> the engine's data ->
// client bye(n). quit ends the server.
enum class CtrlType : uint32_t { kHello = 1, kBye = 2, kStart = 3, kReady = 4, kQuit = 5 };
struct CtrlMsg {
  uint64_t magic;  // kCtrlMagic
  uint32_t type;
  uint32_t rkey;
  uint64_t va;
  uint64_t value;  // hello: EncodeRunShape; bye: messages sent (lets the passive side verify); start: engine index
};

// What the two ends of a session must agree on, carried by the hello: the
// path MTU (fixed when a QP goes to RTR; a responder NAKs packets longer than
// its own) and the data buffer's slots (`outstanding` of `size` bytes: the
// active side writes message k into slot k mod outstanding and the passive
// side verifies the slots by that rule).
struct RunShape {
  uint32_t mtu = 0;          // < 2^16
  uint32_t outstanding = 0;  // < 2^16
  uint32_t size = 0;
};
inline uint64_t EncodeRunShape(const RunShape& s) {
  return uint64_t{s.mtu & 0xFFFF} | uint64_t{s.outstanding & 0xFFFF} << 16 | uint64_t{s.size} << 32;
}
inline RunShape DecodeRunShape(uint64_t v) {
  return {static_cast<uint32_t>(v & 0xFFFF), static_cast<uint32_t>(v >> 16 & 0xFFFF), static_cast<uint32_t>(v >> 32)};
}
// Empty if the peer's shape is this side's; else what differs and which
// options to give both ends.
std::string RunShapeMismatch(const RunShape& own, const RunShape& peer);
inline constexpr uint64_t kCtrlMagic = 0x64726F6365637472ull;  // "droce ctr"
inline constexpr uint64_t kCtrlWrIdBase = 1ull << 62;            // control WRs: this and the one below
inline constexpr uint32_t kCtrlRecvs = 8;                         // receives kept posted
inline constexpr uint32_t kCtrlAreaBytes = 4096;  // 8 send slots of 64 bytes, receive slots from 2048

class ControlChannel {
 public:
  // QP `qpn` of `dev` (RESET, its CQ polled by the owner, who hands control
  // completions to Consume); `area`: kCtrlAreaBytes of a buffer registered
  // with `lkey` at address `area_va`. Messages carry `rkey` and `va`: the
  // peer's view of this side's buffer.
  ControlChannel(core::Device& dev, uint32_t qpn, uint8_t* area, uint64_t area_va, uint32_t lkey, uint32_t rkey,
                 uint64_t va)
      : dev_(dev), qpn_(qpn), area_(area), area_va_(area_va), lkey_(lkey), rkey_(rkey), va_(va) {}

  // Connects the QP to the peer of `c`, posts the receives and sends the
  // hello carrying `value`.
  absl::Status StartHello(const core::ConnectParams& c, uint64_t value);
  // Call after every poll round: true once the exchange is done (peer_hello()
  // then holds the peer's); restarts a QP that erred before that.
  absl::StatusOr<bool> HelloDone();
  const CtrlMsg& peer_hello() const { return peer_hello_; }
  bool have_peer_hello() const { return have_peer_hello_; }
  uint32_t restarts() const { return restarts_; }

  void Send(CtrlType type, uint64_t value);
  // A completion of the owner's CQ: false if it is not a control WR's. A
  // failed one counts in *errors, except during the hello exchange (whose
  // failures are restarts, not errors of a run).
  bool Consume(const queue::Completion& wc, uint64_t* errors);
  bool Has(CtrlType type) const;
  CtrlMsg Take(CtrlType type);  // Has(type) must be true

 private:
  void PostRecv(uint32_t k);
  absl::Status Restart();

  core::Device& dev_;
  const uint32_t qpn_;
  uint8_t* const area_;
  const uint64_t area_va_;
  const uint32_t lkey_, rkey_;
  const uint64_t va_;
  core::ConnectParams params_;
  uint64_t hello_value_ = 0;
  uint64_t sends_ = 0;
  bool in_hello_ = false;
  bool hello_acked_ = false;
  bool have_peer_hello_ = false;
  uint32_t restarts_ = 0;
  CtrlMsg peer_hello_{};
  std::vector<CtrlMsg> inbox_;
};

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_CONTROL_CHANNEL_H_
