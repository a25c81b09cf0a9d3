// Direct rings between the processes of one droced fabric: the NIC's
// embedded switch offloading the data path (doc/droced.md "Direct rings").
//
// droced pairs two attached ports (a process on a device) that exchange
// frames through its switch with a memfd holding two pktio::FrameRings, one
// per direction, and an eventfd per direction, and passes them over each side's control connection with
// SCM_RIGHTS: only those two processes ever map the memory (the daemon
// never does, and closes its descriptors once sent). `DirectIo` wraps the
// port to the daemon (memif): a transmitted frame whose destination MAC and
// QPN belong to a peer goes into that peer's ring (one copy), everything
// else (ARP/ND, QP 1, broadcast and multicast, uplinks, a device with switch
// knobs set) through the port, as before. RxBurst polls the inbound rings
// and the port. A frame read from a ring is delivered only if it is
// addressed to this port's MAC and QPN range; anything else is dropped and
// counted: a peer cannot make us receive what the switch would not.
//
// A path opens with a marker (doc/droced.md "Direct rings"): the sender
// puts a marker frame for the peer into the port first and its later frames
// to the peer into the ring; the receiver reads the ring only once the
// marker came out of the port. The switch keeps each sender's frames to a
// receiver in order, so every frame the sender gave the switch before the
// path existed is delivered before any of the ring's: a path set up while
// the pair is talking (droced sets one up at a pair's first switched frame)
// reorders nothing.
//
// No allocation, logging or system call per frame; a wake-up (an eventfd
// write) only when the receiver sleeps and asked for one (FrameRing::Arm),
// or when a sender sleeps with frames its full ring refused and asked to be
// woken once slots are free (FrameRing::ArmProducer): the receiver, having
// freed some, writes the same eventfd the sender sleeps on for arrivals.
// Not thread-safe: the owner (the verbs runtime, under its mutex) calls
// everything from one thread at a time.
#ifndef DROCE_DRIVERS_ETHDEV_DIRECT_IO_H_
#define DROCE_DRIVERS_ETHDEV_DIRECT_IO_H_

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "drivers/fabric/path_marker.h"
#include "pktio/burst_io.h"
#include "pktio/frame_ring.h"

namespace droce::ethdev {

// droced -> process, unasked, on the control connection (SOCK_SEQPACKET),
// one per datagram; kPeerAdd carries three descriptors (SCM_RIGHTS): the
// memfd, this side's receive eventfd, the peer's receive eventfd.
inline constexpr uint32_t kPeerMagic = 0x64524950;  // "dRIP"
inline constexpr uint16_t kPeerVersion = 2;
enum PeerOp : uint16_t {
  kPeerAdd = 1,     // a direct path to a peer port: use it from now on
  kPeerRemove = 2,  // withdraw path `path_id` (the peer left, or the switch needs its frames)
};
struct PeerMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t op;
  uint32_t size;         // sizeof(PeerMessage)
  uint32_t generation;   // the daemon's table version for this port: +1 per message
  uint64_t path_id;
  uint8_t peer_mac[6];
  uint8_t pad[2];
  uint32_t peer_qpn_base;   // the peer's QPNs [base, base + count)
  uint32_t peer_qpn_count;
  uint32_t slots;           // each ring's geometry (FrameRing::ValidGeometry)
  uint32_t slot_bytes;
  uint32_t my_ring;         // 0 or 1: the ring this side consumes; it produces into the other
  uint32_t peer_pid;        // for status and logs only
  uint64_t marker_key;      // the path's key: its markers carry it (fabric/path_marker.h)
  uint8_t reserved[16];     // zero
};
static_assert(sizeof(PeerMessage) == 80);

