#!/usr/bin/env bash
# The payload passes with steering udp + udp_gso (sendpath.c), alternating in
# the same run across two namespaces on a veth (MTU 9000, IPv6):
#   - the sender: frames built by copy (droce today) against the kernel
#     copying the payload straight from the registered memory (an iovec per
#     segment piece, the ICRC computed read-only), from a source region of
#     60 KiB (one message, in cache, as perftest's buffer) and of 60 MiB (out
#     of cache); the receiver copies;
#   - the receiver: datagrams read into frame buffers and copied into place
#     (droce today) against the kernel scattering each segment's payload into
#     place (the ICRC read-only over it); the sender copies, from 60 KiB.
#   sendpath.sh [ROUNDS=3] [SENDS=20000]   (root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-3} sends=${2:-20000}
[ "$(id -u)" = 0 ] || { echo "sendpath.sh: needs root" >&2; exit 77; }
tmp=$(mktemp -d /tmp/sendpath.XXXXXX)
A=${NETNS_PREFIX:-sendpath}-$$-a B=${NETNS_PREFIX:-sendpath}-$$-b
cleanup() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
# shellcheck disable=SC2046
cc -O2 -DALLOW_EXPERIMENTAL_API -o "$tmp/sendpath" "$here/sendpath.c" $(pkg-config --cflags --libs libdpdk)
ip netns add $A; ip netns add $B
ip -n $A link add nd0 type veth peer name nd0 netns $B
for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set nd0 mtu 9000 up; done
ip -n $A addr add fd00::1/64 dev nd0 nodad; ip -n $B addr add fd00::2/64 dev nd0 nodad
sleep 1
message=$((15 * 4112))
one() {  # SEND_MODE SOURCE_BYTES RECV_MODE
  ip netns exec $B "$tmp/sendpath" recv 9999 $((sends * message)) "$3" >"$tmp/recv" & local r=$!
  sleep 0.3
  ip netns exec $A "$tmp/sendpath" send fd00::2 9999 "$sends" "$1" "$2"
  wait $r
  sed 's/^/  /' "$tmp/recv"
}
for _ in $(seq "$rounds"); do
  for src in 61440 62914560; do
    for mode in copy iov; do one $mode $src copy; done
  done
  for mode in copy iov; do one copy 61440 $mode; done
done
