// DirectIo without EAL: two ends in one process, each wrapping one end of a
// sim::MemWire (standing in for the memif port to droced), joined by a
// memfd made here as droced makes it.
#include "drivers/ethdev/direct_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "drivers/udp/udp_io.h"
#include "gtest/gtest.h"
#include "sim/wire/mem_wire.h"
#include "tests/support/device_pair.h"

namespace droce::ethdev {
namespace {

constexpr std::array<uint8_t, 6> kMacA = {0x02, 0, 0, 0, 0, 0xa};
constexpr std::array<uint8_t, 6> kMacB = {0x02, 0, 0, 0, 0, 0xb};
constexpr uint32_t kSlots = 8;
constexpr uint32_t kSlotBytes = pktio::FrameRing::kDefaultSlotBytes;
constexpr uint64_t kKey = 0x5eed5eed1234abcdull;  // the paths' marker key (droced draws one per path)

// Ethernet + IPv4 + UDP:4791 + BTH with destination QP `qpn`; `tag` in the payload.
uint32_t BuildRoce(uint8_t* f, const std::array<uint8_t, 6>& dst, uint32_t qpn, uint8_t tag) {
  std::memset(f, 0, 80);
  std::memcpy(f, dst.data(), 6);
  std::memcpy(f + 6, kMacA.data(), 6);
  f[12] = 0x08, f[13] = 0x00;
  f[14] = 0x45;
  f[14 + 9] = 17;  // UDP
  f[34 + 2] = 0x12, f[34 + 3] = 0xb7;  // 4791
  f[42 + 5] = static_cast<uint8_t>(qpn >> 16), f[42 + 6] = static_cast<uint8_t>(qpn >> 8),
  f[42 + 7] = static_cast<uint8_t>(qpn);
  f[60] = tag;
  return 80;
}

struct Memfd {
  int fd = -1;
  explicit Memfd(size_t bytes, bool seal = true) {
    fd = memfd_create("droce-ring-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    if (seal) {
      EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
    }
  }
  ~Memfd() {
    if (fd >= 0) close(fd);
  }
};

PeerMessage AddMessage(uint64_t id, const std::array<uint8_t, 6>& peer_mac, uint32_t qpn_base, uint32_t my_ring,
                       uint64_t key = kKey) {
  PeerMessage m{};
  m.magic = kPeerMagic;
  m.version = kPeerVersion;
  m.op = kPeerAdd;
  m.size = sizeof m;
  m.generation = 1;
  m.path_id = id;
  std::memcpy(m.peer_mac, peer_mac.data(), 6);
  m.peer_qpn_base = qpn_base;
  m.peer_qpn_count = 1024;
  m.slots = kSlots;
  m.slot_bytes = kSlotBytes;
  m.my_ring = my_ring;
  m.marker_key = key;
  return m;
}

// A port that forwards to another and says KnownEmpty as the test sets it.
class TellingPort final : public core::testing::ForwardingPort {
 public:
  using ForwardingPort::ForwardingPort;
  bool KnownEmpty() override { return known_empty; }
  bool known_empty = false;
};

class DirectIoTest : public ::testing::Test {
 protected:
  DirectIoTest()
      : wire_(sim::MemWireConfig{}),
        b_port_(&wire_.end(1)),
        a_(&wire_.end(0), kMacA, 1024, 1024, [this] { return now_ns_; }),
        b_(&b_port_, kMacB, 2048, 1024, [this] { return now_ns_; }) {}

  // Pairs a (QPNs 1024..) and b (2048..) as droced does: one memfd, an
  // eventfd per direction, each side given its own copies.
  // `memfd`: if given, a descriptor of the path's memory for the test.
  void Pair(int* memfd = nullptr) {
    Memfd mem(2 * pktio::FrameRing::Bytes(kSlots, kSlotBytes));
    if (memfd != nullptr) *memfd = dup(mem.fd);
    efd_a_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    efd_b_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int fa[3] = {dup(mem.fd), dup(efd_a_), dup(efd_b_)};
    const int fb[3] = {dup(mem.fd), dup(efd_b_), dup(efd_a_)};
    ASSERT_TRUE(a_.Apply(AddMessage(7, kMacB, 2048, 0), fa, 3).ok());
    ASSERT_TRUE(b_.Apply(AddMessage(7, kMacA, 1024, 1), fb, 3).ok());
  }
  ~DirectIoTest() override {
    if (efd_a_ >= 0) close(efd_a_);
    if (efd_b_ >= 0) close(efd_b_);
  }

  // Sends one frame from a; returns whether TxBurst took it.
  bool SendFromA(const std::array<uint8_t, 6>& dst, uint32_t qpn, uint8_t tag) {
    pktio::Frame f;
    if (a_.AllocTx(&f, 1) != 1) return false;
    f.len = BuildRoce(f.data, dst, qpn, tag);
    if (a_.TxBurst(&f, 1) == 1) return true;
    a_.Release(&f, 1);
    return false;
  }
  // Sends a `len`-byte frame for b's ring from a: `tag` at byte 60, byte i
  // past the headers i * 3 + seed.
  void SendLongFromA(uint32_t len, uint8_t tag, uint32_t seed) {
    pktio::Frame f;
    ASSERT_EQ(a_.AllocTx(&f, 1), 1);
    BuildRoce(f.data, kMacB, 2048 + 5, tag);
    for (uint32_t i = 80; i < len; ++i) f.data[i] = static_cast<uint8_t>(i * 3 + seed);
    f.len = len;
    ASSERT_EQ(a_.TxBurst(&f, 1), 1);
  }
  // Fills a's ring to b with short frames until it refuses one: then it
  // holds kSlots.
  void FillTheRingToB() {
    int sent = 0;
    while (sent < 100 && SendFromA(kMacB, 2048 + 1, static_cast<uint8_t>(sent))) ++sent;
    ASSERT_EQ(sent, static_cast<int>(kSlots));
  }
  // The first non-empty burst of b (a few tries: the ring opens on its marker).
  uint16_t FirstBurstOnB(pktio::Frame* fs, uint16_t n) {
    uint16_t got = 0;
    for (int round = 0; round < 4 && got == 0; ++round) got = b_.RxBurst(fs, n);
    return got;
  }
  // The "switch" loses the marker a sent when the path was added (the
  // only frame on the wire).
  void LoseTheMarkerOfA() {
    pktio::Frame m[4];
    ASSERT_EQ(wire_.end(1).RxBurst(m, 4), 1);
    wire_.end(1).Release(m, 1);
  }
  // Receives on b; returns the tags of what arrived.
  std::vector<uint8_t> ReceiveOnB() {
    std::vector<uint8_t> tags;
    pktio::Frame fs[32];
    for (int round = 0; round < 4; ++round) {
      const uint16_t n = b_.RxBurst(fs, 32);
      for (uint16_t i = 0; i < n; ++i) tags.push_back(fs[i].data[60]);
      b_.Release(fs, n);
    }
    return tags;
  }

