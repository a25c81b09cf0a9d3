// Selective repeat (doc/transport.md "Selective repeat") between two droce
// devices on the impaired in-memory wire: every opcode and size under loss,
// reordering, duplication and corruption, at MTU 1024 and 4096, one WR at a
// time and many in flight; data byte for byte, every WR completed exactly
// once and in order, atomics once. The wire carries the SR opcodes only when
// selective repeat is on, and SR retransmits far fewer packets than
// go-back-N at 1% loss.
#include "tests/support/pair_matrix.h"
#include "tests/support/rc_pair_fixture.h"

namespace droce::core {
namespace {

using namespace droce::core::testing;  // RcPair, Side, MakeWr, Completion, WcStatus, WrOpcode...

RcPair SrPair(Impairments imp, uint32_t seed, uint32_t mtu, bool sr_a = true, bool sr_b = true,
              uint8_t timeout = 8, const cc::DcqcnParams* dcqcn = nullptr) {
  return MatrixPair(imp, seed, mtu, sr_a, sr_b, timeout, dcqcn);
}

// Drops every frame a sends (on) or none (off).
void DropAllFromA(RcPair& pair, bool on) {
  sim::Impairments imp;
  imp.drop = on ? 1.0 : 0.0;
  pair.link().set_impairments(0, imp);
}

class SrMatrix : public ::testing::TestWithParam<MatrixParam> {};

// The impaired-wire matrix (tests/support/pair_matrix.h) with selective
// repeat: every opcode and size one WR at a time, as the go-back-N matrix,
// and only SR SEND/WRITE opcodes on the wire.
TEST_P(SrMatrix, AllOpcodesAllSizes) {
  const auto [scenario, mtu] = GetParam();
  AllOpcodesAllSizes(scenario, mtu, /*selective_repeat=*/true);
}

// Many WRs in flight at once, of every kind: the responder places packets
// out of order, receives and requester completions stay in posting order.
TEST_P(SrMatrix, PipelinedMixInOrder) {
  const auto [scenario, mtu] = GetParam();
  RcPair pair = SrPair(scenario.imp, 99, mtu);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t kWrs = 60;
  const uint32_t kSlot = 64 << 10;
  uint64_t* counter = reinterpret_cast<uint64_t*>(b.mem.data() + (7 << 20));
  *counter = 0;
  Fill(a.mem, 0, kWrs * kSlot, 7);
  Fill(b.mem, 4 << 20, kWrs * 16384, 8);
  uint32_t recvs = 0, faas = 0;
  std::vector<uint64_t> recv_ids;
  for (uint32_t i = 0; i < kWrs; ++i) {
    const uint64_t off = uint64_t{i} * kSlot;
    const uint32_t len = (i * 7919) % kSlot;
    SendWr wr;
    switch (i % 6) {
      case 0: wr = MakeWr(i, WrOpcode::kRdmaWrite, a, off, kSlot, b, off); break;
      case 1: wr = MakeWr(i, WrOpcode::kSend, a, off, len, b, 0); break;
      case 2: wr = MakeWr(i, WrOpcode::kRdmaWriteWithImm, a, off, len, b, off); break;
      case 3: wr = MakeWr(i, WrOpcode::kRdmaRead, a, (5 << 20) + (i % 16) * 16384, 16384, b,
                          (4 << 20) + i * 16384); break;
      case 4:
        wr = MakeWr(i, WrOpcode::kAtomicFetchAndAdd, a, (6 << 20) + i * 8, 8, b, 7 << 20);
        wr.compare_add = 1;
        ++faas;
        break;
      default: wr = MakeWr(i, WrOpcode::kSendWithImm, a, off, std::min(len, 3000u), b, 0); break;
    }
    if (wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithImm ||
        wr.opcode == WrOpcode::kRdmaWriteWithImm) {
      // SENDs land in b's receive buffers at their own offset.
      ASSERT_EQ(b.dev->PostRecv(b.qpn, MakeRecv(1000 + i, b, off, kSlot)), 0);
      recv_ids.push_back(1000 + i);
      ++recvs;
    }
    wr.imm_data = i;
    ASSERT_EQ(a.dev->PostSend(a.qpn, wr), 0);
  }
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, kWrs, &cb, recvs)) << scenario.name << " " << ca.size() << " " << cb.size();
  ASSERT_EQ(ca.size(), kWrs);
  for (uint32_t i = 0; i < kWrs; ++i) {
    EXPECT_EQ(ca[i].wr_id, i);
    EXPECT_EQ(ca[i].status, WcStatus::kSuccess) << i << " " << queue::WcStatusName(ca[i].status);
  }
  ASSERT_EQ(cb.size(), recvs);
  for (uint32_t i = 0; i < recvs; ++i) {
    EXPECT_EQ(cb[i].wr_id, recv_ids[i]);
    EXPECT_EQ(cb[i].status, WcStatus::kSuccess);
  }
  for (uint32_t i = 0; i < kWrs; ++i) {
    const uint64_t off = uint64_t{i} * kSlot;
    const uint32_t len = (i * 7919) % kSlot;
    switch (i % 6) {
      case 0: EXPECT_EQ(std::memcmp(b.mem.data() + off, a.mem.data() + off, kSlot), 0) << i; break;
      case 1:
      case 2: EXPECT_EQ(std::memcmp(b.mem.data() + off, a.mem.data() + off, len), 0) << i; break;
      case 5:
        EXPECT_EQ(std::memcmp(b.mem.data() + off, a.mem.data() + off, std::min(len, 3000u)), 0) << i;
        break;
      default: break;
    }
  }
  EXPECT_EQ(*counter, faas);  // each fetch-and-add exactly once
  const auto& bc = b.dev->qp(b.qpn)->counters();
  if (scenario.imp.drop > 0) {
    EXPECT_GT(bc.sr_sacks_sent, 0u);
    EXPECT_GT(bc.sr_out_of_order_placed, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Impaired, SrMatrix, MatrixValues(), MatrixName);

// 64 KiB WRITEs at 1% loss, MTU 1024, many in flight: go-back-N resends
// everything behind each loss, selective repeat only what was lost.
uint64_t RetransmittedFor64KiBWrites(bool sr, uint64_t* dropped, uint64_t* sacks) {
  RcPair pair = SrPair({0.01, 0, 0, 0}, 4242, 1024, sr, sr);
  Side& a = pair.a();
  Side& b = pair.b();
  const uint32_t kWrs = 100;
  for (uint32_t i = 0; i < kWrs; ++i) {
    EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, (i % 32) * 65536, 65536, b,
                                            (i % 32) * 65536)),
              0);
  }
  std::vector<Completion> ca, cb;
  EXPECT_TRUE(pair.Run(&ca, kWrs, &cb, 0));
  EXPECT_EQ(ca.size(), kWrs);
  for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
  *dropped = pair.link().counters(0).dropped;
  *sacks = b.dev->qp(b.qpn)->counters().sr_sacks_sent;
  return a.dev->qp(a.qpn)->counters().retransmitted_packets;
}

