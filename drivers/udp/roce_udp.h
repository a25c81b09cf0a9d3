// RoCEv2 through a kernel UDP socket (doc/netdev.md "UDP sockets"): the
// kernel's IP stack writes and reads the IP and UDP headers, as it does for
// Linux rxe's tunnel socket; droce's frames keep theirs in memory, so the
// transport (and its ICRC, which covers them) is unchanged.
//
// Sending, a frame becomes a datagram: its UDP payload (BTH .. ICRC) goes
// to the destination address and port of its headers, from the source
// address of its IP header (a PKTINFO control message), with its traffic
// class and hop limit. The socket writes the IP header as the frame has it:
// IPv4 with DF and identification 0 (an unconnected socket's DF datagram
// gets 0 from the kernel, as droce's frames carry), UDP from the socket's
// port (the device builds its frames with that source port,
// core::DeviceConfig::udp_source_port). A frame whose source port differs
// is rewritten and its ICRC recomputed (RewriteSourcePort: the daemon's CM
// frames).
//
// Receiving, a datagram becomes a frame again: Ethernet, IP and UDP headers
// are written in front of the payload (received kHeadroom bytes into its
// buffer) from what the kernel tells with it: the source address and port,
// the destination address (PKTINFO), the traffic class (ECN included), the
// hop limit, and for IPv4 the identification and flags when they are not
// (0, DF): droce's TC program (droce_tc.bpf.c) puts those in the packet's
// mark, which the socket delivers (SO_RCVMARK). The destination port is
// 4791: the TC program moved it to this socket's port, and the ICRC covers
// the one the sender wrote. The Ethernet header names the device's MAC as the
// destination and a zero source (the kernel keeps the sender's MAC).
#ifndef DROCE_DRIVERS_UDP_ROCE_UDP_H_
#define DROCE_DRIVERS_UDP_ROCE_UDP_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace droce::udp {

// Bytes left in front of a received payload for the headers written there:
// Ethernet, IPv6, UDP (an IPv4 frame starts 20 bytes further in).
inline constexpr uint32_t kHeadroom = 14 + 40 + 8;
inline constexpr uint16_t kRoceV2Port = 4791;

// droce_tc.bpf.c's mark on an IPv4 packet whose identification and flags
// are not (0, DF): bit 31, the flags (3 bits) at 16, the identification.
inline constexpr uint32_t kMarkValid = 1u << 31;
inline constexpr uint32_t MarkOf(uint16_t id, uint16_t flags_fragment) {
  return kMarkValid | (static_cast<uint32_t>(flags_fragment >> 13) << 16) | id;
}

struct SocketConfig {
  std::string ifname;       // SO_BINDTODEVICE: only this interface's datagrams
  uint16_t port = 0;        // 0: the kernel picks one
  int rcvbuf_bytes = 0;     // 0: the system's default; set with SO_RCVBUFFORCE when permitted
  int sndbuf_bytes = 0;
};

// A dual-stack datagram socket bound to [::]:port on the interface, non-
// blocking and close-on-exec, with every receive control message the frames
// need (PKTINFO, traffic class, hop limit, mark) and zero UDP checksums
// accepted over IPv6 (RoCEv2 senders send them). *bound_port: its port.
absl::StatusOr<int> OpenSocket(const SocketConfig& c, uint16_t* bound_port);

// One received datagram's addressing, from recvmsg's name and control
// messages (ReadArrival). Addresses in GID form (IPv4 as ::ffff:a.b.c.d).
struct Arrival {
  bool ipv6 = false;
  std::array<uint8_t, 16> src{}, dst{};
  uint16_t src_port = 0;
  uint8_t tclass = 0;
  uint8_t ttl = 64;
  uint16_t ipv4_id = 0;
  uint16_t ipv4_flags_fragment = 0x4000;  // DF
  bool has_dst = false;
};

// Fills *a from a received message (its name must be a sockaddr_in6 and its
// control messages those OpenSocket asks for). False without a destination
// address (no PKTINFO): the frame cannot be rebuilt.
bool ReadArrival(const msghdr& m, Arrival* a);

// Writes the Ethernet, IP and UDP headers of the datagram whose `len`
// payload bytes are at `payload` (with kHeadroom writable bytes before it)
// and returns the frame's first byte; *frame_len is its length.
uint8_t* WriteHeaders(const Arrival& a, const std::array<uint8_t, 6>& own_mac, uint8_t* payload, uint32_t len,
                      uint32_t* frame_len);

