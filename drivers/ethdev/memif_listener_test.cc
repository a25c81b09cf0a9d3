// The memif listener retirement (memif_listener.h) on plain sockets: no EAL.
#include "drivers/ethdev/memif_listener.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace droce::ethdev {
namespace {

class Listener : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/droce-memif-listener.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/memif.sock";
    listener_ = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ASSERT_GE(listener_, 0);
    sockaddr_un a = Addr();
    ASSERT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(listen(listener_, 1), 0);
  }
  void TearDown() override {
    if (client_ >= 0) close(client_);
    close(listener_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  sockaddr_un Addr() const {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path_.c_str(), sizeof a.sun_path - 1);
    return a;
  }
  // A peer's connection waiting in the backlog (nobody accepts it).
  void ConnectPending() {
    client_ = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    ASSERT_GE(client_, 0);
    sockaddr_un a = Addr();
    ASSERT_EQ(connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  }
  bool Readable(int fd) const {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
  }
  std::string dir_, path_;
  int listener_ = -1, client_ = -1;
};

TEST(MemifListenerPath, OnlyNamedServerSockets) {
  EXPECT_EQ(MemifListenerPath("net_memif_x,role=server,id=0,socket=/tmp/a/w.sock,socket-abstract=no,bsize=10240"),
            "/tmp/a/w.sock");
  EXPECT_EQ(MemifListenerPath("net_memif_x,role=client,socket=/tmp/a/w.sock,socket-abstract=no"), "");
  EXPECT_EQ(MemifListenerPath("net_memif_x,role=server,socket=/tmp/a/w.sock"), "");  // abstract (22.11's default)
  EXPECT_EQ(MemifListenerPath("net_tap0,iface=x"), "");
}

TEST_F(Listener, FoundByItsPath) {
  EXPECT_EQ(FindUnixListener(path_), listener_);
  EXPECT_EQ(FindUnixListener(dir_ + "/other.sock"), -1);
  EXPECT_EQ(FindUnixListener(""), -1);
}

TEST_F(Listener, KeptWhileItsFileIsThere) {
  // memif keeps the file while other interfaces use the socket.
  ConnectPending();
  EXPECT_FALSE(RetireOrphanedUnixListener(listener_, path_));
  EXPECT_TRUE(Readable(listener_));
  EXPECT_EQ(FindUnixListener(path_), listener_);
}

TEST_F(Listener, AnOrphanWithAPendingPeerGoesQuiet) {
  // What memif leaves after freeing the socket: its file removed, the fd
  // open, a peer's connection in the backlog -> readable for ever.
  ConnectPending();
  ASSERT_EQ(unlink(path_.c_str()), 0);
  ASSERT_TRUE(Readable(listener_));
  EXPECT_TRUE(RetireOrphanedUnixListener(listener_, path_));
  EXPECT_FALSE(Readable(listener_));                // EAL's interrupt thread never calls back
  EXPECT_NE(fcntl(listener_, F_GETFD), -1);         // still a valid fd: EAL's epoll_ctl keeps working
  EXPECT_EQ(FindUnixListener(path_), -1);           // the listening socket is gone
  char b;
  EXPECT_LE(recv(client_, &b, 1, MSG_DONTWAIT), 0);  // the peer sees the connection end
  EXPECT_FALSE(RetireOrphanedUnixListener(listener_, path_));  // once
}

}  // namespace
}  // namespace droce::ethdev
