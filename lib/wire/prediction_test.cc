// Header prediction (wire/prediction.h): a predicted frame is parsed to the
// same ParsedPacket as ParsePacket's and its ICRC judged as IcrcMatches
// judges it; a frame that differs from the prediction in any compared bit,
// or fails any per-packet check, is not predicted.
#include "wire/prediction.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "wire/fields.h"

namespace droce::wire {
namespace {

bool SameParse(const ParsedPacket& a, const ParsedPacket& b) {
  return a.status == b.status && a.ipv6 == b.ipv6 && a.has_vlan == b.has_vlan && a.tclass == b.tclass &&
         a.pad == b.pad && a.vlan_tci == b.vlan_tci && a.l3_offset == b.l3_offset && a.l4_offset == b.l4_offset &&
         a.bth_offset == b.bth_offset && a.int_offset == b.int_offset && a.payload_offset == b.payload_offset &&
         a.payload_len == b.payload_len && a.icrc_offset == b.icrc_offset && a.opcode == b.opcode;
}

struct Shape {
  bool ipv6, vlan;
};
const Shape kShapes[] = {{false, false}, {false, true}, {true, false}, {true, true}};

PacketFields Fields(const Shape& s, uint8_t opcode, uint32_t psn, uint32_t payload_len, uint16_t ip_id) {
  static std::vector<uint8_t> payload(4096, 0x5A);
  PacketFields f;
  f.route.src_mac = {0x02, 0, 0, 0, 0, 0x02};
  f.route.dst_mac = {0x02, 0, 0, 0, 0, 0x01};
  f.route.has_vlan = s.vlan;
  f.route.vlan_tci = (2 << 13) | 100;
  f.route.ipv6 = s.ipv6;
  f.route.ipv4_id = ip_id;
  f.route.tclass = 0x1A;
  for (int i = 0; i < 16; ++i) {
    f.route.src_ip[i] = static_cast<uint8_t>(0x20 + i);
    f.route.dst_ip[i] = static_cast<uint8_t>(0x40 + i);
  }
  if (!s.ipv6) {
    f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
    f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
  }
  f.bth.opcode = opcode;
  f.bth.dest_qp = 0x123456;
  f.bth.psn = psn;
  f.bth.ack_req = (psn & 1) != 0;
  f.reth_va = 0x10000;
  f.reth_rkey = 0x77;
  f.reth_length = payload_len;
  if (OpInfo(opcode).roles & kRolePayload) f.payload = std::span<const uint8_t>(payload.data(), payload_len);
  return f;
}

std::vector<uint8_t> Frame(const PacketFields& f) {
  std::vector<uint8_t> b(9000);
  b.resize(*SerializeFields(f, b.data(), static_cast<uint32_t>(b.size())));
  return b;
}

HeaderPrediction Learn(const std::vector<uint8_t>& b) {
  const ParsedPacket p = ParsePacket(b.data(), static_cast<uint32_t>(b.size()));
  EXPECT_TRUE(Predictable(p));
  return LearnPrediction(b.data(), p);
}

// ParsePredicted either declines or agrees with ParsePacket and IcrcMatches,
// on a copy of `h`; a frame it takes, it then takes again by the exact tier
// (MatchesLast) and with the same answers. `exact`: whether `h` took it by
// the exact tier.
void ExpectAgrees(const std::vector<uint8_t>& b, const HeaderPrediction& h, bool* predicted = nullptr,
                  bool* exact = nullptr) {
  const uint32_t len = static_cast<uint32_t>(b.size());
  HeaderPrediction g = h;
  const bool matches_last = MatchesLast(b.data(), len, g);
  if (exact != nullptr) *exact = matches_last;
  const ParsedPacket* got = ParsePredicted(b.data(), len, g);
  if (predicted != nullptr) *predicted = got != nullptr;
  if (matches_last) EXPECT_NE(got, nullptr);
  if (got == nullptr) return;
  const ParsedPacket want = ParsePacket(b.data(), len);
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(SameParse(*got, want));
  EXPECT_EQ(PredictedIcrcMatches(b.data(), g), IcrcMatches(b.data(), want));
  ASSERT_TRUE(MatchesLast(b.data(), len, g));
  got = ParsePredicted(b.data(), len, g);
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(SameParse(*got, want));
  EXPECT_EQ(PredictedIcrcMatches(b.data(), g), IcrcMatches(b.data(), want));
}

TEST(HeaderPrediction, TheQpsNextFramesArePredictedAndParsedAsParsePacketDoes) {
  for (const Shape& s : kShapes) {
    const HeaderPrediction h = Learn(Frame(Fields(s, kRcWriteOnly, 7, 64, 1)));
    int predicted = 0;
    for (uint8_t opcode : {kRcWriteFirst, kRcWriteMiddle, kRcWriteLast, kRcWriteOnly, kRcSendOnly, kRcSendFirst,
                           kRcReadRequest, kRcAcknowledge, kRcReadResponseOnly, kUcWriteOnly}) {
      for (uint32_t len : {0u, 1u, 3u, 4u, 63u, 64u, 256u, 1024u, 4096u}) {
        if (!(OpInfo(opcode).roles & kRolePayload) && len != 0) continue;
        // Another PSN, AckReq, length, IPv4 ID: the per-packet fields.
        std::vector<uint8_t> b = Frame(Fields(s, opcode, 1000 + len, len, static_cast<uint16_t>(len * 7)));
        bool ok = false;
        ExpectAgrees(b, h, &ok);
        EXPECT_TRUE(ok) << int(opcode) << " " << len;
        predicted += ok;
        HeaderPrediction g = h;
        const ParsedPacket* taken = ParsePredicted(b.data(), static_cast<uint32_t>(b.size()), g);
        ASSERT_NE(taken, nullptr);
        const ParsedPacket p = *taken;
        EXPECT_TRUE(PredictedIcrcMatches(b.data(), g));
        b[p.icrc_offset] ^= 1;  // the ICRC itself
        EXPECT_FALSE(PredictedIcrcMatches(b.data(), g));
        b[p.icrc_offset] ^= 1;
        if (p.payload_len != 0) {
          b[p.payload_offset] ^= 0x80;
          EXPECT_FALSE(PredictedIcrcMatches(b.data(), g));
          b[p.payload_offset] ^= 0x80;
        }
        // The stream's next packet: another PSN, AckReq and IPv4 ID, taken
        // by the exact tier and judged the same.
        const std::vector<uint8_t> next = Frame(Fields(s, opcode, 2000 + len, len, static_cast<uint16_t>(len * 7 + 1)));
        bool next_exact = false;
        ExpectAgrees(next, g, &ok, &next_exact);
        EXPECT_TRUE(ok && next_exact) << int(opcode) << " " << len;
        std::vector<uint8_t> bad = next;
        bad[p.icrc_offset - 1] ^= 0x10;  // the last byte before the ICRC
        ExpectAgrees(bad, g, &ok, &next_exact);
        EXPECT_TRUE(ok && next_exact);
      }
    }
    EXPECT_GT(predicted, 30);
  }
}

TEST(HeaderPrediction, EveryBitOfTheHeadersEitherFallsBackOrIsJudgedAsByTheFullParse) {
  // Each bit through the BTH flipped: a bit of a compared field always falls
  // back; any other frame that is predicted parses and checks as before.
  for (const Shape& s : kShapes) {
    // Learnt from one frame, the exact tier set by the next (ExpectAgrees
    // checks that a frame taken is then taken by it).
    const std::vector<uint8_t> good = Frame(Fields(s, kRcWriteOnly, 9, 64, 3));
    const std::vector<uint8_t> first = Frame(Fields(s, kRcWriteOnly, 7, 64, 1));
    HeaderPrediction h = Learn(Frame(Fields(s, kRcWriteOnly, 8, 64, 2)));
    ASSERT_NE(ParsePredicted(first.data(), static_cast<uint32_t>(first.size()), h), nullptr);
    bool exact = false;
    ExpectAgrees(good, h, nullptr, &exact);
    EXPECT_TRUE(exact);  // another PSN, AckReq and IPv4 ID: the exact tier
    const uint32_t bth_end = h.bth_end;
    int compared = 0, exact_compared = 0;
    for (uint32_t i = 0; i < bth_end; ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> b = good;
        b[i] ^= static_cast<uint8_t>(1 << bit);
        bool ok = false;
        ExpectAgrees(b, h, &ok, &exact);
        if (h.mask[i] & (1 << bit)) {
          EXPECT_FALSE(ok) << "byte " << i << " bit " << bit;
          ++compared;
        }
        if (h.exact[i] & (1 << bit)) {
          EXPECT_FALSE(exact) << "byte " << i << " bit " << bit;
          ++exact_compared;
        }
        EXPECT_EQ(h.exact[i] & h.mask[i], h.mask[i]);  // the exact mask covers the mask
      }
    }
    EXPECT_GT(compared, 0);
    EXPECT_GT(exact_compared, compared);
    // Every field a receive check reads is compared (doc/rx-checks.md):
    // destination MAC, EtherTypes, VLAN id, IP version and header length,
    // protocol, IPv4 flags and fragment offset, addresses, the UDP
    // destination port, TVer, P_Key, BTH byte 4 (INT flag) and destination QP.
    const uint32_t l3 = h.l3_offset, l4 = l3 + (s.ipv6 ? kIpv6Bytes : kIpv4MinBytes), bth = l4 + kUdpBytes;
    struct Field {
      uint32_t at, bytes;
      uint8_t first_mask;
    };
    std::vector<Field> judged = {{0, 6, 0xFF}, {l3 - 2, 2, 0xFF}, {l4 + 2, 2, 0xFF}, {bth + 1, 1, 0x0F},
                                 {bth + 2, 6, 0xFF}};
    if (s.vlan) judged.insert(judged.end(), {{12, 2, 0xFF}, {14, 2, 0x0F}});
    if (s.ipv6) {
      judged.insert(judged.end(), {{l3, 1, 0xF0}, {l3 + 6, 1, 0xFF}, {l3 + 8, 32, 0xFF}});
    } else {
      judged.insert(judged.end(), {{l3, 1, 0xFF}, {l3 + 6, 2, 0xFF}, {l3 + 9, 1, 0xFF}, {l3 + 12, 8, 0xFF}});
    }
    for (const Field& f : judged) {
      EXPECT_EQ(h.mask[f.at] & f.first_mask, f.first_mask) << f.at;
      for (uint32_t i = 1; i < f.bytes; ++i) EXPECT_EQ(h.mask[f.at + i], 0xFF) << f.at + i;
    }
  }
}

TEST(HeaderPrediction, PerPacketFieldsAreCheckedAsParsePacketChecksThem) {
  // Against a prediction just learnt, and against one whose exact tier took
  // the unchanged frame (a per-packet field changed alone reaches that tier).
  for (const Shape& s : kShapes) for (const bool taken : {false, true}) {
    HeaderPrediction h = Learn(Frame(Fields(s, kRcWriteOnly, 1, 64, 1)));
    const std::vector<uint8_t> good = Frame(Fields(s, kRcSendOnly, 2, 64, 1));
    if (taken) ASSERT_NE(ParsePredicted(good.data(), static_cast<uint32_t>(good.size()), h), nullptr);
    const ParsedPacket p = ParsePacket(good.data(), static_cast<uint32_t>(good.size()));
    ASSERT_TRUE(p.ok());
    const uint32_t l3 = p.l3_offset, l4 = p.l4_offset, bth = p.bth_offset;
    // Every opcode, every pad count, and the lengths cut and changed.
    for (int op = 0; op < 256; ++op) {
      for (int pad = 0; pad < 4; ++pad) {
        std::vector<uint8_t> b = good;
        b[bth] = static_cast<uint8_t>(op);
        b[bth + 1] = static_cast<uint8_t>((b[bth + 1] & ~0x30) | (pad << 4));
        bool ok = false;
        ExpectAgrees(b, h, &ok);
        if (ok) {
          EXPECT_TRUE(OpInfo(static_cast<uint8_t>(op)).valid());
        }
      }
    }
    for (uint32_t cut = 1; cut < 24; ++cut) {
      std::vector<uint8_t> b = good;
      b.resize(b.size() - cut);
      bool ok = true;
      ExpectAgrees(b, h, &ok);
      EXPECT_FALSE(ok) << cut;
    }
    for (int delta : {-8, -4, -1, 1, 4, 8, 4096}) {
      for (uint32_t at : {s.ipv6 ? l3 + 4 : l3 + 2, l4 + 4}) {  // IP length, UDP length
        std::vector<uint8_t> b = good;
        b.resize(b.size() + 8, 0);  // Ethernet padding: room for a longer IP length
        StoreBe16(b.data() + at, static_cast<uint16_t>(LoadBe16(b.data() + at) + delta));
        ExpectAgrees(b, h);
      }
    }
    if (!s.ipv6) {
      std::vector<uint8_t> b = good;
      b[l3 + 10] ^= 0x40;  // the header checksum
      bool ok = true;
      ExpectAgrees(b, h, &ok);
      EXPECT_FALSE(ok);
      PacketFields f = Fields(s, kRcSendOnly, 2, 64, 1);
      f.route.ttl = 0;
      b = Frame(f);
      ExpectAgrees(b, h, &ok);
      EXPECT_FALSE(ok);  // TTL 0, checksum right
      f.route.ttl = 1;
      b = Frame(f);
      ExpectAgrees(b, h, &ok);
      EXPECT_TRUE(ok);  // another TTL: not a field any check compares
    }
  }
}

// A QP whose frames alternate two kinds (its peer's WRITEs and the ACKs of
// its own requests): from the third frame on each equals the frame before
// the last one taken, which the exact tier takes; the parse and the ICRC
// are judged as ParsePacket and IcrcMatches judge them, and a frame equal
// to the one before but for a broken IPv4 header checksum is refused.
TEST(HeaderPrediction, AlternatingFramesAreTakenByTheExactTierFromTheFrameBefore) {
  for (const Shape& s : kShapes) {
    HeaderPrediction h = Learn(Frame(Fields(s, kRcWriteOnly, 7, 64, 1)));
    for (uint32_t i = 0; i < 8; ++i) {
      const bool write = i % 2 == 0;
      std::vector<uint8_t> b =
          Frame(Fields(s, write ? kRcWriteOnly : kRcAcknowledge, 100 + i, write ? 64 : 0, static_cast<uint16_t>(i)));
      const uint32_t n = static_cast<uint32_t>(b.size());
      if (i >= 2) {
        EXPECT_FALSE(MatchesLast(b.data(), n, h)) << i;
        EXPECT_TRUE(MatchesBefore(b.data(), n, h)) << i;
      }
      const ParsedPacket want = ParsePacket(b.data(), n);
      ASSERT_TRUE(want.ok());
      const ParsedPacket* got = ParsePredicted(b.data(), n, h);
      ASSERT_NE(got, nullptr) << i;
      EXPECT_TRUE(SameParse(*got, want)) << i;
      EXPECT_TRUE(PredictedIcrcMatches(b.data(), h)) << i;
      b[want.icrc_offset - 1] ^= 0x10;  // the payload or the AETH
      EXPECT_FALSE(PredictedIcrcMatches(b.data(), h)) << i;
    }
    // The last frame taken is an ACK, the one before a WRITE.
    std::vector<uint8_t> b = Frame(Fields(s, kRcWriteOnly, 200, 64, 9));
    const uint32_t n = static_cast<uint32_t>(b.size());
    const ParsedPacket want = ParsePacket(b.data(), n);
    if (!want.ipv6) {
      b[want.l3_offset + 10] ^= 1;  // the IPv4 header checksum
      HeaderPrediction g = h;
      EXPECT_FALSE(MatchesBefore(b.data(), n, g));
      EXPECT_EQ(ParsePredicted(b.data(), n, g), nullptr);
      b[want.l3_offset + 10] ^= 1;
    }
    EXPECT_TRUE(MatchesBefore(b.data(), n, h));
  }
}

// The exact tier sums only the IPv4 ID and header checksum per frame, to
// the rest of the header's folded sum: for every ID (so every carry out of
// the 16 bits) the right checksum passes and each of its neighbours fails,
// as the full header sum judges them.
TEST(HeaderPrediction, TheExactTierJudgesTheIpv4ChecksumOfEveryId) {
  for (const Shape& s : kShapes) {
    if (s.ipv6) continue;
    HeaderPrediction h = Learn(Frame(Fields(s, kRcWriteOnly, 7, 64, 1)));
    const std::vector<uint8_t> first = Frame(Fields(s, kRcWriteOnly, 8, 64, 2));
    ASSERT_NE(ParsePredicted(first.data(), static_cast<uint32_t>(first.size()), h), nullptr);
    std::vector<uint8_t> b = first;
    const uint32_t l3 = h.l3_offset;
    const uint32_t n = static_cast<uint32_t>(b.size());
    for (uint32_t id = 0; id <= 0xFFFF; ++id) {
      StoreBe16(b.data() + l3 + 4, static_cast<uint16_t>(id));
      StoreBe16(b.data() + l3 + 10, 0);
      uint32_t sum = 0;
      for (uint32_t i = 0; i < kIpv4MinBytes; i += 2) sum += LoadBe16(b.data() + l3 + i);
      while (sum > 0xFFFF) sum = (sum & 0xFFFF) + (sum >> 16);
      const auto checksum = static_cast<uint16_t>(~sum);
      StoreBe16(b.data() + l3 + 10, checksum);
      ASSERT_TRUE(Ipv4HeaderChecksumOk(b.data() + l3, kIpv4MinBytes)) << id;
      ASSERT_TRUE(MatchesLast(b.data(), n, h)) << id;
      for (const int delta : {-1, 1}) {
        StoreBe16(b.data() + l3 + 10, static_cast<uint16_t>(checksum + delta));
        ASSERT_EQ(MatchesLast(b.data(), n, h), Ipv4HeaderChecksumOk(b.data() + l3, kIpv4MinBytes))
            << id << " " << delta;
      }
    }
  }
}

// A sender whose IPv4 ID does not change (droce's template): from the
// second frame taken with one ID the exact tier compares the whole IPv4
// header and sums nothing; a frame with the same ID and a broken header
// checksum is refused, one with another ID is judged by the per-field
// checks and turns the per-packet sum back on, for the frame before as
// well (its ICRC register changes with it). Every frame is judged as
// ParsePacket and IcrcMatches judge it.
TEST(HeaderPrediction, AConstantIpv4IdIsComparedWholeAndJudgedAsTheFullParseJudges) {
  for (const Shape& s : kShapes) {
    if (s.ipv6) continue;
    auto frame = [&](bool write, uint32_t psn, uint16_t id) {
      return Frame(Fields(s, write ? kRcWriteOnly : kRcAcknowledge, psn, write ? 64 : 0, id));
    };
    auto take = [](const std::vector<uint8_t>& b, HeaderPrediction& h) {
      const uint32_t n = static_cast<uint32_t>(b.size());
      const ParsedPacket want = ParsePacket(b.data(), n);
      const ParsedPacket* got = ParsePredicted(b.data(), n, h);
      if (got == nullptr) return false;
      EXPECT_TRUE(SameParse(*got, want));
      EXPECT_TRUE(PredictedIcrcMatches(b.data(), h));
      std::vector<uint8_t> c = b;
      c[want.icrc_offset - 1] ^= 0x10;  // the payload or the AETH
      EXPECT_FALSE(PredictedIcrcMatches(c.data(), h));
      return true;
    };
    HeaderPrediction h = Learn(frame(true, 7, 5));
    EXPECT_TRUE(h.id_varies);  // nothing taken yet
    ASSERT_TRUE(take(frame(true, 8, 5), h));
    EXPECT_FALSE(h.id_varies);
    const uint32_t l3 = h.l3_offset;
    // A stream of WRITEs and ACKs with the one ID: the exact tier, last
    // and before, takes every frame.
    for (uint32_t i = 0; i < 6; ++i) {
      const std::vector<uint8_t> b = frame(i % 2 == 1, 20 + i, 5);
      const uint32_t n = static_cast<uint32_t>(b.size());
      if (i >= 2) EXPECT_TRUE(MatchesLast(b.data(), n, h) || MatchesBefore(b.data(), n, h)) << i;
      EXPECT_TRUE(take(b, h)) << i;
      EXPECT_FALSE(h.id_varies) << i;
      bool ok = false, exact = false;
      ExpectAgrees(frame(i % 2 == 1, 40 + i, 5), h, &ok, &exact);
      EXPECT_TRUE(ok && exact) << i;
    }
    // The same ID and a broken header checksum: refused.
    std::vector<uint8_t> bad = frame(false, 60, 5);
    bad[l3 + 11] ^= 0x01;
    bool ok = true;
    ExpectAgrees(bad, h, &ok);
    EXPECT_FALSE(ok);
    // The ID changes: per-field checks, then the per-packet sum again.
    const std::vector<uint8_t> other = frame(false, 61, 9);
    ASSERT_FALSE(MatchesBefore(other.data(), static_cast<uint32_t>(other.size()), h));
    ASSERT_TRUE(take(other, h));
    EXPECT_TRUE(h.id_varies);
    // The frame before (a WRITE taken with ID 5) now takes WRITEs of any ID.
    for (const uint16_t id : {uint16_t{11}, uint16_t{0xFFFF}, uint16_t{0}}) {
      const std::vector<uint8_t> b = frame(true, 70 + id, id);
      const uint32_t n = static_cast<uint32_t>(b.size());
      EXPECT_TRUE(id == 11 ? MatchesBefore(b.data(), n, h) : MatchesLast(b.data(), n, h)) << id;
      EXPECT_TRUE(take(b, h)) << id;
      std::vector<uint8_t> c = frame(false, 80, id);
      c[l3 + 10] ^= 0x40;
      ExpectAgrees(c, h, &ok);
      EXPECT_FALSE(ok) << id;
    }
  }
}

TEST(HeaderPrediction, NothingIsPredictedWithoutALearntFrameOrFromAnUnpredictableOne) {
  const std::vector<uint8_t> b = Frame(Fields(kShapes[0], kRcWriteOnly, 1, 64, 1));
  HeaderPrediction none;
  EXPECT_FALSE(MatchesLast(b.data(), static_cast<uint32_t>(b.size()), none));
  EXPECT_EQ(ParsePredicted(b.data(), static_cast<uint32_t>(b.size()), none), nullptr);
  PacketFields f = Fields(kShapes[0], kRcWriteOnly, 1, 64, 1);
  f.has_int = true;
  f.int_stack.slots = 2;
  const std::vector<uint8_t> with_int = Frame(f);
  const ParsedPacket q = ParsePacket(with_int.data(), static_cast<uint32_t>(with_int.size()));
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(Predictable(q));
  // A frame with an INT header differs from a prediction learnt without.
  HeaderPrediction h = Learn(b);
  EXPECT_EQ(ParsePredicted(with_int.data(), static_cast<uint32_t>(with_int.size()), h), nullptr);
  ASSERT_NE(ParsePredicted(b.data(), static_cast<uint32_t>(b.size()), h), nullptr);
  EXPECT_EQ(ParsePredicted(with_int.data(), static_cast<uint32_t>(with_int.size()), h), nullptr);
}

}  // namespace
}  // namespace droce::wire
