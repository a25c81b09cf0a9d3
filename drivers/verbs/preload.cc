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
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>

#include <cerrno>
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

}  // namespace

extern "C" {

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
