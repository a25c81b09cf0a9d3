#!/usr/bin/env bash
# NetPIPE (NPopenmpi, 1 B .. 4 MiB) between two Open MPI ranks: over pml ucx on
# droce with fabric devices of each setting given, and over kernel TCP (pml
# ob1, btl tcp on the loopback interface), alternating within each round so
# that all see the same load. Rank 0 on droce0, rank 1 on droce1.
#   bash tools/bench/stacks/netpipe_ab.sh NAME=SETTINGS...   (SETTINGS: KEY=VALUE[,KEY=VALUE]
#                                                             of the device file, or "default")
#   e.g. bash tools/bench/stacks/netpipe_ab.sh default=default trust=rx_icrc_trust=on
#   SETTINGS "build:DIR" runs default devices of another build tree's droce
#   (its droced, verbs provider and droce-ctl), for an A/B of two commits:
#   bash tools/bench/stacks/netpipe_ab.sh base=build:/path/to/other/build new=default
# ROUNDS (default 1), NP_UPPER (largest size, default 4194304). CSV on stdout: round,stack,bytes,usec,mbps,load
# LATENCY=1 also measures, in each round, ib_send_lat -s 8 and UCP tag_lat 8 B
# (UCX_TLS=rc_verbs,ud_verbs,self) on default devices: rows "ib_send_lat" and
# "ucp_tag_lat" (usec: typical one-way latency; mbps empty).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "usage: $0 NAME=SETTINGS..." >&2; exit 2; }
if [ -n "${LATENCY_ONE:-}" ]; then  # ib_send_lat and UCP tag_lat 8 B, server droce0, client droce1
  source "$here/../../../tests/stacks/lib.sh"
  need ib_send_lat ucx_perftest
  stacks_host droce-bench-lat 2
  cd "$run"
  pair() {  # PORT 'SERVER CMD' 'CLIENT CMD (the server address appended)': the client's output
    bash -c "$2" >server.log 2>&1 &
    local server=$!
    wait_listen $server "$1"
    bash -c "$3 127.0.0.1" 2>&1
    wait $server
  }
  p=$((port + 1))
  v=$(pair $p "ib_send_lat -d droce0 -x 1 -s 8 -n 5000 -p $p" "ib_send_lat -d droce1 -x 1 -s 8 -n 5000 -p $p" |
      awk '$1 == 8 && NF >= 5 {print $5}')
  echo "ib_send_lat 8 $v"
  p=$((port + 2))
  u="UCX_TLS=rc_verbs,ud_verbs,self"
  v=$(pair $p "env $u UCX_NET_DEVICES=droce0:1 ucx_perftest -t tag_lat -n 20000 -p $p" \
      "env $u UCX_NET_DEVICES=droce1:1 ucx_perftest -t tag_lat -n 20000 -p $p" | awk '/^Final:/ {print $3}')
  echo "ucp_tag_lat 8 $v"
  exit 0
fi
if [ -n "${NETPIPE_ONE:-}" ]; then  # one NetPIPE run: "tcp", "build:DIR" or the device settings
  if [[ "$NETPIPE_ONE" == build:* ]]; then
    export BUILD="${NETPIPE_ONE#build:}"
    NETPIPE_ONE=default
  fi
  source "$here/../../../tests/stacks/lib.sh"
  need mpirun NPopenmpi
  sets=()
  [ "$NETPIPE_ONE" != tcp ] && [ "$NETPIPE_ONE" != default ] && IFS=, read -ra sets <<<"$NETPIPE_ONE"
  stacks_host droce-bench-np 2 "${sets[@]}"
  cd "$run"
  if [ "$NETPIPE_ONE" = tcp ]; then
    OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo timeout 600 \
      mpirun --allow-run-as-root --oversubscribe -np 2 NPopenmpi -p 0 -u "${NP_UPPER:-4194304}" -o np.out >np.log 2>&1
  else
    OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self timeout 600 \
      mpirun --allow-run-as-root --oversubscribe -np 1 -x UCX_NET_DEVICES=droce0:1 NPopenmpi -p 0 -u "${NP_UPPER:-4194304}" -o np.out \
      : -np 1 -x UCX_NET_DEVICES=droce1:1 NPopenmpi -p 0 -u "${NP_UPPER:-4194304}" -o np.out >np.log 2>&1
  fi
  cat np.out  # bytes, Mbps, seconds (one way)
  exit 0
fi
echo "round,stack,bytes,usec,mbps,load"
for ((r = 1; r <= ${ROUNDS:-1}; ++r)); do
  for spec in "$@" tcp=tcp; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    NETPIPE_ONE="${spec#*=}" bash "$0" "$@" |
      awk -v r=$r -v s="${spec%%=*}" -v load="$load" 'NF >= 3 {printf "%d,%s,%s,%.2f,%.1f,%s\n", r, s, $1, $3 * 1e6, $2, load}'
  done
  if [ "${LATENCY:-0}" = 1 ]; then
    load=$(cut -d' ' -f1 /proc/loadavg)
    LATENCY_ONE=1 bash "$0" "$@" | awk -v r=$r -v load="$load" 'NF == 3 {printf "%d,%s,%s,%s,,%s\n", r, $1, $2, $3, load}'
  fi
done
