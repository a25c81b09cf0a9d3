#!/bin/bash
# Congestion control through a queued switch port, in virtual time (doc/cc.md
# "Tests and experiments"): the transport_cc_per_qp scenarios — DCQCN beside
# TIMELY on one device, Swift alone against an unlimited QP, two HPCC QPs
# with INT against two unlimited QPs — through sim::EgressPortIo at 1 Gb/s
# (Kmin 20 KB, Kmax 200 KB, Pmax 0.2), 64 KiB WRITEs, 16 outstanding per QP.
# Appends the numbers each scenario prints to results.md with the command
# and the date. Usage: tools/bench/cc/run.sh [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../../build}
ninja -C "$build" transport_cc_per_qp_test >/dev/null
out=$("$build"/transport_cc_per_qp_test --gtest_filter='CcPerQp.*' 2>&1) || { echo "$out"; exit 1; }
{
  echo
  echo "## $(date -u +%Y-%m-%dT%H:%MZ) — \`tools/bench/cc/run.sh\` ($(git -C "$here" rev-parse --short HEAD))"
  echo
  echo '```'
  grep -E '^(dcqcn|swift|hpcc)' <<<"$out"
  echo '```'
} >>"$here/results.md"
tail -n 12 "$here/results.md"
