// What the single-QP fuzz bodies (responder_fuzz_body.h, sack_fuzz_body.h)
// share: a device on a scripted port with one RC QP brought to RTR towards a
// fake peer (10.0.0.2, QPN 0x99, path MTU 256), frames from that peer built
// from fields and queued for the device, checks on what the device sends, and
// the reader of the fuzz input.
#ifndef DROCE_TESTS_SUPPORT_FUZZ_PEER_H_
#define DROCE_TESTS_SUPPORT_FUZZ_PEER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"

namespace droce::core::fuzz {

// Reads the fuzz input as big-endian fields of n bytes; zeros once it is
// used up.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t Take(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }
  bool more() const { return pos_ < size_; }
  size_t pos() const { return pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A device whose only port is a ScriptedIo, and its one QP's peer.
class FuzzPeerQp {
 protected:
  static constexpr uint32_t kPeerQpn = 0x99;

  explicit FuzzPeerQp(const DeviceConfig& config) : dev_(config, &io_) {}

  // Small tables: the fuzzer builds a device per input.
  static DeviceConfig BaseConfig() {
    DeviceConfig c;
    c.ipv4 = 0x0A000001;
    c.max_mr = 16;
    return c;
  }

  // qpn_ from RESET to INIT (accepting `access` from the peer) and on to RTR
  // towards the peer, expecting `rq_psn` next. Errors are ignored: the
  // bodies check what the QP does, whatever state it reached.
  void ToRtr(uint32_t access, uint32_t rq_psn, uint8_t min_rnr_timer = transport::QpAttr{}.min_rnr_timer) {
    transport::QpAttr a;
    a.qp_state = transport::QpState::kInit;
    a.qp_access_flags = access;
    (void)dev_.ModifyQp(qpn_, a, transport::kAttrState | transport::kAttrPkeyIndex | transport::kAttrPort |
                                     transport::kAttrAccessFlags);
    a.qp_state = transport::QpState::kRtr;
    a.ah.dgid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
    a.ah.sgid_index = 1;
    a.ah.dmac_valid = true;
    a.path_mtu = 256;
    a.dest_qp_num = kPeerQpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = min_rnr_timer;
    (void)dev_.ModifyQp(qpn_, a, transport::kAttrState | transport::kAttrAv | transport::kAttrPathMtu |
                                     transport::kAttrDestQpn | transport::kAttrRqPsn |
                                     transport::kAttrMaxDestRdAtomic | transport::kAttrMinRnrTimer);
  }

  // A frame from the peer to the device: the route filled in, the rest for
  // the caller.
  wire::PacketFields FromPeer() {
    wire::PacketFields f;
    f.route.src_mac = {2, 0, 0, 0, 0, 2};
    f.route.dst_mac = dev_.config().mac;
    f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
    f.route.dst_ip = dev_.gids()[1];
    return f;
  }

  // Serializes `f` and queues it for the device's next poll; false (nothing
  // queued) when the fields do not make a frame.
  bool Queue(const wire::PacketFields& f) {
    std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
    auto n = wire::SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
    if (!n.ok()) return false;
    frame.resize(*n);
    io_.rx.push_back(std::move(frame));
    return true;
  }

  // Every frame the device sent since the last call must parse and verify
  // (else abort); `check(frame, parsed)` may abort on more. Then forgets them.
  template <typename Check>
  void CheckSent(Check check) {
    for (const auto& b : io_.sent) {
      const wire::ParsedPacket p = wire::ParseAndVerify(b.data(), static_cast<uint32_t>(b.size()));
      if (!p.ok()) std::abort();
      check(b, p);
    }
    io_.sent.clear();
  }

  sim::ScriptedIo io_;
  Device dev_;
  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0;
};

}  // namespace droce::core::fuzz

#endif  // DROCE_TESTS_SUPPORT_FUZZ_PEER_H_
