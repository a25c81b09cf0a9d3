// The verbs runtime's link to the host fabric (doc/droced.md): attaching to
// droced (fabric::Attach, shared with droce-testpmd), the link's state and
// the port events it raises, droced's messages on the control connection,
// losing the daemon and re-attaching to a new one with the same QPN range,
// a netdev-bound device's interface state, and next-hop resolution.

#include "drivers/verbs/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/memif_listener.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/ethdev/prefault.h"
#include "drivers/verbs/abi.h"
#include "drivers/fabric/protocol.h"
#include "drivers/verbs/thread_pause.h"
#include "drivers/verbs/tsc_clock.h"
#include "transport/sr/selective_repeat.h"

namespace droce::verbs {

absl::Status Runtime::AttachFabric(uint32_t want_qpn_base) {
  absl::StatusOr<fabric::Attachment> a = fabric::Attach(file_.fabric_dir, file_.name, want_qpn_base);
  if (!a.ok()) return a.status();
  fabric_fd_ = a->fd;
  const fabric::Reply& r = a->reply;
  // The link's rings follow the reply (ethdev/daemon_link.h).
  {
    pollfd pfd{fabric_fd_, POLLIN, 0};
    ethdev::LinkMessage m{};
    int fds[3], nfds = 0;
    const long n = poll(&pfd, 1, 2000) == 1 ? ethdev::ReceiveWithFds(fabric_fd_, &m, sizeof m, fds, &nfds) : -1;
    if (n != sizeof m) {
      for (int k = 0; k < nfds; ++k) close(fds[k]);
      return absl::UnavailableError("droced sent no link for the device (a different version?)");
    }
    absl::Status s = link_->Bind(m, fds, nfds);  // takes the descriptors
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("droced's link: ", s.message()));
  }
  if (std::memcmp(r.mac, file_.dev.mac.data(), 6) != 0) {
    return absl::FailedPreconditionError("droced knows the device with another MAC (re-register it)");
  }
  if (file_.dev.rx_icrc_trusted && (r.flags & fabric::kReplyFramesFromWire) != 0) {
    return absl::FailedPreconditionError(
        "rx_icrc_trust=on, but droced has an uplink: frames from other hosts reach the device and are always "
        "checked (turn rx_icrc_trust off, or run the daemon without --uplink)");
  }
  if (want_qpn_base != 0 && r.qpn_count < file_.dev.max_qp) {
    return absl::FailedPreconditionError("droced gave a QPN range smaller than the device's QPs");
  }
  // A netdev-bound device: the interface's state follows the reply (its
  // GID table, its port), before anything else on the connection.
  if (file_.netdev_bound) {
    pollfd pfd{fabric_fd_, POLLIN, 0};
    fabric::NetdevState m{};
    if (poll(&pfd, 1, 2000) != 1 || recv(fabric_fd_, &m, sizeof m, MSG_DONTWAIT) != sizeof m ||
        m.magic != fabric::kNetdevMagic || m.version != fabric::kNetdevVersion || m.size != sizeof m) {
      return absl::UnavailableError("droced sent no state of the device's interface");
    }
    first_netdev_state_ = m;
    has_netdev_state_ = true;
    // steering udp: the process's own socket follows (doc/netdev.md).
    if (m.own_socket != 0) {
      fabric::NetdevSocket ns{};
      int fds[3], nfds = 0;
      const long n = poll(&pfd, 1, 2000) == 1 ? ethdev::ReceiveWithFds(fabric_fd_, &ns, sizeof ns, fds, &nfds) : -1;
      if (n != sizeof ns || nfds != 1 || ns.magic != fabric::kNetdevSocketMagic ||
          ns.version != fabric::kNetdevSocketVersion || ns.size != sizeof ns || ns.port == 0) {
        for (int k = 0; k < nfds; ++k) close(fds[k]);
        return absl::UnavailableError("droced sent no socket for the device's interface");
      }
      if (udp_fd_ >= 0) close(udp_fd_);
      udp_fd_ = fds[0];
      udp_port_ = ns.port;
    }
  }
  // Only QPNs of our range: the daemon steers the device's others to the
  // processes that own them.
  file_.dev.qpn_base = r.qpn_base;
  file_.dev.max_qp = std::min(file_.dev.max_qp, r.qpn_count);
  return absl::OkStatus();
}

