#!/usr/bin/env bash
# UCT put_bw 64 KiB (rc_verbs, zcopy) against ib_write_bw 64 KiB, the issue's
# goal (put_bw >= 90 % of ib_write_bw), like for like and in alternation so
# that all see the same load. ucx_perftest's put_bw keeps one zcopy PUT
# outstanding unless told otherwise (UCX 1.13 perftest.c: put_bw's window is
# 1; `-O N` sets it): stop-and-wait, one message per round trip. ib_write_bw
# keeps its tx depth (-t, default 128) in flight. So each round measures both
# pairings: window 128 (ib_write_bw -t 128, put_bw -O 128) and window 1
# (ib_write_bw -t 1, put_bw as run by default). Server on droce0, client on
# droce1 (fabric devices of a private run directory). CSV on stdout:
# round,test,value,unit
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
  for window in 128 1; do
    p=$((port + 1))
    v=$(pair $p "ib_write_bw -d droce0 -x 1 -s 65536 -t $window -n $n -p $p" \
        "ib_write_bw -d droce1 -x 1 -s 65536 -t $window -n $n -p $p" |
        awk '$1 == 65536 && NF >= 5 {print $5 * 1e6}')
    echo "$r,ib_write_bw_t$window,$v,msg/s"
    p=$((port + 2))
    v=$(pair $p "ucx_perftest -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O $window -n $n -p $p" \
        "ucx_perftest -d droce1:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O $window -n $n -p $p" |
        awk '/^Final:/ {print $9}')
    echo "$r,put_bw_O$window,$v,msg/s"
  done
done
