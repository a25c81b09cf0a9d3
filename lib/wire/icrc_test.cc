// The ICRC (wire/icrc.h) against the reference written as A17.3.3 reads
// (icrc_reference_test.h): every opcode, payload length, IP version, VLAN
// and IPv4 header length; masked fields do not matter, covered bytes do.
#include "wire/icrc.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "wire/fields.h"
#include "wire/icrc_reference_test.h"
#include "wire/packet.h"

namespace droce::wire {
namespace {

using testing::ReferenceIcrc;
using testing::SampleRoute;

TEST(Icrc, EqualsTheReferenceOnEveryOpcodeAndLength) {
  std::mt19937 rng(5);
  std::vector<uint8_t> payload(4096);
  for (auto& b : payload) b = static_cast<uint8_t>(rng());
  for (bool ipv6 : {false, true}) {
    for (bool vlan : {false, true}) {
      for (uint8_t opcode : {kRcWriteOnlyImm, kRcWriteMiddle, kRcSendOnly, kRcAcknowledge,
                             kRcReadRequest, kRcAtomicAcknowledge, kRcReadResponseFirst}) {
        for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 5u, 13u, 64u, 255u, 511u, 512u, 1023u, 4096u}) {
          if (!(OpInfo(opcode).roles & kRolePayload) && len > 0) continue;
          PacketFields f;
          f.route = SampleRoute(ipv6, vlan);
          f.bth.opcode = opcode;
          f.bth.psn = static_cast<uint32_t>(rng()) & 0xFFFFFF;
          f.bth.fecn = (rng() & 1) != 0;  // masked fields must not matter
          f.reth_length = len;
          f.payload = std::span<const uint8_t>(payload.data(), len);
          std::vector<uint8_t> frame(5000);
          const uint32_t n = *SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
          const ParsedPacket p = ParsePacket(frame.data(), n);
          ASSERT_TRUE(p.ok());
          const uint8_t* l3 = frame.data() + p.l3_offset;
          const uint32_t span = p.icrc_offset - p.l3_offset;
          ASSERT_EQ(ComputeIcrc(l3, span, ipv6), ReferenceIcrc(l3, span, ipv6))
              << "opcode " << int(opcode) << " len " << len << " ipv6 " << ipv6;
          EXPECT_TRUE(IcrcMatches(frame.data(), p));
          // Any change to a covered byte is caught; to a variant field, not.
          for (uint32_t i = p.l3_offset; i < p.icrc_offset; i += 7) {
            frame[i] ^= 0x10;
            EXPECT_EQ(IcrcMatches(frame.data(), p), testing::ReferenceIcrcMatches(frame.data(), p))
                << i;
            frame[i] ^= 0x10;
          }
        }
      }
    }
  }
}

TEST(Icrc, Ipv4OptionsAreMaskedWhereTheyMoveTheFields) {
  // A hand-made IPv4 header with IHL 5..15 (options of zeros) in front of
  // UDP, BTH and a payload, the variant fields set to values that must not
  // matter.
  for (uint32_t ihl = 5; ihl <= 15; ++ihl) {
    std::vector<uint8_t> l3(ihl * 4 + 8 + 12 + 100, 0x3C);
    l3[0] = static_cast<uint8_t>(0x40 | ihl);
    const uint32_t len = static_cast<uint32_t>(l3.size());
    const uint32_t crc = ComputeIcrc(l3.data(), len, false);
    EXPECT_EQ(crc, ReferenceIcrc(l3.data(), len, false)) << ihl;
    l3[ihl * 4 + 6] = 0x11;           // UDP checksum
    l3[ihl * 4 + 8 + 4] = 0x22;       // BTH FECN/BECN
    EXPECT_EQ(ComputeIcrc(l3.data(), len, false), crc) << ihl;
    l3[ihl * 4 + 8 + 5] ^= 1;         // the BTH's destination QP is covered
    EXPECT_NE(ComputeIcrc(l3.data(), len, false), crc) << ihl;
  }
}

