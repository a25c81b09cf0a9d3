#!/usr/bin/env bash
# Bandwidth of the ring link through droced's switch (doc/droced.md "The link
# to the daemon"): ib_write_bw 64 KiB between two processes of one run
# directory with direct paths off (DROCED_DIRECT=0), so every frame crosses
# droced. Reports messages per second and droced's copies per switched
# frame: 2 through an mbuf (ring -> mbuf -> ring), 1 ring to ring (the
# status line's ring_to_ring counts those). CSV on stdout:
#   round,build,msg_per_s,switched_frames,ring_to_ring
#   BUILD=DIR ROUNDS=N ITERS=N bash tools/bench/stacks/ring_link.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export DROCED_DIRECT=0
source "$here/../../../tests/stacks/lib.sh"
need ib_write_bw
stacks_host droce-bench-ringlink 2
n=${ITERS:-5000}
echo "round,build,msg_per_s,switched_frames,ring_to_ring"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  p=$((port + r))
  ib_write_bw -d droce0 -x 1 -s 65536 -n "$n" -p $p >"$run/server.log" 2>&1 &
  server=$!
  wait_listen $server $p
  v=$(ib_write_bw -d droce1 -x 1 -s 65536 -n "$n" -p $p 127.0.0.1 2>&1 | awk '$1 == 65536 && NF >= 5 {print $5 * 1e6}')
  wait $server
  status=$("$ctl" daemon status)
  frames=$(sed -n 's/.*device droce0 .* rx_roce \([0-9]*\).*/\1/p' <<<"$status" | head -1)
  r2r=$(sed -n 's/.*ring_to_ring \([0-9]*\).*/\1/p' <<<"$status" | head -1)
  echo "$r,${BUILD:-$(cd "$here/../../.." && pwd)/build},$v,${frames:-0},${r2r:-0}"
done
