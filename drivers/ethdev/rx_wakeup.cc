// rte_intr_fd_get() is still marked experimental in 22.11.
#define ALLOW_EXPERIMENTAL_API 1
#include "drivers/ethdev/rx_wakeup.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <rte_ethdev.h>
#include <rte_interrupts.h>
#include <rte_version.h>

#include "drivers/ethdev/dpdk_private.h"

namespace droce::ethdev {
namespace {

using namespace dpdk_private;  // NOLINT: the layouts this file reads

// drivers/net/af_xdp/rte_eth_af_xdp.c: pkt_rx_queue::port (u16) and
// fds[0].fd, the queue's AF_XDP socket, behind four 48-byte xsk rings,
// three pointers and the 24-byte rx_stats.
constexpr size_t kAfXdpQueuePortOffset = 72;
constexpr size_t kAfXdpQueueFdOffset = 208;

bool IsEventFd(int fd) {
  char path[64], target[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strcmp(target, "anon_inode:[eventfd]") == 0;
}


// DPDK's memif thread unmaps the rings and closes the eventfds when the peer
// leaves, at any moment, so this never touches DPDK's mapping or descriptor
// numbers: it maps the ring's page through its own duplicate of the region's
// memfd and sleeps on its own duplicate of the eventfd, both valid until it
// lets them go. From DPDK's structures it only reads fields that live in
// DPDK's heap (never unmapped while EAL runs), and re-checks them after
// taking its duplicates.
class MemifWakeup final : public RxWakeup {
 public:
  MemifWakeup(uint16_t port, const uint8_t* dev) : port_(port), dev_(dev) {}
  ~MemifWakeup() override { Drop(); }
  const char* kind() const override { return "memif interrupt"; }

  int Arm() override {
    if (!Refresh()) return -1;
    __atomic_store_n(flags_, uint16_t(*flags_ & ~kMemifRingFlagMaskInt), __ATOMIC_RELAXED);
    // The sender stores its ring index, then reads the flag; we store the
    // flag, then (the caller) read the index: without this fence both could
    // miss the other and the wake-up is lost (the caller's sleep has a
    // time limit anyway, and DPDK's sender has no fence between the two).
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return event_fd_;
  }

  // eth_memif_rx's own test: a client->server ring is read up to its head,
  // a server->client ring up to its tail, from where the PMD stopped.
  bool KnownEmpty() override {
    if (flags_ == nullptr && !Refresh()) return false;
    const void* queue = ::rte_eth_fp_ops[port_].rxq.data[0];
    const bool c2s = Load<uint32_t>(queue, kMemifQueueTypeOffset) == kMemifRingC2S;
    const uint8_t* ring = reinterpret_cast<const uint8_t*>(flags_) - kMemifRingFlagsOffset;
    const uint16_t last = __atomic_load_n(
        reinterpret_cast<const uint16_t*>(ring + (c2s ? kMemifRingHeadOffset : kMemifRingTailOffset)), __ATOMIC_ACQUIRE);
    return last == Load<uint16_t>(queue, c2s ? kMemifQueueLastHeadOffset : kMemifQueueLastTailOffset);
  }

  void Recheck() override { (void)Refresh(); }

  void Disarm() override {
    if (flags_ == nullptr) return;
    __atomic_store_n(flags_, uint16_t(*flags_ | kMemifRingFlagMaskInt), __ATOMIC_RELAXED);
    uint64_t count;
    (void)!read(event_fd_, &count, sizeof count);  // non-blocking: drains the count
  }

 private:
  struct Source {  // what DPDK's structures say about the current connection
    const void* region = nullptr;
    const void* addr = nullptr;
    int region_fd = -1;
    int event_fd = -1;
    uint32_t ring_offset = 0;
    bool operator==(const Source&) const = default;
  };

  bool ReadSource(Source* out) const {
    const void* queue = ::rte_eth_fp_ops[port_].rxq.data[0];
    if (queue == nullptr || Load<uint16_t>(queue, kMemifQueueInPortOffset) != port_) return false;
    uint16_t index;
    out->region = MemifQueueRegion(dev_, queue, &index);
    if (out->region == nullptr) return false;
    out->addr = Load<const void*>(out->region, 0);
    out->region_fd = Load<int>(out->region, kMemifRegionFdOffset);
    out->ring_offset = Load<uint32_t>(queue, kMemifQueueRingOffsetOffset);
    auto* handle = Load<rte_intr_handle*>(queue, kMemifQueueIntrHandleOffset);
    out->event_fd = handle != nullptr ? rte_intr_fd_get(handle) : -1;
    return out->addr != nullptr && out->region_fd >= 0 && out->event_fd >= 0;
  }

  // True with flags_ and event_fd_ set for the current connection.
  bool Refresh() {
    Source now;
    if (!ReadSource(&now)) return false;
    if (flags_ != nullptr && now == source_) return true;
    Drop();
    const int region_fd = fcntl(now.region_fd, F_DUPFD_CLOEXEC, 0);
    const int event_fd = fcntl(now.event_fd, F_DUPFD_CLOEXEC, 0);
    Source again;
    struct stat st;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t len = (size_t{now.ring_offset} + kMemifRingHeaderBytes + page - 1) / page * page;
    void* map = MAP_FAILED;
    if (region_fd >= 0 && event_fd >= 0 && ReadSource(&again) && again == now && IsEventFd(event_fd) &&
        fstat(region_fd, &st) == 0 && uint64_t(st.st_size) >= len) {
      map = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
    }
    if (map == MAP_FAILED || Load<uint32_t>(map, now.ring_offset) != kMemifCookie) {
      if (map != MAP_FAILED) munmap(map, len);
      if (region_fd >= 0) close(region_fd);
      if (event_fd >= 0) close(event_fd);
      return false;
    }
    close(region_fd);  // the mapping keeps the memory
    map_ = map;
    map_len_ = len;
    flags_ = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(map) + now.ring_offset + kMemifRingFlagsOffset);
    event_fd_ = event_fd;
    source_ = now;
    return true;
  }

  void Drop() {
    if (map_ != nullptr) munmap(map_, map_len_);
    if (event_fd_ >= 0) close(event_fd_);
    map_ = nullptr;
    flags_ = nullptr;
    event_fd_ = -1;
    source_ = Source{};
  }

  uint16_t port_;
  const uint8_t* dev_;
  Source source_;
  void* map_ = nullptr;
  size_t map_len_ = 0;
  uint16_t* flags_ = nullptr;  // the RX ring's flags word, in our own mapping
  int event_fd_ = -1;          // our duplicate of the ring's eventfd
};

// A socket that polls readable when its receive ring holds a frame: the
// af_packet queue's packet socket, the af_xdp queue's AF_XDP socket.
class SocketWakeup final : public RxWakeup {
 public:
  SocketWakeup(int fd, const char* kind) : fd_(fd), kind_(kind) {}  // our own duplicate
  ~SocketWakeup() override { close(fd_); }
  const char* kind() const override { return kind_; }
  int Arm() override { return fd_; }
  void Disarm() override {}
  bool KnownEmpty() override { return false; }

