// libdroce-preload.so: completion channels for droce devices.
//
// ibv_create_comp_channel() has no provider op: libibverbs always asks the
// kernel for the channel's fd, and there is no kernel here. Preloaded (the
// technique of rdma-core's own librspreload), this library takes over
// ibv_create_comp_channel / ibv_destroy_comp_channel (@IBVERBS_1.0) for
// droce contexts and forwards every other call to libibverbs.
//
// A droce channel's fd is an autobound AF_UNIX datagram socket: the provider
// learns its address with getsockname() and sends it one 8-byte datagram per
// event, which is exactly the record ibv_get_cq_event() reads.
//
// ibv_get_cq_event (@IBVERBS_1.1) is taken over too: for a droce channel it
// lets the provider's droce_wait_comp_channel() drive the dataplane in the
// waiting thread until an event comes (one wake-up per completion instead of
// two: the progress thread's, then the program's). An event that thread
// produced itself is handed over directly, without the socket; otherwise
// libibverbs reads the datagram as usual.
//
// open()/open64() of a path under /sys/class/infiniband/DEV/ for one of
// droce's devices read droce's sysfs tree ($SYSFS_PATH, which libibverbs
// reads) instead: some stacks read a device's sysfs files themselves rather
// than through libibverbs. UCX takes each GID's RoCE version from
// ports/1/gid_attrs/types/N and its network interface from .../ndevs/N; with
// nothing there it took droce's GIDs for RoCE v1 and found a RoCE v2 peer
// (rxe, ConnectX) unreachable.
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "drivers/verbs/abi.h"

namespace {

bool IsDroce(ibv_context* context) {
  if (context == nullptr || context->device == nullptr) return false;
  const auto* vdev = reinterpret_cast<const verbs_device*>(context->device);
  return vdev->ops != nullptr && vdev->ops->name != nullptr && std::strcmp(vdev->ops->name, "droce") == 0;
}

// libibverbs' own definition. RTLD_NEXT finds it when the program links
// libibverbs; a program that dlopen()s it privately (Python's pyverbs
// extension modules are loaded RTLD_LOCAL) is not in that search scope, so
// fall back to the already-loaded library itself.
template <typename Fn>
Fn Next(const char* name, const char* version = "IBVERBS_1.0") {
  if (void* sym = dlvsym(RTLD_NEXT, name, version)) return reinterpret_cast<Fn>(sym);
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  void* sym = dlvsym(lib, name, version);
  dlclose(lib);  // RTLD_NOLOAD took a reference; the loader keeps its own
  return reinterpret_cast<Fn>(sym);
}

using WaitFn = int (*)(ibv_comp_channel*, uint64_t* cq_handle);

// The provider's wait, looked up in the library that holds the device's ops
// (libibverbs loads it privately, so RTLD_DEFAULT does not see it).
WaitFn FindProviderWait(ibv_context* context) {
  const auto* vdev = reinterpret_cast<const verbs_device*>(context->device);
  Dl_info info{};
  if (dladdr(vdev->ops, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  void* lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  auto wait = reinterpret_cast<WaitFn>(dlsym(lib, "droce_wait_comp_channel"));
  dlclose(lib);  // RTLD_NOLOAD took a reference; libibverbs keeps its own
  return wait;
}

WaitFn ProviderWait(ibv_context* context) {
  static const WaitFn wait = FindProviderWait(context);  // one provider per process
  return wait;
}

// The kernel's sysfs class directory of RDMA devices.
constexpr char kSysClassInfiniband[] = "/sys/class/infiniband/";

// For a path under /sys/class/infiniband/DEV/ naming one of droce's devices
// (DEV is in $SYSFS_PATH/class/infiniband/), the same path in droce's tree,
// written to `out`; false for every other path (and when SYSFS_PATH is the
// kernel's own), which is opened as given.
bool DroceSysfsPath(const char* path, char (&out)[PATH_MAX]) {
  constexpr size_t kPrefix = sizeof(kSysClassInfiniband) - 1;
  if (path == nullptr || std::strncmp(path, kSysClassInfiniband, kPrefix) != 0) return false;
  const char* root = std::getenv("SYSFS_PATH");
  if (root == nullptr || root[0] == '\0' || std::strcmp(root, "/sys") == 0) return false;
  const char* dev = path + kPrefix;
  const size_t dev_len = std::strcspn(dev, "/");
  if (dev_len == 0) return false;
  // SYSFS_PATH + "/class/infiniband/" + DEV, then the rest of the path.
  const int dir_len = std::snprintf(out, sizeof out, "%s/class/infiniband/%.*s", root, static_cast<int>(dev_len), dev);
  if (dir_len <= 0 || static_cast<size_t>(dir_len) >= sizeof out) return false;
  struct stat st {};
  if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) return false;  // not droce's
  const char* rest = dev + dev_len;
  if (static_cast<size_t>(dir_len) + std::strlen(rest) >= sizeof out) return false;
  std::strcpy(out + dir_len, rest);
  return true;
}

using OpenFn = int (*)(const char*, int, ...);

// `next`: the libc function this one stands for.
int OpenRedirected(OpenFn next, const char* path, int flags, va_list ap) {
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) mode = va_arg(ap, mode_t);
  char droce_path[PATH_MAX];
  return next(DroceSysfsPath(path, droce_path) ? droce_path : path, flags, mode);
}

}  // namespace

