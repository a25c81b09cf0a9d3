// Error paths of the RC transport: the remote side never touches memory it
// may not, and every failure completes with the status verbs defines.
#include <cerrno>

#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using queue::Completion;
using queue::WcStatus;
using transport::SendWr;
using transport::WrOpcode;

// Posts one WR that the responder must refuse, and checks the requester's
// completion, the QP states and that the responder's memory is untouched.
void ExpectRemoteRefusal(WrOpcode op, uint32_t len, int64_t addr_delta, int32_t rkey_delta,
                         WcStatus expected, const char* what) {
  RcPair pair({}, 1);
  Side& a = pair.a();
  Side& b = pair.b();
  SendWr wr = MakeWr(1, op, a, 0, len, b, 0);
  wr.remote_addr += addr_delta;
  wr.rkey += rkey_delta;
  Fill(a.mem, 0, 8192, 3);
  const std::vector<uint8_t> before = b.mem;
  ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0) << what;
  SendWr after = MakeWr(99, WrOpcode::kSend, a, 0, 16, b, 0);  // flushed behind it
  ASSERT_EQ(a.dev->PostSend(a.qpn, after), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 0)) << what;
  ASSERT_EQ(ca.size(), 2u) << what;
  EXPECT_EQ(ca[0].status, expected) << what << ": " << queue::WcStatusName(ca[0].status);
  EXPECT_EQ(ca[1].status, WcStatus::kWrFlushErr) << what;
  EXPECT_EQ(ca[1].wr_id, 99u);
  EXPECT_EQ(a.dev->qp(a.qpn)->state(), transport::QpState::kErr) << what;
  EXPECT_EQ(b.dev->qp(b.qpn)->state(), transport::QpState::kErr) << what;
  EXPECT_TRUE(b.mem == before) << what << ": responder memory changed";
}

TEST(RcErrors, RemoteAccessViolationsAreNakedAndTouchNothing) {
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead, WrOpcode::kAtomicFetchAndAdd}) {
    const uint32_t len = op == WrOpcode::kAtomicFetchAndAdd ? 8 : 4096;
    struct Case {
      const char* name;
      int64_t addr_delta;  // relative to the start of b's region
      int32_t rkey_delta;
    };
    for (Case c : {Case{"bad rkey", 0, 1}, Case{"below region", -8, 0},
                   Case{"past end", (4 << 20) - int64_t{len} + 8, 0}, Case{"huge address", INT64_MAX / 2, 0}}) {
      ExpectRemoteRefusal(op, len, c.addr_delta, c.rkey_delta, WcStatus::kRemAccessErr, c.name);
    }
  }
}

TEST(RcErrors, MissingAccessRightIsRemoteAccessError) {
  RcPair pair({}, 1);
  Side& a = pair.a();
  Side& b = pair.b();
  std::vector<uint8_t> ro(4096, 0x5A);
  auto keys = *b.dev->RegMr(b.pd, ro.data(), ro.size(), reinterpret_cast<uint64_t>(ro.data()),
                            mem::kRemoteRead);
  SendWr wr = MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 0);
  wr.remote_addr = reinterpret_cast<uint64_t>(ro.data());
  wr.rkey = keys.rkey;
  ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(ro, std::vector<uint8_t>(4096, 0x5A));
}

TEST(RcErrors, BadLocalKeyIsLocalProtectionError) {
  RcPair pair({}, 1);
  SendWr wr = MakeWr(7, WrOpcode::kRdmaWrite, pair.a(), 0, 64, pair.b(), 0);
  wr.sg_list[0].lkey ^= 0x100;
  ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, wr), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].wr_id, 7u);
  EXPECT_EQ(ca[0].status, WcStatus::kLocProtErr);
  // Nothing may leave for a WR that failed locally (nor for stale queue slots after the flush).
  EXPECT_EQ(pair.a().dev->qp(pair.a().qpn)->counters().tx_packets, 0u);
  EXPECT_EQ(pair.link().counters(0).sent, 0u);
}