  // Puts a marker of path `id` with `key` for b on the wire, as any process
  // could address a frame to b.
  void SendMarkerToB(uint64_t id, uint64_t key) {
    pktio::Frame m;
    ASSERT_EQ(wire_.end(0).AllocTx(&m, 1), 1);
    fabric::BuildPathMarker(m.data, kMacB, kMacA, 2048, fabric::PathMarker{id, key});
    m.len = fabric::kPathMarkerBytes;
    ASSERT_EQ(wire_.end(0).TxBurst(&m, 1), 1);
  }

  uint64_t now_ns_ = 1'000'000'000;  // virtual time: both ends' clock
  sim::MemWire wire_;
  TellingPort b_port_;  // b's port to the daemon
  DirectIo a_, b_;
  int efd_a_ = -1, efd_b_ = -1;
};

TEST_F(DirectIoTest, PeerFramesTakeTheRingOthersThePort) {
  Pair();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));   // b's QPN: the ring
  ASSERT_TRUE(SendFromA(kMacB, 4096 + 5, 2));   // b's MAC, another process's QPN: the port (the switch)
  ASSERT_TRUE(SendFromA(kMacB, 1, 3));          // QP 1 (the daemon's CM): the port
  const std::array<uint8_t, 6> bcast = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ASSERT_TRUE(SendFromA(bcast, 2048 + 5, 4));   // broadcast: the port
  EXPECT_EQ(a_.counters().tx_direct, 1u);
  EXPECT_EQ(wire_.counters(0).sent, 4u);  // the three and the path's marker
  // b gets the ring's frame and, through the "switch" (here a plain wire),
  // the others; its own check keeps only what is addressed to its range.
  const std::vector<uint8_t> tags = ReceiveOnB();
  EXPECT_EQ(b_.counters().rx_direct, 1u);
  EXPECT_NE(std::find(tags.begin(), tags.end(), 1), tags.end());
}

// A long frame from the ring is lent: its headers copied into the buffer
// handed out, the whole frame in its slot; its slots go back to the ring
// (in order, the burst's together) only once every lent frame is released,
// and the ring is not read again before. Short frames are copied whole.
TEST_F(DirectIoTest, LongFramesAreLentAndTheirSlotsFreedWhenAllAreBack) {
  Pair();
  EXPECT_FALSE(b_.StartLending());  // not allowed by default
  b_.AllowLending(true);
  ASSERT_TRUE(b_.StartLending());
  const uint32_t lens[] = {80, 3000, 4000, 200};
  for (uint32_t k = 0; k < 4; ++k) ASSERT_NO_FATAL_FAILURE(SendLongFromA(lens[k], static_cast<uint8_t>(k + 1), k));
  pktio::Frame fs[8];
  const uint16_t n = FirstBurstOnB(fs, 8);
  ASSERT_EQ(n, 4);
  for (uint16_t i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(fs[i].len, lens[i]);
    EXPECT_EQ(fs[i].data[60], i + 1);  // the headers (and the tag) copied
    if (lens[i] >= DirectIo::kLendFromBytes) {
      ASSERT_NE(fs[i].lent(), nullptr);
      EXPECT_EQ(fs[i].lent_head(), DirectIo::kLendHeadBytes);
      EXPECT_EQ(std::memcmp(fs[i].lent(), fs[i].data, DirectIo::kLendHeadBytes), 0);
      EXPECT_EQ(fs[i].lent()[lens[i] - 1], static_cast<uint8_t>((lens[i] - 1) * 3 + i));
    } else {
      EXPECT_EQ(fs[i].lent(), nullptr);
      EXPECT_EQ(fs[i].data[lens[i] - 1], lens[i] > 80 ? static_cast<uint8_t>((lens[i] - 1) * 3 + i) : 0);
    }
  }
  // The slots stay the device's: a's next frame lands behind them, and b
  // does not read the ring while any lent frame is out.
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 9));
  pktio::Frame more[8];
  EXPECT_EQ(b_.RxBurst(more, 8), 0);
  b_.Release(&fs[0], 2);  // a short one and one lent: one lent frame still out
  EXPECT_EQ(b_.RxBurst(more, 8), 0);
  b_.Release(&fs[2], 2);
  EXPECT_EQ(fs[2].lent(), nullptr);
  ASSERT_EQ(b_.RxBurst(more, 8), 1);  // the ring again, in order
  EXPECT_EQ(more[0].data[60], 9);
  b_.Release(more, 1);
  EXPECT_EQ(b_.counters().rx_direct, 5u);
}

// The device copies a lent frame whole (pktio::TakeLent) whenever its QP
// does not place it from the slot (a WRITE FIRST, a PSN not expected, ...):
// that frame still holds a slot, which goes back when it is released. Were
// the slot forgotten, the ring would never be read again and every later
// frame of the peer lost (an MPI run ended in "retry exceeded" so).
TEST_F(DirectIoTest, ALentFrameTakenWholeStillGivesItsSlotBack) {
  Pair();
  b_.AllowLending(true);
  ASSERT_TRUE(b_.StartLending());
  for (uint32_t round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    for (uint32_t k = 0; k < 2; ++k) {
      ASSERT_NO_FATAL_FAILURE(SendLongFromA(3000, static_cast<uint8_t>(10 * round + k), k + round));
    }
    pktio::Frame fs[8];
    const uint16_t n = FirstBurstOnB(fs, 8);
    ASSERT_EQ(n, 2);
    for (uint16_t i = 0; i < n; ++i) {
      ASSERT_NE(fs[i].lent(), nullptr);
      EXPECT_EQ(fs[i].data[60], 10 * round + i);
    }
    EXPECT_EQ(b_.counters().rx_lent, 2 * round + 2);
    pktio::TakeLent(fs[0]);  // as core::Device::TakeWhole does
    EXPECT_EQ(fs[0].lent(), nullptr);
    EXPECT_EQ(fs[0].data[2999], static_cast<uint8_t>(2999 * 3 + round));
    b_.Release(fs, n);
  }
  EXPECT_EQ(b_.counters().rx_direct, 6u);
}

