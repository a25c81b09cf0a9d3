#!/usr/bin/env bash
# End to end on the host fabric (doc/droced.md): droce0 (10.0.0.1) and droce1
# (10.0.0.2) registered with no wire; droced (started by droce-ctl) switches
# their frames. Server and client of unmodified verbs programs both on
# droce0 (two processes, one device), then across droce0/droce1; a client
# killed mid-transfer (the daemon survives, frees its range, a new pair
# works); malformed control requests.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
single_host droce-fabric
# The programs' TCP side channel: a port of our own (other test runs on the
# machine use perftest's and rc_pingpong's default 18515).
p=${SIDE_PORT:-$((20000 + $$ % 20000))}
pair() {  # 'SERVER CMD' 'CLIENT CMD'
  timeout "$t" bash -c "$1" >"$run/server.log" 2>&1 &
  local server=$!
  wait_listen $server $p
  timeout "$t" bash -c "$2" >"$run/client.log" 2>&1
  local client_rc=$?
  wait $server; local server_rc=$?
  echo "--- server ($server_rc): $1"; cat "$run/server.log"
  echo "--- client ($client_rc): $2"; cat "$run/client.log"
  [ $client_rc -eq 0 ] && [ $server_rc -eq 0 ]
}

"$ctl" link add droce0 ip 10.0.0.1 ip fd00::1 || exit 1
"$ctl" link add droce1 ip 10.0.0.2 ip fd00::2 || exit 1
eval "$("$ctl" env)"
check "droced started by link add" bash -c "'$ctl' daemon status | grep -q 'device droce0' && test -s '$run/droced.pid'"

check "ibv_rc_pingpong, server and client on droce0" pair \
  "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 500" "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 500 127.0.0.1"
check "ib_write_bw, server and client on droce0" pair \
  "ib_write_bw -p $p -d droce0 -x 1 -D 2" "ib_write_bw -p $p -d droce0 -x 1 -D 2 127.0.0.1"
check "ibv_rc_pingpong droce0 <-> droce1" pair \
  "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 500" "ibv_rc_pingpong -p $p -d droce1 -g 1 -n 500 127.0.0.1"
check "ibv_rc_pingpong droce0 <-> droce1 over IPv6 (ND answered by droced)" pair \
  "ibv_rc_pingpong -p $p -d droce0 -g 2 -n 200" "ibv_rc_pingpong -p $p -d droce1 -g 2 -n 200 127.0.0.1"
check "ib_send_bw droce0 <-> droce1" pair \
  "ib_send_bw -p $p -d droce0 -x 1 -D 2" "ib_send_bw -p $p -d droce1 -x 1 -D 2 127.0.0.1"
# UD: datagrams between processes of one device and across devices.
check "ibv_ud_pingpong, server and client on droce0" pair \
  "ibv_ud_pingpong -p $p -d droce0 -g 1 -n 300" "ibv_ud_pingpong -p $p -d droce0 -g 1 -n 300 127.0.0.1"
check "ibv_ud_pingpong droce0 <-> droce1" pair \
  "ibv_ud_pingpong -p $p -d droce0 -g 1 -n 300" "ibv_ud_pingpong -p $p -d droce1 -g 1 -n 300 127.0.0.1"
# Multicast: two member processes (droce0 and droce1) join 239.1.2.3, a
# third process on droce0 sends; droced floods the group's frames, each
# device delivers them to its attached QPs.
mcast_test() {
  local mc=${UD_MCAST:-$build/tests/fabric/ud_mcast}
  timeout "$t" "$mc" recv droce0 239.1.2.3 20 >"$run/m0.log" 2>&1 & local m0=$!
  timeout "$t" "$mc" recv droce1 239.1.2.3 20 >"$run/m1.log" 2>&1 & local m1=$!
  for _ in $(seq 100); do grep -q ready "$run/m0.log" && grep -q ready "$run/m1.log" && break; sleep 0.1; done
  timeout "$t" "$mc" send droce0 239.1.2.3 20 >"$run/ms.log" 2>&1; local s=$?
  wait $m0; local r0=$?; wait $m1; local r1=$?
  echo "--- sender ($s)"; cat "$run/ms.log"; echo "--- member droce0 ($r0)"; cat "$run/m0.log"
  echo "--- member droce1 ($r1)"; cat "$run/m1.log"
  [ $s -eq 0 ] && [ $r0 -eq 0 ] && [ $r1 -eq 0 ]
}
check "UD multicast: two member processes (droce0, droce1), a sender on droce0" mcast_test
check "ib_send_bw -c UD droce0 <-> droce1" pair \
  "ib_send_bw -p $p -d droce0 -x 1 -c UD -D 2" "ib_send_bw -p $p -d droce1 -x 1 -c UD -D 2 127.0.0.1"