// The requester answers an SGE through the region its L_Key resolved for
// an earlier WQE (Qp::ResolveLocal) only inside that region, for an access
// the region grants, and while nothing was deregistered since.
TEST(RcErrors, ALocalKeyResolvedBeforeStillChecksEverySge) {
  constexpr uint32_t kMemBytes = 1 << 16;
  for (int c = 0; c < 4; ++c) {
    RcPair pair({}, 1, 1024, kMemBytes);
    Side& a = pair.a();
    Side& b = pair.b();
    std::vector<uint8_t> read_only(4096, 0x33);  // a local buffer without local write
    const auto ro = *a.dev->RegMr(a.pd, read_only.data(), read_only.size(),
                                  reinterpret_cast<uint64_t>(read_only.data()), 0);
    SendWr first = MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 0);
    if (c == 2) first.sg_list[0] = {reinterpret_cast<uint64_t>(read_only.data()), 64, ro.lkey};
    ASSERT_EQ(a.dev->PostSend(a.qpn, first), 0);
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
    ASSERT_EQ(ca[0].status, WcStatus::kSuccess) << c;
    SendWr next = MakeWr(2, WrOpcode::kRdmaWrite, a, kMemBytes - 32, 64, b, 0);  // c 0: past the end
    if (c == 1) next.sg_list[0].addr = reinterpret_cast<uint64_t>(a.mem.data()) - 1;  // below the start
    if (c == 2) {  // a READ lands in the region: it needs local write
      next = MakeWr(2, WrOpcode::kRdmaRead, a, 0, 64, b, 0);
      next.sg_list[0] = {reinterpret_cast<uint64_t>(read_only.data()), 64, ro.lkey};
    }
    if (c == 3) {
      next = MakeWr(2, WrOpcode::kRdmaWrite, a, 0, 64, b, 0);
      ASSERT_TRUE(a.dev->DeregMr(a.keys.lkey).ok());
    }
    ASSERT_EQ(a.dev->PostSend(a.qpn, next), 0);
    ca.clear();
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
    EXPECT_EQ(ca[0].wr_id, 2u);
    EXPECT_EQ(ca[0].status, WcStatus::kLocProtErr) << c;
    EXPECT_EQ(read_only, std::vector<uint8_t>(4096, 0x33)) << c;
  }
}

TEST(RcErrors, RnrRetryExhaustion) {
  RcPair pair({}, 1, 1024, 1 << 20, 0, 0, 8, 7, /*rnr_retry=*/2);
  SendWr wr = MakeWr(1, WrOpcode::kSend, pair.a(), 0, 100, pair.b(), 0);
  ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, wr), 0);  // no receive posted at b
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kRnrRetryExcErr);
  EXPECT_EQ(pair.a().dev->qp(pair.a().qpn)->counters().rnr_naks_received, 3u);  // 1 + 2 retries
}

TEST(RcErrors, RnrThenReceivePostedSucceeds) {
  RcPair pair({}, 1);  // rnr_retry 7 = infinite
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 100, 9);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 100, b, 0)), 0);
  std::vector<Completion> ca, cb;
  EXPECT_FALSE(pair.Run(&ca, 1, &cb, 0, 5'000'000));  // 5 ms of RNR NAKs
  EXPECT_GT(a.dev->qp(a.qpn)->counters().rnr_naks_received, 0u);
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(2, b, 1000, 100)), 0);
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[0].byte_len, 100u);
  EXPECT_EQ(std::memcmp(b.mem.data() + 1000, a.mem.data(), 100), 0);
}

TEST(RcErrors, RetryExhaustionWhenPeerVanishes) {
  RcPair pair({1.0, 0, 0, 0}, 1, 1024, 1 << 20, 0, 0, /*timeout=*/4, /*retry=*/3);
  ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, MakeWr(1, WrOpcode::kRdmaWrite, pair.a(), 0, 64, pair.b(), 0)), 0);
  ASSERT_EQ(pair.a().dev->PostSend(pair.a().qpn, MakeWr(2, WrOpcode::kRdmaRead, pair.a(), 64, 64, pair.b(), 0)), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kRetryExcErr);
  EXPECT_EQ(ca[1].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(pair.a().dev->qp(pair.a().qpn)->counters().timeouts, 4u);  // 1 + 3 retries
}

