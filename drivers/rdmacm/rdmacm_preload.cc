// libdroce-rdmacm.so: /dev/infiniband/rdma_cm for unmodified librdmacm
// programs on droce's fabric devices (doc/cm.md).
//
// librdmacm (the real one, unmodified) opens /dev/infiniband/rdma_cm and
// speaks the ucma ABI to it with write(): a command header, the command,
// and a user pointer where the kernel writes the response. There is no such
// kernel here: preloaded, this library takes over open()/openat() of that
// path, answers fstat() on the fd as a character device, and turns every
// write() on it into a request to droced (drivers/rdmacm/cm_protocol.h),
// copying the daemon's answer to the response pointer. The fd is the
// AF_UNIX connection to the daemon itself: poll() on it reports the
// daemon's event notifications, fcntl(O_NONBLOCK) works as on the kernel's
// fd, and closing it (or dying) makes the daemon destroy the program's
// rdma_cm ids, as the kernel does when the file closes.
//
// Nothing else is touched: other paths and fds go to libc unchanged.
// Both fstat and fstat64 are defined below: with 64-bit file offsets the
// headers would name fstat's definition fstat64.
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <rdma/rdma_user_cm.h>

#include "drivers/rdmacm/cm_protocol.h"

// Declared here rather than through <fcntl.h>/<unistd.h>, whose fortified
// inline wrappers would clash with these definitions.
extern "C" {
int pause();
int open(const char* path, int flags, ...);
int open64(const char* path, int flags, ...);
int openat(int dirfd, const char* path, int flags, ...);
int openat64(int dirfd, const char* path, int flags, ...);
ssize_t write(int fd, const void* buf, size_t n);
int close(int fd);
int fcntl(int fd, int cmd, ...);
}

namespace {

using namespace droce::cmproto;

constexpr char kCmPath[] = "/dev/infiniband/rdma_cm";
constexpr int kMaxFd = 16384;
constexpr int kONonblock = 04000;  // O_NONBLOCK
constexpr int kOCreat = 0100;      // O_CREAT
constexpr int kOTmpfile = 020000000 | 0200000;
constexpr int kFGetfl = 3;         // F_GETFL

struct FdState {
  std::atomic<bool> cm{false};
  std::atomic<uint32_t> consumed{0};  // notifications read since the last request
  std::atomic<uint32_t> pending{0};   // events waiting, as the daemon's last reply counted them
  std::atomic<uint64_t> token{0};     // names the channel to the daemon (rdma_migrate_id)
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
};
FdState g_fds[kMaxFd];

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

using OpenFn = int (*)(const char*, int, ...);
using OpenatFn = int (*)(int, const char*, int, ...);
using WriteFn = ssize_t (*)(int, const void*, size_t);
using CloseFn = int (*)(int);

bool IsCmPath(const char* path) { return path != nullptr && std::strcmp(path, kCmPath) == 0; }

bool IsCmFd(int fd) { return fd >= 0 && fd < kMaxFd && g_fds[fd].cm.load(std::memory_order_acquire); }

struct Answer;
Answer Exchange(int fd, uint16_t kind, const void* cmd, size_t cmd_len, const void* opt, size_t opt_len,
                void* payload, size_t payload_cap);

// A connection to the daemon of the run directory, or -1 (then the real
// open() runs: a host with a kernel rdma_cm and no droced keeps working).
int ConnectDaemon(int flags) {
  const char* env = std::getenv("DROCE_RUN_DIR");
  const char* dir = env != nullptr && *env != 0 ? env : "/run/droce";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const int len = std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s/droced.sock", dir);
  if (len <= 0 || len >= static_cast<int>(sizeof addr.sun_path)) return -1;
  int type = SOCK_SEQPACKET | SOCK_CLOEXEC;
  if (flags & kONonblock) type |= SOCK_NONBLOCK;
  const int fd = socket(AF_UNIX, type, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || fd >= kMaxFd) {
    Next<CloseFn>("close")(fd);
    return -1;
  }
  g_fds[fd].consumed.store(0);
  g_fds[fd].pending.store(0);
  g_fds[fd].token.store(0);
  g_fds[fd].cm.store(true, std::memory_order_release);
  return fd;
}

// The channel's token, asked for once (a kCmSync's reply carries it).
uint64_t TokenOf(int fd);

// Waits for and reads one datagram; -1 with errno on failure.
ssize_t RecvOne(int fd, void* buf, size_t cap) {
  for (;;) {
    const ssize_t n = recv(fd, buf, cap, MSG_DONTWAIT);
    if (n >= 0) return n == 0 ? (errno = ECONNRESET, -1) : n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return -1;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
  }
}

// Reads notifications that are already there (they are never a reply: a
// request's reply is always read by the request's own exchange).
void DrainNotifications(int fd) {
  alignas(8) char buf[sizeof(CmReply)];
  while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) g_fds[fd].consumed.fetch_add(1);
}

