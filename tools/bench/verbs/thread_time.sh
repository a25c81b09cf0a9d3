#!/usr/bin/env bash
# Runs a command and reports each of its threads' scheduler accounting over a
# window of its run (tools/bench/verbs/results.md, "Where a 64 B WRITE's time
# goes"): CPU time on the CPU, time runnable but waiting for a CPU, slices,
# voluntary (sleeps, futex waits) and involuntary (preempted) switches, from
# /proc/PID/task/TID/{schedstat,status}, sampled every 0.25 s from FROM_S to
# TO_S after the command started. Each thread's window is the part of that
# span in which it was seen (perftest's server may start a device's dataplane,
# and its progress thread, once before the client connects and again after);
# a thread seen for less than 0.5 s is left out. The rows go to OUT (default
# stderr):
#   thread_time,LABEL,COMM,TID,window_s,cpu_ms,runq_wait_ms,slices,voluntary,involuntary
#   bash tools/bench/verbs/thread_time.sh LABEL FROM_S TO_S CMD...
#   e.g. as verbs-pair.sh's server command:
#   'bash tools/bench/verbs/thread_time.sh server 2 5 ib_write_bw -d droce0 -x 1 -s 64 -D 4'
set -uo pipefail
label=$1 from=$2 to=$3
shift 3
out=${OUT:-/dev/stderr}
samples=$(mktemp /tmp/droce-thread-time.XXXXXX)
"$@" &
pid=$!
start_us=${EPOCHREALTIME/./}
from_us=$(awk -v s="$from" 'BEGIN {printf "%d", s * 1e6}') to_us=$(awk -v s="$to" 'BEGIN {printf "%d", s * 1e6}')
snap() {  # one line per thread: seconds since start, tid, comm, cpu_ns, wait_ns, slices, voluntary, involuntary
  # One awk for all the files: the sampler must not take the CPU it measures.
  awk -v at="$(((${EPOCHREALTIME/./} - start_us)))" '
    {split(FILENAME, p, "/"); tid = p[5]; f = p[6]}
    f == "comm" {c = $0; gsub(/ /, "_", c); comm[tid] = c}
    f == "schedstat" {cpu[tid] = $1; wait[tid] = $2; sl[tid] = $3}
    f == "status" && $1 == "voluntary_ctxt_switches:" {vol[tid] = $2}
    f == "status" && $1 == "nonvoluntary_ctxt_switches:" {inv[tid] = $2}
    END {for (t in cpu) if (t in comm && t in inv)
      printf "%.3f %s %s %s %s %s %s %s\n", at / 1e6, t, comm[t], cpu[t], wait[t], sl[t], vol[t], inv[t]}' \
    /proc/"$pid"/task/*/comm /proc/"$pid"/task/*/schedstat /proc/"$pid"/task/*/status 2>/dev/null
}
while kill -0 "$pid" 2>/dev/null; do
  elapsed_us=$((${EPOCHREALTIME/./} - start_us))
  ((elapsed_us > to_us)) && break
  ((elapsed_us >= from_us)) && snap >>"$samples"
  sleep 0.25
done
# First and last sample of each thread inside the window (lines with all 8 fields).
awk -v label="$label" 'NF == 8 {
    if (!($2 in t0)) {t0[$2] = $1; c0[$2] = $4; w0[$2] = $5; s0[$2] = $6; v0[$2] = $7; i0[$2] = $8; order[n++] = $2}
    t1[$2] = $1; c1[$2] = $4; w1[$2] = $5; s1[$2] = $6; v1[$2] = $7; i1[$2] = $8; comm[$2] = $3}
  END {for (k = 0; k < n; ++k) {id = order[k]; w = t1[id] - t0[id]; if (w < 0.5) continue
    printf "thread_time,%s,%s,%s,%.2f,%.1f,%.1f,%d,%d,%d\n", label, comm[id], id, w, (c1[id] - c0[id]) / 1e6,
      (w1[id] - w0[id]) / 1e6, s1[id] - s0[id], v1[id] - v0[id], i1[id] - i0[id]}}' "$samples" >>"$out"
rm -f "$samples"
wait "$pid"
