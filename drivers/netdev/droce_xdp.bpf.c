// SPDX-License-Identifier: BSD-3-Clause
// droced's XDP program for a netdev-bound droce device (doc/netdev.md).
//
// The kernel keeps its IP stack on the interface: only RoCEv2 frames for the
// interface's own addresses leave it here. A frame is redirected into the
// AF_XDP socket of its receive queue (xsks_map, filled by DPDK's net_af_xdp,
// which loads this object through its xdp_prog devarg, and by droced with
// the other queues' sockets) when it is
//   - IPv4 and not a fragment (offset 0, MF clear), or IPv6
//     whose next header is UDP,
//   - UDP to port 4791 (RoCEv2, IBTA annex A17),
//   - to one of the device's GIDs or to a multicast group its processes
//     joined (droce_addrs, droce_bpf.h), with a unicast destination MAC for
//     an address and a group MAC for a group (a broadcast frame, or a group
//     MAC with a unicast address, is the kernel's).
// Everything else passes to the kernel untouched (XDP_PASS). A RoCEv2 frame
// for us on a queue without a socket is dropped here, never handed to the
// kernel (which would answer ICMP port unreachable); droce_stats counts it.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "droce_bpf.h"

// RX queues served (netdev::kMaxXdpQueues, interface_port.h).
#define DROCE_MAX_QUEUES 64

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, DROCE_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

// Indices of droce_stats (drivers/netdev/xdp.h, XdpStat).
enum {
  STAT_REDIRECTED = 0,  // RoCEv2 for us, into the socket
  STAT_NO_SOCKET = 1,   // RoCEv2 for us on a queue without a socket: dropped
  STAT_PASSED = 2,      // everything else: to the kernel
  STAT_COUNT = 3,
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} droce_stats SEC(".maps");

static __always_inline int count(__u32 stat, int verdict) {
  __u64* c = bpf_map_lookup_elem(&droce_stats, &stat);
  if (c) *c += 1;
  return verdict;
}

SEC("xdp")
int droce_xdp(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return count(STAT_PASSED, XDP_PASS);
  const int group_mac = eth->h_dest[0] & 1;
  struct droce_gid dst = {};
  struct udphdr* udp;
  if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = (void*)(eth + 1);
    if ((void*)(ip + 1) > end) return count(STAT_PASSED, XDP_PASS);
    if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(0x3FFF)) != 0 || ip->ihl < 5) {
      return count(STAT_PASSED, XDP_PASS);
    }
    udp = (void*)ip + ip->ihl * 4;
    droce_gid_from_ipv4(&dst, &ip->daddr);
    if (group_mac != ((dst.raw[12] & 0xF0) == 0xE0)) return count(STAT_PASSED, XDP_PASS);
  } else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = (void*)(eth + 1);
    if ((void*)(ip6 + 1) > end) return count(STAT_PASSED, XDP_PASS);
    if (ip6->nexthdr != IPPROTO_UDP) return count(STAT_PASSED, XDP_PASS);
    udp = (void*)(ip6 + 1);
    __builtin_memcpy(dst.raw, &ip6->daddr, 16);
    if (group_mac != (dst.raw[0] == 0xFF)) return count(STAT_PASSED, XDP_PASS);
  } else {
    return count(STAT_PASSED, XDP_PASS);
  }
  if ((void*)(udp + 1) > end || udp->dest != bpf_htons(DROCE_ROCEV2_PORT)) return count(STAT_PASSED, XDP_PASS);
  if (!bpf_map_lookup_elem(&droce_addrs, &dst)) return count(STAT_PASSED, XDP_PASS);
  __u32 queue = ctx->rx_queue_index;
  if (!bpf_map_lookup_elem(&xsks_map, &queue)) return count(STAT_NO_SOCKET, XDP_DROP);
  count(STAT_REDIRECTED, 0);
  return bpf_redirect_map(&xsks_map, queue, XDP_DROP);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
