// A net_memif port's transmit without the PMD: each frame is copied once,
// straight from the caller's buffer into the memif ring's buffer, and the
// ring's index published with one store per burst; no mbuf is involved, so
// the buffers the frames were built in can be plain memory (EthdevPort's
// transmit pool). DPDK's eth_memif_tx does the same copy but needs an mbuf
// per frame (allocated, then freed into the mempool) and its per-call
// checks: ~300 instructions of a 64 B WRITE's post on the verbs path
// (tools/bench/verbs/results.md).
//
// It reads the ring through DPDK 22.11's private structures
// (dpdk_private.h) on every burst, as the PMD does, so a reconnection's new
// regions are picked up at once; the link's unmap race is the caller's
// (EthdevPort runs Send under unmap_guard.h, as it runs the PMD's bursts).
// A burst of several small frames (kStreamBurstFrames or more, each of at
// most kStreamFrameBytes: message-rate traffic) is copied with
// non-temporal stores in whole lines (memif_tx::StreamCopy): the buffer's
// lines were last read by the peer's CPU, and a plain store must first
// take each line from it, which stalls the sender once its store buffer
// fills; a streaming store writes the line without taking it. The peer
// then reads the frame from memory instead of from our cache, which costs
// it latency: so a burst of one or two frames (a request and its ACK, a
// ping-pong's message) and large frames (where the reader's copy, not the
// sender's, is the limit) are copied as before. After any other burst on
// the client's C2S ring, the lines the next frames will be written to are
// asked for in the exclusive state (memif_tx::PrefetchForWrite).
// The ring's protocol is memif's: the client's C2S ring is written at its
// head into the buffers the client laid out, the server's S2C ring at its
// tail into the buffers the client refilled (their lengths the client's);
// frames longer than a buffer take several descriptors chained with
// MEMIF_DESC_FLAG_NEXT; after the store the peer is woken through the
// queue's eventfd if its ring asks for interrupts.
#ifndef DROCE_DRIVERS_ETHDEV_MEMIF_TX_H_
#define DROCE_DRIVERS_ETHDEV_MEMIF_TX_H_

#include <cstdint>
#include <memory>
#include <string>

#include "drivers/ethdev/dpdk_private.h"
#include "pktio/burst_io.h"

namespace droce::ethdev {

struct MemifTxCounters {
  uint64_t bad_descriptors = 0;  // frames dropped: a descriptor outside the peer's region (a hostile or buggy peer)
  uint64_t wakeups = 0;          // eventfd writes to a peer that asked for interrupts
};

namespace memif_tx {

// What the copy needs of a ring: its descriptors, the region its buffers
// lie in, and whose buffers they are: the client's C2S ring's, which it
// laid out, all of c2s_buffer bytes, slot k's at c2s_first_offset + k *
// c2s_buffer (its descriptor written whole with each frame, never read);
// or the S2C ring's, each descriptor's length its buffer's, as the client
// wrote it when it refilled the ring.
struct RingView {
  dpdk_private::MemifDesc* desc = nullptr;
  uint16_t mask = 0;  // ring size - 1
  uint8_t* base = nullptr;
  uint64_t region_size = 0;
  uint16_t region_index = 0;
  bool c2s = false;
  uint32_t c2s_buffer = 0;  // 0: every slot is bad
  uint32_t c2s_first_offset = 0;
  // Copy frames of at most kStreamFrameBytes with StreamCopy (where the
  // buffer is 64-byte aligned and holds the frame rounded up to 64 bytes);
  // the caller fences (sfence) before publishing them.
  bool stream = false;
};

// The bursts whose small frames MemifTx copies with non-temporal stores:
// at least this many frames, and the frames at most this long (a 64 B
// WRITE's frame is 138 bytes).
inline constexpr uint16_t kStreamBurstFrames = 3;
inline constexpr uint32_t kStreamFrameBytes = 256;

// Copies len bytes from src to dst (64-byte aligned, with room for len
// rounded up to 64) with non-temporal stores, zeros after len to the end
// of its last line. The stores are weakly ordered: an sfence must come
// before whatever publishes them.
void StreamCopy(uint8_t* dst, const uint8_t* src, uint32_t len);

// Copies a prefix of frames[0..n) into the ring's descriptors from *slot
// on, at most free_slots of them, and moves *slot past the frames it
// published (a frame longer than a buffer takes several descriptors
// chained with MEMIF_DESC_FLAG_NEXT). Returns how many frames it took; a
// frame whose descriptor lies outside the region is taken but not
// published (counted in bad_descriptors); a frame whose chain finds no
// free slot is not taken. *bytes: the published frames' bytes. The index
// store that publishes them is the caller's.
uint16_t CopyFrames(const RingView& r, uint16_t* slot, uint16_t free_slots, const pktio::Frame* frames, uint16_t n,
                    uint64_t* bytes, MemifTxCounters* counters);

// The first `bytes` of the C2S ring's buffer for `slot` as the client laid
// it out (buffer 0 at r.c2s_first_offset, the others each r.c2s_buffer
// further on), or nullptr where that span does not lie wholly within the
// region (the first offset and the step are read from descriptors a peer
// can write).
uint8_t* C2sBuffer(const RingView& r, uint16_t slot, uint32_t bytes);

// The most lines of a buffer PrefetchForWrite asks for, and how far ahead
// of the ring's head MemifTx asks.
inline constexpr uint32_t kPrefetchLines = 4;
inline constexpr uint16_t kPrefetchSlots = 16;

// Asks for the lines the next frames on a C2S ring will be written to, in
// the exclusive state (prefetchw): the first `lines` lines of the buffers of
// slots [from, from + count) (C2sBuffer: never outside the region) and the
// descriptor lines that begin at one of those slots (a line that also holds
// an earlier slot may hold a published descriptor the peer is reading).
// Their stores then find the line this CPU's own instead of waiting for
// the peer's CPU to give it up, and the fence after the index store (Send)
// waits for less. A hint: no effect on the ring's contents.
void PrefetchForWrite(const RingView& r, uint16_t from, uint16_t count, uint32_t lines);

// Whether this CPU has PREFETCHW (CPUID 0x80000001 ECX bit 8; the build's
// x86-64-v2 baseline does not promise it).
bool HavePrefetchW();

}  // namespace memif_tx

class MemifTx {
 public:
  // The transmit path of `port`'s TX queue 0, or nullptr with the reason
  // (not net_memif, not DPDK 22.11, a layout check failed). The queue must
  // be set up; the connection may come later.
  static std::unique_ptr<MemifTx> For(uint16_t port, std::string* why_not);

  // Copies a prefix of frames[0..n) into the ring and publishes it; returns
  // how many it took (0 while the port is not connected, fewer than n when
  // the ring is full). A frame whose descriptor lies outside its region is
  // taken and dropped (counted). The frames stay the caller's. *bytes: the
  // bytes of the frames it published.
  uint16_t Send(const pktio::Frame* frames, uint16_t n, uint64_t* bytes);

  const MemifTxCounters& counters() const { return counters_; }

 private:
  MemifTx(uint16_t port, const uint8_t* dev) : port_(port), dev_(dev) {}
  uint16_t port_;
  const uint8_t* dev_;  // rte_eth_devices[port_]
  bool prefetch_ = memif_tx::HavePrefetchW();
  // The C2S ring's slot up to which buffers were prefetched (a hint: a
  // value outside the next kPrefetchSlots, e.g. after a reconnection, is
  // taken as the head).
  uint16_t prefetched_ = 0;
  MemifTxCounters counters_;
};

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_MEMIF_TX_H_
