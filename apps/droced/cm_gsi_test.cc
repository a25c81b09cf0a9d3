#include "apps/droced/cm_gsi.h"

#include <gtest/gtest.h>

#include "wire/byte_order.h"
#include "wire/packet.h"

namespace droce::droced {
namespace {

GsiPath V4Path() {
  GsiPath p;
  p.src_mac = {0x02, 0, 0, 0, 0, 1};
  p.dst_mac = {0x02, 0, 0, 0, 0, 2};
  p.src_gid = cm::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  p.dst_gid = cm::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  return p;
}

std::array<uint8_t, cm::kMadSize> SomeMad() {
  cm::Req req;
  req.local_comm_id = 0x01020304;
  req.service_id = 0x0000000001061C06;
  return cm::SerializeMad(cm::CmMessage{cm::MadHeader{.tid = 9}, req});
}

TEST(CmGsi, Ipv4FrameIsAUdSendToQp1WithTheGsiQkey) {
  uint8_t frame[kGsiFrameMax];
  const auto mad = SomeMad();
  const uint32_t len = BuildGsiFrame(V4Path(), mad, 5, frame);
  EXPECT_EQ(len, 14u + 20 + 8 + 12 + 8 + 256 + 4);
  const wire::ParsedPacket p = wire::ParseAndVerify(frame, len);
  ASSERT_TRUE(p.ok()) << wire::ParseStatusName(p.status);
  EXPECT_EQ(p.opcode, 0x64);  // UD SEND_ONLY
  EXPECT_EQ(wire::LoadBe24(frame + p.bth_offset + 5), 1u);        // dest QP 1
  EXPECT_EQ(wire::LoadBe32(frame + p.bth_offset + 12), 0x80010000u);  // DETH Q_Key
  EXPECT_EQ(wire::LoadBe24(frame + p.bth_offset + 17), 1u);       // DETH source QP 1
  const GsiPacket g = ParseGsiFrame(frame, len);
  ASSERT_TRUE(g.ok()) << GsiDropName(g.drop);
  EXPECT_EQ(g.from.src_gid, V4Path().src_gid);
  EXPECT_EQ(g.from.dst_gid, V4Path().dst_gid);
  EXPECT_EQ(g.from.src_mac, V4Path().src_mac);
  EXPECT_EQ(g.src_qp, 1u);
  ASSERT_EQ(g.mad.size(), cm::kMadSize);
  EXPECT_TRUE(std::equal(g.mad.begin(), g.mad.end(), mad.begin()));
  const GsiPath back = ReplyPath(g.from);
  EXPECT_EQ(back.dst_mac, V4Path().src_mac);
  EXPECT_EQ(back.src_gid, V4Path().dst_gid);
}

TEST(CmGsi, Ipv6Frame) {
  GsiPath path = V4Path();
  path.src_gid = cm::Gid{0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFE, 0, 0, 1};
  path.dst_gid = cm::Gid{0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFE, 0, 0, 2};
  uint8_t frame[kGsiFrameMax];
  const uint32_t len = BuildGsiFrame(path, SomeMad(), 0, frame);
  EXPECT_EQ(len, kGsiFrameMax);
  const GsiPacket g = ParseGsiFrame(frame, len);
  ASSERT_TRUE(g.ok()) << GsiDropName(g.drop);
  EXPECT_EQ(g.from.src_gid, path.src_gid);
  EXPECT_EQ(g.from.dst_gid, path.dst_gid);
}

TEST(CmGsi, WhatQp1RefusesIsNamed) {
  uint8_t frame[kGsiFrameMax];
  const uint32_t len = BuildGsiFrame(V4Path(), SomeMad(), 5, frame);
  uint8_t bad[kGsiFrameMax];
  std::memcpy(bad, frame, len);
  bad[len - 10] ^= 1;  // MAD byte: the ICRC no longer matches
  EXPECT_EQ(ParseGsiFrame(bad, len).drop, GsiDrop::kBadPacket);
  EXPECT_EQ(ParseGsiFrame(frame, len - 1).drop, GsiDrop::kBadPacket);
  // A wrong Q_Key with a good ICRC.
  std::memcpy(bad, frame, len);
  const wire::ParsedPacket p = wire::ParsePacket(bad, len);
  wire::StoreBe32(bad + p.bth_offset + 12, 0x80010001);
  wire::StoreLe32(bad + p.icrc_offset, wire::ComputeIcrc(bad + p.l3_offset, p.icrc_offset - p.l3_offset, false));
  ASSERT_TRUE(wire::ParseAndVerify(bad, len).ok());
  EXPECT_EQ(ParseGsiFrame(bad, len).drop, GsiDrop::kBadQkey);
  for (int d = 0; d < static_cast<int>(GsiDrop::kCount); ++d) {
    EXPECT_NE(GsiDropName(static_cast<GsiDrop>(d)), "unknown");
  }
}

}  // namespace
}  // namespace droce::droced
