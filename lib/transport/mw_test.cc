// Memory windows over the wire (IBTA 10.6.7) and the rules of remote
// invalidation: READ/WRITE/atomics through a window's rkey, the
// type-2 window's QP association, LOCAL_INV and SEND_WITH_INV, and a window
// invalidated or unbound while a message through it is in flight.
#include <algorithm>

#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;
using mem::AccessResult;
using queue::Completion;
using queue::WcOpcode;
using queue::WcStatus;
using transport::QpState;
using transport::SendWr;
using transport::WrOpcode;

constexpr uint64_t kWinOff = 0x10000;   // the window's offset in b's memory
constexpr uint64_t kWinLen = 0x40000;

// b's memory registered a second time, with the right to bind windows.
mem::MrKeys BindableMr(Side& s) {
  return *s.dev->RegMr(s.pd, s.mem.data(), s.mem.size(), reinterpret_cast<uint64_t>(s.mem.data()),
                       mem::kLocalWrite | mem::kMwBind);
}

SendWr BindWr(uint64_t id, Side& s, const mem::MrKeys& mr, uint32_t mw_handle, uint32_t new_key,
              uint64_t off, uint64_t len, uint32_t access) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::kBindMw;
  wr.flags = transport::kSendSignaled;
  wr.bind.mw_handle = mw_handle;
  wr.bind.new_key = new_key;
  wr.bind.mr_lkey = mr.lkey;
  wr.bind.addr = reinterpret_cast<uint64_t>(s.mem.data()) + off;
  wr.bind.length = len;
  wr.bind.access = access;
  return wr;
}

// Binds a window of `type` over b's [kWinOff, kWinOff+kWinLen) through b's
// QP; returns its key.
uint32_t BindWindow(RcPair& pair, int type, uint32_t access, uint32_t* handle = nullptr) {
  Side& b = pair.b();
  const mem::MrKeys mr = BindableMr(b);
  auto mw = *b.dev->mrs().AllocMw(b.pd, type);
  const uint32_t key = type == 1 ? b.dev->mrs().NextMwKey(mw.handle) : mw.rkey + 1;
  EXPECT_EQ(b.dev->PostSend(b.qpn, BindWr(77, b, mr, mw.handle, key, kWinOff, kWinLen, access)), 0);
  std::vector<Completion> ca, cb;
  EXPECT_TRUE(pair.Run(&ca, 0, &cb, 1));
  EXPECT_EQ(cb.at(0).status, WcStatus::kSuccess);
  EXPECT_EQ(cb.at(0).opcode, WcOpcode::kBindMw);
  EXPECT_EQ(cb.at(0).wr_id, 77u);
  if (handle != nullptr) *handle = mw.handle;
  return (mw.rkey & ~0xFFu) | (key & 0xFF);
}

SendWr Through(uint64_t id, WrOpcode op, Side& a, uint64_t off, uint32_t len, Side& b, uint64_t roff,
               uint32_t rkey) {
  SendWr wr = MakeWr(id, op, a, off, len, b, roff);
  wr.rkey = rkey;
  return wr;
}

TEST(MemoryWindows, WriteReadAndAtomicThroughBothTypes) {
  for (int type : {1, 2}) {
    SCOPED_TRACE(type);
    RcPair pair({0.02, 0, 0, 0}, 11);
    Side& a = pair.a();
    Side& b = pair.b();
    const uint32_t key = BindWindow(pair, type, mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic);
    EXPECT_NE(key, b.keys.rkey);
    Fill(a.mem, 0, 8192, 4);
    Fill(b.mem, kWinOff + 0x8000, 8192, 6);
    std::fill(b.mem.begin() + kWinOff + 0x20000, b.mem.begin() + kWinOff + 0x20008, 0);
    ASSERT_EQ(a.dev->PostSend(a.qpn, Through(1, WrOpcode::kRdmaWrite, a, 0, 8192, b, kWinOff, key)), 0);
    ASSERT_EQ(a.dev->PostSend(a.qpn, Through(2, WrOpcode::kRdmaRead, a, 0x10000, 8192, b, kWinOff + 0x8000, key)),
              0);
    SendWr add = Through(3, WrOpcode::kAtomicFetchAndAdd, a, 0x20000, 8, b, kWinOff + 0x20000, key);
    add.compare_add = 5;
    ASSERT_EQ(a.dev->PostSend(a.qpn, add), 0);
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
    for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess) << WcStatusName(c.status);
    EXPECT_TRUE(std::equal(a.mem.begin(), a.mem.begin() + 8192, b.mem.begin() + kWinOff));
    EXPECT_TRUE(std::equal(a.mem.begin() + 0x10000, a.mem.begin() + 0x12000, b.mem.begin() + kWinOff + 0x8000));
    EXPECT_EQ(b.mem[kWinOff + 0x20000], 5);
  }
}

