#include "drivers/fabric/protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace droce::fabric {

Request MakeRequest(Op op, const std::string& device) {
  Request r;
  std::memset(&r, 0, sizeof r);
  r.magic = kMagic;
  r.version = kVersion;
  r.op = op;
  r.size = sizeof r;
  r.pid = static_cast<uint32_t>(getpid());
  std::strncpy(r.device, device.c_str(), kNameBytes - 1);
  return r;
}

Reply MakeReply(const Request& req, int error, const std::string& message) {
  Reply r;
  std::memset(&r, 0, sizeof r);
  r.magic = kMagic;
  r.version = kVersion;
  r.op = req.op;
  r.size = sizeof r;
  r.error = error;
  std::strncpy(r.message, message.c_str(), kMessageBytes - 1);
  return r;
}

int Connect(const std::string& control_socket) {
  sockaddr_un addr{};
  if (control_socket.size() >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, control_socket.c_str(), control_socket.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

absl::StatusOr<Reply> Call(int fd, const Request& req, int timeout_ms, std::string* text, const void* body,
                           size_t body_len) {
  std::vector<char> msg(sizeof req + body_len);
  std::memcpy(msg.data(), &req, sizeof req);
  if (body_len > 0) std::memcpy(msg.data() + sizeof req, body, body_len);
  if (send(fd, msg.data(), msg.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(msg.size())) {
    return absl::UnavailableError(absl::StrCat("droced: sending a request: ", std::strerror(errno)));
  }
  pollfd pfd{fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&pfd, 1, timeout_ms);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return absl::DeadlineExceededError("droced did not answer");
  std::vector<char> buf(sizeof(Reply) + kMaxStatusText);
  const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
  if (n < static_cast<ssize_t>(sizeof(Reply))) {
    return absl::UnavailableError(n == 0 ? "droced closed the connection" : "droced sent a short reply");
  }
  Reply r;
  std::memcpy(&r, buf.data(), sizeof r);
  if (r.magic != kMagic || r.version != kVersion || r.op != req.op || r.size != static_cast<uint32_t>(n)) {
    return absl::UnavailableError("droced sent a malformed reply (a different version?)");
  }
  r.message[kMessageBytes - 1] = 0;
  r.secret[kSecretBytes - 1] = 0;
  r.memif_socket[sizeof r.memif_socket - 1] = 0;
  if (text != nullptr) text->assign(buf.data() + sizeof r, static_cast<size_t>(n) - sizeof r);
  return r;
}

absl::StatusOr<Reply> CallOnce(const std::string& control_socket, const Request& req, int timeout_ms,
                               std::string* text, const void* body, size_t body_len) {
  const int fd = Connect(control_socket);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("droced is not running (", control_socket, ": ", std::strerror(errno), ")"));
  }
  absl::StatusOr<Reply> r = Call(fd, req, timeout_ms, text, body, body_len);
  close(fd);
  return r;
}

absl::StatusOr<Attachment> Attach(const std::string& run_dir, const std::string& device, uint32_t want_qpn_base,
                                  uint32_t link) {
  const std::string control = ControlSocketPath(run_dir);
  Attachment a;
  a.fd = Connect(control);
  if (a.fd < 0) {
    return absl::UnavailableError(absl::StrCat("the fabric daemon is not running (", control, ": ",
                                               std::strerror(errno), "); start it with `droce-ctl daemon start`",
                                               " or register the device with `droce-ctl link add ", device,
                                               " ...` (DROCE_RUN_DIR=", run_dir, ")"));
  }
  Request req = MakeRequest(kOpAttach, device);
  req.want_qpn_base = want_qpn_base;
  req.link = link;
  absl::StatusOr<Reply> r = Call(a.fd, req, 10000);
  auto fail = [&](absl::Status s) {
    close(a.fd);
    return s;
  };
  if (!r.ok()) return fail(r.status());
  if (r->error != 0) {
    return fail(absl::UnavailableError(absl::StrCat("droced refused to attach to ", device, ": ", r->message, " (",
                                                    std::strerror(r->error), ")")));
  }
  // Never trust a field not checked.
  if (r->qpn_count == 0 || r->qpn_base < 2 || uint64_t{r->qpn_base} + r->qpn_count > kQpnSpace ||
      (want_qpn_base != 0 && r->qpn_base != want_qpn_base) || r->num_gids > kMaxGids ||
      std::memchr(r->secret, 0, sizeof r->secret) == nullptr ||
      std::memchr(r->memif_socket, 0, sizeof r->memif_socket) == nullptr) {
    return fail(absl::FailedPreconditionError("droced's attach reply is invalid"));
  }
  a.reply = *r;
  return a;
}

}  // namespace droce::fabric
