#include "wire/packet.h"

#include <vector>

#include <gtest/gtest.h>

#include "wire/fields.h"
#include "wire/gid.h"

namespace droce::wire {
namespace {

PacketFields SampleWrite(bool ipv6, bool vlan, uint32_t payload_len, std::vector<uint8_t>* payload) {
  PacketFields f;
  f.route.src_mac = {0x02, 0, 0, 0, 0, 1};
  f.route.dst_mac = {0x02, 0, 0, 0, 0, 2};
  f.route.ipv6 = ipv6;
  f.route.has_vlan = vlan;
  f.route.vlan_tci = (3 << 13) | 42;
  f.route.tclass = (26 << 2) | kEcnEct0;
  f.route.src_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  f.route.dst_ip = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  if (ipv6) {
    f.route.src_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 1};
    f.route.dst_ip = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2};
  }
  f.route.udp_src_port = UdpSourcePortForFlowLabel(FlowLabelForQpPair(0x11, 0x12));
  f.bth.opcode = kRcWriteOnlyImm;
  f.bth.dest_qp = 0x12;
  f.bth.psn = 0xFFFFFF;
  f.bth.ack_req = true;
  f.reth_va = 0x1000;
  f.reth_rkey = 0xabcd;
  f.reth_length = payload_len;
  f.imm_data = 0xdeadbeef;
  payload->resize(payload_len);
  for (uint32_t i = 0; i < payload_len; ++i) (*payload)[i] = static_cast<uint8_t>(i);
  f.payload = *payload;
  return f;
}

TEST(Packet, SerializeParseRoundTrip) {
  for (bool ipv6 : {false, true}) {
    for (bool vlan : {false, true}) {
      for (uint32_t len : {0u, 1u, 3u, 4u, 1023u, 4096u}) {
        std::vector<uint8_t> payload;
        PacketFields f = SampleWrite(ipv6, vlan, len, &payload);
        std::vector<uint8_t> frame(5000);
        auto n = SerializeFields(f, frame.data(), frame.size());
        ASSERT_TRUE(n.ok()) << n.status();
        ParsedPacket p = ParseAndVerify(frame.data(), *n);
        ASSERT_TRUE(p.ok()) << ParseStatusName(p.status);
        EXPECT_EQ(p.ipv6, ipv6);
        EXPECT_EQ(p.has_vlan, vlan);
        EXPECT_EQ(p.payload_len, len);
        EXPECT_EQ(p.pad, PadFor(len));
        EXPECT_EQ(p.ecn(), kEcnEct0);
        PacketFields g = DecodeFields(frame.data(), p);
        EXPECT_EQ(g.reth_rkey, 0xabcdu);
        EXPECT_EQ(g.imm_data, 0xdeadbeefu);
        EXPECT_EQ(g.bth.psn, 0xFFFFFFu);
        EXPECT_EQ(g.route.vlan_tci, vlan ? f.route.vlan_tci : 0);
        ASSERT_EQ(g.payload.size(), len);
        EXPECT_TRUE(std::equal(g.payload.begin(), g.payload.end(), payload.begin()));
      }
    }
  }
}

