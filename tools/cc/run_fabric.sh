#!/usr/bin/env bash
# Real processes through droced's queued switch port (doc/cc-experiments.md
# "Real processes through droced"): N droce-testpmd senders on droce0 write
# into N receivers on droce1; droce1's switch port is the bottleneck (a FIFO
# at RATE_MBPS with RED/ECN marking, INT with hpcc). Sender k starts
# (k-1) x STAGGER s after the first and stops as long before the first
# stops, so flows join and leave one at a time. For each algorithm of ALGS:
# every sender's stats line (throughput, cc rate/window, RTT) every PERIOD s,
# the port's queue sampled by droce-ctl every QPERIOD s, then
# tools/cc/fabric.py turns the logs into CSV, a summary table and plots.
#   tools/cc/run_fabric.sh [OUT_DIR]     (default doc/cc-experiments/fabric)
# Env: BUILD (./build), ALGS ("dcqcn timely hpcc swift none"), SENDERS (3),
#   RATE_MBPS (200: low enough that the host's two CPUs are not the
#   bottleneck), KMIN/KMAX (bytes, 20000/200000), PMAX (0.2), LIMIT (bytes, 2000000: above
#   the senders' windows together, so none drops), STAGGER (s, 2), HOLD (s every flow runs together, 2),
#   PERIOD (0.02), QPERIOD (0.01), CC_PARAMS_<alg> (--cc-params; the defaults
#   below scale the delay targets and base RTTs to this fabric's RTT, about
#   0.3-1 ms between two processes through droced, not the papers' 10-50 us),
#   CONNECT_S (s for every process to start and connect before the first
#   sender's run, 20), SIZE (bytes per WRITE, 65536), OUTSTANDING (per sender, 8), TAG (file name prefix, run).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
ctl="$build/apps/ctl/droce-ctl"
tp="$build/apps/testpmd/droce-testpmd"
out=${1:-$root/doc/cc-experiments/fabric}
algs=${ALGS:-dcqcn timely hpcc swift none}
n=${SENDERS:-3}
rate=${RATE_MBPS:-200}
kmin=${KMIN:-20000} kmax=${KMAX:-200000} pmax=${PMAX:-0.2} limit=${LIMIT:-2000000}
stagger=${STAGGER:-2} hold=${HOLD:-2}
period=${PERIOD:-0.02} qperiod=${QPERIOD:-0.01}
size=${SIZE:-65536} outstanding=${OUTSTANDING:-8}
tag=${TAG:-run}
py=${PYTHON:-/usr/bin/python3}  # Debian's, with matplotlib
[ -x "$tp" ] && [ -x "$ctl" ] || { echo "build droce-testpmd and droce-ctl first ($build)" >&2; exit 2; }
mkdir -p "$out"
line_gbps=$(awk -v r="$rate" 'BEGIN { print r / 1000 }')
run=$(mktemp -d /tmp/droce-ccfabric.XXXXXX)
export DROCE_RUN_DIR=$run
pids=()
cleanup() {
  local p; for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}
trap cleanup EXIT
: "${CC_PARAMS_timely=t_low_ns=1000000,t_high_ns=5000000,min_rtt_ns=300000}"
: "${CC_PARAMS_hpcc=base_rtt_ns=1000000}"
: "${CC_PARAMS_swift=base_target_ns=1000000}"
{
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(git -C "$root" rev-parse --short HEAD) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ALGS='$algs' SENDERS=$n RATE_MBPS=$rate KMIN=$kmin KMAX=$kmax PMAX=$pmax LIMIT=$limit STAGGER=$stagger HOLD=$hold PERIOD=$period SIZE=$size OUTSTANDING=$outstanding CC_PARAMS_timely=$CC_PARAMS_timely CC_PARAMS_hpcc=$CC_PARAMS_hpcc CC_PARAMS_swift=$CC_PARAMS_swift tools/cc/run_fabric.sh"
} >>"$out/commands.txt"

