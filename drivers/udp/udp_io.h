// A netdev-bound device's I/O in a process when its interface steers to the
// processes' own UDP sockets (`steering udp`, doc/netdev.md): frames to
// other hosts leave through the process's socket (sendmmsg), and the
// kernel delivers to that socket the frames for the process's QPNs
// (droced's TC program steers them by destination QP); droced is on
// neither path. Everything that stays on the host goes through `inner`
// (the direct rings and the link to droced): frames for the device's
// own MAC (its other processes), for another droce device of the host
// (AddHostMac), to a group, and whatever is no unicast IP/UDP frame.
//
// No allocation, logging or per-frame system call: one recvmmsg per receive
// burst, one sendmmsg per run of frames for the socket. Not thread-safe: the
// owner (the verbs runtime, under its mutex) calls from one thread at a time.
#ifndef DROCE_DRIVERS_UDP_UDP_IO_H_
#define DROCE_DRIVERS_UDP_UDP_IO_H_

#include <array>
#include <cstdint>
#include <vector>

#include "drivers/udp/roce_udp.h"
#include "pktio/burst_io.h"

namespace droce::udp {

class UdpIo final : public pktio::BurstIo {
 public:
  // Takes `fd` (a socket from OpenSocket, bound to `port`: the source port
  // of every frame it sends).
  UdpIo(pktio::BurstIo* inner, int fd, uint16_t port, const std::array<uint8_t, 6>& own_mac);
  ~UdpIo() override;
  UdpIo(const UdpIo&) = delete;
  UdpIo& operator=(const UdpIo&) = delete;

  uint16_t RxBurst(pktio::Frame* frames, uint16_t n) override;
  uint16_t AllocTx(pktio::Frame* frames, uint16_t n) override;
  uint16_t TxBurst(pktio::Frame* frames, uint16_t n) override;
  void Release(pktio::Frame* frames, uint16_t n) override { inner_->Release(frames, n); }
  // Frames to other hosts, the bulk of a netdev-bound device's, leave by
  // sendmmsg: a gathered burst goes whole (pktio::BurstIo).
  bool ReadConcurrently() const override { return false; }
  // Gather frames to other hosts leave from three iovecs (SendBatch), the
  // payload read by the kernel from the registered memory (set_gather);
  // those for `inner` go to it as they are when it takes them too (the
  // direct rings copy the payload into the peer's slot), flattened when it
  // does not. Those the socket cannot send as they are (set_gather off, a
  // source port to rewrite) are flattened, and so is every frame handed
  // back unsent.
  bool TakesGather() const override { return gather_ || inner_gather_; }
  // The inner port's frames are passed on as they are; the socket's are
  // never lent.
  bool StartLending() override { return inner_->StartLending(); }
  // Whether the socket sends gather frames from their pieces. Before a
  // core::Device is made on the port (it asks TakesGather once).
  void set_gather(bool on) { gather_ = on; }

  // A new socket (droced re-attached): the old one is closed.
  void ReplaceSocket(int fd, uint16_t port);
  // Frames to this MAC stay on the host (another droce device's).
  void AddHostMac(const std::array<uint8_t, 6>& mac);
  uint16_t port() const { return port_; }
  // Segmented sends of IPv6 runs (SendBatch) and coalesced receives
  // (UDP_GRO on the socket: a datagram of several of the sender's frames,
  // split into one buffer each, RecvBatch::ReceiveCoalesced).
  void set_gso(bool on);

  // Sleeping: `wire_fd` is the inner port's armed arrival descriptor (-1:
  // none). Returns a descriptor that polls readable when either has
  // something (an epoll set of both), -1 if that cannot be set up. Poll
  // once more before sleeping.
  int Arm(int wire_fd);
  void Disarm();

  const UdpCounters& counters() const { return counters_; }

  // Whether the last socket receive that found anything took a train: at
  // least kStreamFrames frames (a coalesced datagram of a bulk transfer, or
  // as many datagrams). A lone small frame (a latency test's) never is.
  static constexpr uint16_t kStreamFrames = 8;
  bool InStream() const { return in_stream_; }

  // Never while it has a socket, whose receive queue only a system call
  // reads: a frame the kernel queued there would otherwise wait for the next
  // round that runs for another reason (a timer, the millisecond link check).
  bool KnownEmpty() override { return fd_ < 0 && ready_n_ == 0 && inner_->KnownEmpty(); }

 private:
  bool ToSocket(const pktio::Frame& f) const;
  bool AddToBatch(pktio::Frame& f);
  void FlattenAll(pktio::Frame* frames, uint16_t n);
  uint16_t ReceiveFromSocket(pktio::Frame* frames, uint16_t n);
  void Refill();
  void EnableCoalescing();
  uint16_t ReceiveCoalesced(pktio::Frame* frames, uint16_t n);
  int ReceiveIntoStash(RecvBatch::Frame* got, uint32_t* seen);

  pktio::BurstIo* inner_;
  int fd_;
  uint16_t port_;
  std::array<uint8_t, 6> mac_;
  std::vector<std::array<uint8_t, 6>> host_macs_;
  // Empty buffers (from inner's AllocTx) the next recvmmsg fills.
  pktio::Frame stash_[RecvBatch::kMax];
  uint16_t stashed_ = 0;
  bool socket_first_ = false;  // alternates: neither source starves the other
  bool gather_ = false;
  bool inner_gather_;  // inner takes gather frames (asked once, when made)
  // Coalesced receives: frames received but not yet asked for (a datagram
  // may hold more than a burst takes), and the segment size to read with.
  bool coalesce_ = false;
  pktio::Frame ready_[RecvBatch::kMax];
  uint16_t ready_first_ = 0, ready_n_ = 0;
  uint32_t segment_ = 0;  // 0: not seen yet (the buffers' whole room)
  // The stash entries the last coalesced receive read into.
  int read_first_ = 0, read_n_ = 0;
  // The last coalesced receive found nothing with this many buffers
  // stashed (0: it found something, or none was made): while the stash
  // still holds as many, they are the same buffers in the same places.
  uint16_t repeat_stashed_ = 0;
  bool in_stream_ = false;
  RecvBatch recv_;
  SendBatch send_;
  int epoll_fd_ = -1;
  int armed_wire_fd_ = -1;
  UdpCounters counters_;
};

}  // namespace droce::udp

#endif  // DROCE_DRIVERS_UDP_UDP_IO_H_
