#include "drivers/verbs/device_config.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "droce/version.h"
#include "transport/sr/state.h"
#include "wire/gid.h"

namespace droce::verbs {
namespace fs = std::filesystem;

namespace {

absl::StatusOr<uint32_t> ParseU32(absl::string_view key, absl::string_view v, uint32_t lo, uint32_t hi) {
  uint32_t x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: '%s' is not a number in %u..%u", key, v, lo, hi));
  }
  return x;
}

absl::StatusOr<bool> ParseOnOff(absl::string_view key, absl::string_view v) {
  if (v == "on" || v == "1" || v == "true") return true;
  if (v == "off" || v == "0" || v == "false") return false;
  return absl::InvalidArgumentError(absl::StrFormat("%s: '%s' is not on/off", key, v));
}

absl::Status WriteFile(const fs::path& p, absl::string_view content) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", p.parent_path().string(), ": ", ec.message()));
  std::ofstream out(p, std::ios::trunc);
  out << content;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", p.string()));
  return absl::OkStatus();
}

std::string NodeGuid(const core::Mac& m) {  // EUI-64 of the MAC, sysfs form
  return absl::StrFormat("%02x%02x:%02x%02x:%02x%02x:%02x%02x", m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3],
                         m[4], m[5]);
}

}  // namespace

std::string UverbsName(const std::string& run_dir, const std::string& ibdev) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (char c : run_dir) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return absl::StrFormat("uverbs_%s_%08x", ibdev, h);
}

absl::StatusOr<core::Mac> ParseMac(absl::string_view s) {
  std::vector<absl::string_view> parts = absl::StrSplit(s, ':');
  core::Mac m{};
  if (parts.size() != 6) return absl::InvalidArgumentError(absl::StrCat("bad MAC address '", s, "'"));
  for (int i = 0; i < 6; ++i) {
    uint32_t x = 0;
    if (parts[i].size() != 2 || !absl::SimpleHexAtoi(parts[i], &x)) {
      return absl::InvalidArgumentError(absl::StrCat("bad MAC address '", s, "'"));
    }
    m[i] = static_cast<uint8_t>(x);
  }
  if (m[0] & 1) return absl::InvalidArgumentError(absl::StrCat("MAC address '", s, "' is multicast"));
  return m;
}

std::string FormatMac(const core::Mac& m) {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
}

absl::StatusOr<core::Gid> ParseIpAsGid(absl::string_view s) {
  const std::string str(s);
  core::Gid g{};
  in_addr a4{};
  if (inet_pton(AF_INET, str.c_str(), &a4) == 1) {
    g[10] = g[11] = 0xff;
    std::memcpy(g.data() + 12, &a4, 4);
    return g;
  }
  if (inet_pton(AF_INET6, str.c_str(), g.data()) == 1) return g;
  return absl::InvalidArgumentError(absl::StrCat("bad IP address '", s, "'"));
}

