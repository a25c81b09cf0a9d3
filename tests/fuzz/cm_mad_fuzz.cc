// libFuzzer target for the CM MAD parser (lib/cm): any bytes go in; nothing
// may be read outside the input (ASan), a MAD that parses must re-serialise
// to a MAD that parses to the same message (reserved bits cleared), and the
// RDMA CM header parser must hold to its 36-byte minimum.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cm/mad.h"
#include "cm/rdma_cm.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace droce::cm;
  if (size > 4096) return 0;
  // An exactly sized copy so overreads are caught even when the fuzzer's buffer is larger.
  const std::vector<uint8_t> bytes(data, data + size);
  const auto cma = ParseCmaHeader(bytes);
  if (cma.has_value() && (size < kCmaHeaderSize || (cma->ip_version != 4 && cma->ip_version != 6))) {
    std::abort();
  }
  // Most inputs are not 256 bytes long: also try the first 256 bytes padded,
  // so the fuzzer reaches the body parsers from short inputs.
  std::vector<uint8_t> mad(kMadSize, 0);
  for (size_t i = 0; i < size && i < kMadSize; ++i) mad[i] = bytes[i];
  for (const auto& in : {bytes, mad}) {
    const ParsedMad p = ParseMad(in);
    if (p.ok() != (p.error == MadError::kOk)) std::abort();
    if (in.size() != kMadSize && p.ok()) std::abort();
    (void)MadErrorName(p.error);
    if (!p.ok()) continue;
    const auto out = SerializeMad(p.message);
    const ParsedMad q = ParseMad(out);
    if (!q.ok() || !(q.message == p.message)) std::abort();
    if (SerializeMad(q.message) != out) std::abort();
    (void)AttrName(p.message.header.attr_id);
  }
  return 0;
}
