// Golden tests over the reference captures of Linux rxe traffic: every
// full-length packet parses, verifies its ICRC and re-serialises byte for
// byte from its decoded fields; packets cut by the snaplen still decode
// their headers; each file holds the packet count its README states.
#include <dirent.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "drivers/pcap/pcap_io.h"
#include "wire/fields.h"
#include "wire/packet.h"

namespace droce {
namespace {

std::string Dir() {
  const char* d = std::getenv("DROCE_PCAP_DIR");
  return d ? d : "tests/data/pcaps";
}

// "name.pcap  (bytes, N packets, snaplen S)" lines of the captures' README.
std::vector<std::pair<std::string, uint64_t>> ReadmeCounts() {
  std::ifstream in(Dir() + "/README.md");
  std::vector<std::pair<std::string, uint64_t>> out;
  const std::regex line(R"(^(\S+\.pcap)\s+\(\d+ bytes, (\d+) packets)");
  for (std::string s; std::getline(in, s);) {
    std::smatch m;
    if (std::regex_search(s, m, line)) out.emplace_back(m[1], std::stoull(m[2]));
  }
  return out;
}

TEST(Golden, EveryPacketParsesVerifiesAndReserialises) {
  const auto files = ReadmeCounts();
  ASSERT_EQ(files.size(), 22u) << "README of " << Dir() << " not found or changed";
  uint64_t full = 0, cut = 0;
  for (const auto& [name, expected] : files) {
    auto reader = pcapio::PcapReader::Open(Dir() + "/" + name);
    ASSERT_TRUE(reader.ok()) << reader.status();
    uint64_t n = 0;
    while (auto pkt = reader->Next()) {
      ++n;
      if (pkt->truncated()) {
        const wire::ParsedPacket h = wire::ParseHeaders(pkt->data, pkt->caplen);
        EXPECT_TRUE(h.ok()) << name << " packet " << n << ": " << wire::ParseStatusName(h.status);
        ++cut;
        continue;
      }
      const wire::ParsedPacket p = wire::ParseAndVerify(pkt->data, pkt->caplen);
      ASSERT_TRUE(p.ok()) << name << " packet " << n << ": " << wire::ParseStatusName(p.status);
      const wire::PacketFields f = wire::DecodeFields(pkt->data, p);
      std::vector<uint8_t> out(pkt->caplen + 128);
      auto len = wire::SerializeFields(f, out.data(), static_cast<uint32_t>(out.size()));
      ASSERT_TRUE(len.ok()) << name << " packet " << n << ": " << len.status();
      ASSERT_EQ(*len, p.end()) << name << " packet " << n;
      ASSERT_EQ(std::memcmp(out.data(), pkt->data, *len), 0) << name << " packet " << n << " re-serialised differently";
      ++full;
    }
    EXPECT_EQ(n, expected) << name;
  }
  EXPECT_GT(full, 3000u);
  EXPECT_GT(cut, 9000u);
}

}  // namespace
}  // namespace droce