 private:
  int fd_;
  const char* kind_;
};

// Several ports' queue sockets (an interface's AF_XDP sockets, one per RX
// queue): an epoll set of our duplicates, readable when any of them is.
class SocketSetWakeup final : public RxWakeup {
 public:
  explicit SocketSetWakeup(const char* kind) : kind_(kind) {}
  ~SocketSetWakeup() override {
    if (epoll_fd_ >= 0) close(epoll_fd_);
    for (const int fd : own_) close(fd);
  }
  // Adds a duplicate of fd to the set; false with the reason.
  bool Add(int fd, std::string* why_not) {
    if (epoll_fd_ < 0) epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    const int own = epoll_fd_ < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
      *why_not = std::string("epoll set of the queues' sockets: ") + std::strerror(errno);
      return false;
    }
    own_.push_back(own);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = own;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, own, &ev) != 0) {
      *why_not = std::string("epoll_ctl: ") + std::strerror(errno);
      return false;
    }
    return true;
  }
  const char* kind() const override { return kind_; }
  int Arm() override { return epoll_fd_; }
  void Disarm() override {}
  bool KnownEmpty() override { return false; }

 private:
  int epoll_fd_ = -1;
  std::vector<int> own_;
  const char* kind_;
};

bool SocketOfDomain(int fd, int want) {
  int domain = 0;
  socklen_t len = sizeof domain;
  return fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == want;
}

// Ports whose frames come from a socket of their owner's (RegisterWakeupSocket).
std::mutex g_sockets_mu;
std::map<uint16_t, std::pair<int, const char*>>& WakeupSockets() {
  static auto* m = new std::map<uint16_t, std::pair<int, const char*>>;
  return *m;
}

}  // namespace

