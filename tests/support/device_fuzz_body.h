// Stateful fuzzing of a whole device: SEQUENCES of frames (and of the
// program's own verbs calls) against a core::Device with two live RC QPs at
// RTS, connected to a fake peer, and guarded memory. Frames are built from
// fields so they reach the QPs (valid ICRC, the QP's QPN, PSNs near the
// expected ones, the path's addresses) and then have headers mutated (P_Key,
// addresses, VLAN, TTL, opcode...), so both the receive checks and the
// transport state machines see hostile but well-formed traffic.
//
// Invariants, checked after every step (a violation aborts):
// - the guard bytes around every region never change;
// - regions a peer may not write (remote-read only, local only, another
//   PD's) never change; the full-access region changes only at offsets some
//   frame's RETH/AtomicETH named or the receive window of posted receives;
// - every frame the device sends parses and carries a valid ICRC.
// Shared by the libFuzzer target (tests/fuzz/device_fuzz.cc) and a
// deterministic random-input unit test (lib/core/device_fuzz_test.cc).
#ifndef DROCE_TESTS_SUPPORT_DEVICE_FUZZ_BODY_H_
#define DROCE_TESTS_SUPPORT_DEVICE_FUZZ_BODY_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/byte_order.h"
#include "wire/fields.h"
#include "wire/psn.h"

namespace droce::core::fuzz {

class DeviceFuzz {
 public:
  static constexpr uint32_t kRegion = 4096;
  static constexpr uint32_t kGuard = 64;
  static constexpr uint8_t kGuardByte = 0xA7;
  static constexpr int kRegions = 4;  // 0: full access, 1: remote read, 2: local only, 3: another PD
  static constexpr uint64_t kIova[kRegions] = {0x100000, 0x200000, 0x300000, 0x400000};
  static constexpr uint32_t kPeerQpn = 0x4242;
  static constexpr uint32_t kRecvOffset = 2048;  // receives land in region 0 from here
  static constexpr uint32_t kRecvLen = 1024;

  DeviceFuzz() : dev_(Config(), &io_) {
    using namespace droce::mem;
    pd_ = dev_.AllocPd();
    other_pd_ = dev_.AllocPd();
    cq_ = *dev_.CreateCq(4096);
    const uint32_t access[kRegions] = {kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic, kRemoteRead,
                                       kLocalWrite, kLocalWrite | kRemoteWrite | kRemoteRead | kRemoteAtomic};
    for (int i = 0; i < kRegions; ++i) {
      buf_[i].assign(kRegion + 2 * kGuard, kGuardByte);
      for (uint32_t k = 0; k < kRegion; ++k) buf_[i][kGuard + k] = static_cast<uint8_t>(k * 13 + i);
      keys_[i] = *dev_.RegMr(i == 3 ? other_pd_ : pd_, buf_[i].data() + kGuard, kRegion, kIova[i], access[i]);
      pristine_[i] = buf_[i];
    }
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_send_wr = 64;
    init.caps.max_recv_wr = 64;
    for (int q = 0; q < 2; ++q) {
      qpn_[q] = *dev_.CreateQp(init);
      Connect(q);
    }
  }

  void Run(const uint8_t* data, size_t size) {
    data_ = data;
    size_ = size;
    pos_ = 0;
    while (pos_ < size_) {
      const uint8_t op = Take(1);
      switch (op % 8) {
        case 0: case 1: case 2: case 3: case 4:
          Inject(op);
          break;
        case 5:
          PostFromProgram();
          break;
        case 6:
          PostRecv(static_cast<int>(Take(1) & 1));
          break;
        case 7:
          now_ += (Take(1) % 4 == 0) ? 50'000'000 : 10'000;  // sometimes past the retry timer
          break;
      }
      dev_.Poll(now_);
      now_ += 1000;
      Check();
      for (int q = 0; q < 2; ++q) {
        if (dev_.qp(qpn_[q])->state() == transport::QpState::kErr) {
          ++errors_;
          Connect(q);
        }
      }
      queue::Completion wc[16];
      while (dev_.PollCq(cq_, wc, 16) > 0) {
      }
    }
    for (int i = 0; i < 4; ++i) dev_.Poll(now_ += 100'000'000);
    Check();
  }

