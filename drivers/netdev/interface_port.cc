#include "drivers/netdev/interface_port.h"

#include <linux/ethtool.h>
#include <linux/filter.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>

#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/port.h"
#include "drivers/ethdev/rx_wakeup.h"
#include "wire/gid.h"
#include "pktio/burst_io.h"

namespace droce::netdev {
namespace {

constexpr uint16_t kRoceV2Port = 4791;
constexpr uint32_t kRxMbufs = 4095;
// af_packet ring slots: DPDK 22.11's af_packet PMD puts nothing on the wire
// from slots above 4 KiB (doc/ethdev.md), so frames are at most this.
constexpr uint32_t kAfPacketFrame = 4096;
constexpr uint32_t kAfPacketMaxFrame = kAfPacketFrame - 128;  // tpacket2 header and alignment
// steering udp: receive buffers. A process's holds a burst of its peers'
// windows (the kernel counts each datagram's skb, ~5 KiB for 4 KiB of
// payload); droced's takes only the CM's MADs and strays.
constexpr int kProcessSocketBuffer = 8 << 20;
constexpr int kDaemonSocketBuffer = 1 << 20;

// The binding's lock: an abstract socket name is per network namespace and
// goes with the process that holds it.
absl::StatusOr<int> TakeLock(const std::string& ifname, int ifindex) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("lock socket: ", std::strerror(errno)));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = absl::StrFormat("droce-netdev-%d", ifindex);
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  const socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(
          absl::StrCat(ifname, " is bound to a droce device already (a droced of this network namespace holds it)"));
    }
    return absl::UnavailableError(absl::StrCat("lock: ", std::strerror(err)));
  }
  return fd;
}

// UDP 4791 on the interface, for both IP versions, dropping all it gets.
absl::StatusOr<int> TakeRoceV2Port(const std::string& ifname) {
  int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // IPv6 not in this kernel
  if (fd < 0) return absl::UnavailableError(absl::StrCat("UDP socket: ", std::strerror(errno)));
  static sock_filter drop_all[] = {{BPF_RET | BPF_K, 0, 0, 0}};
  sock_fprog prog{1, drop_all};
  const int zero = 0;
  int rc = setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog);
  if (rc == 0) rc = setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(), static_cast<socklen_t>(ifname.size()));
  if (rc == 0 && v6) rc = setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (rc == 0) {
    if (v6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(kRoceV2Port);
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(kRoceV2Port);
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
  }
  if (rc != 0) {
    const int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrCat("UDP port 4791 on ", ifname,
                                                   " is taken (Linux rxe, or another RoCE stack on this interface?)"));
    }
    return absl::UnavailableError(absl::StrCat("UDP port 4791 on ", ifname, ": ", std::strerror(err)));
  }
  return fd;
}

// The process's AF_XDP sockets: descriptor and inode.
std::vector<std::pair<int, uint64_t>> XdpSockets() {
  std::vector<std::pair<int, uint64_t>> out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    int domain = 0;
    socklen_t len = sizeof domain;
    struct stat st {};
    if (fd == dirfd(d) || getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_XDP ||
        fstat(fd, &st) != 0) {
      continue;
    }
    out.emplace_back(fd, st.st_ino);
  }
  closedir(d);
  return out;
}

}  // namespace

const char* SteeringName(Steering s) {
  switch (s) {
    case Steering::kAuto:
      return "auto";
    case Steering::kXdp:
      return "xdp";
    case Steering::kAfPacket:
      return "af_packet";
    case Steering::kUdp:
      return "udp";
  }
  return "?";
}