TEST(SelectiveRepeat, RetransmitsFarFewerPacketsThanGoBackNAtOnePercentLoss) {
  uint64_t gbn_dropped = 0, sr_dropped = 0, gbn_sacks = 0, sr_sacks = 0;
  const uint64_t gbn = RetransmittedFor64KiBWrites(false, &gbn_dropped, &gbn_sacks);
  const uint64_t sr = RetransmittedFor64KiBWrites(true, &sr_dropped, &sr_sacks);
  std::printf("64 KiB WRITEs at 1%% loss: go-back-N retransmitted %lu (%lu dropped), selective repeat %lu "
              "(%lu dropped, %lu SACKs)\n",
              gbn, gbn_dropped, sr, sr_dropped, sr_sacks);
  EXPECT_EQ(gbn_sacks, 0u);
  EXPECT_GT(sr_sacks, 0u);
  EXPECT_GT(sr, 0u);
  EXPECT_LT(sr * 5, gbn);                     // at least 5x fewer
  EXPECT_LE(sr, 3 * std::max<uint64_t>(sr_dropped, 1));  // about one per loss
}

// READ responses past a lost one are placed at their offset and not asked
// for again: the responder resends only the missing runs.
uint64_t ReadResponsesSentFor256KiBReads(bool sr, uint64_t* placed_ahead) {
  RcPair pair = SrPair({0.02, 0, 0, 0}, 77, 1024, sr, sr);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(b.mem, 0, 1 << 20, 21);
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaRead, a, (4 << 20) + i * (256 << 10), 256 << 10, b,
                                            (i % 4) * (256 << 10))),
              0);
  }
  std::vector<Completion> ca, cb;
  EXPECT_TRUE(pair.Run(&ca, 8, &cb, 0));
  for (uint32_t i = 0; i < 8; ++i) {
    EXPECT_EQ(ca[i].wr_id, i);
    EXPECT_EQ(ca[i].status, WcStatus::kSuccess);
    EXPECT_EQ(std::memcmp(a.mem.data() + (4 << 20) + i * (256 << 10), b.mem.data() + (i % 4) * (256 << 10), 256 << 10),
              0)
        << i;
  }
  *placed_ahead = a.dev->qp(a.qpn)->counters().sr_out_of_order_placed;
  return b.dev->qp(b.qpn)->counters().tx_packets;
}

