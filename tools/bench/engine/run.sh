#!/usr/bin/env bash
# Builds a release tree (DROCE_BUILD_DIR, default build-rel) and measures the RC engine alone (two devices, one
# core, perfect in-memory wire). Writes results.csv and prints it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${DROCE_BUILD_DIR:-build-rel}  # any release build tree; created here if missing
[ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release >/dev/null
ninja -C "$build" tools/bench/engine/droce-engine-bench >/dev/null
out=tools/bench/engine/results.csv
taskset -c 0 "$build"/tools/bench/engine/droce-engine-bench "${1:-7}" 8 1000000 | tee "$out"
