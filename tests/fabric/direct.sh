#!/usr/bin/env bash
# Direct rings between the processes of one droced (doc/droced.md "Direct
# rings"): frames between two attached processes take the pair's own rings,
# not the daemon's switch, from the pair's first switched frame on; only that
# pair maps them (a third process on the same device, which exchanges no
# frame, gets none, and the daemon never maps one); a switch knob on a device
# withdraws its processes' paths (frames cross the switch again) and clearing
# it brings them back; a process SIGKILLed while its peer writes into their
# ring: the daemon withdraws the path, the peer's QP ends in retry-exceeded;
# a READ responder held back by a full (4-slot) ring waits armed and its peer
# wakes it.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
single_host droce-direct
p=${SIDE_PORT:-$((20000 + ($$ + 7) % 20000))}
after_check() { stop_tracked; }
# Waits until `link show DEV` lists N processes.
wait_attached() {
  for _ in $(seq 100); do
    [ "$("$ctl" link show "$1" | grep -c 'process pid')" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
paths() { "$ctl" daemon status | sed -n 's/.*direct paths: \([0-9]*\).*/\1/p'; }
wait_paths() {
  for _ in $(seq 50); do [ "$(paths)" = "$1" ] && return 0; sleep 0.1; done
  echo "direct paths: $(paths), expected $1"; return 1
}

"$ctl" link add droce0 ip 10.0.0.1 || exit 1
"$ctl" link add droce1 ip 10.0.0.2 || exit 1
eval "$("$ctl" env)"

# droce0 <-> droce1 ib_write_bw: the client's frames take the ring (its
# DROCE_STATS line counts them), the daemon's switch saw almost none. A
# count of WRITEs, not a duration: 1000 x 64 KiB are 16000 frames at the
# device's MTU of 4096 however slow the host, and more than 10000 of them
# through the ring is most (only those sent before the client applies its
# path cross the switch). A duration (-D 2) moved under 6000 frames in all
# when the pair shared one loaded CPU.
direct_used() {
  timeout "$t" ib_write_bw -p $p -d droce0 -x 1 -s 65536 -n 1000 >"$run/s.log" 2>&1 &
  local s=$!; track $s
  wait_listen $s $p
  DROCE_STATS=1 timeout "$t" ib_write_bw -p $p -d droce1 -x 1 -s 65536 -n 1000 127.0.0.1 >"$run/c.log" 2>&1 || { cat "$run/c.log"; return 1; }
  wait $s || { cat "$run/s.log"; return 1; }
  grep 'direct paths' "$run/c.log"
  local tx; tx=$(sed -n 's/.*direct paths [0-9]* (table [0-9]*): tx \([0-9]*\).*/\1/p' "$run/c.log")
  [ "${tx:-0}" -gt 10000 ] || { echo "only ${tx:-0} of the client's frames through the ring"; grep 'qp [0-9]*: tx' "$run/c.log"; return 1; }
  grep -q "direct path 1: process" "$run/droced.log" || { echo "the daemon set up no path"; return 1; }
  # The default geometry (doc/droced.md "Why 64 slots").
  grep -q "direct path 1: process .*, 64 slots each way" "$run/droced.log" ||
    { echo "not 64 slots each way:"; grep "direct path 1: process" "$run/droced.log"; return 1; }
}
check "ib_write_bw droce0 <-> droce1 moves its frames through the pair's ring" direct_used

# Three processes: A and B (a pair exchanging frames), C a third process on
# A's device that exchanges none. A's and B's ring is mapped by A and B
# only; C, silent, has no path at all.
only_the_pair() {
  # A and B run until killed below (100,000 round trips took under a second).
  ibv_rc_pingpong -p $p -d droce0 -g 1 -n 100000000 >"$run/a.log" 2>&1 & local a=$!; track $a
  ibv_rc_pingpong -p $((p + 1)) -d droce0 -g 1 -n 10 >"$run/c3.log" 2>&1 & local c=$!; track $c
  wait_listen $a $p
  ibv_rc_pingpong -p $p -d droce1 -g 1 -n 100000000 127.0.0.1 >"$run/b.log" 2>&1 & local b=$!; track $b
  wait_attached droce0 2 && wait_attached droce1 1 || { echo "not attached"; return 1; }
  wait_paths 1 || return 1
  sleep 0.5  # each side reads its paths within a millisecond of its next poll
  kill -0 $b || { echo "B exited early"; cat "$run/b.log"; return 1; }
  local dpid; dpid=$(cat "$run/droced.pid")
  local ring; ring=$(grep -o "droce-ring-[0-9]*-\($a-$b\|$b-$a\)" /proc/$a/maps | head -1)
  [ -n "$ring" ] || { echo "A ($a) maps no ring shared with B ($b)"; grep droce-ring /proc/$a/maps; return 1; }
  echo "A-B ring: $ring"
  grep -q "$ring " /proc/$b/maps || { echo "B does not map $ring"; return 1; }
  grep -q "$ring " /proc/$c/maps && { echo "the third process C ($c) maps A's and B's ring"; return 1; }
  grep -q "droce-ring-" /proc/$c/maps && { echo "C, which sent nothing, maps a ring"; grep droce-ring /proc/$c/maps; return 1; }
  # No descriptor of any ring stays open anywhere (mappings only), and the
  # daemon neither maps nor holds one.
  for x in $a $b $c $dpid; do
    ls -l /proc/$x/fd 2>/dev/null | grep -q 'memfd:droce-ring' && { echo "process $x holds a ring descriptor"; return 1; }
  done
  grep -q 'droce-ring' /proc/$dpid/maps && { echo "droced maps a ring"; return 1; }
  kill $a $b $c 2>/dev/null; wait $a $b $c 2>/dev/null
  wait_paths 0
}
check "a pair's ring is mapped by the pair only (not a third process, not droced)" only_the_pair

# A knob on droce1 withdraws the paths of droce1's processes; clearing it
# brings them back (the pair's next switched frame asks again).
knob_fallback() {
  ibv_rc_pingpong -p $p -d droce0 -g 1 -n 100000000 >"$run/k0.log" 2>&1 & local a=$!; track $a
  wait_listen $a $p
  ibv_rc_pingpong -p $p -d droce1 -g 1 -n 100000000 127.0.0.1 >"$run/k1.log" 2>&1 & local b=$!; track $b
  wait_attached droce0 1 && wait_attached droce1 1 || { echo "not attached"; return 1; }
  wait_paths 1 || return 1
  "$ctl" switch set droce1 loss=0.01 || return 1
  wait_paths 0 || return 1
  "$ctl" switch clear droce1 || return 1
  wait_paths 1 || return 1
  "$ctl" switch set droce0 mirror "$run/m.pcap" || return 1
  wait_paths 0 || return 1
  "$ctl" switch set droce0 mirror off || return 1
  wait_paths 1 || return 1
  kill $a $b 2>/dev/null; wait $a $b 2>/dev/null
  wait_paths 0
}
check "a switch knob withdraws the device's direct paths, clearing it restores them" knob_fallback

# SIGKILL the passive side of an ib_write_bw on droce0 while its peer (also
# on droce0) writes into their ring.
kill_direct() {
  ib_write_bw -p $p -d droce0 -x 1 -D 20 >"$run/ks.log" 2>&1 &
  local victim=$!; track $victim
  wait_listen $victim $p
  DROCE_STATS=1 timeout "$t" ib_write_bw -p $p -d droce0 -x 1 -D 20 127.0.0.1 >"$run/kc.log" 2>&1 &
  local peer=$!; track $peer
  sleep 3
  "$ctl" link show droce0 | grep "process pid"
  "$ctl" link show droce0 | grep -q "pid $victim .*direct paths 1" || { echo "victim $victim has no direct path"; return 1; }
  kill -9 $victim; wait $victim 2>/dev/null
  wait_paths 0 || return 1
  wait $peer; local prc=$?
  echo "peer exit $prc"; grep -E 'Failed status|direct paths' "$run/kc.log"
  [ $prc -ne 124 ] || { echo "the peer hung"; return 1; }
  [ $prc -le 128 ] || { echo "the peer died of signal $((prc - 128))"; return 1; }
  grep -q "Failed status 12" "$run/kc.log" || { echo "the peer saw no retry-exceeded completion"; return 1; }
  local tx; tx=$(sed -n 's/.*direct paths [0-9]* (table [0-9]*): tx \([0-9]*\).*/\1/p' "$run/kc.log")
  [ "${tx:-0}" -gt 1000 ] || { echo "the peer sent only ${tx:-0} frames through the ring"; return 1; }
  "$ctl" daemon status >/dev/null || { echo "the daemon is gone"; return 1; }
  timeout "$t" ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200 >"$run/n.log" 2>&1 & local s=$!
  wait_listen $s $p
  timeout "$t" ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200 127.0.0.1 || return 1
  wait $s
}
check "SIGKILL a process writing through a direct ring: path withdrawn, peer gets retry-exceeded, new pair works" kill_direct

# A READ responder held back by a full ring: with 4-slot rings the server of
# ib_read_bw -s 262144 (its progress thread alone drives it: the program waits
# in a TCP read) fills its ring on every response; its hot phase waits armed
# for the client to free slots (DROCE_STATS "on a full ring"), the client's
# receive wakes it ("producer wakeups sent"), and the run completes. The
# server's thread does not spin (progress_spins=0): with its 200 default
# spins a client that frees slots within them never lets the wait happen
# (a quiet host counted 5 waits in 300 READs, a CI host none).
full_ring_wait() {
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  DROCED_RING_SLOTS=4 "$ctl" link add droce0 ip 10.0.0.1 set progress_spins=0 || return 1
  "$ctl" link add droce1 ip 10.0.0.2 || return 1
  DROCE_STATS=1 timeout "$t" ib_read_bw -p $p -d droce0 -x 1 -s 262144 -n 300 >"$run/rs.log" 2>&1 &
  local s=$!; track $s
  wait_listen $s $p
  DROCE_STATS=1 timeout "$t" ib_read_bw -p $p -d droce1 -x 1 -s 262144 -n 300 127.0.0.1 >"$run/rc.log" 2>&1 ||
    { cat "$run/rc.log"; return 1; }
  wait $s || { cat "$run/rs.log"; return 1; }
  grep -q "direct path 1: process .*, 4 slots each way" "$run/droced.log" ||
    { echo "not 4 slots each way:"; grep "direct path" "$run/droced.log"; return 1; }
  awk '$1 == 262144 && NF >= 5 {found = 1} END {exit !found}' "$run/rc.log" || { echo "no result"; cat "$run/rc.log"; return 1; }
  grep -E "progress stream waits|direct paths" "$run/rs.log"
  grep "direct paths" "$run/rc.log"
  local w; w=$(sed -n 's/.*on a full ring \([0-9]*\).*/\1/p' "$run/rs.log")
  [ "${w:-0}" -gt 0 ] || { echo "the server's hot phase never waited on its full ring"; return 1; }
  w=$(sed -n 's/.*producer wakeups sent \([0-9]*\).*/\1/p' "$run/rc.log")
  [ "${w:-0}" -gt 0 ] || { echo "the client never woke the server"; return 1; }
}
check "a READ responder held back by a full 4-slot ring waits armed and its peer wakes it" full_ring_wait

finish direct
