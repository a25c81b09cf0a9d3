#include "drivers/ethdev/direct_io.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "drivers/ethdev/daemon_link.h"
#include "drivers/ethdev/prefault.h"
#include "wire/headers.h"
#include "wire/opcode.h"
#include "wire/steer.h"

namespace droce::ethdev {

int SendPeerMessage(int sock, const PeerMessage& m, const int* fds, int nfds) {
  return SendWithFds(sock, &m, sizeof m, fds, nfds);
}

int SendWithFds(int sock, const void* buf, unsigned long len, const int* fds, int nfds) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  if (nfds > 0) {
    if (nfds > 3) return EINVAL;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  return sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(len) ? 0 : errno;
}

long ReceiveWithFds(int sock, void* buf, unsigned long len, int fds[3], int* nfds) {
  *nfds = 0;
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (*nfds < 3) {
        fds[(*nfds)++] = fd;
      } else {
        close(fd);
      }
    }
  }
  return n;
}

namespace {
uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

DirectIo::DirectIo(pktio::BurstIo* inner, const std::array<uint8_t, 6>& own_mac, uint32_t qpn_first,
                   uint32_t qpn_count, Clock clock)
    : inner_(inner),
      clock_(clock ? std::move(clock) : Clock(MonotonicNs)),
      mac_(own_mac),
      qpn_first_(qpn_first),
      qpn_count_(qpn_count),
      inner_gather_(inner->TakesGather()) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
}

DirectIo::~DirectIo() {
  RemoveAll();
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void DirectIo::Close(Path& p) {
  if (p.rx_efd >= 0) {
    if (epoll_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, p.rx_efd, nullptr);
    close(p.rx_efd);
  }
  if (p.tx_efd >= 0) close(p.tx_efd);
  if (p.map != nullptr) munmap(p.map, p.map_bytes);
  p = Path{};
  ++counters_.paths_removed;
}

void DirectIo::CloseDrained() {
  for (size_t i = 0; i < paths_.size();) {
    Path& p = paths_[i];
    if (!p.withdrawn || p.rx.Available() != 0) {
      ++i;
      continue;
    }
    Close(p);
    paths_.erase(paths_.begin() + static_cast<long>(i));
    --withdrawn_paths_;
    rx_next_ = 0;
  }
}

void DirectIo::RemoveAll() {
  for (Path& p : paths_) Close(p);
  paths_.clear();
  markers_unsent_ = 0;
  withdrawn_paths_ = 0;
  paths_lent_ = 0;
}

absl::Status DirectIo::Apply(const PeerMessage& m, const int* fds, int nfds) {
  int owned[3] = {-1, -1, -1};
  for (int i = 0; i < nfds && i < 3; ++i) owned[i] = fds[i];
  const auto refuse = [&](const std::string& why) {
    for (int fd : owned) {
      if (fd >= 0) close(fd);
    }
    ++counters_.messages_refused;
    return absl::InvalidArgumentError(why);
  };
  if (m.magic != kPeerMagic || m.version != kPeerVersion || m.size != sizeof m) {
    return refuse("not a peer message of this version");
  }
  for (uint8_t b : m.reserved) {
    if (b != 0) return refuse("reserved bytes set");
  }
  generation_ = m.generation;
  if (m.op == kPeerRemove) {
    if (nfds != 0) return refuse("a removal carries no descriptors");
    for (size_t i = 0; i < paths_.size(); ++i) {
      Path& p = paths_[i];
      if (p.id != m.path_id) continue;
      if (p.marker_due) --markers_unsent_;
      p.marker_due = p.marker_sent = false;  // Route and SendMarkers pass it by
      p.withdrawn = true;
      ++withdrawn_paths_;
      CloseDrained();  // at once if nothing waits in its ring
      return absl::OkStatus();
    }
    return absl::OkStatus();  // gone already
  }
  if (m.op != kPeerAdd) return refuse(absl::StrFormat("unknown op %u", m.op));
  if (nfds != 3) return refuse("a path needs a memfd and two eventfds");
  if (m.marker_key == 0) return refuse("a path needs a marker key");
  if (!pktio::FrameRing::ValidGeometry(m.slots, m.slot_bytes) || m.my_ring > 1) return refuse("bad ring geometry");
  if (m.peer_qpn_count == 0 || m.peer_qpn_base < 2 || m.peer_qpn_count > (1u << 24) - m.peer_qpn_base) {
    return refuse("bad peer QPN range");
  }
  for (const Path& p : paths_) {
    if (p.id == m.path_id) return refuse("path exists already");
  }
  const size_t ring_bytes = pktio::FrameRing::Bytes(m.slots, m.slot_bytes);
  const size_t bytes = 2 * ring_bytes;
  absl::StatusOr<void*> mapped = MapRingMemfd(owned[0], bytes);
  if (!mapped.ok()) return refuse(std::string(mapped.status().message()));
  void* map = *mapped;
  close(owned[0]);  // the mapping keeps the memory
  owned[0] = -1;
  Path p;
  p.id = m.path_id;
  p.lend_mark = ++lend_marks_;
  if (p.lend_mark == 0) p.lend_mark = ++lend_marks_;
  p.key = m.marker_key;
  std::memcpy(p.mac.data(), m.peer_mac, 6);
  p.qpn_first = m.peer_qpn_base;
  p.qpn_count = m.peer_qpn_count;
  p.map = map;
  p.map_bytes = bytes;
  uint8_t* base = static_cast<uint8_t*>(map);
  p.rx = pktio::FrameRing(base + m.my_ring * ring_bytes, m.slots, m.slot_bytes);
  p.tx = pktio::FrameRing(base + (1 - m.my_ring) * ring_bytes, m.slots, m.slot_bytes);
  p.rx_efd = owned[1];
  p.tx_efd = owned[2];
  p.peer_pid = m.peer_pid;
  if (epoll_fd_ >= 0) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = p.rx_efd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, p.rx_efd, &ev);
  }
  if (armed_) p.rx.Arm();  // a sleeper is waiting on the set already
  const auto early = std::find_if(early_markers_.begin(), early_markers_.end(),
                                  [&](const fabric::PathMarker& e) { return e.path_id == p.id && e.key == p.key; });
  if (early != early_markers_.end()) {
    p.rx_open = true;
    early_markers_.erase(early);
  }
  paths_.push_back(p);
  ++counters_.paths_added;
  ++markers_unsent_;
  SendMarkers();
  return absl::OkStatus();
}

