// The opcode table (IBTA 9.2 / Table 35, RoCEv2 Annex A17 for CNP): one entry
// per BTH opcode saying which extended headers it carries, where they sit,
// and what role it plays. Every parser, builder and state machine asks this
// table instead of switching on opcode values.
#ifndef DROCE_LIB_WIRE_OPCODE_H_
#define DROCE_LIB_WIRE_OPCODE_H_

#include <array>
#include <cstddef>
#include <cstdint>

namespace droce::wire {

enum Opcode : uint8_t {
  // Reliable Connection.
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0A,
  kRcWriteOnlyImm = 0x0B,
  kRcReadRequest = 0x0C,
  kRcReadResponseFirst = 0x0D,
  kRcReadResponseMiddle = 0x0E,
  kRcReadResponseLast = 0x0F,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  // Unreliable Connection.
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2A,
  kUcWriteOnlyImm = 0x2B,
  // Unreliable Datagram.
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // RoCEv2 congestion notification packet.
  kCnp = 0x81,
  // droce selective repeat (doc/transport.md "Selective repeat"): manufacturer
  // specific opcodes (IBTA 9.2, Table 35: 110xxxxx), sent only to a peer that
  // agreed on selective repeat. An SR data opcode is kSrOpcodeBase | the RC
  // SEND/WRITE opcode it stands for (SrOpcode), with an SRETH after the BTH
  // instead of a RETH; the SACK answers requests.
  kSrOpcodeBase = 0xC0,
  kSrSack = 0xD1,  // kSrOpcodeBase | RC ACKNOWLEDGE: BTH + AETH + SACKETH
};

// The SR variant of an RC SEND/WRITE opcode (0x00-0x0B, 0x16, 0x17).
constexpr uint8_t SrOpcode(uint8_t rc_opcode) { return kSrOpcodeBase | rc_opcode; }

enum class Transport : uint8_t { kRc, kUc, kUd, kCnp };

// Extended transport headers, in the order they follow the BTH.
enum HeaderBit : uint16_t {
  kHdrReth = 1 << 0,
  kHdrAeth = 1 << 1,
  kHdrAtomicAckEth = 1 << 2,
  kHdrAtomicEth = 1 << 3,
  kHdrDeth = 1 << 4,
  kHdrImmDt = 1 << 5,
  kHdrIeth = 1 << 6,
  kHdrCnpPad = 1 << 7,
  kHdrSrEth = 1 << 8,    // droce selective repeat: where a SEND/WRITE packet goes
  kHdrSackEth = 1 << 9,  // droce selective repeat: what the responder holds
};

// What an opcode means for the transport.
enum RoleBit : uint32_t {
  kRoleRequest = 1 << 0,
  kRoleResponse = 1 << 1,
  kRoleFirst = 1 << 2,
  kRoleMiddle = 1 << 3,
  kRoleLast = 1 << 4,
  kRoleOnly = kRoleFirst | kRoleLast,
  kRoleSend = 1 << 5,
  kRoleWrite = 1 << 6,
  kRoleReadRequest = 1 << 7,
  kRoleReadResponse = 1 << 8,
  kRoleAtomic = 1 << 9,
  kRoleAck = 1 << 10,         // ACKNOWLEDGE / ATOMIC ACKNOWLEDGE
  kRolePayload = 1 << 11,     // may carry payload
  kRoleImmediate = 1 << 12,   // carries ImmDt, completes with IMM
  kRoleInvalidate = 1 << 13,  // carries IETH
  kRoleConsumesRecv = 1 << 14,  // consumes a receive WQE when it completes a message
  kRoleCnp = 1 << 15,
  kRoleCompare = 1 << 16,  // COMPARE SWAP: the atomic compares before it swaps
  kRoleSr = 1 << 17,       // a droce selective-repeat opcode (0xC0-0xDF)
};

inline constexpr uint32_t kBthBytes = 12;
inline constexpr uint32_t kRethBytes = 16;
inline constexpr uint32_t kAethBytes = 4;
inline constexpr uint32_t kAtomicAckEthBytes = 8;
inline constexpr uint32_t kAtomicEthBytes = 28;
inline constexpr uint32_t kDethBytes = 8;
inline constexpr uint32_t kImmDtBytes = 4;
inline constexpr uint32_t kIethBytes = 4;
inline constexpr uint32_t kCnpPadBytes = 16;
inline constexpr uint32_t kIcrcBytes = 4;
inline constexpr uint32_t kSrEthBytes = 24;
// The first missing PSN (a 32-bit word) and a 1024-bit bitmap (headers.h,
// kSackBits).
inline constexpr uint32_t kSackEthBytes = 4 + 1024 / 8;

struct OpcodeInfo {
  const char* name;  // nullptr: not a valid opcode
  Transport transport;
  uint16_t headers;  // HeaderBit set
  uint32_t roles;    // RoleBit set
  // Offsets from the start of the BTH; 0 where the header is absent.
  uint8_t reth_offset, aeth_offset, atomic_ack_offset, atomic_offset, deth_offset, immdt_offset,
      ieth_offset, sreth_offset, sacketh_offset;
  uint8_t header_bytes;  // BTH + all extended headers: where the payload starts

