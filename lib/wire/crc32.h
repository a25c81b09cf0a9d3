// CRC-32 (IEEE 802.3 polynomial 0x04C11DB7, reflected), the CRC the RoCEv2
// ICRC uses. Seedable, so the ICRC can run over a masked copy of the headers
// and then continue over the payload in place, without copying the packet.
//
// Implementations, chosen once at start-up from CPUID:
//   - AVX-512 + VPCLMULQDQ: eight 512-bit accumulators, 512 bytes per iteration;
//   - SSE4.1 + PCLMULQDQ: folds 64 bytes per iteration (Intel's
//     "Fast CRC Computation Using PCLMULQDQ", reflected variant);
//   - the same with AVX's VEX encoding for buffers under 512 bytes (three-
//     operand instructions: fewer register copies where latency, not
//     throughput, bounds the work);
//   - slice-by-8 tables: portable fallback and reference for short tails.
#ifndef DROCE_LIB_WIRE_CRC32_H_
#define DROCE_LIB_WIRE_CRC32_H_

#include <cstddef>
#include <cstdint>

namespace droce::wire {

// The raw CRC register: start with kCrc32Init, feed bytes with Crc32Update,
// finish with Crc32Final (bit inversion). Crc32(p, n) does all three.
inline constexpr uint32_t kCrc32Init = 0xFFFFFFFFu;
uint32_t Crc32Update(uint32_t state, const uint8_t* data, size_t len);
inline uint32_t Crc32Final(uint32_t state) { return ~state; }
inline uint32_t Crc32(const uint8_t* data, size_t len) {
  return Crc32Final(Crc32Update(kCrc32Init, data, len));
}

enum class Crc32Impl { kTable, kPclmul, kPclmulAvx, kVpclmulAvx512 };

// The implementation Crc32Update uses on this CPU.
Crc32Impl ActiveCrc32Impl();
const char* Crc32ImplName(Crc32Impl impl);

// Runs one specific implementation (for tests and benchmarks). Falls back to
// the table when the CPU lacks the instructions `impl` needs.
uint32_t Crc32UpdateWith(Crc32Impl impl, uint32_t state, const uint8_t* data, size_t len);
bool Crc32ImplSupported(Crc32Impl impl);

// Copies len bytes from src to dst (not overlapping) and feeds them to the
// CRC register in the same pass: the result equals Crc32Update(state, src,
// len) and dst equals src afterwards. The transmit path gathers a payload
// into its frame with it instead of a memcpy followed by a CRC pass.
uint32_t Crc32CopyUpdate(uint32_t state, uint8_t* dst, const uint8_t* src, size_t len);
uint32_t Crc32CopyUpdateWith(Crc32Impl impl, uint32_t state, uint8_t* dst, const uint8_t* src,
                             size_t len);
// Crc32CopyUpdate for a source another party can write while it is read
// (a lent frame, pktio::Frame::lent): every byte of src is loaded exactly
// once, so the CRC is of the bytes stored at dst whatever src turns into
// meanwhile. (Crc32CopyUpdate may load a byte twice: a short buffer's head
// and first block overlap, and the table implementation copies and then
// reads the source.) `impl` as Crc32CopyUpdateWith; kActive: the one
// Crc32CopyUpdate runs.
uint32_t Crc32CopyOnceUpdate(uint32_t state, uint8_t* dst, const uint8_t* src, size_t len);
uint32_t Crc32CopyOnceUpdateWith(Crc32Impl impl, uint32_t state, uint8_t* dst, const uint8_t* src, size_t len);

// Bytes ORed into the start of a buffer before it is fed to the CRC: the
// ICRC's "variant fields set to ones" (IBTA A17.3.3) without copying the
// headers. Only bytes[0, kCrc32OrMaskBytes) may be non-zero; the zero tail
// lets the vector code read the mask past a short buffer's end.
inline constexpr size_t kCrc32OrMaskBytes = 64;
struct alignas(64) Crc32OrMask {
  uint8_t bytes[2 * kCrc32OrMaskBytes] = {};
};
// Crc32Update over data[i] | mask.bytes[i] (i < 64) and data[i] after;
// `data` is only read, never written.
uint32_t Crc32UpdateOrMasked(uint32_t state, const uint8_t* data, size_t len,
                             const Crc32OrMask& mask);
uint32_t Crc32UpdateOrMaskedWith(Crc32Impl impl, uint32_t state, const uint8_t* data, size_t len,
                                 const Crc32OrMask& mask);

}  // namespace droce::wire

#endif  // DROCE_LIB_WIRE_CRC32_H_
