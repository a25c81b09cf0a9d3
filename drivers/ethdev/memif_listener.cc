#include "drivers/ethdev/memif_listener.h"

#include <dirent.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace droce::ethdev {

namespace {
// `fd` is a listening AF_UNIX socket bound to `path`.
bool IsUnixListenerOf(int fd, const std::string& path) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int listening = 0;
  socklen_t len = sizeof listening;
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) return false;
  sockaddr_un addr{};
  len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sun_family != AF_UNIX) return false;
  const size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
  const std::string bound(addr.sun_path, strnlen(addr.sun_path, n));
  return !bound.empty() && bound == path;
}
}  // namespace

std::string MemifListenerPath(const std::string& vdev) {
  if (vdev.rfind("net_memif", 0) != 0 || vdev.find("role=server") == std::string::npos) return "";
  if (vdev.find("socket-abstract=no") == std::string::npos) return "";  // 22.11's default is abstract
  const size_t at = vdev.find("socket=");
  if (at == std::string::npos) return "";
  const size_t end = vdev.find(',', at);
  const std::string path = vdev.substr(at + 7, end == std::string::npos ? std::string::npos : end - (at + 7));
  return !path.empty() && path[0] == '/' ? path : "";
}

int FindUnixListener(const std::string& path) {
  if (path.empty()) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  const int own = dirfd(dir);
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (IsUnixListenerOf(static_cast<int>(fd), path)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool RetireOrphanedUnixListener(int fd, const std::string& path) {
  if (fd < 0 || path.empty() || access(path.c_str(), F_OK) == 0) return false;
  if (!IsUnixListenerOf(fd, path)) return false;
  const int quiet = eventfd(0, EFD_CLOEXEC);
  if (quiet < 0) return false;
  const bool ok = dup2(quiet, fd) == fd;
  close(quiet);
  return ok;
}

}  // namespace droce::ethdev
