#!/usr/bin/env bash
# Kernel TCP through the same random loss (the experiment's baseline,
# doc/loss-experiment.md): two network namespaces joined by a veth pair,
# loss on each end's ingress by nftables (`numgen random mod 1000000 < N drop` in a netdev ingress chain:
# the frame is lost on the wire, not refused to the sender's stack), both
# directions. tc netem is not available here, so no added delay: the veth's
# RTT is a few microseconds. MTU 1084 (a 1024-byte RoCE payload's IP packet),
# TSO/GSO/GRO off so that a loss is one wire-sized packet. Goodput: iperf3
# (-t DURATION); completion time of a 64 KiB transfer: tcp_rpc.py (send 64 KiB,
# wait for a one-byte answer). Needs root, nft, iperf3. Prints CSV rows.
# ROUNDS passes over the loss list; each row is the median over the rounds.
#   tcp.sh [LOSSES_PCT (comma list)] [DURATION_S=5] [RPC_COUNT=2000] [ROUNDS=1]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
losses=${1:-0,0.01,0.1,0.5,1,2,5}
dur=${2:-5}
count=${3:-2000}
rounds=${4:-1}
for t in nft iperf3 ip ethtool; do
  command -v $t >/dev/null || { echo "tcp.sh: $t not found (apt-get install nftables iperf3 ethtool)" >&2; exit 77; }
done
[ "$(id -u)" = 0 ] || { echo "tcp.sh: needs root (network namespaces)" >&2; exit 77; }
a=dlossA$$ b=dlossB$$
pidfile=$(mktemp /tmp/droce-loss-iperf3.XXXXXX)
rpc_server=
cleanup() {
  set +e  # a kill of a process that already left must not skip the rest
  [ -n "$rpc_server" ] && kill "$rpc_server" 2>/dev/null
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
IFS=, read -ra list <<<"$losses"
raw=$(mktemp /tmp/droce-loss-tcp.XXXXXX)
first=1
for ((r = 1; r <= rounds; r++)); do
  for p in "${list[@]}"; do
    set_loss "$p"
    json=$(ip netns exec $a iperf3 -c 10.77.0.2 -p 5201 -t "$dur" -J)
    read -r g retx sent < <(python3 -c '
import json, sys
e = json.load(sys.stdin)["end"]
print(e["sum_received"]["bits_per_second"] / 1e9, e["sum_sent"].get("retransmits", 0), e["sum_sent"]["bytes"])' <<<"$json")
    drops=$(dropped)
    set_loss "$p"  # resets the counters
    # One RPC connection per measurement (the server serves one, then exits).
    [ $first = 1 ] || { ip netns exec $b python3 "$here/tcp_rpc.py" server 5202 65536 & rpc_server=$!; sleep 0.3; }
    first=0
    rpc=$(ip netns exec $a python3 "$here/tcp_rpc.py" client 10.77.0.2 5202 65536 "$count")
    wait $rpc_server 2>/dev/null || true
    p50=${rpc#p50_us=}; p50=${p50%% *}
    p99=${rpc#*p99_us=}; p99=${p99%% *}
    mx=${rpc#*max_us=}
    echo "$p $g $p50 $p99 $mx $retx $sent $drops" >>"$raw"
    echo "tcp.sh: round $r loss $p%: $g Gb/s p99 $p99 us" >&2
  done
done
# Medians over the rounds; retransmitted_pct: segments retransmitted per
# 1032-byte segment sent (iperf3's counters), dropped: nftables' drops.
python3 - "$raw" "${list[@]}" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[0], []).append([float(x) for x in f[1:]])
base = None
for p in sys.argv[2:]:
    rs = runs[p]
    med = lambda i: statistics.median(r[i] for r in rs)
    g, p50, p99, mx = med(0), med(1), med(2), med(3)
    retx, sent, drops = sum(r[4] for r in rs), sum(r[5] for r in rs), sum(r[6] for r in rs)
    if base is None:
        base = (g, p99)
    print(f"tcp,tcp,random,{p},,{g:.3f},{g / base[0]:.3f},{p50:.1f},{p99:.1f},{p99 / base[1]:.2f},{mx:.1f},"
          f"{100 * retx / (sent / 1032):.2f},,{int(drops)},ok")
PY
rm -f "$raw"