// The window, not the region under it, bounds and permits the access.
TEST(MemoryWindows, AccessOutsideTheWindowOrItsRightsIsRefused) {
  struct Case {
    const char* name;
    WrOpcode op;
    uint64_t roff;
    uint32_t len;
  };
  for (Case c : {Case{"below", WrOpcode::kRdmaWrite, kWinOff - 8, 64},
                 Case{"past end", WrOpcode::kRdmaWrite, kWinOff + kWinLen - 8, 64},
                 Case{"no read right", WrOpcode::kRdmaRead, kWinOff, 64},
                 Case{"no atomic right", WrOpcode::kAtomicFetchAndAdd, kWinOff, 8}}) {
    SCOPED_TRACE(c.name);
    RcPair pair({}, 12);
    Side& a = pair.a();
    Side& b = pair.b();
    const uint32_t key = BindWindow(pair, 2, mem::kRemoteWrite);
    const std::vector<uint8_t> before = b.mem;
    ASSERT_EQ(a.dev->PostSend(a.qpn, Through(1, c.op, a, 0, c.len, b, c.roff, key)), 0);
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
    EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr) << WcStatusName(ca[0].status);
    EXPECT_TRUE(b.mem == before);
  }
}

// A second connected QP pair between the same two devices.
void SecondPair(RcPair& pair, uint32_t* qa, uint32_t* qb) {
  Side* s[2] = {&pair.a(), &pair.b()};
  uint32_t q[2];
  for (int i = 0; i < 2; ++i) {
    QpInitAttr init;
    init.pd = s[i]->pd;
    init.send_cq = init.recv_cq = s[i]->cq;
    q[i] = *s[i]->dev->CreateQp(init);
  }
  for (int i = 0; i < 2; ++i) {
    ConnectParams c;
    c.peer_gid = s[1 - i]->dev->gids()[1];
    c.peer_mac = s[1 - i]->dev->config().mac;
    c.peer_qpn = q[1 - i];
    c.timeout = 8;
    ASSERT_TRUE(ConnectQp(*s[i]->dev, q[i], c).ok());
  }
  *qa = q[0];
  *qb = q[1];
}

// A type-2 window is reachable only through the QP that bound it (IBTA
// 10.6.7.2, rxe's rxe_lookup_mw); the same key through another QP of the
// same PD is a remote access error, and so is any access once that QP is
// destroyed (its windows are freed with it).
TEST(MemoryWindows, Type2WindowBelongsToTheQpThatBoundIt) {
  RcPair pair({}, 13);
  Side& a = pair.a();
  Side& b = pair.b();
  uint32_t qa2 = 0, qb2 = 0;
  SecondPair(pair, &qa2, &qb2);
  const uint32_t key = BindWindow(pair, 2, mem::kRemoteWrite | mem::kRemoteRead);
  ASSERT_EQ(a.dev->PostSend(qa2, Through(1, WrOpcode::kRdmaWrite, a, 0, 64, b, kWinOff, key)), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].qp_num, qa2);
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(b.dev->qp(qb2)->state(), QpState::kErr);
  // Through the binding QP: allowed.
  ASSERT_EQ(a.dev->PostSend(a.qpn, Through(2, WrOpcode::kRdmaWrite, a, 0, 64, b, kWinOff, key)), 0);
  ca.clear();
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  // Destroying the binding QP frees its windows.
  ASSERT_TRUE(b.dev->DestroyQp(b.qpn).ok());
  EXPECT_EQ(b.dev->mrs().CheckRemote(key, b.pd, b.qpn, reinterpret_cast<uint64_t>(b.mem.data()) + kWinOff, 8,
                                     mem::kRemoteWrite).result,
            AccessResult::kBadKey);
}