struct Answer {
  int error = 0;
  uint32_t events_pending = 0;
  uint32_t payload_len = 0;
  bool ate_notification = false;
  bool closed = false;  // another thread closed the fd during the exchange
};

// One request/reply exchange, under the fd's lock.
Answer Exchange(int fd, uint16_t kind, const void* cmd, size_t cmd_len, const void* opt, size_t opt_len,
                void* payload, size_t payload_cap) {
  Answer a;
  alignas(8) char out[sizeof(CmRequest) + kMaxCommandBytes + kMaxOptionBytes];
  DrainNotifications(fd);
  CmRequest q{kCmMagic, kCmVersion, kind, static_cast<uint32_t>(sizeof q + cmd_len + opt_len),
              g_fds[fd].consumed.exchange(0), static_cast<uint32_t>(cmd_len), static_cast<uint32_t>(opt_len)};
  std::memcpy(out, &q, sizeof q);
  if (cmd_len > 0) std::memcpy(out + sizeof q, cmd, cmd_len);
  if (opt_len > 0) std::memcpy(out + sizeof q + cmd_len, opt, opt_len);
  if (send(fd, out, q.size, MSG_NOSIGNAL) != static_cast<ssize_t>(q.size)) {
    a.error = errno == EAGAIN ? EAGAIN : ENODEV;
    a.closed = !IsCmFd(fd);
    return a;
  }
  alignas(8) char in[sizeof(CmReply) + kMaxReplyPayload];
  for (;;) {
    const ssize_t n = RecvOne(fd, in, sizeof in);
    if (n < static_cast<ssize_t>(sizeof(CmReply))) {
      a.error = ENODEV;  // the daemon went away, or the program closed the fd
      a.closed = !IsCmFd(fd);
      return a;
    }
    CmReply r;
    std::memcpy(&r, in, sizeof r);
    if (r.magic != kCmMagic || r.version != kCmVersion) {
      a.error = EPROTO;
      return a;
    }
    if (r.kind == kCmNotify) {
      g_fds[fd].consumed.fetch_add(1);
      a.ate_notification = true;
      continue;
    }
    if (r.kind != kCmReply || r.size != static_cast<uint32_t>(n) || r.payload_len + sizeof r != r.size) {
      a.error = EPROTO;
      return a;
    }
    a.error = r.error;
    a.events_pending = r.events_pending;
    g_fds[fd].pending.store(r.events_pending);
    a.payload_len = r.payload_len;
    if (a.error == 0 && r.payload_len > 0) {
      if (r.payload_len > payload_cap) {
        a.error = ENOSPC;
      } else {
        std::memcpy(payload, in + sizeof r, r.payload_len);
      }
    }
    return a;
  }
}

