#!/usr/bin/env bash
# Where ibv_rc_pingpong's time goes, tree by tree, alternating: one
# `ibv_rc_pingpong -s 64 -n 20000` pair per tree and round under `perf stat`,
# counting the pair's futex and clock_nanosleep calls (mutex sleeps and the
# progress thread's look-backs) and context switches. Needs perf and root.
#   bash tools/bench/verbs/pingpong_syscalls.sh NAME=BUILD_DIR[@key=value,...] ...
# Prints CSV rows tree,us_per_iter,futex,clock_nanosleep,context_switches,load1.
# Env: RUNS (rounds, default 5), ITERS (default 20000).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export SERVER_DELAY=1.5 PAIR_TIMEOUT=120
for ((i = 1; i <= ${RUNS:-5}; ++i)); do
  for a in "$@"; do
    name=${a%%=*} t=${a#*=} k=
    [[ $t == *@* ]] && k=${t#*@} t=${t%%@*}
    b=$(cd "$t" && pwd) load=$(cut -d' ' -f1 /proc/loadavg)
    n=${ITERS:-20000}
    BUILD=$b LINK_SET=${k//,/ } perf stat -e syscalls:sys_enter_futex,syscalls:sys_enter_clock_nanosleep,context-switches \
      -- bash tools/verbs-pair.sh "ibv_rc_pingpong -d droce0 -g 1 -s 64 -n $n" \
      "ibv_rc_pingpong -d droce1 -g 1 -s 64 -n $n 127.0.0.1" 2>&1 |
      awk -v n="$name" -v l="$load" '/usec\/iter/ {u = $(NF-1)} /sys_enter_futex/ {f = $1}
        /sys_enter_clock_nanosleep/ {s = $1} /context-switches/ {c = $1}
        END {printf "%s,%s,%s,%s,%s,%s\n", n, (u == "" ? "failed" : u), f, s, c, l}'
  done
done
