// The INT header (wire/int.h): its codec, a switch's stamp, and packets that
// carry it through ParsePacket and the ICRC.
#include "wire/int.h"

#include <cstring>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "wire/fields.h"
#include "wire/packet.h"

namespace droce::wire {
namespace {

using ::testing::HasSubstr;

TEST(Int, RequestCollectsHopsUntilFull) {
  uint8_t buf[kIntMaxBytes];
  ASSERT_EQ(WriteIntRequest(buf, 3), 4u + 3 * 16);
  IntStack s;
  ASSERT_EQ(ParseInt(buf, sizeof buf, &s), 52u);
  EXPECT_EQ(s.slots, 3);
  EXPECT_EQ(s.hops, 0);
  EXPECT_FALSE(s.echo);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(PushIntHop(buf, 52, IntHop{100 + i, 2000 + i, 30 + i, 100'000}));
  EXPECT_FALSE(PushIntHop(buf, 52, IntHop{}));  // full
  ASSERT_EQ(ParseInt(buf, 52, &s), 52u);
  EXPECT_EQ(s.hops, 3);
  EXPECT_EQ(s.hop[2].timestamp_ns, 102u);
  EXPECT_EQ(s.hop[2].tx_bytes, 2002u);
  EXPECT_EQ(s.hop[2].qlen_bytes, 32u);
  EXPECT_EQ(s.hop[2].line_rate_mbps, 100'000u);
  // Big-endian on the wire: hop 0's timestamp is bytes 4..7.
  EXPECT_EQ(buf[4], 0);
  EXPECT_EQ(buf[7], 100);
}

TEST(Int, EchoCarriesTheFilledHopsAndIsNotStamped) {
  IntStack s;
  s.slots = 5;
  s.hops = 2;
  s.hop[0] = IntHop{1, 2, 3, 4};
  s.hop[1] = IntHop{5, 6, 7, 8};
  uint8_t buf[kIntMaxBytes];
  ASSERT_EQ(WriteIntEcho(buf, s), 4u + 2 * 16);
  IntStack e;
  ASSERT_EQ(ParseInt(buf, sizeof buf, &e), 36u);
  EXPECT_TRUE(e.echo);
  EXPECT_EQ(e.slots, 2);
  EXPECT_EQ(e.hops, 2);
  EXPECT_EQ(e.hop[1].line_rate_mbps, 8u);
  EXPECT_FALSE(PushIntHop(buf, sizeof buf, IntHop{}));
  // An echo of nothing (no INT switch on the path) is a 4-byte header.
  EXPECT_EQ(WriteIntEcho(buf, IntStack{}), 4u);
}

TEST(Int, MalformedHeadersAreRefused) {
  uint8_t good[kIntMaxBytes];
  WriteIntRequest(good, 2);
  IntStack s;
  ASSERT_EQ(ParseInt(good, 36, &s), 36u);
  EXPECT_EQ(ParseInt(good, 35, &s), 0u);  // records cut off
  EXPECT_EQ(ParseInt(good, 3, &s), 0u);
  const struct {
    int byte;
    uint8_t value;
  } kBad[] = {{0, 0x20}, {0, 0x12}, {0, 0x00}, {1, 6}, {2, 3}, {3, 1}};
  for (const auto& b : kBad) {
    uint8_t buf[kIntMaxBytes];
    std::memcpy(buf, good, sizeof buf);
    buf[b.byte] = b.value;
    EXPECT_EQ(ParseInt(buf, sizeof buf, &s), 0u) << "byte " << b.byte << " = " << int{b.value};
    EXPECT_FALSE(PushIntHop(buf, sizeof buf, IntHop{}));
  }
}

PacketFields Write(uint32_t payload_len, std::vector<uint8_t>* payload) {
  PacketFields f;
  f.route.src_mac = {0x02, 0, 0, 0, 0, 1};
  f.route.dst_mac = {0x02, 0, 0, 0, 0, 2};
  f.route.tclass = kEcnEct0;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.bth.opcode = kRcWriteOnly;
  f.bth.dest_qp = 0x12;
  f.bth.psn = 7;
  f.reth_va = 0x1000;
  f.reth_rkey = 0xabcd;
  f.reth_length = payload_len;
  payload->assign(payload_len, 0x5a);
  f.payload = *payload;
  return f;
}

TEST(IntPacket, AfterTheExtendedHeadersAndCoveredByTheIcrc) {
  std::vector<uint8_t> payload;
  PacketFields f = Write(1000, &payload);
  f.has_int = true;
  f.int_stack.slots = 3;
  std::vector<uint8_t> frame(2000);
  auto n = SerializeFields(f, frame.data(), frame.size());
  ASSERT_TRUE(n.ok()) << n.status();
  ParsedPacket p = ParseAndVerify(frame.data(), *n);
  ASSERT_TRUE(p.ok()) << ParseStatusName(p.status);
  EXPECT_EQ(p.int_offset, p.bth_offset + kBthBytes + kRethBytes);
  EXPECT_EQ(p.payload_offset, p.int_offset + 52);
  EXPECT_EQ(p.payload_len, 1000u);
  EXPECT_EQ(frame[p.payload_offset], 0x5a);
  EXPECT_THAT(DescribePacket(frame.data(), p), HasSubstr(" int(0/3)"));

  // Two switches stamp it: the ICRC stays valid, the records are in order.
  ASSERT_TRUE(StampInt(frame.data(), p, IntHop{11, 22, 33, 25'000}));
  ASSERT_TRUE(StampInt(frame.data(), p, IntHop{44, 55, 66, 100'000}));
  p = ParseAndVerify(frame.data(), *n);
  ASSERT_TRUE(p.ok()) << ParseStatusName(p.status);
  const PacketFields g = DecodeFields(frame.data(), p);
  ASSERT_TRUE(g.has_int);
  EXPECT_EQ(g.int_stack.hops, 2);
  EXPECT_EQ(g.int_stack.hop[0].qlen_bytes, 33u);
  EXPECT_EQ(g.int_stack.hop[1].line_rate_mbps, 100'000u);
  EXPECT_THAT(DescribePacket(frame.data(), p), HasSubstr(" int(2/3 [ts=11 tx=22 q=33 rate=25000]"));

  // A bit of a record flipped on the way: the ICRC covers the header.
  frame[p.int_offset + 9] ^= 1;
  EXPECT_EQ(ParseAndVerify(frame.data(), *n).status, ParseStatus::kBadIcrc);
}

TEST(IntPacket, AnAcknowledgementCarriesAnEcho) {
  PacketFields f;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.bth.opcode = kRcAcknowledge;
  f.bth.dest_qp = 0x11;
  f.has_int = true;
  f.int_stack.echo = true;
  f.int_stack.slots = f.int_stack.hops = 1;
  f.int_stack.hop[0] = IntHop{1, 2, 3, 4};
  std::vector<uint8_t> frame(200);
  auto n = SerializeFields(f, frame.data(), frame.size());
  ASSERT_TRUE(n.ok());
  ParsedPacket p = ParseAndVerify(frame.data(), *n);
  ASSERT_TRUE(p.ok()) << ParseStatusName(p.status);
  EXPECT_EQ(p.payload_len, 0u);
  EXPECT_NE(p.int_offset, 0);
  EXPECT_FALSE(StampInt(frame.data(), p, IntHop{}));  // switches leave echoes alone
}

TEST(IntPacket, WithoutTheBthBitThereIsNoInt) {
  std::vector<uint8_t> payload;
  PacketFields f = Write(64, &payload);
  std::vector<uint8_t> frame(200);
  auto n = SerializeFields(f, frame.data(), frame.size());
  ASSERT_TRUE(n.ok());
  ParsedPacket p = ParseAndVerify(frame.data(), *n);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.int_offset, 0);
  EXPECT_FALSE(StampInt(frame.data(), p, IntHop{1, 2, 3, 4}));
}

TEST(IntPacket, AMalformedHeaderIsAParseError) {
  std::vector<uint8_t> payload;
  PacketFields f = Write(64, &payload);
  f.has_int = true;
  f.int_stack.slots = 1;
  std::vector<uint8_t> frame(300);
  auto n = SerializeFields(f, frame.data(), frame.size());
  ASSERT_TRUE(n.ok());
  ParsedPacket p = ParsePacket(frame.data(), *n);
  ASSERT_TRUE(p.ok());
  frame[p.int_offset + 1] = 9;  // more slots than the packet holds
  EXPECT_EQ(ParsePacket(frame.data(), *n).status, ParseStatus::kBadInt);
  EXPECT_STREQ(ParseStatusName(ParseStatus::kBadInt), "bad_int");
}

}  // namespace
}  // namespace droce::wire
