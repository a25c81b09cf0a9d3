#include "wire/int.h"

#include <cstring>

#include "wire/byte_order.h"

namespace droce::wire {

namespace {

void StoreHop(uint8_t* at, const IntHop& h) {
  StoreBe32(at, h.timestamp_ns);
  StoreBe32(at + 4, h.tx_bytes);
  StoreBe32(at + 8, h.qlen_bytes);
  StoreBe32(at + 12, h.line_rate_mbps);
}

// The fixed part, checked: slots and hops, or false.
bool ReadHeader(const uint8_t* at, uint32_t avail, uint8_t* slots, uint8_t* hops, bool* echo) {
  if (avail < kIntHeaderBytes) return false;
  if ((at[0] >> 4) != kIntVersion || (at[0] & 0x0F & ~kIntFlagEcho) != 0 || at[3] != 0) return false;
  if (at[1] > kIntMaxHops || at[2] > at[1] || IntHeaderBytes(at[1]) > avail) return false;
  *slots = at[1];
  *hops = at[2];
  *echo = (at[0] & kIntFlagEcho) != 0;
  return true;
}

}  // namespace

uint32_t WriteInt(uint8_t* at, const IntStack& s) {
  const uint8_t slots = s.slots > kIntMaxHops ? kIntMaxHops : s.slots;
  const uint8_t hops = s.hops > slots ? slots : s.hops;
  at[0] = static_cast<uint8_t>((kIntVersion << 4) | (s.echo ? kIntFlagEcho : 0));
  at[1] = slots;
  at[2] = hops;
  at[3] = 0;
  for (uint32_t i = 0; i < hops; ++i) StoreHop(at + kIntHeaderBytes + i * kIntHopBytes, s.hop[i]);
  std::memset(at + kIntHeaderBytes + hops * kIntHopBytes, 0, (slots - hops) * kIntHopBytes);
  return IntHeaderBytes(slots);
}

uint32_t WriteIntRequest(uint8_t* at, uint8_t slots) {
  IntStack s;
  s.slots = slots;
  return WriteInt(at, s);
}

uint32_t WriteIntEcho(uint8_t* at, const IntStack& s) {
  IntStack e = s;
  e.hops = s.hops > kIntMaxHops ? kIntMaxHops : s.hops;
  e.slots = e.hops;
  e.echo = true;
  return WriteInt(at, e);
}

uint32_t ParseInt(const uint8_t* at, uint32_t avail, IntStack* out) {
  uint8_t slots, hops;
  bool echo;
  if (!ReadHeader(at, avail, &slots, &hops, &echo)) return 0;
  out->slots = slots;
  out->hops = hops;
  out->echo = echo;
  for (uint32_t i = 0; i < hops; ++i) {
    const uint8_t* h = at + kIntHeaderBytes + i * kIntHopBytes;
    out->hop[i] = IntHop{LoadBe32(h), LoadBe32(h + 4), LoadBe32(h + 8), LoadBe32(h + 12)};
  }
  return IntHeaderBytes(slots);
}

bool PushIntHop(uint8_t* at, uint32_t avail, const IntHop& h) {
  uint8_t slots, hops;
  bool echo;
  if (!ReadHeader(at, avail, &slots, &hops, &echo) || echo || hops == slots) return false;
  StoreHop(at + kIntHeaderBytes + hops * kIntHopBytes, h);
  at[2] = static_cast<uint8_t>(hops + 1);
  return true;
}

}  // namespace droce::wire
