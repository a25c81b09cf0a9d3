#!/usr/bin/env bash
# The lossy-network experiment (issue 16), in one invocation (~6 min on the
# 2-core test VM, ~9 min once selective repeat runs too): goodput of 64 KiB
# RDMA WRITEs and p99 completion time of one, against random loss 0..5 % and
# one bursty (Gilbert-Elliott) pattern,
#   inmem   droce-loss-bench: two core::Devices on the in-memory wire, virtual
#           time (25 Gb/s, 5 us each way), go-back-N and selective repeat,
#           QP timeout 14 (67 ms, the verbs default) and 8 (1 ms)
#   fabric  fabric.sh: two verbs programs through droced's drop injector
#   tcp     tcp.sh: kernel TCP through nftables random drop on a veth (root)
# Writes tools/bench/loss/results.{csv,md} and doc/loss-{goodput,p99}.png. A mode
# this tree does not have (selective repeat before it lands) gives rows with
# status "unsupported" and a message on stderr.
#   bash tools/bench/loss/run.sh [seconds=2] [rounds=3]   (fabric and TCP: seconds per measurement, rounds)
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=${DROCE_BUILD_DIR:-build}
case $build in /*) ;; *) build=$PWD/$build ;; esac
export DROCE_BUILD_DIR=$build
secs=${1:-2}; rounds=${2:-3}
[ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null || exit 1
dir=tools/bench/loss
out=$dir/results.csv
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  for t in 14 8; do "$build/tools/bench/loss/droce-loss-bench" --modes gbn,sr --timeout $t; done
  bash $dir/fabric.sh gbn,sr 0,0.01,0.1,0.5,1,2,5 "$secs" 14 8 "$rounds"
  bash $dir/tcp.sh 0,0.01,0.1,0.5,1,2,5 "$secs" 1000 "$rounds"
} | awk 'NR == 1 || !/^setup,/' | tee "$tmp"
cp "$tmp" "$out"
/usr/bin/python3 $dir/plot.py "$out" doc/loss >$dir/results.md && echo "wrote $out $dir/results.md doc/loss-goodput.png doc/loss-p99.png"
