#include "cm/mad.h"

#include <gtest/gtest.h>

#include <random>

#include "cm/rdma_cm.h"

namespace droce::cm {
namespace {

// Offsets below are IBTA vol 1 table numbers' byte offsets within the MAD
// data, plus the 24-byte MAD header: written out here, not taken from mad.cc.
constexpr size_t H = kMadHeaderSize;

Req SampleReq() {
  Req r;
  r.local_comm_id = 0x11223344;
  r.vendor_id = 0x02C9AB;
  r.service_id = ServiceId(PortSpace::kTcp, 7174);
  r.local_ca_guid = 0x0102030405060708;
  r.local_qkey = 0;
  r.local_qpn = 0x123456;
  r.responder_resources = 4;
  r.initiator_depth = 3;
  r.remote_cm_response_timeout = 20;
  r.transport = TransportType::kRc;
  r.starting_psn = 0xABCDEF;
  r.local_cm_response_timeout = 20;
  r.retry_count = 7;
  r.pkey = 0xFFFF;
  r.path_mtu = 3;
  r.rnr_retry_count = 6;
  r.max_cm_retries = 15;
  r.srq = true;
  r.primary.local_lid = 0xFFFF;
  r.primary.remote_lid = 0xFFFF;
  r.primary.local_gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1};
  r.primary.remote_gid = Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 2};
  r.primary.flow_label = 0xABCDE;
  r.primary.packet_rate = 0x2A;
  r.primary.traffic_class = 0x60;
  r.primary.hop_limit = 64;
  r.primary.sl = 5;
  r.primary.subnet_local = true;
  r.primary.local_ack_timeout = 18;
  for (size_t i = 0; i < r.private_data.size(); ++i) r.private_data[i] = static_cast<uint8_t>(i + 1);
  return r;
}

TEST(CmMad, ReqFieldsSitAtTheirIbtaOffsets) {
  const auto b = SerializeMad(CmMessage{MadHeader{.tid = 0x0A0B0C0D0E0F1011, .attr_mod = 0x55}, SampleReq()});
  EXPECT_EQ(b[0], 1);
  EXPECT_EQ(b[1], 0x07);
  EXPECT_EQ(b[2], 2);
  EXPECT_EQ(b[3], 0x03);
  EXPECT_EQ(b[8], 0x0A);
  EXPECT_EQ(b[15], 0x11);
  EXPECT_EQ(b[16], 0x00);
  EXPECT_EQ(b[17], 0x10);  // REQ
  EXPECT_EQ(b[23], 0x55);  // attribute modifier: ECE options
  EXPECT_EQ(b[H + 0], 0x11);
  EXPECT_EQ(b[H + 3], 0x44);
  EXPECT_EQ(b[H + 4], 0x00);
  EXPECT_EQ(b[H + 5], 0x02);  // vendor id bytes 5..7
  EXPECT_EQ(b[H + 7], 0xAB);
  // Service id 0x0000000001061C06.
  EXPECT_EQ(b[H + 11], 0x00);
  EXPECT_EQ(b[H + 12], 0x01);
  EXPECT_EQ(b[H + 13], 0x06);
  EXPECT_EQ(b[H + 14], 0x1C);
  EXPECT_EQ(b[H + 15], 0x06);
  EXPECT_EQ(b[H + 16], 0x01);
  EXPECT_EQ(b[H + 23], 0x08);
  EXPECT_EQ(b[H + 32], 0x12);  // local QPN
  EXPECT_EQ(b[H + 34], 0x56);
  EXPECT_EQ(b[H + 35], 4);  // responder resources
  EXPECT_EQ(b[H + 39], 3);  // initiator depth
  EXPECT_EQ(b[H + 43], 20 << 3);  // remote CM response timeout | RC | no EE flow control
  EXPECT_EQ(b[H + 44], 0xAB);     // starting PSN
  EXPECT_EQ(b[H + 46], 0xEF);
  EXPECT_EQ(b[H + 47], (20 << 3) | 7);
  EXPECT_EQ(b[H + 48], 0xFF);
  EXPECT_EQ(b[H + 50], (3 << 4) | 6);  // MTU | RDC | RNR retry
  EXPECT_EQ(b[H + 51], (15 << 4) | 0x08);  // max CM retries | SRQ
  EXPECT_EQ(b[H + 52], 0xFF);               // primary local LID
  EXPECT_EQ(b[H + 56 + 10], 0xFF);          // primary local GID ::ffff:10.0.0.1
  EXPECT_EQ(b[H + 56 + 15], 1);
  EXPECT_EQ(b[H + 72 + 15], 2);  // primary remote GID
  EXPECT_EQ(b[H + 88], 0xAB);    // flow label 20 bits, then 6 reserved, 6 rate
  EXPECT_EQ(b[H + 89], 0xCD);
  EXPECT_EQ(b[H + 90], 0xE0);
  EXPECT_EQ(b[H + 91], 0x2A);
  EXPECT_EQ(b[H + 92], 0x60);
  EXPECT_EQ(b[H + 93], 64);
  EXPECT_EQ(b[H + 94], (5 << 4) | 0x08);
  EXPECT_EQ(b[H + 95], 18 << 3);
  EXPECT_EQ(b[H + 96], 0);  // alternate path absent
  EXPECT_EQ(b[H + 140], 1);  // private data
  EXPECT_EQ(b[H + 231], 92);
}

