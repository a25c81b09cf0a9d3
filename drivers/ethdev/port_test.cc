// EthdevPort against real DPDK PMDs with EAL in this process (no hugepages):
// what the port's counters say about frames it did and did not send.
#include "drivers/ethdev/port.h"

#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "drivers/ethdev/eal.h"

namespace droce::ethdev {
namespace {

class EthdevPortTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EalConfig eal;
    eal.file_prefix = "droce-port-test-" + std::to_string(getpid());
    eal.memory_mb = 128;
    // net_null takes every frame; a memif client with no server has no link.
    eal.vdevs = {"net_null0", "net_memif0,role=client,socket=/tmp/droce-port-test-" +
                                  std::to_string(getpid()) + ".sock"};
    ASSERT_TRUE(StartEal(eal).ok());
  }
};

// Sends `n` frames of `len` bytes; returns how many the port took. Frames it
// refused go back to the pool.
uint16_t SendFrames(EthdevPort& port, uint16_t n, uint32_t len) {
  pktio::Frame frames[8];
  const uint16_t got = port.AllocTx(frames, n);
  for (uint16_t i = 0; i < got; ++i) frames[i].len = len;
  const uint16_t sent = port.TxBurst(frames, got);
  if (sent < got) port.Release(frames + sent, static_cast<uint16_t>(got - sent));
  return sent;
}

TEST_F(EthdevPortTest, CountsBytesOfFramesItSent) {
  PortConfig c;
  c.name = "net_null0";
  c.mbufs = 511;
  auto port = EthdevPort::Open(c);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_TRUE((*port)->WaitLinkUp(1000));
  ASSERT_TRUE((*port)->RefreshLink());
  ASSERT_EQ(SendFrames(**port, 4, 100), 4);
  EXPECT_EQ((*port)->stats().tx_packets, 4u);
  EXPECT_EQ((*port)->stats().tx_bytes, 400u);
}

TEST_F(EthdevPortTest, RefusedFramesAreNotCountedAsSentBytes) {
  PortConfig c;
  c.name = "net_memif0";
  c.mbufs = 511;
  c.start_may_fail = true;  // no server: the link stays down
  auto port = EthdevPort::Open(c);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_FALSE((*port)->RefreshLink());
  EXPECT_EQ(SendFrames(**port, 4, 100), 0);
  EXPECT_EQ((*port)->stats().tx_packets, 0u);
  EXPECT_EQ((*port)->stats().tx_bytes, 0u);
  EXPECT_EQ((*port)->stats().tx_full, 4u);
}

}  // namespace
}  // namespace droce::ethdev
