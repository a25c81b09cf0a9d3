#include "drivers/verbs/device_config.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "drivers/verbs/device_settings.h"
#include "gtest/gtest.h"

namespace droce::verbs {
namespace {
namespace fs = std::filesystem;

constexpr char kMinimal[] = "name=droce0\nvdev=net_memif_droce0,role=server,socket=/tmp/x.sock\nip=10.0.0.1\n";

TEST(DeviceFile, ParsesMinimalAndDefaults) {
  auto f = ParseDeviceFile(kMinimal);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->name, "droce0");
  EXPECT_EQ(f->port_name(), "net_memif_droce0");
  EXPECT_EQ(f->dev.ipv4, 0x0A000001u);
  EXPECT_EQ(f->mtu, 4096u);
  EXPECT_TRUE(f->dev.broadcast_unresolved);
}

TEST(DeviceFile, RoundTripsEveryField) {
  std::string text = std::string(kMinimal) +
                     "ip=fd00::1\nmac=02:aa:bb:cc:dd:ee\nneighbor=10.0.0.2 02:00:00:00:00:02\nmtu=1024\n"
                     "eal_args=--log-level=debug -l 1\ndscp=26\necn=0\nvlan=100\npcp=3\nmax_qp=64\ncnp=off\n"
                     "min_time_between_cnps_us=50\ncnp_dscp=40\nbroadcast_unresolved=off\nprogress_spins=10\n"
                     "lid_peer=10.0.0.2\ndcqcn=paper\ndcqcn_line_rate_gbps=25\nprogress_hot_us=5\nprogress_hot_sleep_us=7\nprogress_max_sleep_us=200\nprogress_app_active_us=300\nprogress_app_active_max_us=900\nprogress_pm_qos_us=0\nprogress_wakeup=off\nevent_busy_poll_us=30\nprogress_slice_us=250\nprogress_sched=fifo\nprogress_rt_priority=7\nprogress_nice=-7\nnetdev=eth0\n"
                     "selective_repeat=on\nsr_max_inflight_packets=64\nsr_rto_low_us=150\nsr_rto_high_us=700\n"
                     "sr_rto_min_us=40\nsr_tlp=off\nunsignaled_ack_every=1\nack_solicit_us=30\ndoorbell_batch=4\npoll_ack_hold=off\n"
                     "empty_poll_skip=off\nmin_ack_timeout=17\n";
  auto f = ParseDeviceFile(text);
  ASSERT_TRUE(f.ok()) << f.status();
  auto g = ParseDeviceFile(FormatDeviceFile(*f));
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << FormatDeviceFile(*f);
  EXPECT_EQ(FormatDeviceFile(*f), FormatDeviceFile(*g));
  EXPECT_TRUE(g->dev.has_ipv6_global);
  EXPECT_EQ(g->neighbors.size(), 1u);
  EXPECT_EQ(g->mtu, 1024u);
  EXPECT_EQ(g->eal_args.size(), 3u);
  EXPECT_EQ(g->dev.dscp, 26);
  EXPECT_EQ(g->dev.vlan_tci, (3 << 13) | 100);
  EXPECT_FALSE(g->dev.cnp_enabled);
  EXPECT_EQ(g->dev.min_time_between_cnps_ns, 50000u);
  EXPECT_EQ(g->dev.min_ack_timeout, 17);
  // Without the key, a DCQCN profile brings its own CNP interval.
  auto paper = ParseDeviceFile(std::string(kMinimal) + "dcqcn=paper\n");
  ASSERT_TRUE(paper.ok()) << paper.status();
  EXPECT_EQ(paper->dev.min_time_between_cnps_ns, uint64_t{paper->dev.dcqcn_params.min_time_between_cnps_us} * 1000);
  EXPECT_EQ(paper->dev.min_time_between_cnps_ns, 50000u);
  auto again = ParseDeviceFile(FormatDeviceFile(*paper));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->dev.min_time_between_cnps_ns, 50000u);
  EXPECT_EQ(g->progress.app_active_us, 300u);
  EXPECT_EQ(g->progress.app_active_max_us, 900u);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->progress.app_active_max_us, 2000u);
  EXPECT_EQ(g->progress.pm_qos_us, 0);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->progress.pm_qos_us, -1);  // off unless asked
  EXPECT_EQ(ParseDeviceFile(std::string(kMinimal) + "progress_pm_qos_us=50\n")->progress.pm_qos_us, 50);
  EXPECT_EQ(ParseDeviceFile(std::string(kMinimal) + "progress_pm_qos_us=off\n")->progress.pm_qos_us, -1);
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_pm_qos_us=-1\n").ok());
  EXPECT_FALSE(g->progress.wakeup);
  EXPECT_EQ(g->progress.event_busy_poll_us, 30u);
  EXPECT_EQ(g->progress.slice_us, 250u);
  EXPECT_TRUE(g->progress.sched_fifo);
  EXPECT_EQ(g->progress.rt_priority, 7u);
  EXPECT_EQ(g->progress.nice, -7);
  EXPECT_EQ(ParseDeviceFile(std::string(kMinimal) + "progress_nice=19\n")->progress.nice, 19);
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_nice=-21\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_nice=20\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_nice=high\n").ok());
  EXPECT_FALSE(ParseDeviceFile(kMinimal)->progress.sched_fifo);  // auto unless asked
  EXPECT_TRUE(ParseDeviceFile(kMinimal)->progress.sched_auto);
  {
    auto n = ParseDeviceFile(std::string(kMinimal) + "progress_sched=normal\n");
    ASSERT_TRUE(n.ok());
    EXPECT_FALSE(n->progress.sched_auto);
    EXPECT_FALSE(n->progress.sched_fifo);
    auto again = ParseDeviceFile(FormatDeviceFile(*n));  // normal survives a round trip
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(again->progress.sched_auto);
  }
  {
    auto a = ParseDeviceFile(std::string(kMinimal) + "progress_sched=auto\nprogress_auto_drive_us=300\n");
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_TRUE(a->progress.sched_auto);
    EXPECT_FALSE(a->progress.sched_fifo);
    EXPECT_EQ(a->progress.auto_drive_us, 300u);
    auto again = ParseDeviceFile(FormatDeviceFile(*a));  // written back as auto
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->progress.sched_auto);
    EXPECT_EQ(again->progress.auto_drive_us, 300u);
    EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_sched=rt\n").ok());
  }
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_sched=rr\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "progress_rt_priority=0\n").ok());
  EXPECT_EQ(g->netdev, "eth0");
  EXPECT_TRUE(g->dev.dcqcn);
  EXPECT_TRUE(g->has_lid_peer);
  EXPECT_EQ(g->dev.dcqcn_params.line_rate_bps, 25'000'000'000ull);
  EXPECT_TRUE(g->dev.selective_repeat);
  EXPECT_EQ(g->dev.sr_max_inflight_packets, 64u);
  EXPECT_EQ(g->dev.sr_rto_low_ns, 150'000u);
  EXPECT_EQ(g->dev.sr_rto_high_ns, 700'000u);
  EXPECT_EQ(g->dev.sr_rto_min_ns, 40'000u);
  EXPECT_FALSE(g->dev.sr_tlp);
  EXPECT_FALSE(ParseDeviceFile(kMinimal)->dev.selective_repeat);  // off unless asked
  // A verbs device's poll loop shares the host's cores: its RTO floor is 200 us, the probe on.
  EXPECT_EQ(ParseDeviceFile(kMinimal)->dev.sr_rto_min_ns, 200'000u);
  EXPECT_TRUE(ParseDeviceFile(kMinimal)->dev.sr_tlp);
  EXPECT_EQ(g->dev.unsignaled_ack_every, 1u);
  EXPECT_EQ(g->dev.ack_solicit_ns, 30'000u);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->dev.unsignaled_ack_every, 16u);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->dev.ack_solicit_ns, 500'000u);
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "unsignaled_ack_every=0\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "ack_solicit_us=0\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "min_ack_timeout=32\n").ok());
  EXPECT_EQ(g->doorbell_batch, 4u);
  EXPECT_FALSE(g->poll_ack_hold);
  EXPECT_TRUE(ParseDeviceFile(kMinimal)->poll_ack_hold);
  EXPECT_FALSE(g->empty_poll_skip);
  EXPECT_TRUE(ParseDeviceFile(kMinimal)->empty_poll_skip);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->doorbell_batch, 32u);
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "doorbell_batch=0\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "doorbell_batch=257\n").ok());
}

TEST(DeviceFile, RejectsBadInputWithTheLine) {
  const char* bad[] = {
      "name=droce0\nvdev=x\n",                               // no IP
      "vdev=x\nip=10.0.0.1\n",                               // no name
      "name=droce0\nip=10.0.0.1\n",                          // no vdev
      "name=dr oce\nvdev=x\nip=10.0.0.1\n",                  // bad name
      "name=droce0\nvdev=x\nip=10.0.0.300\n",                // bad IP
      "name=droce0\nvdev=x\nip=10.0.0.1\nmtu=1000\n",        // not a power of two
      "name=droce0\nvdev=x\nip=10.0.0.1\nmtu=8192\n",        // too big
      "name=droce0\nvdev=x\nip=10.0.0.1\nmac=01:00:00:00:00:01\n",  // multicast MAC
      "name=droce0\nvdev=x\nip=10.0.0.1\nfrobnicate=1\n",    // unknown key
      "name=droce0\nvdev=x\nip=10.0.0.1\nneighbor=10.0.0.2\n",  // no MAC
      "name=droce0\nvdev=x\nip=10.0.0.1\ncnp=maybe\n",
      "name=droce0\nvdev=x\nip=10.0.0.1\njunk\n",
      "name=droce0\nvdev=x\nip=10.0.0.1\ndcqcn=fast\n",
      "name=droce0\nvdev=x\nip=10.0.0.1\nselective_repeat=yes\n",
      "name=droce0\nvdev=x\nip=10.0.0.1\nsr_max_inflight_packets=1024\n",  // beyond the SR window
  };
  for (const char* text : bad) EXPECT_FALSE(ParseDeviceFile(text).ok()) << text;
  auto s = ParseDeviceFile("name=droce0\nvdev=x\nip=10.0.0.1\nmtu=1000\n");
  EXPECT_NE(std::string(s.status().message()).find("line 4"), std::string::npos) << s.status();
}

// cc= picks the algorithm of every QP (doc/cc.md), with the paper's
// parameters at cc_line_rate_gbps and cc_params on top; errors say what is
// allowed.
TEST(DeviceFile, CongestionControlByName) {
  auto f = ParseDeviceFile(std::string(kMinimal) + "cc=timely\ncc_line_rate_gbps=25\ncc_params=t_low_ns=40000, beta=0.5\n");
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->dev.cc.ops, cc::FindAlgorithm("timely"));
  double v = 0;
  ASSERT_TRUE(cc::GetParam(f->dev.cc, "line_rate_bps", &v));
  EXPECT_EQ(v, 25e9);
  ASSERT_TRUE(cc::GetParam(f->dev.cc, "t_low_ns", &v));
  EXPECT_EQ(v, 40000);
  ASSERT_TRUE(cc::GetParam(f->dev.cc, "beta", &v));
  EXPECT_EQ(v, 0.5);
  EXPECT_FALSE(f->dev.dcqcn);
  auto again = ParseDeviceFile(FormatDeviceFile(*f));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(DescribeConfig(again->dev.cc), DescribeConfig(f->dev.cc));

  for (const char* name : {"dcqcn", "hpcc", "swift"}) {
    auto g = ParseDeviceFile(std::string(kMinimal) + "cc=" + name + "\n");
    ASSERT_TRUE(g.ok()) << name << ": " << g.status();
    EXPECT_STREQ(g->dev.cc.ops->name, name);
  }
  // cc=dcqcn brings the paper's CNP interval, as dcqcn=paper does.
  EXPECT_EQ(ParseDeviceFile(std::string(kMinimal) + "cc=dcqcn\n")->dev.min_time_between_cnps_ns, 50000u);
  EXPECT_EQ(ParseDeviceFile(kMinimal)->dev.cc.ops, nullptr);

  const struct {
    const char* text;
    const char* says;
  } kBad[] = {
      {"cc=cubic\n", "cc: expected one of dcqcn, timely, hpcc, swift, none, got 'cubic'"},
      {"cc=hpcc\ncc_params=eta=2\n", "cc_params: hpcc eta: '2' is not a number in 0.01..1"},
      {"cc=swift\ncc_params=gamma=1\n", "cc_params: swift has no parameter 'gamma'"},
      {"cc_params=beta=0.5\n", "cc_params without cc="},
      {"cc=timely\ndcqcn=paper\n", "dcqcn= and cc= both set"},
      {"cc=timely\ncc_line_rate_gbps=0\n", "cc_line_rate_gbps"},
  };
  for (const auto& b : kBad) {
    auto g = ParseDeviceFile(std::string(kMinimal) + b.text);
    ASSERT_FALSE(g.ok()) << b.text;
    EXPECT_NE(std::string(g.status().message()).find(b.says), std::string::npos) << g.status();
  }
}

