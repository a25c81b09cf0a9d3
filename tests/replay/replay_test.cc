// Golden replay: every full-length RC reference capture, fed to a droce
// responder, must produce responses equivalent to rxe's (doc/replay.md).
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sim/replay/replay.h"
#include "drivers/pcap/pcap_io.h"
#include "wire/fields.h"

namespace droce::sim {
namespace {

std::string CaptureDir() {
  const char* d = std::getenv("DROCE_PCAP_DIR");
  return d ? d : "tests/data/pcaps";
}

std::vector<std::string> Captures() {
  std::vector<std::string> out;
  if (DIR* dir = opendir(CaptureDir().c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name.size() > 5 && name.substr(name.size() - 5) == ".pcap") out.push_back(name);
    }
    closedir(dir);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<CapturedFrame> Load(const std::string& name) {
  auto reader = pcapio::PcapReader::Open(CaptureDir() + "/" + name);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<CapturedFrame> frames;
  if (!reader.ok()) return frames;
  while (auto p = reader->Next()) frames.push_back({std::vector<uint8_t>(p->data, p->data + p->caplen), p->len});
  return frames;
}

class ReplayBothWays : public ::testing::TestWithParam<bool> {};

TEST_P(ReplayBothWays, EveryApplicableCaptureIsEquivalent) {
  const bool requester = GetParam();
  const auto captures = Captures();
  ASSERT_GE(captures.size(), 20u) << "reference captures not found in " << CaptureDir();
  int equivalent = 0, skipped = 0;
  for (const std::string& name : captures) {
    const auto frames = Load(name);
    const auto results = requester ? ReplayRequester(frames) : ReplayResponder(frames);
    ASSERT_FALSE(results.empty()) << name;
    for (const ReplayResult& r : results) {
      if (r.skipped) {
        ++skipped;
        // Only captures we cannot replay may be skipped, for the documented reasons.
        const bool snap = name.find("snap256") != std::string::npos;
        const bool uc = name.rfind("uc_", 0) == 0;
        EXPECT_TRUE(snap || uc) << name << " skipped: " << r.skip_reason;
        continue;
      }
      ++equivalent;
      std::string why;
      for (const auto& m : r.mismatches) why += "\n  " + m;
      EXPECT_TRUE(r.equivalent()) << name << " [" << r.direction << "]" << why;
      EXPECT_GT(r.reference_responses, 0u) << name;
    }
  }
  EXPECT_GE(equivalent, 15);
  EXPECT_EQ(skipped, 5);  // four snaplen-256 captures and UC
}

INSTANTIATE_TEST_SUITE_P(Modes, ReplayBothWays, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Requester" : "Responder"; });

// rxe_ops sends SEND and WRITE with immediates htonl(0xA0000000 + i): the
// bytes a0 00 00 0i on the wire must reach droce's receive completion (what
// ibv_wc.imm_data holds) unchanged, byte for byte.
TEST(Replay, ImmediatesReachTheCompletionByteForByte) {
  for (const char* name : {"rc_ops_imm_zero_pad_mtu1024.pcap", "rc_ops_mtu4096.pcap", "rc_ops_rnr_nak_mtu1024.pcap"}) {
    const auto frames = Load(name);
    uint32_t carried = 0;  // distinct first transmissions with ImmDt
    std::vector<uint32_t> seen;
    for (const CapturedFrame& f : frames) {
      const wire::ParsedPacket p = wire::ParseAndVerify(f.bytes.data(), static_cast<uint32_t>(f.bytes.size()));
      if (!p.ok() || !p.op().Has(wire::kHdrImmDt)) continue;
      const uint8_t* imm = f.bytes.data() + p.bth_offset + p.op().immdt_offset;
      EXPECT_EQ(imm[0], 0xA0) << name;  // the capture's orientation: htonl(0xA000000i)
      const uint32_t psn = wire::BthView(f.bytes.data() + p.bth_offset).psn();
      if (std::find(seen.begin(), seen.end(), psn) == seen.end()) {
        seen.push_back(psn);
        ++carried;
      }
    }
    ASSERT_EQ(carried, 4u) << name;
    uint32_t checked = 0;
    for (const ReplayResult& r : ReplayResponder(frames)) {
      std::string why;
      for (const auto& m : r.mismatches) why += "\n  " + m;
      EXPECT_TRUE(r.equivalent()) << name << why;
      checked += r.immediates_checked;
    }
    EXPECT_EQ(checked, carried) << name;
  }
}

// Requester mode must notice when droce's requests or completions would
// differ: rxe "sent" a last packet without AckReq, or "answered" with a NAK.
void Rewrite(CapturedFrame& f, const std::function<void(wire::PacketFields&)>& change) {
  const wire::ParsedPacket p = wire::ParseAndVerify(f.bytes.data(), static_cast<uint32_t>(f.bytes.size()));
  wire::PacketFields fields = wire::DecodeFields(f.bytes.data(), p);
  change(fields);
  std::vector<uint8_t> out(f.bytes.size() + 128);
  auto n = wire::SerializeFields(fields, out.data(), static_cast<uint32_t>(out.size()));
  ASSERT_TRUE(n.ok());
  out.resize(*n);
  f.bytes = out;
  f.wire_len = *n;
}

TEST(Replay, RequesterDetectsDifferences) {
  for (int variant = 0; variant < 2; ++variant) {
    auto frames = Load("rc_ops_imm_zero_pad_mtu1024.pcap");
    for (CapturedFrame& f : frames) {
      const wire::ParsedPacket p = wire::ParseAndVerify(f.bytes.data(), static_cast<uint32_t>(f.bytes.size()));
      if (!p.ok()) continue;
      const wire::OpcodeInfo& op = p.op();
      if (variant == 0 && (op.roles & wire::kRoleRequest) && (op.roles & wire::kRoleLast)) {
        Rewrite(f, [](wire::PacketFields& x) { x.bth.ack_req = false; });
        break;
      }
      if (variant == 1 && p.opcode == wire::kRcAcknowledge) {
        Rewrite(f, [](wire::PacketFields& x) {
          x.aeth_syndrome = wire::MakeSyndrome(wire::AethType::kNak, wire::kNakRemoteAccessError);
        });
        break;
      }
    }
    bool any_mismatch = false;
    for (const auto& r : ReplayRequester(frames)) any_mismatch |= !r.mismatches.empty();
    EXPECT_TRUE(any_mismatch) << (variant == 0 ? "a missing AckReq" : "a NAK") << " went unnoticed";
  }
}

// The comparison must be able to fail: tamper with rxe's side of a capture.
TEST(Replay, DetectsAWrongResponse) {
  for (const char* name : {"read_bw_4096_mtu1024.pcap", "rc_pingpong_small_mtu1024.pcap",
                           "atomic_cmpswap.pcap"}) {
    auto frames = Load(name);
    bool tampered = false;
    for (CapturedFrame& f : frames) {
      wire::ParsedPacket p = wire::ParseAndVerify(f.bytes.data(), static_cast<uint32_t>(f.bytes.size()));
      if (!p.ok() || !(p.op().roles & wire::kRoleResponse) || !p.op().Has(wire::kHdrAeth)) continue;
      Rewrite(f, [](wire::PacketFields& x) { x.aeth_msn += 1; });  // rxe "said" a different MSN
      tampered = true;
      break;
    }
    ASSERT_TRUE(tampered) << name;
    const auto results = ReplayResponder(frames);
    bool any_mismatch = false;
    for (const auto& r : results) any_mismatch |= !r.mismatches.empty();
    EXPECT_TRUE(any_mismatch) << name << ": a wrong MSN went unnoticed";
  }
}

// UD (ud_pingpong_512.pcap): both directions replay in both modes, and a
// tampered capture is noticed — a datagram "sent" from another UDP source
// port or QPN (sender mode), one with another Q_Key (receiver mode: droce
// drops it, as rxe would have).
TEST(Replay, UdPingpongReplaysAndDifferencesAreNoticed) {
  const auto frames = Load("ud_pingpong_512.pcap");
  ASSERT_TRUE(IsUdCapture(frames));
  for (bool sender : {false, true}) {
    const auto results = sender ? ReplayRequester(frames) : ReplayResponder(frames);
    ASSERT_EQ(results.size(), 2u);
    for (const ReplayResult& r : results) {
      std::string why;
      for (const auto& m : r.mismatches) why += "\n  " + m;
      EXPECT_TRUE(r.equivalent()) << r.direction << (r.skipped ? " skipped: " + r.skip_reason : "") << why;
      EXPECT_EQ(r.droce_responses, 5u) << r.direction;
    }
  }
  for (int variant = 0; variant < 3; ++variant) {
    auto tampered = Load("ud_pingpong_512.pcap");
    Rewrite(tampered[2], [variant](wire::PacketFields& x) {
      if (variant == 0) x.route.udp_src_port ^= 1;
      if (variant == 1) x.deth_src_qp += 1;
      if (variant == 2) x.deth_qkey ^= 0x10;
    });
    const auto results = variant == 2 ? ReplayResponder(tampered) : ReplayRequester(tampered);
    bool any_mismatch = false;
    for (const auto& r : results) any_mismatch |= !r.mismatches.empty();
    EXPECT_TRUE(any_mismatch) << "variant " << variant << " went unnoticed";
  }
}

}  // namespace
}  // namespace droce::sim