  uint64_t errors() const { return errors_; }
  uint64_t frames() const { return frames_; }
  const DeviceCounters& counters() const { return dev_.counters(); }
  // Frames the device took by its QPs' header predictions (the predicted receive path).
  uint64_t predicted() const { return dev_.counters().rx_predicted; }
  uint64_t qp_rx_packets() {
    return dev_.qp(qpn_[0])->counters().rx_packets + dev_.qp(qpn_[1])->counters().rx_packets;
  }

 private:
  static DeviceConfig Config() {
    DeviceConfig c;
    c.mac = {0x02, 0, 0, 0, 0, 0x01};
    c.ipv4 = 0x0A000001;
    c.max_mr = 16;
    c.max_qp = 4;
    c.qpn_base = 0x1000;  // reproducible inputs: the same QPNs every run
    return c;
  }
  static constexpr Gid kPeerGid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};

  uint64_t Take(size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return v;
  }

  void Connect(int q) {
    transport::QpAttr a;
    a.qp_state = transport::QpState::kReset;
    (void)dev_.ModifyQp(qpn_[q], a, transport::kAttrState);
    ConnectParams c;
    c.peer_gid = kPeerGid;
    c.peer_mac = {0x02, 0, 0, 0, 0, 0x02};
    c.peer_qpn = kPeerQpn + q;
    c.mtu = 256;
    c.rq_psn = 1000 * (q + 1);
    c.sq_psn = 5000 * (q + 1);
    c.timeout = 10;
    c.retry_cnt = 3;
    c.rnr_retry = 3;
    if (!ConnectQp(dev_, qpn_[q], c).ok()) std::abort();
    for (int i = 0; i < 4; ++i) PostRecv(q);
  }

  void PostRecv(int q) {
    transport::RecvWr r;
    r.wr_id = 1;
    r.num_sge = 1;
    r.sg_list[0] = {kIova[0] + kRecvOffset, kRecvLen, keys_[0].lkey};
    (void)dev_.PostRecv(qpn_[q], r);
  }

  // The program's own requests: READs land in region 0's receive window,
  // WRITEs and SENDs read from region 0 or 1 (local reads are allowed).
  void PostFromProgram() {
    const uint8_t sel = static_cast<uint8_t>(Take(1));
    transport::SendWr w;
    w.wr_id = 2;
    w.flags = transport::kSendSignaled;
    static constexpr transport::WrOpcode kOps[] = {transport::WrOpcode::kRdmaWrite, transport::WrOpcode::kRdmaRead,
                                                   transport::WrOpcode::kSend,
                                                   transport::WrOpcode::kAtomicFetchAndAdd};
    w.opcode = kOps[sel % 4];
    const uint32_t len = w.opcode == transport::WrOpcode::kAtomicFetchAndAdd ? 8 : static_cast<uint32_t>(Take(1)) * 4;
    const bool into_local = w.opcode == transport::WrOpcode::kRdmaRead ||
                            w.opcode == transport::WrOpcode::kAtomicFetchAndAdd;
    const int region = into_local ? 0 : static_cast<int>((sel >> 2) & 1);
    const uint64_t off = into_local ? kRecvOffset : 0;
    w.num_sge = 1;
    w.sg_list[0] = {kIova[region] + off, len, keys_[region].lkey};
    w.remote_addr = Take(2) * 8;
    w.rkey = static_cast<uint32_t>(Take(2));
    (void)dev_.PostSend(qpn_[(sel >> 3) & 1], w);
  }

