// DPDK telemetry commands for droce-testpmd --telemetry. They run on DPDK's
// telemetry thread and read the session through snapshots its owner makes
// (Session::RequestSnapshot); the device is never touched from here.
//   /droce/port      port, device and run counters (a dict)
//   /droce/qp        every QP: a dict of QPN -> dict of its counters
//   /droce/qp,N      QP N's counters (a dict)
#include <cstdlib>
#include <mutex>
#include <string>

#include <rte_telemetry.h>

#include "absl/strings/str_format.h"
#include "apps/testpmd/runner.h"

namespace droce::testpmd {
namespace {

std::mutex g_mu;             // held while a command uses g_session
Session* g_session = nullptr;

bool TakeSnapshot(Snapshot* snap) {
  return g_session != nullptr && g_session->RequestSnapshot(snap, 1000);
}

void AddQp(rte_tel_data* d, const QpSnapshot& q) {
  const transport::QpCounters& c = q.counters;
  rte_tel_data_add_dict_u64(d, "qpn", q.qpn);
  rte_tel_data_add_dict_string(d, "state", transport::QpStateName(q.state));
  rte_tel_data_add_dict_u64(d, "control", q.control ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "qp_memory_bytes", q.memory_bytes);
  rte_tel_data_add_dict_u64(d, "tx_packets", c.tx_packets);
  rte_tel_data_add_dict_u64(d, "tx_bytes", c.tx_bytes);
  rte_tel_data_add_dict_u64(d, "rx_packets", c.rx_packets);
  rte_tel_data_add_dict_u64(d, "rx_bytes", c.rx_bytes);
  rte_tel_data_add_dict_u64(d, "retransmitted_packets", c.retransmitted_packets);
  rte_tel_data_add_dict_u64(d, "timeouts", c.timeouts);
  rte_tel_data_add_dict_u64(d, "naks_sent", c.naks_sent);
  rte_tel_data_add_dict_u64(d, "naks_received", c.naks_received);
  rte_tel_data_add_dict_u64(d, "rnr_naks_sent", c.rnr_naks_sent);
  rte_tel_data_add_dict_u64(d, "rnr_naks_received", c.rnr_naks_received);
  rte_tel_data_add_dict_u64(d, "duplicates_received", c.duplicates_received);
  rte_tel_data_add_dict_u64(d, "out_of_sequence", c.out_of_sequence);
  rte_tel_data_add_dict_u64(d, "cnps_sent", c.cnps_sent);
  rte_tel_data_add_dict_u64(d, "cnps_received", c.cnps_received);
  rte_tel_data_add_dict_u64(d, "ce_marked_received", c.ce_marked_received);
  rte_tel_data_add_dict_u64(d, "acks_sent", c.acks_sent);
  rte_tel_data_add_dict_u64(d, "acks_received", c.acks_received);
  rte_tel_data_add_dict_string(d, "cc", q.cc_name);
  rte_tel_data_add_dict_u64(d, "cc_rate_limited", q.cc_output.rate_limited ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "cc_rate_bps", q.cc_output.rate_bps);
  rte_tel_data_add_dict_u64(d, "cc_window_packets", q.cc_output.window_packets);
  rte_tel_data_add_dict_u64(d, "cc_rtt_samples", q.cc_stats.rtt_samples);
  rte_tel_data_add_dict_u64(d, "cc_last_rtt_ns", q.cc_stats.last_rtt_ns);
  rte_tel_data_add_dict_u64(d, "cc_min_rtt_ns", q.cc_stats.min_rtt_ns);
  rte_tel_data_add_dict_u64(d, "cc_telemetry_acks", q.cc_stats.telemetry_acks);
  rte_tel_data_add_dict_u64(d, "cc_rate_decreases", q.cc_stats.rate_decreases);
  rte_tel_data_add_dict_u64(d, "cc_rate_increases", q.cc_stats.rate_increases);
}

int PortCmd(const char*, const char*, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mu);
  Snapshot s;
  if (!TakeSnapshot(&s)) return -1;
  const core::DeviceCounters& c = s.dev;
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "link_up", s.link_up ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "port_rx_packets", s.port.rx_packets);
  rte_tel_data_add_dict_u64(d, "port_rx_bytes", s.port.rx_bytes);
  rte_tel_data_add_dict_u64(d, "port_tx_packets", s.port.tx_packets);
  rte_tel_data_add_dict_u64(d, "port_tx_bytes", s.port.tx_bytes);
  rte_tel_data_add_dict_u64(d, "port_tx_full", s.port.tx_full);
  core::ForEachDeviceCounter(c, [d](const char* name, uint64_t v) { rte_tel_data_add_dict_u64(d, name, v); });
  rte_tel_data_add_dict_u64(d, "running", s.running ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "messages", s.messages);
  rte_tel_data_add_dict_u64(d, "bytes", s.bytes);
  rte_tel_data_add_dict_u64(d, "errors", s.errors);
  rte_tel_data_add_dict_u64(d, "verify_failures", s.verify_failures);
  return 0;
}

int QpCmd(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard<std::mutex> lock(g_mu);
  Snapshot s;
  if (!TakeSnapshot(&s)) return -1;
  if (params != nullptr && *params != '\0') {
    char* end;
    const unsigned long qpn = std::strtoul(params, &end, 0);
    if (*end != '\0') return -EINVAL;
    for (const QpSnapshot& q : s.qps) {
      if (q.qpn == qpn) {
        rte_tel_data_start_dict(d);
        AddQp(d, q);
        return 0;
      }
    }
    return -EINVAL;
  }
  rte_tel_data_start_dict(d);
  for (const QpSnapshot& q : s.qps) {
    rte_tel_data* qd = rte_tel_data_alloc();
    if (qd == nullptr) return -ENOMEM;
    rte_tel_data_start_dict(qd);
    AddQp(qd, q);
    rte_tel_data_add_dict_container(d, absl::StrFormat("%u", q.qpn).c_str(), qd, 0);
  }
  return 0;
}

}  // namespace

void RegisterTelemetry(Session* s) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_session = s;
  }
  rte_telemetry_register_cmd("/droce/port", PortCmd, "droce port, device and run counters. No parameters");
  rte_telemetry_register_cmd("/droce/qp", QpCmd,
                             "droce QP counters: every QP, or one. Parameters: int qpn (optional)");
}

void UnregisterTelemetry() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_session = nullptr;
}

}  // namespace droce::testpmd
