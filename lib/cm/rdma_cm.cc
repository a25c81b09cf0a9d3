#include "cm/rdma_cm.h"

#include <cstring>

#include "wire/byte_order.h"

namespace droce::cm {

std::optional<CmaHeader> ParseCmaHeader(std::span<const uint8_t> pd) {
  if (pd.size() < kCmaHeaderSize) return std::nullopt;
  CmaHeader h;
  h.cma_version = pd[0];
  h.ip_version = static_cast<uint8_t>(pd[1] >> 4);
  if (h.cma_version != kCmaVersion || (h.ip_version != 4 && h.ip_version != 6)) return std::nullopt;
  h.port = wire::LoadBe16(pd.data() + 2);
  std::memcpy(h.src.data(), pd.data() + 4, 16);
  std::memcpy(h.dst.data(), pd.data() + 20, 16);
  return h;
}

void StoreCmaHeader(const CmaHeader& h, std::span<uint8_t> out) {
  if (out.size() < kCmaHeaderSize) return;
  out[0] = h.cma_version;
  out[1] = static_cast<uint8_t>(h.ip_version << 4);
  wire::StoreBe16(out.data() + 2, h.port);
  std::memcpy(out.data() + 4, h.src.data(), 16);
  std::memcpy(out.data() + 20, h.dst.data(), 16);
}

}  // namespace droce::cm
