// MSG_ZEROCOPY on UDP_SEGMENT sends, as droce's udp_gso sends them (64 KiB of
// 4,112-byte segments): the sender's CPU per GB with and without zerocopy, and
// how many of the zerocopy sends the kernel copied anyway (the completion's
// SO_EE_CODE_ZEROCOPY_COPIED: it copies a zerocopy skb that a socket of the
// same host receives, as over a veth). Run by zerocopy.sh.
//   zerocopy recv PORT BYTES
//   zerocopy send ADDR PORT SENDS SIZE SEGMENT ZEROCOPY(0|1)
// Zerocopy sends reuse a buffer of the 256-buffer pool only after its
// completion, as a NIC's frame pool must.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include "udp_bench.h"
static double cpu(void) { double user, sys; cpu_times(&user, &sys); return user + sys; }
int main(int argc, char** argv) {
  // recv PORT COUNT | send ADDR PORT COUNT SIZE SEG ZC
  if (!strcmp(argv[1], "recv")) {
    int fd = socket(AF_INET6, SOCK_DGRAM, 0), one = 1, big = 8 << 20;
    setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(atoi(argv[2]))};
    if (bind(fd, (void*)&a, sizeof a)) { perror("bind"); return 1; }
    long long want = atoll(argv[3]), got = 0; static char buf[65536];
    struct timeval tv = {2, 0}; setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    double c0 = 0, t0 = 0; int first = 1;
    while (got < want) { ssize_t r = recv(fd, buf, sizeof buf, 0); if (r < 0) break;
      if (first) { c0 = cpu(); t0 = now(); first = 0; } got += r; }
    printf("recv bytes %lld cpu %.3f s wall %.3f s -> %.3f s/GB\n", got, cpu() - c0, now() - t0, (cpu() - c0) / (got / 1e9));
    return 0;
  }
  int fd = socket(AF_INET6, SOCK_DGRAM, 0), one = 1, big = 8 << 20;
  int zc = atoi(argv[7]); unsigned seg = atoi(argv[6]), size = atoi(argv[5]); long long count = atoll(argv[4]);
  if (zc && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one)) { perror("SO_ZEROCOPY"); return 1; }
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(atoi(argv[3]))};
  inet_pton(AF_INET6, argv[2], &a.sin6_addr);
  if (connect(fd, (void*)&a, sizeof a)) { perror("connect"); return 1; }
  if (seg) { int s = seg; setsockopt(fd, SOL_UDP, UDP_SEGMENT, &s, sizeof s); }
  // a pool of 256 buffers, reused round robin (only after completion when zc)
  enum { kPool = 256 };
  char* pool = aligned_alloc(4096, (size_t)kPool * 65536); memset(pool, 1, (size_t)kPool * 65536);
  long long sent = 0, completed = 0, copied = 0, notifs = 0; double c0 = cpu(), t0 = now();
  for (long long i = 0; i < count; ++i) {
    while (zc && sent - completed >= kPool) {
      char ctl[128]; struct msghdr m = {.msg_control = ctl, .msg_controllen = sizeof ctl};
      if (recvmsg(fd, &m, MSG_ERRQUEUE) < 0) { struct pollfd p = {fd, 0, 0}; poll(&p, 1, 10); continue; }
      struct cmsghdr* c = CMSG_FIRSTHDR(&m); struct sock_extended_err* e = (void*)CMSG_DATA(c);
      if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      ++notifs; completed += e->ee_data - e->ee_info + 1;
      if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied += e->ee_data - e->ee_info + 1;
    }
    ssize_t r = send(fd, pool + (i % kPool) * 65536, size, zc ? MSG_ZEROCOPY : 0);
    if (r < 0) { if (errno == ENOBUFS || errno == EAGAIN) { --i; continue; } perror("send"); return 1; }
    ++sent;
  }
  while (zc && completed < sent) {
    char ctl[128]; struct msghdr m = {.msg_control = ctl, .msg_controllen = sizeof ctl};
    if (recvmsg(fd, &m, MSG_ERRQUEUE) < 0) { struct pollfd p = {fd, 0, 0}; poll(&p, 1, 10); continue; }
    struct cmsghdr* c = CMSG_FIRSTHDR(&m); struct sock_extended_err* e = (void*)CMSG_DATA(c);
    ++notifs; completed += e->ee_data - e->ee_info + 1;
    if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED) copied += e->ee_data - e->ee_info + 1;
  }
  double cs = cpu() - c0;
  printf("send zc=%d size %u seg %u: %lld sends, cpu %.3f s wall %.3f s -> %.3f s/GB; completions %lld in %lld notifications, copied %lld\n",
         zc, size, seg, sent, cs, now() - t0, cs / (sent * (double)size / 1e9), completed, notifs, copied);
  return 0;
}