// The alternate path (IBTA table 99, bytes 96-139) has the primary's layout
// (bytes 52-95, above) 44 bytes on: mad.cc writes both with one path table at
// two base offsets. SAP supported shares the alternate path's last byte.
TEST(CmMad, ReqAlternatePathSitsAtItsIbtaOffsets) {
  Req r = SampleReq();
  r.alternate = CmPath{.local_lid = 0x1234, .remote_lid = 0x5678,
                       .local_gid = Gid{0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x11},
                       .remote_gid = Gid{0xFE, 0x81, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x22},
                       .flow_label = 0x12345, .packet_rate = 0x15, .traffic_class = 0x0C, .hop_limit = 7,
                       .sl = 9, .subnet_local = false, .local_ack_timeout = 21};
  r.sap_supported = true;
  const auto b = SerializeMad(CmMessage{MadHeader{}, r});
  EXPECT_EQ(b[H + 95], 18 << 3);  // the primary path's last byte is untouched
  EXPECT_EQ(b[H + 96], 0x12);     // alternate local LID
  EXPECT_EQ(b[H + 97], 0x34);
  EXPECT_EQ(b[H + 98], 0x56);  // alternate remote LID
  EXPECT_EQ(b[H + 99], 0x78);
  EXPECT_EQ(b[H + 100], 0xFE);  // alternate local GID
  EXPECT_EQ(b[H + 101], 0x80);
  EXPECT_EQ(b[H + 115], 0x11);
  EXPECT_EQ(b[H + 116], 0xFE);  // alternate remote GID
  EXPECT_EQ(b[H + 117], 0x81);
  EXPECT_EQ(b[H + 131], 0x22);
  EXPECT_EQ(b[H + 132], 0x12);  // flow label 20 bits, then 6 reserved, 6 rate
  EXPECT_EQ(b[H + 133], 0x34);
  EXPECT_EQ(b[H + 134], 0x50);
  EXPECT_EQ(b[H + 135], 0x15);
  EXPECT_EQ(b[H + 136], 0x0C);
  EXPECT_EQ(b[H + 137], 7);
  EXPECT_EQ(b[H + 138], 9 << 4);  // SL | subnet local (no)
  EXPECT_EQ(b[H + 139], (21 << 3) | 0x04);  // local ACK timeout | SAP supported
  EXPECT_EQ(b[H + 140], 1);                 // private data
  const ParsedMad p = ParseMad(b);
  ASSERT_TRUE(p.ok()) << MadErrorName(p.error);
  EXPECT_EQ(std::get<Req>(p.message.body), r);
}