  void Inject(uint8_t op) {
    const int q = (op >> 3) & 1;
    transport::Qp* qp = dev_.qp(qpn_[q]);
    static constexpr uint8_t kOps[] = {
        wire::kRcSendFirst,   wire::kRcSendMiddle,    wire::kRcSendLast,         wire::kRcSendOnly,
        wire::kRcSendOnlyImm, wire::kRcWriteFirst,    wire::kRcWriteMiddle,      wire::kRcWriteLast,
        wire::kRcWriteOnly,   wire::kRcWriteOnlyImm,  wire::kRcReadRequest,      wire::kRcCompareSwap,
        wire::kRcFetchAdd,    wire::kRcSendOnlyInv,   wire::kRcAcknowledge,      wire::kRcAtomicAcknowledge,
        wire::kRcReadResponseFirst, wire::kRcReadResponseMiddle, wire::kRcReadResponseLast,
        wire::kRcReadResponseOnly, wire::kCnp, wire::kUcSendOnly};
    const uint8_t sel = static_cast<uint8_t>(Take(1));
    wire::PacketFields f;
    f.route.src_mac = {0x02, 0, 0, 0, 0, 0x02};
    f.route.dst_mac = dev_.config().mac;
    f.route.src_ip = kPeerGid;
    f.route.dst_ip = dev_.gids()[1];
    f.bth.opcode = kOps[sel % sizeof(kOps)];
    f.bth.dest_qp = qpn_[q];
    f.bth.ack_req = (sel & 0x80) != 0;
    const wire::OpcodeInfo& info = wire::OpInfo(f.bth.opcode);
    const bool response = (info.roles & wire::kRoleResponse) != 0;
    // PSN: near what the responder expects, or, for responses, near what
    // the requester sent last; sometimes anywhere.
    const int8_t delta = static_cast<int8_t>(Take(1));
    const uint32_t base = response ? wire::PsnAdd(qp->next_psn(), -1) : qp->expected_psn();
    const int32_t near = (delta & 3) == 0 ? (delta >> 2) % 4 : 0;  // mostly the exact PSN
    f.bth.psn = (delta & 0x40) == 0x40 && (delta & 0x20) ? static_cast<uint32_t>(Take(3)) & 0xFFFFFF
                                                         : wire::PsnAdd(base, near);
    const uint8_t region = static_cast<uint8_t>(Take(1));
    const int r = region % kRegions;
    const int64_t offset = static_cast<int16_t>(Take(2)) % static_cast<int64_t>(kRegion + 64);
    const uint64_t va = (region & 0x80) ? Take(8) : kIova[r] + offset;
    const uint32_t rkey = (region & 0x40) ? static_cast<uint32_t>(Take(4)) : keys_[r].rkey;
    const uint32_t len = static_cast<uint32_t>(Take(2)) % 1024;
    f.reth_va = f.atomic_va = va;
    f.reth_rkey = f.atomic_rkey = f.ieth_rkey = rkey;
    f.reth_length = (region & 0x20) ? static_cast<uint32_t>(Take(4)) : len;
    f.atomic_swap_add = Take(2);
    f.atomic_compare = Take(2);
    f.aeth_syndrome = static_cast<uint8_t>(Take(1));
    f.aeth_msn = static_cast<uint32_t>(Take(1));
    f.imm_data = 0x01020304;
    std::vector<uint8_t> payload;
    if (info.roles & wire::kRolePayload) payload.assign(std::min<uint32_t>(len, 256), static_cast<uint8_t>(Take(1)));
    f.payload = payload;
    // Header mutations that the receive checks must catch (rarely: most
    // frames should reach the QPs).
    const uint8_t mut = static_cast<uint8_t>(Take(1));
    if (mut == 0xF1) f.bth.pkey = 0x1234;
    if (mut == 0xF2) f.bth.pkey = 0x7FFF;
    if (mut == 0xF3) f.route.src_ip[15] ^= 1;
    if (mut == 0xF4) f.route.dst_mac[5] ^= 1;
    if (mut == 0xF5) f.route.ttl = 0;
    if (mut == 0xF6) f.route.has_vlan = true, f.route.vlan_tci = 7;
    if (mut == 0xF7) f.bth.dest_qp = qpn_[1 - q];
    if (mut == 0xF8) f.route.ipv6 = true, f.route.dst_ip = dev_.gids()[0];
    std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
    auto n = wire::SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
    if (!n.ok()) return;
    frame.resize(*n);
    if (mut == 0xF9 && frame.size() > 30) frame[24] ^= 0x10;  // IPv4 header byte: checksum now wrong
    // The QP's frames match its header prediction once it has learnt one
    // (doc/rx-checks.md): bits flipped in the headers through the BTH, the
    // lengths and pad the predicted path checks per packet, a cut frame.
    // Each must be judged as the full parse and checks judge it.
    if (mut >= 0xE0 && mut < 0xF0) {
      const uint32_t at = static_cast<uint32_t>(Take(1)) % std::min<size_t>(frame.size(), 80);
      frame[at] ^= static_cast<uint8_t>(1u << (mut & 7));
    }
    if (mut == 0xFA) frame.resize(frame.size() - std::min<size_t>(frame.size(), Take(1) % 32));
    if (mut == 0xFB && frame.size() > 42) {  // IPv4 total length or UDP length, by up to +-8
      const uint32_t at = (Take(1) & 1) ? 16 : 38;
      wire::StoreBe16(frame.data() + at, static_cast<uint16_t>(wire::LoadBe16(frame.data() + at) +
                                                                static_cast<int8_t>(Take(1)) % 9));
    }
    if (mut == 0xFC && frame.size() > 43) frame[43] ^= static_cast<uint8_t>((Take(1) & 3) << 4);  // BTH pad
    // Remember what a request may write in region 0 (RETH/AtomicETH target).
    if (rkey == keys_[0].rkey && va >= kIova[0] && va < kIova[0] + kRegion) {
      const uint64_t end = std::min<uint64_t>(kIova[0] + kRegion, va + std::max<uint32_t>(f.reth_length, 8) + 256);
      for (uint64_t a = va; a < end; ++a) writable_[a - kIova[0]] = true;
    }
    io_.rx.push_back(std::move(frame));
    ++frames_;
  }