TEST(RcErrors, ReceiveTooSmallIsLengthError) {
  RcPair pair({}, 1);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(5, b, 0, 10)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 11, b, 0)), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(cb[0].status, WcStatus::kLocLenErr);
  EXPECT_EQ(ca[0].status, WcStatus::kRemInvReqErr);
}

TEST(RcErrors, CqOverflowIsDetected) {
  RcPair pair({}, 1);
  Side& a = pair.a();
  auto small_cq = *a.dev->CreateCq(2);
  QpInitAttr init;
  init.pd = a.pd;
  init.send_cq = init.recv_cq = small_cq;
  auto qpn = *a.dev->CreateQp(init);
  transport::QpAttr attr;
  attr.qp_state = transport::QpState::kInit;
  ASSERT_TRUE(a.dev->ModifyQp(qpn, attr, transport::kAttrState | transport::kAttrPkeyIndex |
                                             transport::kAttrPort | transport::kAttrAccessFlags).ok());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a.dev->PostRecv(qpn, MakeRecv(i, a, 0, 8)), 0);
  attr.qp_state = transport::QpState::kErr;  // flushes three receives into a CQ of two
  ASSERT_TRUE(a.dev->ModifyQp(qpn, attr, transport::kAttrState).ok());
  EXPECT_TRUE(a.dev->cq(small_cq)->overflowed());
  Completion out[4];
  EXPECT_EQ(a.dev->PollCq(small_cq, out, 4), 2u);
}

TEST(RcErrors, WrongStateAndBadArguments) {
  RcPair pair({}, 1);
  Side& a = pair.a();
  QpInitAttr init;
  init.pd = a.pd;
  init.send_cq = init.recv_cq = a.cq;
  auto qpn = *a.dev->CreateQp(init);
  EXPECT_EQ(a.dev->PostSend(qpn, MakeWr(1, WrOpcode::kSend, a, 0, 8, a, 0)), EINVAL);  // RESET
  EXPECT_EQ(a.dev->PostRecv(qpn, MakeRecv(1, a, 0, 8)), EINVAL);
  transport::QpAttr attr;
  attr.qp_state = transport::QpState::kRtr;
  EXPECT_FALSE(a.dev->ModifyQp(qpn, attr, transport::kAttrState).ok());  // RESET -> RTR
  attr.qp_state = transport::QpState::kInit;
  EXPECT_FALSE(a.dev->ModifyQp(qpn, attr, transport::kAttrState).ok());  // missing port/pkey/access
  EXPECT_TRUE(a.dev->ModifyQp(qpn, attr, transport::kAttrState | transport::kAttrPkeyIndex |
                                             transport::kAttrPort | transport::kAttrAccessFlags).ok());
  attr.qp_state = transport::QpState::kRtr;
  attr.path_mtu = 3000;
  EXPECT_FALSE(a.dev->ModifyQp(qpn, attr, transport::kAttrState | transport::kAttrAv |
                                              transport::kAttrPathMtu | transport::kAttrDestQpn |
                                              transport::kAttrRqPsn | transport::kAttrMaxDestRdAtomic |
                                              transport::kAttrMinRnrTimer).ok());
  SendWr too_many = MakeWr(1, WrOpcode::kSend, a, 0, 8, pair.b(), 0);
  too_many.num_sge = transport::kMaxSge + 1;
  EXPECT_EQ(a.dev->PostSend(a.qpn, too_many), EINVAL);
  SendWr inline_read = MakeWr(1, WrOpcode::kRdmaRead, a, 0, 8, pair.b(), 0);
  inline_read.flags |= transport::kSendInline;
  EXPECT_EQ(a.dev->PostSend(a.qpn, inline_read), EINVAL);
}

TEST(RcErrors, UnsignaledWrsCompleteSilentlyAndInOrder) {
  RcPair pair({0.03, 0, 0, 0}, 5);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 50; ++i) {
    SendWr wr = MakeWr(i, WrOpcode::kRdmaWrite, a, i * 100, 100, b, i * 100);
    if (i % 10 != 9) wr.flags = 0;  // only every tenth is signaled
    ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
  }
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 5, &cb, 0));
  ASSERT_EQ(ca.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ca[i].wr_id, i * 10 + 9);
    EXPECT_EQ(ca[i].status, WcStatus::kSuccess);
  }
}

}  // namespace
}  // namespace droce::core

