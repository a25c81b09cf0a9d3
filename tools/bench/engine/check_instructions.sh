#!/usr/bin/env bash
# The engine's cost of a message in instructions (callgrind, both ends, ACKs and completions included):
#   bash tools/bench/engine/check_instructions.sh [--update]
# Runs `droce-engine-bench 1 8 N small` under callgrind for N = 100000 (the measure: instructions / N)
# and N = 1 (the fixed cost of start-up and set-up), in a release tree (DROCE_BUILD_DIR, default
# build-rel, set up here if missing), and prints
#   per_message,<total/100000>   marginal,<(total - fixed)/99999>   fixed,<instructions of the N=1 run>
# Compares per_message and marginal with instructions.ref beside this script and prints a WARNING line
# when either is more than 3 % above its reference (exit status 0 all the same: a warning, not a
# failed test; 2 when the benchmark cannot run). --update writes the measured numbers into instructions.ref.
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${DROCE_BUILD_DIR:-build-rel}
ref=tools/bench/engine/instructions.ref
[ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release >/dev/null
nice -n 5 ninja -C "$build" tools/bench/engine/droce-engine-bench >/dev/null
command -v valgrind >/dev/null || { echo "check_instructions: valgrind not installed" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
irefs() {  # irefs N: instructions of one run with N messages
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" \
    "$build"/tools/bench/engine/droce-engine-bench 1 8 "$1" small >/dev/null 2>"$tmp/log.$1" ||
    { cat "$tmp/log.$1" >&2; exit 2; }
  sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$tmp/log.$1"
}
total=$(irefs 100000)
fixed=$(irefs 1)
per=$(( (total + 50000) / 100000 ))
marginal=$(( (total - fixed + 49999) / 99999 ))
echo "per_message,$per"
echo "marginal,$marginal"
echo "fixed,$fixed"
if [ "${1:-}" = --update ]; then
  printf '# check_instructions.sh --update, %s, %s\nper_message %s\nmarginal %s\nfixed %s\n' \
    "$(date -u +%Y-%m-%d)" "$(git rev-parse --short HEAD)" "$per" "$marginal" "$fixed" >"$ref"
  echo "wrote $ref"
  exit 0
fi
# Both the issue's measure (per_message, set-up included) and the data path alone (marginal) are guarded.
status=ok
for pair in "per_message $per" "marginal $marginal"; do
  read -r key got <<<"$pair"
  want=$(awk -v k="$key" '$1 == k {print $2}' "$ref" 2>/dev/null || true)
  if [ -z "$want" ]; then
    echo "WARNING: no $key reference in $ref"; status=warn
  elif [ $(( got * 100 )) -gt $(( want * 103 )) ]; then
    echo "WARNING: $key $got instructions, more than 3 % above the reference $want ($ref)"; status=warn
  fi
done
[ "$status" = ok ] && echo "ok: $per instructions per 64 B WRITE, $marginal marginal (reference $(awk '$1 == "per_message" {print $2}' "$ref"))"
exit 0