check "ib_send_lat -c UD, server and client on droce0" pair \
  "ib_send_lat -p $p -d droce0 -x 1 -c UD -n 500" "ib_send_lat -p $p -d droce0 -x 1 -c UD -n 500 127.0.0.1"
check "ib_send_lat -c UD droce0 <-> droce1" pair \
  "ib_send_lat -p $p -d droce0 -x 1 -c UD -n 200" "ib_send_lat -p $p -d droce1 -x 1 -c UD -n 200 127.0.0.1"
check "ib_read_bw droce1 <-> droce0" pair \
  "ib_read_bw -p $p -d droce1 -x 1 -D 2" "ib_read_bw -p $p -d droce0 -x 1 -D 2 127.0.0.1"
# Plain qperf: its RC tests exchange LIDs only; fabric devices have LIDs
# (droce-ctl assigns them) and a LID-addressed QP reaches the device with it.
qperf_pair() {  # side-channel port (one per run: the last server's may linger), number of tests, the client's args
  local qp=$1 want=$2; shift 2
  timeout "$t" qperf -lp $qp >"$run/qs.log" 2>&1 &
  local server=$!
  sleep 1
  timeout "$t" qperf -lp $qp 127.0.0.1 -t 2 "$@" >"$run/qc.log" 2>&1
  local rc=$?
  kill $server 2>/dev/null; wait $server 2>/dev/null
  cat "$run/qc.log"
  # qperf reports some failures with exit status 0: every test needs its result line.
  [ $rc -eq 0 ] && ! grep -qiE "fail|error" "$run/qc.log" && [ "$(grep -cE '(latency|bw) += ' "$run/qc.log")" = "$want" ]
}
check "droce-ctl gives fabric devices LIDs 1 and 2" bash -c "'$ctl' link show | grep -q 'droce0: fabric lid 1 ' && '$ctl' link show | grep -q 'droce1: fabric lid 2 '"
check "plain qperf (first device, droce0, both sides): rc_lat rc_bw rc_rdma_write_bw rc_rdma_read_lat" \
  qperf_pair $((p + 3)) 4 rc_lat rc_bw rc_rdma_write_bw rc_rdma_read_lat
check "qperf -li droce1:1 -ri droce0:1 (no lid-peer): rc_lat rc_bw" qperf_pair $((p + 4)) 2 -li droce1:1 -ri droce0:1 rc_lat rc_bw

# Four processes at once, three of them on droce0: two pairs side by side.
four() {
  local p2=$((p + 1)) rc=0
  timeout "$t" ib_write_bw -p $p -d droce0 -x 1 -D 2 >"$run/a_s.log" 2>&1 & local a_s=$!
  timeout "$t" ib_send_bw -p $p2 -d droce0 -x 1 -D 2 >"$run/b_s.log" 2>&1 & local b_s=$!
  wait_listen $a_s $p; wait_listen $b_s $p2
  timeout "$t" ib_write_bw -p $p -d droce0 -x 1 -D 2 127.0.0.1 >"$run/a_c.log" 2>&1 & local a_c=$!
  timeout "$t" ib_send_bw -p $p2 -d droce1 -x 1 -D 2 127.0.0.1 >"$run/b_c.log" 2>&1 & local b_c=$!
  # All three on droce0 must be attached at once at some point of the run
  # (sampled: on a loaded host attaching can take a while).
  local most=0 n
  for _ in $(seq 80); do
    n=$("$ctl" link show droce0 | grep -c 'process pid')
    [ "$n" -gt "$most" ] && most=$n
    [ "$most" -ge 3 ] && break
    sleep 0.1
  done
  "$ctl" link show droce0
  [ "$most" = 3 ] || { echo "expected 3 processes on droce0 at once, saw at most $most"; rc=1; }
  for pid in $a_s $b_s $a_c $b_c; do wait $pid || rc=1; done
  for f in a_s a_c b_s b_c; do echo "--- $f"; tail -3 "$run/$f.log"; done
  return $rc
}
check "four processes at once (three on droce0)" four
check "daemon counters" bash -c "'$ctl' daemon status | tee /dev/stderr | grep -q 'arp_replies [1-9]'"

