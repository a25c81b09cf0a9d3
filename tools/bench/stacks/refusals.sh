#!/usr/bin/env bash
# How many transmitted frames a full direct ring refused and how many gather
# frames were flattened (copied whole) for it: the DROCE_STATS "direct paths"
# lines of both ends of ib_read_bw (the server is the READ responder) and of
# the two ranks of an MPI ping-pong (mpi_pingpong.c over pml ucx: a
# rendezvous message is an RDMA READ of the receiver's), on fresh fabric
# devices of $BUILD (absolute; default the tree of this checkout).
#   bash tools/bench/stacks/refusals.sh [READ_BYTES [PP_BYTES]]   (default 262144 786432)
#   ITERS (ib_read_bw iterations, default 3000), SECS (ping-pong seconds, default 3),
#   SETS (device-file settings, "KEY=VALUE ...").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need mpicc mpirun ib_read_bw
# shellcheck disable=SC2086  # SETS is a list of KEY=VALUE words
stacks_host droce-bench-refusals 2 ${SETS:-}
cd "$run" || exit 1
read_bytes=${1:-262144} pp_bytes=${2:-786432}
DROCE_STATS=1 ib_read_bw -d droce0 -x 1 -s "$read_bytes" -n "${ITERS:-3000}" -p "$port" >server.log 2>&1 &
server=$!
wait_listen $server "$port"
DROCE_STATS=1 timeout 60 ib_read_bw -d droce1 -x 1 -s "$read_bytes" -n "${ITERS:-3000}" -p "$port" 127.0.0.1 \
  >client.out 2>client.log
wait $server
echo "ib_read_bw -s $read_bytes: $(awk -v s="$read_bytes" '$1 == s && NF >= 5 {print $4}' client.out) MB/s"
echo "  server (responder): $(grep -o 'direct paths.*flattened [0-9]*)' server.log | head -1)"
echo "  client: $(grep -o 'direct paths.*flattened [0-9]*)' client.log | head -1)"
mpicc -O2 -o pp "$here/mpi_pingpong.c" || exit 1
OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self timeout 120 \
  mpirun --allow-run-as-root --oversubscribe -np 1 -x DROCE_STATS=1 -x UCX_NET_DEVICES=droce0:1 ./pp "$pp_bytes" \
  "${SECS:-3}" : -np 1 -x DROCE_STATS=1 -x UCX_NET_DEVICES=droce1:1 ./pp "$pp_bytes" "${SECS:-3}" >pp.log 2>&1
echo "MPI ping-pong $pp_bytes: $(grep one-way pp.log | head -1)"
grep -o 'droce[01]: direct paths.*flattened [0-9]*)' pp.log | sed 's/^/  /'
