#!/usr/bin/env bash
# ICRC vs memcpy on one core (release build); writes results.csv.
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ -f build-rel/build.ninja ] || meson setup build-rel -Dbuildtype=release >/dev/null
ninja -C build-rel tools/bench/icrc/droce-icrc-bench >/dev/null
taskset -c 0 build-rel/tools/bench/icrc/droce-icrc-bench "${1:-9}" | tee tools/bench/icrc/results.csv
