#!/usr/bin/env bash
# The lossy-network experiment with real processes (doc/loss-experiment.md): loss_verbs
# server on droce1 and client on droce0, two devices of the host fabric
# (droced switches every frame); the switch's drop injector loses frames on
# both devices' ports (`droce-ctl switch set DEV loss=P seed=S`: requests to
# droce1, ACK/NAKs to droce0). Per mode (gbn: the devices as they are; sr:
# `set selective_repeat=on` in both device files, skipped with a message
# when this tree does not know the key) and loss: 64 KiB WRITE goodput with
# WINDOW outstanding for SECONDS, then the completion times of WRITEs one at a
# time for SECONDS. The host is shared and noisy: ROUNDS passes over the loss
# list, alternating, and each row is the median over the rounds (goodput,
# p50, p99, max; counters summed). Prints CSV rows (droce-loss-bench's columns).
# LV_COUNT=0 or LV_LAT=0 runs one phase alone (its counters alone); with
# KEEP_LOGS=1 each measurement's client QP line (every counter) is kept in
# $DROCE_RUN_DIR/qplines (the run directory is printed at the end).
#   fabric.sh [MODES=gbn,sr] [LOSSES_PCT] [SECONDS=3] [TIMEOUT=14] [WINDOW=8] [ROUNDS=3]
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=${DROCE_BUILD_DIR:-$root/build}
ctl=$build/apps/ctl/droce-ctl
lv=$build/tools/bench/loss/loss_verbs
modes=${1:-gbn,sr}; losses=${2:-0,0.01,0.1,0.5,1,2,5}; secs=${3:-3}; to=${4:-14}; window=${5:-8}; rounds=${6:-3}
[ -x "$lv" ] || { echo "fabric.sh: $lv not built" >&2; exit 1; }
run=$(mktemp -d /tmp/droce-loss-fabric.XXXXXX)
# One run directory (so one daemon, started afresh) per mode.
stop_fabric() {
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
}
cur=  # the run directory in use (never the caller's DROCE_RUN_DIR)
cleanup() {
  [ -n "$cur" ] && stop_fabric
  if [ "${KEEP_LOGS:-0}" = 1 ]; then echo "fabric.sh: logs kept in $run" >&2; else rm -rf "$run"; fi
}
trap cleanup EXIT
# The switch's loss_dropped counters of both devices, summed.
loss_dropped() {
  "$ctl" daemon status 2>/dev/null | grep -o 'loss_dropped [0-9]*' | awk '{s += $2} END {print s + 0}'
}
# One measurement: "goodput p50 p99 max tx retransmitted timeouts dropped status".
measure() {  # loss_pct
  local prob; prob=$(awk -v p="$1" 'BEGIN { printf "%.6f", p / 100 }')
  for d in droce0 droce1; do
    "$ctl" switch clear $d >/dev/null; "$ctl" switch set $d loss="$prob" seed=1 >/dev/null || return 1
  done
  local d0; d0=$(loss_dropped)
  local dir; dir=$(mktemp -d "$DROCE_RUN_DIR/pair.XXXXXX")
  DROCE_STATS=${KEEP_LOGS:-0} timeout $((secs * 4 + 60)) "$lv" server droce1 "$dir" >"$dir/server.log" 2>&1 &
  local server=$!
  local out
  out=$(DROCE_STATS=1 timeout $((secs * 4 + 60)) "$lv" client droce0 "$dir" "${LV_COUNT:-100000000}" "$window" "${LV_LAT:-100000}" "$to" "$secs" \
    2>"$dir/client.err")
  wait $server; local server_rc=$?
  local drops=$(($(loss_dropped) - d0))
  # The client's QP counters (DROCE_STATS=1): "qp N: tx T rx R retransmitted X timeouts Y ...".
  local tx retx tmo
  read -r tx retx tmo < <(sed -n 's/.* qp [0-9]*: tx \([0-9]*\) rx [0-9]* retransmitted \([0-9]*\) timeouts \([0-9]*\).*/\1 \2 \3/p' \
    "$dir/client.err" | head -1)
  kv() { sed -n "s/.*\\b$1=\\([^ ]*\\).*/\\1/p" <<<"$out"; }
  local status; status=$(sed -n 's/.*status=//p' <<<"$out" | tr ' ,' '_;')
  [ "$server_rc" = 0 ] || status="server:$(tail -1 "$dir/server.log" | tr ', ' ';_')"
  [ -n "$status" ] || status=failed
  if [ "${KEEP_LOGS:-0}" = 1 ]; then
    grep ' qp [0-9]*\( sr\)\?:' "$dir/client.err" | sed "s/^/$1 /" >>"$DROCE_RUN_DIR/qplines"
    # Both devices' counters (RX bursts, the SR repair times folded from the destroyed QPs).
    grep ' device:' "$dir/client.err" | sed "s/^/$1 client /" >>"$DROCE_RUN_DIR/devlines"
    grep ' device:' "$dir/server.log" | sed "s/^/$1 server /" >>"$DROCE_RUN_DIR/devlines"
  fi
  echo "$(kv goodput_gbps) $(kv p50_us) $(kv p99_us) $(kv max_us) ${tx:-0} ${retx:-0} ${tmo:-0} $drops $status"
}
echo "setup,mode,pattern,loss_pct,timeout,goodput_gbps,goodput_vs_lossless,p50_us,p99_us,p99_vs_lossless,max_us,retransmitted_pct,timeouts,dropped,status"
IFS=, read -ra mode_list <<<"$modes"
IFS=, read -ra loss_list <<<"$losses"
# Every point through droced's switch: with its direct rings a loss-free pair
# bypasses the daemon (a knob takes the rings down), so the 0 % row would
# measure another path than the lossy ones.
export DROCED_DIRECT=0
for mode in "${mode_list[@]}"; do
  [ -n "$cur" ] && stop_fabric
  cur=$run/$mode
  export DROCE_RUN_DIR=$cur
  mkdir -p "$DROCE_RUN_DIR"
  extra=()
  # SR_SET: more device keys for the sr mode, e.g. SR_SET="sr_rto_min_us=100".
  extra=()
  if [ "$mode" = sr ]; then
    extra=(set selective_repeat=on)
    for kv in ${SR_SET:-}; do extra+=(set "$kv"); done
  fi
  if ! err=$("$ctl" link add droce0 ip 10.0.0.1 "${extra[@]}" 2>&1) ||
     ! err=$("$ctl" link add droce1 ip 10.0.0.2 "${extra[@]}" 2>&1); then
    echo "fabric.sh: mode $mode skipped: droce-ctl link add ${extra[*]}: $err" >&2
    for p in "${loss_list[@]}"; do echo "fabric,$mode,random,$p,$to,,,,,,,,,,unsupported"; done
    continue
  fi
  eval "$("$ctl" env)"
  raw=$DROCE_RUN_DIR/raw
  : >"$raw"
  for ((r = 1; r <= rounds; r++)); do
    for p in "${loss_list[@]}"; do
      m=$(measure "$p")
      echo "$p $m" >>"$raw"
      echo "fabric.sh: $mode round $r loss $p%: $m" >&2
    done
  done
  python3 - "$raw" "$mode" "$to" "${loss_list[@]}" <<'PY'
