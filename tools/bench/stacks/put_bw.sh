#!/usr/bin/env bash
# UCT put_bw 64 KiB (rc_verbs, zcopy) against ib_write_bw 64 KiB, the issue's
# goal (put_bw >= 90 % of ib_write_bw), measured in alternation so that both
# see the same load: in each round ib_write_bw, then ucx_perftest with UCX's
# default send queue (UCX_RC_VERBS_TX_QUEUE_LEN=256 WRs in flight), then with
# perftest's depth (128). Server on droce0, client on droce1 (fabric devices
# of a private run directory). CSV on stdout: round,test,value,unit
#   bash tools/bench/stacks/put_bw.sh          (ROUNDS, default 5; ITERS, default 5000)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need ucx_perftest ib_write_bw
stacks_host droce-bench-put 2
n=${ITERS:-5000}
pair() {  # PORT 'SERVER CMD' 'CLIENT CMD (the server address appended)': the client's output
  bash -c "$2" >"$run/server.log" 2>&1 &
  local server=$!
  wait_listen $server "$1"
  bash -c "$3 127.0.0.1" 2>&1
  wait $server
}
echo "round,test,value,unit"
for ((r = 1; r <= ${ROUNDS:-5}; ++r)); do
  echo "# round $r $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >&2
  p=$((port + 1))
  v=$(pair $p "ib_write_bw -d droce0 -x 1 -s 65536 -n $n -p $p" "ib_write_bw -d droce1 -x 1 -s 65536 -n $n -p $p" |
      awk '$1 == 65536 && NF >= 5 {print $5 * 1e6}')
  echo "$r,ib_write_bw,$v,msg/s"
  for depth in 256 128; do
    p=$((port + 2))
    v=$(pair $p "UCX_RC_VERBS_TX_QUEUE_LEN=$depth ucx_perftest -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n $n -p $p" \
        "UCX_RC_VERBS_TX_QUEUE_LEN=$depth ucx_perftest -d droce1:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -n $n -p $p" |
        awk '/^Final:/ {print $9}')
    echo "$r,put_bw_txq$depth,$v,msg/s"
  done
done
