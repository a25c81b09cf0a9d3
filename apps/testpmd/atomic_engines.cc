// atomic_bw: FETCH_AND_ADD on one 64-bit counter in the server's buffer,
// `outstanding` at a time. Verified both ways: every original value the
// client gets back is distinct and below the final count, and the server's
// counter ends at exactly the number of atomics (read after the bye).
#include <algorithm>
#include <cstring>
#include <vector>

#include "apps/testpmd/session.h"

namespace droce::testpmd {
namespace {

void AtomicClient(Session& s, uint64_t deadline) {
  const uint64_t limit = s.opt.iterations ? s.opt.iterations : UINT64_MAX;
  const uint32_t window = std::min<uint32_t>(s.opt.outstanding, 16);  // max_rd_atomic
  uint64_t posted = 0, done = 0;
  std::vector<uint64_t> originals;
  queue::Completion wc[64];
  while (done < posted || (posted < limit && !s.Expired(deadline))) {
    while (posted < limit && posted - done < window && !s.Expired(deadline)) {
      transport::SendWr wr;
      wr.wr_id = posted;
      wr.opcode = transport::WrOpcode::kAtomicFetchAndAdd;
      wr.flags = transport::kSendSignaled;
      wr.num_sge = 1;
      // Each outstanding atomic returns its original value into its own 8 bytes.
      wr.sg_list[0] = {s.slot_va(0) + (posted % window) * 8, 8, s.keys.lkey};
      wr.remote_addr = s.peer_va;  // the server's counter: first word of its slot 0
      wr.rkey = s.peer_rkey;
      wr.compare_add = 1;
      if (s.dev->PostSend(s.qpn, wr) != 0) break;
      ++posted;
    }
    s.Progress();
    const uint32_t n = s.PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) {
      ++done;
      if (wc[i].status != queue::WcStatus::kSuccess) {
        ++s.stats.errors;
        continue;
      }
      uint64_t original;
      std::memcpy(&original, s.slot(0) + (wc[i].wr_id % window) * 8, 8);
      originals.push_back(original);
      ++s.stats.messages;
      s.stats.bytes += 8;
    }
    if (s.stats.errors > 0) break;
  }
  std::sort(originals.begin(), originals.end());
  for (size_t i = 0; i < originals.size(); ++i) {
    if (originals[i] != i) {  // the counter started at 0: originals are exactly 0..n-1
      ++s.stats.verify_failures;
      break;
    }
  }
  s.SendCtrl(CtrlType::kBye, posted);
}

// The counter (first word of slot 0) starts at zero: the client's first
// atomic may arrive right after this side says ready.
void AtomicPrepare(Session& s) { std::memset(s.slot(0), 0, 8); }

void AtomicServer(Session& s) {
  queue::Completion wc[64];
  while (!s.HasCtrl(CtrlType::kBye)) {
    if (s.StopRequested()) return;  // this side quits mid-run
    s.Progress();
    const uint32_t n = s.PollCompletions(wc, 64);
    for (uint32_t i = 0; i < n; ++i) s.stats.errors += wc[i].status != queue::WcStatus::kSuccess;
  }
  const CtrlMsg bye = s.TakeCtrl(CtrlType::kBye);
  uint64_t counter;
  std::memcpy(&counter, s.slot(0), 8);
  if (counter != bye.value) ++s.stats.verify_failures;
  s.stats.messages = bye.value;
  s.stats.bytes = bye.value * 8;
}

}  // namespace

extern const Engine kAtomicBw{"atomic_bw", "FETCH_AND_ADD rate", AtomicClient, AtomicServer, AtomicPrepare};

}  // namespace droce::testpmd