std::string FormatGid(const core::Gid& g) {
  std::string out;
  for (int i = 0; i < 16; i += 2) {
    absl::StrAppendFormat(&out, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
  }
  return out;
}

bool IsValidDeviceName(absl::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

std::string NetnsRunDir() {
  struct stat self{}, init{};
  if (::stat("/proc/self/ns/net", &self) != 0) return "/run/droce";
  // A namespace `ip netns add NAME` made is bind-mounted at /run/netns/NAME.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    struct stat st{};
    if (::stat(e.path().c_str(), &st) == 0 && st.st_dev == self.st_dev && st.st_ino == self.st_ino) {
      const std::string name = e.path().filename().string();
      if (IsValidDeviceName(name)) return "/run/droce/netns/" + name;
    }
  }
  // Another one is told from the host's (PID 1's) by its inode; where PID 1's
  // cannot be read (a container's root), it counts as the host's.
  if (::stat("/proc/1/ns/net", &init) == 0 && (init.st_dev != self.st_dev || init.st_ino != self.st_ino)) {
    return absl::StrCat("/run/droce/netns/ino-", self.st_ino);
  }
  return "/run/droce";
}

std::string DefaultRunDir() {
  const char* env = std::getenv("DROCE_RUN_DIR");
  return env != nullptr && *env != 0 ? env : NetnsRunDir();
}

absl::StatusOr<DeviceFile> ParseDeviceFile(absl::string_view text) {
  DeviceFile f;
  f.dev.broadcast_unresolved = true;
  // A verbs device is a process whose poll loop shares the host's cores: an
  // ACK can be late by a scheduling quantum, so selective repeat's measured
  // RTO (and tail-loss probe) never go below 200 us here (the library's 16 us
  // floor fits a poll loop that owns its core; doc/loss-experiment.md).
  f.dev.sr_rto_min_ns = 200'000;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat("line %d: expected key=value", line_no));
    }
    const absl::string_view key = absl::StripAsciiWhitespace(line.substr(0, eq));
    const absl::string_view v = absl::StripAsciiWhitespace(line.substr(eq + 1));
    auto fail = [&](const absl::Status& s) {
      return absl::InvalidArgumentError(absl::StrFormat("line %d: %s", line_no, s.message()));
    };
    if (key == "name") {
      if (!IsValidDeviceName(v)) return fail(absl::InvalidArgumentError(absl::StrCat("bad device name '", v, "'")));
      f.name = std::string(v);
    } else if (key == "vdev") {
      f.vdev = std::string(v);
    } else if (key == "netdev") {
      f.netdev = std::string(v);
    } else if (key == "mac") {
      auto m = ParseMac(v);
      if (!m.ok()) return fail(m.status());
      f.dev.mac = *m;
    } else if (key == "ip") {
      auto g = ParseIpAsGid(v);
      if (!g.ok()) return fail(g.status());
      if (wire::IsIpv4MappedGid(*g)) {
        f.dev.ipv4 = (uint32_t{(*g)[12]} << 24) | ((*g)[13] << 16) | ((*g)[14] << 8) | (*g)[15];
      } else {
        f.dev.has_ipv6_global = true;
        f.dev.ipv6_global = *g;
      }
    } else if (key == "neighbor") {
      std::vector<absl::string_view> parts = absl::StrSplit(v, absl::ByAnyChar(" ,"), absl::SkipEmpty());
      if (parts.size() != 2) return fail(absl::InvalidArgumentError("neighbor: expected 'IP MAC'"));
      auto g = ParseIpAsGid(parts[0]);
      if (!g.ok()) return fail(g.status());
      auto m = ParseMac(parts[1]);
      if (!m.ok()) return fail(m.status());
      f.neighbors.emplace_back(*g, *m);
    } else if (key == "mtu") {
      auto x = ParseU32(key, v, 256, 4096);
      if (!x.ok()) return fail(x.status());
      if ((*x & (*x - 1)) != 0) return fail(absl::InvalidArgumentError("mtu: not a power of two (256..4096)"));
      f.mtu = *x;
    } else if (key == "eal_memory_mb") {
      auto x = ParseU32(key, v, 64, 1 << 20);
      if (!x.ok()) return fail(x.status());
      f.eal_memory_mb = *x;
    } else if (key == "link_wait_ms") {
      auto x = ParseU32(key, v, 0, 600000);
      if (!x.ok()) return fail(x.status());
      f.link_wait_ms = *x;
    } else if (key == "eal_args") {
      f.eal_args = absl::StrSplit(v, ' ', absl::SkipEmpty());
    } else if (key == "dscp") {
      auto x = ParseU32(key, v, 0, 63);
      if (!x.ok()) return fail(x.status());
      f.dev.dscp = static_cast<uint8_t>(*x);
    } else if (key == "ecn") {
      auto x = ParseU32(key, v, 0, 2);  // 0 Not-ECT, 1 ECT(1), 2 ECT(0)
      if (!x.ok()) return fail(x.status());
      f.dev.ecn = static_cast<uint8_t>(*x);
    } else if (key == "vlan") {
      auto x = ParseU32(key, v, 0, 4095);
      if (!x.ok()) return fail(x.status());
      f.dev.vlan = *x != 0;
      f.dev.vlan_tci = static_cast<uint16_t>((f.dev.vlan_tci & 0xf000) | *x);
    } else if (key == "pcp") {
      auto x = ParseU32(key, v, 0, 7);
      if (!x.ok()) return fail(x.status());
      f.dev.vlan_tci = static_cast<uint16_t>((f.dev.vlan_tci & 0x0fff) | (*x << 13));
    } else if (key == "max_qp") {
      auto x = ParseU32(key, v, 1, 1 << 20);
      if (!x.ok()) return fail(x.status());
      f.dev.max_qp = *x;
    } else if (key == "cnp") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.dev.cnp_enabled = *x;
    } else if (key == "min_time_between_cnps_us") {
      auto x = ParseU32(key, v, 0, 1000000);
      if (!x.ok()) return fail(x.status());
      f.dev.min_time_between_cnps_ns = uint64_t{*x} * 1000;
      f.cnp_interval_set = true;
    } else if (key == "cnp_dscp") {
      auto x = ParseU32(key, v, 0, 63);
      if (!x.ok()) return fail(x.status());
      f.dev.cnp_dscp = static_cast<uint8_t>(*x);
    } else if (key == "lid_peer") {
      auto g = ParseIpAsGid(v);
      if (!g.ok()) return fail(g.status());
      f.has_lid_peer = true;
      f.lid_peer = *g;
    } else if (key == "dcqcn") {
      if (v != "off" && v != "paper" && v != "mlx5") {
        return fail(absl::InvalidArgumentError(absl::StrCat("dcqcn: expected off, paper or mlx5, got '", v, "'")));
      }
      f.dcqcn = std::string(v);
    } else if (key == "dcqcn_line_rate_gbps") {
      auto x = ParseU32(key, v, 1, 1000);
      if (!x.ok()) return fail(x.status());
      f.dcqcn_line_rate_gbps = *x;
    } else if (key == "cc") {
      if (v != "none" && cc::FindAlgorithm(std::string_view(v.data(), v.size())) == nullptr) {
        return fail(absl::InvalidArgumentError(absl::StrCat("cc: expected one of ", cc::AlgorithmNames(), ", got '", v, "'")));
      }
      f.cc = std::string(v);
    } else if (key == "cc_params") {
      f.cc_params = std::string(v);
    } else if (key == "cc_line_rate_gbps") {
      auto x = ParseU32(key, v, 1, 1000);
      if (!x.ok()) return fail(x.status());
      f.cc_line_rate_gbps = *x;
    } else if (key == "selective_repeat") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.dev.selective_repeat = *x;
    } else if (key == "sr_max_inflight_packets") {
      auto x = ParseU32(key, v, 1, transport::kSrWindow - 1);
      if (!x.ok()) return fail(x.status());
      f.dev.sr_max_inflight_packets = *x;
    } else if (key == "sr_rto_low_us") {
      auto x = ParseU32(key, v, 1, 10'000'000);
      if (!x.ok()) return fail(x.status());
      f.dev.sr_rto_low_ns = uint64_t{*x} * 1000;
    } else if (key == "sr_rto_min_us") {
      auto x = ParseU32(key, v, 1, 10'000'000);
      if (!x.ok()) return fail(x.status());
      f.dev.sr_rto_min_ns = uint64_t{*x} * 1000;
    } else if (key == "unsignaled_ack_every") {
      auto x = ParseU32(key, v, 1, 4096);
      if (!x.ok()) return fail(x.status());
      f.dev.unsignaled_ack_every = *x;
    } else if (key == "poll_ack_hold") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.poll_ack_hold = *x;
    } else if (key == "empty_poll_skip") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.empty_poll_skip = *x;
    } else if (key == "doorbell_batch") {
      auto x = ParseU32(key, v, 1, 256);
      if (!x.ok()) return fail(x.status());
      f.doorbell_batch = *x;
    } else if (key == "ack_solicit_us") {
      auto x = ParseU32(key, v, 1, 10'000'000);
      if (!x.ok()) return fail(x.status());
      f.dev.ack_solicit_ns = uint64_t{*x} * 1000;
    } else if (key == "min_ack_timeout") {
      auto x = ParseU32(key, v, 0, 31);
      if (!x.ok()) return fail(x.status());
      f.dev.min_ack_timeout = static_cast<uint8_t>(*x);
    } else if (key == "sr_tlp") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.dev.sr_tlp = *x;
    } else if (key == "sr_rto_high_us") {
      auto x = ParseU32(key, v, 1, 10'000'000);
      if (!x.ok()) return fail(x.status());
      f.dev.sr_rto_high_ns = uint64_t{*x} * 1000;
    } else if (key == "broadcast_unresolved") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.dev.broadcast_unresolved = *x;
    } else if (key == "fabric") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.fabric = *x;
    } else if (key == "netdev_bound") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.netdev_bound = *x;
    } else if (key == "netdev_steering") {
      if (v != "auto" && v != "udp" && v != "xdp" && v != "af_packet") {
        return fail(absl::InvalidArgumentError("netdev_steering: auto, udp, xdp or af_packet"));
      }
      f.netdev_steering = std::string(v);
    } else if (key == "lid") {
      auto x = ParseU32(key, v, 1, 0xBFFF);  // unicast LIDs
      if (!x.ok()) return fail(x.status());
      f.lid = static_cast<uint16_t>(*x);
    } else if (key == "fabric_dir") {
      if (v.empty() || v[0] != '/') return fail(absl::InvalidArgumentError("fabric_dir: not an absolute path"));
      f.fabric_dir = std::string(v);
    } else if (key == "progress_wakeup") {
      auto x = ParseOnOff(key, v);
      if (!x.ok()) return fail(x.status());
      f.progress.wakeup = *x;
    } else if (key == "progress_sched") {
      if (v != "fifo" && v != "normal" && v != "auto") {
        return fail(absl::InvalidArgumentError("progress_sched: normal, fifo or auto"));
      }
      f.progress.sched_fifo = v == "fifo";
      f.progress.sched_auto = v == "auto";
    } else if (key == "progress_pm_qos_us") {
      if (v == "off") {
        f.progress.pm_qos_us = -1;
      } else {
        auto x = ParseU32(key, v, 0, 2000000000);
        if (!x.ok()) return fail(x.status());
        f.progress.pm_qos_us = static_cast<int32_t>(*x);
      }
    } else if (key == "progress_nice") {
      int32_t x = 0;
      if (!absl::SimpleAtoi(v, &x) || x < -20 || x > 19) {
        return fail(absl::InvalidArgumentError("progress_nice: an integer from -20 to 19"));
      }
      f.progress.nice = x;
    } else if (key == "progress_rt_priority") {
      auto x = ParseU32(key, v, 1, 99);
      if (!x.ok()) return fail(x.status());
      f.progress.rt_priority = *x;
    } else if (key == "progress_spins" || key == "progress_hot_us" || key == "progress_hot_sleep_us" ||
               key == "progress_max_sleep_us" || key == "progress_app_active_us" ||
               key == "progress_app_active_max_us" || key == "event_busy_poll_us" || key == "progress_slice_us" ||
               key == "progress_auto_drive_us") {
      auto x = ParseU32(key, v, 0, 100000000);
      if (!x.ok()) return fail(x.status());
      if (key == "progress_spins") f.progress.spins = *x;
      if (key == "progress_hot_us") f.progress.hot_us = *x;
      if (key == "progress_hot_sleep_us") f.progress.hot_sleep_us = *x;
      if (key == "progress_max_sleep_us") f.progress.max_sleep_us = *x;
      if (key == "progress_app_active_us") f.progress.app_active_us = *x;
      if (key == "progress_app_active_max_us") f.progress.app_active_max_us = *x;
      if (key == "event_busy_poll_us") f.progress.event_busy_poll_us = *x;
      if (key == "progress_slice_us") f.progress.slice_us = *x;
      if (key == "progress_auto_drive_us") f.progress.auto_drive_us = *x;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat("line %d: unknown key '%s'", line_no, key));
    }
  }
  if (f.dcqcn != "off") {
    const uint64_t line = static_cast<uint64_t>(f.dcqcn_line_rate_gbps * 1e9);
    f.dev.dcqcn = true;
    f.dev.dcqcn_params = f.dcqcn == "paper" ? cc::PaperProfile(line) : cc::Mlx5Profile(line);
    if (!f.cnp_interval_set) {
      f.dev.min_time_between_cnps_ns = uint64_t{f.dev.dcqcn_params.min_time_between_cnps_us} * 1000;
    }
  }
  if (f.dcqcn != "off" && f.cc != "none") {
    return absl::InvalidArgumentError("dcqcn= and cc= both set: use cc=dcqcn (cc_params for the knobs) or dcqcn=paper|mlx5");
  }
  if (!f.cc_params.empty() && f.cc == "none") return absl::InvalidArgumentError("cc_params without cc=");
  {
    auto c = cc::ParseConfig(f.cc, f.cc_params, static_cast<uint64_t>(f.cc_line_rate_gbps * 1e9));
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("cc_params: ", c.status().message()));
    f.dev.cc = *c;
    f.dev.cc_line_rate_bps = static_cast<uint64_t>(f.cc_line_rate_gbps * 1e9);
    double cnp_us = 0;
    if (f.cc == "dcqcn" && !f.cnp_interval_set && cc::GetParam(f.dev.cc, "min_time_between_cnps_us", &cnp_us)) {
      f.dev.min_time_between_cnps_ns = static_cast<uint64_t>(cnp_us) * 1000;
    }
  }
  if (f.name.empty()) return absl::InvalidArgumentError("no device name");
  if (f.fabric && f.fabric_dir.empty()) return absl::InvalidArgumentError("fabric=on needs fabric_dir");
  if (f.fabric && !f.vdev.empty()) return absl::InvalidArgumentError("a fabric device has no vdev of its own");
  if (f.lid != 0 && !f.fabric) return absl::InvalidArgumentError("lid: only a fabric device has one (lid_peer on a wire)");
  if (!f.fabric && f.vdev.empty()) return absl::InvalidArgumentError("no vdev (dataplane port)");
  if (f.netdev_bound && !f.fabric) return absl::InvalidArgumentError("netdev_bound=on needs fabric=on (droced binds it)");
  if (f.netdev_bound && (f.dev.ipv4 != 0 || f.dev.has_ipv6_global)) {
    return absl::InvalidArgumentError("a netdev-bound device's addresses are its interface's (no ip)");
  }
  if (f.dev.ipv4 == 0 && !f.dev.has_ipv6_global && !f.netdev_bound) return absl::InvalidArgumentError("no IP address");
  return f;
}