// A peer's SEND_WITH_INV naming a region registered with
// ibv_reg_mr — here the responder's own receive buffer, and a region with no
// remote rights at all — must not invalidate it. The receive completes in
// error (REM_INV_REQ_ERR, as rxe's RESPST_ERR_INVALIDATE_RKEY), the
// requester gets the NAK's status, and the regions stay registered and
// usable: after the QPs are reset and reconnected the next SEND lands in
// the same receive buffer.
TEST(MemoryWindows, SendWithInvalidateNamingARegionInvalidatesNothing) {
  for (bool own_receive_buffer : {true, false}) {
    SCOPED_TRACE(own_receive_buffer ? "receive buffer's key" : "local-only region's key");
    RcPair pair({}, 14);
    Side& a = pair.a();
    Side& b = pair.b();
    std::vector<uint8_t> local_only(64);
    const mem::MrKeys other = *b.dev->RegMr(b.pd, local_only.data(), local_only.size(),
                                           reinterpret_cast<uint64_t>(local_only.data()), 0);
    const uint32_t victim = own_receive_buffer ? b.keys.rkey : other.rkey;
    ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(9, b, 0, 64)), 0);
    SendWr wr = MakeWr(1, WrOpcode::kSendWithInv, a, 0, 16, b, 0);
    wr.invalidate_rkey = victim;
    ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
    EXPECT_EQ(cb[0].status, WcStatus::kRemInvReqErr) << WcStatusName(cb[0].status);
    EXPECT_EQ(ca[0].status, WcStatus::kRemInvReqErr) << WcStatusName(ca[0].status);
    const mem::MemoryRegion* mr = b.dev->mrs().Find(victim);
    ASSERT_NE(mr, nullptr);
    EXPECT_TRUE(mr->valid) << "the peer invalidated a region";
    EXPECT_EQ(b.dev->mrs().CheckLocal(b.keys.lkey, b.pd, reinterpret_cast<uint64_t>(b.mem.data()), 64, true).result,
              AccessResult::kOk);

    // Reset both QPs and reconnect: the next SEND lands in the receive buffer.
    for (Side* s : {&a, &b}) {
      transport::QpAttr reset;
      reset.qp_state = QpState::kReset;
      ASSERT_TRUE(s->dev->ModifyQp(s->qpn, reset, transport::kAttrState).ok());
      Side& peer = s == &a ? b : a;
      ConnectParams c;
      c.peer_gid = peer.dev->gids()[1];
      c.peer_mac = peer.dev->config().mac;
      c.peer_qpn = peer.qpn;
      c.timeout = 8;
      ASSERT_TRUE(ConnectQp(*s->dev, s->qpn, c).ok());
    }
    Fill(a.mem, 0, 64, 9);
    ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10, b, 0x1000, 64)), 0);
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
    ca.clear();
    cb.clear();
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
    EXPECT_EQ(ca[0].status, WcStatus::kSuccess) << WcStatusName(ca[0].status);
    EXPECT_EQ(cb[0].status, WcStatus::kSuccess) << WcStatusName(cb[0].status);
    EXPECT_TRUE(std::equal(a.mem.begin(), a.mem.begin() + 64, b.mem.begin() + 0x1000));
  }
}

// SEND_WITH_INV of a type-2 window bound through the receiving QP: the
// receive completes with IBV_WC_WITH_INV and the key, and the window is
// free (a later READ through it is a remote access error). Through another
// QP of the PD, the same key is refused and stays bound.
TEST(MemoryWindows, SendWithInvalidateFreesAType2WindowOfItsQp) {
  RcPair pair({}, 15);
  Side& a = pair.a();
  Side& b = pair.b();
  uint32_t qa2 = 0, qb2 = 0;
  SecondPair(pair, &qa2, &qb2);
  const uint32_t key = BindWindow(pair, 2, mem::kRemoteRead);
  const uint64_t win = reinterpret_cast<uint64_t>(b.mem.data()) + kWinOff;

  ASSERT_EQ(b.dev->PostRecv(qb2, MakeRecv(8, b, 0, 64)), 0);
  SendWr other_qp = MakeWr(1, WrOpcode::kSendWithInv, a, 0, 16, b, 0);
  other_qp.invalidate_rkey = key;
  ASSERT_EQ(a.dev->PostSend(qa2, other_qp), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(cb[0].status, WcStatus::kRemInvReqErr);
  EXPECT_EQ(b.dev->mrs().CheckRemote(key, b.pd, b.qpn, win, 8, mem::kRemoteRead).result, AccessResult::kOk);

  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(9, b, 0, 64)), 0);
  SendWr wr = MakeWr(2, WrOpcode::kSendWithInv, a, 0, 16, b, 0);
  wr.invalidate_rkey = key;
  ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
  ca.clear();
  cb.clear();
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[0].flags & queue::kWcWithInv, queue::kWcWithInv);
  EXPECT_EQ(cb[0].imm_or_inv, key);
  EXPECT_EQ(b.dev->mrs().CheckRemote(key, b.pd, b.qpn, win, 8, mem::kRemoteRead).result, AccessResult::kBadKey);
  ASSERT_EQ(a.dev->PostSend(a.qpn, Through(3, WrOpcode::kRdmaRead, a, 0, 8, b, kWinOff, key)), 0);
  ca.clear();
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr);
}

