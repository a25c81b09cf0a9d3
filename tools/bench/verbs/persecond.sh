#!/usr/bin/env bash
# 64 B ib_write_bw (1 QP) second by second, with the engine's one-core rate
# before each pair, for one or more release trees alternating round by round
# (tools/bench/verbs/results.md). A pair's rate on this 2-vCPU VM has two
# modes that last seconds at a time (~9 M msg/s and ~3.8 M on 2026-12-01,
# both ends at full CPU in either; the one-thread engine does not change):
# fastpath.sh's 3-second rounds average over whichever came, perftest's
# --run_infinitely reports every second, so the modes show apart.
# perftest's --run_infinitely also starts a thread that spins on
# gettimeofday (12-15 % of a CPU, results.md 2026-12-01 "Where the pair's
# CPUs go"): compare trees run here with each other, not with -D runs.
#   bash tools/bench/verbs/persecond.sh NAME=BUILD_DIR [NAME=BUILD_DIR ...]
# Prints CSV rows tree,round,engine,M,load,L,persec,"r1 r2 ..." (M msg/s).
# Env: ROUNDS (default 3), SECS (seconds a pair runs, default 12), PORT
#      (perftest's side channel, default 18730).
set -uo pipefail
cd "$(dirname "$0")/../../.."
rounds=${ROUNDS:-3} secs=${SECS:-12} port=${PORT:-18730}
for r in $(seq 1 "$rounds"); do
  for t in "$@"; do
    name=${t%%=*} b=$(cd "${t#*=}" && pwd)
    eng=$(taskset -c 0 "$b"/tools/bench/engine/droce-engine-bench 3 8 1000000 |
      awk -F, '$1 == "write_64B_msg_rate" {print $2}')
    rates=$(BUILD=$b SERVER_DELAY=1.5 PAIR_TIMEOUT=$((secs + 15)) bash tools/verbs-pair.sh \
      "timeout $((secs + 2)) ib_write_bw -d droce0 -x 1 -p $port -s 64 --run_infinitely -D 1" \
      "timeout $secs ib_write_bw -d droce1 -x 1 -p $port -s 64 --run_infinitely -D 1 127.0.0.1" 2>&1 |
      sed -n '/^--- client/,$p' | grep -E '^ *64 +[0-9]+ ' | awk '{printf "%s%.2f", (NR > 1 ? " " : ""), $5}')
    echo "$name,round$r,engine,$eng,load,$(cut -d' ' -f1 /proc/loadavg),persec,\"$rates\""
  done
done
