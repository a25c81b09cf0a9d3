#include "drivers/udp/udp_io.h"

#include <netinet/udp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace droce::udp {
namespace {

// RecvBatch::kMax buffers of this many bytes hold the largest datagram.
constexpr uint32_t kMinReadSegment = 0x10000 / RecvBatch::kMax;

}  // namespace

UdpIo::UdpIo(pktio::BurstIo* inner, int fd, uint16_t port, const std::array<uint8_t, 6>& own_mac)
    : inner_(inner), fd_(fd), port_(port), mac_(own_mac), inner_gather_(inner->TakesGather()) {}

UdpIo::~UdpIo() {
  if (stashed_ > 0) inner_->Release(stash_, stashed_);
  if (ready_n_ > 0) inner_->Release(ready_ + ready_first_, ready_n_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (fd_ >= 0) close(fd_);
}

void UdpIo::ReplaceSocket(int fd, uint16_t port) {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  epoll_fd_ = -1;
  armed_wire_fd_ = -1;
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  port_ = port;
  repeat_stashed_ = 0;
  if (coalesce_) EnableCoalescing();
}

void UdpIo::set_gso(bool on) {
  send_.set_gso(on);
  coalesce_ = on;
  if (on) EnableCoalescing();
}

void UdpIo::EnableCoalescing() {
  const int one = 1;
  // Without UDP_GRO the kernel splits a coalesced datagram before the socket: nothing lost.
  if (fd_ >= 0 && setsockopt(fd_, SOL_UDP, UDP_GRO, &one, sizeof one) != 0) coalesce_ = false;
  if (coalesce_) recv_.ReserveForCoalesced();
}

// Each recvmmsg message gets enough buffers for the largest coalesced
// datagram (64 KiB) at the smallest segment size seen so far: a datagram of
// larger segments then needs fewer buffers (copied into place), never more.
// Before any was seen, one message gets every buffer: neither the kernel's
// coalescing nor a segmented send makes more than 64 segments. The read
// size stays at least kMinReadSegment, so a message's buffers hold 64 KiB
// whatever coalesced datagrams of small segments (ACKs) were seen. What the
// burst does not take waits in ready_.
// A receive that found nothing leaves the stash as it was: while nothing
// refills it, the next one repeats it as set up (RecvBatch::
// ReceiveCoalescedAgain), which is what a device polling an idle socket
// does most of the time.
uint16_t UdpIo::ReceiveCoalesced(pktio::Frame* frames, uint16_t n) {
  if (ready_n_ == 0) {
    Refill();
    if (stashed_ == 0) return 0;
    RecvBatch::Frame got[RecvBatch::kMax];
    uint32_t seen = 0;
    int r;
    if (repeat_stashed_ == stashed_) {
      r = recv_.ReceiveCoalescedAgain(fd_, mac_, got, &counters_, &seen);
    } else {
      r = ReceiveIntoStash(got, &seen);
    }
    repeat_stashed_ = r == 0 ? stashed_ : 0;
    if (r <= 0) return 0;
    if (seen != 0) segment_ = std::max(kMinReadSegment, segment_ == 0 ? seen : std::min(segment_, seen));
    // Buffers with a frame go to ready_, the others back to the stash.
    uint16_t kept = static_cast<uint16_t>(read_first_);
    ready_first_ = 0;
    for (int i = 0; i < read_n_; ++i) {
      pktio::Frame f = stash_[read_first_ + i];
      if (i < r && got[i].data != nullptr) {
        f.capacity -= static_cast<uint32_t>(got[i].data - f.data);
        f.data = got[i].data;
        f.len = got[i].len;
        ready_[ready_n_++] = f;
      } else {
        stash_[kept++] = f;
      }
    }
    stashed_ = kept;
    in_stream_ = ready_n_ >= kStreamFrames;
  }
  const uint16_t out = std::min(n, ready_n_);
  std::copy(ready_ + ready_first_, ready_ + ready_first_ + out, frames);
  ready_first_ = static_cast<uint16_t>(ready_first_ + out);
  ready_n_ = static_cast<uint16_t>(ready_n_ - out);
  return out;
}

// Sets the stash up for a coalesced receive (the split below) and receives;
// read_first_ and read_n_ say which stash entries the buffers were. -1: no
// receive was made (no buffer has room).
int UdpIo::ReceiveIntoStash(RecvBatch::Frame* got, uint32_t* seen) {
  read_n_ = 0;
  uint32_t room = UINT32_MAX;
  for (int i = 0; i < stashed_; ++i) {
    room = std::min(room, stash_[i].capacity > kHeadroom ? stash_[i].capacity - kHeadroom : 0);
  }
  const bool known = segment_ != 0 && segment_ <= room;
  const uint32_t segment = known ? segment_ : room;
  if (segment == 0) return -1;
  const int per_message =
      known ? std::min<int>(stashed_, static_cast<int>((0x10000 + segment - 1) / segment)) : stashed_;
  const int k = stashed_ / per_message * per_message;
  const int first = stashed_ - k;
  uint8_t* bufs[RecvBatch::kMax];
  uint32_t caps[RecvBatch::kMax];
  for (int i = 0; i < k; ++i) {
    bufs[i] = stash_[first + i].data;
    caps[i] = stash_[first + i].capacity - kHeadroom;
  }
  read_first_ = first;
  read_n_ = k;
  return recv_.ReceiveCoalesced(fd_, bufs, caps, k, per_message, segment, mac_, got, &counters_, seen);
}

void UdpIo::AddHostMac(const std::array<uint8_t, 6>& mac) {
  if (mac != mac_ && std::find(host_macs_.begin(), host_macs_.end(), mac) == host_macs_.end()) {
    host_macs_.push_back(mac);
  }
}

bool UdpIo::ToSocket(const pktio::Frame& f) const {
  if (f.len < 14 || (f.data[0] & 1) != 0 || std::memcmp(f.data, mac_.data(), 6) == 0) return false;
  for (const auto& m : host_macs_) {
    if (std::memcmp(f.data, m.data(), 6) == 0) return false;
  }
  return true;
}

uint16_t UdpIo::AllocTx(pktio::Frame* frames, uint16_t n) {
  const uint16_t got = inner_->AllocTx(frames, n);
  for (uint16_t i = 0; i < got; ++i) frames[i].gather_len = 0;
  return got;
}

// A gather frame the batch refuses as it is (its source port to rewrite),
// or any when the socket is not to send them (set_gather off: they come
// because inner takes them), is flattened and added again.
bool UdpIo::AddToBatch(pktio::Frame& f) {
  if (send_.full()) return false;
  if (f.gather_len == 0) return send_.Add(f.data, f.len, port_, &counters_);
  if (gather_ && send_.Add(f.data, f.len - f.gather_len, SendBatch::Gather{f.gather, f.gather_len, f.gather_at},
                           port_, &counters_)) {
    return true;
  }
  if (!pktio::Flatten(f)) return false;
  ++counters_.tx_flattened;
  return send_.Add(f.data, f.len, port_, &counters_);
}

// Frames for an inner that takes no gather frames, or handed back unsent:
// none may point into registered memory once TxBurst returns
// (pktio::BurstIo::TakesGather; an inner that takes them flattens what it
// refuses itself).
// Flatten fails only for a frame longer than its buffer, which no
// transport builds; such a frame stays as it is.
void UdpIo::FlattenAll(pktio::Frame* frames, uint16_t n) { counters_.tx_flattened += pktio::FlattenEach(frames, n); }


void UdpIo::Refill() {
  const uint16_t want = static_cast<uint16_t>(RecvBatch::kMax - stashed_);
  if (want > 0) stashed_ = static_cast<uint16_t>(stashed_ + AllocTx(stash_ + stashed_, want));
}

uint16_t UdpIo::ReceiveFromSocket(pktio::Frame* frames, uint16_t n) {
  if (fd_ < 0 || n == 0) return 0;
  if (coalesce_ || ready_n_ > 0) return ReceiveCoalesced(frames, n);
  repeat_stashed_ = 0;
  Refill();
  const int k = std::min<int>(n, stashed_);
  if (k == 0) return 0;
  // The stash is used from its end: what is left stays at its front.
  const int first = stashed_ - k;
  uint8_t* bufs[RecvBatch::kMax];
  uint32_t caps[RecvBatch::kMax];
  for (int i = 0; i < k; ++i) {
    const pktio::Frame& s = stash_[first + i];
    bufs[i] = s.data;
    caps[i] = s.capacity > kHeadroom ? s.capacity - kHeadroom : 0;
  }
  RecvBatch::Frame got[RecvBatch::kMax];
  const int r = recv_.Receive(fd_, bufs, caps, k, mac_, got, &counters_);
  uint16_t out = 0;
  pktio::Frame dropped[RecvBatch::kMax];
  uint16_t ndropped = 0;
  for (int i = 0; i < r; ++i) {
    pktio::Frame f = stash_[first + i];
    if (got[i].data == nullptr) {
      dropped[ndropped++] = f;
      continue;
    }
    f.capacity -= static_cast<uint32_t>(got[i].data - f.data);
    f.data = got[i].data;
    f.len = got[i].len;
    frames[out++] = f;
  }
  if (ndropped > 0) inner_->Release(dropped, ndropped);
  if (r > 0) in_stream_ = r >= kStreamFrames;
  // The buffers not used (r < k) move down to close the gap.
  for (int i = r; i < k; ++i) stash_[first + i - r] = stash_[first + i];
  stashed_ = static_cast<uint16_t>(stashed_ - r);
  return out;
}

uint16_t UdpIo::RxBurst(pktio::Frame* frames, uint16_t n) {
  socket_first_ = !socket_first_;
  uint16_t got = 0;
  if (socket_first_) got = ReceiveFromSocket(frames, n);
  const uint16_t from_socket = got;
  if (got < n) got = static_cast<uint16_t>(got + inner_->RxBurst(frames + got, static_cast<uint16_t>(n - got)));
  const uint16_t before_socket = got;
  if (!socket_first_ && got < n) got = static_cast<uint16_t>(got + ReceiveFromSocket(frames + got, static_cast<uint16_t>(n - got)));
  // The array may hold a lent frame's fields from an earlier burst.
  for (uint16_t i = 0; i < from_socket; ++i) frames[i].Lend(nullptr, 0);
  for (uint16_t i = before_socket; i < got; ++i) frames[i].Lend(nullptr, 0);
  return got;
}

// Accepts a prefix, in order: runs of frames for the socket go out in one
// sendmmsg each (and their buffers back to inner), runs of the others to
// inner. Stops where either refuses.
uint16_t UdpIo::TxBurst(pktio::Frame* frames, uint16_t n) {
  uint16_t i = 0;
  while (i < n) {
    uint16_t j = i;
    if (fd_ >= 0 && ToSocket(frames[i])) {
      // A frame the socket cannot send (ReadDeparture refused it: not IP/UDP)
      // ends the run and goes to inner.
      while (j < n && ToSocket(frames[j]) && AddToBatch(frames[j])) ++j;
      if (j > i) {
        const int done = send_.Send(fd_, &counters_);
        inner_->Release(frames + i, static_cast<uint16_t>(done));
        i = static_cast<uint16_t>(i + done);
        if (i < j) {  // the send buffer is full: the rest stays the caller's
          FlattenAll(frames + i, static_cast<uint16_t>(n - i));
          return i;
        }
        continue;
      }
      j = static_cast<uint16_t>(i + 1);
    }
    while (j < n && !(fd_ >= 0 && ToSocket(frames[j]))) ++j;
    const uint16_t run = static_cast<uint16_t>(j - i);
    const uint16_t taken = pktio::TxBurstToInner(inner_, inner_gather_, frames + i, run, &counters_.tx_flattened);
    i = static_cast<uint16_t>(i + taken);
    if (i < j) {
      FlattenAll(frames + i, static_cast<uint16_t>(n - i));
      return i;
    }
  }
  return i;
}

int UdpIo::Arm(int wire_fd) {
  if (fd_ < 0) return wire_fd;
  if (epoll_fd_ < 0) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return -1;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd_;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd_, &ev) != 0) {
      close(epoll_fd_);
      epoll_fd_ = -1;
      return -1;
    }
  }
  if (wire_fd != armed_wire_fd_) {
    if (armed_wire_fd_ >= 0) (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, armed_wire_fd_, nullptr);
    armed_wire_fd_ = -1;
    if (wire_fd >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = wire_fd;
      if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wire_fd, &ev) != 0) return -1;
      armed_wire_fd_ = wire_fd;
    }
  }
  return epoll_fd_;
}

void UdpIo::Disarm() {
  // Out of the set: the inner descriptor may be another one next time.
  if (armed_wire_fd_ >= 0 && epoll_fd_ >= 0) (void)epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, armed_wire_fd_, nullptr);
  armed_wire_fd_ = -1;
}

}  // namespace droce::udp
