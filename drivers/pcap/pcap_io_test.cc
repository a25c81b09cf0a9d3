#include "drivers/pcap/pcap_io.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace droce::pcapio {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string base = dir != nullptr ? dir : "/tmp";
  return base + "/droce_pcapio_" + std::to_string(::getpid()) + "_" + name;
}

TEST(PcapIo, WriteThenReadBack) {
  const std::string path = TempPath("rt.pcap");
  {
    absl::StatusOr<PcapWriter> w = PcapWriter::Create(path, 100);
    ASSERT_TRUE(w.ok()) << w.status();
    std::vector<uint8_t> a(60, 0xAB), b(300, 0xCD);
    ASSERT_TRUE(w->Write(a, 1'500'000'123'000).ok());
    ASSERT_TRUE(w->Write(b, 1'500'000'124'000).ok());
    EXPECT_EQ(w->packets_written(), 2u);
    ASSERT_TRUE(w->Close().ok());
  }
  absl::StatusOr<PcapReader> r = PcapReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->link_type(), kLinkTypeEthernet);
  EXPECT_EQ(r->snaplen(), 100u);
  std::optional<PcapPacket> p = r->Next();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->caplen, 60u);
  EXPECT_EQ(p->len, 60u);
  EXPECT_FALSE(p->truncated());
  EXPECT_EQ(p->data[59], 0xAB);
  EXPECT_EQ(p->ts_ns, 1'500'000'123'000);  // microsecond file: ns rounded to us
  p = r->Next();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->caplen, 100u);  // cut to the snaplen
  EXPECT_EQ(p->len, 300u);
  EXPECT_TRUE(p->truncated());
  EXPECT_FALSE(r->Next().has_value());
  EXPECT_TRUE(r->status().ok());
  std::remove(path.c_str());
}

TEST(PcapIo, MissingFileIsNotFound) {
  absl::StatusOr<PcapReader> r = PcapReader::Open("/nonexistent/droce/x.pcap");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/droce/x.pcap"), std::string::npos);
  EXPECT_FALSE(ReadAll("/nonexistent/droce/x.pcap").ok());
}

TEST(PcapIo, GarbageFileIsInvalidArgument) {
  const std::string path = TempPath("garbage.pcap");
  std::ofstream(path) << "this is not a capture file at all";
  absl::StatusOr<PcapReader> r = PcapReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(path.c_str());
}

TEST(PcapIo, CreateInMissingDirectoryFails) {
  EXPECT_FALSE(PcapWriter::Create("/nonexistent/droce/out.pcap").ok());
}

TEST(PcapIo, ReadsReferenceCapture) {
  const char* dir = std::getenv("DROCE_PCAP_DIR");
  ASSERT_NE(dir, nullptr) << "DROCE_PCAP_DIR must name the reference captures (meson test sets it)";
  absl::StatusOr<std::vector<OwnedPacket>> pkts =
      ReadAll(std::string(dir) + "/rc_pingpong_small_mtu1024.pcap");
  ASSERT_TRUE(pkts.ok()) << pkts.status();
  EXPECT_EQ(pkts->size(), 22u);
  for (const OwnedPacket& p : *pkts) {
    EXPECT_FALSE(p.truncated());
    EXPECT_GT(p.ts_ns, 0);
  }
}

}  // namespace
}  // namespace droce::pcapio
