// Two devices on an in-memory wire, exchanging every RC opcode under loss,
// reordering, duplication and corruption. Every WR must complete exactly once
// with the right status and the data must match byte for byte.
#include "tests/support/pair_matrix.h"
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;  // RcPair, Side, MakeWr, Completion, WrOpcode...

// post_send's doorbell (Device::Doorbell) sends the posting QP's packets at
// once and does nothing else: a frame waiting on the receive side stays
// there, for the poll loop.
TEST(Doorbell, TransmitsThePostingQpAndReceivesNothing) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 64, 1);
  Fill(b.mem, 0, 64, 2);
  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(1, WrOpcode::kRdmaWrite, b, 0, 64, a, 4096)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 1u);  // b's WRITE is on the wire to a
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().tx_packets, 1u);
  EXPECT_EQ(a.dev->counters().rx_packets, 0u);  // b's WRITE waits for a's poll loop
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 0u);  // nothing more to send
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
  EXPECT_EQ(ca[0].wr_id, 2u);
  EXPECT_EQ(cb[0].wr_id, 1u);
  EXPECT_EQ(std::memcmp(a.mem.data() + 4096, b.mem.data(), 64), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
}

// WRs published without the device lock (Qp::NextSendSlot/PublishSend,
// the verbs provider's post) wait for the QP's doorbell, which takes them
// first; receives published that way are taken by the arrival that needs
// them (no RNR NAK for a receive that was posted).
TEST(Doorbell, PublishedWrsLeaveWithTheDoorbellAndReceivesAreTakenOnArrival) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* qa = a.dev->qp(a.qpn);
  transport::Qp* qb = b.dev->qp(b.qpn);
  Fill(a.mem, 0, 256, 5);
  RecvWr* r = qb->NextRecvSlot();
  ASSERT_NE(r, nullptr);
  *r = MakeRecv(20, b, 8192, 256);
  ASSERT_EQ(qb->PublishRecv(), 0);
  EXPECT_EQ(qb->posted_receives(), 1u);  // counted, though not yet in the queue
  for (uint64_t i = 0; i < 2; ++i) {
    SendWr* w = qa->NextSendSlot();
    ASSERT_NE(w, nullptr);
    *w = MakeWr(i + 1, i == 0 ? WrOpcode::kRdmaWrite : WrOpcode::kSend, a, 0, 128 * (i + 1), b, 4096);
    ASSERT_EQ(qa->PublishSend(), 0);
  }
  EXPECT_EQ(a.dev->Poll(pair.now()), 0u);  // published is not posted: no doorbell yet
  EXPECT_EQ(a.dev->counters().tx_packets, 0u);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 2u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
  ASSERT_EQ(ca.size(), 2u);
  EXPECT_EQ(ca[0].wr_id, 1u);
  EXPECT_EQ(ca[1].wr_id, 2u);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].wr_id, 20u);
  EXPECT_EQ(cb[0].status, WcStatus::kSuccess);
  EXPECT_EQ(cb[0].byte_len, 256u);
  EXPECT_EQ(qa->counters().rnr_naks_received, 0u);
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 128), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 8192, a.mem.data(), 256), 0);
}

// What a publisher is refused: a WR the QP's caps forbid (nothing is
// published, the slot is offered again), a UD send (its address handle is
// the engine's to resolve), and a slot when depth WRs are outstanding.
TEST(Doorbell, PublishRefusesWhatTheCapsForbidAndAFullQueue) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* qa = a.dev->qp(a.qpn);
  SendWr* w = qa->NextSendSlot();
  *w = MakeWr(1, WrOpcode::kAtomicFetchAndAdd, a, 0, 16, b, 0);  // an atomic is 8 bytes
  EXPECT_EQ(qa->PublishSend(), EINVAL);
  EXPECT_EQ(qa->NextSendSlot(), w);
  w->num_sge = transport::kMaxSge + 1;
  EXPECT_EQ(qa->PublishSend(), EINVAL);
  RecvWr* r = qa->NextRecvSlot();
  r->num_sge = transport::kMaxSge + 1;
  EXPECT_EQ(qa->PublishRecv(), EINVAL);
  uint32_t published = 0;
  for (; (w = qa->NextSendSlot()) != nullptr; ++published) {
    *w = MakeWr(published, WrOpcode::kRdmaWrite, a, 0, 8, b, 0);
    ASSERT_EQ(qa->PublishSend(), 0);
  }
  EXPECT_EQ(published, 1024u);  // max_send_wr
  std::vector<Completion> ca, cb;
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()) > 0, true);
  ASSERT_TRUE(pair.Run(&ca, 1024, &cb, 0));
  EXPECT_NE(qa->NextSendSlot(), nullptr);  // completed and popped: free again
}

