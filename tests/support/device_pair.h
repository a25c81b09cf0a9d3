// Test fixture: two devices, each on a port of the test's choosing (usually a
// wrapper around one end of an in-memory wire that watches or shapes what
// the device transmits), with N RC QPs each connected to the same-numbered QP
// of the other, driven in virtual time.
#ifndef DROCE_TESTS_SUPPORT_DEVICE_PAIR_H_
#define DROCE_TESTS_SUPPORT_DEVICE_PAIR_H_
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "pktio/burst_io.h"

namespace droce::core::testing {

// Hands every call to `inner`. A test port derives from it and overrides the
// calls it watches or shapes (a full TX ring, a sink for one QP's packets, a
// burst counter), so the pass-through calls are written once.
class ForwardingPort : public pktio::BurstIo {
 public:
  explicit ForwardingPort(pktio::BurstIo* inner) : inner_(inner) {}
  uint16_t RxBurst(pktio::Frame* f, uint16_t n) override { return inner_->RxBurst(f, n); }
  uint16_t AllocTx(pktio::Frame* f, uint16_t n) override { return inner_->AllocTx(f, n); }
  uint16_t TxBurst(pktio::Frame* f, uint16_t n) override { return inner_->TxBurst(f, n); }
  void Release(pktio::Frame* f, uint16_t n) override { inner_->Release(f, n); }

 protected:
  pktio::BurstIo* inner() const { return inner_; }

 private:
  pktio::BurstIo* inner_;
};

struct DevicePairOptions {
  DeviceConfig config;  // both devices' settings; the MAC and IPv4 address are set per device
  int qps = 1;          // RC QPs per device
  uint32_t mem_bytes = 64 * 1024;
  uint32_t access = mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead;
  uint32_t mtu = 1024;
};

// Device i (0 or 1) has MAC 02:00:00:00:00:0(i+1) and IPv4 10.0.0.(i+1); its
// registered memory starts filled with the byte i + 1.
class DevicePair {
 public:
  DevicePair(pktio::BurstIo* port0, pktio::BurstIo* port1, const DevicePairOptions& o) {
    pktio::BurstIo* ports[2] = {port0, port1};
    for (int i = 0; i < 2; ++i) {
      DeviceConfig cfg = o.config;
      cfg.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)};
      cfg.ipv4 = 0x0A000001 + i;
      dev[i] = std::make_unique<Device>(cfg, ports[i]);
      pd[i] = dev[i]->AllocPd();
      cq[i] = *dev[i]->CreateCq(256);
      for (int k = 0; k < o.qps; ++k) {
        QpInitAttr init;
        init.pd = pd[i];
        init.send_cq = init.recv_cq = cq[i];
        qpn[i].push_back(*dev[i]->CreateQp(init));
      }
      mem[i].assign(o.mem_bytes, static_cast<uint8_t>(i + 1));
      keys[i] = *dev[i]->RegMr(pd[i], mem[i].data(), mem[i].size(), reinterpret_cast<uint64_t>(mem[i].data()),
                               o.access);
    }
    for (int i = 0; i < 2; ++i) {
      for (int k = 0; k < o.qps; ++k) {
        const absl::Status st = ConnectQp(*dev[i], qpn[i][k], ParamsToward(*dev[1 - i], qpn[1 - i][k], o.mtu));
        EXPECT_TRUE(st.ok()) << st;
      }
    }
  }

  // A signalled one-SGE request on device 0's QP `qp`: `len` bytes at
  // `offset` of device 0's memory, toward `remote_offset` of device 1's.
  transport::SendWr Wr(transport::WrOpcode op, uint32_t len, uint64_t offset, uint64_t remote_offset,
                       uint64_t wr_id = 0) const {
    transport::SendWr w;
    w.wr_id = wr_id;
    w.opcode = op;
    w.flags = transport::kSendSignaled;
    w.num_sge = 1;
    w.sg_list[0] = {reinterpret_cast<uint64_t>(mem[0].data()) + offset, len, keys[0].lkey};
    w.remote_addr = reinterpret_cast<uint64_t>(mem[1].data()) + remote_offset;
    w.rkey = keys[1].rkey;
    return w;
  }

  // Polls both devices, 1 us of virtual time per round, until device 0's CQ
  // has given `want` completions or `max_rounds` have passed; returns them.
  std::vector<queue::Completion> RunUntil(size_t want, uint64_t max_rounds = 100'000) {
    std::vector<queue::Completion> done;
    queue::Completion buf[64];
    for (uint64_t r = 0; done.size() < want && r < max_rounds; ++r, now += 1000) {
      dev[0]->Poll(now);
      dev[1]->Poll(now);
      for (uint32_t k; (k = dev[0]->PollCq(cq[0], buf, 64)) > 0;) done.insert(done.end(), buf, buf + k);
    }
    return done;
  }

  std::unique_ptr<Device> dev[2];
  uint32_t pd[2] = {}, cq[2] = {};
  std::vector<uint32_t> qpn[2];
  std::vector<uint8_t> mem[2];
  mem::MrKeys keys[2] = {};
  uint64_t now = 1'000'000;
};

}  // namespace droce::core::testing

#endif  // DROCE_TESTS_SUPPORT_DEVICE_PAIR_H_