// Sends `m` with `nfds` descriptors (SCM_RIGHTS), without blocking.
// Returns 0 or an errno.
int SendPeerMessage(int sock, const PeerMessage& m, const int* fds, int nfds);
// Any datagram of `len` bytes with up to 3 descriptors, the same way.
int SendWithFds(int sock, const void* buf, unsigned long len, const int* fds, int nfds);
// Receives one datagram without blocking: its length (0: the peer closed
// the connection; -1 with errno, EAGAIN: nothing there) and up to 3
// descriptors it carried (close-on-exec); *nfds says how many.
long ReceiveWithFds(int sock, void* buf, unsigned long len, int fds[3], int* nfds);

struct DirectCounters {
  uint64_t tx_direct = 0;      // frames put into a peer's ring
  uint64_t tx_ring_full = 0;   // transmit bursts a full ring stopped (the device retries)
  uint64_t tx_gathered = 0;    // of tx_direct, gather frames: their payload copied into the slot from where it was
  uint64_t tx_flattened = 0;   // gather frames copied whole instead (for the port, or handed back unsent)
  uint64_t rx_direct = 0;      // frames taken from the rings and delivered
  uint64_t rx_lent = 0;        // of those, lent (only the headers copied: pktio::Frame::lent)
  uint64_t rx_not_mine = 0;    // frames from a ring for another MAC or QPN: dropped
  uint64_t rx_bad_length = 0;  // ring slots with a bad length: dropped
  uint64_t wakeups_sent = 0;   // eventfd writes (the peer slept)
  // Sleeps (Arm) with frames a full ring held back: the peer is asked to
  // wake this side once it frees slots.
  uint64_t tx_full_sleeps = 0;
  uint64_t producer_wakeups_sent = 0;  // eventfd writes: the peer slept on its full ring, slots were freed
  uint64_t paths_added = 0, paths_removed = 0, messages_refused = 0;
  uint64_t markers_sent = 0, markers_received = 0;
  // Rings opened without their marker (lost on the switch's way: its ring to
  // this process was full) once the port had nothing while the ring had held
  // frames for kMarkerWaitNs.
  uint64_t markers_missed = 0;
  // Marker frames whose key is not their path's (another process wrote
  // them): ignored, the ring stays as it was.
  uint64_t markers_forged = 0;
};

class DirectIo final : public pktio::BurstIo {
 public:
  // Monotonic nanoseconds: read only while a path waits for its marker
  // (kMarkerWaitNs) or its ring refuses every frame (kMarkerResendNs).
  using Clock = std::function<uint64_t()>;
  // `inner`: the port to the daemon. Frames are delivered to this side only
  // for `own_mac` and QPNs [qpn_first, qpn_first + qpn_count). Without a
  // clock, CLOCK_MONOTONIC.
  DirectIo(pktio::BurstIo* inner, const std::array<uint8_t, 6>& own_mac, uint32_t qpn_first, uint32_t qpn_count,
           Clock clock = nullptr);
  ~DirectIo() override;
  DirectIo(const DirectIo&) = delete;
  DirectIo& operator=(const DirectIo&) = delete;

  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override;
  // No frame waits in any direct ring nor, as far as it can tell, in the
  // port to the daemon.
  bool KnownEmpty() override { return RingsEmpty() && inner_->KnownEmpty(); }
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override { return inner_->AllocTx(frames, n); }
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override;
  // Gather frames (pktio::Frame::gather) routed to a ring are copied into
  // its slot in their three pieces (FrameRing::Produce): the payload once,
  // from the registered memory, with no frame buffer between. Those for
  // the port are flattened first unless the port takes them too (asked
  // once, here), and every frame handed back unsent is flattened before
  // TxBurst returns.
  bool TakesGather() const override { return true; }
  // From now on a long frame from a ring is lent: its headers copied, its
  // payload read in the slot (kLendFromBytes). Until then every frame is
  // copied whole.
  // Only where allowed (AllowLending): the verbs runtime allows it unless
  // the device says `direct_lend=off`.
  bool StartLending() override {
    lend_ = lend_allowed_;
    return lend_;
  }
  void AllowLending(bool on) { lend_allowed_ = on; }
  // Gives a lent frame's slot back to its ring once every frame its burst
  // lent is back (the ring frees slots in order, a whole Peek at a time).
  void Release(pktio::Frame* frames, uint16_t n) override;

