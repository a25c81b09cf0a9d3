#!/usr/bin/env bash
# Runs a command and reports each of its threads' scheduler accounting over a
# window of its run (tools/bench/verbs/results.md, "Where a 64 B WRITE's time
# goes"): CPU time on the CPU, time runnable but waiting for a CPU, slices,
# voluntary (sleeps, futex waits) and involuntary (preempted) switches, from
# /proc/PID/task/TID/{schedstat,status}, FROM_S to TO_S after droce's
# progress thread appeared. The rows go to OUT (default stderr):
#   thread_time,LABEL,COMM,TID,window_s,cpu_ms,runq_wait_ms,slices,voluntary,involuntary
#   bash tools/bench/verbs/thread_time.sh LABEL FROM_S TO_S CMD...
#   e.g. as verbs-pair.sh's server command:
#   'bash tools/bench/verbs/thread_time.sh server 1 3 ib_write_bw -d droce0 -x 1 -s 64 -D 4'
set -uo pipefail
label=$1 from=$2 to=$3
shift 3
out=${OUT:-/dev/stderr}
"$@" &
pid=$!
snap() {  # prints tid comm cpu_ns wait_ns slices vol invol per thread
  local t
  for t in /proc/"$pid"/task/*; do
    [ -r "$t/schedstat" ] || continue
    printf '%s %s %s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm")" "$(cat "$t/schedstat" 2>/dev/null)" \
      "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status" 2>/dev/null)" \
      "$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$t/status" 2>/dev/null)"
  done
}
# The window starts FROM_S after the device's progress thread appeared (the
# first PD or CQ): a loaded host may take seconds to get there.
for ((i = 0; i < 600; ++i)); do
  grep -qx droce-progress /proc/"$pid"/task/*/comm 2>/dev/null && break
  sleep 0.05
done
sleep "$from"
a=$(snap)
sleep "$(awk -v a="$from" -v b="$to" 'BEGIN {print b - a}')"
b=$(snap)

awk -v label="$label" -v w="$(awk -v a="$from" -v b="$to" 'BEGIN {print b - a}')" '
  NR == FNR {cpu[$1] = $3; wait[$1] = $4; sl[$1] = $5; vol[$1] = $6; inv[$1] = $7; next}
  ($1 in cpu) {printf "thread_time,%s,%s,%s,%s,%.1f,%.1f,%d,%d,%d\n", label, $2, $1, w, ($3 - cpu[$1]) / 1e6,
    ($4 - wait[$1]) / 1e6, $5 - sl[$1], $6 - vol[$1], $7 - inv[$1]}' <(echo "$a") <(echo "$b") >>"$out"
wait "$pid"