  void Check() {
    for (const auto& b : io_.sent) {
      if (!wire::ParseAndVerify(b.data(), static_cast<uint32_t>(b.size())).ok()) std::abort();
    }
    io_.sent.clear();
    for (int i = 0; i < kRegions; ++i) {
      for (uint32_t k = 0; k < kGuard; ++k) {
        if (buf_[i][k] != kGuardByte || buf_[i][kGuard + kRegion + k] != kGuardByte) std::abort();
      }
    }
    // Regions a peer may not write never change (1: remote read only;
    // 2: local only, and the program's own requests only read it; 3: PD).
    for (int i = 1; i < kRegions; ++i) {
      if (buf_[i] != pristine_[i]) std::abort();
    }
    // Region 0 changes only where some frame aimed or receives land.
    for (uint32_t k = 0; k < kRegion; ++k) {
      if (buf_[0][kGuard + k] == pristine_[0][kGuard + k]) continue;
      if (k >= kRecvOffset && k < kRecvOffset + kRecvLen) continue;
      if (!writable_[k]) std::abort();
    }
  }

  sim::ScriptedIo io_;
  Device dev_;
  uint32_t pd_ = 0, other_pd_ = 0, cq_ = 0, qpn_[2] = {};
  std::vector<uint8_t> buf_[kRegions], pristine_[kRegions];
  mem::MrKeys keys_[kRegions];
  bool writable_[kRegion] = {};
  const uint8_t* data_ = nullptr;
  size_t size_ = 0, pos_ = 0;
  uint64_t now_ = 1'000'000;
  uint64_t errors_ = 0, frames_ = 0;
};

}  // namespace droce::core::fuzz

#endif  // DROCE_TESTS_SUPPORT_DEVICE_FUZZ_BODY_H_
