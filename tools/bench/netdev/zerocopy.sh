#!/usr/bin/env bash
# MSG_ZEROCOPY against copied UDP_SEGMENT sends across two namespaces on a
# veth (MTU 9000, IPv6), alternating, ROUNDS each (zerocopy.c).
#   zerocopy.sh [ROUNDS=3] [SENDS=20000]   (root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3} sends=${2:-20000}
[ "$(id -u)" = 0 ] || { echo "zerocopy.sh: needs root" >&2; exit 77; }
tmp=$(mktemp -d /tmp/zerocopy.XXXXXX)
A=${NETNS_PREFIX:-zerocopy}-$$-a B=${NETNS_PREFIX:-zerocopy}-$$-b
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
cc -O2 -o "$tmp/zerocopy" "$here/zerocopy.c"
ip netns add $A; ip netns add $B
ip -n $A link add nd0 type veth peer name nd0 netns $B
for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set nd0 mtu 9000 up; done
ip -n $A addr add fd00::1/64 dev nd0 nodad; ip -n $B addr add fd00::2/64 dev nd0 nodad
sleep 1
one() {  # ZEROCOPY SIZE SEGMENT
  ip netns exec $B "$tmp/zerocopy" recv 9999 $((sends * $2)) >"$tmp/recv" & local r=$!
  sleep 0.3
  ip netns exec $A "$tmp/zerocopy" send fd00::2 9999 "$sends" "$2" "$3" "$1"
  wait $r
}
for _ in $(seq "$rounds"); do
  for zc in 0 1; do one $zc 61680 4112; done
done
for zc in 0 1; do one $zc 4112 0; done   # one frame per send, no segmentation