TEST(DeviceFile, GidFormatIsSysfs) {
  auto g = ParseIpAsGid("10.0.0.1");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(FormatGid(*g), "0000:0000:0000:0000:0000:ffff:0a00:0001");
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(DeviceTree, WritesWhatLibibverbsReadsAndRemovesIt) {
  const fs::path run = fs::temp_directory_path() / ("droce-tree-" + std::to_string(getpid()));
  const fs::path dev = run / "dev";
  fs::remove_all(run);
  auto f = ParseDeviceFile(kMinimal);
  ASSERT_TRUE(f.ok());
  absl::Status s = WriteDeviceTree(run.string(), dev.string(), *f);
  if (s.code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << "mknod needs root: " << s;
  ASSERT_TRUE(s.ok()) << s;
  const fs::path sys = run / "sysfs/class";
  EXPECT_EQ(Slurp(sys / "infiniband_verbs/abi_version"), "6\n");
  const std::string uverbs = UverbsName(run.string(), "droce0");
  EXPECT_NE(uverbs, UverbsName("/elsewhere", "droce0"));
  EXPECT_EQ(Slurp(sys / "infiniband_verbs" / uverbs / "ibdev"), "droce0\n");
  EXPECT_EQ(Slurp(sys / "infiniband_verbs" / uverbs / "dev"), "1:7\n");
  EXPECT_EQ(Slurp(sys / "infiniband/droce0/ports/1/link_layer"), "Ethernet\n");
  EXPECT_EQ(Slurp(sys / "infiniband/droce0/ports/1/gids/1"), "0000:0000:0000:0000:0000:ffff:0a00:0001\n");
  EXPECT_EQ(Slurp(sys / "infiniband/droce0/ports/1/gid_attrs/types/1"), "RoCE v2\n");
  EXPECT_EQ(Slurp(sys / "infiniband/droce0/device/modalias"), "droce:droce0\n");
  struct stat st {};
  ASSERT_EQ(stat((dev / uverbs).c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  auto back = ReadDevice(run.string(), "droce0");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->vdev, f->vdev);
  EXPECT_EQ(ListDevices(run.string()), std::vector<std::string>{"droce0"});
  EXPECT_EQ(WriteDeviceTree(run.string(), dev.string(), *f).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(RemoveDeviceTree(run.string(), dev.string(), "droce0").ok());
  EXPECT_TRUE(ListDevices(run.string()).empty());
  EXPECT_FALSE(fs::exists(dev / uverbs));
  EXPECT_EQ(RemoveDeviceTree(run.string(), dev.string(), "droce0").code(), absl::StatusCode::kNotFound);
  fs::remove_all(run);
}

// A fabric device's LID (what qperf's LID-addressed QPs resolve): kept
// through the file, unicast range only, and only on a fabric device.
TEST(DeviceFile, FabricLid) {
  auto f = ParseDeviceFile("name=droce0\nip=10.0.0.1\nfabric=on\nfabric_dir=/tmp/run\nlid=7\n");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->lid, 7u);
  auto again = ParseDeviceFile(FormatDeviceFile(*f));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->lid, 7u);
  EXPECT_FALSE(ParseDeviceFile("name=droce0\nip=10.0.0.1\nfabric=on\nfabric_dir=/tmp/run\nlid=0\n").ok());
  EXPECT_FALSE(ParseDeviceFile("name=droce0\nip=10.0.0.1\nfabric=on\nfabric_dir=/tmp/run\nlid=49152\n").ok());
  EXPECT_FALSE(ParseDeviceFile(std::string(kMinimal) + "lid=3\n").ok());  // a wire: lid_peer instead
}

// Every key of the table, with a value other than its default and the
// lines it needs beside the name (a wire and an address unless given).
struct KeySample {
  const char* key;
  const char* line;     // key=value, as FormatDeviceFile writes it back
  const char* context;  // other lines it needs
  const char* bad;      // a value the key refuses; null: it takes any text
};
constexpr char kWire[] = "vdev=net_null0\nip=10.0.0.1\n";
constexpr char kFabric[] = "fabric=on\nfabric_dir=/run/droce\nip=10.0.0.1\n";
const KeySample kSamples[] = {
    {"name", "name=droce7", kWire, "dr oce"},
    {"vdev", "vdev=net_memif_droce0,role=server", "ip=10.0.0.1\n", nullptr},
    {"netdev", "netdev=eth0", kWire, nullptr},
    {"mac", "mac=02:aa:bb:cc:dd:ee", kWire, "01:00:00:00:00:01"},
    {"ip", "ip=fd00::1", "vdev=net_null0\n", "10.0.0.300"},
    {"neighbor", "neighbor=10.0.0.2 02:00:00:00:00:02", kWire, "10.0.0.2"},
    {"mtu", "mtu=1024", kWire, "1000"},
    {"eal_memory_mb", "eal_memory_mb=128", kWire, "32"},
    {"link_wait_ms", "link_wait_ms=10", kWire, "600001"},
    {"eal_args", "eal_args=--log-level=debug -l 1", kWire, nullptr},
    {"dscp", "dscp=26", kWire, "64"},
    {"ecn", "ecn=0", kWire, "3"},
    {"vlan", "vlan=100", kWire, "4096"},
    {"pcp", "pcp=3", kWire, "8"},
    {"max_qp", "max_qp=64", kWire, "0"},
    {"cnp", "cnp=off", kWire, "maybe"},
    {"min_time_between_cnps_us", "min_time_between_cnps_us=50", kWire, "1000001"},
    {"cnp_dscp", "cnp_dscp=40", kWire, "-1"},
    {"broadcast_unresolved", "broadcast_unresolved=off", kWire, "yes"},
    {"lid_peer", "lid_peer=10.0.0.2", kWire, "peer"},
    {"dcqcn", "dcqcn=paper", kWire, "fast"},
    {"dcqcn_line_rate_gbps", "dcqcn_line_rate_gbps=25", kWire, "0"},
    {"cc", "cc=timely", kWire, "cubic"},
    {"cc_line_rate_gbps", "cc_line_rate_gbps=40", kWire, "1001"},
    {"cc_params", "cc_params=beta=0.5", "cc=timely\nvdev=net_null0\nip=10.0.0.1\n", "frob=1"},
    {"selective_repeat", "selective_repeat=on", kWire, "yes"},
    {"sr_max_inflight_packets", "sr_max_inflight_packets=64", kWire, "1024"},
    {"sr_rto_low_us", "sr_rto_low_us=150", kWire, "0"},
    {"sr_rto_high_us", "sr_rto_high_us=700", kWire, "0"},
    {"sr_rto_min_us", "sr_rto_min_us=40", kWire, "0"},
    {"sr_tlp", "sr_tlp=off", kWire, "2"},
    {"unsignaled_ack_every", "unsignaled_ack_every=1", kWire, "0"},
    {"tx_flush_bytes", "tx_flush_bytes=0", kWire, "2000000"},
    {"ack_solicit_us", "ack_solicit_us=30", kWire, "0"},
    {"min_ack_timeout", "min_ack_timeout=17", kWire, "32"},
    {"fabric", "fabric=on", "fabric_dir=/run/droce\nip=10.0.0.1\n", "fabric"},
    {"fabric_dir", "fabric_dir=/tmp/run", "fabric=on\nip=10.0.0.1\n", "run"},
    {"lid", "lid=7", kFabric, "49152"},
    {"netdev_bound", "netdev_bound=on", "fabric=on\nfabric_dir=/run/droce\n", "bound"},
    {"netdev_steering", "netdev_steering=xdp", kWire, "ebpf"},
    {"rx_icrc_trust", "rx_icrc_trust=on", "vdev=net_memif_droce0,role=server\nip=10.0.0.1\n", "trusted"},
    {"udp_gso", "udp_gso=on", kWire, "segmented"},
    {"udp_gather", "udp_gather=off", kWire, "copied"},
    {"direct_lend", "direct_lend=off", kFabric, "lent"},
    {"direct_icrc_trust", "direct_icrc_trust=off", kFabric, "trusted"},
    {"doorbell_batch", "doorbell_batch=4", kWire, "257"},
    {"doorbell_burst_gap_ns", "doorbell_burst_gap_ns=1000000", kWire, "1000000001"},
    {"memif_direct_tx", "memif_direct_tx=off", kWire, "direct"},
    {"memif_direct_rx", "memif_direct_rx=off", kWire, "direct"},
    {"poll_ack_hold", "poll_ack_hold=off", kWire, "hold"},
    {"empty_poll_skip", "empty_poll_skip=off", kWire, "skip"},
    {"progress_profile", "progress_profile=latency", kWire, "fast"},
    {"progress_spins", "progress_spins=10", kWire, "-1"},
    {"progress_hot_us", "progress_hot_us=5", kWire, "100000001"},
    {"progress_hot_sleep_us", "progress_hot_sleep_us=7", kWire, "x"},
    {"progress_max_sleep_us", "progress_max_sleep_us=200", kWire, "1ms"},
    {"progress_app_active_us", "progress_app_active_us=300", kWire, "-3"},
    {"progress_app_active_max_us", "progress_app_active_max_us=900", kWire, ""},
    {"progress_steady_quiet_us", "progress_steady_quiet_us=300", kWire, "-1"},
    {"progress_steady_lookback_max_us", "progress_steady_lookback_max_us=5000", kWire, "2ms"},
    {"progress_shared_cpu_quiet_us", "progress_shared_cpu_quiet_us=150", kWire, "-1"},
    {"progress_calm_lookbacks", "progress_calm_lookbacks=4", kWire, "1001"},
    {"progress_wakeup", "progress_wakeup=off", kWire, "never"},
    {"progress_stream_wait", "progress_stream_wait=off", kWire, "sometimes"},
    {"event_busy_poll_us", "event_busy_poll_us=30", kWire, "0.5"},
    {"event_stream_nap_us", "event_stream_nap_us=20", kWire, "soon"},
    {"progress_slice_us", "progress_slice_us=250", kWire, "long"},
    {"progress_sched", "progress_sched=fifo", kWire, "rr"},
    {"progress_rt_priority", "progress_rt_priority=7", kWire, "0"},
    {"progress_nice", "progress_nice=-7", kWire, "20"},
    {"progress_auto_drive_us", "progress_auto_drive_us=300", kWire, "forever"},
    {"progress_pm_qos_us", "progress_pm_qos_us=0", kWire, "-1"},
};

// Skipping the receive ICRC check is for shared-memory links only: refused
// where frames come from a wire, off unless asked for.
TEST(DeviceSettings, RxIcrcTrustOnlyOnSharedMemory) {
  EXPECT_FALSE(ParseDeviceFile(kMinimal)->dev.rx_icrc_trusted);
  const std::string on = "rx_icrc_trust=on\n";
  auto memif = ParseDeviceFile(std::string(kMinimal) + on);
  ASSERT_TRUE(memif.ok()) << memif.status();
  EXPECT_TRUE(memif->dev.rx_icrc_trusted);
  EXPECT_TRUE(ParseDeviceFile(absl::StrCat("name=droce0\n", kFabric, on)).ok());
  for (const char* wire : {"vdev=net_pcap0,iface=eth0\n", "vdev=net_af_packet0,iface=eth0\n", "vdev=net_tap0\n",
                           "vdev=0000:03:00.0\n"}) {
    auto f = ParseDeviceFile(absl::StrCat("name=droce0\nip=10.0.0.1\n", wire, on));
    ASSERT_FALSE(f.ok()) << wire;
    EXPECT_NE(f.status().message().find("rx_icrc_trust"), std::string::npos) << f.status();
  }
  EXPECT_FALSE(ParseDeviceFile(absl::StrCat("name=droce0\nfabric=on\nfabric_dir=/run/droce\nnetdev_bound=on\n", on)).ok());
}

// The samples name exactly the table's keys: a new key needs a sample here.
TEST(DeviceSettings, SamplesCoverEveryKey) {
  std::vector<std::string> table, samples;
  for (const DeviceSetting& s : DeviceSettings()) table.push_back(s.key);
  for (const KeySample& k : kSamples) samples.push_back(k.key);
  EXPECT_EQ(table, samples);
}

// A key set to a value other than its default is written back as given,
// and the written file parses to the same file again.
TEST(DeviceSettings, EveryKeyRoundTrips) {
  for (const KeySample& k : kSamples) {
    const std::string text = std::string(k.line).starts_with("name=")
                                 ? absl::StrCat(k.context, k.line, "\n")
                                 : absl::StrCat("name=droce0\n", k.context, k.line, "\n");
    absl::StatusOr<DeviceFile> f = ParseDeviceFile(text);
    ASSERT_TRUE(f.ok()) << k.key << ": " << f.status();
    const std::string written = FormatDeviceFile(*f);
    EXPECT_NE(written.find(absl::StrCat("\n", k.line, "\n")), std::string::npos) << k.key << ":\n" << written;
    EXPECT_EQ(FormatDeviceFile(*ParseDeviceFile(written)), written) << k.key;
    const std::string value = std::string(k.line).substr(std::string(k.line).find('=') + 1);
    EXPECT_NE(DeviceSettingDefault(*FindDeviceSetting(k.key)), value) << k.key << ": the sample is the default";
  }
}

// A refused value is an error that names the line and the key.
TEST(DeviceSettings, BadValuesSayWhichKeyAndLine) {
  for (const KeySample& k : kSamples) {
    if (k.bad == nullptr) continue;
    const std::string text = absl::StrCat("name=droce0\n", k.context, k.key, "=", k.bad, "\n");
    absl::StatusOr<DeviceFile> f = ParseDeviceFile(text);
    ASSERT_FALSE(f.ok()) << text;
    const std::string msg(f.status().message());
    const bool names_key = msg.find(k.key) != std::string::npos || msg.find("device name") != std::string::npos ||
                           msg.find("MAC address") != std::string::npos || msg.find("IP address") != std::string::npos;
    EXPECT_TRUE(names_key) << k.key << ": " << msg;
    // cc_params is checked against its algorithm once the file is read.
    if (std::string_view(k.key) != "cc_params") {
      EXPECT_TRUE(msg.starts_with("line ")) << k.key << ": " << msg;
    }
  }
}

// Every key has help, and a key a default file leaves out says what that means.
TEST(DeviceSettings, EveryKeyHasHelpAndADefault) {
  for (const DeviceSetting& s : DeviceSettings()) {
    EXPECT_GT(std::strlen(s.help), 10u) << s.key;
    EXPECT_FALSE(DeviceSettingDefault(s).empty()) << s.key;
    EXPECT_EQ(std::string(s.help).find('|'), std::string::npos) << s.key << ": breaks the Markdown table";
  }
  // Defaults of a verbs device where they differ from core::DeviceConfig's.
  EXPECT_EQ(DeviceSettingDefault(*FindDeviceSetting("broadcast_unresolved")), "on");
  EXPECT_EQ(DeviceSettingDefault(*FindDeviceSetting("sr_rto_min_us")), "200");
}

// A profile sets the progress knobs from their defaults; a knob after it
// changes one of them, a profile after a knob starts over.
TEST(DeviceSettings, ProgressProfiles) {
  const ProgressConfig defaults;
  auto balanced = ParseDeviceFile(std::string(kMinimal) + "progress_profile=balanced\n");
  ASSERT_TRUE(balanced.ok()) << balanced.status();
  EXPECT_EQ(FormatDeviceFile(*balanced), FormatDeviceFile(*ParseDeviceFile(kMinimal)));
  auto shared = ParseDeviceFile(std::string(kMinimal) + "progress_profile=shared-host\nprogress_spins=30\n");
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_FALSE(shared->progress.sched_auto);
  EXPECT_FALSE(shared->progress.sched_fifo);
  EXPECT_EQ(shared->progress.event_busy_poll_us, 0u);
  EXPECT_EQ(shared->progress.spins, 30u);
  EXPECT_EQ(shared->progress.hot_us, defaults.hot_us / 10);
  auto latency = ParseDeviceFile(std::string(kMinimal) + "progress_spins=30\nprogress_profile=latency\n");
  ASSERT_TRUE(latency.ok()) << latency.status();
  EXPECT_EQ(latency->progress.spins, defaults.spins * 10);
  EXPECT_EQ(latency->progress.pm_qos_us, 0);
  EXPECT_TRUE(latency->progress.sched_auto);
  auto again = ParseDeviceFile(FormatDeviceFile(*shared));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->progress_profile, "shared-host");
  EXPECT_EQ(again->progress.spins, 30u);
  // Every profile but the default changes something.
  for (const ProgressProfile& p : ProgressProfiles()) {
    DeviceFile f;
    p.apply(f.progress);
    f.progress_profile = p.name;
    EXPECT_EQ(FormatDeviceFile(f) == FormatDeviceFile(DeviceFile{}), p.name == std::string("balanced")) << p.name;
  }
}

// doc/verbs.md holds the tables generated from the settings table (and the
// profiles) between markers.
void ExpectDocSection(const char* what, const std::string& table) {
  const char* dir = std::getenv("DROCE_DOC_DIR");
  if (dir == nullptr) GTEST_SKIP() << "DROCE_DOC_DIR unset (meson test sets it)";
  const std::string doc = Slurp(fs::path(dir) / "verbs.md");
  const std::string begin = absl::StrCat("<!-- ", what, ": generated from drivers/verbs/device_settings.cc -->\n");
  const std::string end = absl::StrCat("<!-- end of ", what, " -->\n");
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "doc/verbs.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "doc/verbs.md lacks " << end;
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), table)
      << "doc/verbs.md's " << what << " differ from the table (droce-ctl settings --markdown prints both)";
}

