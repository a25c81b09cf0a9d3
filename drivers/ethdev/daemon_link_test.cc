// DaemonLink without EAL: this test plays droced's side of the link, with a
// memfd made as droced makes it (CreateRingMemfd) and the rings mapped here.
#include "drivers/ethdev/daemon_link.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace droce::ethdev {
namespace {

constexpr uint32_t kSlots = 8;
constexpr uint32_t kSlotBytes = pktio::FrameRing::kDefaultSlotBytes;
const size_t kRingBytes = pktio::FrameRing::Bytes(kSlots, kSlotBytes);

LinkMessage Message(uint32_t id = 7) {
  LinkMessage m{};
  m.magic = kLinkMagic;
  m.version = kLinkVersion;
  m.size = sizeof m;
  m.link_id = id;
  m.slots = kSlots;
  m.slot_bytes = kSlotBytes;
  return m;
}

// droced's side of one link.
struct DaemonSide {
  int memfd = CreateRingMemfd("droce-link-test", 2 * kRingBytes);
  int to_process_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  int to_daemon_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  void* map = mmap(nullptr, 2 * kRingBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  pktio::FrameRing to_process{static_cast<uint8_t*>(map) + kLinkRingToProcess * kRingBytes, kSlots, kSlotBytes};
  pktio::FrameRing to_daemon{static_cast<uint8_t*>(map) + kLinkRingToDaemon * kRingBytes, kSlots, kSlotBytes};
  ~DaemonSide() {
    munmap(map, 2 * kRingBytes);
    for (int fd : {memfd, to_process_efd, to_daemon_efd}) close(fd);
  }
  // What the process gets: duplicates (SCM_RIGHTS gives it its own).
  absl::Status BindTo(DaemonLink& link, const LinkMessage& m) {
    const int fds[3] = {dup(memfd), dup(to_process_efd), dup(to_daemon_efd)};
    return link.Bind(m, fds, 3);
  }
};

TEST(DaemonLink, FramesGoBothWaysWithoutEal) {
  DaemonSide d;
  ASSERT_NE(d.map, MAP_FAILED);
  DaemonLink link(16);
  ASSERT_TRUE(d.BindTo(link, Message()).ok());
  EXPECT_TRUE(link.bound());
  EXPECT_EQ(link.link_id(), 7u);
  // Process -> daemon.
  pktio::Frame tx[3];
  ASSERT_EQ(link.AllocTx(tx, 3), 3);
  for (uint8_t i = 0; i < 3; ++i) {
    std::memset(tx[i].data, 0xa0 + i, 100 + i);
    tx[i].len = 100 + i;
  }
  EXPECT_EQ(link.TxBurst(tx, 3), 3);
  EXPECT_EQ(link.pool().available(), 16u);  // copied into the ring: the buffers are back
  uint8_t buf[3][kSlotBytes];
  pktio::Frame got[3] = {{buf[0], 0, kSlotBytes, nullptr}, {buf[1], 0, kSlotBytes, nullptr},
                         {buf[2], 0, kSlotBytes, nullptr}};
  ASSERT_EQ(d.to_daemon.Consume(got, 3), 3);
  for (uint8_t i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].len, 100u + i);
    EXPECT_EQ(buf[i][99 + i], 0xa0 + i);
  }
  // Daemon -> process.
  uint8_t frame[200];
  std::memset(frame, 0x5c, sizeof frame);
  pktio::Frame out{frame, sizeof frame, sizeof frame, nullptr};
  ASSERT_EQ(d.to_process.Produce(&out, 1), 1);
  pktio::Frame rx[4];
  ASSERT_EQ(link.RxBurst(rx, 4), 1);
  EXPECT_EQ(rx[0].len, 200u);
  EXPECT_EQ(rx[0].data[199], 0x5c);
  EXPECT_EQ(link.pool().available(), 15u);
  link.Release(rx, 1);
  EXPECT_EQ(link.RxBurst(rx, 4), 0);
  EXPECT_EQ(link.counters().tx_packets, 3u);
  EXPECT_EQ(link.counters().rx_packets, 1u);
}