TEST(SelectiveRepeat, ReadResponsesArePlacedByOffsetAndNotAskedAgain) {
  uint64_t gbn_ahead = 0, sr_ahead = 0;
  const uint64_t gbn = ReadResponsesSentFor256KiBReads(false, &gbn_ahead);
  const uint64_t sr = ReadResponsesSentFor256KiBReads(true, &sr_ahead);
  std::printf("8 x 256 KiB READs at 2%% loss: responder sent %lu packets with go-back-N, %lu with selective "
              "repeat (%lu responses placed ahead)\n",
              gbn, sr, sr_ahead);
  EXPECT_EQ(gbn_ahead, 0u);
  EXPECT_GT(sr_ahead, 0u);
  EXPECT_LT(sr, gbn);
}

// Several READs outstanding (max_rd_atomic 4, 8, 16, each READ sized so
// that all of them fit the 256-PSN window) under loss: the responses of a
// later READ that arrive while an older one waits for a lost response are
// placed at their offset, not dropped (they were: dropped_bad_response in
// the thousands, each asked for again, and 31 timeouts for 48 x 64 KiB at
// 1 %: 11 ms where go-back-N took 1.3 ms); a READ's second missing run is
// asked for at once (the retransmission cursor had passed it: a timeout).
TEST(SelectiveRepeat, PipelinedReadsUnderLossAreAnsweredWithoutDrops) {
  for (double loss : {0.0, 0.01, 0.03}) {
    for (uint8_t rd : {4, 8, 16}) {
      RcPair pair(Impairments{loss, 0, 0, 0}, 31, 1024, 8 << 20, 0, 0, 8, 7, 7, transport::QpType::kRc, 4000,
                  nullptr, 16384, true, true, 200'000, rd);
      Side& a = pair.a();
      Side& b = pair.b();
      Fill(b.mem, 0, 4 << 20, 3);
      const uint32_t size = (1u << 20) / rd / 4;  // rd x size = 256 KiB: 256 PSNs
      constexpr uint32_t kN = 48;
      for (uint32_t i = 0; i < kN; ++i) {
        ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaRead, a, (4 << 20) + i * size, size, b, i * size)), 0);
      }
      std::vector<Completion> ca, cb;
      const uint64_t t0 = pair.now();
      ASSERT_TRUE(pair.Run(&ca, kN, &cb, 0)) << loss << " " << int(rd);
      const uint64_t took = pair.now() - t0;
      const transport::QpCounters& ka = a.dev->qp(a.qpn)->counters();
      const transport::QpCounters& kb = b.dev->qp(b.qpn)->counters();
      std::printf("%u READs of %u B, max_rd_atomic %u, loss %.2f: %lu us, %lu timeouts, %lu responses "
                  "(%u loss-free), %lu placed ahead\n",
                  kN, size, rd, loss, took / 1000, ka.timeouts, kb.tx_packets, kN * size / 1024,
                  ka.sr_out_of_order_placed);
      ASSERT_EQ(ca.size(), kN);
      for (uint32_t i = 0; i < kN; ++i) {
        EXPECT_EQ(ca[i].wr_id, i);
        EXPECT_EQ(ca[i].status, WcStatus::kSuccess);
      }
      EXPECT_EQ(std::memcmp(a.mem.data() + (4 << 20), b.mem.data(), kN * size), 0);
      EXPECT_EQ(ka.dropped_bad_response, 0u) << "later READs' responses dropped, loss " << loss << " rd " << int(rd);
      if (loss <= 0.01) {
        EXPECT_EQ(ka.timeouts, 0u) << "rd " << int(rd);
        EXPECT_LT(took, 300'000u) << "rd " << int(rd);
      }
      if (loss == 0) {
        EXPECT_EQ(kb.tx_packets, kN * size / 1024);
      }
    }
  }
}

