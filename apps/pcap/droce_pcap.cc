// droce-pcap: check, dump and replay RoCEv2 captures.
//
//   droce-pcap check FILE...                      parse + ICRC every full-length packet
//   droce-pcap dump FILE                          one decoded line per packet
//   droce-pcap replay --responder|--requester FILE...
//                                                 replay against a droce responder/requester
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sim/replay/replay.h"
#include "drivers/pcap/pcap_io.h"
#include "wire/fields.h"
#include "wire/packet.h"

namespace {

using namespace droce;

constexpr const char kUsage[] =
    "usage: droce-pcap check FILE...\n"
    "       droce-pcap dump FILE\n"
    "       droce-pcap replay --responder|--requester FILE...\n"
    "\n"
    "check   parses every packet, verifies the ICRC of every full-length RoCEv2 packet and prints\n"
    "        one summary line per file; exits 1 if any full-length RoCEv2 packet is malformed or\n"
    "        has a bad ICRC (packets cut by the capture's snaplen are counted as truncated)\n"
    "dump    prints one decoded line per packet\n"
    "replay  feeds a capture's requests (--responder) or responses (--requester) to droce and\n"
    "        compares droce's packets with the ones Linux rxe sent (doc/replay.md); exits 1 on\n"
    "        any difference\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "droce-pcap: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

std::optional<pcapio::PcapReader> OpenOrReport(const std::string& path) {
  auto reader = pcapio::PcapReader::Open(path);
  if (!reader.ok()) {
    std::fprintf(stderr, "droce-pcap: %s\n", std::string(reader.status().message()).c_str());
    return std::nullopt;
  }
  return std::move(*reader);
}

int Check(const std::vector<std::string>& files) {
  bool failed = false;
  for (const std::string& path : files) {
    auto reader = OpenOrReport(path);
    if (!reader) {
      failed = true;
      continue;
    }
    unsigned long long packets = 0, roce = 0, ok = 0, bad_icrc = 0, malformed = 0, truncated = 0, foreign = 0;
    std::map<std::string, uint64_t> histogram;
    std::vector<std::string> problems;
    while (auto pkt = reader->Next()) {
      ++packets;
      const uint32_t caplen = pkt->caplen;
      if (pkt->truncated()) {
        const wire::ParsedPacket h = wire::ParseHeaders(pkt->data, caplen);
        if (wire::IsForeign(h.status)) {
          ++foreign;
          continue;
        }
        ++roce;
        ++truncated;
        if (h.ok()) ++histogram[h.op().name];
        continue;
      }
      const wire::ParsedPacket p = wire::ParseAndVerify(pkt->data, caplen);
      if (wire::IsForeign(p.status)) {
        ++foreign;
        continue;
      }
      ++roce;
      if (p.ok()) {
        ++ok;
        ++histogram[p.op().name];
      } else if (p.status == wire::ParseStatus::kBadIcrc) {
        ++bad_icrc;
        problems.push_back(absl::StrFormat("packet %u: bad ICRC", packets));
      } else {
        ++malformed;
        problems.push_back(absl::StrFormat("packet %u: %s", packets, wire::ParseStatusName(p.status)));
      }
    }
    if (!reader->status().ok()) {
      std::fprintf(stderr, "droce-pcap: %s\n", std::string(reader->status().message()).c_str());
      failed = true;
    }
    std::string ops;
    for (const auto& [name, n] : histogram) absl::StrAppendFormat(&ops, " %s=%u", name, n);
    const bool file_ok = bad_icrc == 0 && malformed == 0;
    std::printf("%s: %s packets=%llu roce=%llu icrc_ok=%llu icrc_bad=%llu malformed=%llu truncated=%llu foreign=%llu |%s\n",
                path.c_str(), file_ok ? "OK" : "FAIL", packets, roce, ok, bad_icrc, malformed, truncated,
                foreign, ops.c_str());
    for (size_t i = 0; i < problems.size() && i < 20; ++i) std::printf("  %s\n", problems[i].c_str());
    failed |= !file_ok;
  }
  return failed ? 1 : 0;
}

int Dump(const std::string& path) {
  auto reader = OpenOrReport(path);
  if (!reader) return 1;
  unsigned long long n = 0;
  std::vector<uint8_t> padded;
  while (auto pkt = reader->Next()) {
    ++n;
    if (pkt->truncated()) {
      const wire::ParsedPacket h = wire::ParseHeaders(pkt->data, pkt->caplen);
      if (!h.ok()) {
        std::printf("%llu: %s (cut at %u of %u bytes)\n", n, wire::ParseStatusName(h.status), pkt->caplen, pkt->len);
        continue;
      }
      // Headers are all present; the payload and ICRC were not captured.
      padded.assign(pkt->len, 0);
      std::memcpy(padded.data(), pkt->data, pkt->caplen);
      std::printf("%llu: %s (cut at %u of %u bytes)\n", n, wire::DescribePacket(padded.data(), h).c_str(),
                  pkt->caplen, pkt->len);
      continue;
    }
    const wire::ParsedPacket p = wire::ParseAndVerify(pkt->data, pkt->caplen);
    if (p.ok()) {
      std::printf("%llu: %s\n", n, wire::DescribePacket(pkt->data, p).c_str());
    } else if (p.status == wire::ParseStatus::kBadIcrc) {
      std::printf("%llu: %s BAD-ICRC\n", n,
                  wire::DescribePacket(pkt->data, wire::ParsePacket(pkt->data, pkt->caplen)).c_str());
    } else {
      std::printf("%llu: %s (%u bytes)\n", n, wire::ParseStatusName(p.status), pkt->caplen);
    }
  }
  if (!reader->status().ok()) {
    std::fprintf(stderr, "droce-pcap: %s\n", std::string(reader->status().message()).c_str());
    return 1;
  }
  return 0;
}

int Replay(bool requester, const std::vector<std::string>& files) {
  bool failed = false;
  for (const std::string& path : files) {
    auto reader = OpenOrReport(path);
    if (!reader) {
      failed = true;
      continue;
    }
    std::vector<sim::CapturedFrame> frames;
    while (auto pkt = reader->Next()) {
      frames.push_back({std::vector<uint8_t>(pkt->data, pkt->data + pkt->caplen), pkt->len});
    }
    const auto results = requester ? sim::ReplayRequester(frames) : sim::ReplayResponder(frames);
    for (const sim::ReplayResult& r : results) {
      if (r.skipped) {
        std::printf("%s: SKIP (%s)\n", path.c_str(), r.skip_reason.c_str());
        continue;
      }
      std::printf("%s: %s %s mtu=%u fed=%u rxe=%u droce=%u\n", path.c_str(),
                  r.equivalent() ? "EQUIVALENT" : "DIFFERENT", r.direction.c_str(), r.mtu, r.requests_fed,
                  r.reference_responses, r.droce_responses);
      for (const std::string& m : r.mismatches) std::printf("  %s\n", m.c_str());
      failed |= !r.equivalent();
    }
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return UsageError("missing command");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "check") {
    if (args.empty()) return UsageError("check needs at least one FILE");
    return Check(args);
  }
  if (cmd == "dump") {
    if (args.size() != 1) return UsageError("dump takes exactly one FILE");
    return Dump(args[0]);
  }
  if (cmd == "replay") {
    if (args.empty() || (args[0] != "--responder" && args[0] != "--requester")) {
      return UsageError("replay needs --responder or --requester");
    }
    const bool requester = args[0] == "--requester";
    args.erase(args.begin());
    if (args.empty()) return UsageError("replay needs at least one FILE");
    return Replay(requester, args);
  }
  return UsageError("unknown command '" + cmd + "'");
}
