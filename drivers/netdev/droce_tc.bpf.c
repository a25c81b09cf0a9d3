// SPDX-License-Identifier: BSD-3-Clause
// droced's TC ingress program for a netdev-bound droce device steered to
// its processes' own UDP sockets (`steering udp`, doc/netdev.md).
//
// Each process of the device holds a UDP socket of its own, on a port the
// kernel gave it (droced opened it, keeps a duplicate and handed it over).
// A RoCEv2 packet for one of the device's GIDs (droce_addrs) arrives at UDP port
// 4791; this program reads the destination QP of its BTH, finds the process
// whose QPN range holds it (droce_ports: QPN / 1024 -> port, filled by
// droced) and rewrites the UDP destination port to that process's socket
// (the UDP checksum follows). The kernel's own socket lookup then delivers
// it there: no process can receive another's frames, whatever it does with
// its socket, as the steering is this program's and droced's alone. QP 1
// (the CM), QPNs nobody owns and anything this program does not parse stay
// at port 4791, where droced's socket takes them.
//
// The receiver rebuilds the IP header from what its socket tells it; an
// IPv4 header's identification and flags are not among that, so when they
// are not (0, DF) - what droce's own frames carry - they go into the
// packet's mark (bit 31, flags << 16, identification), which the socket
// delivers (SO_RCVMARK): the ICRC covers them.
//
// Everything else passes untouched; so does every packet (TCX_NEXT: other
// programs on the interface run after this one).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "droce_bpf.h"

#define DROCE_QPN_SLOTS 16384  // 2^24 QPNs / 1024 per process
#define DROCE_QPN_SLOT_SHIFT 10
#define DROCE_MARK_VALID 0x80000000u

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, DROCE_QPN_SLOTS);
  __type(key, __u32);
  __type(value, __u32);  // the owner's UDP port, 0: none (droced's 4791)
} droce_ports SEC(".maps");

// Indices of droce_tc_stats (drivers/netdev/tc.h, TcStats).
enum {
  STAT_STEERED = 0,    // to a process's socket
  STAT_TO_DAEMON = 1,  // RoCEv2 for us left at 4791: QP 1, no owner
  STAT_MARKED = 2,     // IPv4 identification/flags carried in the mark
  STAT_COUNT = 3,
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} droce_tc_stats SEC(".maps");

static __always_inline void count(__u32 stat) {
  __u64* c = bpf_map_lookup_elem(&droce_tc_stats, &stat);
  if (c) *c += 1;
}

SEC("tc")
int droce_tc(struct __sk_buff* skb) {
  // A frame that had an 802.1Q tag (the kernel moved it into the skb's
  // metadata before this program runs) belongs to that VLAN's interface,
  // not to this one: never ours, whatever its address.
  if (skb->pkt_type != PACKET_HOST || skb->vlan_present) return TC_ACT_UNSPEC;
  struct droce_gid dst = {};
  __u32 udp_off;
  __u32 mark = 0;
  if (skb->protocol == bpf_htons(ETH_P_IP)) {
    struct iphdr ip;
    if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip, sizeof ip) < 0) return TC_ACT_UNSPEC;
    if (ip.protocol != IPPROTO_UDP || ip.ihl != 5 || (ip.frag_off & bpf_htons(0x3FFF)) != 0) return TC_ACT_UNSPEC;
    droce_gid_from_ipv4(&dst, &ip.daddr);
    udp_off = ETH_HLEN + sizeof ip;
    if (ip.id != 0 || ip.frag_off != bpf_htons(0x4000)) {
      mark = DROCE_MARK_VALID | ((__u32)(bpf_ntohs(ip.frag_off) >> 13) << 16) | bpf_ntohs(ip.id);
    }
  } else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr ip6;
    if (bpf_skb_load_bytes(skb, ETH_HLEN, &ip6, sizeof ip6) < 0) return TC_ACT_UNSPEC;
    if (ip6.nexthdr != IPPROTO_UDP) return TC_ACT_UNSPEC;
    __builtin_memcpy(dst.raw, &ip6.daddr, 16);
    udp_off = ETH_HLEN + sizeof ip6;
  } else {
    return TC_ACT_UNSPEC;
  }
  struct {
    struct udphdr udp;
    __u8 bth[8];
  } h;
  if (bpf_skb_load_bytes(skb, udp_off, &h, sizeof h) < 0) return TC_ACT_UNSPEC;
  if (h.udp.dest != bpf_htons(DROCE_ROCEV2_PORT)) return TC_ACT_UNSPEC;
  if (!bpf_map_lookup_elem(&droce_addrs, &dst)) return TC_ACT_UNSPEC;
  if (mark != 0) {
    skb->mark = mark;
    count(STAT_MARKED);
  }
  const __u32 qpn = ((__u32)h.bth[5] << 16) | ((__u32)h.bth[6] << 8) | h.bth[7];
  const __u32 slot = qpn >> DROCE_QPN_SLOT_SHIFT;
  const __u32* port = bpf_map_lookup_elem(&droce_ports, &slot);
  if (qpn <= 1 || !port || *port == 0 || *port > 0xFFFF) {
    count(STAT_TO_DAEMON);
    return TC_ACT_UNSPEC;
  }
  const __be16 to = bpf_htons((__u16)*port);
  // The checksum first (a zero IPv4 checksum stays zero), then the port.
  bpf_l4_csum_replace(skb, udp_off + offsetof(struct udphdr, check), h.udp.dest, to,
                      BPF_F_MARK_MANGLED_0 | sizeof(to));
  bpf_skb_store_bytes(skb, udp_off + offsetof(struct udphdr, dest), &to, sizeof to, 0);
  count(STAT_STEERED);
  return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
