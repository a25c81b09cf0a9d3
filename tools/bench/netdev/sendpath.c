// The sender's passes over a payload with `steering udp` and `udp_gso=on`: a
// 64 KiB message as one UDP_SEGMENT send of 15 RoCEv2 frames of 4,112 bytes
// (a 12-byte BTH, 4,096 bytes of payload, the 4-byte ICRC), two ways:
//   copy: as droce sends today: each frame built in a frame buffer (the
//         header written, the payload copied from the program's registered
//         memory, the CRC computed over the copy while it is in cache), then
//         sent from the frame buffers (the kernel copies it into its skb);
//   iov:  the kernel copies the payload straight from the registered memory:
//         an iovec per piece of each segment (header, payload slice, ICRC),
//         the CRC computed in a read-only pass over the registered memory.
// The sender's CPU (user + system; over a veth the system time includes the
// receive side's softirq up to the socket) per GB of payload. CRC32 by
// DPDK's rte_net_crc (PCLMULQDQ), over the payload only in both ways (the
// ICRC's 12 header bytes are left out). Run by sendpath.sh.
//   sendpath send ADDR PORT SENDS copy|iov SOURCE_BYTES
// The receiver's counterpart (recv), reading the coalesced datagrams
// (UDP_GRO) into a 64 KiB destination, as a posted receive buffer:
//   copy: as droce receives today: each datagram read into a frame buffer,
//         each segment's payload copied into the destination and its CRC
//         computed over the copy while it is in cache;
//   iov:  the kernel scatters each segment straight into place (an iovec per
//         header, payload slice and ICRC), the CRC a read-only pass over the
//         placed payload.
//   sendpath recv PORT BYTES copy|iov
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <rte_net_crc.h>
#include <rte_vect.h>

#include "udp_bench.h"

enum { kSegments = 15, kHeader = 12, kPayload = 4096, kIcrc = 4, kFrame = kHeader + kPayload + kIcrc, kPool = 256 };