TEST(DaemonLink, AFullRingRefusesTheRestAndTheDeviceKeepsIt) {
  DaemonSide d;
  DaemonLink link(32);
  ASSERT_TRUE(d.BindTo(link, Message()).ok());
  pktio::Frame tx[12];
  ASSERT_EQ(link.AllocTx(tx, 12), 12);
  for (auto& f : tx) f.len = 64;
  EXPECT_EQ(link.TxBurst(tx, 12), kSlots);
  EXPECT_EQ(link.counters().tx_ring_full, 1u);
  EXPECT_EQ(link.pool().available(), 32u - (12 - kSlots));  // the caller still holds the rest
  link.Release(tx + kSlots, 12 - kSlots);
}

// Gather frames (the link takes them): droced's side reads each whole, the
// payload copied from where it pointed; those a full ring refuses come back
// flattened, so the device's retry sends what was built.
TEST(DaemonLink, GatherFramesArriveWholeAndRefusedOnesComeBackFlat) {
  DaemonSide d;
  DaemonLink link(32);
  EXPECT_TRUE(link.TakesGather());
  ASSERT_TRUE(d.BindTo(link, Message()).ok());
  std::vector<uint8_t> payload(3000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(7 * i + 1);
  const std::vector<uint8_t> built = payload;
  pktio::Frame tx[kSlots + 1];
  ASSERT_EQ(link.AllocTx(tx, kSlots + 1), kSlots + 1);
  for (pktio::Frame& f : tx) {
    std::memset(f.data, 0x11, 64);  // 60 header bytes, then the 4 after the payload
    f.gather = payload.data();
    f.gather_len = 3000;
    f.gather_at = 60;
    f.len = 64 + 3000;
  }
  EXPECT_EQ(link.TxBurst(tx, kSlots + 1), kSlots);
  pktio::Frame& refused = tx[kSlots];
  EXPECT_EQ(refused.gather_len, 0u);
  EXPECT_EQ(refused.gather, nullptr);
  EXPECT_EQ(link.counters().tx_flattened, 1u);
  std::fill(payload.begin(), payload.end(), 0xee);
  std::vector<uint8_t> buf(kSlotBytes);
  for (uint32_t k = 0; k < kSlots + 1; ++k) {
    if (k == kSlots) {
      ASSERT_EQ(link.TxBurst(&refused, 1), 1);  // room again: the retry
    }
    pktio::Frame got{buf.data(), 0, kSlotBytes, nullptr};
    ASSERT_EQ(d.to_daemon.Consume(&got, 1), 1);
    ASSERT_EQ(got.len, 3064u);
    EXPECT_EQ(buf[59], 0x11);
    EXPECT_EQ(std::memcmp(buf.data() + 60, built.data(), 3000), 0) << k;
    EXPECT_EQ(buf[3063], 0x11);
  }
}

TEST(DaemonLink, SleeperIsWokenByTheDaemonsNextBurstOnce) {
  DaemonSide d;
  DaemonLink link(8);
  ASSERT_TRUE(d.BindTo(link, Message()).ok());
  std::unique_ptr<RxWakeup> w = link.MakeWakeup();
  EXPECT_TRUE(w->KnownEmpty());
  EXPECT_TRUE(link.KnownEmpty());
  const int fd = w->Arm();
  ASSERT_GE(fd, 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  uint8_t frame[64] = {1};
  pktio::Frame out{frame, 64, 64, nullptr};
  ASSERT_EQ(d.to_process.Produce(&out, 1), 1);
  ASSERT_TRUE(d.to_process.TakeWakeupRequest());  // droced's RingPorts::TxBurst writes the eventfd then
  const uint64_t one = 1;
  ASSERT_EQ(write(d.to_process_efd, &one, sizeof one), 8);
  EXPECT_FALSE(d.to_process.TakeWakeupRequest());  // once per sleep
  EXPECT_EQ(poll(&p, 1, 0), 1);
  EXPECT_FALSE(w->KnownEmpty());
  EXPECT_FALSE(link.KnownEmpty());
  w->Disarm();
  EXPECT_EQ(poll(&p, 1, 0), 0);  // drained
  // The other way: droced sleeps, the process's burst wakes it.
  ASSERT_TRUE(d.to_daemon.Arm());
  pktio::Frame tx;
  ASSERT_EQ(link.AllocTx(&tx, 1), 1);
  tx.len = 64;
  ASSERT_EQ(link.TxBurst(&tx, 1), 1);
  EXPECT_EQ(link.counters().wakeups_sent, 1u);
  pollfd q{d.to_daemon_efd, POLLIN, 0};
  EXPECT_EQ(poll(&q, 1, 0), 1);
}

TEST(DaemonLink, RefusesBadMessagesAndMemoryAndClosesTheirDescriptors) {
  DaemonSide d;
  DaemonLink link(8);
  auto refused = [&](LinkMessage m) { return !d.BindTo(link, m).ok(); };
  LinkMessage m = Message();
  m.magic ^= 1;
  EXPECT_TRUE(refused(m));
  m = Message();
  m.version = 9;
  EXPECT_TRUE(refused(m));
  m = Message();
  m.reserved[5] = 1;
  EXPECT_TRUE(refused(m));
  m = Message();
  m.slots = 6;  // not a power of two
  EXPECT_TRUE(refused(m));
  m = Message();
  m.slot_bytes = 256;  // smaller than droce's largest frame
  EXPECT_TRUE(refused(m));
  m = Message();
  m.slots = 16;  // the memfd is smaller than this geometry says
  EXPECT_TRUE(refused(m));
  // Too few descriptors.
  const int two[2] = {dup(d.memfd), dup(d.to_process_efd)};
  EXPECT_FALSE(link.Bind(Message(), two, 2).ok());
  // Memory not sealed against shrinking: the other side could truncate it under us (SIGBUS).
  const int loose = memfd_create("loose", MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(loose, static_cast<off_t>(2 * kRingBytes)), 0);
  const int fds[3] = {loose, dup(d.to_process_efd), dup(d.to_daemon_efd)};
  EXPECT_FALSE(link.Bind(Message(), fds, 3).ok());
  EXPECT_FALSE(link.bound());
  EXPECT_EQ(fcntl(loose, F_GETFD), -1);  // taken and closed
  pktio::Frame f;
  ASSERT_EQ(link.AllocTx(&f, 1), 1);
  f.len = 64;
  EXPECT_EQ(link.TxBurst(&f, 1), 0);  // unbound: as a port whose link is down
  EXPECT_EQ(link.RxBurst(&f, 1), 0);
  link.Release(&f, 1);
}

TEST(DaemonLink, ANewDaemonsLinkKeepsThePoolAndItsFrames) {
  DaemonLink link(8);
  pktio::Frame held;
  {
    DaemonSide first;
    ASSERT_TRUE(first.BindTo(link, Message(1)).ok());
    ASSERT_EQ(link.AllocTx(&held, 1), 1);
    std::memset(held.data, 0x77, 64);
    held.len = 64;
    link.Unbind();  // the daemon is gone
    EXPECT_FALSE(link.KnownEmpty());  // no ring to look at: cannot tell
  }
  DaemonSide second;
  ASSERT_TRUE(second.BindTo(link, Message(2)).ok());
  EXPECT_EQ(link.link_id(), 2u);
  EXPECT_EQ(held.data[63], 0x77);  // the device's frame survived
  ASSERT_EQ(link.TxBurst(&held, 1), 1);
  uint8_t buf[kSlotBytes];
  pktio::Frame got{buf, 0, kSlotBytes, nullptr};
  ASSERT_EQ(second.to_daemon.Consume(&got, 1), 1);
  EXPECT_EQ(buf[63], 0x77);
  EXPECT_EQ(link.counters().binds, 2u);
}

}  // namespace
}  // namespace droce::ethdev
