// Test helper: a memif server in a process of its own, as the peer program
// of a droce device is. Serves one client on SOCKET, keeps the link up for
// HOLD_MS after the client has seen it up (the client creates SOCKET.seen:
// on a loaded host a client may not run for longer than any fixed hold),
// then closes its port as ibv_close_device does
// (Stop, then the vdev removed) and exits. Creates SOCKET.ready once its
// port is started: a client that connects earlier (EAL has probed the vdev,
// so the socket listens) is refused ("ID not found": memif serves a port
// only once started) and must retry after its handshake failed, which the
// test's client does not do (Runtime::CheckLink retries after 2 s).
//   memif_server_peer SOCKET HOLD_MS
// Exit status: 0 served and closed, 1 no client within 60 s (a limit for a
// hung test only: a loaded host can take seconds), 2 bad use/EAL.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "drivers/ethdev/eal.h"
#include "drivers/ethdev/port.h"

int main(int argc, char** argv) {
  using namespace droce::ethdev;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOCKET HOLD_MS\n", argv[0]);
    return 2;
  }
  const std::string sock = argv[1];
  const int hold_ms = std::atoi(argv[2]);
  EalConfig eal;
  eal.file_prefix = "droce-memif-peer-" + std::to_string(getpid());
  eal.memory_mb = 64;
  const std::string vdev = "net_memif0";
  eal.vdevs = {vdev + ",role=server,id=0,socket=" + sock + ",socket-abstract=no"};
  if (auto s = StartEal(eal); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  PortConfig c;
  c.name = vdev;
  c.mbufs = 511;
  c.start_may_fail = true;
  c.memif_listener_path = sock;
  auto port = EthdevPort::Open(c);
  if (!port.ok()) {
    std::fprintf(stderr, "%s\n", port.status().ToString().c_str());
    return 2;
  }
  if (const int fd = open((sock + ".ready").c_str(), O_CREAT | O_WRONLY, 0600); fd >= 0) close(fd);
  const bool served = (*port)->WaitLinkUp(60'000);
  if (served) {
    const std::string seen = sock + ".seen";
    for (int waited_ms = 0; access(seen.c_str(), F_OK) != 0 && waited_ms < 60'000; ++waited_ms) usleep(1000);
    usleep(hold_ms * 1000);
  }
  (*port)->Stop(/*close=*/true);
  (void)RemoveVdev(vdev);
  // Ends as a verbs program does after ibv_close_device: the port's pools
  // and EAL are left to the exit (Runtime never calls rte_eal_cleanup).
  _exit(served ? 0 : 1);
}
