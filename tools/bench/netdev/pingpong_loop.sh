#!/usr/bin/env bash
# The first ibv_rc_pingpong on a fresh 2-host cluster (droce-cluster), again
# and again, with each steering in turn; a failed run keeps both sides'
# output (DROCE_STATS=1), daemon status, droced logs and a capture of the
# bridge (tcpdump) in OUT/fail-TIME-STEERING/. Root only.
#   pingpong_loop.sh [PAIRS=10] [ITERS=2000]
#   env: STEERINGS="udp xdp", HOGS=0 (CPU hogs started for the run), OUT=/tmp/pingpong_loop,
#   NAME=pploop (the cluster's name), TIMEOUT=30 (per run, seconds)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export DROCE_CTL=${DROCE_CTL:-${BUILD:-$root/build}/apps/ctl/droce-ctl}
cl=$root/tools/droce-cluster
pairs=${1:-10} iters=${2:-2000}
name=${NAME:-pploop} out=${OUT:-/tmp/pingpong_loop} t=${TIMEOUT:-30}
[ "$(id -u)" = 0 ] || { echo "pingpong_loop.sh: needs root" >&2; exit 77; }
mkdir -p "$out"
hogs=()
for _ in $(seq "${HOGS:-0}"); do (while :; do :; done) & hogs+=($!); done
cleanup() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; "$cl" down --name "$name" >/dev/null 2>&1; }
trap cleanup EXIT
declare -A pass fail slow
for i in $(seq "$pairs"); do
  for st in ${STEERINGS:-udp xdp}; do
    "$cl" up 2 --name "$name" --steering "$st" >/dev/null || { "$cl" down --name "$name" >/dev/null 2>&1; continue; }
    ip netns exec "$name-sw" tcpdump -i br0 -w "$out/cap.pcap" -U udp or arp >/dev/null 2>&1 &
    local_td=$!
    "$cl" run --name "$name" 1 env DROCE_STATS=1 timeout "$t" ibv_rc_pingpong -d droce0 -g 1 -n "$iters" >"$out/s.out" 2>&1 &
    s=$!
    for _ in $(seq 200); do ip netns exec "$name-1" ss -Hltn "sport = :18515" | grep -q . && break; sleep 0.05; done
    "$cl" run --name "$name" 2 env DROCE_STATS=1 timeout "$t" ibv_rc_pingpong -d droce0 -g 1 -n "$iters" 10.0.0.1 >"$out/c.out" 2>&1
    rc=$?
    wait $s; rs=$?
    kill $local_td 2>/dev/null; wait $local_td 2>/dev/null
    if [ $rc = 0 ] && [ $rs = 0 ]; then
      pass[$st]=$(( ${pass[$st]:-0} + 1 ))
    else
      d=$out/fail-$(date +%H%M%S)-$st; mkdir -p "$d"
      cp "$out/s.out" "$out/c.out" "$out/cap.pcap" "$d/"
      for k in 1 2; do
        ip netns exec "$name-$k" "$DROCE_CTL" daemon status >"$d/status$k.txt" 2>&1
        cp "/run/droce/netns/$name-$k/droced.log" "$d/droced$k.log" 2>/dev/null
      done
      if grep -q "retry counter exceeded" "$d/s.out" "$d/c.out"; then
        fail[$st]=$(( ${fail[$st]:-0} + 1 )); echo "$st: retry counter exceeded -> $d"
      else
        slow[$st]=$(( ${slow[$st]:-0} + 1 )); echo "$st: not done in ${t} s -> $d"
      fi
    fi
    "$cl" down --name "$name" >/dev/null
  done
done
for st in ${STEERINGS:-udp xdp}; do
  echo "$st: passed ${pass[$st]:-0}, retry counter exceeded ${fail[$st]:-0}, not done in ${t} s ${slow[$st]:-0}"
done
