#include "drivers/verbs/device_settings.h"

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cc/congestion_control.h"
#include "transport/sr/state.h"
#include "wire/gid.h"

namespace droce::verbs {
namespace {

using Values = std::vector<std::string>;

absl::Status Invalid(absl::string_view key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": ", what));
}

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

const char* OnOff(bool b) { return b ? "on" : "off"; }

std::string Ipv4Text(uint32_t a) {
  return absl::StrFormat("%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

// Field accessors are generic lambdas `[](auto& f) -> auto& { return f.x; }`:
// one for parsing (DeviceFile&) and formatting (const DeviceFile&).

// A number lo..hi in the file, stored times `scale` (microseconds kept as
// nanoseconds: 1000).
template <typename Access>
DeviceSetting Number(const char* key, uint32_t lo, uint32_t hi, uint64_t scale, Access field, const char* help) {
  return {key,
          [=](absl::string_view v, DeviceFile& f) -> absl::Status {
            absl::StatusOr<uint32_t> x = ParseU32(key, v, lo, hi);
            if (!x.ok()) return x.status();
            using T = std::remove_reference_t<decltype(field(f))>;
            field(f) = static_cast<T>(uint64_t{*x} * scale);
            return absl::OkStatus();
          },
          [=](const DeviceFile& f) { return Values{absl::StrCat(static_cast<uint64_t>(field(f) / scale))}; },
          "", help};
}

template <typename Access>
DeviceSetting Switch(const char* key, Access field, const char* help) {
  return {key,
          [=](absl::string_view v, DeviceFile& f) -> absl::Status {
            absl::StatusOr<bool> x = ParseOnOff(key, v);
            if (!x.ok()) return x.status();
            field(f) = *x;
            return absl::OkStatus();
          },
          [=](const DeviceFile& f) { return Values{OnOff(field(f))}; }, "", help};
}

// One of a few words, kept as text.
template <typename Access>
DeviceSetting Choice(const char* key, std::initializer_list<const char*> choices, Access field, const char* help) {
  std::vector<std::string> words(choices.begin(), choices.end());
  return {key,
          [=](absl::string_view v, DeviceFile& f) -> absl::Status {
            for (const std::string& w : words) {
              if (v == w) {
                field(f) = w;
                return absl::OkStatus();
              }
            }
            return Invalid(key, absl::StrCat("expected one of ", absl::StrJoin(words, ", "), ", got '", v, "'"));
          },
          [=](const DeviceFile& f) { return Values{field(f)}; }, "", help};
}

// Any text; left out while empty.
template <typename Access>
DeviceSetting Text(const char* key, Access field, const char* unset, const char* help) {
  return {key,
          [=](absl::string_view v, DeviceFile& f) -> absl::Status {
            field(f) = std::string(v);
            return absl::OkStatus();
          },
          [=](const DeviceFile& f) { return field(f).empty() ? Values{} : Values{field(f)}; }, unset, help};
}

std::vector<DeviceSetting> MakeSettings() {
  std::vector<DeviceSetting> t;
  // The device and its port.
  t.push_back({"name",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 if (!IsValidDeviceName(v)) return absl::InvalidArgumentError(absl::StrCat("bad device name '", v, "'"));
                 f.name = std::string(v);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return Values{f.name}; }, "none (required)",
               "the ibdev name (letters, digits, `_` and `-`; at most 32)"});
  t.push_back(Text("vdev", [](auto& f) -> auto& { return f.vdev; }, "none (a fabric device has none)",
                   "the DPDK vdev string of the device's own wire (required unless `fabric`; droce-ctl writes it "
                   "from `type memif`, `type af_packet` or `type vdev`)"));
  t.push_back(Text("netdev", [](auto& f) -> auto& { return f.netdev; }, "",
                   "the interface sysfs `gid_attrs/ndevs` names (it must exist on the host); of a netdev-bound "
                   "device, the interface it is the RoCE function of"));
  t.push_back({"mac",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<core::Mac> m = ParseMac(v);
                 if (!m.ok()) return m.status();
                 f.dev.mac = *m;
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return Values{FormatMac(f.dev.mac)}; }, "",
               "the port's unicast MAC (droce-ctl derives one from the name)"});
  t.push_back({"ip",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<core::Gid> g = ParseIpAsGid(v);
                 if (!g.ok()) return g.status();
                 if (wire::IsIpv4MappedGid(*g)) {
                   f.dev.ipv4 = (uint32_t{(*g)[12]} << 24) | ((*g)[13] << 16) | ((*g)[14] << 8) | (*g)[15];
                 } else {
                   f.dev.has_ipv6_global = true;
                   f.dev.ipv6_global = *g;
                 }
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 Values v;
                 if (f.dev.ipv4 != 0) v.push_back(Ipv4Text(f.dev.ipv4));
                 if (f.dev.has_ipv6_global) v.push_back(wire::GidAddressText(f.dev.ipv6_global));
                 return v;
               },
               "none (required unless `netdev_bound`)",
               "an IPv4 or global IPv6 address of the port (repeat the key for both); each is a GID "
               "beside the link-local one"});
  t.push_back({"neighbor",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 std::vector<absl::string_view> parts = absl::StrSplit(v, absl::ByAnyChar(" ,"), absl::SkipEmpty());
                 if (parts.size() != 2) return absl::InvalidArgumentError("neighbor: expected 'IP MAC'");
                 absl::StatusOr<core::Gid> g = ParseIpAsGid(parts[0]);
                 if (!g.ok()) return g.status();
                 absl::StatusOr<core::Mac> m = ParseMac(parts[1]);
                 if (!m.ok()) return m.status();
                 f.neighbors.emplace_back(*g, *m);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 Values v;
                 for (const auto& [g, m] : f.neighbors) v.push_back(absl::StrCat(wire::GidAddressText(g), " ", FormatMac(m)));
                 return v;
               },
               "none", "a static neighbour entry `IP MAC` (repeatable); others are resolved on the wire"});
  t.push_back({"mtu",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<uint32_t> x = ParseU32("mtu", v, 256, 4096);
                 if (!x.ok()) return x.status();
                 if ((*x & (*x - 1)) != 0) return absl::InvalidArgumentError("mtu: not a power of two (256..4096)");
                 f.mtu = *x;
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return Values{absl::StrCat(f.mtu)}; }, "",
               "the port's active MTU (256, 512, 1024, 2048 or 4096)"});
  {
    // A wire device's only: a fabric device's link to droced is shared-memory
    // rings, and a process whose devices are all on the fabric starts no EAL.
    DeviceSetting eal_memory = Number(
        "eal_memory_mb", 64, 1 << 20, 1, [](auto& f) -> auto& { return f.eal_memory_mb; },
        "memory DPDK's EAL takes at open (`-m`); a wire device's only (a fabric device starts no EAL and refuses "
        "any other value than the default)");
    const auto format_wire = eal_memory.format;
    eal_memory.format = [format_wire](const DeviceFile& f) { return f.fabric ? Values{} : format_wire(f); };
    t.push_back(std::move(eal_memory));
  }
  t.push_back(Number("link_wait_ms", 0, 600000, 1, [](auto& f) -> auto& { return f.link_wait_ms; },
                     "modify_qp to RTR/RTS waits this long for a link that is down"));
  t.push_back({"eal_args",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 f.eal_args = absl::StrSplit(v, ' ', absl::SkipEmpty());
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return f.eal_args.empty() ? Values{} : Values{absl::StrJoin(f.eal_args, " ")}; },
               "none", "extra EAL arguments, separated by spaces; a wire device's only (a fabric device starts no EAL "
               "and refuses them)"});
  // Headers of what the device sends.
  t.push_back(Number("dscp", 0, 63, 1, [](auto& f) -> auto& { return f.dev.dscp; },
                     "data packets' DSCP unless the address vector sets a traffic class"));
  t.push_back(Number("ecn", 0, 2, 1, [](auto& f) -> auto& { return f.dev.ecn; },
                     "data packets' ECN field: 0 Not-ECT, 1 ECT(1), 2 ECT(0)"));
  t.push_back({"vlan",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<uint32_t> x = ParseU32("vlan", v, 0, 4095);
                 if (!x.ok()) return x.status();
                 f.dev.vlan = *x != 0;
                 f.dev.vlan_tci = static_cast<uint16_t>((f.dev.vlan_tci & 0xf000) | *x);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return f.dev.vlan ? Values{absl::StrCat(f.dev.vlan_tci & 0xfff)} : Values{}; },
               "none (untagged)", "the 802.1Q VLAN ID of every frame (0: untagged)"});
  t.push_back({"pcp",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<uint32_t> x = ParseU32("pcp", v, 0, 7);
                 if (!x.ok()) return x.status();
                 f.dev.vlan_tci = static_cast<uint16_t>((f.dev.vlan_tci & 0x0fff) | (*x << 13));
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 return f.dev.vlan || (f.dev.vlan_tci >> 13) != 0 ? Values{absl::StrCat(f.dev.vlan_tci >> 13)} : Values{};
               },
               "0", "the 802.1Q priority of a tagged frame"});
  t.push_back(Number("max_qp", 1, 1 << 20, 1, [](auto& f) -> auto& { return f.dev.max_qp; },
                     "QPs the device offers"));
  // Congestion notification and control.
  t.push_back(Switch("cnp", [](auto& f) -> auto& { return f.dev.cnp_enabled; },
                     "notification point: a CE-marked packet makes its QP send a CNP to the peer"));
  t.push_back({"min_time_between_cnps_us",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<uint32_t> x = ParseU32("min_time_between_cnps_us", v, 0, 1000000);
                 if (!x.ok()) return x.status();
                 f.dev.min_time_between_cnps_ns = uint64_t{*x} * 1000;
                 f.cnp_interval_set = true;
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 return f.cnp_interval_set ? Values{absl::StrCat(f.dev.min_time_between_cnps_ns / 1000)} : Values{};
               },
               "the DCQCN profile's, else 4", "a QP sends at most one CNP per this interval"});
  t.push_back(Number("cnp_dscp", 0, 63, 1, [](auto& f) -> auto& { return f.dev.cnp_dscp; },
                     "the DSCP of the CNPs the device sends"));
  t.push_back(Switch("broadcast_unresolved", [](auto& f) -> auto& { return f.dev.broadcast_unresolved; },
                     "a destination without a neighbour entry gets the broadcast MAC instead of failing "
                     "(point-to-point wires); a netdev-bound device's neighbours are the kernel's"));
  t.push_back({"lid_peer",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<core::Gid> g = ParseIpAsGid(v);
                 if (!g.ok()) return g.status();
                 f.has_lid_peer = true;
                 f.lid_peer = *g;
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return f.has_lid_peer ? Values{wire::GidAddressText(f.lid_peer)} : Values{}; },
               "none (RoCE rules: EINVAL)",
               "the one peer of a point-to-point wire: an address vector without a GRH (qperf's LID "
               "addressing) goes to this IP"});
  t.push_back(Choice("dcqcn", {"off", "paper", "mlx5"}, [](auto& f) -> auto& { return f.dcqcn; },
                     "DCQCN reaction point of every QP with the paper's or mlx5's profile (the older "
                     "spelling of `cc=dcqcn`; the two exclude each other)"));
  t.push_back(Number("dcqcn_line_rate_gbps", 1, 1000, 1, [](auto& f) -> auto& { return f.dcqcn_line_rate_gbps; },
                     "the line rate the `dcqcn` profile is made for"));
  t.push_back({"cc",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 if (v != "none" && cc::FindAlgorithm(std::string_view(v.data(), v.size())) == nullptr) {
                   return Invalid("cc", absl::StrCat("expected one of ", cc::AlgorithmNames(), ", got '", v, "'"));
                 }
                 f.cc = std::string(v);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return Values{f.cc}; }, "",
               "congestion control of every QP (doc/cc.md): `none` or an algorithm of lib/cc (dcqcn, "
               "timely, hpcc, swift) with the paper's parameters at `cc_line_rate_gbps`"});
  t.push_back(Number("cc_line_rate_gbps", 1, 1000, 1, [](auto& f) -> auto& { return f.cc_line_rate_gbps; },
                     "the line rate the algorithm's paper parameters are made for"));
  t.push_back(Text("cc_params", [](auto& f) -> auto& { return f.cc_params; }, "none",
                   "`name=value,...` of the algorithm's parameter table on top of its defaults (needs `cc`)"));
  // The transport.
  t.push_back(Switch("selective_repeat", [](auto& f) -> auto& { return f.dev.selective_repeat; },
                     "every RC QP uses selective repeat without negotiation (both ends must say so; with it "
                     "off, two droce QPs still agree on it through ECE under librdmacm)"));
  t.push_back(Number("sr_max_inflight_packets", 1, transport::kSrWindow - 1, 1,
                     [](auto& f) -> auto& { return f.dev.sr_max_inflight_packets; },
                     "the cap on a selective-repeat QP's PSNs in flight (doc/transport.md \"Selective repeat\")"));
  t.push_back(Number("sr_rto_low_us", 1, 10'000'000, 1000, [](auto& f) -> auto& { return f.dev.sr_rto_low_ns; },
                     "selective repeat's low retransmission timeout (few packets in flight): a ceiling on "
                     "the measured one and its value before a sample"));
  t.push_back(Number("sr_rto_high_us", 1, 10'000'000, 1000, [](auto& f) -> auto& { return f.dev.sr_rto_high_ns; },
                     "selective repeat's high retransmission timeout, likewise (at most the QP's IBTA timeout)"));
  t.push_back(Number("sr_rto_min_us", 1, 10'000'000, 1000, [](auto& f) -> auto& { return f.dev.sr_rto_min_ns; },
                     "the floor under selective repeat's measured timeouts and tail-loss probe (a verbs "
                     "device's poll loop shares the host's cores: an ACK can be late by a scheduling quantum)"));
  t.push_back(Switch("sr_tlp", [](auto& f) -> auto& { return f.dev.sr_tlp; },
                     "selective repeat's tail-loss probe"));
  t.push_back(Number("unsignaled_ack_every", 1, 4096, 1, [](auto& f) -> auto& { return f.dev.unsignaled_ack_every; },
                     "an unsignaled SEND/WRITE asks for an ACK once per this many packets (1: every message, as rxe; "
                     "doc/transport.md \"Requester\")"));
  t.push_back(Number("tx_flush_bytes", 0, 1 << 20, 1, [](auto& f) -> auto& { return f.dev.tx_flush_bytes; },
                     "full frames leave in bursts of this many bytes' worth (0: at 32 frames or the round's end): "
                     "a peer process reads a long message's first frames while the rest are built (a port read by "
                     "system calls, a process's UDP socket, sends whole bursts)"));
  t.push_back(Number("ack_solicit_us", 1, 10'000'000, 1000, [](auto& f) -> auto& { return f.dev.ack_solicit_ns; },
                     "a tail sent without an ACK request is solicited after this long without sending"));
  t.push_back(Number("min_ack_timeout", 0, 31, 1, [](auto& f) -> auto& { return f.dev.min_ack_timeout; },
                     "a floor under every QP's local ACK timeout, as an IBTA exponent (0: none; doc/transport.md "
                     "\"Completer and recovery\")"));
  // The host fabric and netdev binding (doc/droced.md, doc/netdev.md).
  t.push_back(Switch("fabric", [](auto& f) -> auto& { return f.fabric; },
                     "a device of the host fabric: no wire of its own, the program attaches to the droced of `fabric_dir`"));
  t.push_back({"fabric_dir",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 if (v.empty() || v[0] != '/') return absl::InvalidArgumentError("fabric_dir: not an absolute path");
                 f.fabric_dir = std::string(v);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return f.fabric_dir.empty() ? Values{} : Values{f.fabric_dir}; }, "none",
               "the run directory of the fabric device's droced (an absolute path)"});
  t.push_back({"lid",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 absl::StatusOr<uint32_t> x = ParseU32("lid", v, 1, 0xBFFF);  // unicast LIDs
                 if (!x.ok()) return x.status();
                 f.lid = static_cast<uint16_t>(*x);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return f.lid != 0 ? Values{absl::StrCat(f.lid)} : Values{}; }, "none",
               "a fabric device's LID (droce-ctl assigns the smallest unused one); a GRH-less address "
               "vector to it reaches that device"});
  t.push_back(Switch("netdev_bound", [](auto& f) -> auto& { return f.netdev_bound; },
                     "the RoCE function of the host interface `netdev`, which droced binds (needs `fabric`)"));
  t.push_back(Choice("netdev_steering", {"auto", "udp", "xdp", "af_packet"},
                     [](auto& f) -> auto& { return f.netdev_steering; },
                     "how droced takes a netdev-bound device's frames from the interface (auto: the processes' "
                     "UDP sockets, else XDP, else af_packet)"));
  t.push_back(Switch("rx_icrc_trust", [](auto& f) -> auto& { return f.dev.rx_icrc_trusted; },
                     "received frames are not ICRC-checked: only where no frame crosses a wire (a `net_memif` vdev; "
                     "a fabric device, which then does not attach to a droced with an uplink); refused on any other port "
                     "and on a netdev-bound device (doc/rx-checks.md)"));
  t.push_back(Switch("udp_gso", [](auto& f) -> auto& { return f.udp_gso; },
                     "with `netdev_steering` udp: runs of equal-sized IPv6 frames to one peer leave in one "
                     "segmented send (UDP_SEGMENT), and the socket takes coalesced datagrams (UDP_GRO)"));
  t.push_back(Switch("udp_gather", [](auto& f) -> auto& { return f.udp_gather; },
                     "with `netdev_steering` udp: the payload of a SEND or WRITE packet of 1 KiB or more is sent "
                     "from the registered memory where it is (an iovec of the send), not copied into the frame"));
  t.push_back(Switch("direct_lend", [](auto& f) -> auto& { return f.direct_lend; },
                     "a fabric device's frames of 1 KiB or more from another process's direct ring are placed "
                     "straight from the ring's slot, their headers copied first (doc/rx-checks.md \"Lent frames\"); "
                     "off: every frame is copied out of the ring whole before it is read"));
  t.push_back(Switch("direct_icrc_trust", [](auto& f) -> auto& { return f.dev.rx_icrc_trust_lent; },
                     "with `direct_lend`: the frames placed straight from a direct ring's slot (memory only the peer "
                     "process writes, never a wire's frames) are placed without checking their ICRC; frames "
                     "through droced are always checked (doc/rx-checks.md \"Trusted direct rings\")"));
  // The provider's progress and doorbells (doc/verbs.md "Who drives the device").
  t.push_back(Number("doorbell_batch", 1, 256, 1, [](auto& f) -> auto& { return f.doorbell_batch; },
                     "small posts in a tight burst of a program that polls its CQ leave together, up to this "
                     "many (1: every doorbell transmits at once)"));
  t.push_back(Number("doorbell_burst_gap_ns", 0, 1'000'000'000, 1,
                     [](auto& f) -> auto& { return f.doorbell_burst_gap_ns; },
                     "the longest gap between two posts of such a burst; a measurement's knob "
                     "(`tools/bench/verbs/breakdown.sh BATCHED=1`: under callgrind no two posts come within 1 µs)"));
  t.push_back(Switch("memif_direct_tx", [](auto& f) -> auto& { return f.memif_direct_tx; },
                     "a `net_memif` vdev's frames are built in the device's own buffers and copied once, straight "
                     "into the memif ring (`ethdev::MemifTx`, doc/ethdev.md); off: in mbufs that the PMD copies and "
                     "frees"));
  t.push_back(Switch("memif_direct_rx", [](auto& f) -> auto& { return f.memif_direct_rx; },
                     "with `memif_direct_tx`: a `net_memif` vdev's frames are copied once, straight out of the memif "
                     "ring into the device's own buffers (`ethdev::MemifRx`, doc/ethdev.md); off: the PMD copies "
                     "them into mbufs"));
  t.push_back(Switch("poll_ack_hold", [](auto& f) -> auto& { return f.poll_ack_hold; },
                     "a poll round run by `poll_cq` holds a lone ACK for the program's next post (one round at most)"));
  t.push_back(Switch("empty_poll_skip", [](auto& f) -> auto& { return f.empty_poll_skip; },
                     "an empty `poll_cq` of an idle device runs no poll round"));
  t.push_back({"progress_profile",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 std::vector<std::string> names;
                 for (const ProgressProfile& p : ProgressProfiles()) {
                   if (v == p.name) {
                     f.progress = ProgressConfig{};
                     p.apply(f.progress);
                     f.progress_profile = p.name;
                     return absl::OkStatus();
                   }
                   names.push_back(p.name);
                 }
                 return Invalid("progress_profile", absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got '", v, "'"));
               },
               [](const DeviceFile& f) { return Values{f.progress_profile}; }, "",
               "the progress thread's policy as a named profile (\"Progress profiles\"); the `progress_*` "
               "and `event_busy_poll_us` keys after it change single knobs of it"});
  constexpr uint32_t kMaxUs = 100'000'000;
  t.push_back(Number("progress_spins", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.spins; },
                     "empty poll rounds the progress thread spins before it sleeps"));
  t.push_back(Number("progress_hot_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.hot_us; },
                     "after the last packet, sleeps stay `progress_hot_sleep_us` long for this long"));
  t.push_back(Number("progress_hot_sleep_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.hot_sleep_us; },
                     "the short timed sleep of the hot phase (timer slack 1 µs)"));
  t.push_back(Number("progress_max_sleep_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.max_sleep_us; },
                     "the longest idle sleep (doubling from 1 µs after the hot phase); also the timer pace "
                     "of event waits"));
  t.push_back(Number("progress_app_active_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.app_active_us; },
                     "the program called `poll_cq` or posted this recently: the progress thread stands aside"));
  t.push_back(Number("progress_app_active_max_us", 0, kMaxUs, 1,
                     [](auto& f) -> auto& { return f.progress.app_active_max_us; },
                     "a look-back that finds the program still polling doubles the next one's spacing, up to "
                     "this (at or below `progress_app_active_us`: fixed look-backs)"));
  t.push_back(Number("progress_steady_quiet_us", 0, kMaxUs, 1,
                     [](auto& f) -> auto& { return f.progress.steady_quiet_us; },
                     "a program that kept polling through four look-backs in a row, on a device that sends a "
                     "stream, is taken over only after this long without a call, not `progress_app_active_us` "
                     "(its shorter gaps are preemptions; at or below it: the same)"));
  t.push_back(Number("progress_steady_lookback_max_us", 0, kMaxUs, 1,
                     [](auto& f) -> auto& { return f.progress.steady_lookback_max_us; },
                     "such a steady sender's look-backs double their spacing up to this, not "
                     "`progress_app_active_max_us` (at or below it: the same)"));
  t.push_back(Number("progress_shared_cpu_quiet_us", 0, kMaxUs, 1,
                     [](auto& f) -> auto& { return f.progress.shared_cpu_quiet_us; },
                     "a program bound to one CPU with the progress thread (an MPI rank) whose last poll took 8 KiB "
                     "or more of received data is taken over after this long without a call, not "
                     "`progress_app_active_us` (at or below it: the same)"));
  t.push_back(Number("progress_calm_lookbacks", 0, 1000, 1, [](auto& f) -> auto& { return f.progress.calm_lookbacks; },
                     "after this many look-backs in a row found the program polling without a pause, the "
                     "progress thread naps with the kernel's default slice, so its wake-up does not preempt the "
                     "program; the first pause or quiet look-back takes `progress_slice_us` back (0: never)"));
  t.push_back(Switch("progress_wakeup", [](auto& f) -> auto& { return f.progress.wakeup; },
                     "long idle sleeps end when a frame arrives (memif interrupt mode, af_packet poll)"));
  t.push_back(Switch("progress_stream_wait", [](auto& f) -> auto& { return f.progress.stream_wait; },
                     "inside a stream the hot phase waits for the next frame on the wire's arrival "
                     "descriptor, with no timer per wait (with `progress_wakeup`)"));
  t.push_back(Number("event_busy_poll_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.event_busy_poll_us; },
                     "`ibv_get_cq_event` busy-polls the dataplane this long before sleeping on the channel and the wire"));
  t.push_back(Number("event_stream_nap_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.event_stream_nap_us; },
                     "inside a stream on the process's own UDP socket (`steering udp`), `ibv_get_cq_event` "
                     "sleeps this long on the channel alone when a poll finds nothing, instead of busy-polling "
                     "empty receives (0: never)"));
  t.push_back(Number("progress_slice_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.slice_us; },
                     "the scheduler slice the progress thread asks for (`sched_setattr` `sched_runtime`; 0: "
                     "the kernel's)"));
  t.push_back({"progress_sched",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 if (v != "fifo" && v != "normal" && v != "auto") {
                   return absl::InvalidArgumentError("progress_sched: normal, fifo or auto");
                 }
                 f.progress.sched_fifo = v == "fifo";
                 f.progress.sched_auto = v == "auto";
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 return Values{f.progress.sched_fifo ? "fifo" : f.progress.sched_auto ? "auto" : "normal"};
               },
               "",
               "the progress thread's policy: `normal`, `fifo` or `auto` (\"Who drives the device\"); "
               "`fifo` and `auto` need CAP_SYS_NICE, else the thread stays SCHED_OTHER"});
  t.push_back(Number("progress_rt_priority", 1, 99, 1, [](auto& f) -> auto& { return f.progress.rt_priority; },
                     "the SCHED_FIFO priority (low: above every normal thread, below the kernel's own)"));
  t.push_back({"progress_nice",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 int32_t x = 0;
                 if (!absl::SimpleAtoi(v, &x) || x < -20 || x > 19) {
                   return absl::InvalidArgumentError("progress_nice: an integer from -20 to 19");
                 }
                 f.progress.nice = x;
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) { return Values{absl::StrCat(f.progress.nice)}; }, "",
               "the progress thread's nice value (-20..19; 0: the process's own), set with the slice; a "
               "negative one needs CAP_SYS_NICE or RLIMIT_NICE (refused: `DROCE_STATS` says so)"});
  t.push_back(Number("progress_auto_drive_us", 0, kMaxUs, 1, [](auto& f) -> auto& { return f.progress.auto_drive_us; },
                     "under `progress_sched=auto`: the window over which the program's calls are measured "
                     "(3/4 of 8 windows in a row: it drives; under 1/4 of one: it stopped)"));
  t.push_back({"progress_pm_qos_us",
               [](absl::string_view v, DeviceFile& f) -> absl::Status {
                 if (v == "off") {
                   f.progress.pm_qos_us = -1;
                   return absl::OkStatus();
                 }
                 absl::StatusOr<uint32_t> x = ParseU32("progress_pm_qos_us", v, 0, 2000000000);
                 if (!x.ok()) return x.status();
                 f.progress.pm_qos_us = static_cast<int32_t>(*x);
                 return absl::OkStatus();
               },
               [](const DeviceFile& f) {
                 return Values{f.progress.pm_qos_us < 0 ? std::string("off") : absl::StrCat(f.progress.pm_qos_us)};
               },
               "",
               "while the progress thread is hot, hold `/dev/cpu_dma_latency` at this many µs (idle CPUs "
               "stay in shallow states; 0: poll), released when it goes idle; costs idle CPUs spinning; needs root"});
  return t;
}

}  // namespace

