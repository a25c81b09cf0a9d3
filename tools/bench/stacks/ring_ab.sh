#!/usr/bin/env bash
# The direct rings' geometry against the rendezvous range: in every round, for
# each arm (a daemon environment), the MPI ping-pong of pingpong_ab.sh
# (mpi_pingpong.c over pml ucx, rank 0 on droce0, rank 1 on droce1, median and
# mean one-way µs) at each size, then ib_read_bw -s 262144 and ib_write_bw -s
# 65536 (server droce0, client droce1: MB/s), all on one fresh pair of fabric
# devices per arm and round. Arms alternate within a round so all see the same load.
#   bash tools/bench/stacks/ring_ab.sh NAME=KEY=VALUE[,KEY=VALUE]... -- [SIZE...]   (no size: perftest only)
#   e.g. bash tools/bench/stacks/ring_ab.sh s32=DROCED_RING_SLOTS=32 s256=DROCED_RING_SLOTS=256 -- 262144 786432
#   (an arm "NAME=-" runs the daemon's defaults: 64 slots). BUILD (absolute path) picks the build tree; ROUNDS
#   (default 3), SECS per ping-pong (default 3), PERFTEST=0 skips the perftest pair, ITERS its iterations
#   (default 3000), PERFTEST_SIZES picks its
#   runs (default "read:262144 write:65536": ib_read_bw -s 262144, then ib_write_bw -s 65536), FAIL_DIR
#   (absolute) keeps the logs of a perftest run that printed no number (the client killed by its 60 s
#   timeout: rc124). An arm may set BUILD
#   (absolute) to compare builds: s64main=BUILD=/x/build,DROCED_RING_SLOTS=64.
# Each perftest also gives the server's (the passive side's) progress sleeps per second and, where the
# build counts them, its sleeps with frames a full direct ring held back and the client's wake-ups of it (DROCE_STATS).
# CSV on stdout: round,arm,test,bytes,value,median_usec,load (value: mean one-way µs for "mpi_pp", MB/s
# for "ib_read_bw" and "ib_write_bw").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${RING_AB_ONE:-}" ]; then  # one arm: "test,bytes,value,median" lines
  if [ "$RING_AB_ONE" != - ]; then  # before lib.sh: an arm may set BUILD
    IFS=, read -ra kv <<<"$RING_AB_ONE"
    for e in "${kv[@]}"; do export "${e?}"; done
  fi
  source "$here/../../../tests/stacks/lib.sh"
  need mpicc mpirun ib_read_bw ib_write_bw
  stacks_host "droce-bench-ring$$" 2
  cd "$run"
  [ -z "$RING_AB_SIZES" ] || mpicc -O2 -o pp "$here/mpi_pingpong.c" || exit 1
  for s in $RING_AB_SIZES; do
    r=$(OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self timeout 120 \
      mpirun --allow-run-as-root --oversubscribe -np 1 -x UCX_NET_DEVICES=droce0:1 ./pp "$s" "${SECS:-3}" \
      : -np 1 -x UCX_NET_DEVICES=droce1:1 ./pp "$s" "${SECS:-3}" 2>&1 | awk '/one-way/ {print $6 "," $9}')
    echo "mpi_pp,$s,${r:-,}"
  done
  [ "${PERFTEST:-1}" = 1 ] || exit 0
  pair() {  # PORT TOOL SIZE: the client's average MB/s; the server's DROCE_STATS in server.log
    DROCE_STATS=1 "$2" -d droce0 -x 1 -s "$3" -n "${ITERS:-3000}" -p "$1" >server.log 2>&1 &
    local server=$!
    wait_listen $server "$1"
    local t0 t1
    t0=$(date +%s.%N)
    DROCE_STATS=1 timeout 60 "$2" -d droce1 -x 1 -s "$3" -n "${ITERS:-3000}" -p "$1" 127.0.0.1 >client.out 2>client.log
    local rc=$?
    t1=$(date +%s.%N)
    wait $server
    local v; v=$(awk -v s="$3" '$1 == s && NF >= 5 {print $4}' client.out)
    echo "$v"
    # A run that printed no number: its logs, for a look (FAIL_DIR, absolute).
    if [ -z "$v" ] && [ -n "${FAIL_DIR:-}" ]; then
      local d="$FAIL_DIR/$2-$3-$$-rc$rc"
      mkdir -p "$d" && cp client.out client.log server.log "$d/" 2>/dev/null
    fi
    secs=$(echo "$t1 - $t0" | bc -l)
  }
  # The passive side (the server, driven only by its progress thread): its
  # progress sleeps per second of the client's run, and its sleeps with frames
  # a full direct ring held back ("full-ring sleeps", where DROCE_STATS has them).
  server_sleeps() {  # TEST SIZE
    local sl fr
    sl=$(sed -n 's/.*progress polls [0-9]* sleeps \([0-9]*\).*/\1/p' server.log | head -1)
    fr=$(sed -n 's/.*full-ring sleeps \([0-9]*\).*/\1/p' server.log | head -1)
    [ -z "$sl" ] || echo "$1_server_sleeps_per_s,$2,$(echo "$sl / $secs" | bc),"
    [ -z "$fr" ] || echo "$1_server_full_ring_sleeps,$2,$fr,"
    fr=$(sed -n 's/.*producer wakeups sent \([0-9]*\).*/\1/p' client.log | head -1)
    [ -z "$fr" ] || echo "$1_client_producer_wakeups,$2,$fr,"
    # Its hot phase: timed hot sleeps, and untimed armed waits (stream waits; of them, waits on a full ring).
    fr=$(sed -n 's/.* hot sleeps \([0-9]*\).*/\1/p' server.log | head -1)
    [ -z "$fr" ] || echo "$1_server_hot_sleeps,$2,$fr,"
    fr=$(sed -n 's/.*progress stream waits \([0-9]*\).*/\1/p' server.log | head -1)
    [ -z "$fr" ] || echo "$1_server_stream_waits,$2,$fr,"
    fr=$(sed -n 's/.*on a full ring \([0-9]*\).*/\1/p' server.log | head -1)
    [ -z "$fr" ] || echo "$1_server_ring_waits,$2,$fr,"
  }
  k=4
  for t in ${PERFTEST_SIZES:-read:262144 write:65536}; do  # TOOL:BYTES, tool ib_read_bw or ib_write_bw
    tool=ib_${t%%:*}_bw bytes=${t#*:}
    echo "$tool,$bytes,$(pair $((port + k)) "$tool" "$bytes"; echo "$secs" >secs),"
    secs=$(cat secs); server_sleeps "$tool" "$bytes"
    k=$((k + 1))
  done
  exit 0
fi
arms=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do arms+=("$1"); shift; done
[ $# -ge 1 ] && [ ${#arms[@]} -ge 1 ] || { echo "usage: $0 NAME=KEY=VALUE[,KEY=VALUE]... -- [SIZE...]" >&2; exit 2; }
shift
echo "round,arm,test,bytes,value,median_usec,load"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for a in "${arms[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    RING_AB_ONE="${a#*=}" RING_AB_SIZES="$*" bash "$0" 2>/dev/null | while IFS= read -r line; do
      echo "$r,${a%%=*},$line,$load"
    done
  done
done