// LOCAL_INV of a type-2 window completes as IBV_WC_LOCAL_INV and frees it;
// LOCAL_INV of a region's key fails (LOC_QP_OP_ERR, as rxe) and leaves it.
TEST(MemoryWindows, LocalInvalidate) {
  RcPair pair({}, 16);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t key = BindWindow(pair, 2, mem::kRemoteWrite);
  SendWr inv;
  inv.wr_id = 5;
  inv.opcode = WrOpcode::kLocalInv;
  inv.flags = transport::kSendSignaled;
  inv.invalidate_rkey = key;
  ASSERT_EQ(b.dev->PostSend(b.qpn, inv), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 0, &cb, 1));
  EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[0].opcode, WcOpcode::kLocalInv);
  ASSERT_EQ(a.dev->PostSend(a.qpn, Through(1, WrOpcode::kRdmaWrite, a, 0, 64, b, kWinOff, key)), 0);
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr);

  RcPair pair2({}, 17);
  inv.invalidate_rkey = pair2.b().keys.rkey;
  ASSERT_EQ(pair2.b().dev->PostSend(pair2.b().qpn, inv), 0);
  ca.clear();
  cb.clear();
  ASSERT_TRUE(pair2.Run(&ca, 0, &cb, 1));
  EXPECT_EQ(cb[0].status, WcStatus::kLocQpOpErr);
  EXPECT_EQ(cb[0].opcode, WcOpcode::kLocalInv);
  EXPECT_TRUE(pair2.b().dev->mrs().Find(pair2.b().keys.rkey)->valid);
}

// A bind the rules refuse completes with MW_BIND_ERR and moves the QP to ERR.
TEST(MemoryWindows, BindErrorsCompleteWithMwBindErr) {
  RcPair pair({}, 18);
  Side& b = pair.b();
  auto mw = *b.dev->mrs().AllocMw(b.pd, 2);
  // b.keys has no bind right.
  ASSERT_EQ(b.dev->PostSend(b.qpn, BindWr(3, b, b.keys, mw.handle, mw.rkey + 1, 0, 64, mem::kRemoteRead)), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 0, &cb, 1));
  EXPECT_EQ(cb[0].status, WcStatus::kMwBindErr);
  EXPECT_EQ(cb[0].opcode, WcOpcode::kBindMw);
  EXPECT_EQ(b.dev->qp(b.qpn)->state(), QpState::kErr);
}

