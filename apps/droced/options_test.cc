// droced's option table: every option in the usage, defaults, the
// environment's defaults and the command line over them, and each kind of bad
// input refused with a message naming the option or variable.
#include "apps/droced/options.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace droce::droced {
namespace {

absl::StatusOr<DaemonOptions> Parse(const std::string& line, std::map<std::string, std::string> env = {}) {
  std::vector<std::string> args;
  if (!line.empty()) args = absl::StrSplit(line, ' ');
  return ParseDaemonOptions(args, "/run/droce", [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

std::string Error(const std::string& line, std::map<std::string, std::string> env = {}) {
  absl::StatusOr<DaemonOptions> o = Parse(line, std::move(env));
  return o.ok() ? "(accepted)" : std::string(o.status().message());
}

TEST(DrocedOptions, Defaults) {
  const DaemonOptions o = *Parse("");
  EXPECT_EQ(o.run_dir, "/run/droce");
  EXPECT_FALSE(o.foreground);
  EXPECT_FALSE(o.busy_poll);
  EXPECT_EQ(o.busy_window_us, 0u);
  EXPECT_TRUE(o.realtime);
  EXPECT_TRUE(o.direct);
  EXPECT_EQ(o.ring_slots, 64u);
  EXPECT_EQ(o.link_slots, 512u);
  EXPECT_EQ(o.memory_mb, 256u);
  EXPECT_FALSE(o.hugepages);
  EXPECT_TRUE(o.eal_args.empty());
  EXPECT_FALSE(o.uplink.has_value());
}

TEST(DrocedOptions, EveryOptionSetsItsField) {
  const DaemonOptions o = *Parse(
      "--run-dir /tmp/a --foreground --memory-mb 512 --busy-poll --busy-window-us 50 --no-realtime --no-direct "
      "--ring-slots 1024 --link-slots 64 --uplink memif:/tmp/a/up.sock:server --hugepages --eal --log-level=8");
  EXPECT_EQ(o.run_dir, "/tmp/a");
  EXPECT_TRUE(o.foreground);
  EXPECT_EQ(o.memory_mb, 512u);
  EXPECT_TRUE(o.busy_poll);
  EXPECT_EQ(o.busy_window_us, 50u);
  EXPECT_FALSE(o.realtime);
  EXPECT_FALSE(o.direct);
  EXPECT_EQ(o.ring_slots, 1024u);
  EXPECT_EQ(o.link_slots, 64u);
  ASSERT_TRUE(o.uplink.has_value());
  EXPECT_EQ(o.uplink->kind, UplinkSpec::Kind::kMemif);
  EXPECT_TRUE(o.uplink->server);
  EXPECT_TRUE(o.hugepages);
  EXPECT_EQ(o.eal_args, std::vector<std::string>{"--log-level=8"});
}

TEST(DrocedOptions, TheEnvironmentGivesDefaultsTheCommandLineWins) {
  std::map<std::string, std::string> env = {
      {"DROCED_BUSY_WINDOW_US", "20"},
      {"DROCED_DIRECT", "0"},
      {"DROCED_UPLINK", "memif:/tmp/u.sock:client"},
      {"DROCED_RING_SLOTS", "32"}};
  DaemonOptions o = *Parse("", env);
  EXPECT_EQ(o.busy_window_us, 20u);
  EXPECT_EQ(o.ring_slots, 32u);
  EXPECT_FALSE(o.direct);
  ASSERT_TRUE(o.uplink.has_value());
  EXPECT_FALSE(o.uplink->server);
  o = *Parse("--busy-window-us 7 --uplink memif:/tmp/v.sock:server --ring-slots 64", env);
  EXPECT_EQ(o.busy_window_us, 7u);
  EXPECT_EQ(o.ring_slots, 64u);
  EXPECT_TRUE(o.uplink->server);
  EXPECT_TRUE(Parse("", {{"DROCED_DIRECT", "1"}})->direct);
  EXPECT_FALSE(Parse("", {{"DROCED_UPLINK", ""}})->uplink.has_value());  // set but empty: none
}

TEST(DrocedOptions, BadInputNamesTheOptionOrVariable) {
  EXPECT_EQ(Error("--memory-mb lots"), "--memory-mb must be an integer in [64, 65536], not 'lots'");
  EXPECT_EQ(Error("--memory-mb 0"), "--memory-mb must be an integer in [64, 65536], not '0'");
  EXPECT_EQ(Error("--busy-window-us -5"), "--busy-window-us must be an integer in [0, 1000000], not '-5'");
  EXPECT_EQ(Error("--ring-slots 300"), "--ring-slots: a power of two, 2..65536, not '300'");
  EXPECT_EQ(Error("--link-slots 1"), "--link-slots must be an integer in [2, 65536], not '1'");
  EXPECT_EQ(Error("--ring-slots 99999999999999999999"),
            "--ring-slots must be an integer in [2, 65536], not '99999999999999999999'");
  EXPECT_NE(Error("--uplink tcp:1.2.3.4").find("--uplink: "), std::string::npos);
  EXPECT_EQ(Error("--run-dir"), "missing value for --run-dir");
  EXPECT_EQ(Error("--run-dir "), "--run-dir must not be empty");
  EXPECT_EQ(Error("--frobnicate"), "unknown option --frobnicate (droced --help lists the options)");
  EXPECT_EQ(Error("stray"), "unexpected argument 'stray' (droced --help lists the options)");
  EXPECT_EQ(Error("", {{"DROCED_BUSY_WINDOW_US", "soon"}}),
            "DROCED_BUSY_WINDOW_US must be an integer in [0, 1000000], not 'soon'");
  EXPECT_EQ(Error("", {{"DROCED_DIRECT", "yes"}}), "DROCED_DIRECT must be 0 or 1, not 'yes'");
  EXPECT_EQ(Error("", {{"DROCED_RING_SLOTS", "48"}}), "DROCED_RING_SLOTS: a power of two, 2..65536, not '48'");
  EXPECT_NE(Error("", {{"DROCED_UPLINK", "memif:"}}).find("DROCED_UPLINK: "), std::string::npos);
}

TEST(DrocedOptions, TheUsageListsEveryOption) {
  const std::string usage = DaemonUsage();
  for (const char* name : {"--run-dir", "--foreground", "--memory-mb", "--busy-poll", "--busy-window-us",
                           "--no-realtime", "--no-direct", "--ring-slots", "--link-slots", "--uplink", "--hugepages",
                           "--eal"}) {
    EXPECT_NE(usage.find(std::string("  ") + name), std::string::npos) << name;
  }
  EXPECT_TRUE(DaemonWantsHelp({"--foreground", "-h"}));
  EXPECT_FALSE(DaemonWantsHelp({"--foreground"}));
}

}  // namespace
}  // namespace droce::droced
