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
    case kHdrSrEth: return kSrEthBytes;
    case kHdrSackEth: return kSackEthBytes;
  }
  return 0;
}

// Lays the extended headers out in wire order and fills in the offsets.
constexpr OpcodeInfo Make(const char* name, Transport t, uint16_t headers, uint32_t roles) {
  OpcodeInfo info{name, t, headers, roles, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  uint32_t off = kBthBytes;
  constexpr HeaderBit kOrder[] = {kHdrSrEth, kHdrDeth,    kHdrReth,  kHdrAtomicEth, kHdrAeth,
                                  kHdrSackEth, kHdrAtomicAckEth, kHdrImmDt, kHdrIeth, kHdrCnpPad};
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
      case kHdrSrEth: info.sreth_offset = o; break;
      case kHdrSackEth: info.sacketh_offset = o; break;
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

  // droce selective repeat: each RC SEND/WRITE opcode's twin, its RETH (if
  // any) replaced by an SRETH right after the BTH (doc/transport.md).
  constexpr const char* kSrNames[24] = {
      "SR_SEND_FIRST",         "SR_SEND_MIDDLE",      "SR_SEND_LAST",
      "SR_SEND_LAST_WITH_IMM", "SR_SEND_ONLY",        "SR_SEND_ONLY_WITH_IMM",
      "SR_WRITE_FIRST",        "SR_WRITE_MIDDLE",     "SR_WRITE_LAST",
      "SR_WRITE_LAST_WITH_IMM", "SR_WRITE_ONLY",      "SR_WRITE_ONLY_WITH_IMM",
      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
      "SR_SEND_LAST_WITH_INVALIDATE", "SR_SEND_ONLY_WITH_INVALIDATE"};
  for (uint8_t op = 0; op < 24; ++op) {
    if (kSrNames[op] == nullptr) continue;
    const OpcodeInfo base = t[op];
    t[SrOpcode(op)] = Make(kSrNames[op], rc, static_cast<uint16_t>((base.headers & ~kHdrReth) | kHdrSrEth),
                           base.roles | kRoleSr);
  }
  t[kSrSack] = Make("SR_SACK", rc, kHdrAeth | kHdrSackEth, kResp | kRoleAck | kRoleOnly | kRoleSr);
  return t;
}

constexpr uint32_t OperationRoles(Operation o) {
  switch (o) {
    case Operation::kSend: return kRoleSend;
    case Operation::kWrite: return kRoleWrite;
    case Operation::kReadRequest: return kRoleReadRequest;
    case Operation::kReadResponse: return kRoleReadResponse;
    case Operation::kCompareSwap: return kRoleAtomic | kRoleCompare;
    case Operation::kFetchAdd: return kRoleAtomic;
    case Operation::kCount: break;
  }
  return 0;
}

constexpr uint32_t PositionRoles(Position p) {
  switch (p) {
    case Position::kFirst: return kRoleFirst;
    case Position::kMiddle: return kRoleMiddle;
    case Position::kLast: return kRoleLast;
    case Position::kOnly: return kRoleOnly;
    case Position::kCount: break;
  }
  return 0;
}

constexpr uint32_t ExtraRoles(Extra e) {
  switch (e) {
    case Extra::kNone: return 0;
    case Extra::kImmediate: return kRoleImmediate;
    case Extra::kInvalidate: return kRoleInvalidate;
    case Extra::kCount: break;
  }
  return 0;
}

// The one opcode of transport t whose operation, position and extra roles
// are exactly these (the other role bits say nothing about the choice).
constexpr uint8_t FindOpcode(const OpcodeTable& table, Transport t, Operation o, Position p,
                             Extra e) {
  constexpr uint32_t kChoice = kRoleSend | kRoleWrite | kRoleReadRequest | kRoleReadResponse |
                               kRoleAtomic | kRoleCompare | kRoleFirst | kRoleMiddle | kRoleLast |
                               kRoleImmediate | kRoleInvalidate | kRoleAck | kRoleSr;
  if (p == Position::kFirst || p == Position::kMiddle) e = Extra::kNone;
  const uint32_t want = OperationRoles(o) | PositionRoles(p) | ExtraRoles(e);
  for (size_t op = 0; op < table.size(); ++op) {
    const OpcodeInfo& info = table[op];
    if (info.valid() && info.transport == t && (info.roles & kChoice) == want) {
      return static_cast<uint8_t>(op);
    }
  }
  return kOpcodeNone;
}

constexpr std::array<uint8_t, kOpcodeSelectSize> BuildSelect() {
  const OpcodeTable table = BuildTable();
  std::array<uint8_t, kOpcodeSelectSize> s{};
  for (uint8_t t = 0; t < 4; ++t) {
    for (uint8_t o = 0; o < static_cast<uint8_t>(Operation::kCount); ++o) {
      for (uint8_t p = 0; p < static_cast<uint8_t>(Position::kCount); ++p) {
        for (uint8_t e = 0; e < static_cast<uint8_t>(Extra::kCount); ++e) {
          const auto tr = static_cast<Transport>(t);
          const auto op = static_cast<Operation>(o);
          const auto pos = static_cast<Position>(p);
          const auto ex = static_cast<Extra>(e);
          s[OpcodeSelectIndex(tr, op, pos, ex)] = FindOpcode(table, tr, op, pos, ex);
        }
      }
    }
  }
  return s;
}

constexpr std::array<uint8_t, kOpcodeSelectSize> kSelect = BuildSelect();

constexpr uint8_t Sel(Transport t, Operation o, Position p, Extra e = Extra::kNone) {
  return kSelect[OpcodeSelectIndex(t, o, p, e)];
}
// The lookup agrees with Table 35 where a requester or responder asks it.
static_assert(Sel(Transport::kRc, Operation::kWrite, Position::kOnly, Extra::kImmediate) ==
              kRcWriteOnlyImm);
static_assert(Sel(Transport::kRc, Operation::kWrite, Position::kFirst, Extra::kImmediate) ==
              kRcWriteFirst);
static_assert(Sel(Transport::kUc, Operation::kSend, Position::kLast, Extra::kImmediate) ==
              kUcSendLastImm);
static_assert(Sel(Transport::kRc, Operation::kSend, Position::kOnly, Extra::kInvalidate) ==
              kRcSendOnlyInv);
static_assert(Sel(Transport::kUc, Operation::kSend, Position::kOnly, Extra::kInvalidate) ==
              kOpcodeNone);
static_assert(Sel(Transport::kRc, Operation::kReadRequest, Position::kOnly) == kRcReadRequest);
static_assert(Sel(Transport::kRc, Operation::kReadResponse, Position::kMiddle) ==
              kRcReadResponseMiddle);
static_assert(Sel(Transport::kRc, Operation::kCompareSwap, Position::kOnly) == kRcCompareSwap);
static_assert(Sel(Transport::kRc, Operation::kFetchAdd, Position::kOnly) == kRcFetchAdd);
static_assert(Sel(Transport::kRc, Operation::kWrite, Position::kMiddle) == kRcWriteMiddle,
              "IBTA opcodes, never the selective-repeat twins");
static_assert(BuildTable()[SrOpcode(kRcWriteMiddle)].sreth_offset == kBthBytes &&
              BuildTable()[SrOpcode(kRcWriteOnlyImm)].immdt_offset == kBthBytes + kSrEthBytes &&
              !BuildTable()[SrOpcode(kRcWriteFirst)].Has(kHdrReth) &&
              BuildTable()[kSrSack].sacketh_offset == kBthBytes + kAethBytes);
static_assert(Sel(Transport::kUd, Operation::kSend, Position::kOnly, Extra::kImmediate) ==
              kUdSendOnlyImm);

}  // namespace

constinit const OpcodeTable kOpcodeTable = BuildTable();
constinit const std::array<uint8_t, kOpcodeSelectSize> kOpcodeSelect = kSelect;

}  // namespace droce::wire
