// libFuzzer target for the wire parser: any bytes go in; a packet that
// parses and verifies must decode and re-serialise to the same bytes, and
// nothing may read outside the input (ASan).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "wire/fields.h"
#include "wire/packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace droce::wire;
  if (size > 10000) return 0;
  // An exactly sized copy so overreads are caught even when the fuzzer's buffer is larger.
  std::vector<uint8_t> frame(data, data + size);
  const auto len = static_cast<uint32_t>(size);
  const ParsedPacket headers = ParseHeaders(frame.data(), len);
  if (headers.ok() && headers.payload_offset > len) std::abort();
  const ParsedPacket p = ParseAndVerify(frame.data(), len);
  if (!p.ok()) return 0;
  if (p.end() > len || p.payload_offset + p.payload_len > p.icrc_offset) std::abort();
  const PacketFields f = DecodeFields(frame.data(), p);
  (void)DescribePacket(frame.data(), p);
  std::vector<uint8_t> out(size + 128);
  auto n = SerializeFields(f, out.data(), static_cast<uint32_t>(out.size()));
  // Re-serialisation normalises only what the packet left to convention: the
  // IPv4 header checksum is recomputed and pad bytes are zeroed. A verified
  // packet with a wrong IPv4 checksum or non-zero pad therefore differs there.
  if (!n.ok() || *n != p.end()) std::abort();
  const ParsedPacket q = ParseAndVerify(out.data(), *n);
  if (!q.ok() || q.opcode != p.opcode || q.payload_len != p.payload_len) std::abort();
  if (std::memcmp(out.data() + q.payload_offset, frame.data() + p.payload_offset, p.payload_len) != 0) {
    std::abort();
  }
  return 0;
}