TEST(CmMad, RepVendorIdIsSplitOverThreeBytes) {
  Rep r;
  r.local_comm_id = 1;
  r.remote_comm_id = 2;
  r.local_qpn = 0x000400;
  r.vendor_id = 0xA1B2C3;
  r.starting_psn = 0x010203;
  r.responder_resources = 1;
  r.initiator_depth = 2;
  r.target_ack_delay = 15;
  r.failover_accepted = 3;
  r.end_to_end_flow_control = true;
  r.rnr_retry_count = 7;
  r.srq = true;
  r.local_ca_guid = 0x1122334455667788;
  const auto b = SerializeMad(CmMessage{MadHeader{}, r});
  EXPECT_EQ(b[17], 0x13);
  EXPECT_EQ(b[H + 13], 0x04);
  EXPECT_EQ(b[H + 15], 0xA1);
  EXPECT_EQ(b[H + 19], 0xB2);
  EXPECT_EQ(b[H + 22], 0x03);
  EXPECT_EQ(b[H + 23], 0xC3);
  EXPECT_EQ(b[H + 26], (15 << 3) | (3 << 1) | 1);
  EXPECT_EQ(b[H + 27], (7 << 5) | 0x10);
  EXPECT_EQ(b[H + 28], 0x11);
  EXPECT_EQ(b[H + 35], 0x88);
  const ParsedMad p = ParseMad(b);
  ASSERT_TRUE(p.ok()) << MadErrorName(p.error);
  EXPECT_EQ(std::get<Rep>(p.message.body), r);
}

TEST(CmMad, RejLayout) {
  Rej r;
  r.local_comm_id = 7;
  r.remote_comm_id = 9;
  r.message_rejected = MsgRef::kReq;
  r.reason = static_cast<uint16_t>(RejReason::kInvalidServiceId);
  r.ari_length = 0;
  const auto b = SerializeMad(CmMessage{MadHeader{}, r});
  EXPECT_EQ(b[17], 0x12);
  EXPECT_EQ(b[H + 3], 7);
  EXPECT_EQ(b[H + 7], 9);
  EXPECT_EQ(b[H + 8], 0);
  EXPECT_EQ(b[H + 10], 0);
  EXPECT_EQ(b[H + 11], 8);
  EXPECT_EQ(RejReasonName(8), "invalid_service_id");
  EXPECT_EQ(RejReasonName(34), "unknown");
  EXPECT_EQ(RejReasonName(0xFFFF), "unknown");
}

TEST(CmMad, SidrLayout) {
  SidrRep r;
  r.request_id = 0xDEADBEEF;
  r.status = SidrStatus::kNoSuchService;
  r.vendor_id = 0x123456;
  r.qpn = 0x000401;
  r.service_id = ServiceId(PortSpace::kUdp, 7174);
  r.qkey = 0x01234567;
  const auto b = SerializeMad(CmMessage{MadHeader{}, r});
  EXPECT_EQ(b[17], 0x18);
  EXPECT_EQ(b[H + 4], 1);
  EXPECT_EQ(b[H + 6], 0x12);
  EXPECT_EQ(b[H + 7], 0x34);
  EXPECT_EQ(b[H + 10], 0x01);
  EXPECT_EQ(b[H + 11], 0x56);
  EXPECT_EQ(b[H + 17], 0x11);  // 0x0000000001111C06
  EXPECT_EQ(b[H + 20], 0x01);
  const ParsedMad p = ParseMad(b);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(std::get<SidrRep>(p.message.body), r);
}

template <typename T>
void Fill(std::mt19937& rng, T& a) {
  for (auto& x : a) x = static_cast<uint8_t>(rng());
}

