#include "drivers/ethdev/daemon_link.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace droce::ethdev {

int CreateRingMemfd(const std::string& name, size_t bytes) {
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

absl::StatusOr<void*> MapRingMemfd(int fd, size_t bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    return absl::InvalidArgumentError("memfd size");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return absl::InvalidArgumentError("memfd not sealed");
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return absl::UnavailableError(absl::StrFormat("mmap: %s", std::strerror(errno)));
  return map;
}

// The inbound ring as an RxWakeup: Arm sets the ring's `sleeping` word
// (droced then writes the eventfd after its next burst, once).
class DaemonLink::Wakeup final : public RxWakeup {
 public:
  explicit Wakeup(DaemonLink* link) : link_(link) {}
  int Arm() override {
    if (!link_->bound()) return -1;
    (void)link_->rx_.Arm();  // frames already there: the caller's poll after arming finds them
    return link_->rx_efd_;
  }
  void Disarm() override {
    if (!link_->bound()) return;
    link_->rx_.Disarm();
    uint64_t v;
    (void)!read(link_->rx_efd_, &v, sizeof v);
  }
  bool KnownEmpty() override { return link_->KnownEmpty(); }
  const char* kind() const override { return "droced link eventfd"; }

 private:
  DaemonLink* link_;
};

DaemonLink::DaemonLink(uint32_t buffers) : pool_(buffers, pktio::kMaxFrameBytes) {}

DaemonLink::~DaemonLink() { Unbind(); }

bool DaemonLink::KnownEmpty() { return bound() && rx_.Available() == 0; }

void DaemonLink::Unbind() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  if (rx_efd_ >= 0) close(rx_efd_);
  if (tx_efd_ >= 0) close(tx_efd_);
  map_ = nullptr;
  map_bytes_ = 0;
  rx_efd_ = tx_efd_ = -1;
  rx_ = pktio::FrameRing();
  tx_ = pktio::FrameRing();
}

absl::Status DaemonLink::Bind(const LinkMessage& m, const int* fds, int nfds) {
  int owned[3] = {-1, -1, -1};
  for (int i = 0; i < nfds && i < 3; ++i) owned[i] = fds[i];
  const auto refuse = [&](absl::Status s) {
    for (int fd : owned) {
      if (fd >= 0) close(fd);
    }
    return s;
  };
  if (m.magic != kLinkMagic || m.version != kLinkVersion || m.size != sizeof m) {
    return refuse(absl::InvalidArgumentError("not a link message of this version"));
  }
  for (uint8_t b : m.reserved) {
    if (b != 0) return refuse(absl::InvalidArgumentError("reserved bytes set"));
  }
  if (nfds != 3) return refuse(absl::InvalidArgumentError("a link needs a memfd and two eventfds"));
  if (!pktio::FrameRing::ValidGeometry(m.slots, m.slot_bytes) ||
      m.slot_bytes < pktio::FrameRing::kSlotHeader + pktio::kMaxFrameBytes) {
    return refuse(absl::InvalidArgumentError("bad ring geometry"));
  }
  const size_t ring_bytes = pktio::FrameRing::Bytes(m.slots, m.slot_bytes);
  absl::StatusOr<void*> map = MapRingMemfd(owned[0], 2 * ring_bytes);
  if (!map.ok()) return refuse(map.status());
  close(owned[0]);  // the mapping keeps the memory
  Unbind();
  map_ = *map;
  map_bytes_ = 2 * ring_bytes;
  uint8_t* base = static_cast<uint8_t*>(map_);
  rx_ = pktio::FrameRing(base + kLinkRingToProcess * ring_bytes, m.slots, m.slot_bytes);
  tx_ = pktio::FrameRing(base + kLinkRingToDaemon * ring_bytes, m.slots, m.slot_bytes);
  rx_efd_ = owned[1];
  tx_efd_ = owned[2];
  link_id_ = m.link_id;
  ++counters_.binds;
  return absl::OkStatus();
}

uint16_t DaemonLink::RxBurst(pktio::Frame* frames, uint16_t n) {
  if (!bound()) return 0;
  const uint32_t avail = rx_.Available();
  if (avail == 0) return 0;
  const uint16_t alloc = pool_.Alloc(frames, static_cast<uint16_t>(std::min<uint32_t>(avail, n)));
  if (alloc == 0) {
    ++counters_.rx_no_buffer;
    return 0;
  }
  const uint16_t filled = rx_.Consume(frames, alloc);
  if (filled < alloc) pool_.Free(frames + filled, static_cast<uint16_t>(alloc - filled));
  counters_.rx_packets += filled;
  return filled;
}

uint16_t DaemonLink::TxBurst(pktio::Frame* frames, uint16_t n) {
  // Unbound: as a port whose link is down, the device keeps them.
  const uint16_t took = bound() ? tx_.Produce(frames, n) : 0;
  if (took > 0) {
    pool_.Free(frames, took);  // copied into the ring
    counters_.tx_packets += took;
    if (tx_.TakeWakeupRequest()) {
      const uint64_t one = 1;
      if (write(tx_efd_, &one, sizeof one) == sizeof one) ++counters_.wakeups_sent;
    }
  }
  if (took < n && bound()) ++counters_.tx_ring_full;
  // Handed back: no pointer into registered memory outlives the call.
  counters_.tx_flattened += pktio::FlattenEach(frames + took, n - took);
  return took;
}

std::unique_ptr<RxWakeup> DaemonLink::MakeWakeup() { return std::make_unique<Wakeup>(this); }

}  // namespace droce::ethdev