// An idle poll may be skipped on KnownEmpty (verbs Runtime::IdleLocked):
// b says so only when its rings hold nothing and its port says so too.
TEST_F(DirectIoTest, KnownEmptyOnlyWhenTheRingsAndThePortBehindThemAre) {
  Pair();
  (void)ReceiveOnB();  // a's marker, through the port: the path opens
  EXPECT_FALSE(b_.KnownEmpty());  // the port cannot tell
  b_port_.known_empty = true;
  EXPECT_TRUE(b_.KnownEmpty());
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));  // the ring
  EXPECT_EQ(a_.counters().tx_direct, 1u);
  EXPECT_FALSE(b_.KnownEmpty());
  EXPECT_EQ(ReceiveOnB(), std::vector<uint8_t>{1});
  EXPECT_TRUE(b_.KnownEmpty());
}

// Pages of the path's memory that are resident (allocated), of all.
std::pair<size_t, size_t> ResidentPages(int memfd) {
  struct stat st {};
  EXPECT_EQ(fstat(memfd, &st), 0);
  const size_t page = static_cast<size_t>(getpagesize());
  const size_t pages = (static_cast<size_t>(st.st_size) + page - 1) / page;
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, memfd, 0);
  EXPECT_NE(map, MAP_FAILED);
  std::vector<unsigned char> in(pages);
  EXPECT_EQ(mincore(map, static_cast<size_t>(st.st_size), in.data()), 0);
  munmap(map, static_cast<size_t>(st.st_size));
  size_t resident = 0;
  for (unsigned char c : in) resident += c & 1;
  return {resident, pages};
}

// A path costs memory once it carries frames, not when droced sets it up:
// every two ports of a fabric get one, most never used.
TEST_F(DirectIoTest, PathMemoryIsPrefaultedAtItsFirstFrameNotAtSetUp) {
  int memfd = -1;
  Pair(&memfd);
  ASSERT_GE(memfd, 0);
  const auto [idle, pages] = ResidentPages(memfd);
  ASSERT_GE(pages, 8u);
  EXPECT_LE(idle, 2u) << "of " << pages;  // at most the ring headers a poll read
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  EXPECT_EQ(ResidentPages(memfd).first, pages);  // all of it at the first frame, not a fault per page
  EXPECT_EQ(ReceiveOnB(), std::vector<uint8_t>{1});
  close(memfd);
}

TEST_F(DirectIoTest, ReceiverDropsFramesNotForItsQpns) {
  Pair();
  // a's routing would never put these into b's ring; a hostile peer could:
  // a DirectIo told that b owns every QPN plays it.
  sim::MemWire wire2(sim::MemWireConfig{});
  DirectIo liar(&wire2.end(0), kMacA, 1024, 1024);
  Memfd mem(2 * pktio::FrameRing::Bytes(kSlots, kSlotBytes));
  const int e1 = eventfd(0, EFD_CLOEXEC), e2 = eventfd(0, EFD_CLOEXEC);
  const int fl[3] = {dup(mem.fd), dup(e1), dup(e2)};
  const int fb[3] = {dup(mem.fd), dup(e2), dup(e1)};
  PeerMessage lm = AddMessage(9, kMacB, 2, 0);
  lm.peer_qpn_count = (1u << 24) - 2;  // "b owns every QPN"
  ASSERT_TRUE(liar.Apply(lm, fl, 3).ok());
  ASSERT_TRUE(b_.Apply(AddMessage(9, kMacA, 1024, 1), fb, 3).ok());
  SendMarkerToB(9, kKey);  // the liar's marker, as the switch would carry it (here on a's wire)
  for (uint32_t qpn : {4096u + 1, 2048u + 3, 1u}) {
    pktio::Frame x;
    ASSERT_EQ(liar.AllocTx(&x, 1), 1);
    x.len = BuildRoce(x.data, kMacB, qpn, static_cast<uint8_t>(qpn & 0xff));
    ASSERT_EQ(liar.TxBurst(&x, 1), 1);
  }
  EXPECT_EQ(liar.counters().tx_direct, 2u);  // QPN 1 is never routed to a ring (below the range)
  const std::vector<uint8_t> tags = ReceiveOnB();
  EXPECT_EQ(b_.counters().rx_direct, 1u);     // 2048 + 3 only
  EXPECT_EQ(b_.counters().rx_not_mine, 1u);   // 4096 + 1: another process's QPN
  ASSERT_EQ(tags.size(), 1u);
  EXPECT_EQ(tags[0], 3);
  close(e1);
  close(e2);
}

TEST_F(DirectIoTest, RemovedPathFallsBackToThePort) {
  Pair();
  PeerMessage rm = AddMessage(7, kMacB, 2048, 0);
  rm.op = kPeerRemove;
  rm.generation = 2;
  ASSERT_TRUE(a_.Apply(rm, nullptr, 0).ok());
  EXPECT_EQ(a_.paths(), 0u);
  EXPECT_EQ(a_.generation(), 2u);
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  EXPECT_EQ(a_.counters().tx_direct, 0u);
  EXPECT_EQ(wire_.counters(0).sent, 2u);  // the path's marker, then the frame
}

// The peer wrote into the ring and left at once (udaddy's server: its
// replies, then exit): droced withdraws the path before this side read it.
// What the peer wrote is still delivered, then the path closes; nothing
// more goes into it.
TEST_F(DirectIoTest, WithdrawnPathDeliversWhatThePeerWroteBefore) {
  Pair();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 6, 2));
  EXPECT_EQ(a_.counters().tx_direct, 2u);
  PeerMessage rm = AddMessage(7, kMacA, 1024, 1);
  rm.op = kPeerRemove;
  rm.generation = 2;
  ASSERT_TRUE(b_.Apply(rm, nullptr, 0).ok());
  EXPECT_EQ(b_.paths(), 1u);  // held until read
  EXPECT_EQ(ReceiveOnB(), (std::vector<uint8_t>{1, 2}));  // the marker (on the wire) opens it
  EXPECT_EQ(b_.paths(), 0u);
  EXPECT_EQ(b_.counters().rx_direct, 2u);
}