TEST(CmMad, EveryMessageRoundTrips) {
  std::mt19937 rng(1);
  Req req = SampleReq();
  req.alternate = req.primary;
  req.alternate.sl = 2;
  req.sap_supported = true;
  req.transport = TransportType::kExtended;
  req.extended_transport = 1;
  Mra mra{.local_comm_id = 1, .remote_comm_id = 2, .message_mraed = MsgRef::kRep, .service_timeout = 31};
  Fill(rng, mra.private_data);
  Rej rej{.local_comm_id = 3, .remote_comm_id = 4, .message_rejected = MsgRef::kOther, .ari_length = 72,
          .reason = 28};
  Fill(rng, rej.ari);
  Fill(rng, rej.private_data);
  Rtu rtu{.local_comm_id = 5, .remote_comm_id = 6};
  Fill(rng, rtu.private_data);
  Dreq dreq{.local_comm_id = 7, .remote_comm_id = 8, .remote_qpn = 0xFFFFFF};
  Fill(rng, dreq.private_data);
  Drep drep{.local_comm_id = 9, .remote_comm_id = 10};
  Fill(rng, drep.private_data);
  SidrReq sreq{.request_id = 11, .pkey = 0xFFFF, .service_id = ServiceId(PortSpace::kUdp, 1)};
  Fill(rng, sreq.private_data);
  const CmBody bodies[] = {req, mra, rej, Rep{.local_qpn = 0xFFFFFF, .vendor_id = 0xFFFFFF}, rtu, dreq, drep,
                           sreq, SidrRep{.status = SidrStatus::kUnsupportedVersion, .info_length = 72}};
  for (const CmBody& body : bodies) {
    const CmMessage m{MadHeader{.tid = rng(), .attr_id = AttrOf(body), .attr_mod = 0xFFFFFFFF}, body};
    const auto bytes = SerializeMad(m);
    const ParsedMad p = ParseMad(bytes);
    ASSERT_TRUE(p.ok()) << AttrName(AttrOf(body)) << ": " << MadErrorName(p.error);
    EXPECT_EQ(p.message, m) << AttrName(AttrOf(body));
    EXPECT_EQ(SerializeMad(p.message), bytes);
  }
}

TEST(CmMad, SerializeTruncatesWideValuesToTheirFields) {
  Req r;
  r.local_qpn = 0xFF123456;
  r.path_mtu = 0x13;  // 4 bits
  r.primary.flow_label = 0xFFFFFFFF;
  const auto b = SerializeMad(CmMessage{MadHeader{}, r});
  EXPECT_EQ(b[H + 31], 0);  // the byte before the QPN stays reserved
  EXPECT_EQ(b[H + 32], 0x12);
  EXPECT_EQ(b[H + 50] >> 4, 3);
  EXPECT_EQ(b[H + 91], 0);  // reserved bits after the flow label
}

TEST(CmMad, MalformedMadsAreNamed) {
  const auto good = SerializeMad(CmMessage{MadHeader{}, Rtu{}});
  ASSERT_TRUE(ParseMad(good).ok());
  EXPECT_EQ(ParseMad(std::span(good).first(255)).error, MadError::kBadLength);
  std::array<uint8_t, 257> longer{};
  EXPECT_EQ(ParseMad(longer).error, MadError::kBadLength);
  EXPECT_EQ(ParseMad({}).error, MadError::kBadLength);
  auto bad = [&](size_t at, uint8_t v) {
    auto b = good;
    b[at] = v;
    return ParseMad(b).error;
  };
  EXPECT_EQ(bad(0, 2), MadError::kBadBaseVersion);
  EXPECT_EQ(bad(1, 0x01), MadError::kBadClass);  // subnet management
  EXPECT_EQ(bad(1, 0x03), MadError::kBadClass);  // subnet administration
  EXPECT_EQ(bad(2, 1), MadError::kBadClassVersion);
  EXPECT_EQ(bad(3, 0x01), MadError::kBadMethod);  // Get (ClassPortInfo)
  EXPECT_EQ(bad(3, 0x83), MadError::kResponseBit);
  EXPECT_EQ(bad(17, 0x01), MadError::kUnknownAttribute);  // ClassPortInfo
  EXPECT_EQ(bad(17, 0x19), MadError::kUnknownAttribute);  // LAP
  EXPECT_EQ(bad(17, 0x1A), MadError::kUnknownAttribute);  // APR
  EXPECT_EQ(bad(16, 0x01), MadError::kUnknownAttribute);
  const auto mra = SerializeMad(CmMessage{MadHeader{}, Mra{}});
  auto m = mra;
  m[H + 8] = 0xC0;  // message MRAed 3
  EXPECT_EQ(ParseMad(m).error, MadError::kBadField);
  const auto rej = SerializeMad(CmMessage{MadHeader{}, Rej{}});
  auto r = rej;
  r[H + 8] = 0xC0;
  EXPECT_EQ(ParseMad(r).error, MadError::kBadField);
  r = rej;
  r[H + 9] = 73 << 1;  // ARI longer than its 72 bytes
  EXPECT_EQ(ParseMad(r).error, MadError::kBadField);
  r[H + 9] = 72 << 1;
  EXPECT_TRUE(ParseMad(r).ok());
  const auto srep = SerializeMad(CmMessage{MadHeader{}, SidrRep{}});
  auto s = srep;
  s[H + 4] = 6;
  EXPECT_EQ(ParseMad(s).error, MadError::kBadField);
  s = srep;
  s[H + 5] = 73;
  EXPECT_EQ(ParseMad(s).error, MadError::kBadField);
  for (int e = 0; e < static_cast<int>(MadError::kCount); ++e) {
    EXPECT_NE(MadErrorName(static_cast<MadError>(e)), "unknown");
  }
}