// The boundary holds for windows as for regions: once a window is
// invalidated (LOCAL_INV) or unbound (deallocated) while a multi-packet
// WRITE or READ through it is in flight, the rest neither writes into nor
// reads from the memory, and the requester's WR fails with a remote access
// error. The wire has only 64 frame buffers so the message straddles it.
TEST(MemoryWindows, InvalidatingAWindowStopsAMessageInFlight) {
  constexpr uint8_t kReused = 0xEE;
  for (bool dealloc : {false, true}) {
    for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead}) {
      SCOPED_TRACE(std::string(op == WrOpcode::kRdmaWrite ? "WRITE" : "READ") + (dealloc ? " dealloc" : " inv"));
      RcPair pair({}, 19, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, nullptr, 64);
      Side& a = pair.a();
      Side& b = pair.b();
      uint32_t handle = 0;
      const uint32_t key = BindWindow(pair, 2, mem::kRemoteWrite | mem::kRemoteRead, &handle);
      const uint32_t len = 256 * 1024;
      Fill(a.mem, 0, len, 1);
      Fill(b.mem, kWinOff, len, 2);
      ASSERT_EQ(a.dev->PostSend(a.qpn, Through(1, op, a, 0, len, b, kWinOff, key)), 0);
      a.dev->Poll(pair.now());
      b.dev->Poll(pair.now());
      if (dealloc) {
        ASSERT_TRUE(b.dev->mrs().DeallocMw(handle).ok());
      } else {
        ASSERT_EQ(b.dev->mrs().LocalInvalidate(key, b.pd), AccessResult::kOk);
      }
      std::fill(b.mem.begin() + kWinOff, b.mem.begin() + kWinOff + len, kReused);
      const std::vector<uint8_t> after = b.mem;
      std::vector<Completion> ca, cb;
      ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
      EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr) << WcStatusName(ca[0].status);
      EXPECT_EQ(b.mem, after) << "written after invalidation";
      const std::vector<uint8_t> run(16, kReused);
      EXPECT_EQ(std::search(a.mem.begin(), a.mem.begin() + len, run.begin(), run.end()), a.mem.begin() + len)
          << "read after invalidation";
    }
  }
}

// The same key again is not the same window: invalidated and bound again
// with the same key over another range while a WRITE is in flight, the
// rest of the WRITE must not land in the new range.
TEST(MemoryWindows, RebindWithTheSameKeyMidMessageStopsIt) {
  RcPair pair({}, 20, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, nullptr, 64);
  Side& a = pair.a();
  Side& b = pair.b();
  const mem::MrKeys mr = BindableMr(b);
  auto mw = *b.dev->mrs().AllocMw(b.pd, 2);
  const uint64_t base = reinterpret_cast<uint64_t>(b.mem.data());
  mem::MwBind bind{mw.handle, mw.rkey + 1, mr.lkey, base + kWinOff, 0x100000, mem::kRemoteWrite};
  ASSERT_EQ(b.dev->mrs().BindMw(bind, b.pd, b.qpn), AccessResult::kOk);
  const uint32_t key = b.dev->mrs().MwKey(mw.handle);
  const uint32_t len = 256 * 1024;
  ASSERT_EQ(a.dev->PostSend(a.qpn, Through(1, WrOpcode::kRdmaWrite, a, 0, len, b, kWinOff, key)), 0);
  a.dev->Poll(pair.now());
  b.dev->Poll(pair.now());
  ASSERT_EQ(b.dev->mrs().LocalInvalidate(key, b.pd), AccessResult::kOk);
  bind.addr = base + 0x200000;  // same key, another range
  ASSERT_EQ(b.dev->mrs().BindMw(bind, b.pd, b.qpn), AccessResult::kOk);
  ASSERT_EQ(b.dev->mrs().MwKey(mw.handle), key);
  std::fill(b.mem.begin() + kWinOff, b.mem.begin() + kWinOff + len, 0xEE);
  const std::vector<uint8_t> after = b.mem;
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr) << WcStatusName(ca[0].status);
  EXPECT_EQ(b.mem, after);
}

// A QP moved to RESET leaves nothing behind in its CQs: the flushed
// receives of its failed life do not surface after it is connected again
// (pyverbs' restate_qps, then traffic, as in test_mr_rereg_pd).
TEST(QpReset, DropsTheQpsCompletionsOnly) {
  RcPair pair({}, 21);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->PostRecv(a.qpn, MakeRecv(1, a, 0, 64)), 0);
  ASSERT_EQ(a.dev->PostRecv(a.qpn, MakeRecv(2, a, 0, 64)), 0);
  transport::QpAttr attr;
  attr.qp_state = QpState::kErr;
  ASSERT_TRUE(a.dev->ModifyQp(a.qpn, attr, transport::kAttrState).ok());
  a.dev->Poll(pair.now());
  ASSERT_EQ(a.dev->cq(a.cq)->size(), 2u);  // two flushed receives
  attr.qp_state = QpState::kReset;
  ASSERT_TRUE(a.dev->ModifyQp(a.qpn, attr, transport::kAttrState).ok());
  EXPECT_EQ(a.dev->cq(a.cq)->size(), 0u);
  (void)b;
}

}  // namespace
}  // namespace droce::core