// True when a GET_EVENT can only find the queue empty: the daemon's last
// reply counted no events, no notification waits on the socket, and none
// was read without being reported (the daemon sends the next one only
// after hearing of the last, cm_protocol.h), so any event queued since
// would have sent one. The daemon's answer would be EAGAIN; the shim gives
// it without the round trip, as the kernel's ucma answers a non-blocking
// get_event on an empty queue. Polling a non-blocking channel (rsockets
// does, between short sleeps) then costs a recv, not a command. Under the
// fd's lock.
bool NoEventWaits(int fd) {
  if (g_fds[fd].pending.load() != 0 || g_fds[fd].consumed.load() != 0) return false;
  char b;
  return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

uint64_t TokenOf(int fd) {
  uint64_t t = g_fds[fd].token.load();
  if (t != 0) return t;
  pthread_mutex_lock(&g_fds[fd].lock);
  const Answer a = Exchange(fd, kCmSync, nullptr, 0, nullptr, 0, &t, sizeof t);
  pthread_mutex_unlock(&g_fds[fd].lock);
  if (a.error != 0 || a.payload_len != sizeof t) return 0;
  g_fds[fd].token.store(t);
  return t;
}

// DROCE_RDMACM_TRACE=1: every command and its answer on stderr (debugging).
bool Tracing() {
  static const bool on = [] {
    const char* e = std::getenv("DROCE_RDMACM_TRACE");
    return e != nullptr && *e == '1';
  }();
  return on;
}

// The offset of a command's response pointer (every ucma command that has
// a response starts with it, except CREATE_ID, where it follows the uid).
int ResponseOffset(uint32_t cmd) {
  switch (cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
      return 8;
    case RDMA_USER_CM_CMD_DESTROY_ID:
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
    case RDMA_USER_CM_CMD_QUERY:
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
    case RDMA_USER_CM_CMD_GET_EVENT:
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_JOIN_MCAST:
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
    case RDMA_USER_CM_CMD_MIGRATE_ID:
      return 0;
    default:
      return -1;
  }
}

ssize_t CmWrite(int fd, const void* buf, size_t n) {
  rdma_ucm_cmd_hdr hdr;
  if (buf == nullptr || n < sizeof hdr) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, buf, sizeof hdr);
  if (n != sizeof hdr + hdr.in || n > kMaxCommandBytes) {
    errno = EINVAL;
    return -1;
  }
  const auto* body = static_cast<const uint8_t*>(buf) + sizeof hdr;
  void* response = nullptr;
  const int off = ResponseOffset(hdr.cmd);
  if (off >= 0 && hdr.in >= off + 8) {
    uint64_t p;
    std::memcpy(&p, body + off, sizeof p);
    response = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
  }
  const void* option = nullptr;
  size_t option_len = 0;
  if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION && hdr.in >= sizeof(rdma_ucm_set_option)) {
    rdma_ucm_set_option so;
    std::memcpy(&so, body, sizeof so);
    if (so.optlen > kMaxOptionBytes || (so.optlen > 0 && so.optval == 0)) {
      errno = EINVAL;
      return -1;
    }
    option = reinterpret_cast<const void*>(static_cast<uintptr_t>(so.optval));
    option_len = so.optlen;
  }
  uint64_t dest_token = 0;
  if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID && hdr.in >= sizeof(rdma_ucm_migrate_id)) {
    // Written to the destination channel; mi.fd is the id's current channel,
    // an fd of this program that the daemon knows by its token.
    rdma_ucm_migrate_id mi;
    std::memcpy(&mi, body, sizeof mi);
    const int to = static_cast<int>(mi.fd);
    if (!IsCmFd(to) || (dest_token = TokenOf(to)) == 0) {
      errno = EINVAL;
      return -1;
    }
    option = &dest_token;
    option_len = sizeof dest_token;
  }
  alignas(8) uint8_t payload[kMaxReplyPayload];
  for (;;) {
    if (!IsCmFd(fd)) {  // closed by another thread meanwhile
      errno = EBADF;
      return -1;
    }
    pthread_mutex_lock(&g_fds[fd].lock);
    Answer a;
    const bool answered_here = hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT && NoEventWaits(fd);
    if (answered_here) {
      a.error = EAGAIN;
    } else {
      a = Exchange(fd, kCmCommand, buf, n, option, option_len, payload, sizeof payload);
      if (a.ate_notification && a.events_pending > 0) {
        // We read the notification meant for a waiter: have the daemon send another.
        (void)Exchange(fd, kCmSync, nullptr, 0, nullptr, 0, nullptr, 0);
      }
    }
    pthread_mutex_unlock(&g_fds[fd].lock);
    if (a.closed) {
      // rdma_destroy_event_channel in another thread while this one was in
      // the channel: the kernel's write would not return either.
      for (;;) pause();
    }
    const bool no_event = a.error == EAGAIN && hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT;
    // fcntl fails (or the fd is another's now) when another thread closed
    // the channel (rdma_destroy_event_channel) after the exchange above,
    // while this one was still in the call: the kernel's read would keep
    // sleeping, so does this. (rping's event thread sits in its read while
    // main destroys the channel, and exits the process on an error.)
    const int flags = no_event ? fcntl(fd, kFGetfl) : 0;
    if (no_event && (flags < 0 || !IsCmFd(fd))) {
      for (;;) pause();
    }
    if (no_event && !(flags & kONonblock)) {
      // A blocking rdma_get_cm_event: wait for the daemon's notification.
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, -1) < 0 && errno != EINTR) return -1;
      if ((p.revents & POLLNVAL) || !IsCmFd(fd)) {
        // Another thread closed the channel (rdma_destroy_event_channel)
        // while this one waited: the kernel's read keeps sleeping, so does this.
        for (;;) pause();
      }
      if (p.revents & (POLLHUP | POLLERR)) {
        errno = ENODEV;
        return -1;
      }
      continue;
    }
    if (Tracing()) {
      timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      std::fprintf(stderr, "droce-rdmacm: %ld.%03ld fd %d cmd %u in %u out %u -> %s (%u bytes, %u events pending%s)\n",
                   static_cast<long>(ts.tv_sec), ts.tv_nsec / 1000000, fd, hdr.cmd, hdr.in, hdr.out,
                   a.error != 0 ? std::strerror(a.error) : "ok", a.payload_len, a.events_pending,
                   answered_here ? "; answered without the daemon" : "");
    }
    if (a.error != 0) {
      errno = a.error;
      return -1;
    }
    if (a.payload_len > 0) {
      if (response == nullptr || a.payload_len > hdr.out) {
        errno = EFAULT;
        return -1;
      }
      std::memcpy(response, payload, a.payload_len);
    }
    return static_cast<ssize_t>(n);
  }
}