void DirectIo::SendMarkers() {
  for (Path& p : paths_) {
    if (markers_unsent_ == 0) return;
    if (!p.marker_due) continue;
    pktio::Frame f;
    if (inner_->AllocTx(&f, 1) != 1) return;
    fabric::BuildPathMarker(f.data, p.mac, mac_, p.qpn_first, fabric::PathMarker{p.id, p.key});
    f.len = fabric::kPathMarkerBytes;
    if (inner_->TxBurst(&f, 1) != 1) {
      inner_->Release(&f, 1);
      return;  // the port is full: the next TxBurst tries again
    }
    p.marker_sent = true;
    p.marker_due = false;
    --markers_unsent_;
    ++counters_.markers_sent;
  }
}

void DirectIo::OpenRx(const fabric::PathMarker& m) {
  for (Path& p : paths_) {
    if (p.id != m.path_id) continue;
    if (p.key != m.key) {
      ++counters_.markers_forged;
      return;
    }
    ++counters_.markers_received;
    p.rx_open = true;
    return;
  }
  // Its kPeerAdd is still on the control connection (the key is checked then).
  ++counters_.markers_received;
  if (early_markers_.size() == kMaxEarlyMarkers) early_markers_.erase(early_markers_.begin());
  early_markers_.push_back(m);
}

uint16_t DirectIo::TakeMarkers(pktio::Frame* frames, uint16_t n) {
  port_was_empty_ = n == 0;
  uint16_t kept = 0;
  for (uint16_t i = 0; i < n; ++i) {
    fabric::PathMarker m;
    if (frames[i].len == fabric::kPathMarkerBytes && fabric::ReadPathMarker(frames[i].data, frames[i].len, &m)) {
      OpenRx(m);
      inner_->Release(&frames[i], 1);
      continue;
    }
    frames[kept++] = frames[i];
  }
  return kept;
}

void DirectIo::NoteRingRefused(Path& p) {
  const uint64_t now = clock_();
  if (!p.refusing) {
    p.refusing = true;
    p.refusing_since_ns = now;
    return;
  }
  if (now - p.refusing_since_ns < kMarkerResendNs) return;
  p.refusing_since_ns = now;
  if (!p.marker_due) {
    p.marker_due = true;
    ++markers_unsent_;
  }
  SendMarkers();
}

bool DirectIo::MarkerWaitOver(Path& p) {
  const uint64_t now = clock_();
  if (!p.rx_waiting) {
    p.rx_waiting = true;
    p.rx_wait_since_ns = now;
    return false;
  }
  if (!port_was_empty_ || now - p.rx_wait_since_ns < kMarkerWaitNs) return false;
  p.rx_open = true;  // the marker was lost: better late frames than none
  ++counters_.markers_missed;
  return true;
}

void DirectIo::Warm(Path& p) {
  if (p.warm) return;
  p.warm = true;
  (void)PrefaultForWrite(p.map, p.map_bytes);
}