// The same with the marker lost on the way: the frames come after the
// marker wait, as on a path that stays.
TEST_F(DirectIoTest, WithdrawnPathWithoutItsMarkerDeliversAfterTheWait) {
  Pair();
  LoseTheMarkerOfA();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  PeerMessage rm = AddMessage(7, kMacA, 1024, 1);
  rm.op = kPeerRemove;
  ASSERT_TRUE(b_.Apply(rm, nullptr, 0).ok());
  pktio::Frame fs[4];
  EXPECT_EQ(b_.RxBurst(fs, 4), 0);
  now_ns_ += DirectIo::kMarkerWaitNs;
  ASSERT_EQ(b_.RxBurst(fs, 4), 1);
  EXPECT_EQ(fs[0].data[60], 1);
  b_.Release(fs, 1);
  EXPECT_EQ(b_.paths(), 0u);
  // Nothing of b's goes to the withdrawn ring: b's frames for a take the port.
  pktio::Frame f;
  ASSERT_EQ(b_.AllocTx(&f, 1), 1);
  f.len = BuildRoce(f.data, kMacA, 1024 + 1, 9);
  ASSERT_EQ(b_.TxBurst(&f, 1), 1);
  EXPECT_EQ(b_.counters().tx_direct, 0u);
}

// A path set up while the pair talks through the switch: the receiver reads
// the ring only after the sender's marker, which follows every frame the
// sender gave the switch before, so nothing arrives out of order; the
// marker never reaches the device.
TEST_F(DirectIoTest, RingOpensAfterTheSwitchedFramesBeforeIt) {
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));  // no path yet: the port
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 2));
  Pair();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 3));  // the ring
  EXPECT_EQ(a_.counters().tx_direct, 1u);
  EXPECT_EQ(a_.counters().markers_sent, 1u);
  EXPECT_EQ(ReceiveOnB(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(b_.counters().markers_received, 1u);
  EXPECT_EQ(b_.counters().markers_missed, 0u);
}

// A marker with the path's id but not its key (any process can address a
// frame to b; only a and b know the key) leaves the ring closed: the frames
// a gave the switch before the path still come before the ring's. The real
// marker then opens it.
TEST_F(DirectIoTest, ForgedMarkerDoesNotOpenTheRing) {
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));  // no path yet: the port
  Pair();                                       // a's marker follows it on the port
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 2));  // the ring
  // The switch is slow: frame 1 and the marker are still in it (taken off
  // the wire here, put back below), and a forged marker overtakes them.
  std::vector<std::vector<uint8_t>> in_switch;
  {
    pktio::Frame fs[4];
    const uint16_t n = wire_.end(1).RxBurst(fs, 4);
    ASSERT_EQ(n, 2);
    for (uint16_t i = 0; i < n; ++i) in_switch.emplace_back(fs[i].data, fs[i].data + fs[i].len);
    wire_.end(1).Release(fs, n);
  }
  SendMarkerToB(7, kKey ^ 1);
  EXPECT_TRUE(ReceiveOnB().empty());  // the ring stays closed: 2 must not overtake 1
  EXPECT_EQ(b_.counters().markers_forged, 1u);
  EXPECT_EQ(b_.counters().markers_received, 0u);
  for (const std::vector<uint8_t>& bytes : in_switch) {
    pktio::Frame f;
    ASSERT_EQ(wire_.end(0).AllocTx(&f, 1), 1);
    std::memcpy(f.data, bytes.data(), bytes.size());
    f.len = static_cast<uint32_t>(bytes.size());
    ASSERT_EQ(wire_.end(0).TxBurst(&f, 1), 1);
  }
  EXPECT_EQ(ReceiveOnB(), (std::vector<uint8_t>{1, 2}));
  EXPECT_EQ(b_.counters().markers_received, 1u);
  EXPECT_EQ(b_.counters().markers_missed, 0u);
}

// A forged marker that comes before its path's kPeerAdd is kept with its
// key, and the path, when it arrives with another key, stays closed.
TEST_F(DirectIoTest, EarlyForgedMarkerDoesNotOpenThePath) {
  SendMarkerToB(7, kKey ^ 1);
  EXPECT_TRUE(ReceiveOnB().empty());
  Pair();
  LoseTheMarkerOfA();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  EXPECT_TRUE(ReceiveOnB().empty());
  SendMarkerToB(7, kKey);  // the real one
  EXPECT_EQ(ReceiveOnB(), std::vector<uint8_t>{1});
}

// The marker before its path's kPeerAdd (the control connection is read
// later than the port): the path opens as soon as it is added.
TEST_F(DirectIoTest, EarlyMarkerOpensThePathWhenItArrives) {
  Memfd mem(2 * pktio::FrameRing::Bytes(kSlots, kSlotBytes));
  efd_a_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  efd_b_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int fa[3] = {dup(mem.fd), dup(efd_a_), dup(efd_b_)};
  const int fb[3] = {dup(mem.fd), dup(efd_b_), dup(efd_a_)};
  ASSERT_TRUE(a_.Apply(AddMessage(7, kMacB, 2048, 0), fa, 3).ok());
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));  // the ring
  EXPECT_TRUE(ReceiveOnB().empty());            // b takes the marker; no path yet
  ASSERT_TRUE(b_.Apply(AddMessage(7, kMacA, 1024, 1), fb, 3).ok());
  EXPECT_EQ(ReceiveOnB(), std::vector<uint8_t>{1});
  EXPECT_EQ(b_.counters().markers_missed, 0u);
}

// A marker the switch dropped: the ring opens once frames have waited in it
// for kMarkerWaitNs (virtual time) with the port empty, however often or
// rarely the receiver polls meanwhile.
TEST_F(DirectIoTest, LostMarkerOpensTheRingAfterAWait) {
  Pair();
  LoseTheMarkerOfA();
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 5, 1));
  pktio::Frame fs[4];
  for (int i = 0; i < 20000; ++i) ASSERT_EQ(b_.RxBurst(fs, 4), 0);  // polls alone open nothing
  now_ns_ += DirectIo::kMarkerWaitNs - 1;
  EXPECT_EQ(b_.RxBurst(fs, 4), 0);
  now_ns_ += 1;
  ASSERT_EQ(b_.RxBurst(fs, 4), 1);  // a single poll once the time is up
  EXPECT_EQ(fs[0].data[60], 1);
  b_.Release(fs, 1);
  EXPECT_EQ(b_.counters().markers_missed, 1u);
}

