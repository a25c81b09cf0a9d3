// Every field of a RoCEv2 packet as plain values: what `droce-pcap dump`
// prints and what golden tests re-serialise. The transmit path does not use
// this (it writes headers in place from a Route); tools and tests do.
#ifndef DROCE_LIB_WIRE_FIELDS_H_
#define DROCE_LIB_WIRE_FIELDS_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "wire/headers.h"
#include "wire/int.h"
#include "wire/packet.h"

namespace droce::wire {

struct BthFields {
  uint8_t opcode = 0;
  bool solicited = false;
  bool mig_req = false;
  uint8_t tver = 0;
  uint16_t pkey = 0xFFFF;
  bool fecn = false;
  bool becn = false;
  uint8_t resv6 = 0;
  uint32_t dest_qp = 0;
  bool ack_req = false;
  uint8_t resv7 = 0;
  uint32_t psn = 0;
};

struct PacketFields {
  RouteFields route;
  BthFields bth;
  uint8_t pad = 0;  // decoded pad count; serialisation recomputes it from payload length
  // Extended headers (present per the opcode table).
  uint64_t reth_va = 0;
  uint32_t reth_rkey = 0;
  uint32_t reth_length = 0;
  uint8_t aeth_syndrome = 0;
  uint32_t aeth_msn = 0;
  uint64_t atomic_va = 0;
  uint32_t atomic_rkey = 0;
  uint64_t atomic_swap_add = 0;
  uint64_t atomic_compare = 0;
  uint64_t atomic_ack_original = 0;
  uint32_t deth_qkey = 0;
  uint8_t deth_resv8 = 0;
  uint32_t deth_src_qp = 0;
  uint32_t imm_data = 0;      // as on the wire (big-endian value)
  uint32_t ieth_rkey = 0;
  // droce selective repeat (doc/transport.md): SRETH and SACKETH.
  uint64_t sreth_va = 0;
  uint32_t sreth_rkey = 0;
  uint32_t sreth_length = 0;
  uint32_t sreth_offset = 0;
  uint32_t sreth_recv_seq = 0;
  uint32_t sack_base_psn = 0;
  uint64_t sack_bits[kSackBits / 64] = {};
  // In-band telemetry (wire/int.h): after the extended headers when present
  // (serialising sets BTH byte 4's kBthIntFlag).
  bool has_int = false;
  IntStack int_stack;
  std::span<const uint8_t> payload;  // points into the decoded frame
  uint32_t icrc = 0;                 // as stored
};

// Decodes a frame ParsePacket accepted.
PacketFields DecodeFields(const uint8_t* frame, const ParsedPacket& p);

// Writes the frame for `f` (recomputing lengths, checksum, pad and ICRC) into
// out[0..capacity). Fails if the opcode is unknown or the frame does not fit.
absl::StatusOr<uint32_t> SerializeFields(const PacketFields& f, uint8_t* out, uint32_t capacity);

// Writes BTH and extended headers for `f` at `bth` (and the INT header if
// f.has_int); returns their length.
uint32_t WriteTransportHeaders(const PacketFields& f, uint8_t* bth);

// One line in the manner of tshark: opcode name, QPN, PSN, AckReq, RETH,
// AETH, ImmDt, INT, lengths, ECN.
std::string DescribePacket(const uint8_t* frame, const ParsedPacket& p);
std::string AethDescription(uint8_t syndrome);

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_FIELDS_H_