// droce's selective-repeat headers (doc/transport.md "Selective repeat")
// round-trip and are what droce-pcap dump prints.
TEST(Packet, SelectiveRepeatHeadersRoundTripAndDescribe) {
  std::vector<uint8_t> payload;
  PacketFields f = SampleWrite(false, false, 100, &payload);
  f.bth.opcode = SrOpcode(kRcWriteMiddle);
  f.sreth_va = 0x1000;
  f.sreth_rkey = 0x77;
  f.sreth_length = 8192;
  f.sreth_offset = 2048;
  f.sreth_recv_seq = 3;
  f.payload = {};
  std::vector<uint8_t> mtu_payload(1024, 0xAB);
  f.payload = mtu_payload;
  std::vector<uint8_t> out(4096);
  auto n = SerializeFields(f, out.data(), static_cast<uint32_t>(out.size()));
  ASSERT_TRUE(n.ok()) << n.status();
  ParsedPacket p = ParseAndVerify(out.data(), *n);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p.payload_offset - p.bth_offset, kBthBytes + kSrEthBytes);
  PacketFields g = DecodeFields(out.data(), p);
  EXPECT_EQ(g.sreth_va, 0x1000u);
  EXPECT_EQ(g.sreth_offset, 2048u);
  EXPECT_EQ(g.sreth_recv_seq, 3u);
  EXPECT_NE(DescribePacket(out.data(), p).find("SR_WRITE_MIDDLE"), std::string::npos);
  EXPECT_NE(DescribePacket(out.data(), p).find("sreth(va=0x1000 rkey=0x77 len=8192 off=2048 rseq=3)"),
            std::string::npos)
      << DescribePacket(out.data(), p);

  PacketFields s = SampleWrite(false, false, 0, &payload);
  s.payload = {};
  s.bth.opcode = kSrSack;
  s.bth.psn = 99;
  s.aeth_syndrome = 0x1F;
  s.sack_base_psn = 100;
  s.sack_bits[0] = 0b1111 << 1;  // 102-105
  s.sack_bits[1] = 1;            // 100 + 1 + 64 = 165
  n = SerializeFields(s, out.data(), static_cast<uint32_t>(out.size()));
  ASSERT_TRUE(n.ok()) << n.status();
  p = ParseAndVerify(out.data(), *n);
  ASSERT_TRUE(p.ok());
  g = DecodeFields(out.data(), p);
  EXPECT_EQ(g.sack_base_psn, 100u);
  EXPECT_EQ(g.sack_bits[0], s.sack_bits[0]);
  EXPECT_EQ(g.sack_bits[1], 1u);
  const SackEthView v(out.data() + p.bth_offset + p.op().sacketh_offset);
  EXPECT_FALSE(v.received(0));  // 101
  EXPECT_TRUE(v.received(1));   // 102
  EXPECT_TRUE(v.received(64));  // 165
  EXPECT_FALSE(v.received(128));
  EXPECT_NE(DescribePacket(out.data(), p).find("sack(missing=100 held=102-105,165)"), std::string::npos)
      << DescribePacket(out.data(), p);
}

TEST(Packet, EcnMarkingKeepsIcrcValid) {
  for (bool ipv6 : {false, true}) {
    std::vector<uint8_t> payload;
    PacketFields f = SampleWrite(ipv6, false, 100, &payload);
    std::vector<uint8_t> frame(5000);
    uint32_t n = *SerializeFields(f, frame.data(), frame.size());
    ASSERT_EQ(ParsePacket(frame.data(), n).ecn(), kEcnEct0);
    EXPECT_TRUE(MarkCe(frame.data(), n));
    ParsedPacket q = ParseAndVerify(frame.data(), n);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q.ecn(), kEcnCe);
    if (!ipv6) {
      Ipv4View ip(frame.data() + q.l3_offset);
      EXPECT_EQ(ip.checksum(), Ipv4HeaderChecksum(frame.data() + q.l3_offset, 20));
    }
    EXPECT_FALSE(MarkCe(frame.data(), n)) << "already CE";
  }
}

// RFC 3168: a congestion point never marks a Not-ECT frame.
TEST(Packet, EcnMarkingLeavesNotEctFramesAlone) {
  for (bool ipv6 : {false, true}) {
    std::vector<uint8_t> payload;
    PacketFields f = SampleWrite(ipv6, false, 100, &payload);
    f.route.tclass = static_cast<uint8_t>(f.route.tclass & ~3u);  // Not-ECT
    std::vector<uint8_t> frame(5000);
    uint32_t n = *SerializeFields(f, frame.data(), frame.size());
    const std::vector<uint8_t> before(frame.begin(), frame.begin() + n);
    EXPECT_FALSE(MarkCe(frame.data(), n));
    EXPECT_TRUE(std::equal(before.begin(), before.end(), frame.begin()));
  }
}

TEST(Packet, UdpSourcePortMatchesLinux) {
  // Both rxe peers had QPN 0x1e in rc_ops_imm_zero_pad_mtu1024.pcap and sent from port 50052.
  EXPECT_EQ(UdpSourcePortForFlowLabel(FlowLabelForQpPair(0x1e, 0x1e)), 50052);
  for (uint32_t a = 1; a < 5000; a += 7) {
    const uint16_t port = UdpSourcePortForFlowLabel(FlowLabelForQpPair(a, a + 3));
    EXPECT_GE(port, 0xC000);
  }
}

TEST(Gid, Ipv4MappedFormAndItsTest) {
  const Gid g = Ipv4MappedGid(0x0A000102);
  EXPECT_EQ(g, (Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 1, 2}));
  EXPECT_TRUE(IsIpv4MappedGid(g));
  Gid v6 = g;
  v6[0] = 0xFE;  // ffff in bytes 10-11 alone does not make it IPv4
  EXPECT_FALSE(IsIpv4MappedGid(v6));
  v6 = g;
  v6[11] = 0;
  EXPECT_FALSE(IsIpv4MappedGid(v6));
}

}  // namespace
}  // namespace droce::wire