bool ParseSteering(const std::string& s, Steering* out) {
  for (Steering v : {Steering::kAuto, Steering::kXdp, Steering::kAfPacket, Steering::kUdp}) {
    if (s == SteeringName(v)) {
      *out = v;
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::unique_ptr<InterfacePort>> InterfacePort::Open(const InterfaceConfig& c,
                                                                   const std::vector<Gid>& addrs) {
  std::unique_ptr<InterfacePort> p(new InterfacePort());
  p->ifname_ = c.ifname;
  p->ifindex_ = c.ifindex;
  p->device_ = c.device;
  p->addrs_ = addrs;
  absl::StatusOr<int> lock = TakeLock(c.ifname, c.ifindex);
  if (!lock.ok()) return lock.status();
  p->lock_fd_ = *lock;
  // auto: the processes' own sockets first (droced off the data path, the
  // interface keeps its GSO and MTU), then XDP, then af_packet. OpenUdp
  // leaves nothing behind when it fails (no TC link, no socket).
  if (c.steering == Steering::kUdp || c.steering == Steering::kAuto) {
    absl::Status s = p->OpenUdp(c, addrs);
    if (s.ok()) return p;
    if (c.steering == Steering::kUdp) return s;
    p->udp_refused_ = std::string(s.message());
  }
  absl::StatusOr<int> guard = TakeRoceV2Port(c.ifname);
  if (!guard.ok()) return guard.status();
  p->guard_fd_ = *guard;
  if (c.steering != Steering::kAfPacket) {
    absl::Status s = p->OpenXdp(c, addrs);
    if (s.ok()) return p;
    if (c.steering == Steering::kXdp) return s;
    p->xdp_refused_ = std::string(s.message());
  }
  absl::Status s = p->OpenAfPacket(c, addrs);
  if (!s.ok()) {
    if (!p->xdp_refused_.empty()) {
      return absl::UnavailableError(absl::StrCat(s.message(), "; XDP: ", p->xdp_refused_,
                                                 p->udp_refused_.empty() ? "" : "; UDP sockets: ", p->udp_refused_));
    }
    return s;
  }
  return p;
}

InterfacePort::~InterfacePort() {
  // The steering goes first, then the processes' ports: none is free while
  // packets may still be steered to it.
  tc_.reset();
  if (udp_) {
    udp_.reset();  // closes its port
    port_ = -1;
  }
  for (const auto& [slot, fd] : process_sockets_) close(fd);
  process_sockets_.clear();
  ClosePort();
  if (guard_fd_ >= 0) close(guard_fd_);
  if (lock_fd_ >= 0) close(lock_fd_);
}

void InterfacePort::ClosePort() {
  xdp_.reset();
  if (queue_ports_.empty() && port_ >= 0) queue_ports_.push_back(static_cast<uint16_t>(port_));
  for (const uint16_t port : queue_ports_) {
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);  // net_af_xdp detaches the interface's XDP program here
  }
  queue_ports_.clear();
  port_ = -1;
  for (const std::string& name : vdev_names_) (void)ethdev::RemoveVdev(name);
  vdev_names_.clear();
  for (const auto& [fd, ino] : xsk_fds_) {
    struct stat st {};
    if (fstat(fd, &st) == 0 && st.st_ino == ino) close(fd);  // still the PMD's leaked socket
  }
  xsk_fds_.clear();
  for (rte_mempool* pool : pools_) rte_mempool_free(pool);
  pools_.clear();
  packet_fd_ = -1;
}

namespace {

// Probes a vdev and sets up its one queue pair on `pool`; the port id.
absl::StatusOr<uint16_t> StartPort(const std::string& vdev, const std::string& name, rte_mempool* pool,
                                   uint16_t ring) {
  absl::Status s = ethdev::ProbeVdev(vdev);
  if (!s.ok()) return s;
  uint16_t port = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
    (void)ethdev::RemoveVdev(name);
    return absl::InternalError(absl::StrCat("probed ", name, " but found no port"));
  }
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(port, 0, ring, rte_eth_dev_socket_id(port), nullptr, pool);
  if (rc == 0) rc = rte_eth_tx_queue_setup(port, 0, ring, rte_eth_dev_socket_id(port), nullptr);
  if (rc == 0) rc = rte_eth_dev_start(port);
  if (rc != 0) {
    rte_eth_dev_close(port);
    (void)ethdev::RemoveVdev(name);
    return absl::UnavailableError(absl::StrFormat("starting %s: %s", name, rte_strerror(-rc)));
  }
  return port;
}

}  // namespace

namespace {

// The interface's RX queues in use (ETHTOOL_GCHANNELS: RX and combined
// channels, as DPDK's net_af_xdp reads them); 1 where the driver has no
// channels (veth without XDP reports its queues here too).
uint32_t RxQueues(const std::string& ifname) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1;
  ethtool_channels ch{};
  ch.cmd = ETHTOOL_GCHANNELS;
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname.c_str());
  ifr.ifr_data = reinterpret_cast<char*>(&ch);
  const int rc = ioctl(fd, SIOCETHTOOL, &ifr);
  close(fd);
  if (rc != 0) return 1;
  return std::max<uint32_t>(1, ch.rx_count + ch.combined_count);
}

}  // namespace