// EAL settings are a wire device's: a fabric device starts no EAL, so a
// value that would do nothing is refused, not ignored. Its file leaves the
// key out; a file an older droce-ctl wrote (the default written out) still
// parses.
TEST(DeviceSettings, FabricDeviceRefusesEalSettings) {
  const std::string fabric = std::string("name=droce0\n") + kFabric;
  for (const char* line : {"eal_memory_mb=128\n", "eal_args=--log-level=debug\n"}) {
    absl::StatusOr<DeviceFile> f = ParseDeviceFile(fabric + line);
    ASSERT_FALSE(f.ok()) << line;
    EXPECT_NE(f.status().message().find("starts no EAL"), std::string::npos) << f.status();
  }
  absl::StatusOr<DeviceFile> old = ParseDeviceFile(fabric + "eal_memory_mb=256\n");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(FormatDeviceFile(*old).find("eal_memory_mb"), std::string::npos);
  absl::StatusOr<DeviceFile> wire = ParseDeviceFile(std::string("name=droce0\n") + kWire + "eal_memory_mb=128\n");
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_NE(FormatDeviceFile(*wire).find("eal_memory_mb=128"), std::string::npos);
}

TEST(DeviceSettings, DocListsExactlyTheTable) { ExpectDocSection("device settings", DeviceSettingsMarkdown()); }
TEST(DeviceSettings, DocListsTheProgressProfiles) { ExpectDocSection("progress profiles", ProgressProfilesMarkdown()); }

}  // namespace
}  // namespace droce::verbs

