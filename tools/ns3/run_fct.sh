#!/bin/bash
# FCT slowdown on a 128-host leaf-spine in ns-3 (doc/cc-experiments.md
# "droce inside ns-3: leaf-spine"): 8 leaves x 16 hosts at 100 Gb/s, 4 spines
# at 400 Gb/s, every host running droce's transport with each cc= variant at
# the algorithms' paper defaults; flow sizes from WebSearch (or FB_Hadoop),
# Poisson arrivals at 30 % and 50 % load for DURATION_MS of simulated time,
# then run until every flow finishes (or MAX_MS). Writes
# OUT/<workload>_<load>_<variant>.{flows,queue}.csv, OUT/fct_results.csv (one
# row per run), OUT/fct_commands.txt, OUT/fct_summary.md and the plots
# (tools/ns3/plot_fct.py). Virtual time and fixed seeds: a run gives the same
# numbers on any machine; one takes 10-45 s of CPU.
#   tools/ns3/run_fct.sh [BUILD_DIR] [OUT_DIR]
#   env: WORKLOADS="websearch fb_hadoop" LOADS="0.3 0.5" CCS="dcqcn timely hpcc swift dcqcn_mlx5" (or none)
#        DURATION_MS=1 MAX_MS=30 SEED=1 NICE=10
# CCS holds variants: a cc= name, or dcqcn_mlx5 (DCQCN with mlx5-like timers, lib/cc/dcqcn.h
# Mlx5Profile, and ECN marking at dequeue, as the HPCC simulator's DCQCN runs).
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-doc/cc-experiments/ns3}
BIN=$BUILD/sim/ns3/droce-ns3-fabric
[ -x "$BIN" ] || { echo "run_fct.sh: $BIN not built (needs libns3-dev; ninja -C $BUILD)" >&2; exit 1; }
WORKLOADS=${WORKLOADS:-websearch}
LOADS=${LOADS:-0.3 0.5}
CCS=${CCS:-dcqcn timely hpcc swift dcqcn_mlx5}
DURATION_MS=${DURATION_MS:-1}
MAX_MS=${MAX_MS:-30}
SEED=${SEED:-1}
mkdir -p "$OUT"
COMMON=(--leaves 8 --hosts-per-leaf 16 --spines 4 --host-gbps 100 --spine-gbps 400
        --duration-ms "$DURATION_MS" --max-ms "$MAX_MS" --seed "$SEED")
for wl in $WORKLOADS; do
  for load in $LOADS; do
    for variant in $CCS; do
      case $variant in
        dcqcn_mlx5) cc=(--cc dcqcn --mark dequeue --cc-params "rpg_time_reset_us=300,rpg_byte_reset=32767,\
rpg_threshold=1,rpg_ai_rate_mbps=5,rpg_hai_rate_mbps=50,rpg_min_dec_fac=50,rpg_min_rate_mbps=1,\
rate_reduce_monitor_period_us=4,dce_tcp_g=1019,dce_tcp_rtt_us=1,initial_alpha_value=1023") ;;
        *) cc=(--cc "$variant") ;;
      esac
      args=("${COMMON[@]}" --workload "$wl" --load "$load" "${cc[@]}" --csv "$OUT/${wl}_${load}_${variant}")
      echo "$(date -u +%F) $BIN ${args[*]}" >> "$OUT/fct_commands.txt"
      # A run that hits MAX_MS exits 3 and still writes its results (the flows not done are marked).
      line=$(nice -n "${NICE:-10}" "$BIN" "${args[@]}") || [ $? -eq 3 ]
      line="variant=$variant $line"
      echo "$line"
      echo "$line" >> "$OUT/fct_results.lines"
    done
  done
done
# Every run so far (a rerun of one workload keeps the others' rows), the last line per (workload, load, variant).
python3 - "$OUT/fct_results.lines" <<'PYEOF' | python3 tools/ns3/kv_to_csv.py > "$OUT/fct_results.csv"
import shlex, sys
last = {}
for line in open(sys.argv[1]):
    if line.strip():
        kv = dict(x.split("=", 1) for x in shlex.split(line))
        last[(kv["workload"], kv["load"], kv["variant"])] = line.rstrip("\n")
print("\n".join(last.values()))
PYEOF
PY=python3
$PY -c 'import matplotlib' 2>/dev/null || PY=/usr/bin/python3
$PY tools/ns3/plot_fct.py "$OUT"
