#!/usr/bin/env bash
# How many times a 64 B ib_write_bw pair reads the clock per message, and
# where: a uprobe on every rdtsc instruction of the provider library
# (TscClock::Now is inlined into its callers, so each site is one caller),
# counted over the whole run of each end (-n N messages), as "end,function,
# reads per message" rows, busiest first. The sites' functions are the
# symbols objdump puts them in (inlined callers folded into them: PostSend's
# sites include RingPosted's, TakeCompletions' PollIfBusyLocked's).
#   bash tools/bench/verbs/clock_reads.sh [BUILD_DIR]   (default build-relg)
# A uprobe costs a trap (~1-3 us), so each read takes that long: both devices
# run with doorbell_burst_gap_ns=1000000 (as breakdown.sh BATCHED=1), so a
# burst's posts still defer as they do natively within 1 us. The probes are
# on the library file of BUILD_DIR (its inode): every process that maps that
# file hits them while they exist, so give it a build no one else runs
# (your worktree's, or a copy), never the shared main tree's. Needs root and
# perf. Env: N (messages, default 200000), PORT (default 18515), MIN (rows
# under this many reads per message are left out, default 0.005), SITES=1
# (a row per rdtsc site, function@address, for addr2line).
set -uo pipefail
cd "$(dirname "$0")/../../.."
build=$(cd "${1:-build-relg}" && pwd)
n=${N:-200000} port=${PORT:-18515} min=${MIN:-0.005}
so=$(readlink -f "$build/drivers/verbs/libdroce-rdmav34.so")
group=clk$$
out=$(mktemp -d /tmp/droce-clockreads.XXXXXX)
cleanup() { perf probe -q -d "$group:*" >/dev/null 2>&1; rm -rf "$out"; }
trap cleanup EXIT
# Each rdtsc site with the function it lies in.
objdump -d --no-show-raw-insn -C "$so" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ </, "", fn); sub(/>:$/, "", fn); next }
  /\trdtsc/ { a = $1; sub(/:$/, "", a); print a "\t" fn }' >"$out/sites"
[ -s "$out/sites" ] || { echo "clock_reads.sh: no rdtsc in $so" >&2; exit 1; }
while IFS=$'\t' read -r addr fn; do
  perf probe -q -x "$so" -a "$group:r_$addr=0x$addr" >/dev/null 2>&1 || echo "clock_reads.sh: no probe at $addr ($fn)" >&2
done <"$out/sites"
st="perf stat -x, -e $group:*"
BUILD=$build SERVER_DELAY=2 PAIR_TIMEOUT=300 LINK_SET="doorbell_burst_gap_ns=1000000 ${LINK_SET:-}" \
  bash tools/verbs-pair.sh \
  "$st -o $out/server.stat ib_write_bw -d droce0 -x 1 -p $port -s 64 -n $n" \
  "$st -o $out/client.stat ib_write_bw -d droce1 -x 1 -p $port -s 64 -n $n 127.0.0.1" >"$out/pair.log" 2>&1 ||
  { echo "clock_reads.sh: the pair failed" >&2; tail -20 "$out/pair.log" >&2; exit 1; }
for end in client server; do
  # perf stat -x, rows: count,unit,event,...
  awk -F, -v end="$end" -v n="$n" -v min="$min" -v bysite="${SITES:-0}" -v sites="$out/sites" '
    BEGIN { while ((getline l < sites) > 0) { split(l, p, "\t"); fn[p[1]] = p[2] } }
    $3 ~ /:r_/ { a = $3; sub(/.*:r_/, "", a); f = fn[a]; gsub(/\(anonymous namespace\)::/, "", f); sub(/\(.*/, "", f); sub(/^.* /, "", f); if (bysite) f = f "@" a; sum[f] += $1; total += $1 }
    END {
      for (f in sum) if (sum[f] / n >= min) printf "%s,%s,%.3f\n", end, f, sum[f] / n | "sort -t, -k3 -rn"
      close("sort -t, -k3 -rn")
      printf "%s,total,%.3f\n", end, total / n
    }' "$out/$end.stat"
done