const std::vector<ProgressProfile>& ProgressProfiles() {
  static const std::vector<ProgressProfile>* profiles = new std::vector<ProgressProfile>{
      {"balanced",
       "the default: the program's calls drive the device, the thread serves what they leave and takes "
       "SCHED_FIFO (given CAP_SYS_NICE) only while the program spins on memory",
       [](ProgressConfig&) {}},
      {"latency",
       "a host with a core to spare for each open device, for latency (ping-pong, one-sided targets, "
       "passive responders): the thread spins and stays hot ten times longer, holds PM QoS at 0 while hot "
       "(needs root) and event waits busy-poll longer",
       [](ProgressConfig& p) {
         p.spins *= 10;
         p.hot_us *= 10;
         p.pm_qos_us = 0;
         p.event_busy_poll_us *= 4;
       }},
      {"shared-host",
       "more busy threads than cores (CI, MPI jobs with a rank per core, many devices open): the thread "
       "never takes real-time priority, spins and stays hot a tenth as long, sleeps up to twice as long "
       "when idle (a frame still wakes it), and event waits sleep at once",
       [](ProgressConfig& p) {
         p.sched_auto = false;
         p.sched_fifo = false;
         p.spins /= 10;
         p.hot_us /= 10;
         p.max_sleep_us *= 2;
         p.event_busy_poll_us = 0;
       }},
  };
  return *profiles;
}

