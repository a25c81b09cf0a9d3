#include "apps/droced/uplink_spec.h"

#include <gtest/gtest.h>

namespace droce::droced {
namespace {

TEST(UplinkSpec, Memif) {
  auto u = ParseUplinkSpec("memif:/tmp/a/up.sock:server");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->kind, UplinkSpec::Kind::kMemif);
  EXPECT_TRUE(u->server);
  EXPECT_EQ(u->socket, "/tmp/a/up.sock");
  EXPECT_EQ(u->port, "net_memif_uplink");
  EXPECT_EQ(u->vdev, "net_memif_uplink,role=server,id=0,socket=/tmp/a/up.sock,socket-abstract=no,bsize=10240");
  EXPECT_EQ(u->describe(), "memif /tmp/a/up.sock (server)");
  u = ParseUplinkSpec("memif:/tmp/a/up.sock:client");
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(u->server);
}

TEST(UplinkSpec, VdevAndPci) {
  auto u = ParseUplinkSpec("vdev:net_af_packet_up,iface=veth0,framesz=4096");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->kind, UplinkSpec::Kind::kVdev);
  EXPECT_EQ(u->port, "net_af_packet_up");
  EXPECT_EQ(u->vdev, "net_af_packet_up,iface=veth0,framesz=4096");
  u = ParseUplinkSpec("pci:0000:03:00.1");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->kind, UplinkSpec::Kind::kPci);
  EXPECT_EQ(u->port, "0000:03:00.1");
  u = ParseUplinkSpec("pci:0000:af:00.0,rxq_cqe_comp_en=0");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->port, "0000:af:00.0");
  EXPECT_EQ(u->vdev, "0000:af:00.0,rxq_cqe_comp_en=0");
}

TEST(UplinkSpec, RefusesWithAReason) {
  struct Case {
    const char* spec;
    const char* why;
  } cases[] = {
      {"", "unknown kind"},
      {"tcp:1.2.3.4", "unknown kind"},
      {"memif", "unknown kind"},
      {"memif:", "memif needs SOCKET and a role"},
      {"memif:/tmp/x.sock", "memif needs SOCKET and a role"},
      {"memif:/tmp/x.sock:master", "role is server or client"},
      {"memif:relative.sock:server", "absolute path"},
      {"memif::server", "absolute path"},
      {"memif:/tmp/x.sock,id=3:server", "must not contain ','"},
      {"memif:/tmp/a b.sock:client", "must not contain"},
      {"vdev:", "needs a device name"},
      {"vdev:,iface=x", "needs a device name"},
      {"vdev:af_packet0,iface=x", "starts with its driver"},
      {"vdev:net_x/y", "letters, digits and _"},
      {"vdev:net_tap0,iface=a b", "spaces or quotes"},
      {"pci:", "DDDD:BB:DD.F"},
      {"pci:03:00.0", "DDDD:BB:DD.F"},
      {"pci:0000:03:00.8", "DDDD:BB:DD.F"},
      {"pci:0000:0g:00.0", "DDDD:BB:DD.F"},
  };
  for (const Case& c : cases) {
    auto u = ParseUplinkSpec(c.spec);
    ASSERT_FALSE(u.ok()) << c.spec;
    EXPECT_NE(u.status().message().find(c.why), std::string::npos) << c.spec << ": " << u.status().message();
    EXPECT_NE(u.status().message().find(std::string("bad uplink '") + c.spec + "'"), std::string::npos);
  }
  // 107 bytes fit sun_path, 108 do not.
  EXPECT_TRUE(ParseUplinkSpec("memif:/" + std::string(106, 'a') + ":server").ok());
  EXPECT_FALSE(ParseUplinkSpec("memif:/" + std::string(107, 'a') + ":server").ok());
}

}  // namespace
}  // namespace droce::droced
