#!/usr/bin/env bash
# Same-run comparison of this tree's engine bench with an older commit's:
#   bash tools/bench/engine/vs.sh <base-commit> [runs]
# Builds the base (git archive into $DROCE_VS_DIR, default /tmp/droce-vs-<commit>) with this tree's
# engine_bench.cc (so both run the same cases), and this tree in build-rel (release), then runs
# `manyqp` (3 trials) and the default cases (1 trial) alternately, `taskset -c 0`, and prints
# variant,run,metric,value,unit (variant: before = the base, after = this tree).
set -euo pipefail
cd "$(dirname "$0")/../../.."
base=$(git rev-parse --short "$1")
runs=${2:-3}
dir=${DROCE_VS_DIR:-/tmp/droce-vs-$base}
if [ ! -f "$dir/build-rel/build.ninja" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  git archive "$base" | tar -x -C "$dir"
  cp tools/bench/engine/engine_bench.cc "$dir/tools/bench/engine/"
  (cd "$dir" && meson setup build-rel -Dbuildtype=release >/dev/null)
fi
ninja -C "$dir/build-rel" tools/bench/engine/droce-engine-bench >/dev/null
[ -f build-rel/build.ninja ] || meson setup build-rel -Dbuildtype=release >/dev/null
ninja -C build-rel tools/bench/engine/droce-engine-bench >/dev/null
echo "variant,run,metric,value,unit"
for run in $(seq "$runs"); do
  for v in before after; do
    bin=build-rel/tools/bench/engine/droce-engine-bench
    [ "$v" = before ] && bin=$dir/build-rel/tools/bench/engine/droce-engine-bench
    taskset -c 0 "$bin" 3 8 400000 manyqp | tail -n +2 | sed "s/^/$v,$run,/"
    taskset -c 0 "$bin" 1 8 1000000 all | tail -n +2 | sed "s/^/$v,$run,/"
  done
done
