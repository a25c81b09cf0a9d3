#!/usr/bin/env bash
# Where a 64 B ib_write_bw pair's wall-clock time goes, per thread and
# function: cpu-clock samples (the VM has no PMU, so no cycles or cache
# events) of both processes over SECS of the steady state, with DWARF call
# chains so inlined callers are named. Callgrind (breakdown.sh) counts
# instructions; this shows what they cost on the CPU, stalls included: a
# store into a ring line the peer's CPU read last, a clock read, a fence.
#   bash tools/bench/verbs/time_profile.sh [BUILD_DIR]   (default build-relg)
# Prints, per thread (client: the program's thread; server: its progress
# thread): its samples, then its leaf functions' shares (>= MIN %), then the
# callers of the hot leaves (memcpy, the clock, fences) as "leaf <- caller".
# Env: SECS (sampled seconds, default 2), FREQ (Hz, default 1999), PORT
#      (perftest's side channel, default 18515), Q (QPs, default 1),
#      MIN (percent, default 1.0), KEEP=FILE (keep perf.data),
#      LINK_SET (device settings, as fastpath.sh's NAME=DIR@k=v).
# Sampling slows the pair (~10-15 %); compare builds in the same run.
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=$(cd "${1:-build-relg}" && pwd)
secs=${SECS:-2} freq=${FREQ:-1999} port=${PORT:-18515} q=${Q:-1} min=${MIN:-1.0}
data=$(mktemp /tmp/droce-tprof.XXXXXX)
trap '[ -n "${KEEP:-}" ] && cp "$data" "$KEEP"; rm -f "$data" "$data.old"' EXIT
dur=$((secs + 6))
(
  sleep 4  # past both sides' start-up and the first second of the run
  pids=$(pgrep -f "ib_write_bw .*-p $port " | tr '\n' ',' | sed 's/,$//')
  [ -n "$pids" ] || { echo "time_profile.sh: no ib_write_bw on port $port" >&2; exit 1; }
  perf record -q -e cpu-clock -F "$freq" --call-graph dwarf,8192 -p "$pids" -o "$data" -- sleep "$secs" >/dev/null 2>&1
) &
rate=$(BUILD=$build SERVER_DELAY=1.5 LINK_SET=${LINK_SET:-} bash tools/verbs-pair.sh \
  "ib_write_bw -d droce0 -x 1 -p $port -s 64 -q $q -D $dur" \
  "ib_write_bw -d droce1 -x 1 -p $port -s 64 -q $q -D $dur 127.0.0.1" |
  sed -n '/^--- client/,$p' | grep -E '^ *64 +[0-9]+ ' | head -1 | awk '{print $5}')
wait
echo "ib_write_bw -s 64 -q $q under sampling: ${rate:-failed} M msg/s"
# One record per sample: "tid<TAB>leaf<TAB>caller1<TAB>caller2..." (inlined
# frames included; the clock and copy helpers' own frames folded into the leaf).
perf script -i "$data" -F tid,comm,ip,sym 2>/dev/null | awk -v min="$min" '
  BEGIN { RS = ""; FS = "\n" }
  {
    split($1, h, " "); comm = h[1]; tid = h[2]
    if (comm == "droce-progress") name = "progress"; else if (comm == "ib_write_bw") name = "program"; else name = comm
    key = tid " " name
    leaf = ""; callers = ""; n = 0
    for (i = 2; i <= NF; i++) {
      f = $i; sub(/^[ \t]*[0-9a-f]+ /, "", f); gsub(/\(anonymous namespace\)/, "anon", f); sub(/ \(inlined\)$/, "", f); sub(/[(<].*/, "", f)
      if (leaf == "") { leaf = f; continue }
      if (f ~ /^(__memcpy|__memmove|memcpy@plt|droce::verbs::TscClock::(Ticks|Now))/ && n == 0) continue
      if (n < 2) { callers = callers " <- " f; n++ }
    }
    total[key]++; leaves[key SUBSEP leaf]++
    if (leaf ~ /memcpy|memmove|TscClock|rdtsc|mfence|_mm_sfence|atomic_thread_fence/) hot[key SUBSEP leaf callers]++
  }
  END {
    for (k in total) if (total[k] > 50) {
      printf "\n== thread %s: %d samples\n", k, total[k]
      for (l in leaves) { split(l, p, SUBSEP); if (p[1] == k && 100 * leaves[l] / total[k] >= min) printf "%6.1f%%  %s\n", 100 * leaves[l] / total[k], p[2] | "sort -rn" }
      close("sort -rn")
      for (l in hot) { split(l, p, SUBSEP); if (p[1] == k && 100 * hot[l] / total[k] >= min) printf "  hot %5.1f%%  %s\n", 100 * hot[l] / total[k], p[2] | "sort -k2 -rn" }
      close("sort -k2 -rn")
    }
  }'
