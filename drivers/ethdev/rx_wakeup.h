// Sleeping until a frame arrives, for a progress thread that must not spin.
//
// DPDK 22.11's memif and af_packet PMDs have no ethdev RX-interrupt ops, yet
// both keep a file descriptor that becomes readable when a frame arrives:
//  - memif: every ring has an eventfd the sender writes after each burst
//    unless the receiver set MEMIF_RING_FLAG_MASK_INT in the shared ring
//    header. DPDK's receivers always set it (polling mode); clearing it is the
//    memif protocol's interrupt mode (libmemif and VPP use it), so the peer —
//    DPDK's PMD included — then notifies. Only while we sleep: the sender pays
//    a write() per burst for it.
//  - af_packet: the queue's packet socket polls readable when its RX ring
//    holds a frame; af_xdp: the queue's AF_XDP socket does.
// Neither descriptor is reachable through public DPDK API. This reads the
// PMDs' private queue structures with DPDK 22.11's layouts and checks every
// assumption at run time (DPDK version, driver name, back-pointers, the ring
// cookie, the descriptor's kind); if any check fails, For() returns nullptr
// and the caller keeps sleeping for fixed times.
#ifndef DROCE_DRIVERS_ETHDEV_RX_WAKEUP_H_
#define DROCE_DRIVERS_ETHDEV_RX_WAKEUP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace droce::ethdev {

class RxWakeup {
 public:
  virtual ~RxWakeup() = default;
  // The wake-up source of `port_id`'s RX queue 0, or nullptr with the reason.
  static std::unique_ptr<RxWakeup> For(uint16_t port_id, std::string* why_not);
  // One wake-up for several af_xdp ports (an interface's AF_XDP sockets, a
  // port per RX queue): an arrival on any of their sockets.
  static std::unique_ptr<RxWakeup> ForSockets(const std::vector<uint16_t>& port_ids, std::string* why_not);

  // Asks for a notification on arrival and returns the descriptor to poll
  // for POLLIN, or -1 if that is not possible right now (memif between
  // connections). Call from the thread that owns the port, with its link up;
  // then poll the port once more before sleeping (a frame may have arrived
  // before the request was seen).
  virtual int Arm() = 0;
  // Withdraws the request and drains the notification. Same thread.
  virtual void Disarm() = 0;
  // True when the RX queue is known to hold no frame: a look at the ring
  // without receiving (memif: the ring's index against the PMD's), for a
  // poll that would otherwise run a whole round to find nothing. False when
  // it holds one or cannot be told (sockets). It looks at the ring found
  // when last armed or rechecked: a reconnection moves the ring, so the
  // owner calls Recheck() now and then (the verbs runtime: every
  // millisecond, with its link check), never while a thread sleeps on the
  // descriptor Arm gave (Recheck may replace it). Same thread.
  virtual bool KnownEmpty() = 0;
  virtual void Recheck() {}
  virtual const char* kind() const = 0;

 protected:
  RxWakeup() = default;
};

// The socket of `port_id`'s RX queue 0 on net_af_packet (its packet
// socket) and net_af_xdp (its AF_XDP socket), read from DPDK 22.11's queue
// structure with the same checks; the PMD's own descriptor (not a copy), or
// -1 with the reason. drivers/netdev attaches its filter to the packet socket.
int QueueSocket(uint16_t port_id, std::string* why_not);

// A port whose RX burst reads a socket of its owner's (drivers/netdev's
// UDP port: DPDK's ring PMD with an RX callback): For(port_id) then wakes on
// that socket (a duplicate of `fd`). The owner unregisters before it closes
// the socket.
void RegisterWakeupSocket(uint16_t port_id, int fd, const char* kind);
void UnregisterWakeupSocket(uint16_t port_id);

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_RX_WAKEUP_H_