namespace droce::core {
namespace {
using namespace droce::core::testing;
using transport::WrOpcode;

// A receiver that posts its receives slowly answers a window of SENDs with an
// RNR NAK and then, for the SENDs already in flight behind it, one sequence
// NAK. Those sequence NAKs are an echo of the RNR, not loss: they must not
// use up retry_cnt (perftest's ib_send_bw hit RETRY_EXC_ERR this way).
TEST(RcErrors, RnrWithSendsInFlightDoesNotExhaustRetries) {
  RcPair pair({}, 1, 1024, 1 << 20, 0, 0, 8, /*retry=*/2, /*rnr_retry=*/7);
  Side& a = pair.a();
  Side& b = pair.b();
  constexpr int kSends = 64;
  for (int i = 0; i < kSends; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  }
  std::vector<Completion> ca, cb;
  for (int posted = 0; posted < kSends; posted += 4) {
    for (int k = 0; k < 4; ++k) ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(posted + k, b, 4096, 64)), 0);
    pair.Run(&ca, kSends, &cb, posted + 4, 2'000'000);
  }
  ASSERT_TRUE(pair.Run(&ca, kSends, &cb, kSends));
  for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess) << WcStatusName(c.status);
  EXPECT_GT(a.dev->qp(a.qpn)->counters().rnr_naks_received, 0u);
}


// Deregistration tests: a pair whose wire has only 64 frame buffers, so a
// 256-packet message cannot leave in one poll and straddles the
// deregistration; and a check that no 16-byte run of the "reused memory"
// byte 0xEE reached a buffer.
RcPair NarrowPair(uint32_t seed) {
  return RcPair({}, seed, /*mtu=*/1024, /*mem_bytes=*/4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000,
                nullptr, /*pool_frames=*/64);
}
constexpr uint8_t kReused = 0xEE;
bool HoldsReusedRun(const std::vector<uint8_t>& m, size_t len) {
  const std::vector<uint8_t> run(16, kReused);
  return std::search(m.begin(), m.begin() + static_cast<long>(len), run.begin(), run.end()) !=
         m.begin() + static_cast<long>(len);
}

// The security boundary holds for a message in flight: once the target's MR
// is deregistered, the rest of a multi-packet WRITE or READ neither writes
// into nor reads from that memory (the program may already reuse it), and the
// requester's WR fails with a remote access error. The wire has only 64
// frame buffers, so the READ's responses cannot all leave in one poll and
// straddle the deregistration.
TEST(RcErrors, DeregisteringAnMrStopsARemoteWriteOrReadInFlight) {
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead}) {
    SCOPED_TRACE(op == WrOpcode::kRdmaWrite ? "WRITE" : "READ");
    const bool read = op == WrOpcode::kRdmaRead;
    RcPair pair = NarrowPair(3);
    // WRITE: a writes into b. READ: b reads from a.
    Side& req = read ? pair.b() : pair.a();
    Side& resp = read ? pair.a() : pair.b();
    const uint32_t len = 256 * 1024;
    const uint64_t off = 0x100000;
    Fill(req.mem, 0, len, 1);
    Fill(resp.mem, off, len, 2);
    ASSERT_EQ(req.dev->PostSend(req.qpn, MakeWr(1, op, req, 0, len, resp, off)), 0);
    // The WRITE's first packets reach the responder, or it sends the READ's first responses.
    req.dev->Poll(pair.now());
    resp.dev->Poll(pair.now());
    const uint64_t sent_before = resp.dev->counters().tx_packets;
    if (read) {
      ASSERT_LT(sent_before, len / 1024);
    }
    ASSERT_TRUE(resp.dev->DeregMr(resp.keys.lkey).ok());
    // The program reuses the memory it no longer lends out.
    std::fill(resp.mem.begin() + off, resp.mem.begin() + off + len, kReused);
    const std::vector<uint8_t> after_dereg = resp.mem;
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, read ? 0 : 1, &cb, read ? 1 : 0));
    const Completion& c = read ? cb[0] : ca[0];
    EXPECT_EQ(c.status, WcStatus::kRemAccessErr) << sent_before << " responses left before";
    EXPECT_EQ(resp.mem, after_dereg) << "written after deregistration";
    EXPECT_FALSE(HoldsReusedRun(req.mem, len)) << "read after deregistration";
  }
}

