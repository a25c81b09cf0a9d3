#include "apps/testpmd/fabric_port.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
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
  const std::string control = fabric::ControlSocketPath(run_dir);
  FabricAttachment a;
  a.fd = fabric::Connect(control);
  if (a.fd < 0) {
    return absl::UnavailableError(absl::StrCat("the fabric daemon is not running (", control, ": ",
                                               std::strerror(errno),
                                               "); register the device with `droce-ctl link add ", device,
                                               " ip ADDR` (DROCE_RUN_DIR=", run_dir, ")"));
  }
  fabric::Request req = fabric::MakeRequest(fabric::kOpAttach, device);
  req.want_qpn_base = range * fabric::kQpnsPerProcess;
  absl::StatusOr<fabric::Reply> r = fabric::Call(a.fd, req, 10000);
  auto fail = [&](absl::Status s) {
    close(a.fd);
    return s;
  };
  if (!r.ok()) return fail(r.status());
  if (r->error != 0) {
    return fail(absl::UnavailableError(absl::StrCat("droced refused to attach to ", device, ": ", r->message, " (",
                                                    std::strerror(r->error), ")")));
  }
  // Never trust a field not checked: the range must be the one asked for,
  // the GIDs few, the strings terminated.
  if (r->qpn_base != req.want_qpn_base || r->qpn_count == 0 || r->qpn_count > fabric::kQpnsPerProcess ||
      r->num_gids == 0 || r->num_gids > fabric::kMaxGids ||
      std::memchr(r->secret, 0, sizeof r->secret) == nullptr ||
      std::memchr(r->memif_socket, 0, sizeof r->memif_socket) == nullptr) {
    return fail(absl::FailedPreconditionError("droced's attach reply is invalid"));
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
  a.vdev = absl::StrCat(a.port_name, ",role=client,socket=", r->memif_socket, ",id=", r->memif_id,
                        ",secret=", r->secret, ",socket-abstract=no,bsize=10240");
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