namespace droce::verbs {
namespace {

// Doorbell batching: only small posts in a burst of a polling program wait,
// and never more than batch - 1 in a row.
TEST(DoorbellBatcher, DefersOnlySmallPostsInABurstOfAPollingProgram) {
  constexpr uint64_t us = 1000;
  DoorbellBatcher b(4);
  uint64_t t = 10'000 * us;
  const uint64_t polled = t - 5 * us;
  EXPECT_FALSE(b.Defer(t, true, polled));  // the first post goes at once
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, polled));   // 1 us later: a burst
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, polled));
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, polled));
  EXPECT_EQ(b.deferred(), 3u);
  t += 1 * us;
  EXPECT_FALSE(b.Defer(t, true, polled));  // the batch's 4th post takes the other three along
  EXPECT_EQ(b.deferred(), 0u);
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, polled));
  t += 1 * us;
  EXPECT_FALSE(b.Defer(t, false, polled));  // a large post (or a list) goes at once, with them
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, polled));
  b.Flushed();  // a poll round sent it
  EXPECT_EQ(b.deferred(), 0u);
  t += 1 * us + 1;
  EXPECT_FALSE(b.Defer(t, true, polled));  // after a pause: at once
  t += 500;
  EXPECT_FALSE(b.Defer(t, true, t - 100));  // a poll since the last post (a ping-pong's every post): at once
  t += 500;
  EXPECT_TRUE(b.Defer(t, true, t - 600));
  t += 1 * us;
  EXPECT_FALSE(b.Defer(t, true, 0));  // a program that never polled its CQ
  t += 1 * us;
  EXPECT_FALSE(b.Defer(t, true, t - 2 * DoorbellBatcher::kPollWindowNs));  // nor lately
  t += 1 * us;
  EXPECT_TRUE(b.Defer(t, true, t - 10 * us));
  EXPECT_EQ(b.deferred(), 1u);  // the two refused in between started the count again
}

