#!/usr/bin/env bash
# Builds a release tree and measures the RC engine alone (two devices, one
# core, perfect in-memory wire). Writes results.csv and prints it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ -f build-rel/build.ninja ] || meson setup build-rel -Dbuildtype=release >/dev/null
ninja -C build-rel tools/bench/engine/droce-engine-bench >/dev/null
out=tools/bench/engine/results.csv
taskset -c 0 build-rel/tools/bench/engine/droce-engine-bench "${1:-7}" 8 1000000 | tee "$out"