TEST(CmMad, TimeoutsConvertAsLinuxDoes) {
  EXPECT_EQ(CmTimeoutMs(0), 1u);
  EXPECT_EQ(CmTimeoutMs(8), 1u);
  EXPECT_EQ(CmTimeoutMs(9), 2u);
  EXPECT_EQ(CmTimeoutMs(20), 4096u);  // rdma_cm's CMA_CM_RESPONSE_TIMEOUT
  EXPECT_EQ(CmTimeoutMs(31), uint64_t{1} << 23);
}

TEST(RdmaCm, ServiceIds) {
  EXPECT_EQ(ServiceId(PortSpace::kTcp, 7174), 0x0000000001061C06u);
  EXPECT_EQ(ServiceId(PortSpace::kUdp, 1), 0x0000000001110001u);
  EXPECT_EQ(ServiceId(PortSpace::kIb, 0xFFFF), 0x00000000013FFFFFu);
  EXPECT_EQ(DecodeServiceId(0x0000000001061C06u), (ServicePort{PortSpace::kTcp, 7174}));
  EXPECT_EQ(DecodeServiceId(0x0000000001110000u), (ServicePort{PortSpace::kUdp, 0}));
  EXPECT_FALSE(DecodeServiceId(0x0000000001071C06u).has_value());
  EXPECT_FALSE(DecodeServiceId(0x1000000001061C06u).has_value());
  EXPECT_FALSE(DecodeServiceId(0).has_value());
}

TEST(RdmaCm, CmaHeaderLayout) {
  CmaHeader h{.ip_version = 4, .port = 0xC001, .src = Ipv4Addr(0x0A000001), .dst = Ipv4Addr(0x0A000002)};
  std::array<uint8_t, kReqPrivateDataSize> pd{};
  StoreCmaHeader(h, pd);
  EXPECT_EQ(pd[0], 0);
  EXPECT_EQ(pd[1], 0x40);
  EXPECT_EQ(pd[2], 0xC0);
  EXPECT_EQ(pd[3], 0x01);
  for (int i = 4; i < 16; ++i) EXPECT_EQ(pd[i], 0) << i;  // IPv4: 12 zero bytes then the address
  EXPECT_EQ(pd[16], 10);
  EXPECT_EQ(pd[19], 1);
  EXPECT_EQ(pd[20 + 12], 10);
  EXPECT_EQ(pd[35], 2);
  EXPECT_EQ(ParseCmaHeader(pd), h);
  EXPECT_FALSE(ParseCmaHeader(std::span(pd).first(35)).has_value());
  auto v = pd;
  v[0] = 1;
  EXPECT_FALSE(ParseCmaHeader(v).has_value());
  v = pd;
  v[1] = 0x50;
  EXPECT_FALSE(ParseCmaHeader(v).has_value());
  v[1] = 0x60;
  EXPECT_TRUE(ParseCmaHeader(v).has_value());
  EXPECT_EQ(kRdmaCmReqUserPrivateData, 56u);
}

}  // namespace
}  // namespace droce::cm