// A WRITE or SEND of one SGE written straight into its WQE (Qp::PublishOneSge,
// the verbs provider's usual post): each lands where and as its fields say,
// in slots whose earlier WQEs were a two-SGE WRITE and a SEND_WITH_IMM; too
// long a WR is EINVAL with nothing published, and a full queue ENOMEM.
TEST(Doorbell, AOneSgeWrIsWrittenStraightIntoItsWqe) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* qa = a.dev->qp(a.qpn);
  transport::Qp* qb = b.dev->qp(b.qpn);
  Fill(a.mem, 0, 512, 9);
  // Every slot of the send queue (max_send_wr 1024) once: slot 1 a
  // SEND_WITH_IMM, the others two-SGE WRITEs.
  *qb->NextRecvSlot() = MakeRecv(30, b, 16384, 64);
  ASSERT_EQ(qb->PublishRecv(), 0);
  for (uint32_t i = 0; i < 1024; ++i) {
    SendWr w = MakeWr(100 + i, WrOpcode::kRdmaWrite, a, 256, 32, b, 12288);
    if (i == 1) {
      w.opcode = WrOpcode::kSendWithImm;
      w.imm_data = 0x5a5a5a5a;
    } else {
      w.num_sge = 2;
      w.sg_list[1] = {w.sg_list[0].addr + 32, 32, w.sg_list[0].lkey};
    }
    ASSERT_EQ(a.dev->PostSend(a.qpn, w), 0);
  }
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1024, &cb, 1));
  ASSERT_EQ(cb.size(), 1u);
  ASSERT_NE(cb[0].flags & queue::kWcWithImm, 0);
  *qb->NextRecvSlot() = MakeRecv(20, b, 8192, 256);
  ASSERT_EQ(qb->PublishRecv(), 0);
  const SendWr w = MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 128, b, 4096);
  transport::OneSgeWr write;
  write.wr_id = w.wr_id;
  write.opcode = WrOpcode::kRdmaWrite;
  write.flags = transport::kSendSignaled;
  write.sg_list[0] = w.sg_list[0];
  write.remote_addr = w.remote_addr;
  write.rkey = w.rkey;
  ASSERT_EQ(qa->PublishOneSge(write), 0);  // slot 0
  transport::OneSgeWr send;
  send.wr_id = 2;
  send.flags = transport::kSendSignaled;
  send.sg_list[0] = {w.sg_list[0].addr + 128, 256, w.sg_list[0].lkey};
  ASSERT_EQ(qa->PublishOneSge(send), 0);  // slot 1
  transport::OneSgeWr too_long = write;
  too_long.sg_list[0].length = 0xffffffffu;
  EXPECT_EQ(qa->PublishOneSge(too_long), EINVAL);  // more than max_msg_sz (2 GiB)
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 2u);
  ca.clear();
  cb.clear();
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
  ASSERT_EQ(ca.size(), 2u);
  EXPECT_EQ(ca[0].wr_id, 1u);
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(ca[0].opcode, queue::WcOpcode::kRdmaWrite);
  EXPECT_EQ(ca[1].wr_id, 2u);
  EXPECT_EQ(ca[1].status, WcStatus::kSuccess);
  EXPECT_EQ(ca[1].opcode, queue::WcOpcode::kSend);
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].wr_id, 20u);
  EXPECT_EQ(cb[0].byte_len, 256u);
  EXPECT_EQ(cb[0].flags & queue::kWcWithImm, 0);  // nothing of the slot's older SEND_WITH_IMM
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 128), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 8192, a.mem.data() + 128, 256), 0);
  uint32_t published = 0;
  for (write.wr_id = 10; qa->PublishOneSge(write) == 0; ++write.wr_id) ++published;
  EXPECT_EQ(published, 1024u);
  EXPECT_EQ(qa->PublishOneSge(write), ENOMEM);
}

