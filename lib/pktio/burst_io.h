// Burst packet I/O: the one interface between the RNIC (lib/) and whatever
// moves frames (a DPDK ethdev queue, a pcap file, the in-memory wire).
//
// Shape of rte_eth_rx_burst/rte_eth_tx_burst: arrays and counts in, counts out.
// One indirect call per burst, never per packet. The backend owns frame
// storage; `Frame::handle` lets it find its buffer again (an rte_mbuf*, a pool
// slot). lib/ never sees an mbuf.
#ifndef DROCE_LIB_PKTIO_BURST_IO_H_
#define DROCE_LIB_PKTIO_BURST_IO_H_

#include <cstdint>
#include <cstring>

namespace droce::pktio {

// Largest frame any backend must carry: 4096 B MTU payload plus
// Eth(14)+VLAN(4)+IPv6(40)+UDP(8)+BTH(12)+RETH(16)+ImmDt(4)+pad(3)+ICRC(4), rounded up.
inline constexpr uint32_t kMaxFrameBytes = 4096 + 256;

struct Frame {
  uint8_t* data = nullptr;  // first byte of the Ethernet header
  uint32_t len = 0;         // valid bytes at data
  uint32_t capacity = 0;    // writable bytes at data (>= kMaxFrameBytes for TX buffers)
  void* handle = nullptr;   // the backend's own reference to the buffer
  // A gather frame (built only for a port that TakesGather): its len bytes
  // are data[0, gather_at), then gather[0, gather_len), then data[gather_at,
  // len - gather_len). The gathered bytes are a payload in registered
  // memory, read where it is; they must stay readable until the port has
  // taken the frame.
  const uint8_t* gather = nullptr;
  uint32_t gather_len = 0;
  uint32_t gather_at = 0;

  // A lent received frame (only from a port asked to, StartLending: frames that
  // arrive in memory the sender shares, the direct rings): data holds only
  // its first lent_head() bytes (the headers), copied; all len bytes are at
  // lent(), which the sender can still write while the receiver reads it.
  // The receiver reads each byte there at most once (a field read twice may
  // differ) and calls TakeLent before reading the frame any other way.
  // null: data holds the whole frame. A transmit frame is never lent and a
  // received one never gathers, so lending uses the gather fields: a Frame
  // stays 40 bytes, which ports build and copy per frame.
  const uint8_t* lent() const { return gather; }
  uint32_t lent_head() const { return gather_at; }
  // The lending port's own mark on a frame it lent (non-zero: which slot it
  // has to take back when the frame is released). TakeLent keeps it: a
  // frame the receiver copied whole is still the port's slot until
  // released. Lend(nullptr, 0) clears it, for a frame that was never lent.
  uint32_t lend_mark() const { return gather_len; }
  void Lend(const uint8_t* whole, uint32_t head, uint32_t mark = 0) {
    gather = whole;
    gather_at = head;
    gather_len = mark;
  }
  // A gather frame's pieces fit in its len bytes (a frame that is not one
  // trivially does): only then may a port read or copy them.
  bool GatherAddsUp() const { return gather_len <= len && gather_at <= len - gather_len; }
};

static_assert(sizeof(Frame) == 40);

// Copies the rest of a lent frame into its own buffer (which holds len
// bytes): then it is an ordinary frame, whatever the sender writes after.
inline void TakeLent(Frame& f) {
  if (f.lent() == nullptr) return;
  std::memcpy(f.data + f.lent_head(), f.lent() + f.lent_head(), f.len - f.lent_head());
  f.Lend(nullptr, 0, f.lend_mark());
}

// Copies a gather frame's gathered bytes into its own buffer (capacity
// permitting: a transmit buffer holds kMaxFrameBytes): then it is an
// ordinary frame, whatever happens to the memory it pointed into. False if
// it does not fit (the frame is left as it was).
inline bool Flatten(Frame& f) {
  if (f.gather_len == 0) return true;
  if (!f.GatherAddsUp() || f.len > f.capacity) return false;
  std::memmove(f.data + f.gather_at + f.gather_len, f.data + f.gather_at, f.len - f.gather_len - f.gather_at);
  std::memcpy(f.data + f.gather_at, f.gather, f.gather_len);
  f.gather = nullptr;
  f.gather_len = 0;
  f.gather_at = 0;
  return true;
}

// Flattens every gather frame of frames[0..n): what a port that takes them
// hands on to one that does not, or gives back unsent, so that none
// outlives its TxBurst (BurstIo::TakesGather). Returns how many it copied;
// a frame Flatten refuses (longer than its buffer: no transport builds
// one) stays as it is.
inline uint32_t FlattenEach(Frame* frames, uint32_t n) {
  uint32_t flattened = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (frames[i].gather_len != 0 && Flatten(frames[i])) ++flattened;
  }
  return flattened;
}