run_alg() {  # ALG: one run; true when every sender completed
  local alg=$1 k p
  # Fresh devices for each algorithm: the port's counters are the run's.
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  "$ctl" link add droce0 ip 10.0.0.1 >/dev/null || exit 1
  "$ctl" link add droce1 ip 10.0.0.2 >/dev/null || exit 1
  knobs=(rate="${rate}M" kmin="$kmin" kmax="$kmax" pmax="$pmax" limit="$limit" mark=dequeue)
  [ "$alg" = hpcc ] && knobs+=(int=on)
  "$ctl" switch set droce1 bottleneck "${knobs[@]}" || exit 1
  params_var=CC_PARAMS_$alg; params=${!params_var:-}
  cc=(--cc "$alg" --line-rate-gbps "$line_gbps")
  [ -n "$params" ] && cc+=(--cc-params "$params")
  pids=()
  total=$(awk -v n="$n" -v s="$stagger" -v h="$hold" 'BEGIN { print 2 * (n - 1) * s + h }')
  limit_s=$(awk -v t="$total" -v c="${CONNECT_S:-20}" 'BEGIN { printf "%d", t + c + 120 }')  # a process that hangs ends
  for k in $(seq "$n"); do
    timeout "$limit_s" "$tp" -- --role server --device droce1 --peer-ip 10.0.0.1 --qpn-range "$k" "${cc[@]}" \
      --size "$size" --outstanding "$outstanding" >"$run/$alg.s$k.log" 2>&1 & pids+=($!)
  done
  for k in $(seq "$n"); do
    for _ in $(seq 600); do grep -qs "waiting for the link" "$run/$alg.s$k.log" && break; sleep 0.1; done
  done
  "$py" "$root/tools/cc/fabric.py" sample "$ctl" droce1 "$qperiod" >"$run/$alg.queue.csv" & sampler=$!
  # Every sender starts now and connects at once (a process that attaches
  # while the port is busy can take long to be scheduled on a loaded host);
  # sender k begins its run at start + (k-1) x STAGGER s (--start-at, the
  # clock of the stats lines), for `total - 2 (k-1) STAGGER` s.
  start=$("$py" -c 'import time; print(f"{time.monotonic() + '"${CONNECT_S:-20}"':.3f}")')
  t0=$(date +%s.%N)
  for k in $(seq "$n"); do
    dur=$(awk -v t="$total" -v k="$k" -v s="$stagger" 'BEGIN { print t - 2 * (k - 1) * s }')
    at=$(awk -v a="$start" -v k="$k" -v s="$stagger" 'BEGIN { printf "%.3f", a + (k - 1) * s }')
    timeout "$limit_s" "$tp" -- --role client --device droce0 --peer-ip 10.0.0.2 --qpn-range "$k" "${cc[@]}" \
      --size "$size" --outstanding "$outstanding" --duration "$dur" --stats-period "$period" --start-at "$at" \
      >"$run/$alg.c$k.log" 2>&1 & pids+=($!)
  done
  # The senders, then their receivers: a receiver whose sender never came
  # is stopped 10 s after the last sender ended.
  rc=0
  for p in "${pids[@]:n}"; do wait "$p" || rc=1; done
  for _ in $(seq 100); do
    local alive=0; for p in "${pids[@]:0:n}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]:0:n}"; do kill "$p" 2>/dev/null; wait "$p" || rc=1; done
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  "$ctl" daemon status droce1 | grep 'switch port' >"$run/$alg.port.txt"
  "$ctl" switch clear droce1
  echo "$alg: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, rc $rc, $(cat "$run/$alg.port.txt")"
  for k in $(seq "$n"); do grep -h "client write_bw:" "$run/$alg.c$k.log" | cut -c1-120; done
  for k in $(seq "$n"); do grep -q "client write_bw:" "$run/$alg.c$k.log" || return 1; done
}
for alg in $algs; do
  # A sender that never connected ("no hello from the peer") leaves the run
  # without its flow: tried again, at most ATTEMPTS times (the log says so).
  for attempt in $(seq "${ATTEMPTS:-3}"); do
    run_alg "$alg" && break
    echo "$alg: attempt $attempt: a sender did not complete; $(grep -h 'droce-testpmd: ' "$run/$alg".c*.log | grep -v waiting | head -1)"
    echo "# $alg attempt $attempt: a sender did not complete" >>"$out/commands.txt"
  done
  for f in "$run/$alg".*; do cp "$f" "$out/$tag.$(basename "$f")"; done
done
"$py" "$root/tools/cc/fabric.py" analyze "$out" "$tag" "$rate" "$kmin" "$kmax"