// A marker the switch dropped while the receiver sleeps (it polls rarely):
// the sender, refused by the full ring for kMarkerResendNs (virtual time),
// sends the marker again, and the receiver opens the ring on it.
TEST_F(DirectIoTest, FullClosedRingMakesTheSenderSendTheMarkerAgain) {
  Pair();
  LoseTheMarkerOfA();
  int sent = 0;
  while (SendFromA(kMacB, 2048 + 1, static_cast<uint8_t>(sent)) && sent < 100) ++sent;
  EXPECT_EQ(sent, static_cast<int>(kSlots));
  for (uint32_t i = 0; i < 5000; ++i) EXPECT_FALSE(SendFromA(kMacB, 2048 + 1, 0));
  EXPECT_EQ(a_.counters().markers_sent, 1u);  // refusals alone resend nothing
  now_ns_ += DirectIo::kMarkerResendNs;
  EXPECT_FALSE(SendFromA(kMacB, 2048 + 1, 0));
  EXPECT_EQ(a_.counters().markers_sent, 2u);
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  EXPECT_EQ(b_.counters().markers_missed, 0u);
  EXPECT_EQ(b_.counters().markers_received, 1u);
}

TEST_F(DirectIoTest, FullRingPushesBack) {
  Pair();
  int sent = 0;
  while (SendFromA(kMacB, 2048 + 1, static_cast<uint8_t>(sent)) && sent < 100) ++sent;
  EXPECT_EQ(sent, static_cast<int>(kSlots));  // then TxBurst refuses: the device keeps the frame
  EXPECT_EQ(a_.counters().tx_ring_full, 1u);
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  EXPECT_TRUE(SendFromA(kMacB, 2048 + 1, 0));
}

// A gather frame (pktio::Frame::gather) as the transport builds one: the
// 80 header bytes, then the 4 bytes that follow the payload, in the buffer;
// the payload in `payload` (registered memory).
pktio::Frame GatherFrame(pktio::Frame f, const std::array<uint8_t, 6>& dst, uint32_t qpn, uint8_t tag,
                         const std::vector<uint8_t>& payload) {
  BuildRoce(f.data, dst, qpn, tag);
  std::memcpy(f.data + 80, "ICRC", 4);
  f.gather = payload.data();
  f.gather_len = static_cast<uint32_t>(payload.size());
  f.gather_at = 80;
  f.len = 80 + f.gather_len + 4;
  return f;
}

