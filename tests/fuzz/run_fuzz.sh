#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS (default 60), starting from the
# committed corpus, from BUILD_DIR: a clang tree configured with -Dfuzz=true
# (tools/run-tests.sh passes its sanitizer tree). Without BUILD_DIR it
# configures and builds ./build-fuzz with clang + ASan/UBSan.
# New inputs go to a scratch directory, not into the repository.
#
#   run_fuzz.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
seconds=${1:-60}
cd "$(dirname "$0")/../.."
build=${2:-build-fuzz}
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined \
    -Db_lundef=false -Dbuildtype=debugoptimized -Ddpdk=disabled -Dverbs=disabled -Dpcap=disabled \
    -Dtests=disabled >/dev/null
fi
# A failed build says why (under set -e it would end the script silently).
if ! out=$(ninja -C "$build" tests/fuzz/fuzz_parser tests/fuzz/fuzz_responder tests/fuzz/fuzz_sack \
    tests/fuzz/fuzz_device tests/fuzz/fuzz_cm_mad tests/fuzz/fuzz_cm_ucma tests/fuzz/fuzz_netlink \
    tests/fuzz/fuzz_telemetry 2>&1); then
  echo "fuzz build failed:"; grep -E 'error|FAILED' -A3 <<<"$out" | head -40; exit 1
fi
status=0
for target in parser responder sack device cm_mad cm_ucma netlink telemetry; do
  scratch=$(mktemp -d)
  echo "fuzz_$target: ${seconds}s"
  if ! UBSAN_OPTIONS=halt_on_error=1 "$build"/tests/fuzz/fuzz_$target -max_total_time="$seconds" \
      -print_final_stats=0 "$scratch" tests/fuzz/corpus/$target 2>"$scratch.log"; then
    echo "fuzz_$target FAILED:"; tail -40 "$scratch.log"; status=1
  else
    grep -E '^#[0-9]+.*DONE|Done [0-9]+ runs' "$scratch.log" | tail -1 || true
  fi
  rm -rf "$scratch" "$scratch.log"
done
exit $status
