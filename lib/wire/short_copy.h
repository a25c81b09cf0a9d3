// A short payload's copy inline: 16 to 64 bytes as two to four overlapping
// 16-byte moves, without libc's call and its dispatch on the size per
// packet (the sender's short build and the responder's expected WRITE/SEND
// each copy one such payload per message); other sizes through memcpy.
#ifndef DROCE_WIRE_SHORT_COPY_H_
#define DROCE_WIRE_SHORT_COPY_H_

#include <cstdint>
#include <cstring>

namespace droce::wire {

[[gnu::always_inline]] inline void CopyShortPayload(uint8_t* out, const uint8_t* from, uint32_t len) {
  if (len - 16 <= 48) {  // 16..64 (a length below 16 wraps above 48)
    std::memcpy(out, from, 16);
    std::memcpy(out + len - 16, from + len - 16, 16);
    if (len > 32) {
      std::memcpy(out + 16, from + 16, 16);
      std::memcpy(out + len - 32, from + len - 32, 16);
    }
  } else if (len > 0) {
    std::memcpy(out, from, len);
  }
}

}  // namespace droce::wire

#endif  // DROCE_WIRE_SHORT_COPY_H_