std::vector<uint8_t> PayloadBytes(uint32_t len, uint8_t seed) {
  std::vector<uint8_t> p(len);
  for (uint32_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(i * 5 + seed);
  return p;
}

// What the frame is, flat: the headers, the payload, the 4 bytes after it.
void ExpectWhole(const uint8_t* got, uint32_t len, uint8_t tag, const std::vector<uint8_t>& payload) {
  ASSERT_EQ(len, 80 + payload.size() + 4);
  EXPECT_EQ(got[60], tag);
  EXPECT_EQ(std::memcmp(got + 80, payload.data(), payload.size()), 0) << "the payload";
  EXPECT_EQ(std::memcmp(got + 80 + payload.size(), "ICRC", 4), 0) << "what follows it";
}

// A gather frame for the peer's ring is copied into the slot in its pieces,
// the payload from where it points: the peer gets it byte-exact, and the
// sender's memory changing once TxBurst returned changes nothing.
TEST_F(DirectIoTest, GatherFrameIntoARingArrivesWhole) {
  EXPECT_TRUE(a_.TakesGather());
  Pair();
  std::vector<uint8_t> payload = PayloadBytes(3000, 1);
  const std::vector<uint8_t> sent = payload;
  pktio::Frame f;
  ASSERT_EQ(a_.AllocTx(&f, 1), 1);
  f = GatherFrame(f, kMacB, 2048 + 5, 9, payload);
  ASSERT_EQ(a_.TxBurst(&f, 1), 1);
  std::fill(payload.begin(), payload.end(), 0xee);
  EXPECT_EQ(a_.counters().tx_direct, 1u);
  EXPECT_EQ(a_.counters().tx_gathered, 1u);
  EXPECT_EQ(a_.counters().tx_flattened, 0u);
  pktio::Frame fs[4];
  ASSERT_EQ(FirstBurstOnB(fs, 4), 1);
  EXPECT_EQ(b_.counters().rx_direct, 1u);
  ExpectWhole(fs[0].data, fs[0].len, 9, sent);
  b_.Release(fs, 1);
}

// A gather frame for the port (droced: another process's QPN here) is
// flattened before the port gets it, the port here taking none.
TEST_F(DirectIoTest, GatherFrameForThePortIsFlattened) {
  Pair();
  std::vector<uint8_t> payload = PayloadBytes(2000, 2);
  const std::vector<uint8_t> sent = payload;
  pktio::Frame f[2];
  ASSERT_EQ(a_.AllocTx(f, 2), 2);
  f[0] = GatherFrame(f[0], kMacB, 4096 + 5, 3, payload);  // b's MAC, another process's QPN
  f[1] = GatherFrame(f[1], kMacB, 2048 + 5, 4, payload);  // b's: the ring
  ASSERT_EQ(a_.TxBurst(f, 2), 2);
  std::fill(payload.begin(), payload.end(), 0xee);
  EXPECT_EQ(a_.counters().tx_flattened, 1u);
  EXPECT_EQ(a_.counters().tx_gathered, 1u);
  pktio::Frame w[4];
  ASSERT_EQ(wire_.end(1).RxBurst(w, 4), 2);  // the marker, then the frame
  ExpectWhole(w[1].data, w[1].len, 3, sent);
  wire_.end(1).Release(w, 2);
}

// Frames a full ring refuses go back to the device flattened (none points
// into registered memory once TxBurst returned): retried after the memory
// changed, the frame sent is the one built.
TEST_F(DirectIoTest, GatherFrameARingRefusesComesBackFlattened) {
  Pair();
  FillTheRingToB();
  std::vector<uint8_t> payload = PayloadBytes(2500, 3);
  const std::vector<uint8_t> built = payload;
  pktio::Frame f[2];
  ASSERT_EQ(a_.AllocTx(f, 2), 2);
  f[0] = GatherFrame(f[0], kMacB, 2048 + 5, 0x77, payload);
  f[1] = GatherFrame(f[1], kMacB, 4096 + 5, 0x78, payload);  // for the port, behind the refused one
  ASSERT_EQ(a_.TxBurst(f, 2), 0);
  for (const pktio::Frame& r : f) {
    EXPECT_EQ(r.gather_len, 0u);
    EXPECT_EQ(r.gather, nullptr);
  }
  EXPECT_EQ(a_.counters().tx_flattened, 2u);
  ExpectWhole(f[0].data, f[0].len, 0x77, built);
  std::fill(payload.begin(), payload.end(), 0xee);
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  ASSERT_EQ(a_.TxBurst(f, 1), 1);
  pktio::Frame fs[4];
  ASSERT_EQ(FirstBurstOnB(fs, 4), 1);
  ExpectWhole(fs[0].data, fs[0].len, 0x77, built);
  b_.Release(fs, 1);
  a_.Release(f + 1, 1);
}

// A netdev-bound device's port (udp::UdpIo) in front of the direct rings,
// b being another process of the host (AddHostMac: not the socket's).
class UdpOverDirectTest : public DirectIoTest {
 protected:
  UdpOverDirectTest() {
    uint16_t port = 0;
    absl::StatusOr<int> fd = udp::OpenSocket(udp::SocketConfig{}, &port);
    EXPECT_TRUE(fd.ok()) << fd.status();
    udp_.emplace(&a_, fd.ok() ? *fd : -1, port, kMacA);
    udp_->AddHostMac(kMacB);
  }
  std::optional<udp::UdpIo> udp_;
};

// A gather frame for the peer's ring goes through UdpIo as it is (the
// socket's gather sends off: it takes them because the rings do), and the
// ring copies its payload into the slot: the peer gets it byte-exact,
// nothing was flattened.
TEST_F(UdpOverDirectTest, GatherFrameCrossesToTheRingWhole) {
  udp_->set_gather(false);
  EXPECT_TRUE(udp_->TakesGather());
  Pair();
  std::vector<uint8_t> payload = PayloadBytes(3000, 4);
  const std::vector<uint8_t> sent = payload;
  pktio::Frame f;
  ASSERT_EQ(udp_->AllocTx(&f, 1), 1);
  f = GatherFrame(f, kMacB, 2048 + 5, 0x51, payload);
  ASSERT_EQ(udp_->TxBurst(&f, 1), 1);
  std::fill(payload.begin(), payload.end(), 0xee);
  EXPECT_EQ(udp_->counters().tx_flattened, 0u);
  EXPECT_EQ(a_.counters().tx_gathered, 1u);
  EXPECT_EQ(a_.counters().tx_flattened, 0u);
  pktio::Frame fs[4];
  ASSERT_EQ(FirstBurstOnB(fs, 4), 1);
  ExpectWhole(fs[0].data, fs[0].len, 0x51, sent);
  b_.Release(fs, 1);
}

// A full ring refuses a gather frame: it comes back through UdpIo flat, and
// so does the frame for the socket behind it, never sent; retried after
// the memory changed, the frame the peer gets is the one built.
TEST_F(UdpOverDirectTest, GatherFramesAFullRingRefusesComeBackFlat) {
  Pair();
  FillTheRingToB();
  std::vector<uint8_t> payload = PayloadBytes(2500, 5);
  const std::vector<uint8_t> built = payload;
  constexpr std::array<uint8_t, 6> kOtherHost = {0x02, 0, 0, 0, 0, 0xc};
  pktio::Frame f[2];
  ASSERT_EQ(udp_->AllocTx(f, 2), 2);
  f[0] = GatherFrame(f[0], kMacB, 2048 + 5, 0x61, payload);
  f[1] = GatherFrame(f[1], kOtherHost, 2048 + 5, 0x62, payload);  // the socket's, behind the refused one
  ASSERT_EQ(udp_->TxBurst(f, 2), 0);
  for (const pktio::Frame& r : f) {
    EXPECT_EQ(r.gather_len, 0u);
    EXPECT_EQ(r.gather, nullptr);
  }
  EXPECT_EQ(a_.counters().tx_flattened, 1u);
  EXPECT_EQ(udp_->counters().tx_flattened, 1u);
  ExpectWhole(f[0].data, f[0].len, 0x61, built);
  ExpectWhole(f[1].data, f[1].len, 0x62, built);
  std::fill(payload.begin(), payload.end(), 0xee);
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  ASSERT_EQ(udp_->TxBurst(f, 1), 1);
  pktio::Frame fs[4];
  ASSERT_EQ(FirstBurstOnB(fs, 4), 1);
  ExpectWhole(fs[0].data, fs[0].len, 0x61, built);
  b_.Release(fs, 1);
  udp_->Release(f + 1, 1);
}

TEST_F(DirectIoTest, SleepingReceiverIsWoken) {
  Pair();
  const int wire = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // stands in for memif's
  const int fd = b_.Arm(wire);
  ASSERT_GE(fd, 0);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 1, 1));
  EXPECT_EQ(a_.counters().wakeups_sent, 1u);
  EXPECT_EQ(poll(&p, 1, 1000), 1);
  b_.Disarm();
  EXPECT_EQ(poll(&p, 1, 0), 0);  // drained
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 1, 2));
  EXPECT_EQ(a_.counters().wakeups_sent, 1u);  // not armed: no system call
  EXPECT_EQ(ReceiveOnB().size(), 2u);
  close(wire);
}

// A sender whose full ring holds frames back sleeps armed: the receiver,
// freeing slots, writes the eventfd the sender sleeps on (its arrivals'),
// once per sleep and only while it sleeps.
TEST_F(DirectIoTest, SenderSleepingOnAFullRingIsWokenWhenSlotsAreFreed) {
  Pair();
  int sent = 0;
  while (SendFromA(kMacB, 2048 + 1, static_cast<uint8_t>(sent)) && sent < 100) ++sent;
  ASSERT_EQ(sent, static_cast<int>(kSlots));  // the last one was refused: the device holds it
  const int wire = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int fd = a_.Arm(wire);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(a_.counters().tx_full_sleeps, 1u);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  EXPECT_EQ(b_.counters().producer_wakeups_sent, 1u);
  EXPECT_EQ(poll(&p, 1, 1000), 1);
  a_.Disarm();
  EXPECT_EQ(poll(&p, 1, 0), 0);  // drained
  // Not held back when it sleeps: freeing slots wakes nobody.
  ASSERT_TRUE(SendFromA(kMacB, 2048 + 1, 1));
  ASSERT_GE(a_.Arm(wire), 0);
  EXPECT_EQ(a_.counters().tx_full_sleeps, 1u);
  EXPECT_EQ(ReceiveOnB().size(), 1u);
  EXPECT_EQ(poll(&p, 1, 0), 0);
  a_.Disarm();
  // Held back but awake (disarmed): no system call either.
  sent = 0;
  while (SendFromA(kMacB, 2048 + 1, static_cast<uint8_t>(sent)) && sent < 100) ++sent;
  ASSERT_EQ(sent, static_cast<int>(kSlots));
  ASSERT_GE(a_.Arm(wire), 0);
  a_.Disarm();
  EXPECT_EQ(ReceiveOnB().size(), kSlots);
  EXPECT_EQ(b_.counters().producer_wakeups_sent, 1u);
  close(wire);
}

