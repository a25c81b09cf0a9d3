// The general services QP (QP1, GSI) of a fabric device as droced runs it
// (doc/cm.md): CM MADs travel in RoCEv2 UD SEND_ONLY packets to and from
// QP 1 with Q_Key 0x80010000 (IBTA vol 1 13.4.6.1, 13.5.1; annex A17). This
// file builds and checks those frames; the CM (cm_service.h) fills the MADs.
// Pure: lib/wire only.
#ifndef DROCE_APPS_DROCED_CM_GSI_H_
#define DROCE_APPS_DROCED_CM_GSI_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "cm/mad.h"

namespace droce::droced {

// The addressing of a GSI packet: Ethernet and IP ends (IPv4 as an
// IPv4-mapped GID, ::ffff:a.b.c.d).
struct GsiPath {
  std::array<uint8_t, 6> src_mac{};
  std::array<uint8_t, 6> dst_mac{};
  cm::Gid src_gid{};
  cm::Gid dst_gid{};
  uint8_t tclass = 0;
  uint8_t hop_limit = 64;
  uint16_t pkey = 0xFFFF;
  bool operator==(const GsiPath&) const = default;
};

bool IsIpv4MappedGid(const cm::Gid& g);

// Room a GSI frame needs: Ethernet + IPv6 + UDP + BTH + DETH + MAD + ICRC.
inline constexpr uint32_t kGsiFrameMax = 14 + 40 + 8 + 12 + 8 + cm::kMadSize + 4;

// Writes the frame into `out` (at least kGsiFrameMax bytes); returns its length.
uint32_t BuildGsiFrame(const GsiPath& path, std::span<const uint8_t, cm::kMadSize> mad, uint32_t psn,
                       uint8_t* out);

// Why a frame for QP 1 was dropped (the daemon counts each).
enum class GsiDrop : uint8_t {
  kNone,
  kBadPacket,  // not a well-formed RoCEv2 packet with a good ICRC
  kNotUdSend,  // not UD SEND_ONLY (QP1 takes nothing else)
  kBadQkey,    // DETH Q_Key not the GSI's
  kBadLength,  // payload not one 256-byte MAD
  kCount,
};
std::string_view GsiDropName(GsiDrop d);

struct GsiPacket {
  GsiDrop drop = GsiDrop::kBadPacket;
  GsiPath from;  // the sender's ends (src_*) and ours (dst_*)
  uint32_t src_qp = 0;
  std::span<const uint8_t> mad;  // into the frame
  bool ok() const { return drop == GsiDrop::kNone; }
};

// Checks a frame addressed to QP 1.
GsiPacket ParseGsiFrame(const uint8_t* frame, uint32_t len);

// The path for answering a packet: its ends swapped.
GsiPath ReplyPath(const GsiPath& received);

}  // namespace droce::droced

#endif  // DROCE_APPS_DROCED_CM_GSI_H_
