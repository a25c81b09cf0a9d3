#!/usr/bin/env bash
# The fabric daemon stopped (droce-ctl daemon stop) or SIGKILLed while
# programs run, then started again (doc/droced.md):
#  - daemon_loss.c (one process, droce0 and droce1, an RC pair across the
#    daemon): IBV_EVENT_PORT_ERR, flushed receives, QPs in ERR, port DOWN;
#    after the restart IBV_EVENT_PORT_ACTIVE and new QPs move verified data;
#  - ib_write_bw droce0 <-> droce1 with the daemon killed mid-transfer: both
#    sides end (an error, never a hang or a crash), and after the restart a
#    new pair works.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
prog=${DAEMON_LOSS:-$build/tests/fabric/daemon_loss}
single_host droce-dloss
p=${SIDE_PORT:-$((20000 + ($$ + 7) % 20000))}
wait_for() {  # file, pattern, seconds
  for _ in $(seq $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
lose() {  # stop | kill
  if [ "$1" = stop ]; then
    "$ctl" daemon stop
  else
    kill -9 "$(cat "$run/droced.pid")"
  fi
}
restart() {
  for _ in $(seq 50); do "$ctl" daemon status >/dev/null 2>&1 || break; sleep 0.1; done
  "$ctl" daemon start
}

"$ctl" link add droce0 ip 10.0.0.1 || exit 1
"$ctl" link add droce1 ip 10.0.0.2 || exit 1
eval "$("$ctl" env)"

# One program: port events, flushes, and new QPs after the restart.
one_program() {  # stop | kill
  local log="$run/prog-$1.log"
  : >"$log"
  timeout "$t" "$prog" droce0 droce1 >"$log" 2>&1 &
  local pid=$!
  wait_for "$log" '^READY' 60 || { cat "$log"; kill $pid; return 1; }
  lose "$1" || return 1
  wait_for "$log" '^LOST' 30 || { cat "$log"; kill $pid; return 1; }
  kill -0 $pid || { echo "the program died"; cat "$log"; return 1; }
  restart || return 1
  wait $pid; local rc=$?
  cat "$log"
  [ $rc -eq 0 ] && grep -q '^OK' "$log"
}
check "daemon stopped: PORT_ERR, receives flushed, QPs in ERR; back: PORT_ACTIVE, new QPs work" one_program stop
check "daemon SIGKILLed: PORT_ERR, receives flushed, QPs in ERR; back: PORT_ACTIVE, new QPs work" one_program kill
check "daemon SIGKILLed again (same programs' ranges)" one_program kill

# The daemon killed under perftest traffic through it: both ends finish with
# an error (no hang: timeout's 124; no crash: a signal's 128+N).
under_traffic() {
  timeout "$t" ib_write_bw -p $p -d droce0 -x 1 -D 15 >"$run/ts.log" 2>&1 &
  local server=$!
  wait_listen $server $p
  timeout "$t" ib_write_bw -p $p -d droce1 -x 1 -D 15 127.0.0.1 >"$run/tc.log" 2>&1 &
  local client=$!
  sleep 4
  lose kill
  wait $server; local src=$?
  wait $client; local crc=$?
  echo "--- server exit $src"; tail -5 "$run/ts.log"
  echo "--- client exit $crc"; tail -5 "$run/tc.log"
  local rc=0
  for x in $src $crc; do
    [ $x -eq 124 ] && { echo "a side hung"; rc=1; }
    [ $x -gt 128 ] && { echo "a side crashed (signal $((x - 128)))"; rc=1; }
  done
  restart || return 1
  timeout "$t" ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200 >"$run/ps.log" 2>&1 &
  local ps=$!
  wait_listen $ps $p
  timeout "$t" ibv_rc_pingpong -p $p -d droce1 -g 1 -n 200 127.0.0.1 >"$run/pc.log" 2>&1 || rc=1
  wait $ps || rc=1
  tail -2 "$run/pc.log"
  return $rc
}
check "daemon SIGKILLed under ib_write_bw: both ends end, no hang or crash; a new pair works" under_traffic

finish daemon_loss