  constexpr bool valid() const { return name != nullptr; }
  constexpr bool Has(HeaderBit h) const { return (headers & h) != 0; }
  constexpr bool Is(uint32_t role_bits) const { return (roles & role_bits) == role_bits; }
};

using OpcodeTable = std::array<OpcodeInfo, 256>;
extern const OpcodeTable kOpcodeTable;

inline const OpcodeInfo& OpInfo(uint8_t opcode) { return kOpcodeTable[opcode]; }

// Choosing an opcode to send: the table entry for (transport, operation,
// position in the message, immediate/invalidate), found by the role bits
// at compile time (opcode.cc) rather than by opcode arithmetic.
enum class Operation : uint8_t {
  kSend,          // kRoleSend
  kWrite,         // kRoleWrite
  kReadRequest,   // kRoleReadRequest
  kReadResponse,  // kRoleReadResponse
  kCompareSwap,   // kRoleAtomic | kRoleCompare
  kFetchAdd,      // kRoleAtomic
  kCount,
};
// Where a packet sits in its message (IBTA 9.2: FIRST, MIDDLE, LAST, ONLY).
enum class Position : uint8_t { kFirst, kMiddle, kLast, kOnly, kCount };
// What the message's last packet carries besides its payload.
enum class Extra : uint8_t { kNone, kImmediate, kInvalidate, kCount };

constexpr Position PositionOf(bool first, bool last) {
  return first ? (last ? Position::kOnly : Position::kFirst)
               : (last ? Position::kLast : Position::kMiddle);
}

// kOpcodeNone where the table has no such opcode (a UC READ, a WRITE with
// invalidate, ...). FIRST and MIDDLE packets carry no immediate or IETH
// (those go with the last packet): asked for one, they answer the plain
// FIRST/MIDDLE opcode.
inline constexpr uint8_t kOpcodeNone = 0xFF;  // reserved in Table 35

inline constexpr size_t kOpcodeSelectSize = 4 * static_cast<size_t>(Operation::kCount) *
                                            static_cast<size_t>(Position::kCount) *
                                            static_cast<size_t>(Extra::kCount);
extern const std::array<uint8_t, kOpcodeSelectSize> kOpcodeSelect;

constexpr size_t OpcodeSelectIndex(Transport t, Operation o, Position p, Extra e) {
  return ((static_cast<size_t>(t) * static_cast<size_t>(Operation::kCount) +
           static_cast<size_t>(o)) *
              static_cast<size_t>(Position::kCount) +
          static_cast<size_t>(p)) *
             static_cast<size_t>(Extra::kCount) +
         static_cast<size_t>(e);
}

inline uint8_t OpcodeFor(Transport t, Operation o, Position p, Extra e = Extra::kNone) {
  return kOpcodeSelect[OpcodeSelectIndex(t, o, p, e)];
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_OPCODE_H_