import statistics, sys
raw, mode, timeout, losses = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {}
for line in open(raw):
    f = line.split()
    runs.setdefault(f[0], []).append(f[1:])
base = None
for p in losses:
    ok = [r for r in runs.get(p, []) if r[-1] == "ok" and r[0]]
    bad = [r[-1] for r in runs.get(p, []) if r[-1] != "ok"]
    if not ok:
        print(f"fabric,{mode},random,{p},{timeout},,,,,,,,,,{bad[0] if bad else 'failed'}")
        continue
    med = lambda i: statistics.median(float(r[i]) for r in ok)
    tot = lambda i: sum(int(r[i]) for r in ok)
    g, p50, p99, mx = med(0), med(1), med(2), med(3)
    tx, retx, tmo, drops = tot(4), tot(5), tot(6), tot(7)
    if base is None and float(p) == 0:
        base = (g, p99)
    rg = f"{g / base[0]:.3f}" if base and base[0] > 0 else ""
    rp = f"{p99 / base[1]:.2f}" if base and base[1] > 0 else ""  # (LV_LAT=0: no p99)
    rt = f"{100 * retx / (tx - retx):.2f}" if tx > retx else ""
    status = "ok" if not bad else f"ok({len(ok)}/{len(ok) + len(bad)}:{bad[0]})"
    print(f"fabric,{mode},random,{p},{timeout},{g:.3f},{rg},{p50:.1f},{p99:.1f},{rp},{mx:.1f},{rt},{tmo},{drops},{status}")
PY
done
