// droce-testpmd's option table: every option in the usage, defaults, the
// client's swapped defaults, values set, and each kind of bad input refused
// with a message naming the option.
#include "apps/testpmd/options.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "wire/gid.h"

namespace droce::testpmd {
namespace {

const std::vector<std::string> kEngines = {"write_bw", "read_bw", "send_bw", "atomic_bw",
                                           "write_lat", "raw_lat", "raw_stream"};

absl::StatusOr<Options> Parse(const std::string& line) {
  std::vector<std::string> args;
  if (!line.empty()) args = absl::StrSplit(line, ' ');
  return ParseOptions(args, kEngines);
}

std::string Error(const std::string& line) {
  absl::StatusOr<Options> o = Parse(line);
  return o.ok() ? "(accepted)" : std::string(o.status().message());
}

TEST(TestpmdOptions, DefaultsAndTheClientsSwap) {
  const Options server = *Parse("");
  EXPECT_EQ(server.role, "server");
  EXPECT_EQ(server.fwd, "write_bw");
  EXPECT_EQ(server.mtu, 4096u);
  EXPECT_EQ(server.outstanding, 16u);
  EXPECT_EQ(server.peer_qpn_range, 1u);  // as qpn_range
  EXPECT_EQ(server.ip[15], 1);
  const Options client = *Parse("--fwd read_bw --role client");  // --role applies first, wherever it is
  EXPECT_EQ(client.ip[15], 2);
  EXPECT_EQ(client.peer_ip[15], 1);
  EXPECT_EQ(client.mac[5], 2);
  // An address given by the client is its own, not swapped.
  const Options own = *Parse("--ip 10.0.0.7 --role client");
  EXPECT_EQ(own.ip[15], 7);
  EXPECT_TRUE(own.ip_set);
}

TEST(TestpmdOptions, ValuesAreSet) {
  const Options o = *Parse(
      "--mtu 1024 --size 64 --outstanding 32 --qps 4 --iterations 100 -i --dscp 26 --ecn ect1 --pcp 3 "
      "--peer-mac 02:00:00:00:00:09 --ip fd00::1 --peer-ip fd00::2 --cc dcqcn --stats-period 0.5");
  EXPECT_EQ(o.mtu, 1024u);
  EXPECT_EQ(o.size, 64u);
  EXPECT_EQ(o.outstanding, 32u);
  EXPECT_EQ(o.qps, 4u);
  EXPECT_EQ(o.iterations, 100u);
  EXPECT_TRUE(o.duration_set);
  EXPECT_TRUE(o.interactive);
  EXPECT_EQ(o.dscp, 26);
  EXPECT_EQ(o.ecn, wire::kEcnEct1);
  EXPECT_EQ(o.pcp, 3);
  EXPECT_EQ(o.vlan, 0);  // a priority tag
  EXPECT_TRUE(o.peer_mac_static);
  EXPECT_FALSE(wire::IsIpv4MappedGid(o.ip));
  EXPECT_EQ(o.cc, "dcqcn");
  EXPECT_DOUBLE_EQ(o.stats_period, 0.5);
  EXPECT_EQ(Parse("--vlan 100 --pcp 5")->vlan, 100);
  EXPECT_EQ(Parse("--device droce0 --peer-ip 10.0.0.2 --qpn-range 3")->peer_qpn_range, 3u);
  const Options raw = *Parse("--fwd raw_stream --burst 32 --raw-ack --memif-direct");
  EXPECT_EQ(raw.burst, 32u);
  EXPECT_TRUE(raw.raw_ack);
  EXPECT_TRUE(raw.memif_direct);
  EXPECT_EQ(Parse("")->burst, 1u);
  EXPECT_FALSE(Parse("")->raw_ack);
  EXPECT_FALSE(Parse("")->memif_direct);
}

TEST(TestpmdOptions, BadInputIsRefusedWithItsReason) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--fwd nope", "unknown engine 'nope'"},
      {"--mtu 3000", "--mtu must be 256, 512, 1024, 2048 or 4096"},
      {"--mtu 9000", "--mtu must be a number in [256, 4096]"},
      {"--role boss", "--role must be server, client or pair"},
      {"--ip 1.2.3", "bad IPv4 address '1.2.3' for --ip"},
      {"--ip 2001:db8::zz", "bad IPv6 address"},
      {"--ip ff02::1 --peer-ip 2001:db8::2", "--ip must not be a multicast address"},
      {"--peer-ip ::", "is not a usable IPv6 address"},
      {"--ip 2001:db8::1", "--ip and --peer-ip must both be IPv4 or both IPv6"},
      {"--size", "missing value for --size"},
      {"--outstanding 1", "--outstanding must be a number in [2, 4096]"},
      {"--drop-rate 2", "--drop-rate must be a number"},
      {"--qps 4 --fwd send_bw", "--qps > 1 works with write_bw and read_bw"},
      {"--qps 32 --outstanding 16", "--qps must not exceed --outstanding"},
      {"--dcqcn fast", "--dcqcn: expected off, paper, mlx5, got 'fast'"},
      {"--kmin-kb 10 --kmax-kb 5", "--kmax-kb must not be below --kmin-kb"},
      {"--stats-period -1", "--stats-period must be a number"},
      {"--dscp 64", "--dscp must be an integer in [0, 63]"},
      {"--dscp -1", "--dscp must be an integer"},
      {"--dscp 2.5", "--dscp must be an integer"},
      {"--ecn ce", "--ecn: expected not-ect, ect0 or ect1"},
      {"--vlan 0", "--vlan must be an integer in [1, 4094]"},
      {"--vlan 4095", "--vlan must be an integer"},
      {"--pcp 8", "--pcp must be an integer in [0, 7]"},
      {"--vlan", "missing value for --vlan"},
      {"--auto-start", "--auto-start goes with -i"},
      {"--telemetry x", "unexpected argument 'x'"},
      {"--bogus 1", "unknown option --bogus"},
      {"--mac 01:00:00:00:00:01", "--mac: MAC address '01:00:00:00:00:01' is multicast"},
      {"--cc hpcc --dcqcn paper", "--cc and --dcqcn both given"},
      {"--cc nope", "--cc nope:"},
      {"--fwd write_lat --size 4", "write_lat needs --size of at least 8"},
      {"--role pair -i", "--role pair runs one RDMA engine once"},
      {"--device droce0", "--device needs --peer-ip"},
      {"--device droce0 --peer-ip 10.0.0.2 --port net_memif0", "no --port or --mac"},
      {"--device droce0 --peer-ip 10.0.0.2 --role pair", "not with --device"},
      {"--device droce0 --peer-ip 10.0.0.2 --fwd raw_lat", "not on the fabric"},
      {"--qpn-range 2", "go with --device"},
      {"--burst 8", "--burst and --raw-ack go with raw_stream"},
      {"--fwd raw_lat --raw-ack", "--burst and --raw-ack go with raw_stream"},
      {"--fwd raw_stream --burst 33", "--burst"},
      {"--device droce0 --peer-ip 10.0.0.2 --memif-direct", "--memif-direct is for a port of its own"},
      {"--device droce0 --peer-ip 10.0.0.2 --qpn-range 0", "qpn-range must be an integer"},
      {"--device x/y --peer-ip 10.0.0.2", "--device: bad device name 'x/y'"},
      {"--ip 10.0.0.2 --peer-ip 10.0.0.2", "--ip and --peer-ip must differ"},
  };
  for (const auto& [line, want] : cases) {
    const std::string got = Error(line);
    EXPECT_NE(got.find(want), std::string::npos) << "'" << line << "': " << got;
  }
}

