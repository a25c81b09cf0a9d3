#!/usr/bin/env bash
# An MPI ping-pong of one size at a time (mpi_pingpong.c: MPI_Send/MPI_Recv,
# SECS seconds per run, one-way µs) between two Open MPI ranks over pml ucx on
# droce0/droce1, alternating two build trees in every round so both see the
# same load. Steadier than NetPIPE's short trials on a loaded host. usec is
# the mean one-way time, median_usec the median round trip's half (what other
# load's millisecond preemptions of a rank leave alone).
#   bash tools/bench/stacks/pingpong_ab.sh BASE_BUILD NEW_BUILD SIZE...
#   ROUNDS (default 3), SECS (default 3), UCX_* as the ranks should see them,
#   SETS: device-file settings for both devices ("KEY=VALUE ...", e.g.
#   "progress_profile=shared-host"); SETS_BASE, SETS_NEW: one arm's instead
#   (an A/B of a setting: the same tree twice). Build trees as absolute paths: the runs
#   cd into their run directory, and the daemon is stopped through the tree.
# CSV on stdout: round,arm,bytes,usec,load,median_usec
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${PINGPONG_ONE:-}" ]; then  # SIZE: one run on the devices of $BUILD
  source "$here/../../../tests/stacks/lib.sh"
  need mpicc mpirun
  # shellcheck disable=SC2086  # SETS is a list of KEY=VALUE words
  stacks_host droce-bench-pp 2 ${SETS:-}
  cd "$run"
  mpicc -O2 -o pp "$here/mpi_pingpong.c" || exit 1
  OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self timeout 120 \
    mpirun --allow-run-as-root --oversubscribe -np 1 -x UCX_NET_DEVICES=droce0:1 ./pp "$PINGPONG_ONE" "${SECS:-3}" \
    : -np 1 -x UCX_NET_DEVICES=droce1:1 ./pp "$PINGPONG_ONE" "${SECS:-3}" 2>&1 | awk '/one-way/ {print $6 "," $9}'
  exit 0
fi
[ $# -ge 3 ] || { echo "usage: $0 BASE_BUILD NEW_BUILD SIZE..." >&2; exit 2; }
base=$1 new=$2; shift 2
echo "round,arm,bytes,usec,load,median_usec"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for s in "$@"; do
    for arm in base new; do
      b=$base; [ $arm = new ] && b=$new
      load=$(cut -d' ' -f1 /proc/loadavg)
      sets=${SETS:-}
      [ $arm = base ] && sets=${SETS_BASE:-$sets}
      [ $arm = new ] && sets=${SETS_NEW:-$sets}
      res=$(BUILD=$b SETS=$sets PINGPONG_ONE=$s bash "$0" 2>/dev/null)
      echo "$r,$arm,$s,${res%%,*},$load,${res#*,}"
    done
  done
done