std::string FormatDeviceFile(const DeviceFile& f) {
  std::string out = absl::StrCat("# droce device, written by droce-ctl\nname=", f.name, "\nvdev=", f.vdev,
                                 "\nnetdev=", f.netdev, "\nmac=", FormatMac(f.dev.mac), "\n");
  if (f.dev.ipv4 != 0) {
    absl::StrAppendFormat(&out, "ip=%u.%u.%u.%u\n", f.dev.ipv4 >> 24, (f.dev.ipv4 >> 16) & 255,
                          (f.dev.ipv4 >> 8) & 255, f.dev.ipv4 & 255);
  }
  if (f.dev.has_ipv6_global) absl::StrAppend(&out, "ip=", wire::GidAddressText(f.dev.ipv6_global), "\n");
  for (const auto& [g, m] : f.neighbors) absl::StrAppend(&out, "neighbor=", wire::GidAddressText(g), " ", FormatMac(m), "\n");
  absl::StrAppendFormat(&out, "mtu=%u\neal_memory_mb=%u\nlink_wait_ms=%u\n", f.mtu, f.eal_memory_mb,
                        f.link_wait_ms);
  if (!f.eal_args.empty()) absl::StrAppend(&out, "eal_args=", absl::StrJoin(f.eal_args, " "), "\n");
  absl::StrAppendFormat(&out, "dscp=%u\necn=%u\n", f.dev.dscp, f.dev.ecn);
  if (f.dev.vlan) absl::StrAppendFormat(&out, "vlan=%u\npcp=%u\n", f.dev.vlan_tci & 0xfff, f.dev.vlan_tci >> 13);
  absl::StrAppendFormat(&out, "max_qp=%u\ncnp=%s\ncnp_dscp=%u\n", f.dev.max_qp, f.dev.cnp_enabled ? "on" : "off",
                        f.dev.cnp_dscp);
  if (f.cnp_interval_set) {
    absl::StrAppendFormat(&out, "min_time_between_cnps_us=%u\n", f.dev.min_time_between_cnps_ns / 1000);
  }
  absl::StrAppendFormat(&out, "broadcast_unresolved=%s\n", f.dev.broadcast_unresolved ? "on" : "off");
  absl::StrAppendFormat(&out, "selective_repeat=%s\nsr_max_inflight_packets=%u\nsr_rto_low_us=%u\nsr_rto_high_us=%u\n",
                        f.dev.selective_repeat ? "on" : "off", f.dev.sr_max_inflight_packets,
                        f.dev.sr_rto_low_ns / 1000, f.dev.sr_rto_high_ns / 1000);
  absl::StrAppendFormat(&out, "sr_rto_min_us=%u\nsr_tlp=%s\n", f.dev.sr_rto_min_ns / 1000,
                        f.dev.sr_tlp ? "on" : "off");
  absl::StrAppendFormat(&out, "unsignaled_ack_every=%u\nack_solicit_us=%u\nmin_ack_timeout=%u\n",
                        f.dev.unsignaled_ack_every, f.dev.ack_solicit_ns / 1000, f.dev.min_ack_timeout);
  absl::StrAppendFormat(&out, "doorbell_batch=%u\npoll_ack_hold=%s\nempty_poll_skip=%s\n", f.doorbell_batch,
                        f.poll_ack_hold ? "on" : "off", f.empty_poll_skip ? "on" : "off");
  absl::StrAppendFormat(&out, "dcqcn=%s\ndcqcn_line_rate_gbps=%.0f\n", f.dcqcn, f.dcqcn_line_rate_gbps);
  absl::StrAppendFormat(&out, "cc=%s\ncc_line_rate_gbps=%.0f\n", f.cc, f.cc_line_rate_gbps);
  if (!f.cc_params.empty()) absl::StrAppend(&out, "cc_params=", f.cc_params, "\n");
  if (f.has_lid_peer) absl::StrAppend(&out, "lid_peer=", wire::GidAddressText(f.lid_peer), "\n");
  if (f.fabric) absl::StrAppend(&out, "fabric=on\nfabric_dir=", f.fabric_dir, "\n");
  if (f.netdev_bound) absl::StrAppend(&out, "netdev_bound=on\nnetdev_steering=", f.netdev_steering, "\n");
  if (f.lid != 0) absl::StrAppend(&out, "lid=", f.lid, "\n");
  absl::StrAppendFormat(&out, "progress_spins=%u\nprogress_hot_us=%u\nprogress_hot_sleep_us=%u\n"
                        "progress_max_sleep_us=%u\nprogress_app_active_us=%u\nprogress_app_active_max_us=%u\n"
                        "progress_wakeup=%s\n"
                        "event_busy_poll_us=%u\nprogress_slice_us=%u\nprogress_sched=%s\n"
                        "progress_rt_priority=%u\nprogress_nice=%d\nprogress_auto_drive_us=%u\n",
                        f.progress.spins, f.progress.hot_us, f.progress.hot_sleep_us, f.progress.max_sleep_us,
                        f.progress.app_active_us, f.progress.app_active_max_us, f.progress.wakeup ? "on" : "off", f.progress.event_busy_poll_us,
                        f.progress.slice_us, f.progress.sched_fifo   ? "fifo"
                        : f.progress.sched_auto ? "auto"
                                                : "normal",
                        f.progress.rt_priority,
                        f.progress.nice, f.progress.auto_drive_us);
  absl::StrAppend(&out, "progress_pm_qos_us=",
                  f.progress.pm_qos_us < 0 ? std::string("off") : absl::StrCat(f.progress.pm_qos_us), "\n");
  return out;
}

