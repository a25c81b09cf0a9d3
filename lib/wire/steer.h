// Steering reads: the few fields a switch or a NIC's loopback looks at to
// decide where a frame goes, without parsing or checking the whole packet
// (that is the receiver's job: ParsePacket and the ICRC check). Used by
// pktio::LoopbackIo (is this frame for one of my own QPs?) and by droced's
// switch (which process owns the destination QP?).
#ifndef DROCE_LIB_WIRE_STEER_H_
#define DROCE_LIB_WIRE_STEER_H_

#include <cstdint>

#include "wire/byte_order.h"
#include "wire/headers.h"
#include "wire/opcode.h"

namespace droce::wire {

// The BTH of a RoCEv2 frame (Ethernet [802.1Q] IPv4|IPv6 UDP:4791 BTH):
// its offset, or 0 if the frame is not RoCEv2 or too short to hold a BTH.
inline uint32_t RoceBthOffset(const uint8_t* f, uint32_t len) {
  const L3Info l3 = ReadL3(f, len);
  uint32_t off = l3.l3_offset;
  if (l3.ether_type == kEtherTypeIpv4) {
    if (len < off + kIpv4MinBytes || (f[off] >> 4) != 4 || f[off + 9] != kIpProtoUdp) return 0;
    const uint32_t ihl = (f[off] & 0x0fu) * 4u;
    if (ihl < kIpv4MinBytes) return 0;
    off += ihl;
  } else if (l3.ether_type == kEtherTypeIpv6) {
    if (len < off + kIpv6Bytes || (f[off] >> 4) != 6 || f[off + 6] != kIpProtoUdp) return 0;
    off += kIpv6Bytes;
  } else {
    return 0;
  }
  if (len < off + kUdpBytes + kBthBytes || LoadBe16(f + off + 2) != kRoceV2Port) return 0;
  return off + kUdpBytes;
}

// The destination QP of a RoCEv2 frame whose BTH is at `bth`
// (RoceBthOffset), or -1 if bth is 0 (not RoCEv2).
inline int64_t RoceDestQpAt(const uint8_t* f, uint32_t bth) {
  if (bth == 0) return -1;
  return (uint32_t{f[bth + 5]} << 16) | (uint32_t{f[bth + 6]} << 8) | f[bth + 7];
}

// The destination QP of a RoCEv2 frame (24 bits), or -1 if it is not one.
inline int64_t RoceDestQp(const uint8_t* f, uint32_t len) { return RoceDestQpAt(f, RoceBthOffset(f, len)); }

// The destination IP of an IPv4 or IPv6 frame as a 16-byte GID
// (IPv4 as ::ffff:a.b.c.d); false for anything else.
inline bool DestIpAsGid(const uint8_t* f, uint32_t len, uint8_t out[16]) {
  const L3Info l3 = ReadL3(f, len);
  if (l3.ether_type == kEtherTypeIpv4 && len >= l3.l3_offset + kIpv4MinBytes) {
    for (int i = 0; i < 10; ++i) out[i] = 0;
    out[10] = out[11] = 0xff;
    for (int i = 0; i < 4; ++i) out[12 + i] = f[l3.l3_offset + 16 + i];
    return true;
  }
  if (l3.ether_type == kEtherTypeIpv6 && len >= l3.l3_offset + kIpv6Bytes) {
    for (int i = 0; i < 16; ++i) out[i] = f[l3.l3_offset + 24 + i];
    return true;
  }
  return false;
}

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_STEER_H_