// Lost wake-ups between a sender held back by a full ring and its receiver,
// in two threads, with the real descriptors: the sender keeps what the ring
// refused (as core::Device's backlog does) and, whenever it is refused,
// arms (DirectIo::Arm), retries once and then sleeps on the armed descriptor
// with no timer of its own; the receiver frees slots one to three at a time
// at its own pace. 100000 frames through 8 slots: a slot freed after the
// sender's retry without its descriptor becoming readable leaves it asleep
// (a lost wake-up: the poll's 5 s bound fails the test); every frame comes
// once, in order. Each side on its own wire (MemWire is single-threaded):
// the receiver opens the ring after the marker wait, in virtual time.
// `lend`: the receiver lends 2 KiB frames (their slots go back when it
// releases the burst, DirectIo::Release) instead of copying 80 B ones.
void HeldSenderStress(bool lend) {
  constexpr uint32_t kFrames = 100000;
  sim::MemWire wire_a{sim::MemWireConfig{}}, wire_b{sim::MemWireConfig{}};
  uint64_t now_ns = 1;
  DirectIo a(&wire_a.end(0), kMacA, 1024, 1024, [&now_ns] { return now_ns; });
  DirectIo b(&wire_b.end(0), kMacB, 2048, 1024, [&now_ns] { return now_ns; });
  Memfd mem(2 * pktio::FrameRing::Bytes(kSlots, kSlotBytes));
  const int efd_a = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), efd_b = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int fa[3] = {dup(mem.fd), dup(efd_a), dup(efd_b)};
  const int fb[3] = {dup(mem.fd), dup(efd_b), dup(efd_a)};
  ASSERT_TRUE(a.Apply(AddMessage(7, kMacB, 2048, 0), fa, 3).ok());
  ASSERT_TRUE(b.Apply(AddMessage(7, kMacA, 1024, 1), fb, 3).ok());
  b.AllowLending(lend);
  ASSERT_EQ(b.StartLending(), lend);
  auto send = [lend](uint32_t seq, pktio::Frame* f) {
    f->len = BuildRoce(f->data, kMacB, 2048 + 1, 0);
    std::memcpy(f->data + 64, &seq, sizeof seq);  // in the headers a lent frame copies
    if (lend) f->len = 2048;
  };
  // Open b's ring: its first frame waits out the marker wait (the marker
  // went to a's wire, which nobody reads).
  pktio::Frame first;
  ASSERT_EQ(a.AllocTx(&first, 1), 1);
  send(0, &first);
  ASSERT_EQ(a.TxBurst(&first, 1), 1);
  pktio::Frame got[4];
  ASSERT_EQ(b.RxBurst(got, 4), 0);
  now_ns += DirectIo::kMarkerWaitNs + 1;
  ASSERT_EQ(b.RxBurst(got, 1), 1);
  b.Release(got, 1);
  const int wire = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);  // stands in for memif's: never fires
  std::atomic<bool> failed{false};
  uint32_t sleeps = 0;
  std::thread sender([&] {
    pktio::Frame held[4];
    uint16_t n_held = 0;
    for (uint32_t seq = 1; seq < kFrames && !failed.load(std::memory_order_relaxed);) {
      while (n_held < 4 && seq + n_held < kFrames && a.AllocTx(&held[n_held], 1) == 1) {
        send(seq + n_held, &held[n_held]);
        ++n_held;
      }
      uint16_t took = a.TxBurst(held, n_held);
      if (took == 0) {
        const int fd = a.Arm(wire);
        if (n_held == 0 || !a.tx_blocked_on_ring() || fd < 0) {
          ADD_FAILURE() << "held " << n_held << " blocked " << a.tx_blocked_on_ring() << " fd " << fd;
          failed.store(true, std::memory_order_relaxed);
          break;
        }
        took = a.TxBurst(held, n_held);  // the look after arming
        if (took == 0) {
          ++sleeps;
          pollfd p{fd, POLLIN, 0};
          if (poll(&p, 1, 5000) != 1) {
            ADD_FAILURE() << "the sender slept through freed slots at frame " << seq;
            failed.store(true, std::memory_order_relaxed);
          }
        }
        a.Disarm();
      }
      std::copy(held + took, held + n_held, held);
      n_held = static_cast<uint16_t>(n_held - took);
      seq += took;
    }
  });
  uint32_t expect = 1, step = 0;
  while (expect < kFrames && !failed.load(std::memory_order_relaxed)) {
    const uint16_t n = b.RxBurst(got, static_cast<uint16_t>(1 + step++ % 3));
    for (uint16_t i = 0; i < n; ++i) {
      uint32_t seq = 0;
      std::memcpy(&seq, got[i].data + 64, sizeof seq);
      if (seq != expect) {
        ADD_FAILURE() << "frame " << seq << " where " << expect << " was due";
        failed.store(true, std::memory_order_relaxed);
      }
      ++expect;
    }
    b.Release(got, n);
    if (n == 0 || step % 5 == 0) std::this_thread::yield();
  }
  sender.join();
  EXPECT_EQ(expect, kFrames);
  EXPECT_GT(sleeps, 0u);
  EXPECT_GE(a.counters().tx_full_sleeps, sleeps);  // every arm with frames held, slept or not
  EXPECT_GT(b.counters().producer_wakeups_sent, 0u);
  EXPECT_EQ(b.counters().rx_lent > 0, lend);
  close(wire);
  close(efd_a);
  close(efd_b);
}

TEST(DirectIoThreads, SenderHeldByAFullRingIsNeverLeftAsleep) { HeldSenderStress(false); }
TEST(DirectIoThreads, SenderHeldByAFullRingOfLentFramesIsNeverLeftAsleep) { HeldSenderStress(true); }

