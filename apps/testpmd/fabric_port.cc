#include "apps/testpmd/fabric_port.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "drivers/ethdev/memif_vdev.h"
#include "drivers/fabric/protocol.h"

namespace droce::testpmd {

absl::StatusOr<FabricAttachment> AttachToFabric(const std::string& run_dir, const std::string& device,
                                                uint32_t range) {
  if (device.empty() || device.size() >= fabric::kNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("bad device name '", device, "'"));
  }
  if (range == 0 || uint64_t{range} * fabric::kQpnsPerProcess >= fabric::kQpnSpace) {
    return absl::InvalidArgumentError(absl::StrCat("QPN range ", range, " is outside 1..",
                                                   fabric::kQpnSpace / fabric::kQpnsPerProcess - 1));
  }
  absl::StatusOr<fabric::Attachment> at = fabric::Attach(run_dir, device, range * fabric::kQpnsPerProcess, fabric::kLinkMemif);
  if (!at.ok()) return at.status();
  const fabric::Reply* r = &at->reply;
  FabricAttachment a;
  a.fd = at->fd;
  // A range of one process's size, and GIDs to answer with.
  if (r->qpn_count > fabric::kQpnsPerProcess || r->num_gids == 0) {
    close(a.fd);
    return absl::FailedPreconditionError("droced's attach reply is invalid");
  }
  std::memcpy(a.mac.data(), r->mac, 6);
  for (uint32_t i = 0; i < r->num_gids; ++i) {
    core::Gid g;
    std::memcpy(g.data(), r->gids[i], 16);
    a.gids.push_back(g);
  }
  a.qpn_base = r->qpn_base;
  a.qpn_count = r->qpn_count;
  // One name per process and range: two testpmds in one EAL never happen,
  // but the name must not clash with a verbs program's (net_memif_NAME_fabric).
  a.port_name = absl::StrCat("net_memif_", device, "_tp", range);
  a.vdev = ethdev::MemifVdevArgs(
      {.name = a.port_name, .id = r->memif_id, .socket = r->memif_socket, .secret = r->secret, .buffer_bytes = 10240});
  return a;
}

bool FabricIo::ReadMessages() {
  if (gone_) return false;
  for (int i = 0; i < 64; ++i) {
    alignas(8) char buf[sizeof(ethdev::PeerMessage) + 64];
    int fds[3], nfds = 0;
    const long n = ethdev::ReceiveWithFds(fd_, buf, sizeof buf, fds, &nfds);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) {
      gone_ = true;
      direct_.RemoveAll();  // the port goes down with the daemon; so do the paths
      return false;
    }
    if (n == sizeof(ethdev::PeerMessage)) {
      ethdev::PeerMessage m;
      std::memcpy(&m, buf, sizeof m);
      (void)direct_.Apply(m, fds, nfds);  // takes the descriptors; a refused one is counted
      continue;
    }
    for (int k = 0; k < nfds; ++k) close(fds[k]);  // nothing we know: ignored
  }
  return true;
}

}  // namespace droce::testpmd