// A READ whose responses have not started when its MR is deregistered
// (queued behind another READ's) reads nothing from it either: its first
// response is checked as its later ones are, and the WR fails with a remote
// access error instead of carrying what the memory holds now.
TEST(RcErrors, AReadQueuedBehindAnotherReadsNothingOnceItsMrIsDeregistered) {
  RcPair pair = NarrowPair(6);
  Side& req = pair.b();
  Side& resp = pair.a();
  const uint32_t first_len = 256 * 1024;
  const uint32_t second_len = 4096;  // four responses at MTU 1024; the first reads at offset 0
  std::vector<uint8_t> second(second_len);
  std::fill(second.begin(), second.end(), uint8_t{0x5A});
  const auto keys = *resp.dev->RegMr(resp.pd, second.data(), second.size(),
                                     reinterpret_cast<uint64_t>(second.data()), mem::kRemoteRead);
  Fill(resp.mem, 0, first_len, 7);
  ASSERT_EQ(req.dev->PostSend(req.qpn, MakeWr(1, WrOpcode::kRdmaRead, req, 0, first_len, resp, 0)), 0);
  SendWr queued = MakeWr(2, WrOpcode::kRdmaRead, req, 0x200000, second_len, resp, 0);
  queued.remote_addr = reinterpret_cast<uint64_t>(second.data());
  queued.rkey = keys.rkey;
  ASSERT_EQ(req.dev->PostSend(req.qpn, queued), 0);
  // Both requests reach the responder; the first READ's responses fill the
  // wire's 64 buffers, the second READ waits behind them.
  req.dev->Poll(pair.now());
  resp.dev->Poll(pair.now());
  ASSERT_LT(resp.dev->counters().tx_packets, first_len / 1024);
  ASSERT_TRUE(resp.dev->DeregMr(keys.lkey).ok());
  std::fill(second.begin(), second.end(), kReused);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 0, &cb, 2));
  EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[1].wr_id, 2u);
  EXPECT_EQ(cb[1].status, WcStatus::kRemAccessErr) << queue::WcStatusName(cb[1].status);
  EXPECT_FALSE(HoldsReusedRun(req.mem, req.mem.size())) << "read after deregistration";
}

// The same on the requester's side: READ data that comes back after the
// program deregistered its local buffer is not written there; the WR fails
// with a local protection error.
TEST(RcErrors, ReadResponsesAreNotScatteredIntoADeregisteredBuffer) {
  RcPair pair = NarrowPair(4);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t len = 256 * 1024;
  Fill(b.mem, 0x100000, len, 5);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaRead, a, 0, len, b, 0x100000)), 0);
  a.dev->Poll(pair.now());
  b.dev->Poll(pair.now());
  a.dev->Poll(pair.now());  // the first responses land
  ASSERT_TRUE(a.dev->DeregMr(a.keys.lkey).ok());
  std::fill(a.mem.begin(), a.mem.begin() + len, kReused);
  const std::vector<uint8_t> after_dereg = a.mem;
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kLocProtErr);
  EXPECT_EQ(a.mem, after_dereg) << "written after deregistration";
}

// And for what the requester sends: once the program deregistered the
// buffer of a WRITE still being sent, the rest is not read from it (it would
// leak whatever the memory holds now); the WR fails with a local protection
// error.
TEST(RcErrors, PayloadIsNotGatheredFromADeregisteredBuffer) {
  RcPair pair = NarrowPair(5);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t len = 256 * 1024;
  Fill(a.mem, 0, len, 6);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, len, b, 0x100000)), 0);
  a.dev->Poll(pair.now());
  ASSERT_LT(a.dev->counters().tx_packets, len / 1024);
  ASSERT_TRUE(a.dev->DeregMr(a.keys.lkey).ok());
  std::fill(a.mem.begin(), a.mem.begin() + len, kReused);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kLocProtErr);
  EXPECT_FALSE(HoldsReusedRun(b.mem, b.mem.size())) << "sent after deregistration";
}
}  // namespace
}  // namespace droce::core
