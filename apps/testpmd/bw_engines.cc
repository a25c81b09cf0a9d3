// Bandwidth engines: keep `outstanding` messages in flight from the client
// for the run's duration; every message is verified.
//   write_bw: RDMA WRITEs into the server's slots; the server checks the
//             final content of every slot after the client says bye.
//   read_bw:  RDMA READs of the server's slots; the client checks each one.
//   send_bw:  SENDs into receives the server keeps posted; the server checks each.
#include <cstring>
#include <vector>

#include "apps/testpmd/session.h"

namespace droce::testpmd {
namespace {

transport::SendWr DataWr(Session& s, transport::WrOpcode op, uint64_t seq) {
  transport::SendWr wr;
  wr.wr_id = seq;
  wr.opcode = op;
  wr.flags = transport::kSendSignaled;
  wr.num_sge = 1;
  wr.sg_list[0] = {s.slot_va(static_cast<uint32_t>(seq)), s.opt.size, s.keys.lkey};
  wr.remote_addr = s.peer_slot_va(static_cast<uint32_t>(seq));
  wr.rkey = s.peer_rkey;
  return wr;
}

void BwClient(Session& s, transport::WrOpcode op, uint64_t deadline) {
  const bool read = op == transport::WrOpcode::kRdmaRead;
  uint64_t posted = 0, done = 0;
  // A slot is reused only after its own message completed: with several QPs
  // completions arrive out of global order, and refilling a slot whose
  // message is still being (re)transmitted would corrupt it.
  std::vector<uint8_t> busy(s.opt.outstanding, 0);
  queue::Completion wc[64];
  const uint64_t limit = s.opt.iterations ? s.opt.iterations : UINT64_MAX;
  while (done < posted || (posted < limit && !s.Expired(deadline))) {
    while (posted < limit && !busy[posted % s.opt.outstanding] && !s.Expired(deadline)) {
      if (!read) FillPattern(s.slot(static_cast<uint32_t>(posted)), s.opt.size, posted);
      if (s.dev->PostSend(s.QpnForSeq(posted), DataWr(s, op, posted)) != 0) break;
      busy[posted % s.opt.outstanding] = 1;
      ++posted;
    }
    s.Progress();
    const uint32_t n = s.PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) {
      busy[wc[i].wr_id % s.opt.outstanding] = 0;
      ++done;
      if (wc[i].status != queue::WcStatus::kSuccess) {
        ++s.stats.errors;
        continue;
      }
      // The server's slot i holds the pattern of message i (it never changes).
      if (read && !CheckPattern(s.slot(static_cast<uint32_t>(wc[i].wr_id)), s.opt.size,
                                wc[i].wr_id % s.opt.outstanding)) {
        ++s.stats.verify_failures;
      }
      ++s.stats.messages;
      s.stats.bytes += s.opt.size;
    }
    if (s.stats.errors > 0) break;
  }
  s.SendCtrl(CtrlType::kBye, posted);
}

void PassiveServer(Session& s, bool post_receives, bool check_slots) {
  uint64_t expected_seq = 0;
  queue::Completion wc[64];
  if (post_receives) {
    // One receive per slot, reposted as soon as its message is checked: a
    // sender that runs ahead meets an RNR NAK rather than a reused buffer.
    // They stay posted after a run; the next send_bw run reuses them.
    for (uint32_t i = s.data_recvs_posted; i < s.opt.outstanding; ++i) {
      transport::RecvWr r;
      r.wr_id = i;
      r.num_sge = 1;
      r.sg_list[0] = {s.slot_va(i), s.opt.size, s.keys.lkey};
      if (s.dev->PostRecv(s.qpn, r) == 0) ++s.data_recvs_posted;
    }
  }
  for (;;) {
    s.Progress();
    const uint32_t n = s.PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) {
      if (wc[i].status != queue::WcStatus::kSuccess) {
        ++s.stats.errors;
        continue;
      }
      if (wc[i].opcode != queue::WcOpcode::kRecv) continue;
      // In-order delivery: receive k carries message k.
      if (!CheckPattern(s.slot(static_cast<uint32_t>(wc[i].wr_id)), s.opt.size, expected_seq)) {
        ++s.stats.verify_failures;
      }
      ++expected_seq;
      ++s.stats.messages;
      s.stats.bytes += wc[i].byte_len;
      transport::RecvWr r;
      r.wr_id = wc[i].wr_id;
      r.num_sge = 1;
      r.sg_list[0] = {s.slot_va(static_cast<uint32_t>(wc[i].wr_id)), s.opt.size, s.keys.lkey};
      (void)s.dev->PostRecv(s.qpn, r);
    }
    // The bye comes on the control QP once every message was acknowledged,
    // so every receive completion is in the CQ ahead of it.
    if (s.HasCtrl(CtrlType::kBye)) break;
    if (s.StopRequested()) return;  // this side quits mid-run
  }
  const CtrlMsg bye = s.TakeCtrl(CtrlType::kBye);
  if (!post_receives && !check_slots) {
    // read_bw: the server saw nothing; the client's count is the result.
    s.stats.messages = bye.value;
    s.stats.bytes = bye.value * s.opt.size;
  }
  if (check_slots) {
    // Slot k holds the last message written to it: the largest seq = k mod outstanding.
    for (uint64_t k = 0; k < s.opt.outstanding && k < bye.value; ++k) {
      uint64_t last = bye.value - 1 - ((bye.value - 1 - k) % s.opt.outstanding);
      if (!CheckPattern(s.slot(static_cast<uint32_t>(k)), s.opt.size, last)) ++s.stats.verify_failures;
    }
    s.stats.messages = bye.value;
    s.stats.bytes = bye.value * s.opt.size;
  }
}

void WriteClient(Session& s, uint64_t d) { BwClient(s, transport::WrOpcode::kRdmaWrite, d); }
void WriteServer(Session& s) { PassiveServer(s, false, true); }
void ReadClient(Session& s, uint64_t d) { BwClient(s, transport::WrOpcode::kRdmaRead, d); }
void ReadServer(Session& s) { PassiveServer(s, false, false); }
// READ targets: slot k holds message k's pattern for the whole run.
void ReadPrepare(Session& s) {
  for (uint32_t k = 0; k < s.opt.outstanding; ++k) FillPattern(s.slot(k), s.opt.size, k);
}
void SendClient(Session& s, uint64_t d) { BwClient(s, transport::WrOpcode::kSend, d); }
void SendServer(Session& s) { PassiveServer(s, true, false); }

}  // namespace

extern const Engine kWriteBw{"write_bw", "RDMA WRITE bandwidth", WriteClient, WriteServer, nullptr};
extern const Engine kReadBw{"read_bw", "RDMA READ bandwidth", ReadClient, ReadServer, ReadPrepare};
extern const Engine kSendBw{"send_bw", "SEND/RECV bandwidth", SendClient, SendServer, nullptr};

}  // namespace droce::testpmd
