// The QP table: a device creates any number of QPs over its life, at most
// max_qp alive at once, and reuses a QPN only after every QPN of its range
// has been handed out, the one freed longest ago first.
#include <algorithm>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "core/connect.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"

namespace droce::core {
namespace {

class QpTable : public ::testing::Test {
 protected:
  QpTable() {
    DeviceConfig cfg;
    cfg.max_qp = 8;
    cfg.qpn_base = 0x100;
    cfg.ipv4 = 0x0A000001;
    dev_ = std::make_unique<Device>(cfg, &io_);
    init_.pd = dev_->AllocPd();
    init_.send_cq = init_.recv_cq = *dev_->CreateCq(64);
  }
  sim::ScriptedIo io_;
  std::unique_ptr<Device> dev_;
  QpInitAttr init_;
};

TEST_F(QpTable, ManyMoreQpsThanMaxQpOverTheDevicesLife) {
  // 1024 create/destroy cycles used to exhaust a device for good.
  for (int i = 0; i < 5000; ++i) {
    absl::StatusOr<uint32_t> qpn = dev_->CreateQp(init_);
    ASSERT_TRUE(qpn.ok()) << "cycle " << i << ": " << qpn.status();
    EXPECT_GE(*qpn, 0x100u);
    EXPECT_LT(*qpn, 0x108u);
    ASSERT_TRUE(dev_->DestroyQp(*qpn).ok());
  }
}

TEST_F(QpTable, AtMostMaxQpAliveAndReuseIsOldestFreedFirst) {
  std::vector<uint32_t> qpns;
  for (int i = 0; i < 8; ++i) qpns.push_back(*dev_->CreateQp(init_));
  EXPECT_EQ(std::set<uint32_t>(qpns.begin(), qpns.end()).size(), 8u);
  EXPECT_FALSE(dev_->CreateQp(init_).ok());  // all 8 alive
  // Free three in the order 5, 2, 7: they come back in that order.
  for (int k : {5, 2, 7}) ASSERT_TRUE(dev_->DestroyQp(qpns[k]).ok());
  EXPECT_EQ(*dev_->CreateQp(init_), qpns[5]);
  EXPECT_EQ(*dev_->CreateQp(init_), qpns[2]);
  EXPECT_EQ(*dev_->CreateQp(init_), qpns[7]);
  EXPECT_FALSE(dev_->CreateQp(init_).ok());
}

TEST_F(QpTable, NoQpnIsReusedWhileAnUnusedOneRemains) {
  const uint32_t first = *dev_->CreateQp(init_);
  ASSERT_TRUE(dev_->DestroyQp(first).ok());
  std::set<uint32_t> seen;
  for (int i = 0; i < 7; ++i) {
    const uint32_t q = *dev_->CreateQp(init_);
    EXPECT_NE(q, first);
    seen.insert(q);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(*dev_->CreateQp(init_), first);  // only now
}

TEST_F(QpTable, AReusedQpnStartsCleanAndInheritsNoCompletions) {
  const uint32_t a = *dev_->CreateQp(init_);
  // Leave a flushed receive completion of the old QP in the CQ.
  std::vector<uint8_t> buf(64);
  const mem::MrKeys keys = *dev_->RegMr(init_.pd, buf.data(), buf.size(),
                                        reinterpret_cast<uint64_t>(buf.data()), mem::kLocalWrite);
  ConnectParams c;
  c.peer_gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  c.peer_mac = {0x02, 0, 0, 0, 0, 0x22};
  c.peer_qpn = 0x99;
  ASSERT_TRUE(ConnectQp(*dev_, a, c).ok());
  transport::RecvWr r;
  r.wr_id = 7;
  r.num_sge = 1;
  r.sg_list[0] = {reinterpret_cast<uint64_t>(buf.data()), 64, keys.lkey};
  ASSERT_EQ(dev_->PostRecv(a, r), 0);
  transport::QpAttr err;
  err.qp_state = transport::QpState::kErr;
  ASSERT_TRUE(dev_->ModifyQp(a, err, transport::kAttrState).ok());
  dev_->Poll(1'000'000);
  ASSERT_TRUE(dev_->DestroyQp(a).ok());
  // Cycle through the range until `a` comes back.
  uint32_t again = 0;
  for (int i = 0; i < 8 && again != a; ++i) {
    again = *dev_->CreateQp(init_);
    if (again != a) {
      ASSERT_TRUE(dev_->DestroyQp(again).ok());
    }
  }
  ASSERT_EQ(again, a);
  EXPECT_EQ(dev_->qp(a)->state(), transport::QpState::kReset);
  queue::Completion out[4];
  EXPECT_EQ(dev_->PollCq(init_.send_cq, out, 4), 0u) << "the old QP's flush completion";
}

}  // namespace
}  // namespace droce::core
