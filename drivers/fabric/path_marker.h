// The marker that opens a direct path (doc/droced.md "Direct rings"): the
// one frame format both droced's switch (which checks it) and the
// processes' DirectIo (which send and take it) know.
//
// A RoCEv2 frame the switch steers by its destination MAC and QPN like any
// other, with a manufacturer-specific BTH opcode (IBTA 9.2: 0xC0-0xFF) and a
// payload of kPathMarkerMagic, the path's id and the path's key. The key is
// a random number droced draws for each path and hands only to the path's
// two processes (ethdev::PeerMessage): a third process, which can address a
// frame to anyone, cannot write a marker the receiver takes; droced also
// drops a marker-shaped frame unless it is the marker of a path from the
// port it came from to the port it goes to (GlobalCounters::forged_markers).
//
// Header-only (wire's inline helpers): droced's state builds without the
// ethdev library.
#ifndef DROCE_DRIVERS_FABRIC_PATH_MARKER_H_
#define DROCE_DRIVERS_FABRIC_PATH_MARKER_H_

#include <array>
#include <cstdint>
#include <cstring>

#include "wire/byte_order.h"
#include "wire/headers.h"
#include "wire/steer.h"

namespace droce::fabric {

inline constexpr uint8_t kPathMarkerOpcode = 0xC0;
inline constexpr uint64_t kPathMarkerMagic = 0x6b72614d50495264;  // "dRIPMark"
inline constexpr uint32_t kPathMarkerPayloadBytes = 24;           // magic, path id, key
inline constexpr uint32_t kPathMarkerBytes =
    wire::kEthBytes + wire::kIpv4MinBytes + wire::kUdpBytes + wire::kBthBytes + kPathMarkerPayloadBytes;

struct PathMarker {
  uint64_t path_id = 0;
  uint64_t key = 0;
};

// Writes the marker of a path from `src` to `dst` (its first QPN dst_qpn)
// into f (kPathMarkerBytes).
inline void BuildPathMarker(uint8_t* f, const std::array<uint8_t, 6>& dst, const std::array<uint8_t, 6>& src,
                            uint32_t dst_qpn, const PathMarker& m) {
  std::memset(f, 0, kPathMarkerBytes);
  std::memcpy(f, dst.data(), 6);
  std::memcpy(f + 6, src.data(), 6);
  wire::StoreBe16(f + 12, wire::kEtherTypeIpv4);
  uint8_t* ip = f + wire::kEthBytes;
  ip[0] = 0x45;
  wire::StoreBe16(ip + 2, kPathMarkerBytes - wire::kEthBytes);
  ip[8] = 64;
  ip[9] = wire::kIpProtoUdp;
  uint8_t* udp = ip + wire::kIpv4MinBytes;
  wire::StoreBe16(udp + 2, wire::kRoceV2Port);
  wire::StoreBe16(udp + 4, kPathMarkerBytes - wire::kEthBytes - wire::kIpv4MinBytes);
  uint8_t* bth = udp + wire::kUdpBytes;
  bth[0] = kPathMarkerOpcode;
  wire::StoreBe16(bth + 2, 0xffff);
  bth[5] = static_cast<uint8_t>(dst_qpn >> 16), bth[6] = static_cast<uint8_t>(dst_qpn >> 8);
  bth[7] = static_cast<uint8_t>(dst_qpn);
  uint8_t* payload = bth + wire::kBthBytes;
  std::memcpy(payload, &kPathMarkerMagic, 8);
  std::memcpy(payload + 8, &m.path_id, 8);
  std::memcpy(payload + 16, &m.key, 8);
}

// True if a RoCEv2 frame whose BTH is at `bth` (wire::RoceBthOffset) carries
// the marker opcode: what the switch checks before it forwards one.
inline bool HasPathMarkerOpcode(const uint8_t* f, uint32_t bth) { return bth != 0 && f[bth] == kPathMarkerOpcode; }

// The path id and key of a marker frame, or false if f is no marker.
inline bool ReadPathMarker(const uint8_t* f, uint32_t len, PathMarker* out) {
  if (len != kPathMarkerBytes || wire::LoadBe16(f + 12) != wire::kEtherTypeIpv4) return false;
  const uint32_t bth = wire::RoceBthOffset(f, len);
  if (bth != wire::kEthBytes + wire::kIpv4MinBytes + wire::kUdpBytes || f[bth] != kPathMarkerOpcode) return false;
  const uint8_t* payload = f + bth + wire::kBthBytes;
  uint64_t magic;
  std::memcpy(&magic, payload, 8);
  if (magic != kPathMarkerMagic) return false;
  std::memcpy(&out->path_id, payload + 8, 8);
  std::memcpy(&out->key, payload + 16, 8);
  return true;
}

}  // namespace droce::fabric

#endif  // DROCE_DRIVERS_FABRIC_PATH_MARKER_H_
