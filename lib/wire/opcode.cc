#include "wire/opcode.h"

namespace droce::wire {
namespace {

constexpr uint32_t HeaderSize(HeaderBit h) {
  switch (h) {
    case kHdrReth: return kRethBytes;
    case kHdrAeth: return kAethBytes;
    case kHdrAtomicAckEth: return kAtomicAckEthBytes;
    case kHdrAtomicEth: return kAtomicEthBytes;
    case kHdrDeth: return kDethBytes;
    case kHdrImmDt: return kImmDtBytes;
    case kHdrIeth: return kIethBytes;
    case kHdrCnpPad: return kCnpPadBytes;
  }
  return 0;
}

// Lays the extended headers out in wire order and fills in the offsets.
constexpr OpcodeInfo Make(const char* name, Transport t, uint16_t headers, uint32_t roles) {
  OpcodeInfo info{name, t, headers, roles, 0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t off = kBthBytes;
  constexpr HeaderBit kOrder[] = {kHdrDeth, kHdrReth,    kHdrAtomicEth, kHdrAeth,
                                  kHdrAtomicAckEth, kHdrImmDt, kHdrIeth, kHdrCnpPad};
  for (HeaderBit h : kOrder) {
    if (!(headers & h)) continue;
    const auto o = static_cast<uint8_t>(off);
    switch (h) {
      case kHdrReth: info.reth_offset = o; break;
      case kHdrAeth: info.aeth_offset = o; break;
      case kHdrAtomicAckEth: info.atomic_ack_offset = o; break;
      case kHdrAtomicEth: info.atomic_offset = o; break;
      case kHdrDeth: info.deth_offset = o; break;
      case kHdrImmDt: info.immdt_offset = o; break;
      case kHdrIeth: info.ieth_offset = o; break;
      case kHdrCnpPad: break;
    }
    off += HeaderSize(h);
  }
  info.header_bytes = static_cast<uint8_t>(off);
  return info;
}

constexpr uint32_t kReq = kRoleRequest;
constexpr uint32_t kResp = kRoleResponse;
constexpr uint32_t kSendP = kRoleSend | kRolePayload;
constexpr uint32_t kWriteP = kRoleWrite | kRolePayload;
constexpr uint32_t kRecv = kRoleConsumesRecv;

// Send/write families are the same for RC and UC; only the transport differs.
constexpr void AddConnected(OpcodeTable& t, uint8_t base, Transport tr, const char* const names[12]) {
  t[base + 0x0] = Make(names[0], tr, 0, kReq | kSendP | kRoleFirst);
  t[base + 0x1] = Make(names[1], tr, 0, kReq | kSendP | kRoleMiddle);
  t[base + 0x2] = Make(names[2], tr, 0, kReq | kSendP | kRoleLast | kRecv);
  t[base + 0x3] = Make(names[3], tr, kHdrImmDt, kReq | kSendP | kRoleLast | kRoleImmediate | kRecv);
  t[base + 0x4] = Make(names[4], tr, 0, kReq | kSendP | kRoleOnly | kRecv);
  t[base + 0x5] = Make(names[5], tr, kHdrImmDt, kReq | kSendP | kRoleOnly | kRoleImmediate | kRecv);
  t[base + 0x6] = Make(names[6], tr, kHdrReth, kReq | kWriteP | kRoleFirst);
  t[base + 0x7] = Make(names[7], tr, 0, kReq | kWriteP | kRoleMiddle);
  t[base + 0x8] = Make(names[8], tr, 0, kReq | kWriteP | kRoleLast);
  t[base + 0x9] =
      Make(names[9], tr, kHdrImmDt, kReq | kWriteP | kRoleLast | kRoleImmediate | kRecv);
  t[base + 0xA] = Make(names[10], tr, kHdrReth, kReq | kWriteP | kRoleOnly);
  t[base + 0xB] = Make(names[11], tr, kHdrReth | kHdrImmDt,
                       kReq | kWriteP | kRoleOnly | kRoleImmediate | kRecv);
}

constexpr OpcodeTable BuildTable() {
  OpcodeTable t{};
  constexpr const char* kRcNames[12] = {
      "RC_SEND_FIRST",         "RC_SEND_MIDDLE",      "RC_SEND_LAST",
      "RC_SEND_LAST_WITH_IMM", "RC_SEND_ONLY",        "RC_SEND_ONLY_WITH_IMM",
      "RC_WRITE_FIRST",        "RC_WRITE_MIDDLE",     "RC_WRITE_LAST",
      "RC_WRITE_LAST_WITH_IMM", "RC_WRITE_ONLY",      "RC_WRITE_ONLY_WITH_IMM"};
  constexpr const char* kUcNames[12] = {
      "UC_SEND_FIRST",         "UC_SEND_MIDDLE",      "UC_SEND_LAST",
      "UC_SEND_LAST_WITH_IMM", "UC_SEND_ONLY",        "UC_SEND_ONLY_WITH_IMM",
      "UC_WRITE_FIRST",        "UC_WRITE_MIDDLE",     "UC_WRITE_LAST",
      "UC_WRITE_LAST_WITH_IMM", "UC_WRITE_ONLY",      "UC_WRITE_ONLY_WITH_IMM"};
  AddConnected(t, 0x00, Transport::kRc, kRcNames);
  AddConnected(t, 0x20, Transport::kUc, kUcNames);

  const Transport rc = Transport::kRc;
  t[kRcReadRequest] = Make("RC_READ_REQUEST", rc, kHdrReth, kReq | kRoleReadRequest | kRoleOnly);
  t[kRcReadResponseFirst] = Make("RC_READ_RESPONSE_FIRST", rc, kHdrAeth,
                                 kResp | kRoleReadResponse | kRolePayload | kRoleFirst);
  t[kRcReadResponseMiddle] = Make("RC_READ_RESPONSE_MIDDLE", rc, 0,
                                  kResp | kRoleReadResponse | kRolePayload | kRoleMiddle);
  t[kRcReadResponseLast] = Make("RC_READ_RESPONSE_LAST", rc, kHdrAeth,
                                kResp | kRoleReadResponse | kRolePayload | kRoleLast);
  t[kRcReadResponseOnly] = Make("RC_READ_RESPONSE_ONLY", rc, kHdrAeth,
                                kResp | kRoleReadResponse | kRolePayload | kRoleOnly);
  t[kRcAcknowledge] = Make("RC_ACKNOWLEDGE", rc, kHdrAeth, kResp | kRoleAck | kRoleOnly);
  t[kRcAtomicAcknowledge] = Make("RC_ATOMIC_ACKNOWLEDGE", rc, kHdrAeth | kHdrAtomicAckEth,
                                 kResp | kRoleAck | kRoleAtomic | kRoleOnly);
  t[kRcCompareSwap] = Make("RC_COMPARE_SWAP", rc, kHdrAtomicEth, kReq | kRoleAtomic | kRoleCompare | kRoleOnly);
  t[kRcFetchAdd] = Make("RC_FETCH_ADD", rc, kHdrAtomicEth, kReq | kRoleAtomic | kRoleOnly);
  t[kRcSendLastInv] = Make("RC_SEND_LAST_WITH_INVALIDATE", rc, kHdrIeth,
                           kReq | kSendP | kRoleLast | kRoleInvalidate | kRecv);
  t[kRcSendOnlyInv] = Make("RC_SEND_ONLY_WITH_INVALIDATE", rc, kHdrIeth,
                           kReq | kSendP | kRoleOnly | kRoleInvalidate | kRecv);

  t[kUdSendOnly] =
      Make("UD_SEND_ONLY", Transport::kUd, kHdrDeth, kReq | kSendP | kRoleOnly | kRecv);
  t[kUdSendOnlyImm] = Make("UD_SEND_ONLY_WITH_IMM", Transport::kUd, kHdrDeth | kHdrImmDt,
                           kReq | kSendP | kRoleOnly | kRoleImmediate | kRecv);
  t[kCnp] = Make("CNP", Transport::kCnp, kHdrCnpPad, kRoleCnp);
  return t;
}

}  // namespace

constinit const OpcodeTable kOpcodeTable = BuildTable();

}  // namespace droce::wire