// A batch (Qp::SendSlotAhead/InlineBufferAhead/PublishSends, the verbs
// provider's ibv_wr_*): one invalid WR and none is published; a valid
// batch, with inline data written in place into its WQE, is delivered.
TEST(Doorbell, ABatchIsPublishedWholeOrNotAtAll) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* qa = a.dev->qp(a.qpn);
  Fill(a.mem, 0, 256, 3);
  *qa->SendSlotAhead(0) = MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096);
  *qa->SendSlotAhead(1) = MakeWr(2, WrOpcode::kAtomicFetchAndAdd, a, 0, 16, b, 0);  // an atomic is 8 bytes
  EXPECT_EQ(qa->PublishSends(2), EINVAL);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 0u);  // nothing to send
  const char text[] = "written in place";
  for (uint32_t i = 0; i < 3; ++i) {
    SendWr* w = qa->SendSlotAhead(i);
    ASSERT_NE(w, nullptr);
    *w = MakeWr(10 + i, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096 + 64 * i);
    if (i == 1) {  // inline, its data already in the WQE: not read from the sge's memory again
      uint8_t* in = qa->InlineBufferAhead(i);
      std::memcpy(in, text, sizeof text);
      w->flags |= transport::kSendInline;
      w->sg_list[0] = {reinterpret_cast<uintptr_t>(in), sizeof text, 0};
    }
  }
  ASSERT_EQ(qa->PublishSends(3), 0);
  EXPECT_GT(a.dev->Doorbell(a.qpn, pair.now()), 0u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
  ASSERT_EQ(ca.size(), 3u);
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ca[i].wr_id, 10u + i);
    EXPECT_EQ(ca[i].status, WcStatus::kSuccess);
  }
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
  EXPECT_STREQ(reinterpret_cast<const char*>(b.mem.data() + 4096 + 64), text);
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096 + 128, a.mem.data(), 64), 0);
}

// WRs published while the engine moves the QP to ERR (here: a remote access
// error) are flushed when taken, in order, behind the one that failed; a
// receive published into an ERR QP flushes at its doorbell.
TEST(Doorbell, PublishedIntoAnErrorQpFlushInOrder) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* qa = a.dev->qp(a.qpn);
  SendWr bad = MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 0);
  bad.rkey ^= 0x100;
  ASSERT_EQ(a.dev->PostSend(a.qpn, bad), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
  ASSERT_EQ(qa->state(), transport::QpState::kErr);
  for (uint64_t i = 2; i <= 4; ++i) {
    *qa->NextSendSlot() = MakeWr(i, WrOpcode::kSend, a, 0, 8, b, 0);
    ASSERT_EQ(qa->PublishSend(), 0);
  }
  *qa->NextRecvSlot() = MakeRecv(9, a, 0, 64);
  ASSERT_EQ(qa->PublishRecv(), 0);
  a.dev->TakePostedRecvs(a.qpn);
  (void)a.dev->Doorbell(a.qpn, pair.now());
  ASSERT_TRUE(pair.Run(&ca, 5, &cb, 0));
  ASSERT_EQ(ca.size(), 5u);
  EXPECT_EQ(ca[0].wr_id, 1u);
  EXPECT_EQ(ca[0].status, WcStatus::kRemAccessErr);
  EXPECT_EQ(ca[1].wr_id, 9u);  // the receive flushed at TakePostedRecvs, before the doorbell
  EXPECT_EQ(ca[1].status, WcStatus::kWrFlushErr);
  for (uint64_t i = 2; i <= 4; ++i) {
    EXPECT_EQ(ca[i].wr_id, i);
    EXPECT_EQ(ca[i].status, WcStatus::kWrFlushErr);
  }
}