  // One message from the daemon with the descriptors that came with it (this
  // takes them: kept or closed). Checks every field and the memfd (size,
  // seals) before mapping it.
  absl::Status Apply(const PeerMessage& m, const int* fds, int nfds);
  // Every path goes (the daemon is gone).
  void RemoveAll();
  size_t paths() const { return paths_.size(); }
  // The last transmit burst stopped at a full ring (not at the port): the
  // device holds the rest back, and the receiver's freeing slots is what
  // lets it go on; a sleep armed now (Arm) asks the receiver to say so.
  bool tx_blocked_on_ring() const { return tx_blocked_on_ring_; }
  uint32_t generation() const { return generation_; }

  // Sleeping: `wire_fd` is the port's armed arrival descriptor. Asks every
  // inbound ring for a wake-up, and every outbound ring that refused frames
  // of the last transmit for one when slots are freed (the device holds
  // those frames back: without it the sender would sleep out its timer),
  // and returns the descriptor to poll: wire_fd
  // itself without paths, else an epoll set of it and the rings' eventfds
  // (-1 if that cannot be set up: sleep on timers). Poll once more before
  // sleeping. Disarm after waking (drains the rings' eventfds).
  int Arm(int wire_fd);
  void Disarm();

  const DirectCounters& counters() const { return counters_; }

  // How long frames may wait in a closed ring, the port having nothing,
  // before the ring opens without its marker (counted markers_missed). Long
  // enough for a marker still in droced's burst or held for a full ring to
  // come (a daemon descheduled for a few milliseconds); a lost marker costs
  // the path this much once.
  static constexpr uint64_t kMarkerWaitNs = 5'000'000;
  // How long a full ring may refuse every frame before the marker goes
  // again: the switch drops what does not fit the receiver's link ring,
  // markers too, and a receiver still waiting for its marker never empties
  // the ring (an extra marker is taken out and ignored).
  static constexpr uint64_t kMarkerResendNs = 2'000'000;
  // A frame from a ring this long is lent (pktio::Frame::lent): only its
  // first kLendHeadBytes are copied, the rest stays in the slot until the
  // device releases it. Shorter ones are copied whole: their copy costs
  // less than the device's handling of a lent frame. kLendHeadBytes holds
  // every header of the packets the device places from a lent frame
  // (Eth, VLAN, IPv6, UDP, BTH, AETH or ImmDt: 86 bytes); a frame whose
  // headers run past it is copied whole by the device.
  static constexpr uint32_t kLendFromBytes = 1024;
  static constexpr uint32_t kLendHeadBytes = 128;