TEST(Icrc, IcrcBeginContinuesOverThePayload) {
  const Route r = MakeRoute(SampleRoute(false, false));
  std::vector<uint8_t> frame(5000, 0x5A);
  WriteRoute(frame.data(), r);
  const uint32_t end = FinalizeFrame(frame.data(), r, kBthBytes + 1000);
  const uint8_t* l3 = frame.data() + r.l3_offset;
  const uint32_t span = end - kIcrcBytes - r.l3_offset;
  const uint32_t headers = 20 + 8 + kBthBytes;
  const uint32_t crc = Crc32Update(IcrcBegin(l3, headers, false), l3 + headers, span - headers);
  EXPECT_EQ(Crc32Final(crc), LoadLe32(frame.data() + end - kIcrcBytes));
  EXPECT_EQ(Crc32Final(crc), ReferenceIcrc(l3, span, false));
}

TEST(Icrc, HeaderTemplateFramesEqualFramesBuiltFieldByField) {
  // A frame from a HeaderTemplate (its ICRC from the precomputed register
  // and the per-packet bytes) is the frame FinalizeFrame makes from the
  // route, byte for byte, and its ICRC is the reference's: every per-packet
  // field at random values, both IP versions, VLAN, lengths 0..600.
  std::mt19937 rng(11);
  std::vector<uint8_t> body(700);
  for (bool ipv6 : {false, true}) {
    for (bool vlan : {false, true}) {
      const Route r = MakeRoute(SampleRoute(ipv6, vlan));
      const uint32_t dest_qp = static_cast<uint32_t>(rng()) & 0xFFFFFF;
      const HeaderTemplate t = MakeHeaderTemplate(r, 0xFFFF, dest_qp);
      for (uint32_t len = 0; len <= 600; ++len) {
        for (auto& b : body) b = static_cast<uint8_t>(rng());
        const uint8_t opcode = static_cast<uint8_t>(rng());
        const bool se = (rng() & 1) != 0, ack_req = (rng() & 1) != 0;
        const uint32_t psn = static_cast<uint32_t>(rng()) & 0xFFFFFF;
        std::vector<uint8_t> a(5000, 0xA5), b(5000, 0x5A);
        BthWriter bth_a(WriteHeaderTemplate(a.data(), t));
        BthWriter bth_b(WriteRoute(b.data(), r));
        bth_b.set_flags(false, true, 0, 0);
        bth_b.set_pkey(0xFFFF);
        bth_b.set_ecn_bits(false, false);
        bth_b.set_dest_qp(dest_qp);
        for (BthWriter* bth : {&bth_a, &bth_b}) {
          bth->set_opcode(opcode);
          if (se) bth->set_flags(true, true, 0, 0);
          bth->set_ack_req(ack_req);
          bth->set_psn(psn);
          std::memcpy(bth->data() + kBthBytes, body.data(), len);
        }
        const uint32_t n = FinishTemplateFrame(a.data(), t, kBthBytes + len);
        ASSERT_EQ(n, FinalizeFrame(b.data(), r, kBthBytes + len));
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n)) << "ipv6 " << ipv6 << " vlan " << vlan << " len " << len;
        const uint8_t* l3 = a.data() + r.l3_offset;
        ASSERT_EQ(LoadLe32(a.data() + n - kIcrcBytes), ReferenceIcrc(l3, n - kIcrcBytes - r.l3_offset, ipv6));
        // The register after the headers and some of what follows, as the
        // fused gather paths start it.
        const uint32_t after = len / 2;
        ASSERT_EQ(IcrcTemplateBegin(a.data(), t, after), IcrcBegin(l3, r.len + kBthBytes + after - r.l3_offset, ipv6));
        // The next packet with the same opcode and length: another AckReq and
        // PSN, the template's register for the rest reused.
        bth_a.set_ack_req(!ack_req);
        bth_a.set_psn(psn ^ 0x5A5A5A);
        ASSERT_EQ(IcrcTemplateBegin(a.data(), t, after), IcrcBegin(l3, r.len + kBthBytes + after - r.l3_offset, ipv6));
      }
    }
  }
}

}  // namespace
}  // namespace droce::wire