class BurstIo {
 public:
  virtual ~BurstIo() = default;

  // Receives up to n frames into frames[0..). The caller owns them until it
  // passes them to Release() (or TxBurst() to forward them).
  virtual uint16_t RxBurst(Frame* frames, uint16_t n) = 0;

  // Hands out up to n empty transmit buffers (len 0, capacity >= kMaxFrameBytes).
  virtual uint16_t AllocTx(Frame* frames, uint16_t n) = 0;

  // Queues frames[0..n) for transmission and returns how many were accepted;
  // accepted frames belong to the backend again. The caller keeps the rest
  // (frames[ret..n)) and retries or releases them.
  virtual uint16_t TxBurst(Frame* frames, uint16_t n) = 0;

  // Returns frames (received ones, or unsent transmit buffers) to the backend.
  virtual void Release(Frame* frames, uint16_t n) = 0;

  // Whether whoever takes this port's transmitted frames reads them while
  // the sender is still building more (a ring in memory that another
  // process or thread drains: memif, the direct rings, droced's link). Then
  // a long message's full frames leave core::DeviceConfig::tx_flush_bytes at
  // a time, and the reader places the first ones meanwhile. A port whose
  // every TxBurst is a system call (a socket) says false: a split burst
  // costs a call and its fixed kernel work per piece, and the kernel hands
  // the receiver nothing sooner. Read once, when a core::Device is made on
  // the port.
  virtual bool ReadConcurrently() const { return true; }

  // Whether TxBurst takes gather frames (Frame::gather): a port that reads
  // each frame's bytes from wherever they are while it sends them (a socket's
  // sendmmsg with an iovec per piece), so the transport need not copy a
  // payload into the frame first. A port that takes them flattens (Flatten)
  // every gather frame it hands on or gives back, so that none outlives the
  // TxBurst call that brought it, and hands out transmit buffers (AllocTx)
  // with gather_len 0. Read once, when a core::Device is made on the port.
  virtual bool TakesGather() const { return false; }

  // The receiver asks the port to hand out lent frames (Frame::lent) from
  // now on; true if it will (a port whose frames arrive in memory the
  // sender shares: the direct rings). A core::Device asks once, when it is
  // made on the port, and handles lent frames only if the answer was yes. A
  // port in front of another forwards the request when it passes the other's
  // received frames on as they are, else says no (the default): so a layer
  // that knows nothing of lending never gets a lent frame.
  virtual bool StartLending() { return false; }

  // True when an RxBurst now would return nothing, known without receiving
  // and without a system call (a look at a ring's indices). A port in front
  // of another (a layer that adds sources of its own: the direct rings, a
  // socket) answers for its sources and asks the port behind it. A port
  // that cannot tell says false, as the default does: a caller may skip a
  // poll on this (verbs Runtime::IdleLocked skips an idle poll_cq's round),
  // and a port nobody taught to answer then never hides a frame from it.
  virtual bool KnownEmpty() { return false; }
};

// frames[0..n) to `inner`, a port behind the caller (DirectIo's port,
// UdpIo's direct rings): flattened first (counted in *flattened) unless
// inner takes gather frames, whose refused ones it flattens itself.
// Returns how many inner took.
inline uint16_t TxBurstToInner(BurstIo* inner, bool inner_takes_gather, Frame* frames, uint16_t n,
                               uint64_t* flattened) {
  if (!inner_takes_gather) *flattened += FlattenEach(frames, n);
  return inner->TxBurst(frames, n);
}

}  // namespace droce::pktio

#endif  // DROCE_LIB_PKTIO_BURST_IO_H_