std::string ProgressProfilesMarkdown() {
  // The knobs some profile changes: formatted under each profile, compared
  // with the default file's.
  std::vector<std::vector<std::string>> columns;  // per profile: every setting's values
  for (const ProgressProfile& p : ProgressProfiles()) {
    DeviceFile f;
    p.apply(f.progress);
    std::vector<std::string> col;
    for (const DeviceSetting& s : DeviceSettings()) col.push_back(absl::StrJoin(s.format(f), " "));
    columns.push_back(std::move(col));
  }
  std::string out = "| profile | what it is for |\n| --- | --- |\n";
  for (const ProgressProfile& p : ProgressProfiles()) absl::StrAppend(&out, "| `", p.name, "` | ", p.use, " |\n");
  absl::StrAppend(&out, "\n| key");
  for (const ProgressProfile& p : ProgressProfiles()) absl::StrAppend(&out, " | `", p.name, "`");
  absl::StrAppend(&out, " |\n| ---");
  for (size_t i = 0; i < ProgressProfiles().size(); ++i) absl::StrAppend(&out, " | ---");
  absl::StrAppend(&out, " |\n");
  const std::vector<DeviceSetting>& settings = DeviceSettings();
  for (size_t k = 0; k < settings.size(); ++k) {
    bool differs = false;
    for (const auto& col : columns) differs |= col[k] != columns[0][k];
    if (!differs) continue;
    absl::StrAppend(&out, "| `", settings[k].key, "`");
    for (const auto& col : columns) absl::StrAppend(&out, " | ", col[k]);
    absl::StrAppend(&out, " |\n");
  }
  return out;
}