static int Receive(int port, long long want, int iov_mode) {
  rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_512);
  rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
  int fd = socket(AF_INET6, SOCK_DGRAM, 0), one = 1, big = 8 << 20;
  setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
  if (bind(fd, (void*)&a, sizeof a) != 0) {
    perror("bind");
    return 1;
  }
  struct timeval tv = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  static uint8_t frames[kSegments * kFrame], headers[kSegments][kHeader];
  static uint32_t icrcs[kSegments];
  uint8_t* destination = aligned_alloc(4096, (size_t)kSegments * kPayload);
  struct iovec iov[kSegments * 3];
  for (int k = 0; k < kSegments; ++k) {
    iov[3 * k] = (struct iovec){headers[k], kHeader};
    iov[3 * k + 1] = (struct iovec){destination + (size_t)k * kPayload, kPayload};
    iov[3 * k + 2] = (struct iovec){&icrcs[k], kIcrc};
  }
  long long got = 0;
  uint32_t sum = 0;
  double u0 = 0, s0 = 0, u1, s1, t0 = 0;
  for (int first = 1; got < want;) {
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = kSegments * 3};
    ssize_t r = iov_mode ? recvmsg(fd, &m, 0) : recv(fd, frames, sizeof frames, 0);
    if (r < 0) break;
    if (first) {
      cpu_times(&u0, &s0);
      t0 = now();
      first = 0;
    }
    got += r;
    for (int k = 0; k < (int)(r / kFrame); ++k) {
      uint8_t* placed = destination + (size_t)k * kPayload;
      if (!iov_mode) memcpy(placed, frames + (size_t)k * kFrame + kHeader, kPayload);
      sum += rte_net_crc_calc(placed, kPayload, RTE_NET_CRC32_ETH);
    }
  }
  cpu_times(&u1, &s1);
  const double gb = (double)got * kPayload / kFrame / 1e9;
  printf("recv %s: %.3f GB of payload in %.3f s; receiver user %.3f s sys %.3f s -> %.3f s/GB (user %.3f, sys %.3f) [%u]\n",
         iov_mode ? "iov " : "copy", gb, now() - t0, u1 - u0, s1 - s0, (u1 - u0 + s1 - s0) / gb, (u1 - u0) / gb,
         (s1 - s0) / gb, sum & 1);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "recv") == 0) return Receive(atoi(argv[2]), atoll(argv[3]), !strcmp(argv[4], "iov"));
  if (argc != 7 || strcmp(argv[1], "send") != 0) {
    fprintf(stderr, "usage: sendpath send ADDR PORT SENDS copy|iov SOURCE_BYTES | recv PORT BYTES copy|iov\n");
    return 2;
  }
  const long long sends = atoll(argv[4]);
  const int iov_mode = strcmp(argv[5], "iov") == 0;
  const size_t source_bytes = (size_t)atoll(argv[6]);
  const size_t message = (size_t)kSegments * kPayload;
  if (source_bytes < message || source_bytes % message != 0) {
    fprintf(stderr, "SOURCE_BYTES: a multiple of %zu\n", message);
    return 2;
  }
  // Without EAL the SIMD width allowed is unset: the PCLMULQDQ CRC needs it.
  rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_512);
  rte_net_crc_set_alg(RTE_NET_CRC_AVX512);  // falls back to SSE4.2 where AVX-512 is missing
  int fd = socket(AF_INET6, SOCK_DGRAM, 0), big = 8 << 20, seg = kFrame;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(atoi(argv[3]))};
  inet_pton(AF_INET6, argv[2], &a.sin6_addr);
  if (connect(fd, (void*)&a, sizeof a) != 0) {
    perror("connect");
    return 1;
  }
  if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) {
    perror("UDP_SEGMENT");
    return 1;
  }
  // The program's registered memory, and the NIC's frame buffers (copy) or
  // its per-message header and ICRC slots (iov).
  uint8_t* source = aligned_alloc(4096, source_bytes);
  memset(source, 0x5a, source_bytes);
  uint8_t* frames = aligned_alloc(4096, (size_t)kPool * kSegments * kFrame);
  memset(frames, 0, (size_t)kPool * kSegments * kFrame);
  static uint8_t headers[kPool][kSegments][kHeader];
  static uint32_t icrcs[kPool][kSegments];
  double u0, s0, u1, s1;
  cpu_times(&u0, &s0);
  const double t0 = now();
  uint32_t sum = 0;
  for (long long i = 0; i < sends; ++i) {
    const uint8_t* payload = source + (size_t)(i % (long long)(source_bytes / message)) * message;
    const int slot = (int)(i % kPool);
    struct iovec iov[kSegments * 3];
    struct msghdr m = {.msg_iov = iov};
    if (iov_mode) {
      for (int k = 0; k < kSegments; ++k) {
        const uint8_t* p = payload + (size_t)k * kPayload;
        memset(headers[slot][k], k, kHeader);
        icrcs[slot][k] = rte_net_crc_calc(p, kPayload, RTE_NET_CRC32_ETH);
        iov[3 * k] = (struct iovec){headers[slot][k], kHeader};
        iov[3 * k + 1] = (struct iovec){(void*)p, kPayload};
        iov[3 * k + 2] = (struct iovec){&icrcs[slot][k], kIcrc};
      }
      m.msg_iovlen = kSegments * 3;
    } else {
      uint8_t* f = frames + (size_t)slot * kSegments * kFrame;
      for (int k = 0; k < kSegments; ++k) {
        uint8_t* frame = f + (size_t)k * kFrame;
        memset(frame, k, kHeader);
        memcpy(frame + kHeader, payload + (size_t)k * kPayload, kPayload);
        const uint32_t crc = rte_net_crc_calc(frame + kHeader, kPayload, RTE_NET_CRC32_ETH);
        memcpy(frame + kHeader + kPayload, &crc, kIcrc);
      }
      iov[0] = (struct iovec){f, (size_t)kSegments * kFrame};
      m.msg_iovlen = 1;
    }
    sum += iov_mode ? icrcs[slot][0] : frames[(size_t)slot * kSegments * kFrame + kHeader + kPayload];
    while (sendmsg(fd, &m, 0) < 0) {
      perror("sendmsg");
      return 1;
    }
  }
  cpu_times(&u1, &s1);
  const double gb = (double)sends * message / 1e9;
  printf("%s source %zu B: %lld sends, %.3f GB of payload in %.3f s; sender user %.3f s sys %.3f s -> %.3f s/GB "
         "(user %.3f, sys %.3f) [%u]\n",
         iov_mode ? "iov " : "copy", source_bytes, sends, gb, now() - t0, u1 - u0, s1 - s0,
         (u1 - u0 + s1 - s0) / gb, (u1 - u0) / gb, (s1 - s0) / gb, sum & 1);
  return 0;
}