absl::Status InterfacePort::OpenXdp(const InterfaceConfig& c, const std::vector<Gid>& addrs) {
  const std::string object = XdpObjectPath();
  if (object.empty()) return absl::FailedPreconditionError("droce's XDP program (droce_xdp.o) is not installed");
  // An AF_XDP socket on every RX queue in use: the NIC spreads flows over
  // its queues (RSS), and a RoCEv2 frame for us on a queue without a socket
  // would be dropped (the program's no_socket).
  const uint32_t queues = RxQueues(c.ifname);
  if (queues > kMaxXdpQueues) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s has %u RX queues; XDP steering serves at most %u (use fewer channels, or steering udp or af_packet)",
        c.ifname, queues, kMaxXdpQueues));
  }
  // Each queue's socket has a UMEM of its own: a pool of page-sized mbufs
  // (net_af_xdp registers the pool's memory as the UMEM).
  const uint16_t room = ethdev::AfXdpDataRoom();
  if (room == 0) return absl::ResourceExhaustedError("AF_XDP: no mbuf fits a page");
  for (uint32_t q = 0; q < queues; ++q) {
    const std::string pool_name = absl::StrCat("nd_xdp_", c.ifindex, "_", q);
    rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), kRxMbufs, 256, 0, room, SOCKET_ID_ANY);
    if (pool == nullptr) {
      ClosePort();
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s: %u RX queues need %u MiB of AF_XDP UMEM each, droced's memory holds %u "
                          "(droced --memory-mb)",
                          c.ifname, queues, (XdpUmemBytesPerQueue() + (1 << 19)) >> 20, q));
    }
    pools_.push_back(pool);
  }
  // A port per RX queue: DPDK 22.11's net_af_xdp serves several queues in one
  // port only as "combined" channels, which a veth (separate RX and TX
  // queues) has none of. Each port loads and attaches droce's program with a
  // socket map of its own holding its queue's socket; the last one attached
  // stays, and the other queues' sockets are put in its map.
  for (uint32_t q = 0; q < queues; ++q) {
    absl::StatusOr<uint16_t> port = StartXdpQueue(c, object, q);
    if (!port.ok()) {
      ClosePort();
      return port.status();
    }
    queue_ports_.push_back(*port);
  }
  port_ = queue_ports_[0];
  absl::StatusOr<std::unique_ptr<XdpProgram>> prog = XdpProgram::Attached(c.ifindex);
  absl::Status s = prog.ok() ? (*prog)->SetAddresses(addrs) : prog.status();
  for (uint32_t q = 0; s.ok() && q + 1 < queues; ++q) {
    std::string why;
    const int xsk = ethdev::QueueSocket(queue_ports_[q], &why);
    s = xsk >= 0 ? (*prog)->SetQueueSocket(q, xsk)
                 : absl::FailedPreconditionError(absl::StrCat("RX queue ", q, "'s AF_XDP socket: ", why));
  }
  if (!s.ok()) {
    ClosePort();
    return s;
  }
  xdp_ = std::move(*prog);
  steering_ = Steering::kXdp;
  max_frame_ = ethdev::AfXdpMaxFrame();
  return absl::OkStatus();
}

