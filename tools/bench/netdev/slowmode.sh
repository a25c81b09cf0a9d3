#!/usr/bin/env bash
# The slow mode of 2 B ib_send_lat on a loaded host (results.md, 2026-11-30
# "The slow rounds left are another mode"): PAIRS single ib_send_lat pairs
# on a 2-host cluster (droce-cluster, steering udp), each with DROCE_STATS=1,
# while every thread of both perftest processes is sampled from /proc: the
# CPU it last ran on, and its schedstat (time on a CPU, time waiting on a
# run queue). Per pair: t_typical, the program threads' (the ones that post
# and poll) time on a CPU and waiting for one, how often the two program
# threads were last seen on the same CPU, the progress threads' CPU time,
# and droce's counters (sendmmsg calls, empty socket receives). Root only.
#   slowmode.sh [PAIRS=10] [ITERS=1000]
#   env: NAME=slowmode (the cluster), OUT=/tmp/slowmode, TIMEOUT=60, STEERING=udp,
#   EXTRA_ENV (more VAR=VALUE for both programs), PIN_S / PIN_C (the server's / client's CPUs, taskset -c)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
export DROCE_CTL=${DROCE_CTL:-${BUILD:-$root/build}/apps/ctl/droce-ctl}
cl=$root/tools/droce-cluster
pairs=${1:-10} iters=${2:-1000}
name=${NAME:-slowmode} out=${OUT:-/tmp/slowmode} t=${TIMEOUT:-60}
[ "$(id -u)" = 0 ] || { echo "slowmode.sh: needs root" >&2; exit 77; }
mkdir -p "$out"
trap '"$cl" down --name "$name" >/dev/null 2>&1' EXIT

# Samples every thread of pid $1 until it exits: "ms tid comm cpu run_ns wait_ns" lines.
sample() {
  local pid=$1 f tid stat comm cpu rest sched start; start=$(date +%s%N)
  while [ -d "/proc/$pid" ]; do
    for f in /proc/"$pid"/task/*; do
      tid=${f##*/}
      read -r stat <"$f/stat" 2>/dev/null || continue
      read -r sched <"$f/schedstat" 2>/dev/null || continue
      comm=${stat#*(}; comm=${comm%%)*}; rest=${stat##*) }
      # field 39 (processor) of stat is the 37th after "comm) "
      cpu=$(awk '{print $37}' <<<"$rest")
      echo "$(( ($(date +%s%N) - start) / 1000000 )) $tid ${comm// /_} $cpu ${sched% *}"
    done
    sleep 0.005
  done
}

echo "pair,t_typical_us,prog_run_ms_s,prog_wait_ms_s,prog_run_ms_c,prog_wait_ms_c,same_cpu_pct,progress_run_ms_s,progress_run_ms_c,tx_calls_s,tx_calls_c,empty_rx_s,empty_rx_c,load"
for i in $(seq "$pairs"); do
  "$cl" up 2 --name "$name" --steering "${STEERING:-udp}" >/dev/null || { echo "cluster up failed" >&2; exit 1; }
  "$cl" run --name "$name" 1 ${PIN_S:+taskset -c $PIN_S} env DROCE_STATS=1 ${EXTRA_ENV:-} timeout "$t" ib_send_lat -d droce0 -x 1 -s 2 -n "$iters" >"$out/s.out" 2>&1 &
  s=$!
  for _ in $(seq 200); do ip netns exec "$name-1" ss -Hltn "sport = :18515" | grep -q . && break; sleep 0.05; done
  "$cl" run --name "$name" 2 ${PIN_C:+taskset -c $PIN_C} env DROCE_STATS=1 ${EXTRA_ENV:-} timeout "$t" ib_send_lat -d droce0 -x 1 -s 2 -n "$iters" 10.0.0.1 >"$out/c.out" 2>&1 &
  c=$!
  sleep 0.2
  spid=$(ip netns pids "$name-1" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = ib_send_lat ] && echo $p; done | head -1)
  cpid=$(ip netns pids "$name-2" | while read -r p; do [ "$(cat /proc/$p/comm 2>/dev/null)" = ib_send_lat ] && echo $p; done | head -1)
  [ -n "$spid" ] && sample "$spid" >"$out/s.samples" &
  ss_=$!
  [ -n "$cpid" ] && sample "$cpid" >"$out/c.samples" &
  cs_=$!
  wait $c; wait $s; wait $ss_ $cs_ 2>/dev/null
  load=$(cut -d' ' -f1 /proc/loadavg)
  typ=$(awk '/^ *2 +[0-9]/ {print $5}' "$out/c.out" | head -1)
  # Per thread: the last sample's run and wait times (ns, cumulative); the
  # program thread is the one named ib_send_lat, the progress thread droce-progress.
  last() { awk -v want="$2" '$3 == want {r[$2] = $5; w[$2] = $6} END {rt = 0; wt = 0; for (k in r) {rt += r[k]; wt += w[k]}; printf "%.0f %.0f", rt / 1e6, wt / 1e6}' "$1"; }
  read -r prs pws <<<"$(last "$out/s.samples" ib_send_lat)"
  read -r prc pwc <<<"$(last "$out/c.samples" ib_send_lat)"
  read -r gs _ <<<"$(last "$out/s.samples" droce-progress)"
  read -r gc _ <<<"$(last "$out/c.samples" droce-progress)"
  # Same CPU: samples (by 5 ms tick) where both program threads were last on one CPU.
  same=$(awk '$3 == "ib_send_lat" {k = int($1 / 5); if (FILENAME ~ /s.samples/) s[k] = $4; else c[k] = $4}
              END {n = 0; m = 0; for (k in s) if (k in c) {n++; if (s[k] == c[k]) m++}; printf "%.0f", n ? 100 * m / n : -1}' \
    "$out/s.samples" "$out/c.samples")
  txs=$(grep -o 'refused [0-9]*) in [0-9]* calls' "$out/s.out" | awk '{print $4}' | head -1)
  txc=$(grep -o 'refused [0-9]*) in [0-9]* calls' "$out/c.out" | awk '{print $4}' | head -1)
  ers=$(grep -o '([0-9]* empty)' "$out/s.out" | head -1 | tr -dc 0-9)
  erc=$(grep -o '([0-9]* empty)' "$out/c.out" | head -1 | tr -dc 0-9)
  echo "$i,${typ:-},$prs,$pws,$prc,$pwc,$same,$gs,$gc,${txs:-},${txc:-},${ers:-},${erc:-},$load"
  cp "$out/s.out" "$out/s.$i.out"; cp "$out/c.out" "$out/c.$i.out"
  cp "$out/s.samples" "$out/s.$i.samples"; cp "$out/c.samples" "$out/c.$i.samples"
  "$cl" down --name "$name" >/dev/null
done
