#!/bin/bash
# The ns-3 incast experiments (doc/cc-experiments.md "droce inside ns-3"):
# N = 2, 4, 8, 16 senders into one 100 Gb/s switch port, each running
# droce's transport with cc = none, dcqcn, timely, hpcc, swift at the
# algorithms' paper defaults; 2 MB per sender, all starting together.
# Writes OUT/results.csv (one row per run), OUT/N<n>_<cc>.{samples,flows}.csv
# and the plots (tools/ns3/plot_incast.py). Virtual time: the numbers are the
# same on any machine.
#   tools/ns3/run_incast.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-doc/cc-experiments/ns3}
BIN=$BUILD/sim/ns3/droce-ns3-incast
[ -x "$BIN" ] || { echo "run_incast.sh: $BIN not built (needs libns3-dev; ninja -C $BUILD)" >&2; exit 1; }
mkdir -p "$OUT"
COMMON=(--rate-gbps 100 --flow-bytes 2000000 --sample-ns 10000 --max-ms 500)
echo "# $(date -u +%F) $BIN ${COMMON[*]} --senders N --cc CC" > "$OUT/commands.txt"
rows=()
for n in 2 4 8 16; do
  for cc in none dcqcn timely hpcc swift; do
    line=$("$BIN" "${COMMON[@]}" --senders "$n" --cc "$cc" --csv "$OUT/N${n}_${cc}")
    echo "$line"
    rows+=("$line")
  done
done
printf '%s\n' "${rows[@]}" | python3 tools/ns3/kv_to_csv.py > "$OUT/results.csv"
PY=python3
$PY -c 'import matplotlib' 2>/dev/null || PY=/usr/bin/python3
$PY tools/ns3/plot_incast.py "$OUT"