void DirectIo::WakeProducer(Path& p) {
  if (!p.rx.TakeProducerWakeup()) return;
  const uint64_t one = 1;
  if (write(p.tx_efd, &one, sizeof one) == sizeof one) ++counters_.producer_wakeups_sent;
}

int DirectIo::Route(const pktio::Frame& f) const {
  if (f.len < 14 || (f.data[0] & 1) != 0) return -1;  // group addresses: the switch floods them
  int64_t qpn = -2;
  for (size_t i = 0; i < paths_.size(); ++i) {
    const Path& p = paths_[i];
    if (!p.marker_sent || std::memcmp(f.data, p.mac.data(), 6) != 0) continue;
    if (qpn == -2) qpn = wire::RoceDestQp(f.data, f.len);
    if (qpn < 0) return -1;  // not RoCEv2: the switch's
    // A gather frame whose pieces do not add up (none a transport builds)
    // goes to the port, which flattening refuses: the ring refusing it
    // would hold up every frame behind it.
    if (static_cast<uint32_t>(qpn) - p.qpn_first < p.qpn_count && f.len <= p.tx.max_frame() && f.GatherAddsUp()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool DirectIo::Mine(const pktio::Frame& f) const {
  if (f.len < 14 || std::memcmp(f.data, mac_.data(), 6) != 0) return false;
  const int64_t qpn = wire::RoceDestQp(f.data, f.len);
  return qpn >= 0 && static_cast<uint32_t>(qpn) - qpn_first_ < qpn_count_;
}

uint16_t DirectIo::ToPort(pktio::Frame* frames, uint16_t n) {
  return pktio::TxBurstToInner(inner_, inner_gather_, frames, n, &counters_.tx_flattened);
}

uint16_t DirectIo::TxBurst(pktio::Frame* frames, uint16_t n) {
  const uint16_t took = Send(frames, n);
  // What goes back to the device holds no pointer into registered memory
  // (BurstIo::TakesGather): the port's refused run is flat already, the
  // frames after it and a ring's refused ones are flattened here.
  if (took < n) counters_.tx_flattened += pktio::FlattenEach(frames + took, n - took);
  return took;
}

uint16_t DirectIo::Send(pktio::Frame* frames, uint16_t n) {
  if (markers_unsent_ != 0) SendMarkers();
  tx_blocked_on_ring_ = false;
  if (paths_.empty()) return ToPort(frames, n);
  uint16_t i = 0;
  int route = n > 0 ? Route(frames[0]) : -1;
  while (i < n) {
    // A run of frames with one destination: the port's, or one ring's.
    uint16_t run = 1;
    int next = -1;
    while (i + run < n && (next = Route(frames[i + run])) == route) ++run;
    uint16_t took;
    if (route < 0) {
      took = ToPort(frames + i, run);
    } else {
      Path& p = paths_[route];
      Warm(p);
      took = p.tx.Produce(frames + i, run);
      if (took == 0) NoteRingRefused(p);
      if (took > 0) {
        for (uint16_t j = 0; j < took; ++j) counters_.tx_gathered += frames[i + j].gather_len != 0;
        p.refusing = false;
        inner_->Release(frames + i, took);  // copied: the buffers go back
        counters_.tx_direct += took;
        if (p.tx.TakeWakeupRequest()) {
          const uint64_t one = 1;
          if (write(p.tx_efd, &one, sizeof one) == sizeof one) ++counters_.wakeups_sent;
        }
      }
      p.tx_held = took < run;
      if (took < run) ++counters_.tx_ring_full;
    }
    i = static_cast<uint16_t>(i + took);
    if (took < run) {
      tx_blocked_on_ring_ = route >= 0;
      return i;
    }
    route = next;
  }
  return i;
}

uint16_t DirectIo::RxBurst(pktio::Frame* frames, uint16_t n) {
  if (paths_.empty()) return TakeMarkers(frames, inner_->RxBurst(frames, n));
  const uint32_t sources = static_cast<uint32_t>(paths_.size()) + 1;
  uint16_t got = 0;
  for (uint32_t k = 0; k < sources && got < n; ++k) {
    const uint32_t s = (rx_next_ + k) % sources;
    pktio::Frame* out = frames + got;
    const uint16_t room = static_cast<uint16_t>(std::min<uint32_t>(n - got, 64));
    if (s == paths_.size()) {
      const uint16_t port = TakeMarkers(out, inner_->RxBurst(out, room));
      for (uint16_t j = 0; j < port; ++j) out[j].Lend(nullptr, 0);  // the array may hold a lent frame's fields
      got = static_cast<uint16_t>(got + port);
      continue;
    }
    Path& p = paths_[s];
    const uint32_t avail = p.rx.Available();
    if (avail == 0) continue;
    if (!p.rx_open && !MarkerWaitOver(p)) continue;
    if (p.rx_lent != 0) continue;  // its last burst's slots are still the device's (Release)
    Warm(p);
    got = static_cast<uint16_t>(got + TakeFromRing(p, out, static_cast<uint16_t>(std::min<uint32_t>(avail, room))));
  }
  rx_next_ = (rx_next_ + 1) % sources;
  if (withdrawn_paths_ != 0) CloseDrained();
  return got;
}

uint16_t DirectIo::TakeFromRing(Path& p, pktio::Frame* out, uint16_t room) {
  pktio::Frame views[64];
  const uint16_t alloc = inner_->AllocTx(out, room);
  if (alloc == 0) return 0;
  const uint16_t seen = p.rx.Peek(views, alloc);
  // Only what the switch would have delivered here: our MAC, our QPNs. A
  // lent frame's slot can change after this look (the peer writes it): the
  // device judges the headers again from the copy it is given, so this
  // filter only keeps others' frames from costing it a parse.
  pktio::Frame drop[64];
  uint16_t kept = 0, dropped = 0, lent = 0;
  for (uint16_t j = 0; j < seen; ++j) {
    const pktio::Frame& v = views[j];
    pktio::Frame& f = out[kept];
    if (v.len == 0 || v.len > f.capacity) {
      ++counters_.rx_bad_length;
      continue;
    }
    // A long frame lends its payload: only the headers are copied here, the
    // payload is read once, where the device places it.
    const uint32_t copied = lend_ && v.len >= kLendFromBytes ? kLendHeadBytes : v.len;
    std::memcpy(f.data, v.data, copied);
    f.len = v.len;
    if (copied < v.len) {
      f.Lend(v.data, copied, p.lend_mark);
    } else {
      f.Lend(nullptr, 0);
    }
    if (!Mine(f)) {
      ++counters_.rx_not_mine;
      continue;
    }
    lent += f.lent() != nullptr;
    ++kept;
  }
  for (uint16_t j = kept; j < alloc; ++j) {  // buffers not filled (or filled by a frame not kept)
    out[j].Lend(nullptr, 0);
    drop[dropped++] = out[j];
  }
  if (dropped > 0) inner_->Release(drop, dropped);
  if (lent == 0) {
    p.rx.Release(seen);
    if (seen > 0) WakeProducer(p);
  } else {
    p.rx_lent = lent;
    ++paths_lent_;
  }
  counters_.rx_direct += kept;
  counters_.rx_lent += lent;
  return kept;
}

void DirectIo::Release(pktio::Frame* frames, uint16_t n) {
  if (paths_lent_ != 0) {
    // By the mark, not by lent(): the device may have taken the frame whole
    // (pktio::TakeLent), its slot is still to be given back.
    for (uint16_t i = 0; i < n; ++i) {
      if (frames[i].lend_mark() == 0) continue;
      for (Path& p : paths_) {
        if (p.rx_lent == 0 || p.lend_mark != frames[i].lend_mark()) continue;
        if (--p.rx_lent == 0) {
          p.rx.Release(p.rx.peeked());  // in order, all of the last Peek
          WakeProducer(p);
          --paths_lent_;
        }
        break;
      }
      frames[i].Lend(nullptr, 0);
    }
  }
  inner_->Release(frames, n);
}

int DirectIo::Arm(int wire_fd) {
  if (paths_.empty()) return wire_fd;
  if (epoll_fd_ < 0 || wire_fd < 0) return -1;
  if (!armed_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wire_fd;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wire_fd, &ev) != 0 && errno != EEXIST) return -1;
    armed_wire_fd_ = wire_fd;
    armed_ = true;
  }
  for (Path& p : paths_) {
    p.rx.Arm();
    // The caller's poll after arming retries the held frames: a slot freed
    // before the request was seen is found then.
    if (p.tx_held) {
      p.tx.ArmProducer();
      ++counters_.tx_full_sleeps;
    }
  }
  return epoll_fd_;
}

void DirectIo::Disarm() {
  if (!armed_) return;
  armed_ = false;
  for (Path& p : paths_) {
    p.rx.Disarm();
    p.tx.DisarmProducer();
  }
  // Drain the rings' eventfds that fired (the wire's is its owner's).
  epoll_event ev[16];
  const int ready = epoll_wait(epoll_fd_, ev, 16, 0);
  for (int i = 0; i < ready; ++i) {
    if (ev[i].data.fd == armed_wire_fd_) continue;
    uint64_t v;
    (void)!read(ev[i].data.fd, &v, sizeof v);
  }
  // Out of the set: the wire's descriptor may be another one next time.
  if (armed_wire_fd_ >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, armed_wire_fd_, nullptr);
  armed_wire_fd_ = -1;
}

}  // namespace droce::ethdev
