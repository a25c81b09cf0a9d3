#!/usr/bin/env bash
# Where an MPI ping-pong's time goes, per verbs call: the MPI ping-pong of
# pingpong_ab.sh (mpi_pingpong.c, pml ucx on droce0/droce1) with
# verbs_timeline.c preloaded in both ranks, which records every
# ibv_post_send, ibv_poll_cq that returned completions and
# ibv_post_srq_recv (CLOCK_MONOTONIC start and end, bytes, completions; the
# empty polls in between counted) and writes them at exit to
# OUT/shim.<pid>.bin. Then:
#   python3 verbs_timeline_messages.py OUT 1000 [N]   per message: posts, receive polls, gaps (N: print N typical ones)
#   python3 verbs_timeline_long.py OUT 10             calls longer than 10 us, their share of the time
#   python3 verbs_timeline_switches.py OUT         involuntary context switches around them
#   python3 verbs_timeline_stalls.py OUT           with PERF=1: what the slow messages' extra time was
#                                                  (off the CPU, and to whom; or on it with no event)
#   BUILD=/abs/build OUT=/tmp/x SIZE=65536 SECS=1 [SETS="k=v ..."] [PERF=1] bash verbs_timeline.sh [ENV=VALUE...]
# PERF=1 also records, system-wide and on CLOCK_MONOTONIC (the shim's clock),
# the scheduler's switches, user page faults and function-call IPIs into
# OUT/sched.txt (perf record -a; root).
# DROCE_STATS of both ranks go to OUT/run.log. A diagnostic: the wrappers
# cost ~40 ns a call (two clock reads), and a getrusage per call over 10 us.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need mpicc mpirun
# shellcheck disable=SC2086  # SETS is a list of KEY=VALUE words
stacks_host droce-bench-timeline 2 ${SETS:-}
cd "$run"
mpicc -O2 -o pp "$here/mpi_pingpong.c" || exit 1
gcc -O2 -shared -fPIC -o timeline.so "$here/verbs_timeline.c" -ldl || exit 1
export SHIM_DIR=${OUT:?OUT=directory for the traces}
mkdir -p "$SHIM_DIR" && rm -f "$SHIM_DIR"/shim.*.bin
pre="$run/timeline.so:$LD_PRELOAD"
s=${SIZE:-65536}
perf_pid=
if [ "${PERF:-0}" = 1 ]; then
  perf record -q -k CLOCK_MONOTONIC -a -o "$SHIM_DIR/sched.data" -e sched:sched_switch -e exceptions:page_fault_user \
    -e irq_vectors:call_function_entry -e irq_vectors:call_function_single_entry >/dev/null 2>&1 &
  perf_pid=$!
fi
env OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self DROCE_STATS=1 "$@" timeout 120 \
  mpirun --allow-run-as-root --oversubscribe -np 1 -x SHIM_DIR -x LD_PRELOAD="$pre" -x UCX_NET_DEVICES=droce0:1 ./pp "$s" "${SECS:-1}" \
  : -np 1 -x SHIM_DIR -x LD_PRELOAD="$pre" -x UCX_NET_DEVICES=droce1:1 ./pp "$s" "${SECS:-1}" >"$SHIM_DIR/run.log" 2>&1
if [ -n "$perf_pid" ]; then
  kill -INT "$perf_pid" && wait "$perf_pid"
  perf script -i "$SHIM_DIR/sched.data" >"$SHIM_DIR/sched.txt" 2>/dev/null && rm -f "$SHIM_DIR/sched.data"
fi
grep one-way "$SHIM_DIR/run.log"