extern "C" {

// glibc's symbols are versioned (preload.map gives these GLIBC_2.2.5, the
// version every x86-64 program's reference to them carries). Named by asm
// label: with _FILE_OFFSET_BITS=64, <fcntl.h> makes the name open mean open64.
int OpenShim(const char* path, int flags, ...) __asm__("open");
int Open64Shim(const char* path, int flags, ...) __asm__("open64");

__attribute__((visibility("default"))) int OpenShim(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  static const OpenFn next = reinterpret_cast<OpenFn>(dlsym(RTLD_NEXT, "open"));
  const int fd = OpenRedirected(next, path, flags, ap);
  va_end(ap);
  return fd;
}

__attribute__((visibility("default"))) int Open64Shim(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  static const OpenFn next = reinterpret_cast<OpenFn>(dlsym(RTLD_NEXT, "open64"));
  const int fd = OpenRedirected(next, path, flags, ap);
  va_end(ap);
  return fd;
}

__attribute__((visibility("default"))) ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  if (!IsDroce(context)) {
    using Fn = ibv_comp_channel* (*)(ibv_context*);
    static Fn next = Next<Fn>("ibv_create_comp_channel");
    if (next == nullptr) {
      errno = ENOSYS;
      return nullptr;
    }
    return next(context);
  }
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Binding only the family autobinds a unique abstract address.
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(sa_family_t)) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return nullptr;
  }
  auto* channel = static_cast<ibv_comp_channel*>(calloc(1, sizeof(ibv_comp_channel)));
  if (channel == nullptr) {
    close(fd);
    errno = ENOMEM;
    return nullptr;
  }
  channel->context = context;
  channel->fd = fd;
  channel->refcnt = 0;
  return channel;
}

__attribute__((visibility("default"))) int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq,
                                                            void** cq_context) {
  using Fn = int (*)(ibv_comp_channel*, ibv_cq**, void**);
  static Fn next = nullptr;
  if (next == nullptr) next = Next<Fn>("ibv_get_cq_event", "IBVERBS_1.1");
  if (next == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  if (channel != nullptr && IsDroce(channel->context)) {
    if (WaitFn wait = ProviderWait(channel->context)) {
      uint64_t handle = 0;
      if (const int err = wait(channel, &handle); err != 0) {
        errno = err;
        return -1;
      }
      if (handle != 0) {  // handed over in the process: no datagram to read
        *cq = reinterpret_cast<ibv_cq*>(handle);
        *cq_context = (*cq)->cq_context;
        return 0;  // droce's cq_event op does nothing, so it is not called
      }
    }
  }
  return next(channel, cq, cq_context);
}

__attribute__((visibility("default"))) int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  if (channel == nullptr || !IsDroce(channel->context)) {
    using Fn = int (*)(ibv_comp_channel*);
    static Fn next = Next<Fn>("ibv_destroy_comp_channel");
    return next == nullptr ? ENOSYS : next(channel);
  }
  if (channel->refcnt != 0) return EBUSY;  // CQs still use it (as libibverbs answers)
  close(channel->fd);
  free(channel);
  return 0;
}

}  // extern "C"
