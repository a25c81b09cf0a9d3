// EthdevPort against real DPDK PMDs with EAL in this process (no hugepages):
// what the port's counters say about frames it did and did not send.
#include "drivers/ethdev/port.h"

#include <unistd.h>

#include <string>
#include <thread>

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
    const std::string pair_sock = "/tmp/droce-port-test-pair-" + std::to_string(getpid()) + ".sock";
    eal.vdevs = {"net_null0", "net_memif0,role=client,socket=/tmp/droce-port-test-" +
                                  std::to_string(getpid()) + ".sock",
                 "net_memif1,role=server,id=7,socket=" + pair_sock, "net_memif2,role=client,id=7,socket=" + pair_sock};
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

// The two ends of a memif connection in this process, stopped at the same
// moment from two threads (Reconnect: stop, start): the client's stop sends the server a disconnect,
// which EAL's interrupt thread handles (memif_disconnect on the server's
// control channel) while the other thread stops the server (the same
// disconnect). In DPDK 22.11 the two free and use the channel at once
// (seen: SIGSEGV in memif_msg_enq at a verbs program's exit when its peer
// exited too). The port's stops run on the interrupt thread, in turn.
TEST_F(EthdevPortTest, BothEndsOfAMemifStoppingAtOnceDoNotRace) {
  PortConfig server_config;
  server_config.name = "net_memif1";
  server_config.mbufs = 511;
  server_config.start_may_fail = true;
  PortConfig client_config = server_config;
  client_config.name = "net_memif2";
  auto server = EthdevPort::Open(server_config);
  auto client = EthdevPort::Open(client_config);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_TRUE(client.ok()) << client.status();
  for (int round = 0; round < 200; ++round) {
    // A client that started before the server listened connects only when
    // started again (as the verbs runtime does when its link stays down).
    for (int tries = 0; tries < 50 && !(*client)->WaitLinkUp(100); ++tries) (*client)->Reconnect();
    ASSERT_TRUE((*client)->WaitLinkUp(1000)) << "round " << round;
    ASSERT_TRUE((*server)->WaitLinkUp(1000)) << "round " << round;
    // Each stops (the race) and starts again; the client then reconnects.
    std::thread other([&] { (*client)->Reconnect(); });
    ASSERT_TRUE((*server)->Reconnect());
    other.join();
  }
}

}  // namespace
}  // namespace droce::ethdev
