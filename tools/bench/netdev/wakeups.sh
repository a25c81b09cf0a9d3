#!/usr/bin/env bash
# Sleeps and wake-ups of a netdev-bound device in events mode: 64 KiB
# ib_send_bw -e across two namespaces on a veth (MTU 9000, IPv6 GID, steering
# udp with udp_gso=on), each end under `perf stat -e context-switches,task-clock`
# (all threads: the program's and its droce-progress thread), ROUNDS rounds.
#   wakeups.sh [ROUNDS=3] [MESSAGES=20000]   (root; env SETTINGS="KEY=VALUE ..." more device settings)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../../../build}
ctl=$build/apps/ctl/droce-ctl
rounds=${1:-3} n=${2:-20000}
[ "$(id -u)" = 0 ] || { echo "wakeups.sh: needs root" >&2; exit 77; }
A=${NETNS_PREFIX:-wakeups}-$$-a B=${NETNS_PREFIX:-wakeups}-$$-b
tmp=$(mktemp -d /tmp/wakeups.XXXXXX)
# shellcheck source=udp_gso_pair.sh
. "$here/udp_gso_pair.sh"
cleanup() { udp_gso_pair_cleanup; rm -rf "$tmp"; }
trap cleanup EXIT
udp_gso_pair_up || exit 1
field() { grep ",$2" "$1" | cut -d, -f1; }  # perf stat -x, FILE EVENT
for r in $(seq "$rounds"); do
  on $A perf stat -x, -e context-switches,task-clock -o "$tmp/recv" \
    ib_send_bw -d droce0 -x 2 -m 4096 -s 65536 -e -n "$n" >"$tmp/recv.log" 2>&1 &
  s=$!
  sleep 1.5
  on $B perf stat -x, -e context-switches,task-clock -o "$tmp/send" \
    ib_send_bw -d droce0 -x 2 -m 4096 -s 65536 -e -n "$n" 10.0.0.1 >"$tmp/send.log" 2>&1
  wait $s
  bw=$(grep -A1 "#bytes" "$tmp/send.log" | tail -1 | awk '{print $4}')
  awk -v r="$r" -v n="$n" -v bw="$bw" -v rc="$(field "$tmp/recv" context-switches)" -v sc="$(field "$tmp/send" context-switches)" \
      -v rt="$(field "$tmp/recv" task-clock)" -v st="$(field "$tmp/send" task-clock)" 'BEGIN {
    printf "round %d: %s MB/s; receiver %d context switches (%.2f per message), %.0f ms CPU; sender %d (%.2f per message), %.0f ms CPU; %.2f s CPU per GB\n",
      r, bw, rc, rc / n, rt, sc, sc / n, st, (rt + st) / 1000 / (n * 65536 / 1e9) }'
done