absl::Status WriteDeviceTree(const std::string& run_dir, const std::string& dev_dir, const DeviceFile& f) {
  if (!IsValidDeviceName(f.name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", f.name, "'"));
  const fs::path sys = SysfsRoot(run_dir);
  const fs::path verbs_class = sys / "class/infiniband_verbs";
  const fs::path uverbs = verbs_class / UverbsName(run_dir, f.name);
  const fs::path ibdev = sys / "class/infiniband" / f.name;
  if (fs::exists(ibdev)) return absl::AlreadyExistsError(absl::StrCat("device ", f.name, " already exists"));

  const std::vector<core::Gid> gids = core::GidTable(f.dev);

  std::vector<std::pair<fs::path, std::string>> files = {
      {verbs_class / "abi_version", "6\n"},
      {uverbs / "ibdev", f.name + "\n"},
      {uverbs / "dev", "1:7\n"},
      {uverbs / "abi_version", "1\n"},
      {ibdev / "node_type", "1: CA\n"},
      {ibdev / "node_guid", NodeGuid(f.dev.mac) + "\n"},
      {ibdev / "sys_image_guid", NodeGuid(f.dev.mac) + "\n"},
      {ibdev / "fw_ver", DROCE_VERSION_STRING "\n"},
      {ibdev / "hca_type", "droce\n"},
      {ibdev / "node_desc", absl::StrCat("droce ", f.name, "\n")},
      {ibdev / "device/modalias", absl::StrCat("droce:", f.name, "\n")},
      {ibdev / kConfigFileName, FormatDeviceFile(f)},
      {ibdev / "ports/1/state", "4: ACTIVE\n"},
      {ibdev / "ports/1/phys_state", "5: LinkUp\n"},
      {ibdev / "ports/1/link_layer", "Ethernet\n"},
      {ibdev / "ports/1/rate", "100 Gb/sec (4X EDR)\n"},
      {ibdev / "ports/1/lid", "0x0\n"},
      {ibdev / "ports/1/sm_lid", "0x0\n"},
      {ibdev / "ports/1/lid_mask_count", "0\n"},
      {ibdev / "ports/1/sm_sl", "0\n"},
      {ibdev / "ports/1/cap_mask", "0x04010000\n"},
      {ibdev / "ports/1/pkeys/0", "0xffff\n"},
  };
  // The port's GID table has room for kGidTableLen entries, as a kernel
  // RoCE device's has for more addresses: unused ones read as the zero GID
  // (libibverbs then answers ENODATA for them and skips them in tables).
  for (size_t i = 0; i < kGidTableLen; ++i) {
    const std::string idx = std::to_string(i);
    const bool used = i < gids.size();
    files.push_back({ibdev / "ports/1/gids" / idx, FormatGid(used ? gids[i] : core::Gid{}) + "\n"});
    files.push_back({ibdev / "ports/1/gid_attrs/types" / idx, "RoCE v2\n"});
    if (used) files.push_back({ibdev / "ports/1/gid_attrs/ndevs" / idx, f.netdev + "\n"});
  }
  for (const auto& [p, content] : files) {
    absl::Status s = WriteFile(p, content);
    if (!s.ok()) return s;
  }
  std::error_code ec;
  fs::create_directories(dev_dir, ec);
  const std::string node = dev_dir + "/" + UverbsName(run_dir, f.name);
  ::unlink(node.c_str());
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot create %s: %s (run droce-ctl as root)", node, std::strerror(errno)));
  }
  ::chmod(node.c_str(), 0666);  // as udev makes uverbs nodes: any user may open them
  return absl::OkStatus();
}

absl::Status WritePortState(const std::string& run_dir, const std::string& name, const std::string& netdev,
                            const std::vector<core::Gid>& gids, uint32_t valid_mask, bool active) {
  if (!IsValidDeviceName(name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", name, "'"));
  const fs::path port = fs::path(SysfsRoot(run_dir)) / "class/infiniband" / name / "ports/1";
  if (!fs::exists(port)) return absl::NotFoundError(absl::StrCat("no device ", name));
  auto replace = [](const fs::path& p, const std::string& content) {
    const fs::path tmp = p.string() + ".new";
    absl::Status s = WriteFile(tmp, content);
    std::error_code ec;
    if (s.ok()) fs::rename(tmp, p, ec);
    if (s.ok() && ec) s = absl::UnavailableError(absl::StrCat("cannot replace ", p.string(), ": ", ec.message()));
    return s;
  };
  for (size_t i = 0; i < kGidTableLen; ++i) {
    const std::string idx = std::to_string(i);
    const bool used = i < gids.size() && (valid_mask >> i) & 1;
    absl::Status s = replace(port / "gids" / idx, FormatGid(used ? gids[i] : core::Gid{}) + "\n");
    if (s.ok()) s = replace(port / "gid_attrs/types" / idx, "RoCE v2\n");
    std::error_code ec;
    if (s.ok() && used) s = replace(port / "gid_attrs/ndevs" / idx, netdev + "\n");
    if (!used) fs::remove(port / "gid_attrs/ndevs" / idx, ec);
    if (!s.ok()) return s;
  }
  absl::Status s = replace(port / "state", active ? "4: ACTIVE\n" : "1: DOWN\n");
  if (s.ok()) s = replace(port / "phys_state", active ? "5: LinkUp\n" : "3: Disabled\n");
  return s;
}

absl::Status RemoveDeviceTree(const std::string& run_dir, const std::string& dev_dir, const std::string& name) {
  if (!IsValidDeviceName(name)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", name, "'"));
  const fs::path sys = SysfsRoot(run_dir);
  const fs::path ibdev = sys / "class/infiniband" / name;
  if (!fs::exists(ibdev)) return absl::NotFoundError(absl::StrCat("no device ", name));
  std::error_code ec;
  fs::remove_all(ibdev, ec);
  fs::remove_all(sys / "class/infiniband_verbs" / UverbsName(run_dir, name), ec);
  ::unlink((dev_dir + "/" + UverbsName(run_dir, name)).c_str());
  return absl::OkStatus();
}

std::vector<std::string> ListDevices(const std::string& run_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(SysfsRoot(run_dir)) / "class/infiniband", ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<DeviceFile> ReadDevice(const std::string& run_dir, const std::string& name) {
  const fs::path p = fs::path(SysfsRoot(run_dir)) / "class/infiniband" / name / kConfigFileName;
  std::ifstream in(p);
  if (!in) return absl::NotFoundError(absl::StrCat("no device ", name, " (", p.string(), ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<DeviceFile> f = ParseDeviceFile(ss.str());
  if (!f.ok()) return absl::InvalidArgumentError(absl::StrCat(p.string(), ": ", f.status().message()));
  return f;
}

}  // namespace droce::verbs
