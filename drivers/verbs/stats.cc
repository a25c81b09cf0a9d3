// The verbs runtime's statistics (DROCE_STATS=1): the device's and each
// QP's counters, printed when the device closes or the program exits.

#include "drivers/verbs/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/memif_listener.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/ethdev/prefault.h"
#include "drivers/verbs/abi.h"
#include "drivers/fabric/protocol.h"
#include "drivers/verbs/thread_pause.h"
#include "drivers/verbs/tsc_clock.h"
#include "transport/sr/selective_repeat.h"

namespace droce::verbs {

// DROCE_STATS=1: the device's and every QP's counters on stderr at close,
// for users who want to know what the wire did (drops, NAKs, retransmits).
void Runtime::PrintStats() {
  const core::DeviceCounters& c = dev_->counters();
  ethdev::PortStats p;
  if (port_) {
    p = port_->stats();
  } else if (link_) {
    const ethdev::DaemonLinkCounters& l = link_->counters();
    p.rx_packets = l.rx_packets;
    p.tx_packets = l.tx_packets;
    p.tx_full = l.tx_ring_full;
    std::fprintf(stderr,
                 "droce %s: droced link %u (rings %zu B mapped): rx %lu tx %lu ring full %lu no buffer %lu wakeups sent "
                 "%lu binds %lu; frame buffers %u of %u B, at most %u in use at once\n",
                 file_.name.c_str(), link_->link_id(), link_->map_bytes(), l.rx_packets, l.tx_packets, l.tx_ring_full,
                 l.rx_no_buffer, l.wakeups_sent, l.binds, link_->pool().count(), link_->pool().buffer_bytes(),
                 link_->pool().high_water());
  }
  const bool wire_up = port_ ? port_->LinkUp() : link_ != nullptr && link_->bound();
  if (direct_) {
    const ethdev::DirectCounters& d = direct_->counters();
    std::fprintf(stderr,
                 "droce %s: direct paths %zu (table %u): tx %lu (ring full %lu, gathered %lu, flattened %lu) rx %lu (lent %lu) rx_not_mine %lu "
                 "rx_bad_length %lu wakeups sent %lu, full-ring sleeps %lu, producer wakeups sent %lu, paths added %lu "
                 "removed %lu, messages refused %lu, markers sent %lu received %lu missed %lu forged %lu\n",
                 file_.name.c_str(), direct_->paths(), direct_->generation(), d.tx_direct, d.tx_ring_full,
                 d.tx_gathered, d.tx_flattened, d.rx_direct, d.rx_lent, d.rx_not_mine, d.rx_bad_length, d.wakeups_sent, d.tx_full_sleeps,
                 d.producer_wakeups_sent, d.paths_added, d.paths_removed,
                 d.messages_refused, d.markers_sent, d.markers_received, d.markers_missed,
                 d.markers_forged);
  }
  std::fprintf(stderr, "droce %s: empty polls that ran no round (nothing to do) %lu\n", file_.name.c_str(),
               idle_polls_);
  std::fprintf(stderr,
               "droce %s: link %s, reconnects %lu, port rx %lu tx %lu (peer woken %lu) rx_multi_segment %lu "
               "unmap_faults %lu, looped %lu, fabric losses %lu re-attaches %lu\n",
               file_.name.c_str(), wire_up ? "up" : "down", reconnects_, p.rx_packets, p.tx_packets,
               port_ ? port_->tx_wakeups() : 0,
               p.rx_multi_segment, p.unmap_faults, dev_->loopback_counters().looped, fabric_losses_,
               fabric_reattaches_);
  std::fprintf(stderr,
               "droce %s: rx %lu pkts %lu B, tx %lu pkts %lu B, port tx_full %lu, progress polls %lu sleeps %lu "
               "(woken by arrival %lu, %s; %s%s, demoted %lu, yielded to the program %lu, auto to FIFO %lu to OTHER %lu, program not running %lu%s), stood aside %lu, pm_qos holds %lu, events %lu comp (%lu handed over in process) %lu async, event waits "
               "slept %lu (woken by arrival %lu), posts left for the owner %lu\n",
               file_.name.c_str(), c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes, p.tx_full,
               stats_.progress_polls.load(), stats_.progress_sleeps.load(), stats_.progress_arrival_wakeups.load(), wakeup_ ? wakeup_->kind() : "timed sleeps only",
               progress_fifo_.load() ? "SCHED_FIFO" : "SCHED_OTHER",
               stats_.progress_nice_refused.load() != 0 ? " progress_nice refused" : "", stats_.progress_fifo_demotions.load(),
               stats_.progress_fifo_yields.load(), stats_.progress_auto_to_fifo.load(),
               stats_.progress_auto_to_other.load(), stats_.progress_auto_not_running.load(),
               stats_.progress_auto_refused.load() != 0 ? " (SCHED_FIFO refused)" : "",
               stats_.progress_stand_asides.load(), stats_.pm_qos_holds.load(),
               stats_.comp_events.load(), stats_.events_handed_over.load(), stats_.async_events.load(),
               stats_.event_wait_sleeps.load(), stats_.event_wait_arrivals.load(),
               stats_.posts_left_for_owner.load());
  std::fprintf(stderr,
               "droce %s: progress stream waits %lu (ended by the watchdog %lu, on a full ring %lu, refused: device "
               "busy %lu), event wait naps %lu (found nothing %lu)\n",
               file_.name.c_str(), stats_.progress_stream_waits.load(), stats_.progress_stream_watchdogs.load(),
               stats_.progress_ring_waits.load(), stats_.progress_stream_busy.load(),
               stats_.event_wait_naps.load(), stats_.event_wait_naps_empty.load());
  const Stats::Wakes& w = stats_.wakes;
  std::fprintf(stderr,
               "droce %s: progress passes: event-waiter naps %lu, program inside a call %lu, polls for a quiet "
               "program %lu (quiet <100 us %lu, <1 ms %lu, longer %lu), naps beside a working program on its CPU "
               "%lu, beside a steady sender %lu, polls beside an armed channel %lu, polls with work %lu, empty "
               "spins %lu, hot sleeps %lu, idle waits %lu, slice to default %lu, back to short %lu\n",
               file_.name.c_str(), w.event_waiter.load(), w.in_call.load(), w.quiet_polls.load(),
               w.quiet_100us.load(), w.quiet_1ms.load(), w.quiet_long.load(), w.shared_cpu_naps.load(),
               w.steady_naps.load(), w.armed_polls.load(), w.work.load(),
               w.spins.load(), w.hot_sleeps.load(), w.idle_waits.load(), w.calm_slices.load(), w.short_slices.load());
  if (udp_) {
    const udp::UdpCounters& u = udp_->counters();
    std::fprintf(stderr,
                 "droce %s: own UDP socket (port %u): rx %lu datagrams (dropped %lu, coalesced %lu, copied into place "
                 "%lu) in %lu calls (%lu empty), "
                 "tx %lu (dropped %lu, source port rewritten %lu, segmented %lu, segmentation refused %lu) in %lu "
                 "calls, send buffer full %lu, payloads sent from registered memory %lu (flattened %lu)\n",
                 file_.name.c_str(), udp_->port(), u.rx_datagrams, u.rx_dropped, u.rx_coalesced, u.rx_gro_copied,
                 u.rx_calls, u.rx_empty_calls, u.tx_datagrams, u.tx_dropped, u.tx_port_rewritten, u.tx_gso_datagrams, u.tx_gso_refused, u.tx_calls,
                 u.tx_would_block, u.tx_gathered, u.tx_flattened);
  }
  // Every device counter (lib/core DROCE_DEVICE_COUNTERS and the parse drops).
  std::string line = absl::StrCat("droce ", file_.name, " device:");
  core::ForEachDeviceCounter(c, [&](const char* name, uint64_t v) { absl::StrAppend(&line, " ", name, " ", v); });
  std::fprintf(stderr, "%s\n", line.c_str());
  for (uint32_t qpn = dev_->qpn_base(); qpn < dev_->qpn_base() + dev_->config().max_qp; ++qpn) PrintQpStats(qpn);
}

// One QP's counters (DROCE_STATS=1): at close for the QPs still open, and
// when a QP is destroyed (perftest destroys its QPs before closing).
void Runtime::PrintQpStats(uint32_t qpn) {
  transport::Qp* q = dev_->qp(qpn);
  if (q == nullptr) return;
  {
    const transport::QpCounters& k = q->counters();
    std::fprintf(stderr,
                 "droce %s qp %u: tx %lu rx %lu retransmitted %lu timeouts %lu naks sent %lu (seq %lu, rnr %lu) "
                 "received %lu (rnr %lu) duplicates %lu out_of_sequence %lu acks sent %lu received %lu solicited %lu "
                 "dropped_wrong_state %lu state %s selective_repeat %s sr_sacks_sent %lu sr_sacks_received %lu "
                 "sr_retransmitted_packets %lu sr_out_of_order_placed %lu sr_dropped %lu sr_fallbacks %lu tlp_probes %lu "
                 "sr_rack_resent %lu sr_spurious_timeouts %lu\n",
                 file_.name.c_str(), qpn, k.tx_packets, k.rx_packets, k.retransmitted_packets, k.timeouts,
                 k.naks_sent, k.seq_naks_sent, k.rnr_naks_sent, k.naks_received, k.rnr_naks_received,
                 k.duplicates_received, k.out_of_sequence, k.acks_sent, k.acks_received, k.ack_solicits,
                 k.dropped_wrong_state,
                 transport::QpStateName(q->state()), q->selective_repeat() ? "on" : "off", k.sr_sacks_sent,
                 k.sr_sacks_received, k.sr_retransmitted_packets, k.sr_out_of_order_placed, k.sr_dropped,
                 k.sr_fallbacks, k.tlp_probes, k.sr_rack_resent, k.sr_spurious_timeouts);
    if (const cc::CongestionControl& c = q->congestion_control(); c.ops() != nullptr) {  // doc/cc.md
      const cc::Output& o = c.output();
      const cc::Stats& st = c.stats();
      std::fprintf(stderr,
                   "droce %s qp %u cc: %s rate_limited %d rate_bps %lu window_packets %u acks %lu rtt_samples %lu "
                   "last_rtt_us %.1f min_rtt_us %.1f telemetry_acks %lu cnps %lu timeouts %lu rate_decreases %lu "
                   "rate_increases %lu\n",
                   file_.name.c_str(), qpn, c.name(), o.rate_limited ? 1 : 0, o.rate_bps, o.window_packets, st.acks,
                   st.rtt_samples, st.last_rtt_ns / 1e3, st.min_rtt_ns / 1e3, st.telemetry_acks, st.cnps, st.timeouts,
                   st.rate_decreases, st.rate_increases);
    }
    if (q->selective_repeat()) {  // the SR breakdown (doc/loss-experiment.md)
      const transport::RttEstimator& r = q->sr()->rtt();
      std::fprintf(stderr,
                   "droce %s qp %u sr: timeout_resent %lu timeouts_low %lu timeouts_backoff %lu window_full_us %lu "
                   "srtt_us %lu rttvar_us %lu rto_low_us %lu rto_high_us %lu rtt_max_us %lu rtt_hist_us "
                   "<32:%lu <64:%lu <128:%lu <256:%lu <512:%lu <1024:%lu <2048:%lu >=2048:%lu\n",
                   file_.name.c_str(), qpn, k.sr_timeout_resent, k.sr_timeouts_low, k.sr_timeouts_backoff,
                   k.sr_window_full_ns / 1000, r.srtt_ns / 1000, r.rttvar_ns / 1000, q->sr()->rto_low_ns() / 1000,
                   q->sr()->rto_high_ns() / 1000, k.sr_rtt_max_ns / 1000, k.sr_rtt_hist[0], k.sr_rtt_hist[1],
                   k.sr_rtt_hist[2], k.sr_rtt_hist[3], k.sr_rtt_hist[4], k.sr_rtt_hist[5], k.sr_rtt_hist[6],
                   k.sr_rtt_hist[7]);
    }
  }
}

}  // namespace droce::verbs