// Off (the default): the wire is IBTA's, unchanged.
TEST(SelectiveRepeat, OffLeavesTheWireIbta) {
  RcPair pair = SrPair({0.02, 0, 0, 0}, 5, 1024, false, false);
  OpcodeTap tap;
  pair.link().set_tap(&OpcodeTap::Tap, &tap);
  Side& a = pair.a();
  Side& b = pair.b();
  ASSERT_FALSE(a.dev->qp(a.qpn)->selective_repeat());
  for (uint32_t i = 0; i < 20; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, 0, 65536, b, 0)), 0);
  }
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 20, &cb, 0));
  EXPECT_EQ(tap.Sr(), 0u);
  EXPECT_GT(tap.IbtaSendWrite(), 0u);
}

// Only one end on (a misconfiguration ECE never produces): the other end
// drops the SR packets it does not understand, counted, and places nothing.
// A peer without selective repeat drops SR packets; the requester, never
// answered for an IBTA timeout (8: ~1 ms), falls back to go-back-N and the
// WRITE lands (core_sr_fallback covers every opcode).
TEST(SelectiveRepeat, APeerWithoutItDropsSrPacketsUntilTheFallback) {
  RcPair pair = SrPair({}, 6, 1024, true, false, /*timeout=*/8);
  Side& a = pair.a();
  Side& b = pair.b();
  std::memset(b.mem.data(), 0, 4096);
  Fill(a.mem, 0, 4096, 3);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 4096, b, 0)), 0);
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0, 100'000'000));
  EXPECT_GT(b.dev->qp(b.qpn)->counters().sr_dropped, 0u);
  EXPECT_EQ(a.dev->qp(a.qpn)->counters().sr_fallbacks, 1u);
  ASSERT_EQ(ca.size(), 1u);
  EXPECT_EQ(ca[0].status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 4096), 0);
}

// A lone packet lost: no SACK can come; the low RTO resends it long before
// the QP's timeout (14: 67 ms) would.
TEST(SelectiveRepeat, LowRtoRecoversALoneLoss) {
  for (bool sr : {false, true}) {
    RcPair pair = SrPair({}, 7, 1024, sr, sr, /*timeout=*/14);
    Side& a = pair.a();
    Side& b = pair.b();
    DropAllFromA(pair, true);
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 64, b, 0)), 0);
    const uint64_t t0 = pair.now();
    EXPECT_EQ(a.dev->Doorbell(a.qpn, t0), 1u);
    DropAllFromA(pair, false);
    std::vector<Completion> ca, cb;
    ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0));
    const uint64_t took = pair.now() - t0;
    if (sr) {
      EXPECT_LT(took, 2'000'000u) << "SR recovered in " << took << " ns";
    } else {
      EXPECT_GT(took, 60'000'000u) << "go-back-N waits its timeout";
    }
  }
}