// A frame to send: where its datagram goes and what the IP header says.
struct Departure {
  bool ipv6 = false;
  std::array<uint8_t, 16> src{}, dst{};
  uint16_t src_port = 0, dst_port = 0;
  uint8_t tclass = 0;
  uint8_t ttl = 64;
  uint32_t payload_offset = 0;  // the UDP payload: frame[payload_offset, payload_offset + payload_len)
  uint32_t payload_len = 0;
  uint32_t l3_offset = 0, l4_offset = 0;
};

// Parses a frame's Ethernet (one 802.1Q tag allowed), IPv4 (no options, not
// a fragment) or IPv6 (UDP next) and UDP headers, checking every length.
// False for anything else (ARP, ND, broadcast, and a group MAC that is not
// the destination group's: the caller sends those elsewhere). A process
// sends group datagrams through droced (udp_io.h), whose socket sends them
// out of the interface.
bool ReadDeparture(const uint8_t* frame, uint32_t len, Departure* d);

// Sets the frame's UDP source port to `port` and recomputes its ICRC.
void RewriteSourcePort(uint8_t* frame, const Departure& d, uint16_t port);

// sendmmsg's message for one departure: the destination in *name, the
// source address, traffic class and (when not 64) hop limit in the control
// buffer `control` (kControlBytes). The iovec is the caller's.
inline constexpr size_t kControlBytes = 160;
void PrepareMessage(const Departure& d, const uint8_t* frame, sockaddr_in6* name, iovec* iov, char* control,
                    msghdr* m);

struct UdpCounters {
  uint64_t rx_datagrams = 0;
  uint64_t rx_dropped = 0;       // truncated, or no destination address: no frame could be rebuilt
  uint64_t tx_datagrams = 0;
  uint64_t tx_dropped = 0;       // the kernel refused them (no route, an address gone, too big)
  uint64_t tx_would_block = 0;   // bursts the socket's send buffer stopped (retried by the device)
  uint64_t tx_port_rewritten = 0;  // frames built with another source port: rewritten (RewriteSourcePort)
  uint64_t rx_calls = 0, rx_empty_calls = 0, tx_calls = 0;  // system calls
  uint64_t rx_coalesced = 0;      // datagrams that arrived as segments of a coalesced one (UDP_GRO)
  uint64_t rx_gro_copied = 0;     // coalesced datagrams whose segments were not where the buffers expected: copied
  uint64_t tx_gso_datagrams = 0;  // datagrams that left as one of several segments of one send (SendBatch gso)
  uint64_t tx_gso_refused = 0;    // segmented sends the kernel refused: segmentation off from then on
  uint64_t tx_gathered = 0;       // datagrams whose payload the kernel read from registered memory (gather frames)
  // Gather frames copied whole instead: for the socket without set_gather
  // or with a source port to rewrite, for an inner that takes none, or back
  // to the device unsent.
  uint64_t tx_flattened = 0;
};

// recvmmsg into caller buffers, each frame's headers rebuilt in front of its
// payload. Buffers: `bufs[i]` has kHeadroom bytes, then room for caps[i]
// payload bytes.
class RecvBatch {
 public:
  static constexpr int kMax = 64;
  struct Frame {
    uint8_t* data;  // the frame's first byte (in bufs[i]), nullptr: the datagram was dropped
    uint32_t len;
  };
  // Receives up to n (<= kMax) datagrams without waiting; out[0..ret) say
  // what became of buffers 0..ret.
  int Receive(int fd, uint8_t* const* bufs, const uint32_t* caps, int n, const std::array<uint8_t, 6>& own_mac,
              Frame* out, UdpCounters* c);

  // With UDP_GRO on the socket a datagram may be several of the sender's,
  // coalesced: each message gets `per_message` buffers, each reading
  // `segment` payload bytes (all `caps` at least that), so a coalesced
  // datagram of that segment size lands one segment per buffer and needs
  // no copy; other sizes are copied into place (rx_gro_copied) and, when
  // they need more buffers than the message has, the rest is dropped.
  // out[0..ret) say what became of buffers 0..ret (nullptr: holds no
  // frame). *seen_segment: the segment size of the last coalesced datagram
  // (unchanged if none).
  // Sizes the copy buffer ReceiveCoalesced may need (64 KiB), so that no
  // receive allocates.
  void ReserveForCoalesced() { scratch_.resize(0x10000); }
  int ReceiveCoalesced(int fd, uint8_t* const* bufs, const uint32_t* caps, int n, int per_message, uint32_t segment,
                       const std::array<uint8_t, 6>& own_mac, Frame* out, UdpCounters* c, uint32_t* seen_segment);
  // ReceiveCoalesced again with the buffers, sizes and split of the last
  // call (its buffers unchanged since, none of them taken): a receive that
  // found nothing is repeated without setting its buffers up again. -1:
  // the last call set no receive up (its arguments were refused).
  int ReceiveCoalescedAgain(int fd, const std::array<uint8_t, 6>& own_mac, Frame* out, UdpCounters* c,
                            uint32_t* seen_segment);