// A deferred doorbell (the verbs runtime's doorbell batching) sends
// nothing; the next doorbell sends the deferred QP's frames with its own.
TEST(Doorbell, DeferredDoorbellLeavesWithTheNext) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 128, 3);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_EQ(a.dev->counters().tx_packets, 0u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaWrite, a, 64, 64, b, 4096 + 64)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_EQ(a.dev->deferred_doorbells(), 1u);  // one entry per QP
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 128, b, 8192)), 0);
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 3u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 0u);
  EXPECT_EQ(a.dev->counters().tx_doorbells_deferred, 2u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(ca[i].wr_id, i + 1);  // in posting order
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 128), 0);
  EXPECT_EQ(std::memcmp(b.mem.data() + 8192, a.mem.data(), 128), 0);
}

// The deferred-doorbell list holds each QP once, whichever QP deferred
// last (DeferDoorbell skips the list's search when it is the last entry).
TEST(Doorbell, DeferredDoorbellsOfTwoQpsAreListedOnceEach) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  QpInitAttr init;
  init.pd = a.pd;
  init.send_cq = init.recv_cq = a.cq;
  init.caps.max_send_wr = init.caps.max_recv_wr = 16;
  const uint32_t other = *a.dev->CreateQp(init);
  a.dev->DeferDoorbell(a.qpn);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_EQ(a.dev->deferred_doorbells(), 1u);
  a.dev->DeferDoorbell(other);
  EXPECT_EQ(a.dev->deferred_doorbells(), 2u);
  a.dev->DeferDoorbell(a.qpn);  // not the last entry: found in the list
  a.dev->DeferDoorbell(other);
  a.dev->DeferDoorbell(other);
  EXPECT_EQ(a.dev->deferred_doorbells(), 2u);
  EXPECT_EQ(a.dev->counters().tx_doorbells_deferred, 6u);
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 0u);  // nothing was posted
  EXPECT_EQ(a.dev->deferred_doorbells(), 0u);
}

// A deferred doorbell never waits for a later post: the next poll round
// transmits its QP, and FlushDeferredDoorbells sends it and receives nothing.
TEST(Doorbell, DeferredDoorbellLeavesWithAPollRoundOrAFlush) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  EXPECT_GE(a.dev->Poll(pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().tx_packets, 1u);
  EXPECT_EQ(a.dev->deferred_doorbells(), 0u);

  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(2, WrOpcode::kRdmaWrite, b, 0, 64, a, 4096)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 1u);  // a frame now waits at a
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  const uint64_t rx_before = a.dev->counters().rx_packets;
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 1u);
  EXPECT_EQ(a.dev->counters().rx_packets, rx_before);  // receive is the poll loop's
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 0u);  // nothing deferred any more
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
}

// A QP destroyed after its doorbell was deferred is skipped.
TEST(Doorbell, DeferredDoorbellOfADestroyedQpIsSkipped) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  a.dev->DeferDoorbell(a.qpn);
  ASSERT_TRUE(a.dev->DestroyQp(a.qpn).ok());
  EXPECT_EQ(a.dev->FlushDeferredDoorbells(pair.now()), 0u);
  EXPECT_EQ(a.dev->counters().tx_packets, 0u);
}

