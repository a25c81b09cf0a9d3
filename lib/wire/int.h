// In-band network telemetry (INT) between droce peers that agreed on it
// (doc/cc.md "INT"), after HPCC (Li et al., SIGCOMM 2019): a requester's data
// packets carry an empty INT header, every INT-capable switch port on the
// path fills the next hop record as the packet leaves (its clock, the bytes
// it has transmitted, its queue, its line rate), and the responder echoes the
// records it received in its acknowledgements, which switches leave alone.
//
// Where: right after the BTH's extended headers (before the payload), when
// bit 0 of BTH byte 4 (a reserved bit, masked out of the ICRC, kBthIntFlag)
// is set. A port that fills a record recomputes the ICRC. Peers that did not
// agree (rxe, ConnectX) never see the bit or the header: their wire is IBTA.
//
//   byte 0     version (kIntVersion) << 4 | flags (kIntFlagEcho)
//   byte 1     slots: hop records that follow (0..kIntMaxHops)
//   byte 2     hops: records filled, from the first (0..slots)
//   byte 3     reserved, 0
//   slots x 16 bytes, big-endian:
//     0-3   timestamp: the port's clock in ns when the packet left (low 32 bits)
//     4-7   tx_bytes: bytes the port has transmitted, this packet included (low 32 bits)
//     8-11  qlen: bytes queued at the port when the packet left (saturating)
//     12-15 line rate in Mb/s
// Timestamps and byte counts wrap: a receiver of two records of one port uses
// their differences modulo 2^32 (a 100 Gb/s port wraps its byte count in
// 0.34 s, its clock in 4.3 s).
#ifndef DROCE_LIB_WIRE_INT_H_
#define DROCE_LIB_WIRE_INT_H_

#include <cstdint>

namespace droce::wire {

inline constexpr uint8_t kBthIntFlag = 0x01;  // BTH byte 4: an INT header follows the extended headers
inline constexpr uint8_t kIntVersion = 1;
inline constexpr uint8_t kIntFlagEcho = 0x01;  // the responder's echo: switches do not stamp it
inline constexpr uint32_t kIntMaxHops = 5;     // a fat tree's longest path: ToR, Agg, Core, Agg, ToR
inline constexpr uint32_t kIntHeaderBytes = 4;
inline constexpr uint32_t kIntHopBytes = 16;
inline constexpr uint32_t kIntMaxBytes = kIntHeaderBytes + kIntMaxHops * kIntHopBytes;

struct IntHop {
  uint32_t timestamp_ns = 0;
  uint32_t tx_bytes = 0;
  uint32_t qlen_bytes = 0;
  uint32_t line_rate_mbps = 0;
};

// What one header holds, decoded.
struct IntStack {
  uint8_t slots = 0;
  uint8_t hops = 0;
  bool echo = false;
  IntHop hop[kIntMaxHops];
};

inline constexpr uint32_t IntHeaderBytes(uint32_t slots) { return kIntHeaderBytes + slots * kIntHopBytes; }

// `s` as it is (slots, the hops filled, the echo flag); slots and hops are
// capped at kIntMaxHops and slots. Returns the bytes written.
uint32_t WriteInt(uint8_t* at, const IntStack& s);
// An empty header with `slots` records (zeroed) for a data packet; `slots`
// must be at most kIntMaxHops. Returns the bytes written.
uint32_t WriteIntRequest(uint8_t* at, uint8_t slots);
// The echo of `s` (its filled records only). Returns the bytes written.
uint32_t WriteIntEcho(uint8_t* at, const IntStack& s);
// Decodes the header at [at, at + avail). Returns its length, or 0 if it is
// malformed (another version, more slots than kIntMaxHops or than `avail`
// holds, more hops than slots, a non-zero reserved byte or flag bit).
uint32_t ParseInt(const uint8_t* at, uint32_t avail, IntStack* out);
// A switch port's stamp: fills the next free record of a request header.
// False (nothing written) if the header is malformed, an echo, or full.
bool PushIntHop(uint8_t* at, uint32_t avail, const IntHop& h);

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_INT_H_
