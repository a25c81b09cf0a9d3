#!/usr/bin/env bash
# The lossy-network experiment (doc/loss-experiment.md) in one invocation
# (~13 min on the 2-core test VM with 5 rounds): goodput of 64 KiB RDMA
# WRITEs and p99 completion time of one, against random loss 0..5 % and one
# bursty (Gilbert-Elliott) pattern,
#   inmem   droce-loss-bench: two core::Devices on the in-memory wire, virtual
#           time (25 Gb/s, 5 us each way), go-back-N and selective repeat,
#           QP timeout 14 (67 ms, the verbs default) and 8 (1 ms)
#   fabric  fabric.sh: two verbs programs through droced's drop injector
#   tcp     tcp.sh: kernel TCP through nftables random drop on a veth (root)
# Writes tools/bench/loss/results.csv, the "current run" part of
# tools/bench/loss/results.md (between its two run.sh markers; the rest of the
# file, the history, is kept) and doc/loss-{goodput,p99}.png. A mode a tree
# does not have gives rows with status "unsupported" and a message on stderr.
#   bash tools/bench/loss/run.sh [seconds=2] [rounds=3]   (fabric and TCP: seconds per measurement, rounds)
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=${DROCE_BUILD_DIR:-build}
cmd="DROCE_BUILD_DIR=$build bash tools/bench/loss/run.sh $*"
case $build in /*) ;; *) build=$PWD/$build ;; esac
export DROCE_BUILD_DIR=$build
secs=${1:-2}; rounds=${2:-3}
started="$(date -u '+%F %H:%M')" load0=$(cut -d' ' -f1 /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null || exit 1
dir=tools/bench/loss
out=$dir/results.csv
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.md" "$tmp.all"' EXIT
{
  for t in 14 8; do "$build/tools/bench/loss/droce-loss-bench" --modes gbn,sr --timeout $t; done
  bash $dir/fabric.sh gbn,sr 0,0.01,0.1,0.5,1,2,5 "$secs" 14 8 "$rounds"
  bash $dir/tcp.sh 0,0.01,0.1,0.5,1,2,5 "$secs" 1000 "$rounds"
} | awk 'NR == 1 || !/^setup,/' | tee "$tmp"
cp "$tmp" "$out"
md=$dir/results.md
begin='<!-- run.sh: current run begins -->' end='<!-- run.sh: current run ends -->'
{
  echo "$begin"
  echo
  echo "Run $started–$(date -u +%H:%M) UTC, tree $commit, load $load0 before and $(cut -d' ' -f1 /proc/loadavg) after:"
  echo "\`$cmd\` (in-memory rows: virtual time, the same on every run for a given seed;"
  echo "fabric and TCP rows: medians of $rounds rounds of ${secs} s per measurement)."
  echo
  /usr/bin/python3 $dir/plot.py "$out" doc/loss || exit 1
  echo "$end"
} >"$tmp.md" || exit 1
if grep -qF "$begin" "$md" 2>/dev/null && grep -qF "$end" "$md"; then
  awk -v b="$begin" -v e="$end" -v new="$tmp.md" '
    $0 == b {while ((getline l < new) > 0) print l; skip = 1; next}
    $0 == e {skip = 0; next}
    !skip' "$md" >"$tmp.all" && cp "$tmp.all" "$md"
else
  cp "$tmp.md" "$md"
fi
echo "wrote $out $md doc/loss-goodput.png doc/loss-p99.png"