// Refreshes the link state. A memif client whose link is down restarts its
// port every 100 ms if its connection attempt failed (its server may have
// started after it) or the link dropped; one whose attempt is still in its
// handshake is left alone for up to 2 s: restarting a client mid-handshake
// makes DPDK 22.11's memif server close a control socket its interrupt
// thread still watches, and EAL panics in the server.
void Runtime::CheckLink(uint64_t now_ns) {
  if (file_.fabric && !CheckFabric(now_ns)) return;
  const bool up = port_ ? port_->RefreshLink() : link_->bound();
  const bool was_up = link_up_.exchange(up, std::memory_order_relaxed);
  next_link_check_ns_ = now_ns + 1'000'000;
  if (up && !was_up) {
    PrefaultWire();  // a (re)connection maps the regions afresh
    // A memif client whose first start failed (its server came later) had
    // no RX queue to take a wake-up source from: it slept timed only.
    if (file_.progress.wakeup && wakeup_ == nullptr) {
      RenewWakeupLocked();
    }
  }
  if (up) {
    attempt_ns_ = 0;  // connected: a later drop restarts at once
    return;
  }
  // A fabric device's link goes down only when its daemon goes (its control
  // socket says so: CheckFabric); restarting the port then would run DPDK's
  // memif disconnect in this thread while its interrupt thread runs it too.
  if (!memif_client_ || file_.fabric || now_ns < next_reconnect_ns_) return;
  if (!port_->start_failed() && attempt_ns_ != 0 && now_ns - attempt_ns_ < 2'000'000'000) return;
  next_reconnect_ns_ = now_ns + 100'000'000;
  port_->Reconnect();
  attempt_ns_ = now_ns;
  ++reconnects_;
}

// The daemon stopped or died. Its control connection is the attachment:
// the daemon never ends it for a live program, so its end of file is the
// daemon's end; the link's rings are this process's own mapping and stay
// valid until LoseFabric unmaps them.
bool Runtime::CheckFabric(uint64_t now_ns) {
  next_link_check_ns_ = now_ns + 1'000'000;
  if (fabric_link_ == FabricLink::kLost) {
    if (now_ns >= next_attach_ns_) Reattach(now_ns);
    return false;
  }
  pollfd pfd{fabric_fd_, POLLIN, 0};
  // Readable: direct paths, or the end of the connection (EOF or an error).
  if (fabric_fd_ < 0 || (poll(&pfd, 1, 0) != 0 && !ReadFabricMessages())) {
    LoseFabric(now_ns);
    return false;
  }
  if (fabric_link_ == FabricLink::kReattached) {
    const bool up = link_->bound();
    link_up_.store(up, std::memory_order_relaxed);
    if (!up) return false;
    fabric_link_ = FabricLink::kAttached;
    fabric_lost_.store(false, std::memory_order_relaxed);
    SendPortEvent(IBV_EVENT_PORT_ACTIVE);
  }
  return true;
}

bool Runtime::ReadFabricMessages() {
  for (int i = 0; i < 64; ++i) {
    alignas(8) char buf[std::max(sizeof(ethdev::PeerMessage), sizeof(fabric::NetdevState)) + 64];
    int fds[3], nfds = 0;
    const long n = ethdev::ReceiveWithFds(fabric_fd_, buf, sizeof buf, fds, &nfds);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false;
    uint32_t magic = 0;
    if (n >= 4) std::memcpy(&magic, buf, sizeof magic);
    if (magic == fabric::kNetdevMagic && n == sizeof(fabric::NetdevState) && nfds == 0) {
      fabric::NetdevState m;
      std::memcpy(&m, buf, sizeof m);
      ApplyNetdevState(m, /*events=*/true);
      continue;
    }
    if (n == sizeof(ethdev::PeerMessage) && direct_) {
      ethdev::PeerMessage m;
      std::memcpy(&m, buf, sizeof m);
      absl::Status s = direct_->Apply(m, fds, nfds);  // takes the descriptors
      if (!s.ok() && std::getenv("DROCE_DEBUG") != nullptr) {
        std::fprintf(stderr, "droce %s: direct path refused: %s\n", file_.name.c_str(), std::string(s.message()).c_str());
      }
      continue;
    }
    for (int k = 0; k < nfds; ++k) close(fds[k]);  // nothing we know: ignored
  }
  return true;
}

void Runtime::SendPortEvent(uint32_t type) {
  droce_async_event_desc ev{1, type, 0};  // element: the port number (ib_uverbs_async_event_desc)
  for (int fd : async_fds_) {
    if (write(fd, &ev, sizeof ev) == sizeof ev) stats_.async_events.fetch_add(1, std::memory_order_relaxed);
  }
}

void Runtime::LoseFabric(uint64_t now_ns) {
  ++fabric_losses_;
  fabric_link_ = FabricLink::kLost;
  fabric_lost_.store(true, std::memory_order_relaxed);
  link_up_.store(false, std::memory_order_relaxed);
  if (direct_) direct_->RemoveAll();  // a new daemon sets up new ones
  RenewWakeupLocked();
  // Our mapping of the link stays valid whatever the daemon did (it is
  // ours): unmapping it here races with nothing. The pool stays, and with
  // it the frames the device holds.
  link_->Unbind();
  if (fabric_fd_ >= 0) close(fabric_fd_);
  fabric_fd_ = -1;
  // The port is down: the QPs' peers are unreachable. Flushing them now
  // (rather than letting each retry out) tells the program at once.
  FlushQps();
  SendPortEvent(IBV_EVENT_PORT_ERR);
  next_attach_ns_ = now_ns + 100'000'000;
  if (std::getenv("DROCE_DEBUG") != nullptr) {
    std::fprintf(stderr, "droce %s: the fabric daemon is gone; port down, QPs flushed\n", file_.name.c_str());
  }
}

void Runtime::FlushQps(const std::function<bool(const transport::Qp&)>& pick) {
  transport::QpAttr err;
  err.qp_state = transport::QpState::kErr;
  for (uint32_t qpn = dev_->qpn_base(); qpn < dev_->qpn_base() + dev_->config().max_qp; ++qpn) {
    const transport::Qp* q = dev_->qp(qpn);
    if (q == nullptr || q->state() == transport::QpState::kReset || q->state() == transport::QpState::kErr) continue;
    if (pick && !pick(*q)) continue;
    (void)dev_->ModifyQp(qpn, err, transport::kAttrState);
  }
}

void Runtime::ApplyNetdevState(const fabric::NetdevState& m, bool events) {
  if (m.magic != fabric::kNetdevMagic || m.version != fabric::kNetdevVersion || m.size != sizeof m) return;
  if (events && m.generation == netdev_generation_) return;
  netdev_generation_ = m.generation;
  std::vector<core::Gid> table(fabric::kNetdevGids);
  for (uint32_t i = 0; i < fabric::kNetdevGids; ++i) {
    if ((m.gid_valid >> i) & 1) std::memcpy(table[i].data(), m.gids[i], 16);
  }
  if (m.active_mtu >= 1 && m.active_mtu <= 5) active_mtu_.store(128u << m.active_mtu, std::memory_order_relaxed);
  const std::vector<core::Gid> old = dev_->gids();
  if (table != old) {
    dev_->SetGids(table);
    if (events) {
      // A QP whose source address went (or whose index now names another
      // one) cannot send from it any more: it errors, the others go on.
      FlushQps([&](const transport::Qp& q) {
        if (q.ud() || q.state() == transport::QpState::kInit) return false;
        const uint8_t i = q.attr().ah.sgid_index;
        return i >= old.size() || i >= table.size() || old[i] != table[i] || table[i] == core::Gid{};
      });
      SendPortEvent(IBV_EVENT_GID_CHANGE);
    }
  }
  const bool down = m.port_active == 0;
  const bool was_down = netdev_down_.exchange(down, std::memory_order_relaxed);
  if (!events) return;
  if (down && !was_down) {
    FlushQps();
    SendPortEvent(IBV_EVENT_PORT_ERR);
  } else if (!down && was_down) {
    SendPortEvent(IBV_EVENT_PORT_ACTIVE);
  }
  if (std::getenv("DROCE_DEBUG") != nullptr) {
    std::fprintf(stderr, "droce %s: %s is %s, GID table %s\n", file_.name.c_str(), file_.netdev.c_str(),
                 down ? "down" : "up", table != old ? "changed" : "unchanged");
  }
}

void Runtime::Reattach(uint64_t now_ns) {
  next_attach_ns_ = now_ns + 200'000'000;
  absl::Status s = AttachFabric(dev_->qpn_base());
  if (!s.ok()) {
    if (fabric_fd_ >= 0) close(fabric_fd_);
    fabric_fd_ = -1;
    if (std::getenv("DROCE_DEBUG") != nullptr) {
      std::fprintf(stderr, "droce %s: re-attaching: %s\n", file_.name.c_str(), std::string(s.message()).c_str());
    }
    return;
  }
  ++fabric_reattaches_;
  if (udp_ && udp_fd_ >= 0) {  // the new droced's socket for us
    udp_->ReplaceSocket(udp_fd_, udp_port_);
    dev_->set_udp_source_port(udp_port_);
    udp_fd_ = -1;
  }
  fabric_link_ = FabricLink::kReattached;  // IBV_EVENT_PORT_ACTIVE once the link is up
  if (has_netdev_state_) ApplyNetdevState(first_netdev_state_, /*events=*/true);
  // The new droced knows none of the groups the QPs are attached to (they
  // keep their attachments through the flush): the interface joins them
  // again, as a kernel RoCE driver rejoins after a reset. Under mu, so no
  // attach or detach runs meanwhile; a SyncMcastGroups already past its
  // snapshot sends the same joins or leaves again, which droced takes as
  // they come.
  if (file_.netdev_bound) {
    for (const core::Gid& g : dev_->McastGroups()) (void)CallMcast(g, true);
  }
  RenewWakeupLocked();
}

void Runtime::RenewWakeupLocked() {
  wakeup_stale_ = true;
  ProbeThroughWakeupLocked();
  RefreshWakeupLocked();
}

void Runtime::RefreshWakeupLocked() {
  if (!wakeup_stale_ || wire_armers_ > 0) return;
  wakeup_.reset();
  wakeup_stale_ = false;
  if (file_.progress.wakeup && fabric_link_ != FabricLink::kLost) {
    wakeup_ = link_ ? link_->MakeWakeup() : ethdev::RxWakeup::For(port_->port_id(), nullptr);
  }
  ProbeThroughWakeupLocked();
}

int Runtime::CallMcast(const core::Gid& group, bool join) {
  fabric::McastRequest q{};
  std::memcpy(q.gid, group.data(), 16);
  q.join = join ? 1 : 0;
  fabric::Request req = fabric::MakeRequest(fabric::kOpMcast, file_.name);
  req.size = sizeof req + sizeof q;
  absl::StatusOr<fabric::Reply> r =
      fabric::CallOnce(fabric::ControlSocketPath(file_.fabric_dir), req, 5000, nullptr, &q, sizeof q);
  if (!r.ok()) return ENETDOWN;
  if (r->error != 0 && std::getenv("DROCE_DEBUG") != nullptr) {
    std::fprintf(stderr, "droce %s: multicast group: %s\n", file_.name.c_str(), r->message);
  }
  return r->error;
}

int Runtime::SyncMcastGroups() {
  if (!file_.netdev_bound) return 0;
  std::lock_guard<std::mutex> serial(mcast_mu_);
  std::vector<core::Gid> want;
  {
    std::lock_guard<DeviceMutex> lock(mu);
    want = dev_->McastGroups();
  }
  for (const core::Gid& g : want) {
    if (absl::c_linear_search(mcast_joined_, g)) continue;
    if (const int err = CallMcast(g, true); err != 0) return err;
    mcast_joined_.push_back(g);
  }
  std::erase_if(mcast_joined_, [&](const core::Gid& g) {
    if (absl::c_linear_search(want, g)) return false;
    (void)CallMcast(g, false);  // droced drops it with the process anyway
    return true;
  });
  return 0;
}

bool Runtime::WaitLinkUp() {
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  while (true) {
    {
      std::lock_guard<DeviceMutex> lock(mu);
      CheckLink(NowNs());
      if (link_up_) return true;
    }
    if (NowNs() >= deadline) return false;
    SleepUs(1000);
  }
}

int Runtime::ResolveNeighbor(const core::Gid& gid, uint8_t sgid_index) {
  if (file_.netdev_bound) {
    // The kernel's route and neighbour, through droced: the device keeps no
    // neighbour table of its own (the entry is the AV's MAC, as a kernel
    // RoCE driver resolves the destination MAC at modify_qp / create_ah).
    fabric::ResolveRequest q{};
    {
      std::lock_guard<DeviceMutex> lock(mu);
      const std::vector<core::Gid>& gids = dev_->gids();
      if (sgid_index >= gids.size() || gids[sgid_index] == core::Gid{}) return EINVAL;
      std::memcpy(q.sgid, gids[sgid_index].data(), 16);
    }
    std::memcpy(q.dgid, gid.data(), 16);
    q.timeout_ms = std::clamp<uint32_t>(file_.link_wait_ms, 1000, 60000);
    fabric::Request req = fabric::MakeRequest(fabric::kOpResolve, file_.name);
    req.size = sizeof req + sizeof q;
    absl::StatusOr<fabric::Reply> r = fabric::CallOnce(fabric::ControlSocketPath(file_.fabric_dir), req,
                                                       static_cast<int>(q.timeout_ms) + 2000, nullptr, &q, sizeof q);
    if (!r.ok()) return ENETDOWN;
    if (r->error != 0) {
      if (std::getenv("DROCE_DEBUG") != nullptr) {
        std::fprintf(stderr, "droce %s: no next hop: %s\n", file_.name.c_str(), r->message);
      }
      return r->error;
    }
    core::Mac mac;
    std::memcpy(mac.data(), r->mac, 6);
    std::lock_guard<DeviceMutex> lock(mu);
    dev_->AddNeighbor(gid, mac);
    return 0;
  }
  const uint64_t deadline = NowNs() + uint64_t{file_.link_wait_ms} * 1'000'000;
  uint64_t next_request = 0;
  while (true) {
    {
      std::lock_guard<DeviceMutex> lock(mu);
      if (dev_->HasNeighbor(gid)) return 0;
      const uint64_t now = NowNs();
      if (now >= deadline) return 0;  // unresolved: broadcast where the device allows it
      if (now >= next_request) {
        dev_->RequestNeighbor(gid);  // ARP for IPv4-mapped GIDs, neighbour solicitation for IPv6
        next_request = now + 100'000'000;
      }
      PollLocked(now);
    }
    SleepUs(200);
  }
}

}  // namespace droce::verbs
