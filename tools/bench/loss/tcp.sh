#!/usr/bin/env bash
# Kernel TCP through the same random loss (the experiment's baseline, issue 16):
# two network namespaces joined by a veth pair, loss on each end's ingress by
# nftables (`numgen random mod 1000000 < N drop` in a netdev ingress chain:
# the frame is lost on the wire, not refused to the sender's stack), both
# directions. tc netem is not available here, so no added delay: the veth's
# RTT is a few microseconds. MTU 1084 (a 1024-byte RoCE payload's IP packet),
# TSO/GSO/GRO off so that a loss is one wire-sized packet. Goodput: iperf3
# (-t DURATION); completion time of a 64 KiB transfer: tcp_rpc.py (send 64 KiB,
# wait for a one-byte answer). Needs root, nft, iperf3. Prints CSV rows.
#   tcp.sh [LOSSES_PCT (comma list)] [DURATION_S] [RPC_COUNT]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
losses=${1:-0,0.01,0.1,0.5,1,2,5}
dur=${2:-5}
count=${3:-2000}
for t in nft iperf3 ip ethtool; do
  command -v $t >/dev/null || { echo "tcp.sh: $t not found (apt-get install nftables iperf3 ethtool)" >&2; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "tcp.sh: needs root (network namespaces)" >&2; exit 77; }
a=dlossA$$ b=dlossB$$
pidfile=$(mktemp /tmp/droce-loss-iperf3.XXXXXX)
cleanup() {
  [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  rm -f "$pidfile"
  ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true
}
trap cleanup EXIT
ip netns add $a; ip netns add $b
ip link add vla$$ type veth peer name vlb$$
ip link set vla$$ netns $a; ip link set vlb$$ netns $b
for ns in $a $b; do
  dev=$([ $ns = $a ] && echo vla$$ || echo vlb$$)
  ip -n $ns link set lo up
  ip -n $ns link set $dev mtu 1084 up
  ip netns exec $ns ethtool -K $dev tso off gso off gro off >/dev/null 2>&1 || true
  ip netns exec $ns nft add table netdev loss
  ip netns exec $ns nft add chain netdev loss in "{ type filter hook ingress device $dev priority 0; }"
done
ip -n $a addr add 10.77.0.1/24 dev vla$$
ip -n $b addr add 10.77.0.2/24 dev vlb$$
set_loss() {  # percent
  local n; n=$(awk -v p="$1" 'BEGIN { printf "%d", p * 10000 + 0.5 }')  # per million
  for ns in $a $b; do
    ip netns exec $ns nft flush chain netdev loss in
    [ "$n" -gt 0 ] && ip netns exec $ns nft add rule netdev loss in numgen random mod 1000000 '<' "$n" counter drop
  done
  return 0
}
dropped() {
  local sum=0 v
  for ns in $a $b; do
    v=$(ip netns exec $ns nft list chain netdev loss in | sed -n 's/.*counter packets \([0-9]*\).*/\1/p')
    sum=$((sum + ${v:-0}))
  done
  echo $sum
}
ip netns exec $b iperf3 -s -D -p 5201 --logfile /dev/null --pidfile "$pidfile"
ip netns exec $b python3 "$here/tcp_rpc.py" server 5202 65536 &
rpc_server=$!
sleep 0.5
echo "setup,mode,pattern,loss_pct,timeout,goodput_gbps,goodput_vs_lossless,p50_us,p99_us,p99_vs_lossless,max_us,retransmitted_pct,timeouts,dropped,status"
base_g=""; base_p99=""
IFS=, read -ra list <<<"$losses"
for p in "${list[@]}"; do
  set_loss "$p"
  json=$(ip netns exec $a iperf3 -c 10.77.0.2 -p 5201 -t "$dur" -J)
  read -r g retx sent < <(python3 -c '
import json, sys
j = json.load(sys.stdin)
e = j["end"]
print(e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0),
      e["sum_sent"]["bytes"])' <<<"$json")
  drops=$(dropped)
  set_loss "$p"  # resets the counters
  # One RPC connection per loss point (the server serves one at a time).
  [ $p = "${list[0]}" ] || { ip netns exec $b python3 "$here/tcp_rpc.py" server 5202 65536 & rpc_server=$!; sleep 0.3; }
  rpc=$(ip netns exec $a python3 "$here/tcp_rpc.py" client 10.77.0.2 5202 65536 "$count")
  wait $rpc_server 2>/dev/null || true
  p50=${rpc#p50_us=}; p50=${p50%% *}
  p99=${rpc#*p99_us=}; p99=${p99%% *}
  mx=${rpc#*max_us=}
  [ -n "$base_g" ] || { base_g=$g; base_p99=$p99; }
  # retransmitted_pct: segments retransmitted per segment of 1032 payload bytes sent.
  awk -v p="$p" -v g="$g" -v bg="$base_g" -v p50="$p50" -v p99="$p99" -v bp="$base_p99" -v mx="$mx" \
      -v r="$retx" -v s="$sent" -v d="$drops" 'BEGIN {
    printf "tcp,tcp,random,%g,,%.3f,%.3f,%.1f,%.1f,%.2f,%.1f,%.2f,,%d,ok\n", p, g, g / bg, p50, p99, p99 / bp, mx,
      100 * r / (s / 1032), d }'
done