# The network's knobs in the switch (droce-ctl switch set; doc/droced.md).
knob_loss() {
  "$ctl" switch set droce1 loss=0.02 seed=1 || return 1
  pair "DROCE_STATS=1 ibv_rc_pingpong -p $p -d droce0 -g 1 -n 1000 -c" \
       "DROCE_STATS=1 ibv_rc_pingpong -p $p -d droce1 -g 1 -n 1000 -c 127.0.0.1"
  local rc=$?
  "$ctl" daemon status droce1 | tee "$run/knobs.txt" | grep 'switch port'
  "$ctl" switch clear droce1 || rc=1
  [ $rc -eq 0 ] || return 1
  # Frames to droce1 were dropped, yet every buffer arrived and verified (-c):
  # RC retransmitted them. (DROCE_STATS's per-QP retransmit counts are gone
  # by then: ibv_rc_pingpong destroys its QP before it closes the device.)
  grep -q 'loss_dropped [1-9]' "$run/knobs.txt" || { echo "no frame dropped"; return 1; }
}
check "switch loss=0.02 on droce1: frames dropped, ibv_rc_pingpong -c still verifies every buffer" knob_loss
# droce0 and droce1 registered again with the given device settings
# ("set KEY=VALUE ..."; none: the defaults); nothing may be attached.
reregister_pair() {
  local d
  for d in "droce0 10.0.0.1 fd00::1" "droce1 10.0.0.2 fd00::2"; do
    set -- $d "$@"
    local name=$1 v4=$2 v6=$3; shift 3
    "$ctl" link del "$name" >/dev/null && "$ctl" link add "$name" ip "$v4" ip "$v6" "$@" >/dev/null || return 1
  done
}
# One ib_write_bw droce0 -> droce1 of SECONDS through droce1's bottleneck
# port set with SWITCH ARGS, both devices registered again with the device
# SETTINGS ("set KEY=V ..." words of reregister_pair) for the run and back to
# their defaults after; droce1's port counters in $run/knobs.txt.
bottleneck_write_bw() {  # SECONDS "SETTINGS" SWITCH ARGS...
  local seconds=$1 settings=$2; shift 2
  # shellcheck disable=SC2086  # the settings are words
  reregister_pair $settings || return 1
  "$ctl" switch set droce1 bottleneck "$@" || return 1
  pair "DROCE_STATS=1 ib_write_bw -p $p -d droce1 -x 1 -D $seconds" \
    "DROCE_STATS=1 ib_write_bw -p $p -d droce0 -x 1 -D $seconds 127.0.0.1"
  local rc=$?
  "$ctl" daemon status droce1 | tee "$run/knobs.txt" | grep 'switch port'
  "$ctl" switch clear droce1 || rc=1
  reregister_pair || rc=1
  return $rc
}
knob_bottleneck() {
  # DCQCN on both ends for this run.
  bottleneck_write_bw 3 "set dcqcn=paper" rate=1G kmin=20K kmax=200K pmax=0.2 || return 1
  grep -q 'ce_marked [1-9]' "$run/knobs.txt" || { echo "nothing marked"; return 1; }
  grep -q ' rx_cnp [1-9]' "$run/client.log" || { echo "the sender got no CNP"; return 1; }
  grep -o ' rx_cnp [0-9]*' "$run/client.log"
}
check "switch bottleneck rate=1G on droce1: a DCQCN ib_write_bw gets CE marks and its sender CNPs" knob_bottleneck
knob_int() {
  # cc=hpcc on both devices, but perftest without rdma_cm exchanges no ECE:
  # nothing agreed HPCC with the peer, so the QPs run none and no request
  # carries INT (the peer could be rxe). With ECE: tests/fabric/rdmacm.sh.
  bottleneck_write_bw 2 "set cc=hpcc set cc_line_rate_gbps=1" rate=1G kmin=1M kmax=1M pmax=0 int=on || return 1
  grep -q 'int_stamped 0 ' "$run/knobs.txt" || { echo "INT requests without an agreement"; return 1; }
  grep -q 'cc: hpcc' "$run/client.log" "$run/server.log" && { echo "a QP runs HPCC without an agreement"; return 1; }
  grep -o 'int_stamped [0-9]*' "$run/knobs.txt"
}
check "cc=hpcc without ECE (perftest -x 1): the QPs run none, no request carries INT (int_stamped 0)" knob_int
knob_mirror() {
  "$ctl" switch set droce0 mirror "$run/mirror.pcap" || return 1
  pair "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 50" "ibv_rc_pingpong -p $p -d droce1 -g 1 -n 50 127.0.0.1" || return 1
  "$ctl" switch set droce0 mirror off || return 1
  "$ctl" daemon status droce0 | grep -q 'switch port' && { echo "knobs left on"; return 1; }
  "$build/apps/pcap/droce-pcap" check "$run/mirror.pcap"
}
check "switch mirror on droce0: a pcap droce-pcap check accepts" knob_mirror
check "switch knobs refuse bad values" bash -c "! '$ctl' switch set droce0 loss=2 2>/dev/null &&
  ! '$ctl' switch set droce0 bottleneck kmin=5 2>/dev/null && ! '$ctl' switch set nosuch loss=0.1 2>/dev/null"