void RegisterWakeupSocket(uint16_t port_id, int fd, const char* kind) {
  std::lock_guard<std::mutex> lock(g_sockets_mu);
  WakeupSockets()[port_id] = {fd, kind};
}

void UnregisterWakeupSocket(uint16_t port_id) {
  std::lock_guard<std::mutex> lock(g_sockets_mu);
  WakeupSockets().erase(port_id);
}

std::unique_ptr<RxWakeup> RxWakeup::For(uint16_t port_id, std::string* why_not) {
  std::string unused;
  if (why_not == nullptr) why_not = &unused;
  {
    std::lock_guard<std::mutex> lock(g_sockets_mu);
    auto it = WakeupSockets().find(port_id);
    if (it != WakeupSockets().end()) {
      const int own = fcntl(it->second.first, F_DUPFD_CLOEXEC, 0);
      if (own < 0) {
        *why_not = "cannot duplicate the port's socket";
        return nullptr;
      }
      return std::make_unique<SocketWakeup>(own, it->second.second);
    }
  }
  if (std::strncmp(rte_version(), "DPDK 22.11", 10) != 0) {
    *why_not = std::string("built for DPDK 22.11's PMD layouts, running ") + rte_version();
    return nullptr;
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port_id, &info) != 0 || info.driver_name == nullptr) {
    *why_not = "no such port";
    return nullptr;
  }
  const void* queue = ::rte_eth_fp_ops[port_id].rxq.data[0];
  if (queue == nullptr) {
    *why_not = "RX queue 0 is not set up";
    return nullptr;
  }
  const std::string driver = info.driver_name;
  if (driver == "net_memif") {
    const uint8_t* dev = EthDev(port_id, why_not);
    if (dev == nullptr) return nullptr;
    const uint32_t type = Load<uint32_t>(queue, kMemifQueueTypeOffset);
    if (type > 1 || Load<uint16_t>(queue, kMemifQueueInPortOffset) != port_id) {
      *why_not = "memif queue layout differs from DPDK 22.11's";
      return nullptr;
    }
    return std::make_unique<MemifWakeup>(port_id, dev);
  }
  if (driver == "net_af_packet" || driver == "net_af_xdp") {
    const int fd = QueueSocket(port_id, why_not);
    if (fd < 0) return nullptr;
    const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
      *why_not = "cannot duplicate the queue's socket";
      return nullptr;
    }
    return std::make_unique<SocketWakeup>(own, driver == "net_af_xdp" ? "AF_XDP socket" : "af_packet socket");
  }
  *why_not = driver + " has no wake-up source";
  return nullptr;
}

std::unique_ptr<RxWakeup> RxWakeup::ForSockets(const std::vector<uint16_t>& port_ids, std::string* why_not) {
  std::string unused;
  if (why_not == nullptr) why_not = &unused;
  auto set = std::make_unique<SocketSetWakeup>("AF_XDP sockets");
  for (const uint16_t port : port_ids) {
    const int fd = QueueSocket(port, why_not);
    if (fd < 0 || !set->Add(fd, why_not)) return nullptr;
  }
  return set;
}

int QueueSocket(uint16_t port_id, std::string* why_not) {
  std::string unused;
  if (why_not == nullptr) why_not = &unused;
  if (std::strncmp(rte_version(), "DPDK 22.11", 10) != 0) {
    *why_not = std::string("built for DPDK 22.11's PMD layouts, running ") + rte_version();
    return -1;
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port_id, &info) != 0 || info.driver_name == nullptr) {
    *why_not = "no such port";
    return -1;
  }
  const void* queue = ::rte_eth_fp_ops[port_id].rxq.data[0];
  if (queue == nullptr) {
    *why_not = "RX queue 0 is not set up";
    return -1;
  }
  const std::string driver = info.driver_name;
  if (driver == "net_af_packet") {
    const int fd = Load<int>(queue, 0);  // pkt_rx_queue::sockfd
    if (!SocketOfDomain(fd, AF_PACKET)) {
      *why_not = "af_packet queue layout differs from DPDK 22.11's";
      return -1;
    }
    return fd;
  }
  if (driver == "net_af_xdp") {
    const int fd = Load<int>(queue, kAfXdpQueueFdOffset);
    if (Load<uint16_t>(queue, kAfXdpQueuePortOffset) != port_id || !SocketOfDomain(fd, AF_XDP)) {
      *why_not = "af_xdp queue layout differs from DPDK 22.11's";
      return -1;
    }
    return fd;
  }
  *why_not = driver + " has no queue socket";
  return -1;
}

}  // namespace droce::ethdev
