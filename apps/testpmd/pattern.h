// The data droce-testpmd's engines send and verify: every message's bytes
// are a function of its sequence number, so a receiver can check any message
// it is given (and a WRITE target the last message of each slot).
#ifndef DROCE_APPS_TESTPMD_PATTERN_H_
#define DROCE_APPS_TESTPMD_PATTERN_H_

#include <cstdint>

namespace droce::testpmd {

// Fills `n` bytes with the pattern of message `seq` (its first 8 bytes are seq).
void FillPattern(uint8_t* p, uint32_t n, uint64_t seq);
// True iff the `n` bytes at p are exactly message `seq`'s pattern.
bool CheckPattern(const uint8_t* p, uint32_t n, uint64_t seq);

}  // namespace droce::testpmd

#endif  // DROCE_APPS_TESTPMD_PATTERN_H_
