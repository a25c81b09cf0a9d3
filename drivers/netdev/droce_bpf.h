// SPDX-License-Identifier: BSD-3-Clause
// What droced's two steering programs share (droce_xdp.bpf.c: XDP into
// droced's AF_XDP socket; droce_tc.bpf.c: TC to the processes' UDP sockets):
// RoCEv2's port and the droce_addrs map of the device's GIDs, which droced
// keeps equal to its GID table (drivers/netdev/xdp.cc SyncAddressMap, for
// either program's map). Each program object has its own instance.
#ifndef DROCE_DRIVERS_NETDEV_DROCE_BPF_H_
#define DROCE_DRIVERS_NETDEV_DROCE_BPF_H_

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define DROCE_ROCEV2_PORT 4791
#define DROCE_MAX_ADDRS 64

// A GID as the map's key: an IPv6 address, IPv4 as ::ffff:a.b.c.d.
struct droce_gid {
  __u8 raw[16];
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, DROCE_MAX_ADDRS);
  __type(key, struct droce_gid);
  __type(value, __u32);
} droce_addrs SEC(".maps");

// *g = the IPv4 address `daddr` (network order, 4 bytes at `daddr`) as a GID.
static __always_inline void droce_gid_from_ipv4(struct droce_gid* g, const void* daddr) {
  __builtin_memset(g, 0, sizeof *g);
  g->raw[10] = 0xFF;
  g->raw[11] = 0xFF;
  __builtin_memcpy(&g->raw[12], daddr, 4);
}

#endif  // DROCE_DRIVERS_NETDEV_DROCE_BPF_H_
