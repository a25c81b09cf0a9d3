#!/usr/bin/env bash
# The fabric soak (doc/droced.md "Soak"): NPROC processes on ONE fabric device (droce0),
# each with LINKS RC QPs to every other process (all-to-all), WRITE + SEND
# traffic for SECONDS with every byte verified and every message accounted
# for (tests/fabric/soak.c). Passes when every worker exits 0, the messages
# sent over all processes equal those received, and droced is still running
# with no frame for an unowned QPN and no port tail drop.
#   soak.sh [NPROC=4] [QPS_PER_PROCESS=16] [SECONDS=20]
# QPS_PER_PROCESS is rounded up to a multiple of NPROC-1 (LINKS per peer).
# The full run of the issue: soak.sh 8 64 600.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
ctl="$build/apps/ctl/droce-ctl"
soak=${SOAK:-$build/tests/fabric/soak}
nproc=${1:-4}; qps=${2:-16}; secs=${3:-20}
mode=${SOAK_MODE:-events}
links=$(( (qps + nproc - 2) / (nproc - 1) ))
run=$(mktemp -d /tmp/droce-soak.XXXXXX)
export DROCE_RUN_DIR=$run
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}
trap cleanup EXIT
"$ctl" link add droce0 ip 10.0.0.1 >/dev/null || exit 1
eval "$("$ctl" env)"
mkdir -p "$run/meet"
echo "soak: $nproc processes x $(( links * (nproc - 1) )) QPs ($links per peer) on droce0, ${secs} s, $mode"
start=$(date +%s.%N)
for ((i = 0; i < nproc; i++)); do
  timeout $((secs + 300)) "$soak" droce0 "$run/meet" $i "$nproc" "$links" "$secs" "$mode" >"$run/w$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < nproc; i++)); do
  wait "${pids[$i]}"; rc=$?
  if [ $rc -ne 0 ]; then
    echo "worker $i failed ($rc):"; tail -5 "$run/w$i.log"; failed=1
  fi
done
pids=()
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
cat "$run"/w*.log | grep '^soak '
read -r sent received bytes < <(cat "$run"/w*.log | awk '/^soak / { s += $6; r += $8; b += $10 } END { print s + 0, r + 0, b + 0 }')
echo "total: sent $sent received $received messages, $bytes bytes verified, ${elapsed} s wall"
status=$("$ctl" daemon status 2>&1)
echo "$status" | grep -E 'device droce0|switch:'
if ! echo "$status" | grep -q 'device droce0'; then echo "FAIL: droced is not answering"; failed=1; fi
if [ "$sent" != "$received" ] || [ "$sent" = 0 ]; then echo "FAIL: sent $sent != received $received"; failed=1; fi
if ! echo "$status" | grep -q 'rx_no_owner 0 '; then echo "FAIL: frames for QPNs no process owns"; failed=1; fi
if grep -q 'tx_dropped [1-9]' "$run/droced.log"; then
  echo "note: the switch tail-dropped frames to a process (RC retransmitted them):"; grep 'tx_dropped [1-9]' "$run/droced.log"
fi
[ $failed = 0 ] && echo "PASS soak" || { echo "FAIL soak"; tail -20 "$run/droced.log"; }
exit $failed
