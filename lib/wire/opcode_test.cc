#include "wire/opcode.h"

#include <gtest/gtest.h>

namespace droce::wire {
namespace {

TEST(OpcodeTable, HeaderLayoutMatchesIbta) {
  EXPECT_EQ(OpInfo(kRcSendOnly).header_bytes, 12);
  EXPECT_EQ(OpInfo(kRcWriteOnlyImm).reth_offset, 12);
  EXPECT_EQ(OpInfo(kRcWriteOnlyImm).immdt_offset, 28);
  EXPECT_EQ(OpInfo(kRcWriteOnlyImm).header_bytes, 32);
  EXPECT_EQ(OpInfo(kRcReadRequest).header_bytes, 28);
  EXPECT_EQ(OpInfo(kRcReadResponseMiddle).header_bytes, 12);
  EXPECT_EQ(OpInfo(kRcReadResponseFirst).aeth_offset, 12);
  EXPECT_EQ(OpInfo(kRcAtomicAcknowledge).atomic_ack_offset, 16);
  EXPECT_EQ(OpInfo(kRcAtomicAcknowledge).header_bytes, 24);
  EXPECT_EQ(OpInfo(kRcCompareSwap).header_bytes, 40);
  EXPECT_EQ(OpInfo(kRcSendOnlyInv).ieth_offset, 12);
  EXPECT_EQ(OpInfo(kUdSendOnlyImm).deth_offset, 12);
  EXPECT_EQ(OpInfo(kUdSendOnlyImm).immdt_offset, 20);
  EXPECT_EQ(OpInfo(kCnp).header_bytes, 28);
}

TEST(OpcodeTable, RolesAreConsistent) {
  int valid = 0;
  for (int i = 0; i < 256; ++i) {
    const OpcodeInfo& op = OpInfo(static_cast<uint8_t>(i));
    if (!op.valid()) continue;
    ++valid;
    EXPECT_EQ(op.Has(kHdrImmDt), (op.roles & kRoleImmediate) != 0) << op.name;
    EXPECT_EQ(op.Has(kHdrIeth), (op.roles & kRoleInvalidate) != 0) << op.name;
    EXPECT_FALSE((op.roles & kRoleRequest) && (op.roles & kRoleResponse)) << op.name;
    if (op.roles & kRoleImmediate) {
      EXPECT_TRUE(op.roles & kRoleLast) << op.name;
    }
    EXPECT_EQ(op.header_bytes % 4, 0) << op.name;
  }
  EXPECT_EQ(valid, 23 + 12 + 2 + 1 + 14 + 1);  // RC, UC, UD, CNP, SR data, SR SACK
  // Each SR data opcode is its RC twin with an SRETH after the BTH instead
  // of a RETH (doc/transport.md "Selective repeat").
  int twins = 0;
  for (int i = 0; i < 0x20; ++i) {
    const OpcodeInfo& rc = OpInfo(static_cast<uint8_t>(i));
    const OpcodeInfo& sr = OpInfo(SrOpcode(static_cast<uint8_t>(i)));
    if (!sr.valid() || SrOpcode(static_cast<uint8_t>(i)) == kSrSack) continue;
    ++twins;
    EXPECT_TRUE(rc.roles & (kRoleSend | kRoleWrite)) << sr.name;
    EXPECT_EQ(sr.roles, rc.roles | kRoleSr) << sr.name;
    EXPECT_EQ(sr.sreth_offset, kBthBytes) << sr.name;
    EXPECT_FALSE(sr.Has(kHdrReth)) << sr.name;
    EXPECT_EQ(sr.header_bytes, rc.header_bytes + kSrEthBytes - (rc.Has(kHdrReth) ? kRethBytes : 0)) << sr.name;
  }
  EXPECT_EQ(twins, 14);
  EXPECT_EQ(OpInfo(kSrSack).sacketh_offset, kBthBytes + kAethBytes);
  EXPECT_EQ(OpInfo(kSrSack).header_bytes, kBthBytes + kAethBytes + kSackEthBytes);
  EXPECT_FALSE(OpInfo(0x15).valid());
  EXPECT_FALSE(OpInfo(0xFF).valid());
  EXPECT_TRUE(OpInfo(kRcWriteFirst).Is(kRoleRequest | kRoleWrite | kRoleFirst));
  EXPECT_FALSE(OpInfo(kRcWriteFirst).Is(kRoleLast));
  EXPECT_TRUE(OpInfo(kRcSendOnly).Is(kRoleFirst | kRoleLast));
}

// Every data-carrying request and READ response is what the lookup answers
// for its own transport, operation, position and extra: each is found, and
// only once (no two opcodes share a choice).
TEST(OpcodeSelect, EveryRequestOpcodeIsItsOwnChoice) {
  int found = 0;
  for (int i = 0; i < 256; ++i) {
    const OpcodeInfo& op = OpInfo(static_cast<uint8_t>(i));
    // SR opcodes are chosen as twins (SrOpcode), never by the lookup.
    if (!op.valid() || (op.roles & kRoleAck) || (op.roles & kRoleCnp) || (op.roles & kRoleSr)) continue;
    Operation o;
    if (op.roles & kRoleSend) o = Operation::kSend;
    else if (op.roles & kRoleWrite) o = Operation::kWrite;
    else if (op.roles & kRoleReadRequest) o = Operation::kReadRequest;
    else if (op.roles & kRoleReadResponse) o = Operation::kReadResponse;
    else if (op.roles & kRoleCompare) o = Operation::kCompareSwap;
    else o = Operation::kFetchAdd;
    const Position p = PositionOf(op.Is(kRoleFirst), op.Is(kRoleLast));
    const Extra e = (op.roles & kRoleImmediate)    ? Extra::kImmediate
                    : (op.roles & kRoleInvalidate) ? Extra::kInvalidate
                                                   : Extra::kNone;
    EXPECT_EQ(OpcodeFor(op.transport, o, p, e), i) << op.name;
    ++found;
  }
  EXPECT_EQ(found, 21 + 12 + 2);  // RC without the two ACKs, UC, UD
}

TEST(OpcodeSelect, AbsentCombinationsAndExtrasOnlyAtTheEnd) {
  EXPECT_EQ(OpcodeFor(Transport::kUc, Operation::kReadRequest, Position::kOnly), kOpcodeNone);
  EXPECT_EQ(OpcodeFor(Transport::kUc, Operation::kSend, Position::kLast, Extra::kInvalidate),
            kOpcodeNone);
  EXPECT_EQ(OpcodeFor(Transport::kRc, Operation::kWrite, Position::kOnly, Extra::kInvalidate),
            kOpcodeNone);
  EXPECT_EQ(OpcodeFor(Transport::kUd, Operation::kSend, Position::kFirst), kOpcodeNone);
  EXPECT_EQ(OpcodeFor(Transport::kRc, Operation::kSend, Position::kMiddle, Extra::kImmediate),
            kRcSendMiddle);
  EXPECT_EQ(OpcodeFor(Transport::kUc, Operation::kWrite, Position::kFirst, Extra::kImmediate),
            kUcWriteFirst);
}

}  // namespace
}  // namespace droce::wire
