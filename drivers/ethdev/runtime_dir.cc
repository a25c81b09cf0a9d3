#include "drivers/ethdev/runtime_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>

namespace droce::ethdev {
namespace {

// True if some process holds a lock on dir/config (DPDK's primary keeps a
// write lock on part of it while it runs). A lock of our own would not
// conflict: callers run before this process's EAL exists.
bool ConfigLocked(const std::string& dir) {
  const int fd = open((dir + "/config").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;  // no config: never initialised, or half removed
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;  // l_start 0, l_len 0: the whole file
  const bool locked = fcntl(fd, F_GETLK, &whole) == 0 && whole.l_type != F_UNLCK;
  close(fd);
  return locked;
}

}  // namespace

bool IsDroceRuntimeDirName(const std::string& name) {
  return name.rfind("droce-", 0) == 0 || name.rfind("droced-", 0) == 0;
}

std::string DpdkRuntimeBase() {
  if (geteuid() == 0) return "/var/run/dpdk";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return std::string(xdg != nullptr && *xdg != '\0' ? xdg : "/tmp") + "/dpdk";
}

bool RemoveRuntimeDir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  return rmdir(dir.c_str()) == 0;
}

int RemoveStaleRuntimeDirs(const std::string& base, int min_age_s) {
  DIR* d = opendir(base.c_str());
  if (d == nullptr) return 0;
  const time_t now = time(nullptr);
  int removed = 0;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!IsDroceRuntimeDirName(name)) continue;
    const std::string dir = base + "/" + name;
    struct stat st {};
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (now - st.st_mtime < min_age_s) continue;
    if (ConfigLocked(dir)) continue;
    if (RemoveRuntimeDir(dir)) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace droce::ethdev
