// What the RDMA CM (IP addressing over the IB CM, IBTA vol 1 annex A11) adds
// to the CM messages: the service id that names a port space and port, and
// the 36-byte IP header at the front of a REQ's (and a SIDR_REQ's) private
// data. Wire-compatible with Linux's cma.c (struct cma_hdr, CMA_VERSION 0,
// IPv4 addresses in the last 4 bytes of each 16-byte address, rest zero).
#ifndef DROCE_LIB_CM_RDMA_CM_H_
#define DROCE_LIB_CM_RDMA_CM_H_

#include <array>
#include <cstdint>
#include <optional>
#include <span>

namespace droce::cm {

// Port spaces (enum rdma_ucm_port_space in rdma_user_cm.h).
enum class PortSpace : uint16_t {
  kIpoib = 0x0002,
  kTcp = 0x0106,
  kUdp = 0x0111,
  kIb = 0x013F,
};

// Annex A11.2: service id = 0x0000000001 | port space (low byte) | port.
constexpr uint64_t ServiceId(PortSpace ps, uint16_t port) {
  return (uint64_t{static_cast<uint16_t>(ps)} << 16) | port;
}

struct ServicePort {
  PortSpace ps;
  uint16_t port;
  bool operator==(const ServicePort&) const = default;
};

// The port space and port a service id names, or nothing for a service id
// outside the RDMA IP CM ranges.
constexpr std::optional<ServicePort> DecodeServiceId(uint64_t sid) {
  const uint64_t ps = sid >> 16;
  const auto port = static_cast<uint16_t>(sid);
  switch (ps) {
    case static_cast<uint16_t>(PortSpace::kIpoib):
    case static_cast<uint16_t>(PortSpace::kTcp):
    case static_cast<uint16_t>(PortSpace::kUdp):
    case static_cast<uint16_t>(PortSpace::kIb):
      return ServicePort{static_cast<PortSpace>(ps), port};
    default:
      return std::nullopt;
  }
}

inline constexpr uint32_t kCmaHeaderSize = 36;
inline constexpr uint8_t kCmaVersion = 0x00;
// Private data a user can pass with rdma_connect on RDMA_PS_TCP: the REQ's
// area less the header (librdmacm's and Linux's limit, 56 bytes).
inline constexpr uint32_t kRdmaCmReqUserPrivateData = 92 - kCmaHeaderSize;

using IpAddr = std::array<uint8_t, 16>;

// An IPv4 address (host order) as cma_ip_addr holds it.
constexpr IpAddr Ipv4Addr(uint32_t v4) {
  IpAddr a{};
  a[12] = static_cast<uint8_t>(v4 >> 24);
  a[13] = static_cast<uint8_t>(v4 >> 16);
  a[14] = static_cast<uint8_t>(v4 >> 8);
  a[15] = static_cast<uint8_t>(v4);
  return a;
}

struct CmaHeader {
  uint8_t cma_version = kCmaVersion;
  uint8_t ip_version = 4;  // high nibble of byte 1 on the wire: 4 or 6
  uint16_t port = 0;       // the active side's (source) port
  IpAddr src{};
  IpAddr dst{};
  bool operator==(const CmaHeader&) const = default;
};

// Reads the header from the front of private data; nothing for data shorter
// than 36 bytes, a version other than 0 or an IP version other than 4 and 6
// (Linux's cma_check_hdr rejects the same).
std::optional<CmaHeader> ParseCmaHeader(std::span<const uint8_t> private_data);

// Writes the header into the first 36 bytes of `out` (which must hold them).
void StoreCmaHeader(const CmaHeader& h, std::span<uint8_t> out);

}  // namespace droce::cm

#endif  // DROCE_LIB_CM_RDMA_CM_H_