TEST_F(DirectIoTest, RefusesBadMessages) {
  const size_t bytes = 2 * pktio::FrameRing::Bytes(kSlots, kSlotBytes);
  {
    Memfd unsealed(bytes, /*seal=*/false);
    const int f[3] = {dup(unsealed.fd), eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC)};
    EXPECT_FALSE(a_.Apply(AddMessage(1, kMacB, 2048, 0), f, 3).ok());  // could be truncated under us
  }
  {
    Memfd small(bytes - 4096);
    const int f[3] = {dup(small.fd), eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC)};
    EXPECT_FALSE(a_.Apply(AddMessage(1, kMacB, 2048, 0), f, 3).ok());
  }
  {
    Memfd ok(bytes);
    PeerMessage m = AddMessage(1, kMacB, 2048, 0);
    m.slots = 6;
    const int f[3] = {dup(ok.fd), eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC)};
    EXPECT_FALSE(a_.Apply(m, f, 3).ok());
    PeerMessage r = AddMessage(1, kMacB, 2048, 0);
    r.reserved[3] = 1;
    const int g[3] = {dup(ok.fd), eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC)};
    EXPECT_FALSE(a_.Apply(r, g, 3).ok());
    const int h[1] = {dup(ok.fd)};
    EXPECT_FALSE(a_.Apply(AddMessage(1, kMacB, 2048, 0), h, 1).ok());
  }
  EXPECT_EQ(a_.paths(), 0u);
  EXPECT_EQ(a_.counters().messages_refused, 5u);
}


// Two core::Devices talking over a pair of DirectIo (each in front of one
// end of a MemWire, the "switch"), lending as the verbs runtime does by
// default (direct_lend): long WRITEs, SENDs and READs arrive exact. Most of a
// message's frames are lent; its FIRST (and anything else the QP does not
// place from the slot) is taken whole by the device before it is released,
// and the ring must go on after it.
class DirectIoDevices : public ::testing::TestWithParam<uint32_t> {
 protected:
  static constexpr uint32_t kRingSlots = 64;
  static constexpr uint32_t kQpnBase = 1024;  // both devices' (as droced gives each process its own MAC)
  DirectIoDevices()
      : wire_(Roomy()),
        io_{DirectIo(&wire_.end(0), Mac(0), kQpnBase, 1024, [this] { return Now(); }),
            DirectIo(&wire_.end(1), Mac(1), kQpnBase, 1024, [this] { return Now(); })} {
    Memfd mem(2 * pktio::FrameRing::Bytes(kRingSlots, kSlotBytes));
    efd_[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    efd_[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    for (int i = 0; i < 2; ++i) {
      const int fds[3] = {dup(mem.fd), dup(efd_[i]), dup(efd_[1 - i])};
      PeerMessage m = AddMessage(7, Mac(1 - i), kQpnBase, static_cast<uint32_t>(i));
      m.slots = kRingSlots;
      EXPECT_TRUE(io_[i].Apply(m, fds, 3).ok());
      io_[i].AllowLending(true);
    }
    core::testing::DevicePairOptions o;
    o.config.qpn_base = kQpnBase;
    o.mem_bytes = 1 << 20;
    o.mtu = GetParam();
    pair_ = std::make_unique<core::testing::DevicePair>(&io_[0], &io_[1], o);
  }
  ~DirectIoDevices() override {
    pair_.reset();
    for (int fd : efd_) close(fd);
  }
  static sim::MemWireConfig Roomy() {
    sim::MemWireConfig wc;
    wc.pool_frames = 4096;
    wc.queue_frames = 4096;
    return wc;
  }
  static std::array<uint8_t, 6> Mac(int i) { return {0x02, 0, 0, 0, 0, static_cast<uint8_t>(i + 1)}; }
  uint64_t Now() const { return pair_ ? pair_->now : 1'000'000; }

  sim::MemWire wire_;
  DirectIo io_[2];
  int efd_[2] = {-1, -1};
  std::unique_ptr<core::testing::DevicePair> pair_;
};

TEST_P(DirectIoDevices, LongMessagesOverLentFramesArriveExact) {
  core::testing::DevicePair& p = *pair_;
  const uint32_t sizes[] = {262144, 65536 + 5, 3 * GetParam() + 1026, 262144};
  uint64_t wr = 0;
  for (uint32_t len : sizes) {
    SCOPED_TRACE(::testing::Message() << "len " << len);
    for (uint32_t i = 0; i < len; ++i) p.mem[0][i] = static_cast<uint8_t>(i * 7 + wr + (i >> 9));
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(transport::WrOpcode::kRdmaWrite, len, 0, 0, ++wr)), 0);
    std::vector<queue::Completion> done = p.RunUntil(1, 2'000'000);
    ASSERT_EQ(done.size(), 1u) << "the WRITE did not complete";
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(p.mem[0].data(), p.mem[1].data(), len), 0);
    transport::RecvWr r;
    r.wr_id = 1000 + wr;
    r.num_sge = 1;
    r.sg_list[0] = {reinterpret_cast<uint64_t>(p.mem[1].data()) + 300000, len, p.keys[1].lkey};
    ASSERT_EQ(p.dev[1]->PostRecv(p.qpn[1][0], r), 0);
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(transport::WrOpcode::kSend, len, 0, 0, ++wr)), 0);
    done = p.RunUntil(1, 2'000'000);
    ASSERT_EQ(done.size(), 1u) << "the SEND did not complete";
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(p.mem[0].data(), p.mem[1].data() + 300000, len), 0);
    ASSERT_EQ(p.dev[0]->PostSend(p.qpn[0][0], p.Wr(transport::WrOpcode::kRdmaRead, len, 600000, 0, ++wr)), 0);
    done = p.RunUntil(1, 2'000'000);
    ASSERT_EQ(done.size(), 1u) << "the READ did not complete";
    EXPECT_EQ(done[0].status, queue::WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(p.mem[0].data() + 600000, p.mem[1].data(), len), 0);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_GT(io_[i].counters().rx_direct, 100u) << "the frames did not take the rings";
    EXPECT_GT(io_[i].counters().rx_lent, 100u) << "no frame was lent";
    // Device 0's WRITEs and SENDs, device 1's READ responses: built as gather
    // frames, their payloads copied into the slots from the registered memory.
    EXPECT_GT(io_[i].counters().tx_gathered, 100u) << "no gather frame took the ring";
    EXPECT_EQ(p.dev[i]->counters().rx_parse_errors[static_cast<int>(wire::ParseStatus::kBadIcrc)], 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Mtu, DirectIoDevices, ::testing::Values(1024u, 4096u));

}  // namespace
}  // namespace droce::ethdev