// The gap counts from where the previous post returned: a batch's last
// post, which transmits, may take longer than the gap itself.
TEST(DoorbellBatcher, TheGapCountsFromTheEndOfATransmittingPost) {
  DoorbellBatcher b(4);
  uint64_t t = 10'000'000;
  const uint64_t polled = t - 5'000;
  EXPECT_FALSE(b.Defer(t, true, polled));
  b.PostEnded(t + 3'000);  // its transmit took 3 us
  t += 3'500;
  EXPECT_TRUE(b.Defer(t, true, polled));  // 0.5 us after it returned
}

// A program's post as RingPosted makes it: the clock is read only when the
// batcher cannot decide without it (DeferUnread).
struct BatchedPoster {
  DoorbellBatcher& b;
  uint64_t now = 0;        // the program's time
  uint64_t last_poll = 0;  // its last poll_cq's stamp
  int reads = 0;
  bool Post(bool small = true) {
    if (b.DeferUnread(small, last_poll)) return true;
    ++reads;
    return b.Defer(now, small, last_poll);
  }
};

// A burst's posts still defer, a batch at a time, but only one post in
// kUnreadPosts + 1 reads the clock: the batch's first deferral and each
// post after kUnreadPosts unread ones; the batch's last post, which
// transmits, reads (its doorbell needs the time).
TEST(DoorbellBatcher, ABurstDefersWithAClockReadingEveryFewPosts) {
  static_assert(DoorbellBatcher::kUnreadPosts == 3);
  DoorbellBatcher b(16);
  BatchedPoster p{b, 10'000'000, 10'000'000 - 5'000};
  for (int round = 0; round < 3; ++round) {
    p.reads = 0;
    EXPECT_FALSE(p.Post()) << "the first post after a poll or a full batch goes at once";
    b.PostEnded(p.now += 2'000);  // its transmit took 2 us
    for (int i = 0; i < 15; ++i) {
      p.now += 100;  // a tight post loop
      EXPECT_TRUE(p.Post()) << "post " << i + 2 << " of the burst";
    }
    EXPECT_EQ(b.deferred(), 15u);
    EXPECT_EQ(p.reads, 1 + 4) << "the transmitting post, then posts 2, 6, 10 and 14";
    p.now += 100;
  }
}

// A pause ends the burst: the first post after a transmit always reads, so
// a post after a pause goes at once (and a slow poster's every post); a
// pause among the unread posts is caught by the next reading, at most
// kUnreadPosts posts late, and that post takes the deferred ones along.
TEST(DoorbellBatcher, APauseIsCaughtByTheNextReading) {
  DoorbellBatcher b(16);
  BatchedPoster p{b, 10'000'000, 10'000'000 - 5'000};
  EXPECT_FALSE(p.Post());
  b.PostEnded(p.now += 1'000);
  for (int i = 0; i < 5; ++i) {
    p.now += 5'000;  // one post every 5 us
    EXPECT_FALSE(p.Post()) << "a lone post after a pause goes at once";
    b.PostEnded(p.now += 1'000);
  }
  EXPECT_EQ(p.reads, 6);
  p.now += 200;
  EXPECT_TRUE(p.Post());  // read: a burst begins
  p.now += 200;
  EXPECT_TRUE(p.Post());  // unread
  p.now += 10'000;        // the program computes for 10 us
  EXPECT_TRUE(p.Post()) << "unread: the pause is not seen yet";
  p.now += 200;
  EXPECT_TRUE(p.Post());
  p.now += 200;
  const int reads = p.reads;
  EXPECT_FALSE(p.Post()) << "the reading sees 10.6 us for 4 posts: over 1 us each, transmit";
  EXPECT_EQ(p.reads, reads + 1);
  EXPECT_EQ(b.deferred(), 0u);
  // Up to kUnreadPosts x the gap for as many posts still counts as a burst.
  b.PostEnded(p.now += 1'000);
  p.now += 100;
  EXPECT_TRUE(p.Post());
  p.now += 3'500;  // 4 posts within 4 us of that reading
  EXPECT_TRUE(p.Post());
  EXPECT_TRUE(p.Post());
  EXPECT_TRUE(p.Post());
  EXPECT_TRUE(p.Post());
}

// A poll_cq since the last reading (a ping-pong's every post), a flush (a
// poll round took the deferred doorbells) or a large post: the next post
// reads the clock, and after a poll it goes at once.
TEST(DoorbellBatcher, APollAFlushOrALargePostMakeTheNextPostRead) {
  DoorbellBatcher b(16);
  BatchedPoster p{b, 10'000'000, 10'000'000 - 5'000};
  EXPECT_FALSE(p.Post());
  b.PostEnded(p.now += 1'000);
  p.now += 100;
  EXPECT_TRUE(p.Post());  // a burst
  p.now += 100;
  p.last_poll = p.now;  // the program polled its CQ
  p.now += 100;
  int reads = p.reads;
  EXPECT_FALSE(p.Post()) << "a post after a poll goes at once";
  EXPECT_EQ(p.reads, reads + 1);
  b.PostEnded(p.now += 1'000);

  p.now += 100;
  EXPECT_TRUE(p.Post());
  b.Flushed();  // the progress thread's round sent it
  p.now += 100;
  reads = p.reads;
  EXPECT_TRUE(p.Post()) << "still within the gap of the last reading";
  EXPECT_EQ(p.reads, reads + 1) << "but read";

  p.now += 100;
  reads = p.reads;
  EXPECT_FALSE(p.Post(/*small=*/false)) << "a large post goes at once";
  EXPECT_EQ(p.reads, reads + 1);
}

TEST(DoorbellBatcher, BatchOfOneNeverDefers) {
  DoorbellBatcher b(1);
  for (uint64_t t = 1'000'000; t < 1'100'000; t += 500) EXPECT_FALSE(b.Defer(t, true, t - 1000));
}

// The progress thread's look-backs while a program keeps polling: the
// first app_active_us after its last poll, then doubling to the maximum;
// one that found the program quiet starts over (doc/verbs.md).
TEST(LookBackPacer, SpacesOutWhileTheProgramKeepsPollingAndStartsOverWhenQuiet) {
  LookBackPacer p(20, 200);
  uint64_t now = 1'000'000;
  EXPECT_EQ(p.StandAside(now, now - 5'000, 0), now + 15'000);  // 20 us after the last poll
  now += 15'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 2'000), now + 40'000);
  now += 40'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 2'000), now + 80'000);
  now += 80'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 2'000), now + 160'000);
  now += 160'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 2'000), now + 200'000);  // the maximum
  now += 200'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 2'000), now + 200'000);
  p.Quiet();  // ib_write_lat: polled for its completion, then spun on memory
  now += 500'000;
  EXPECT_EQ(p.StandAside(now, now - 2'000, 0), now + 18'000);
  now += 18'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 0), now + 40'000);
  // A pause of app_active_us since the last look-back: the program
  // does stop polling (ib_write_lat), so no doubling.
  now += 40'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 20'000), now + 19'000);
  now += 19'000;
  EXPECT_EQ(p.StandAside(now, now - 1'000, 19'000), now + 40'000);
  // A maximum at or below app_active_us keeps the fixed look-back.
  LookBackPacer fixed(20, 20);
  for (int i = 0; i < 5; ++i, now += 20'000) EXPECT_EQ(fixed.StandAside(now, now - 3'000, 0), now + 17'000);
}

// progress_steady_quiet_us: after kSteadyLookBacks look-backs in a row found
// the program polling, it is taken over only after steady_quiet_us without
// a call, and a shorter pause does not start the spacing over; the first
// take-over (or a pause of its own that long) makes it a new program again.
TEST(LookBackPacer, ASteadyPollerIsTakenOverOnlyAfterTheSteadyQuiet) {
  LookBackPacer p(20, 2000, 0, 200);
  EXPECT_EQ(p.TakeOverAfter(20'000, true), 20'000u);
  uint64_t now = 1'000'000;
  for (uint32_t i = 0; i < LookBackPacer::kSteadyLookBacks; ++i) {
    EXPECT_EQ(p.TakeOverAfter(20'000, true), 20'000u) << i;
    now = p.StandAside(now, now - 1'000, 2'000);
  }
  EXPECT_EQ(p.TakeOverAfter(20'000, true), 200'000u);
  EXPECT_EQ(p.TakeOverAfter(20'000, false), 20'000u);  // not a stream's sender: ib_write_lat
  EXPECT_EQ(p.TakeOverAfter(300'000, true), 300'000u);  // a longer wait (a rank on the thread's CPU) stays
  // A 150 us preemption is no pause of a steady poller's: still steady.
  now = p.StandAside(now, now - 1'000, 150'000, 0, p.TakeOverAfter(20'000, true));
  EXPECT_EQ(p.TakeOverAfter(20'000, true), 200'000u);
  // A 250 us one is: a new program (ib_write_lat's spin on memory).
  p.StandAside(now, now - 1'000, 250'000, 0, p.TakeOverAfter(20'000, true));
  EXPECT_EQ(p.TakeOverAfter(20'000, true), 20'000u);
  p.Quiet();
  EXPECT_EQ(p.TakeOverAfter(20'000, true), 20'000u);
  // 0 (or anything at or below app_active_us): as before.
  LookBackPacer off(20, 2000);
  for (int i = 0; i < 8; ++i) now = off.StandAside(now, now - 1'000, 2'000);
  EXPECT_EQ(off.TakeOverAfter(20'000, true), 20'000u);
}

// progress_steady_lookback_max_us: a steady poller on a stream's sending end
// doubles its look-backs' spacing up to that cap, not app_active_max_us; a
// poller that is not steady yet, or whose device sends no stream, keeps
// app_active_max_us; a pause of its own starts the spacing over.
TEST(LookBackPacer, ASteadySendersLookBacksSpaceUpToTheirOwnCap) {
  const auto spacings = [](LookBackPacer& p, bool sending, int looks) {
    std::vector<uint64_t> out;
    uint64_t now = 1'000'000;
    for (int i = 0; i < looks; ++i) {
      const uint64_t next = p.StandAside(now, now - 1'000, 2'000, 0, 0, sending);
      out.push_back(next - now);
      now = next;
    }
    return out;
  };
  LookBackPacer steady(20, 2000, 0, 200, 20000);
  const std::vector<uint64_t> s = spacings(steady, true, 16);
  EXPECT_EQ(*std::max_element(s.begin(), s.end()), 20'000'000u);
  EXPECT_EQ(s.back(), 20'000'000u);
  // Until kSteadyLookBacks look-backs found it polling, the usual cap.
  for (uint32_t i = 0; i < LookBackPacer::kSteadyLookBacks; ++i) EXPECT_LE(s[i], 2'000'000u) << i;
  LookBackPacer not_sending(20, 2000, 0, 200, 20000);
  const std::vector<uint64_t> n = spacings(not_sending, false, 16);
  EXPECT_EQ(*std::max_element(n.begin(), n.end()), 2'000'000u);
  // A pause of the program's own (past steady_quiet_us) starts over.
  uint64_t now = 500'000'000;
  const uint64_t next = steady.StandAside(now, now - 1'000, 300'000, 0, steady.TakeOverAfter(20'000, true), true);
  EXPECT_LT(next - now, 2'000'000u);
  // At or below app_active_max_us, or 0: the usual cap.
  LookBackPacer low(20, 2000, 0, 200, 1000);
  const std::vector<uint64_t> l = spacings(low, true, 16);
  EXPECT_EQ(*std::max_element(l.begin(), l.end()), 2'000'000u);
}

// progress_calm_lookbacks: calm after that many look-backs in a row found
// the program polling; a pause of its own ends it, a pause that spans the
// previous look-back (the look-back preempted the program there) does not.
TEST(LookBackPacer, CalmAfterLookBacksInARowAndAPauseThatSpansALookBackIsNotTheProgramsOwn) {
  LookBackPacer p(20, 200, 3);
  const uint64_t t1 = 1'000'000, t2 = t1 + 15'000, t3 = t2 + 40'000, t4 = t3 + 80'000;
  p.StandAside(t1, t1 - 5'000, 0);
  p.StandAside(t2, t2 - 1'000, 2'000);
  EXPECT_FALSE(p.calm());
  // A 25 us pause from 4 us before the previous look-back to 21 us after it.
  p.StandAside(t3, t3 - 1'000, 25'000, t2 + 21'000);
  EXPECT_TRUE(p.calm());
  // A 25 us pause that ended before the previous look-back: the program's own.
  p.StandAside(t4, t4 - 1'000, 25'000, t3 - 1'000);
  EXPECT_FALSE(p.calm());
  EXPECT_FALSE(LookBackPacer(20, 200).calm());
}

// The progress thread's look-backs (ProgressThread::Run) beside a program
// thread: at each, the thread stands aside until the pacer's time while the
// program called within app_active_us (a call under way is a call now), and
// otherwise takes over (polls, then looks again after a 5 us hot sleep).
// `program(t, calls)` makes the program's calls at t and says whether one is
// under way. Steps of 500 ns from `start` to `end`.
// With preempt_ns, the thread shares the program's CPU: a look-back with the
// short slice preempts the program, whose own timeline (t - frozen) stops
// for preempt_ns; one with the default slice (calm, progress_calm_lookbacks)
// waits for the program's next slice end (a multiple of slice_ns) and costs
// it nothing.
struct LookBacks {
  // The shipped defaults (progress_app_active_us, progress_app_active_max_us,
  // progress_steady_quiet_us, progress_steady_lookback_max_us).
  explicit LookBacks(uint32_t calm_after = 0, uint32_t steady_max_us = ProgressConfig{}.steady_lookback_max_us)
      : pacer(ProgressConfig{}.app_active_us, ProgressConfig{}.app_active_max_us, calm_after,
              ProgressConfig{}.steady_quiet_us, steady_max_us) {}
  ProgramCalls calls;
  LookBackPacer pacer;
  uint64_t next = 0, looks = 0, takeovers = 0, first_takeover = 0, last_takeover = 0;
  uint64_t preempt_ns = 0, slice_ns = 0, frozen = 0, held_until = 0, preemptions = 0, to_calm = 0, to_short = 0;
  uint64_t take_over_ns = 20'000;  // TakeOverAfterNs: 20 us, or longer beside a program on the thread's CPU
  bool calm = false, in_call = false;
  bool sending = false;  // the device a stream's sending end (StreamGauge::sending)
  void Slice(bool c) {
    if (c != calm) ++(c ? to_calm : to_short);
    calm = c;
  }
  void Preempt(uint64_t t) {
    if (preempt_ns == 0 || calm) return;
    ++preemptions;
    held_until = t + preempt_ns;
  }
  template <typename Program>
  void Run(uint64_t start, uint64_t end, Program program) {
    if (next == 0) next = start + 20'000;
    for (uint64_t t = start; t < end; t += 500) {
      if (t < held_until) {
        frozen += 500;
      } else {
        in_call = program(t, calls);
      }
      if (t < next || (calm && slice_ns != 0 && t % slice_ns != 0)) continue;
      ++looks;
      const uint64_t last = calls.LastCall(t, in_call);
      const uint64_t take_over = pacer.TakeOverAfter(take_over_ns, sending);
      if (NsSince(t, last) >= take_over) {
        Preempt(t);
        pacer.Quiet();
        Slice(false);
        if (takeovers++ == 0) first_takeover = t;
        last_takeover = t;
        next = t + 5'000;
      } else {
        Preempt(t);
        uint64_t gap_end = 0;
        const uint64_t gap = calls.TakeMaxGap(&gap_end);
        next = pacer.StandAside(t, last, gap, gap_end, take_over, sending);
        Slice(pacer.calm());
      }
    }
  }
};

// A client polling without a pause of its own (ib_write_bw's), preempted for
// 60 us every 500 us (the peer's thread or the progress thread on its CPU
// on a 2-core host): on a stream's sending end, once steady, it is never
// taken over; on a device that sends no stream (a ping-pong's), every
// preemption that a look-back sees is a take-over and the spacing starts
// over, as before the rule. Its look-backs space out to
// progress_steady_lookback_max_us, a tenth as many as at app_active_max_us.
// Once it stops calling, it is taken over within the spacing reached.
TEST(ProgramCalls, ASteadyPollerPreemptedNowAndThenIsNotTakenOver) {
  const auto program = [](uint64_t start) {
    return [start](uint64_t t, ProgramCalls& calls) {
      const uint64_t c = (t - start) % 500'000;
      if (c < 440'000 && c % 1'000 == 0) calls.Polled(t);
      return false;
    };
  };
  const uint64_t start = 1'000'000, stop = start + 200'000'000;
  LookBacks steady;
  steady.sending = true;
  steady.Run(start, stop, program(start));
  EXPECT_LE(steady.takeovers, 2u) << steady.takeovers;
  LookBacks off;  // the same program on a device that does not send a stream
  off.Run(start, stop, program(start));
  EXPECT_GE(off.takeovers, 5u) << off.takeovers;
  EXPECT_GT(off.looks, steady.looks);
  LookBacks capped(0, ProgressConfig{}.app_active_max_us);  // steady, but at the usual cap
  capped.sending = true;
  capped.Run(start, stop, program(start));
  EXPECT_LE(capped.takeovers, 2u) << capped.takeovers;
  EXPECT_LT(steady.looks * 3, capped.looks) << steady.looks << " " << capped.looks;
  steady.takeovers = 0;
  const uint64_t cap_ns = uint64_t{ProgressConfig{}.steady_lookback_max_us} * 1000;
  steady.Run(stop, stop + cap_ns + 3'000'000, [](uint64_t, ProgramCalls&) { return false; });
  ASSERT_GE(steady.takeovers, 1u);
  EXPECT_LE(steady.first_takeover - stop, cap_ns + 200'000) << steady.first_takeover - stop;
}

// An MPI rank's 64 KiB eager ping-pong over UCX, every 100 us: a poll whose
// round takes a message's frames while the peer sends them (30 us, the device
// held throughout), 10 posts of the reply 2 us apart (20 us without a poll),
// then empty polls every microsecond. The look-backs space out to
// app_active_max_us and never take over; once the rank stops calling (it
// spins on memory), the thread takes over within the spacing reached.
// Fails when a call under way does not count as a call (the look-backs
// landing in the long poll take over), when a busy poll's end is not
// stamped or posts do not end a pause (the spacing starts over every cycle).
TEST(ProgramCalls, LookBacksSpaceOutBesideAPollingRankAndTakeOverOnceItStops) {
  LookBacks lb;
  const uint64_t start = 1'000'000, stop = start + 10'000'000;
  lb.Run(start, stop, [&](uint64_t t, ProgramCalls& calls) {
    const uint64_t c = (t - start) % 100'000;
    if (c == 0) calls.Polled(t);
    if (c < 30'000) return true;
    if (c == 30'000) calls.BusyPollEnded(t);
    const bool posting = c >= 31'000 && c < 51'000 && c % 2'000 >= 1'000;  // each post 1 us
    if (posting && c % 2'000 == 1'000) calls.Posted(t);
    if (c >= 55'000 && c % 1'000 == 0) calls.Polled(t);
    return posting;
  });
  EXPECT_EQ(lb.takeovers, 0u);
  // The ramp 20, 40, ... 1,280 us (2.5 ms, 7 looks), then 2 ms apart: ~11.
  EXPECT_LE(lb.looks, 14u) << lb.looks;
  lb.Run(stop, stop + 3'000'000, [](uint64_t, ProgramCalls&) { return false; });
  ASSERT_GE(lb.takeovers, 1u);
  EXPECT_LE(lb.first_takeover - stop, 2'000'000u) << lb.first_takeover - stop;
}

// ib_write_bw's client: posts and polls without a pause for a second (a
// call every microsecond). The look-backs, each a timed sleep whose wake-up
// preempts the program or its peer on a 2-core host, come ~500 times in
// that second (the spacing reaches progress_app_active_max_us); at 200 us
// they came 5,000 times, 10 % of a CPU for the thread on the test VM. The
// thread takes over within the spacing once the program stops. Fails when
// the default spacing stays at 200 us or a look-back that finds the
// program polling does not double it.
TEST(ProgramCalls, AProgramThatNeverPausesIsLookedAtAFewHundredTimesASecond) {
  LookBacks lb;
  const uint64_t start = 1'000'000, stop = start + 1'000'000'000;
  lb.Run(start, stop, [](uint64_t t, ProgramCalls& calls) {
    if (t % 1'000 == 0) calls.Posted(t);
    if (t % 1'000 == 500) calls.Polled(t);
    return false;
  });
  EXPECT_EQ(lb.takeovers, 0u);
  EXPECT_LE(lb.looks, 510u) << lb.looks;
  EXPECT_GE(lb.looks, 490u) << lb.looks;  // still looking, 2 ms apart
  lb.Run(stop, stop + 5'000'000, [](uint64_t, ProgramCalls&) { return false; });
  ASSERT_GE(lb.takeovers, 1u);
  EXPECT_LE(lb.first_takeover - stop, 2'000'000u) << lb.first_takeover - stop;
}

// An MPI rank bound to one CPU with the thread, in UCX's eager range: every
// 100 us it polls for 50 us, then makes no call for 40 us (UCX unpacks the
// 128 KiB of fragments one poll returned into the user's buffer), then polls again;
// every look-back preempts it for 9 us (two context switches). Taken over
// after app_active_us, as a program on a CPU of its own is, the thread polls
// for it in every such pause; with TakeOverAfterNs's shared-CPU threshold it
// never does, looks back ever more rarely (at most a fifth as often), and
// still takes over within
// shared_cpu_quiet_us and one spacing once the rank stops calling. Fails
// when TakeOverAfterNs ignores the shared CPU (takeovers every cycle) or
// applies it after a poll that took no received data (ib_write_lat), or
// when LookBackPacer::StandAside ignores its active_ns (the rank's pauses
// restart the spacing at app_active_us: several look-backs per message).
TEST(ProgramCalls, ARankWorkingBetweenItsPollsOnTheThreadsCpuIsNotTakenOver) {
  const ProgressConfig pc;
  EXPECT_EQ(TakeOverAfterNs(pc, false, 131'072), 20'000u);
  EXPECT_EQ(TakeOverAfterNs(pc, true, 131'072), 200'000u);
  EXPECT_EQ(TakeOverAfterNs(pc, true, kBusyRxBytes), 200'000u);
  // ib_write_lat pinned: its last poll took a send completion, then it spins on memory.
  EXPECT_EQ(TakeOverAfterNs(pc, true, 0), 20'000u);
  EXPECT_EQ(TakeOverAfterNs(pc, true, 2), 20'000u);  // ib_send_lat's 2 B messages
  ProgramCalls took;
  took.TookCompletions(131'072);
  EXPECT_EQ(took.last_rx_bytes(), 131'072u);
  took.TookCompletions(0);
  EXPECT_EQ(took.last_rx_bytes(), 0u);
  ProgressConfig low;
  low.shared_cpu_quiet_us = 5;
  EXPECT_EQ(TakeOverAfterNs(low, true, 131'072), 20'000u);  // never below app_active_us

  const uint64_t start = 1'000'000, stop = start + 10'000'000;
  auto rank = [&](uint64_t t, ProgramCalls& calls) {
    const uint64_t c = (t - start) % 100'000;
    if ((c < 50'000 || c >= 90'000) && c % 1'000 == 0) calls.Polled(t);
    return false;
  };
  LookBacks own, shared;
  own.preempt_ns = shared.preempt_ns = 9'000;
  own.take_over_ns = TakeOverAfterNs(pc, false, 131'072);
  shared.take_over_ns = TakeOverAfterNs(pc, true, 131'072);
  own.Run(start, stop, rank);
  shared.Run(start, stop, rank);
  EXPECT_GE(own.takeovers, 90u);  // ~one per cycle
  EXPECT_EQ(shared.takeovers, 0u);
  // Look-backs spaced up to app_active_max_us, not one per message (100 in the 10 ms).
  EXPECT_LE(shared.preemptions, 55u) << shared.preemptions << " " << own.preemptions;
  EXPECT_LE(shared.preemptions * 5, own.preemptions) << shared.preemptions << " " << own.preemptions;
  shared.Run(stop, stop + 5'000'000, [](uint64_t, ProgramCalls&) { return false; });
  ASSERT_GE(shared.takeovers, 1u);
  // Within shared_cpu_quiet_us and the spacing reached (at most app_active_max_us).
  EXPECT_LE(shared.first_takeover - stop, uint64_t{pc.shared_cpu_quiet_us + pc.app_active_max_us} * 1000)
      << shared.first_takeover - stop;
}

// A program that pauses between its calls until the thread delivers (it
// spins on memory: ib_write_lat) gets the thread app_active_us after its
// last call, in every pause, however long it has kept this up.
TEST(ProgramCalls, ThePauseOfAProgramSpinningOnMemoryIsTakenOverAfterAppActiveUs) {
  LookBacks lb;
  const uint64_t start = 1'000'000;
  uint64_t resume = 0, last_call = 0, worst = 0;
  lb.Run(start, start + 5'000'000, [&](uint64_t t, ProgramCalls& calls) {
    if (lb.last_takeover > last_call && resume == 0) {
      worst = std::max(worst, lb.last_takeover - last_call);
      resume = lb.last_takeover + 3'000;  // the delivery, and the program sees it
    }
    if (last_call == 0 || (resume != 0 && t >= resume)) {
      calls.Posted(t);  // its next message, then a poll for the send completion
      calls.Polled(t + 500);
      last_call = t + 500, resume = 0;
    }
    return false;
  });
  EXPECT_GE(lb.takeovers, 150u) << lb.takeovers;
  EXPECT_LE(worst, 21'000u) << worst;
}

// An MPI rank beside its own progress thread on one CPU: it polls every
// microsecond for 25 us, then works 15 us without a call (a pause just
// under app_active_us), over and over. A short-slice look-back preempts it
// for 9 us; one landing in the pause stretches it past app_active_us. Such
// a pause spans the look-back, so it does not start the spacing over: after
// progress_calm_lookbacks (4) look-backs the thread naps with the default
// slice and stops preempting the rank. Once the rank stops calling, the
// thread takes over at its slice end and takes the short slice back. Fails
// when a pause the look-back caused restarts the pacer (the streak never
// reaches 4 in a row: ~20 preemptions) and when calm() ignores the setting.
TEST(ProgramCalls, LookBacksBesideARankThatKeepsPollingStopPreemptingIt) {
  LookBacks lb(4);
  lb.preempt_ns = 9'000;
  lb.slice_ns = 3'000'000;
  const uint64_t start = 1'000'000, stop = start + 20'000'000;
  lb.Run(start, stop, [&](uint64_t t, ProgramCalls& calls) {
    const uint64_t c = (t - lb.frozen - start) % 40'000;
    if (c < 25'000 && c % 1'000 == 0) calls.Polled(t);
    return false;
  });
  EXPECT_EQ(lb.takeovers, 0u);
  EXPECT_EQ(lb.to_calm, 1u);
  EXPECT_EQ(lb.to_short, 0u);
  EXPECT_LE(lb.preemptions, 4u) << lb.preemptions;
  lb.Run(stop, stop + 5'000'000, [](uint64_t, ProgramCalls&) { return false; });
  ASSERT_GE(lb.takeovers, 1u);
  EXPECT_LE(lb.first_takeover - stop, 3'000'000u) << lb.first_takeover - stop;  // one slice, once
  EXPECT_EQ(lb.to_short, 1u);
  EXPECT_FALSE(lb.calm);
}

// A program that pauses every iteration (ib_write_lat: one poll, then a
// spin on memory) never gets the default slice: its hand-over stays
// app_active_us with the short slice's preemptions modelled.
TEST(ProgramCalls, AProgramThatPausesEveryIterationKeepsTheShortSlice) {
  LookBacks lb(4);
  lb.preempt_ns = 9'000;
  lb.slice_ns = 3'000'000;
  const uint64_t start = 1'000'000;
  uint64_t resume = 0, last_call = 0, worst = 0;
  lb.Run(start, start + 5'000'000, [&](uint64_t t, ProgramCalls& calls) {
    if (lb.last_takeover > last_call && resume == 0) {
      worst = std::max(worst, lb.last_takeover - last_call);
      resume = lb.last_takeover + 3'000;
    }
    if (last_call == 0 || (resume != 0 && t >= resume)) {
      calls.Posted(t);
      calls.Polled(t + 500);
      last_call = t + 500, resume = 0;
    }
    return false;
  });
  EXPECT_GE(lb.takeovers, 100u) << lb.takeovers;
  EXPECT_EQ(lb.to_calm, 0u);
  EXPECT_LE(worst, 21'000u) << worst;
}

// The program thread's CPU clock advanced for the whole 10 us up to `at`
// (it spins on memory): the reading a promotion needs
// (AutoSchedPolicy::NoteProgramCpu).
void SeenSpinning(AutoSchedPolicy& p, uint64_t at, uint64_t last_call) {
  p.NoteProgramCpu(at - 10'000, 1'000'000, last_call);
  p.NoteProgramCpu(at, 1'010'000, last_call);
}

// progress_sched=auto's decision (doc/verbs.md): SCHED_FIFO for a quiet
// program with sparse traffic, SCHED_OTHER once the program drives (its
// calls cover 3/4 of auto_drive_us) or packets stream; a program calling in
// bursts, and rates between the thresholds, keep the policy.
// A bulk receiver is the receiving end of a stream; a responder that answers
// each request is not, however fast; neither is a slow or silent device.
TEST(StreamGauge, ABulkReceiverIsAStreamARequestResponderIsNot) {
  StreamGauge g;
  uint64_t t = 1'000'000, rx = 0, tx = 0;
  const auto window = [&](uint64_t rx_n, uint64_t tx_n) {
    // Rounds spread over the window, the last one closing it.
    for (int i = 1; i <= 4; ++i) {
      t += StreamGauge::kWindowNs / 4;
      rx += rx_n / 4, tx += tx_n / 4;
      g.Note(t, rx, tx);
    }
  };
  g.Note(t, rx, tx);
  EXPECT_FALSE(g.receiving()) << "no window seen yet";
  window(4000, 240);  // ib_write_bw's server: 4 M msg/s, an ACK per ~16
  EXPECT_TRUE(g.receiving());
  EXPECT_FALSE(g.sending());
  window(240, 4000);  // its client: the sending end
  EXPECT_TRUE(g.sending());
  EXPECT_FALSE(g.receiving());
  window(400, 400);  // ib_read_lat's responder: one answer per request
  EXPECT_FALSE(g.receiving());
  EXPECT_FALSE(g.sending());
  window(4000, 240);
  EXPECT_TRUE(g.receiving());
  window(40, 0);  // under kMinPerMs: sparse
  EXPECT_FALSE(g.receiving());
  window(4000, 1200);  // a quarter or more sent back
  EXPECT_FALSE(g.receiving());
  window(200, 48);  // at the bounds
  EXPECT_TRUE(g.receiving());
  window(0, 0);  // silence
  EXPECT_FALSE(g.receiving());
  // A window's verdict waits for its end: a burst inside it changes nothing.
  g.Note(t + StreamGauge::kWindowNs / 2, rx + 4000, tx);
  EXPECT_FALSE(g.receiving());
}

TEST(AutoSchedPolicy, FifoForAQuietProgramOtherForADrivingOneOrAStream) {
  AutoSchedPolicy p(/*quiet_us=*/20, /*drive_us=*/1000);
  uint64_t now = 10'000'000, covered = 0;
  p.NoteCalls(now, covered);
  EXPECT_FALSE(p.WantFifo(false, now, 0, false)) << "a program that never calls leaves the work to the thread";
  EXPECT_FALSE(p.WantFifo(true, now, 0, false));
  SeenSpinning(p, now, now - 50'000);
  EXPECT_TRUE(p.WantFifo(false, now, now - 50'000, false)) << "called 50 us ago, idle device: FIFO";
  EXPECT_FALSE(p.WantFifo(false, now, now - AutoSchedPolicy::kTakesPartNs, false)) << "no call for 100 ms";
  EXPECT_FALSE(p.WantFifo(false, now, now - 50'000, true)) << "a thread in ibv_get_cq_event drives";
  EXPECT_FALSE(p.WantFifo(false, now, now - 5'000, false)) << "no promotion while the program calls";
  EXPECT_FALSE(p.WantFifo(false, now, now + 1'000, false)) << "a call stamped just after now";
  // ib_write_lat: calls cover half of each millisecond: FIFO stays FIFO.
  for (int i = 0; i < 3; ++i) {
    now += 1'000'000, covered += 500'000;
    p.NoteCalls(now, covered);
    EXPECT_FALSE(p.driving());
    EXPECT_TRUE(p.WantFifo(true, now, now - 1'000, false));
  }
  SeenSpinning(p, now + 30'000, now);
  EXPECT_TRUE(p.WantFifo(false, now + 30'000, now, false)) << "quiet for 30 us: promote";
  // A polling program (90 % covered, preempted now and then): demote once
  // kDriveWindows windows in a row were covered 3/4, each noticed as soon
  // as it is. Fewer (ib_write_lat polling through a stall of its peer) do
  // not.
  for (uint32_t i = 0; i < AutoSchedPolicy::kDriveWindows; ++i) {
    EXPECT_FALSE(p.driving()) << i;
    now += 800'000, covered += 760'000;
    p.NoteCalls(now, covered);
  }
  EXPECT_TRUE(p.driving());
  EXPECT_FALSE(p.WantFifo(true, now, now, false));
  p.Switched(false, now);
  // Preempted for half a window: still driving (coverage between 1/4 and
  // 3/4 keeps the verdict).
  now += 1'000'000, covered += 500'000;
  p.NoteCalls(now, covered);
  EXPECT_TRUE(p.driving());
  // It stops calling: not promoted while the last window says it drove, nor
  // within the hold after the demotion.
  EXPECT_FALSE(p.WantFifo(false, now + 100'000, now, false));
  now += 1'000'000;
  p.NoteCalls(now, covered += 100'000);  // 10 % covered: it stopped
  EXPECT_FALSE(p.driving());
  SeenSpinning(p, now, now - 1'000'000);
  EXPECT_TRUE(p.WantFifo(false, now, now - 1'000'000, false)) << "quiet, stopped, past the hold";
  {
    AutoSchedPolicy q(20, 1000);
    q.Switched(false, 50'000'000);
    EXPECT_FALSE(q.WantFifo(false, 51'000'000, 50'000'000, false)) << "within the hold after a demotion";
    SeenSpinning(q, 50'000'000 + AutoSchedPolicy::kHoldNs, 50'000'000);
    EXPECT_TRUE(q.WantFifo(false, 50'000'000 + AutoSchedPolicy::kHoldNs, 50'000'000, false));
  }
  // Rates: a stream (>= 200 packets in a millisecond) demotes, noticed
  // before the window ends; a rate between the thresholds keeps the policy.
  uint64_t rx = 1000;
  p.NoteRx(now, rx, rx);
  rx += 250;
  p.NoteRx(now + 400'000, rx, rx);
  EXPECT_TRUE(p.dense());
  EXPECT_FALSE(p.WantFifo(true, now + 400'000, now, false)) << "a stream: OTHER";
  p.Switched(false, now + 400'000);
  now += 400'000;
  rx += 100;
  p.NoteRx(now + 1'000'000, rx, rx);  // 100 a millisecond: between the thresholds
  now += 1'000'000;
  EXPECT_FALSE(p.dense());
  EXPECT_FALSE(p.sparse());
  EXPECT_TRUE(p.WantFifo(true, now + 3'000'000, now, false)) << "FIFO keeps FIFO";
  EXPECT_FALSE(p.WantFifo(false, now + 3'000'000, now, false)) << "OTHER keeps OTHER";
  rx += 20;
  p.NoteRx(now + 1'000'000, rx, rx);  // 20 a millisecond: sparse
  EXPECT_TRUE(p.sparse());
  SeenSpinning(p, now + 3'000'000, now);
  EXPECT_TRUE(p.WantFifo(false, now + 3'000'000, now, false));
  // Who received them: the program all of them itself (both programs poll,
  // ibv_rc_pingpong) -> not relied on: no SCHED_FIFO, and a SCHED_FIFO
  // thread leaves it; the thread a third of them (ib_write_lat) -> relied on.
  now += 2'000'000;
  const uint64_t mine = rx;
  p.NoteRx(now, rx += 30, mine);  // the thread received none of 30
  EXPECT_FALSE(p.relied_on());
  EXPECT_FALSE(p.WantFifo(false, now + 3'000'000, now, false));
  EXPECT_FALSE(p.WantFifo(true, now + 3'000'000, now, false));
  now += 1'000'000;
  p.NoteRx(now, rx += 30, mine + 5);  // 5 of 30: between a tenth and a quarter, the verdict stands
  EXPECT_FALSE(p.relied_on());
  now += 1'000'000;
  p.NoteRx(now, rx += 30, mine + 15);  // 10 of 30
  EXPECT_TRUE(p.relied_on());
  SeenSpinning(p, now + 3'000'000, now);
  EXPECT_TRUE(p.WantFifo(false, now + 3'000'000, now, false));
}

// The churn guard: a promotion needs the program seen running
// without calls for at least half of its quiet time since the previous
// reading of its CPU clock. ibv_rc_pingpong polls without a break, so its
// only pauses are preemptions: a real-time thread taken then preempts it
// again as soon as it runs (~500 us per iteration in half the runs).
TEST(AutoSchedPolicy, PromotesOnlyForAProgramThatRunsWithoutCalling) {
  AutoSchedPolicy p(/*quiet_us=*/20, /*drive_us=*/1000);
  uint64_t now = 10'000'000, cpu = 5'000'000;
  const uint64_t last = now - 50'000;  // called 50 us ago, idle device: everything else says FIFO
  EXPECT_TRUE(p.Eligible(now, last, false));
  EXPECT_FALSE(p.WantFifo(false, now, last, false)) << "never read: not spinning";
  p.NoteProgramCpu(now, cpu, last);
  EXPECT_FALSE(p.spinning()) << "a first reading says nothing";
  EXPECT_FALSE(p.WantFifo(false, now, last, false));
  // Preempted (or blocked): its clock stands still for 30 us.
  now += 30'000;
  p.NoteProgramCpu(now, cpu, last);
  EXPECT_FALSE(p.spinning());
  EXPECT_TRUE(p.Eligible(now, last, false));
  EXPECT_FALSE(p.WantFifo(false, now, last, false)) << "quiet because it does not run: no SCHED_FIFO";
  // Spinning on memory: ran all 10 us; or 6 of 10 (it shares its CPU with
  // this thread or another): SCHED_FIFO.
  now += 10'000, cpu += 10'000;
  p.NoteProgramCpu(now, cpu, last);
  EXPECT_TRUE(p.spinning());
  EXPECT_TRUE(p.WantFifo(false, now, last, false));
  now += 10'000, cpu += 6'000;
  p.NoteProgramCpu(now, cpu, last);
  EXPECT_TRUE(p.WantFifo(false, now, last, false));
  // Ran 4 of 10: not.
  now += 10'000, cpu += 4'000;
  p.NoteProgramCpu(now, cpu, last);
  EXPECT_FALSE(p.WantFifo(false, now, last, false));
  // Polled (a reading while it called, as before a stand-aside nap) for
  // 100 us, then preempted right after its last call: its clock advanced
  // only while it called. Not spinning.
  now += 1'000, cpu += 1'000;
  p.NoteProgramCpu(now, cpu, now - 500);
  const uint64_t last2 = now + 100'000;
  now = last2 + 30'000, cpu += 100'000;
  p.NoteProgramCpu(now, cpu, last2);
  EXPECT_FALSE(p.spinning()) << "preempted after its last poll";
  EXPECT_FALSE(p.WantFifo(false, now, last2, false));
  // The same, but it kept running after its last poll (ib_write_lat polls
  // for its completion, then spins on memory): spinning.
  const uint64_t last3 = now + 100'000;
  now = last3 + 30'000, cpu += 130'000;
  p.NoteProgramCpu(now, cpu, last3);
  EXPECT_TRUE(p.WantFifo(false, now, last3, false));
  // A clock that went back (another thread called last), and an unreadable
  // one (the thread exited): not spinning, the next reading starts afresh.
  now += 10'000;
  p.NoteProgramCpu(now, cpu - 1'000, last3);
  EXPECT_FALSE(p.spinning());
  p.ProgramCpuUnknown();
  now += 10'000;
  p.NoteProgramCpu(now, cpu + 50'000, last3);
  EXPECT_FALSE(p.spinning()) << "a first reading again";
  // A SCHED_FIFO thread's stay does not depend on it (a program's poll
  // demotes it).
  EXPECT_TRUE(p.WantFifo(true, now, last3, false));
}

}  // namespace
}  // namespace droce::verbs