# A program killed mid-transfer: the daemon keeps running and frees its
# range; its peer's QP ends (retry exceeded), never hangs or crashes; another
# pair on droce0 running meanwhile finishes normally; then a new pair works.
kill_test() {
  local p3=$((p + 2))
  # The victim: ib_write_bw's passive side (its memory is written). Its peer
  # has WRITEs in flight when it dies: they must end in retry-exceeded
  # completions (IBV_WC_RETRY_EXC_ERR, 12), not a hang.
  ib_write_bw -p $p -d droce0 -x 1 -D 20 >"$run/ks.log" 2>&1 &
  local victim=$!
  # Bystanders: another pair on droce0 that must not notice.
  timeout "$t" ib_send_bw -p $p3 -d droce0 -x 1 -D 12 >"$run/os.log" 2>&1 &
  local other_s=$!
  wait_listen $victim $p; wait_listen $other_s $p3
  timeout "$t" stdbuf -oL ib_write_bw -p $p -d droce0 -x 1 -D 20 127.0.0.1 >"$run/kc.log" 2>&1 &
  local peer=$!
  timeout "$t" ib_send_bw -p $p3 -d droce0 -x 1 -D 12 127.0.0.1 >"$run/oc.log" 2>&1 &
  local other_c=$!
  # The victim dies mid-transfer: a second after its peer printed the
  # victim's QP (perftest's "remote address" line: the pair connected, the
  # WRITEs start), not after a fixed time that a loaded host may need just
  # to connect them. The peer's stdout is line-buffered for this.
  for _ in $(seq 600); do grep -q 'remote address' "$run/kc.log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  "$ctl" link show droce0
  "$ctl" link show droce0 | grep -q "pid $victim " || { echo "victim $victim not attached"; return 1; }
  kill -9 $victim; wait $victim 2>/dev/null
  local gone=0
  for _ in $(seq 50); do
    "$ctl" link show droce0 | grep -q "pid $victim " || { gone=1; break; }
    sleep 0.1
  done
  [ $gone = 1 ] || { echo "the killed process's range is still attached"; return 1; }
  wait $peer; local prc=$?
  echo "peer exit $prc (it loses its peer: an error is expected, a hang or a crash is not)"; tail -4 "$run/kc.log"
  [ $prc -ne 124 ] || { echo "the killed process's peer hung"; return 1; }
  [ $prc -le 128 ] || { echo "the killed process's peer died of signal $((prc - 128))"; return 1; }
  grep -q "Failed status 12" "$run/kc.log" || { echo "the peer saw no retry-exceeded completion"; return 1; }
  wait $other_s || { echo "bystander server failed"; tail -5 "$run/os.log"; return 1; }
  wait $other_c || { echo "bystander client failed"; tail -5 "$run/oc.log"; return 1; }
  echo "bystander pair on droce0:"; tail -2 "$run/oc.log"
  "$ctl" daemon status || return 1
  "$ctl" link show droce0 | grep -q "0 attached" || { echo "attachments left"; return 1; }
  pair "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200" "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200 127.0.0.1"
}
check "SIGKILL a program mid-transfer: daemon survives, range freed, peer gets retry-exceeded, bystanders unaffected, new pair works" kill_test

check "control protocol rejects malformed requests, daemon survives" python3 "$root/tests/fabric/control_garbage.py" "$run"

check "daemon stop" bash -c "'$ctl' daemon stop && ! '$ctl' daemon status 2>/dev/null && test ! -e '$run/droced.sock'"
finish fabric