const std::vector<DeviceSetting>& DeviceSettings() {
  static const std::vector<DeviceSetting>* table = new std::vector<DeviceSetting>(MakeSettings());
  return *table;
}

const DeviceSetting* FindDeviceSetting(absl::string_view key) {
  for (const DeviceSetting& s : DeviceSettings()) {
    if (key == s.key) return &s;
  }
  return nullptr;
}

namespace {
// The key's default as a value of a default DeviceFile; empty when a default
// file leaves the key out (its unset text says what that means).
std::string DefaultValue(const DeviceSetting& s) {
  const std::vector<std::string> v = s.format(DeviceFile{});
  return absl::StrJoin(v, " ");
}
}  // namespace

std::string DeviceSettingDefault(const DeviceSetting& s) {
  const std::string v = DefaultValue(s);
  return v.empty() ? s.unset : v;
}

std::string DeviceSettingsMarkdown() {
  std::string out = "| key | default | what it sets |\n| --- | --- | --- |\n";
  for (const DeviceSetting& s : DeviceSettings()) {
    const std::string v = DefaultValue(s);
    absl::StrAppend(&out, "| `", s.key, "` | ", v.empty() ? std::string(s.unset) : "`" + v + "`", " | ", s.help, " |\n");
  }
  return out;
}