// SR's timer runs on IRN's short RTOs, but retry_cnt keeps its IBTA meaning:
// a peer that never answers ends the WR in retry-exceeded after retry_cnt + 1
// of the QP's timeouts (14: 67 ms each), not after retry_cnt short RTOs
// (which would be ~3 ms and kill connections across any scheduling stall).
TEST(SelectiveRepeat, RetryCountIsSpentPerIbtaTimeoutNotPerShortRto) {
  RcPair pair = SrPair({}, 11, 1024, true, true, /*timeout=*/14);
  Side& a = pair.a();
  Side& b = pair.b();
  DropAllFromA(pair, true);
  ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(1, WrOpcode::kRdmaWrite, a, 0, 65536, b, 0)), 0);
  const uint64_t t0 = pair.now();
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 1, &cb, 0, 10'000'000'000ull));
  const uint64_t took = pair.now() - t0;
  ASSERT_EQ(ca.size(), 1u);
  EXPECT_EQ(ca[0].status, WcStatus::kRetryExcErr);
  const uint64_t ibta = transport::AckTimeoutNs(14);
  EXPECT_GE(took, 7 * ibta) << "retry-exceeded after " << took << " ns";
  EXPECT_LT(took, 10 * ibta);
  // Meanwhile, until the fallback at the first whole IBTA timeout, it
  // retransmitted on the short RTO, many times (backed off from 320 us to
  // at most 16 x that: ~16 in 67 ms; ~200 when the backoff stopped at
  // 320 us, doc/transport.md), then once per IBTA timeout (go-back-N).
  EXPECT_GT(a.dev->qp(a.qpn)->counters().timeouts, 8u + 12u);
}

// The low RTO is for little in flight: armed when a burst starts (one
// packet out), it must give way to the QP's timeout as the burst grows, or
// every burst whose first ACK (AckReq every 64 packets) is slower than it
// is resent whole (seen over memif: 12% of ib_write_bw's packets resent).
TEST(SelectiveRepeat, LowRtoGivesWayWhenMoreIsInFlight) {
  RcPair pair({}, 9, 1024, 8 << 20, 0, 0, 14, 7, 7, transport::QpType::kRc, 4000, nullptr, 16384, true, true,
              /*sr_rto_low_ns=*/1'000);
  Side& a = pair.a();
  Side& b = pair.b();
  for (uint32_t i = 0; i < 16; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
  }
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 16, &cb, 0));
  for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.dev->qp(a.qpn)->counters().timeouts, 0u);
  EXPECT_EQ(a.dev->qp(a.qpn)->counters().retransmitted_packets, 0u);
}

// DCQCN's rate limiter gates selective repeat's sends as any others.
TEST(SelectiveRepeat, WorksUnderDcqcnPacing) {
  cc::DcqcnParams p = cc::Mlx5Profile(10'000'000'000ull);
  RcPair pair = SrPair({0.01, 0, 0, 0}, 8, 1024, true, true, 8, &p);
  Side& a = pair.a();
  Side& b = pair.b();
  Fill(a.mem, 0, 1 << 20, 9);
  for (uint32_t i = 0; i < 16; ++i) {
    ASSERT_EQ(a.dev->PostSend(a.qpn, MakeWr(i, WrOpcode::kRdmaWrite, a, i * 65536, 65536, b, i * 65536)), 0);
  }
  // CNPs cut a's rate while it sends.
  for (int i = 0; i < 5; ++i) a.dev->qp(a.qpn)->OnCnp(pair.now());
  std::vector<Completion> ca, cb;
  ASSERT_TRUE(pair.Run(&ca, 16, &cb, 0));
  for (const Completion& c : ca) EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a.mem.data(), b.mem.data(), 1 << 20), 0);
  EXPECT_TRUE(a.dev->qp(a.qpn)->reaction_point()->rate_limited());
}

}  // namespace
}  // namespace droce::core