 private:
  bool RingsEmpty() const {
    for (const Path& p : paths_) {
      if (p.rx.Available() != 0) return false;
    }
    return true;
  }
  struct Path {
    uint64_t id = 0;
    uint64_t key = 0;  // its markers carry it (fabric/path_marker.h)
    std::array<uint8_t, 6> mac{};
    uint32_t qpn_first = 0, qpn_count = 0;
    void* map = nullptr;
    size_t map_bytes = 0;
    pktio::FrameRing rx, tx;
    int rx_efd = -1, tx_efd = -1;
    uint32_t peer_pid = 0;
    bool warm = false;  // prefaulted (Warm)
    bool marker_sent = false;  // this side's frames to the peer take the ring
    bool marker_due = true;    // a marker is to go through the port (SendMarkers)
    bool refusing = false;       // the ring took nothing of the last transmit burst for it
    bool tx_held = false;        // the ring refused frames of the last transmit burst for it (Arm)
    uint64_t refusing_since_ns = 0;
    bool rx_open = false;        // the peer's marker came: the ring is read
    bool rx_waiting = false;     // the closed ring has held frames since rx_wait_since_ns
    uint64_t rx_wait_since_ns = 0;
    // The daemon withdrew the path (its peer left, a knob): nothing goes
    // into it any more, and it closes once the frames the peer wrote before
    // are read (a peer that wrote and exited at once leaves them there).
    bool withdrawn = false;
    // Frames of the last Peek lent to the device and not yet released; the
    // ring is not read again until they are all back.
    uint32_t rx_lent = 0;
    // Its lent frames carry it (pktio::Frame::lend_mark): Release finds the
    // path by it, whatever the device did with the frame, and paths_ may
    // have lost another path meanwhile (CloseDrained). Non-zero, unique.
    uint32_t lend_mark = 0;
  };
  // Up to `room` frames of p's ring into out (buffers from the port): the
  // short ones copied, the long ones lent. Returns how many.
  uint16_t TakeFromRing(Path& p, pktio::Frame* out, uint16_t room);
  // A path's memory is prefaulted (ethdev/prefault.h: page tables at once,
  // not a fault per page on the first pass) when its first frame goes in or
  // comes out, not when it is set up: a path's first frames cross the switch
  // until the marker has (a path can be set up and withdrawn without ever
  // carrying one, e.g. by a knob).
  void Warm(Path& p);
  // After freeing slots of p's inbound ring: wakes the peer if it sleeps
  // with frames for this side that the full ring refused.
  void WakeProducer(Path& p);
  // TxBurst without flattening what it hands back.
  uint16_t Send(pktio::Frame* frames, uint16_t n);
  // frames[0..n) to the port, flattened first unless it takes gather frames.
  uint16_t ToPort(pktio::Frame* frames, uint16_t n);
  // The path whose peer owns the frame's destination, or -1 (the port).
  int Route(const pktio::Frame& f) const;
  bool Mine(const pktio::Frame& f) const;
  void Close(Path& p);
  // Closes the withdrawn paths whose rings are read empty.
  void CloseDrained();
  // Sends the markers of the paths that have not sent theirs (the port may
  // refuse them when full: the next TxBurst tries again).
  void SendMarkers();
  // Takes the markers out of frames[0..n) (the port's), opening their
  // paths; returns how many frames are left.
  uint16_t TakeMarkers(pktio::Frame* frames, uint16_t n);
  void OpenRx(const fabric::PathMarker& m);
  // The ring of p took nothing of a transmit burst: after kMarkerResendNs of
  // that, its marker is due again.
  void NoteRingRefused(Path& p);
  // p's ring is closed and holds frames: true (and the ring opens, counted
  // markers_missed) once that has lasted kMarkerWaitNs and the port is empty.
  bool MarkerWaitOver(Path& p);

  pktio::BurstIo* inner_;
  Clock clock_;
  std::array<uint8_t, 6> mac_;
  uint32_t qpn_first_, qpn_count_;
  bool inner_gather_;        // the port takes gather frames (BurstIo::TakesGather)
  std::vector<Path> paths_;  // few: one per peer port
  uint32_t generation_ = 0;
  uint32_t rx_next_ = 0;     // the source RxBurst starts with (rotates: no source starves)
  uint32_t markers_unsent_ = 0;  // paths whose marker the port has not taken yet
  uint32_t withdrawn_paths_ = 0;  // withdrawn paths still holding frames (CloseDrained)
  bool lend_ = false;         // StartLending was called, and lending is allowed
  bool lend_allowed_ = false;
  uint32_t paths_lent_ = 0;  // paths with rx_lent != 0 (Release looks only then)
  uint32_t lend_marks_ = 0;  // the last Path::lend_mark given
  bool port_was_empty_ = false;  // the port's last burst had nothing (TakeMarkers)
  // Markers that came before their path's kPeerAdd (the control connection
  // is read once a millisecond): the path opens at once when it arrives.
  // Their keys are checked when the path arrives.
  std::vector<fabric::PathMarker> early_markers_;
  static constexpr size_t kMaxEarlyMarkers = 64;
  int epoll_fd_ = -1;
  int armed_wire_fd_ = -1;
  bool armed_ = false;
  bool tx_blocked_on_ring_ = false;  // tx_blocked_on_ring()
  DirectCounters counters_;
};

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_DIRECT_IO_H_