void FakeStat(struct stat* st) {
  std::memset(st, 0, sizeof *st);
  // The real node's device number when there is one (librdmacm may have
  // learnt it over netlink and compares), else none.
  struct stat real;
  if (stat(kCmPath, &real) == 0 && S_ISCHR(real.st_mode)) st->st_rdev = real.st_rdev;
  st->st_mode = S_IFCHR | 0666;
}

// The variadic mode argument of the open calls: there only with O_CREAT or
// O_TMPFILE, as glibc reads it.
unsigned ModeArg(int flags, va_list ap) { return (flags & (kOCreat | kOTmpfile)) != 0 ? va_arg(ap, unsigned) : 0; }

constexpr char kOpenName[] = "open";
constexpr char kOpen64Name[] = "open64";
constexpr char kOpenatName[] = "openat";
constexpr char kOpenat64Name[] = "openat64";
constexpr int kNoDirfd = -1;  // the open/open64 forms

// The one body of the four open wrappers: the rdma_cm node becomes a
// connection to the run directory's daemon when one answers; anything else
// (or no daemon) is the real call named kName (openat* when it takes a dirfd).
template <const char* kName>
int OpenOrConnect(int dirfd, const char* path, int flags, unsigned mode) {
  if (IsCmPath(path)) {
    const int fd = ConnectDaemon(flags);
    if (fd >= 0) return fd;
  }
  constexpr bool kAt = kName == kOpenatName || kName == kOpenat64Name;
  if constexpr (kAt) {
    static const OpenatFn real = Next<OpenatFn>(kName);
    return real(dirfd, path, flags, mode);
  } else {
    (void)dirfd;
    static const OpenFn real = Next<OpenFn>(kName);
    return real(path, flags, mode);
  }
}

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = ModeArg(flags, ap);
  va_end(ap);
  return OpenOrConnect<kOpenName>(kNoDirfd, path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = ModeArg(flags, ap);
  va_end(ap);
  return OpenOrConnect<kOpen64Name>(kNoDirfd, path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = ModeArg(flags, ap);
  va_end(ap);
  return OpenOrConnect<kOpenatName>(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const unsigned mode = ModeArg(flags, ap);
  va_end(ap);
  return OpenOrConnect<kOpenat64Name>(dirfd, path, flags, mode);
}

int fstat(int fd, struct stat* st) noexcept {
  if (IsCmFd(fd)) {
    FakeStat(st);
    return 0;
  }
  static const auto real = Next<int (*)(int, struct stat*)>("fstat");
  return real(fd, st);
}

int fstat64(int fd, struct stat64* st) noexcept {
  if (IsCmFd(fd)) {
    FakeStat(reinterpret_cast<struct stat*>(st));  // the same layout on LP64
    return 0;
  }
  static const auto real = Next<int (*)(int, struct stat64*)>("fstat64");
  return real(fd, st);
}

ssize_t write(int fd, const void* buf, size_t n) {
  if (IsCmFd(fd)) return CmWrite(fd, buf, n);
  static const WriteFn real = Next<WriteFn>("write");
  return real(fd, buf, n);
}

int close(int fd) {
  if (IsCmFd(fd)) g_fds[fd].cm.store(false, std::memory_order_release);
  static const CloseFn real = Next<CloseFn>("close");
  return real(fd);
}

}  // extern "C"
