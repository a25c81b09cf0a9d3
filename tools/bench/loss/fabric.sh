#!/usr/bin/env bash
# The lossy-network experiment with real processes (issue 16): loss_verbs
# server on droce1 and client on droce0, two devices of the host fabric
# (droced switches every frame); the switch's drop injector loses frames on
# both devices' ports (`droce-ctl switch set DEV loss=P seed=S`: requests to
# droce1, ACK/NAKs to droce0). Per mode (gbn: the devices as they are; sr:
# `set selective_repeat=on` in both device files, skipped with a message
# when this tree does not know the key) and loss: 64 KiB WRITE goodput with
# WINDOW outstanding for SECONDS, then the completion times of WRITEs one at a
# time. Prints CSV rows (the columns of droce-loss-bench).
#   fabric.sh [MODES=gbn,sr] [LOSSES_PCT] [SECONDS=4] [TIMEOUT=14] [WINDOW=8]
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${DROCE_BUILD_DIR:-$root/build}
ctl=$build/apps/ctl/droce-ctl
lv=$build/tools/bench/loss/loss_verbs
modes=${1:-gbn,sr}; losses=${2:-0,0.01,0.1,0.5,1,2,5}; secs=${3:-4}; to=${4:-14}; window=${5:-8}
[ -x "$lv" ] || { echo "fabric.sh: $lv not built" >&2; exit 1; }
run=$(mktemp -d /tmp/droce-loss-fabric.XXXXXX)
export DROCE_RUN_DIR=$run
cleanup() {
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}
trap cleanup EXIT
# The switch's loss_dropped counters of both devices, summed.
loss_dropped() {
  "$ctl" daemon status 2>/dev/null | grep -o 'loss_dropped [0-9]*' | awk '{s += $2} END {print s + 0}'
}
echo "setup,mode,pattern,loss_pct,timeout,goodput_gbps,goodput_vs_lossless,p50_us,p99_us,p99_vs_lossless,max_us,retransmitted_pct,timeouts,dropped,status"
IFS=, read -ra mode_list <<<"$modes"
IFS=, read -ra loss_list <<<"$losses"
for mode in "${mode_list[@]}"; do
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  extra=()
  [ "$mode" = sr ] && extra=(set selective_repeat=on)
  if ! err=$("$ctl" link add droce0 ip 10.0.0.1 "${extra[@]}" 2>&1) ||
     ! err=$("$ctl" link add droce1 ip 10.0.0.2 "${extra[@]}" 2>&1); then
    echo "fabric.sh: mode $mode skipped: droce-ctl link add ${extra[*]}: $err" >&2
    for p in "${loss_list[@]}"; do echo "fabric,$mode,random,$p,$to,,,,,,,,,,unsupported"; done
    continue
  fi
  eval "$("$ctl" env)"
  base_g=""; base_p99=""
  for p in "${loss_list[@]}"; do
    prob=$(awk -v p="$p" 'BEGIN { printf "%.6f", p / 100 }')
    for d in droce0 droce1; do "$ctl" switch clear $d >/dev/null; "$ctl" switch set $d loss="$prob" seed=1 >/dev/null || exit 1; done
    d0=$(loss_dropped)
    dir=$(mktemp -d "$run/pair.XXXXXX")
    timeout $((secs * 4 + 60)) "$lv" server droce1 "$dir" >"$dir/server.log" 2>&1 &
    server=$!
    out=$(DROCE_STATS=1 timeout $((secs * 4 + 60)) "$lv" client droce0 "$dir" 100000000 "$window" 100000 "$to" "$secs" 2>"$dir/client.err")
    wait $server; server_rc=$?
    drops=$(($(loss_dropped) - d0))
    # The client's QP counters (DROCE_STATS=1): "qp N: tx T rx R retransmitted X timeouts Y ...".
    read -r tx retx tmo < <(sed -n 's/.* qp [0-9]*: tx \([0-9]*\) rx [0-9]* retransmitted \([0-9]*\) timeouts \([0-9]*\).*/\1 \2 \3/p' \
      "$dir/client.err" | head -1)
    kv() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$out"; }
    status=$(kv status); g=$(kv goodput_gbps); p99=$(kv p99_us)
    [ "$server_rc" = 0 ] || status="server:$(tail -1 "$dir/server.log" | tr ',' ';')"
    if [ "$status" != ok ] || [ -z "$g" ]; then
      echo "fabric,$mode,random,$p,$to,,,,,,,,,${drops:-},${status:-failed}"
      continue
    fi
    [ -n "$base_g" ] || { base_g=$g; base_p99=$p99; }
    awk -v m="$mode" -v p="$p" -v to="$to" -v g="$g" -v bg="$base_g" -v p50="$(kv p50_us)" -v p99="$p99" \
        -v bp="$base_p99" -v mx="$(kv max_us)" -v d="$drops" -v tx="${tx:-0}" -v r="${retx:-0}" -v tmo="$tmo" 'BEGIN {
      printf "fabric,%s,random,%g,%s,%.3f,%.3f,%.1f,%.1f,%.2f,%.1f,%s,%s,%d,ok\n", m, p, to, g, g / bg, p50, p99, p99 / bp,
        mx, (tx > r ? sprintf("%.2f", 100 * r / (tx - r)) : ""), tmo, d }'
  done
done
