#!/usr/bin/env bash
# UCT put_bw 64 KiB (rc_verbs, zcopy; server on droce0, client on droce1) under
# two or more builds of droce, alternating within each round so that every
# build sees the same load, with the provider's counters of both ends
# (DROCE_STATS=1): messages per second, and per message the empty polls that
# ran no round, the progress threads' sleeps and the receive bursts.
#   bash tools/bench/stacks/put_bw_ab.sh NAME=BUILD_DIR NAME=BUILD_DIR...   (ROUNDS, default 3; ITERS, default 5000)
# WINDOW is ucx_perftest's -O, the PUTs outstanding (default 1, put_bw's own:
# stop-and-wait; 128 is ib_write_bw's default tx depth).
# CLIENT_WRAP runs the client (the sender) under a tool, e.g.
#   CLIENT_WRAP="valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p --toggle-collect=*PollCq*"
# SERVER_WRAP the same for the server (the receiver of the PUTs' frames).
# CSV on stdout: round,build,side,msg_per_s,skipped_polls_per_msg,sleeps_per_msg,rx_bursts_per_msg,load
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ "${PUT_BW_ONE:-0}" = 1 ]; then  # one run with $BUILD: the client's rate, then both ends' counter lines
  source "$here/../../../tests/stacks/lib.sh"
  need ucx_perftest
  stacks_host "droce-bench-ab$$" 2
  p=$((port + 3))
  n=${ITERS:-5000}
  DROCE_STATS=1 ${SERVER_WRAP:-} ucx_perftest -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O "${WINDOW:-1}" -n "$n" -p $p \
    >"$run/server.log" 2>"$run/server.err" &
  server=$!
  wait_listen $server $p
  DROCE_STATS=1 ${CLIENT_WRAP:-} ucx_perftest -d droce1:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O "${WINDOW:-1}" -n "$n" -p $p 127.0.0.1 \
    >"$run/client.log" 2>"$run/client.err"
  wait $server
  echo "rate $(awk '/^Final:/ {print $9}' "$run/client.log")"
  for side in server client; do
    awk -v side=$side '
      /empty polls that ran no round/ {skipped += $NF}
      /progress polls/ {for (i = 1; i < NF; ++i) if ($i == "sleeps") sleeps += $(i + 1)}
      / device:/ {for (i = 1; i < NF; ++i) if ($i == "rx_bursts") bursts += $(i + 1)}
      END {print side, skipped + 0, sleeps + 0, bursts + 0}' "$run/$side.err"
  done
  exit 0
fi
[ $# -ge 1 ] || { echo "usage: $0 NAME=BUILD_DIR [NAME=BUILD_DIR...]" >&2; exit 2; }
n=${ITERS:-5000}
echo "round,build,side,msg_per_s,skipped_polls_per_msg,sleeps_per_msg,rx_bursts_per_msg,load"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for spec in "$@"; do
    name=${spec%%=*}
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$(PUT_BW_ONE=1 WINDOW=${WINDOW:-1} BUILD="${spec#*=}" ITERS=$n bash "$0")
    rate=$(awk '$1 == "rate" {print $2}' <<<"$out")
    awk -v r=$r -v b="$name" -v n=$n -v rate="$rate" -v load="$load" '$1 == "server" || $1 == "client" {
      printf "%d,%s,%s,%s,%.1f,%.2f,%.2f,%s\n", r, b, $1, rate, $2 / n, $3 / n, $4 / n, load}' <<<"$out"
  done
done