TEST(TestpmdOptions, UsageListsEveryOptionOnce) {
  const std::string u = Usage();
  for (const char* name : {"--role", "--port", "--device", "--qpn-range", "--peer-qpn-range", "--fwd", "--ip",
                           "--peer-ip", "--mac", "--peer-mac", "--mtu", "--size", "--outstanding", "--qps",
                           "--duration", "--iterations", "--idle-spins", "--burst", "--raw-ack", "--memif-direct", "--drop-rate", "--seed", "--pcap-out",
                           "--stats-period", "--start-at", "--dscp", "--ecn", "--vlan", "--pcp", "-i, --interactive",
                           "--auto-start", "--telemetry", "--dcqcn", "--cc", "--cc-params", "--line-rate-gbps",
                           "--bottleneck-gbps", "--kmin-kb", "--kmax-kb", "--pmax", "--buffer-kb"}) {
    EXPECT_NE(u.find(std::string("  ") + name + " "), std::string::npos) << name;
  }
  EXPECT_TRUE(WantsHelp({"--mtu", "1024", "-h"}));
  EXPECT_FALSE(WantsHelp({"--mtu", "1024"}));
  // Each usage line fits a terminal.
  for (absl::string_view line : absl::StrSplit(u, '\n')) EXPECT_LE(line.size(), 120u) << line;
}

}  // namespace
}  // namespace droce::testpmd