std::string DeviceSettingsText() {
  std::string out;
  for (const DeviceSetting& s : DeviceSettings()) {
    absl::StrAppendFormat(&out, "%-28s default %s\n    %s\n", s.key, DeviceSettingDefault(s), s.help);
  }
  return out;
}

absl::StatusOr<DeviceFile> ParseDeviceFile(absl::string_view text) {
  DeviceFile f;
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
    const DeviceSetting* s = FindDeviceSetting(key);
    if (s == nullptr) return absl::InvalidArgumentError(absl::StrFormat("line %d: unknown key '%s'", line_no, key));
    if (absl::Status st = s->parse(v, f); !st.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("line %d: %s", line_no, st.message()));
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
  if (f.fabric && (f.eal_memory_mb != DeviceFile{}.eal_memory_mb || !f.eal_args.empty())) {
    return absl::InvalidArgumentError(
        "eal_memory_mb/eal_args: a fabric device starts no EAL (its link to droced is shared-memory rings)");
  }
  if (f.lid != 0 && !f.fabric) return absl::InvalidArgumentError("lid: only a fabric device has one (lid_peer on a wire)");
  if (!f.fabric && f.vdev.empty()) return absl::InvalidArgumentError("no vdev (dataplane port)");
  if (f.netdev_bound && !f.fabric) return absl::InvalidArgumentError("netdev_bound=on needs fabric=on (droced binds it)");
  if (f.netdev_bound && (f.dev.ipv4 != 0 || f.dev.has_ipv6_global)) {
    return absl::InvalidArgumentError("a netdev-bound device's addresses are its interface's (no ip)");
  }
  if (f.dev.ipv4 == 0 && !f.dev.has_ipv6_global && !f.netdev_bound) return absl::InvalidArgumentError("no IP address");
  if (f.dev.rx_icrc_trusted && (f.netdev_bound || (!f.fabric && !absl::StartsWith(f.port_name(), "net_memif")))) {
    return absl::InvalidArgumentError(
        "rx_icrc_trust=on only on a shared-memory link (a net_memif vdev or a fabric device): frames from a wire "
        "are always ICRC-checked");
  }
  return f;
}

std::string FormatDeviceFile(const DeviceFile& f) {
  std::string out = "# droce device, written by droce-ctl\n";
  for (const DeviceSetting& s : DeviceSettings()) {
    for (const std::string& v : s.format(f)) absl::StrAppend(&out, s.key, "=", v, "\n");
  }
  return out;
}

}  // namespace droce::verbs