// A round the program drives (Poll's hold_acks) keeps a lone ACK for the
// program's next post: the reply and the ACK of what it answers leave in
// one doorbell, and the peer takes both in one receive burst.
TEST(HoldAcks, ALoneAckLeavesWithTheProgramsReply) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 64, 4);
  Fill(b.mem, 64, 64, 5);
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10, b, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostRecv(a.qpn, MakeRecv(11, a, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);  // signaled: AckReq
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 1u);
  EXPECT_EQ(b.dev->Poll(pair.now(), /*hold_acks=*/true), 1u);  // the SEND in, nothing out
  EXPECT_EQ(b.dev->counters().tx_packets, 0u);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  Completion c;
  ASSERT_EQ(b.dev->PollCq(b.cq, &c, 1), 1u);
  EXPECT_EQ(c.wr_id, 10u);
  ASSERT_EQ(b.dev->PostSend(b.qpn, MakeWr(2, WrOpcode::kSend, b, 64, 64, a, 0)), 0);
  EXPECT_EQ(b.dev->Doorbell(b.qpn, pair.now()), 2u);  // the ACK and the reply
  const uint64_t bursts = a.dev->counters().rx_bursts;
  a.dev->Poll(pair.now());
  EXPECT_EQ(a.dev->counters().rx_bursts, bursts + 1);
  EXPECT_EQ(a.dev->counters().rx_packets, 2u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 1));
  EXPECT_EQ(ca.size(), 2u);  // a's SEND (acknowledged) and its receive
  EXPECT_EQ(std::memcmp(b.mem.data() + 4096, a.mem.data(), 64), 0);
  EXPECT_EQ(std::memcmp(a.mem.data() + 4096, b.mem.data() + 64, 64), 0);
}

// A held ACK waits one round at most: the next round sends it, held or not;
// a round the progress thread runs (no hold_acks) never holds.
TEST(HoldAcks, AHeldAckLeavesWithTheNextRound) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10 + i, b, 4096 * (i + 1), 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_packets, 0u);
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_packets, 1u);  // held once, then sent
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now());
  EXPECT_EQ(b.dev->counters().tx_packets, 2u);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 1u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 2, &cb, 2));
}

// Selective-repeat QPs time RTTs from their ACKs: never held.
TEST(HoldAcks, SelectiveRepeatQpsDoNotHold) {
  RcPair pair({}, 7, 1024, 4 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000, nullptr, 16384, true, true);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(10, b, 4096, 64)), 0);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kSend, a, 0, 64, b, 0)), 0);
  a.dev->Doorbell(a.qpn, pair.now());
  b.dev->Poll(pair.now(), true);
  EXPECT_EQ(b.dev->counters().tx_acks_held, 0u);
  EXPECT_EQ(b.dev->counters().tx_packets, 1u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 1));
}

// A QP asks the device for the buffers its queued requests fill, not for
// its window's room: one 64 B WRITE's doorbell takes one buffer.
TEST(Doorbell, DemandCountsQueuedRequestPackets) {
  RcPair pair({}, 7);
  Side& a = pair.a();
  Side& b = pair.b();
  transport::Qp* q = a.dev->qp(a.qpn);
  ASSERT_NE(q, nullptr);
  const uint32_t burst = 32;
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 0u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 4096)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 1u);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(2, WrOpcode::kRdmaRead, a, 8192, 8192, b, 0)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 2u);  // a READ: one request packet
  const uint32_t mtu_packets = 4096 / q->attr().path_mtu;
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(3, WrOpcode::kRdmaWrite, a, 0, 4096, b, 4096)), 0);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 2u + mtu_packets);
  EXPECT_EQ(q->TransmitDemand(pair.now(), 2), 2u);  // never more than asked
  EXPECT_EQ(a.dev->Doorbell(a.qpn, pair.now()), 2u + mtu_packets);
  EXPECT_EQ(q->TransmitDemand(pair.now(), burst), 0u);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 3, &cb, 0));
}

// The impaired-wire matrix (tests/support/pair_matrix.h) with go-back-N:
// every opcode and size, data byte for byte, each WR completed once, only
// IBTA opcodes on the wire.
class RcMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(RcMatrix, AllOpcodesAllSizes) {
  const auto [scenario, mtu] = GetParam();
  AllOpcodesAllSizes(scenario, mtu, /*selective_repeat=*/false);
}

INSTANTIATE_TEST_SUITE_P(Impaired, RcMatrix, MatrixValues(), MatrixName);

}  // namespace
}  // namespace droce::core
