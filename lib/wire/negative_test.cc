// Negative tests: any single-byte change to a packet must break its ICRC
// unless the byte is one the ICRC does not cover; every truncation is
// rejected without reading past the buffer; every ParseStatus reason can be
// produced by some malformed frame.
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "wire/capture_samples_test.h"
#include "wire/fields.h"
#include "wire/packet.h"

namespace droce::wire {
namespace {

using testing::kCaptureSamples;

// Bytes outside the ICRC: Ethernet header (and VLAN tag), the masked
// IP/UDP/BTH fields, and the ICRC itself.
std::set<uint32_t> UncoveredBytes(const uint8_t* f, const ParsedPacket& p) {
  std::set<uint32_t> s;
  for (uint32_t i = 0; i < p.l3_offset; ++i) s.insert(i);
  const uint32_t l3 = p.l3_offset;
  if (p.ipv6) {
    s.insert(l3 + 0);  // traffic class bits are masked (a version change fails to parse)
    s.insert(l3 + 1);
    s.insert(l3 + 2);
    s.insert(l3 + 3);
    s.insert(l3 + 7);
  } else {
    s.insert(l3 + 1);
    s.insert(l3 + 8);
    s.insert(l3 + 10);
    s.insert(l3 + 11);
  }
  s.insert(p.l4_offset + 6);
  s.insert(p.l4_offset + 7);
  s.insert(p.bth_offset + 4);
  for (uint32_t i = p.icrc_offset; i < p.end(); ++i) s.insert(i);
  (void)f;
  return s;
}

TEST(Negative, EverySingleByteFlipIsCaughtUnlessUncovered) {
  for (const auto& sample : kCaptureSamples) {
    const std::vector<uint8_t> orig(sample.bytes.begin(), sample.bytes.end());
    const ParsedPacket p0 = ParseAndVerify(orig.data(), static_cast<uint32_t>(orig.size()));
    ASSERT_TRUE(p0.ok()) << sample.name << ": " << ParseStatusName(p0.status);
    const std::set<uint32_t> uncovered = UncoveredBytes(orig.data(), p0);
    for (uint32_t i = 0; i < orig.size(); ++i) {
      for (uint8_t mask : {0x01, 0x80, 0xFF}) {
        std::vector<uint8_t> f = orig;
        f[i] ^= mask;
        const ParsedPacket p = ParseAndVerify(f.data(), static_cast<uint32_t>(f.size()));
        if (i >= p0.icrc_offset && i < p0.end()) {
          EXPECT_FALSE(p.ok()) << sample.name << ": ICRC byte " << i << " changed yet verified";
        } else if (uncovered.count(i)) {
          // A masked or link-layer field: the ICRC must still hold whenever the
          // packet still parses (a changed EtherType or version may stop that).
          if (p.status == ParseStatus::kBadIcrc) {
            ADD_FAILURE() << sample.name << ": masked byte " << i << " broke the ICRC";
          }
        } else {
          EXPECT_FALSE(p.ok()) << sample.name << ": covered byte " << i << " ^ " << int(mask)
                               << " still verified";
        }
      }
    }
  }
}

TEST(Negative, EveryTruncationIsRejectedWithoutOverread) {
  for (const auto& sample : kCaptureSamples) {
    for (size_t len = 0; len < sample.bytes.size(); ++len) {
      // An exactly sized heap copy: ASan reports any read past it.
      std::unique_ptr<uint8_t[]> copy(new uint8_t[len == 0 ? 1 : len]);
      std::memcpy(copy.get(), sample.bytes.data(), len);
      const ParsedPacket p = ParseAndVerify(copy.get(), static_cast<uint32_t>(len));
      EXPECT_FALSE(p.ok()) << sample.name << " cut to " << len;
      const ParsedPacket h = ParseHeaders(copy.get(), static_cast<uint32_t>(len));
      if (h.ok()) {
        EXPECT_LE(h.payload_offset, len) << sample.name;
      }
    }
  }
}

// Builds a valid frame, lets `mutate` break it, and returns the parse status.
ParseStatus StatusAfter(void (*mutate)(std::vector<uint8_t>&, const ParsedPacket&),
                        uint8_t opcode = kRcSendOnly, uint32_t payload = 16) {
  PacketFields f;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.bth.opcode = opcode;
  std::vector<uint8_t> data(payload, 0xAB);
  f.payload = data;
  std::vector<uint8_t> frame(512);
  frame.resize(*SerializeFields(f, frame.data(), 512));
  const ParsedPacket p = ParsePacket(frame.data(), static_cast<uint32_t>(frame.size()));
  EXPECT_TRUE(p.ok());
  mutate(frame, p);
  return ParseAndVerify(frame.data(), static_cast<uint32_t>(frame.size())).status;
}

// Keeps IP/UDP lengths consistent after resizing the transport part by delta.
void AdjustLengths(std::vector<uint8_t>& f, const ParsedPacket& p, int delta) {
  Ipv4Writer ip(f.data() + p.l3_offset);
  ip.set_total_length(static_cast<uint16_t>(ip.total_length() + delta));
  ip.set_checksum(Ipv4HeaderChecksum(f.data() + p.l3_offset, 20));
  UdpWriter udp(f.data() + p.l4_offset);
  udp.set_length(static_cast<uint16_t>(udp.length() + delta));
}

TEST(Negative, EveryParseStatusHasACause) {
  using S = ParseStatus;
  EXPECT_EQ(StatusAfter([](auto& f, const auto&) { f.resize(10); }), S::kTruncated);
  EXPECT_EQ(StatusAfter([](auto& f, const auto&) { StoreBe16(f.data() + 12, 0x0806); }), S::kNotIp);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.l3_offset + 9] = 6; }), S::kNotUdp);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { StoreBe16(f.data() + p.l4_offset + 2, 4792); }), S::kNotRoce);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { StoreBe16(f.data() + p.l3_offset + 6, 0x2000); }), S::kIpFragment);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.l3_offset] = 0x44; }), S::kBadIpHeader);
  // A changed TOS without the checksum fixed; TTL 0 even with a correct checksum.
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.l3_offset + 1] ^= 0x04; }), S::kBadIpChecksum);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.l3_offset + 10] ^= 0x80; }), S::kBadIpChecksum);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) {
              f[p.l3_offset + 8] = 0;
              Ipv4Writer(f.data() + p.l3_offset).set_checksum(Ipv4HeaderChecksum(f.data() + p.l3_offset, 20));
            }),
            S::kIpTtlZero);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { StoreBe16(f.data() + p.l4_offset + 4, 9); }), S::kBadUdpLength);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.bth_offset + 1] |= 0x01; }), S::kBadBthVersion);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.bth_offset] = 0x15; }), S::kUnknownOpcode);
  // Pad count 3 on an ACK, which has no payload area at all.
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.bth_offset + 1] |= 0x30; }, kRcAcknowledge, 0),
            S::kBadPad);
  // Two extra bytes: the payload area is no longer a multiple of 4.
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) {
              f.insert(f.begin() + p.icrc_offset, {0, 0});
              AdjustLengths(f, p, 2);
            }),
            S::kLengthMismatch);
  // A payload on an opcode that carries none.
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) {
              f[p.bth_offset] = kRcAcknowledge;
              (void)p;
            }),
            S::kLengthMismatch);
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.payload_offset] ^= 1; }), S::kBadIcrc);
  // BTH says an INT header follows, and the payload's first bytes are not one (wire/int.h).
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) { f[p.bth_offset + 4] |= kBthIntFlag; }), S::kBadInt);
  // Every reason above is one the enum names; kOk and kCount aside, none is missing.
  EXPECT_EQ(static_cast<int>(S::kCount), 16);
}

// TTL and TOS are masked in the ICRC: with the IPv4 checksum fixed, any TTL
// but 0 (here 1, as a router's last hop leaves it) and any TOS still verify.
TEST(Negative, MaskedIpv4FieldsWithAFixedChecksumStillVerify) {
  EXPECT_EQ(StatusAfter([](auto& f, const auto& p) {
              f[p.l3_offset + 8] = 1;
              f[p.l3_offset + 1] = 0xB9;
              Ipv4Writer(f.data() + p.l3_offset).set_checksum(Ipv4HeaderChecksum(f.data() + p.l3_offset, 20));
            }),
            ParseStatus::kOk);
}

}  // namespace
}  // namespace droce::wire
