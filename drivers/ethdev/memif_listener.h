// A workaround for DPDK 22.11 net_memif's listener teardown.
//
// When the last interface on a memif server socket closes, memif frees the
// socket (and removes its file) but neither unregisters the listening fd's
// interrupt callback nor closes the fd: EAL's interrupt thread keeps
// watching it with a callback whose argument is freed. A peer that
// connected just before the close (it reconnects as soon as the link goes
// down) leaves a connection in the backlog; the fd then stays readable and
// the interrupt thread calls memif_listener_handler on freed memory in a
// loop ("Failed to accept connection request on socket fd -1", thousands of
// times) until the process faults (seen at exit of ib_write_bw, SIGSEGV).
//
// The fd cannot be closed (EAL rebuilds its epoll set from its sources and
// panics on EBADF), so it is retired instead: a never-written eventfd is
// dup2'ed over it, which drops the listening socket (its backlog with it)
// and leaves EAL a valid fd that never becomes readable.
#ifndef DROCE_DRIVERS_ETHDEV_MEMIF_LISTENER_H_
#define DROCE_DRIVERS_ETHDEV_MEMIF_LISTENER_H_

#include <string>

namespace droce::ethdev {

// The socket path of a memif server vdev ("...,role=server,socket=PATH,..."):
// empty for anything else (clients, abstract sockets, other PMDs).
std::string MemifListenerPath(const std::string& vdev_args);

// This process's listening AF_UNIX socket bound to `path`, or -1.
int FindUnixListener(const std::string& path);

// Retires `fd` (see above) if it is still the listener of `path` and the
// path is gone (memif freed the socket; other interfaces on it keep the file).
// True if it did.
bool RetireOrphanedUnixListener(int fd, const std::string& path);

}  // namespace droce::ethdev

#endif  // DROCE_DRIVERS_ETHDEV_MEMIF_LISTENER_H_