 private:
  // recvmmsg of `messages` messages, each reading into the next
  // `iov_per_message` entries of iov_ (set by the caller); returns how many came.
  int ReceiveMessages(int fd, int messages, int iov_per_message, UdpCounters* c);

  std::vector<uint8_t> scratch_;  // a coalesced datagram gathered for copying (ReceiveCoalesced)
  // The last ReceiveCoalesced's buffers and split (ReceiveCoalescedAgain).
  uint8_t* bufs_[kMax];
  uint32_t caps_[kMax];
  int messages_ = 0, per_message_ = 0;
  uint32_t segment_ = 0;
  mmsghdr msgs_[kMax];
  iovec iov_[kMax];
  sockaddr_in6 names_[kMax];
  alignas(8) char control_[kMax][kControlBytes];
};

// sendmmsg of frames: Add each (in order), then Send.
//
// With segmentation on (set_gso), consecutive IPv6 frames to the same
// destination with the same addressing and size leave as one message with
// UDP_SEGMENT: the kernel builds one skb for the run and cuts it into
// datagrams of that size (the last may be shorter) as late as it can — in
// the NIC, or at a receiving socket of the same host. Each segment's IPv6
// and UDP headers equal the frame's own (payload length and UDP length from
// the segment size, the checksum masked in the ICRC), so every frame's ICRC,
// computed over its own headers, stays valid. IPv4 frames never take part:
// the kernel gives the k-th segment identification k, which the ICRC covers.
class SendBatch {
 public:
  static constexpr int kMax = 64;
  // Segments of one message: the kernel's UDP_MAX_SEGMENTS is 64 on older
  // kernels; the UDP length caps a message's bytes.
  static constexpr int kMaxSegments = 64;
  static constexpr uint32_t kMaxSegmentedBytes = 0xFFFF - 8;
  void set_gso(bool on) { gso_ = on; }
  bool gso() const { return gso_; }
  // False if the frame is no datagram the socket can send (ReadDeparture);
  // true once queued. A frame whose source port is not `port` is rewritten
  // first.
  bool Add(uint8_t* frame, uint32_t len, uint16_t port, UdpCounters* c) {
    return Add(frame, len, Gather{}, port, c);
  }
  // A frame whose bytes are frame[0, g.at), g.data[0, g.len), frame[g.at,
  // len) (pktio::Frame's gather): its datagram leaves from three iovecs, the
  // gathered bytes read by the kernel where they are. g.at must lie in the
  // UDP payload. A gather frame is never rewritten: false if its source
  // port is not `port` (the caller flattens it and adds it again).
  struct Gather {
    const uint8_t* data = nullptr;
    uint32_t len = 0;
    uint32_t at = 0;
  };
  bool Add(uint8_t* frame, uint32_t len, const Gather& g, uint16_t port, UdpCounters* c);
  int size() const { return n_; }
  bool full() const { return n_ == kMax; }
  // Sends what was added and empties the batch; returns how many of the
  // frames (from the first) are done with: sent, or refused by the kernel
  // for good (counted in tx_dropped). Fewer than were added only when the
  // socket's send buffer is full: the caller keeps the rest.
  int Send(int fd, UdpCounters* c);
  void Clear() { n_ = 0, m_ = 0, iovs_ = 0; }

 private:
  // Whether `d` (payload_len bytes) can be the next segment of the last message.
  bool Joins(const Departure& d) const;

  bool gso_ = false;
  int n_ = 0;  // frames
  int m_ = 0;  // messages
  mmsghdr msgs_[kMax];
  iovec iov_[3 * kMax];  // one per frame, three per gather frame; a message's are consecutive
  int iovs_ = 0;
  sockaddr_in6 names_[kMax];
  alignas(8) char control_[kMax][kControlBytes];
  // The last message: its first frame's addressing, its segment size, bytes
  // and whether its last segment was a full one (a shorter one ends it).
  Departure last_;
  uint32_t last_bytes_ = 0;
  bool last_open_ = false;
  int frames_of_[kMax];  // per message
};

}  // namespace droce::udp

#endif  // DROCE_DRIVERS_UDP_ROCE_UDP_H_