absl::StatusOr<uint16_t> InterfacePort::StartXdpQueue(const InterfaceConfig& c, const std::string& object,
                                                     uint32_t queue) {
  const std::string name = absl::StrCat("net_af_xdp_", c.device, queue == 0 ? "" : absl::StrCat("_q", queue));
  // busy_budget=0: no preferred busy polling, so an empty poll costs no
  // system call (the loop polls many ports); frames arrive in the sender's
  // softirq.
  const std::string vdev = absl::StrCat(name, ",iface=", c.ifname, ",start_queue=", queue,
                                        ",queue_count=1,busy_budget=0,xdp_prog=", object);
  // The kernel releases a closed AF_XDP socket's hold on the queue
  // (its buffer pool) from a work queue: right after an unbinding the queue
  // may still be busy (EBUSY on bind, which DPDK reports as EINVAL).
  absl::StatusOr<uint16_t> port = absl::UnavailableError("not started");
  int attempt = 0;
  for (; attempt < 60 && !port.ok(); ++attempt) {
    if (attempt > 0) usleep(50'000);
    // We hold the interface's lock: a droce program still attached is a
    // dead droced's, the one a failed start left (net_af_xdp attaches it
    // before it binds its socket and does not take it off when that fails),
    // or the previous queue's port's, and would make the attach fail.
    absl::StatusOr<bool> stale = DetachStaleProgram(c.ifindex);
    if (!stale.ok()) {
      port = stale.status();
      break;
    }
    const std::vector<std::pair<int, uint64_t>> before = XdpSockets();
    std::vector<std::pair<int, uint64_t>> opened;
    port = StartPort(vdev, name, pools_[queue], c.ring);
    for (const auto& s : XdpSockets()) {
      if (std::find(before.begin(), before.end(), s) == before.end()) opened.push_back(s);
    }
    if (!port.ok()) {  // what the failed start left: closed before the next try
      for (const auto& [fd, ino] : opened) close(fd);
    } else {
      xsk_fds_.insert(xsk_fds_.end(), opened.begin(), opened.end());
    }
  }
  if (!port.ok()) return port.status();
  vdev_names_.push_back(name);
  if (attempt > 1) std::fprintf(stderr, "AF_XDP on %s queue %u started at attempt %d\n", c.ifname.c_str(), queue, attempt);
  return port;
}

absl::Status InterfacePort::OpenAfPacket(const InterfaceConfig& c, const std::vector<Gid>& addrs) {
  absl::StatusOr<std::vector<sock_filter>> filter = RoceFilter(addrs);
  if (!filter.ok()) return filter.status();
  const std::string pool_name = absl::StrCat("nd_pkt_", c.ifindex);
  rte_mempool* pool = rte_pktmbuf_pool_create(pool_name.c_str(), kRxMbufs, 256, 0,
                                              kAfPacketFrame + RTE_PKTMBUF_HEADROOM, SOCKET_ID_ANY);
  if (pool == nullptr) return absl::ResourceExhaustedError(absl::StrCat("af_packet pool: ", rte_strerror(rte_errno)));
  pools_.push_back(pool);
  const std::string name = absl::StrCat("net_af_packet_", c.device);
  const std::string vdev = absl::StrCat(name, ",iface=", c.ifname, ",framesz=", kAfPacketFrame,
                                        ",blocksz=", kAfPacketFrame, ",framecnt=1024,qpairs=1");
  absl::StatusOr<uint16_t> port = StartPort(vdev, name, pool, c.ring);
  if (!port.ok()) {
    ClosePort();
    return port.status();
  }
  vdev_names_.push_back(name);
  port_ = *port;
  std::string why;
  packet_fd_ = ethdev::QueueSocket(*port, &why);
  absl::Status s = packet_fd_ >= 0 ? AttachFilter(packet_fd_, *filter)
                                   : absl::FailedPreconditionError(absl::StrCat("af_packet socket: ", why));
  if (!s.ok()) {
    ClosePort();
    return s;
  }
  steering_ = Steering::kAfPacket;
  max_frame_ = kAfPacketMaxFrame;
  return absl::OkStatus();
}

absl::Status InterfacePort::OpenUdp(const InterfaceConfig& c, const std::vector<Gid>& addrs) {
  udp::SocketConfig sc;
  sc.ifname = c.ifname;
  sc.port = kRoceV2Port;
  sc.rcvbuf_bytes = kDaemonSocketBuffer;
  uint16_t bound = 0;
  absl::StatusOr<int> fd = udp::OpenSocket(sc, &bound);
  if (!fd.ok()) {
    if (absl::IsUnavailable(fd.status()) && fd.status().message().find("Address already in use") != std::string::npos) {
      return absl::AlreadyExistsError(absl::StrCat("UDP port 4791 on ", c.ifname,
                                                   " is taken (Linux rxe, or another RoCE stack on this interface?)"));
    }
    return fd.status();
  }
  absl::StatusOr<std::unique_ptr<UdpSocketPort>> port = UdpSocketPort::Open(absl::StrCat("nd_udp_", c.device), *fd, c.mac);
  if (!port.ok()) {
    close(*fd);
    return port.status();
  }
  absl::StatusOr<std::unique_ptr<TcProgram>> tc = TcProgram::Attach(c.ifindex);
  absl::Status s = tc.ok() ? (*tc)->SetAddresses(addrs) : tc.status();
  if (!s.ok()) return s;  // the port and its socket close with it
  udp_ = std::move(*port);
  tc_ = std::move(*tc);
  port_ = udp_->port_id();
  steering_ = Steering::kUdp;
  max_frame_ = pktio::kMaxFrameBytes;  // the kernel's IP stack carries whatever the interface's MTU allows
  return absl::OkStatus();
}

absl::StatusOr<ProcessSocket> InterfacePort::OpenProcessSocket(uint32_t slot) {
  if (!tc_) return absl::FailedPreconditionError("the interface does not steer to processes' sockets");
  CloseProcessSocket(slot);
  udp::SocketConfig sc;
  sc.ifname = ifname_;
  sc.rcvbuf_bytes = kProcessSocketBuffer;
  sc.sndbuf_bytes = kProcessSocketBuffer;
  ProcessSocket out;
  absl::StatusOr<int> fd = udp::OpenSocket(sc, &out.port);
  if (!fd.ok()) return fd.status();
  out.fd = fcntl(*fd, F_DUPFD_CLOEXEC, 0);
  if (out.fd < 0) {
    close(*fd);
    return absl::UnavailableError(absl::StrCat("dup: ", std::strerror(errno)));
  }
  absl::Status s = tc_->SetPort(slot, out.port);
  if (!s.ok()) {
    close(out.fd);
    close(*fd);
    return s;
  }
  process_sockets_.emplace_back(slot, *fd);
  return out;
}

void InterfacePort::CloseProcessSocket(uint32_t slot) {
  for (size_t i = 0; i < process_sockets_.size(); ++i) {
    if (process_sockets_[i].first != slot) continue;
    if (tc_) (void)tc_->SetPort(slot, 0);  // the steering first: then the port may be freed
    close(process_sockets_[i].second);
    process_sockets_.erase(process_sockets_.begin() + static_cast<long>(i));
    return;
  }
}

void InterfacePort::SetMac(const std::array<uint8_t, 6>& mac) {
  if (udp_) udp_->SetMac(mac);
}

absl::Status InterfacePort::SetAddresses(const std::vector<Gid>& addrs) {
  addrs_ = addrs;
  return ApplySteering();
}

// steering udp: the TC program leaves group frames alone (no process's
// socket can take a group's frames for another process), and droced's
// socket, the member, receives them. XDP and af_packet take them as they
// take the addresses'.
absl::Status InterfacePort::ApplySteering() {
  if (tc_) return tc_->SetAddresses(addrs_);
  std::vector<Gid> all = addrs_;
  all.insert(all.end(), groups_.begin(), groups_.end());
  if (xdp_) return xdp_->SetAddresses(all);
  if (packet_fd_ < 0) return absl::FailedPreconditionError("no port");
  absl::StatusOr<std::vector<sock_filter>> filter = RoceFilter(all);
  if (!filter.ok()) return filter.status();
  return AttachFilter(packet_fd_, *filter);
}

int InterfacePort::membership_fd() const { return udp_ ? udp_->fd() : guard_fd_; }

namespace {

// Joins (or leaves) group g on the interface through socket fd: the kernel
// sends the IGMP/MLD report and filters the group's MAC in. A dual-stack
// socket joins an IPv4 group at IPPROTO_IP (IPv6's own level would read the
// group as an IPv6 address).
absl::Status Membership(int fd, int ifindex, const Gid& g, bool join) {
  int domain = AF_INET6;
  socklen_t dl = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) != 0) domain = AF_INET6;
  group_req r{};
  r.gr_interface = static_cast<uint32_t>(ifindex);
  if (wire::IsIpv4MappedGid(g)) {
    auto* a = reinterpret_cast<sockaddr_in*>(&r.gr_group);
    a->sin_family = AF_INET;
    std::memcpy(&a->sin_addr, g.data() + 12, 4);
  } else {
    if (domain != AF_INET6) return absl::FailedPreconditionError("no IPv6 in this kernel");
    auto* a = reinterpret_cast<sockaddr_in6*>(&r.gr_group);
    a->sin6_family = AF_INET6;
    std::memcpy(&a->sin6_addr, g.data(), 16);
  }
  const int level = wire::IsIpv4MappedGid(g) ? IPPROTO_IP : IPPROTO_IPV6;
  if (setsockopt(fd, level, join ? MCAST_JOIN_GROUP : MCAST_LEAVE_GROUP, &r, sizeof r) != 0) {
    return absl::UnavailableError(absl::StrCat(join ? "joining" : "leaving", " a multicast group: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status InterfacePort::SetGroups(const std::vector<Gid>& groups) {
  const int fd = membership_fd();
  if (fd < 0) return absl::FailedPreconditionError("no socket on the interface");
  absl::Status first;
  // Leave first, then join: the steering never takes a group the interface
  // is no member of.
  std::vector<Gid> kept;
  for (const Gid& g : groups_) {
    if (std::find(groups.begin(), groups.end(), g) != groups.end()) {
      kept.push_back(g);
    } else if (absl::Status s = Membership(fd, ifindex_, g, false); !s.ok()) {
      first.Update(s);
    }
  }
  groups_ = kept;
  first.Update(ApplySteering());
  for (const Gid& g : groups) {
    if (std::find(groups_.begin(), groups_.end(), g) != groups_.end()) continue;
    absl::Status s = Membership(fd, ifindex_, g, true);
    if (s.ok()) {
      groups_.push_back(g);
    } else {
      first.Update(s);
    }
  }
  first.Update(ApplySteering());
  return first;
}

uint64_t XdpUmemBytesPerQueue() {
  const uint16_t room = ethdev::AfXdpDataRoom();
  return room == 0 ? 0 : uint64_t{kRxMbufs} * rte_mempool_calc_obj_size(sizeof(rte_mbuf) + room, 0, nullptr);
}

std::vector<uint64_t> InterfacePort::QueueRxFrames() const {
  std::vector<uint64_t> out;
  for (const uint16_t port : queue_ports_) {
    rte_eth_stats st{};
    out.push_back(rte_eth_stats_get(port, &st) == 0 ? st.ipackets : 0);
  }
  return out;
}

std::string InterfacePort::Describe() const {
  if (steering_ == Steering::kUdp) return absl::StrCat("UDP sockets per process, TC steering on ", ifname_);
  if (steering_ == Steering::kXdp) {
    return absl::StrCat("AF_XDP, XDP ", xdp_ ? xdp_->mode() : "?", " on ", ifname_,
                        queue_ports_.size() > 1 ? absl::StrCat(" (", queue_ports_.size(), " RX queues, a socket each)") : "");
  }
  return absl::StrCat("af_packet + BPF filter on ", ifname_, xdp_refused_.empty() ? "" : " (XDP: " + xdp_refused_ + ")");
}

}  // namespace droce::netdev
