#!/usr/bin/env bash
# End to end: unmodified rdma-core and perftest programs on two droce devices
# joined by a memif wire, each program in its own process. Checks what
# ibv_devinfo reports, then runs every pair and fails if any fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export BUILD=${BUILD:-$root/build}
export SERVER_DELAY=${SERVER_DELAY:-listen} PAIR_TIMEOUT=${PAIR_TIMEOUT:-60}
pair="$root/tools/verbs-pair.sh"
# A TCP port of our own for the programs' exchange: other runs on the machine (helpers, the
# fabric suite) use perftest's and the pingpongs' default 18515, and a client that reaches
# another run's server exchanges QPNs with the wrong process.
vp=${VERBS_PORT:-$((30000 + $$ % 20000))}
failed=0; passed=0
check() {  # name, then a command; prints PASS/FAIL and the output on failure
  local name=$1; shift
  local out t0=$SECONDS
  out=$("$@" 2>&1); local rc=$?
  # perftest measures the CPU clock before reporting and gives up when the
  # samples scatter (a loaded VM): its own measurement failed, not the RDMA.
  # Such a run is repeated once, and says so.
  if [ $rc -ne 0 ] && grep -q "Can't produce a report" <<<"$out"; then
    echo "  (perftest could not time the CPU clock: rerunning $name)"
    out=$("$@" 2>&1); rc=$?
  fi
  if [ $rc -eq 0 ]; then
    echo "PASS $name ($((SECONDS - t0)) s)"; passed=$((passed + 1))
  else
    echo "FAIL $name ($((SECONDS - t0)) s)"; echo "$out" | tail -40; failed=$((failed + 1))
  fi
}

# ibv_devinfo sees the device as a RoCE v2 port, with the GIDs droce-ctl wrote.
devinfo() {
  local run; run=$(mktemp -d /tmp/droce-devinfo.XXXXXX)
  export DROCE_RUN_DIR=$run
  local ctl="$BUILD/apps/ctl/droce-ctl"
  "$ctl" link add droce0 type memif socket "$run/w.sock" role server ip 10.0.0.1 ip fd00::1 >/dev/null || return 1
  eval "$("$ctl" env)"
  local out; out=$(ibv_devinfo -v -d droce0 2>&1); local rc=$?
  "$ctl" link del droce0; rm -rf "$run"
  echo "$out"
  [ $rc -eq 0 ] || return 1
  grep -q 'state:.*PORT_ACTIVE' <<<"$out" && grep -q 'link_layer:.*Ethernet' <<<"$out" &&
    grep -q 'GID\[  1\]:.*::ffff:10.0.0.1, RoCE v2' <<<"$out" && grep -q 'GID\[  2\]:.*fd00::1, RoCE v2' <<<"$out"
}
check "ibv_devinfo -v" devinfo

# A bad registration is refused with a reason.
check "droce-ctl rejects bad input" bash -c "
  ! DROCE_RUN_DIR=\$(mktemp -d) '$BUILD/apps/ctl/droce-ctl' link add droce0 type memif socket /tmp/x role sideways ip 10.0.0.1 2>&1 | tee /dev/stderr | grep -q . ||
  DROCE_RUN_DIR=\$(mktemp -d) '$BUILD/apps/ctl/droce-ctl' link add droce0 type memif socket /tmp/x role server ip 10.0.0.999 2>&1 | grep -q 'bad IP'"

check "ibv_rc_pingpong" "$pair" "ibv_rc_pingpong -p $vp -d droce0 -g 1 -n 500" "ibv_rc_pingpong -p $vp -d droce1 -g 1 -n 500 127.0.0.1"
check "ibv_rc_pingpong -e" "$pair" "ibv_rc_pingpong -p $vp -d droce0 -g 1 -n 500 -e" "ibv_rc_pingpong -p $vp -d droce1 -g 1 -n 500 -e 127.0.0.1"
for mtu in 1024 4096; do
  for prog in ib_send_bw ib_write_bw ib_read_bw; do
    check "$prog -m $mtu" "$pair" "$prog -p $vp -d droce0 -x 1 -m $mtu -D 1" "$prog -p $vp -d droce1 -x 1 -m $mtu -D 1 127.0.0.1"
  done
  check "ib_atomic_bw -m $mtu" "$pair" "ib_atomic_bw -p $vp -d droce0 -x 1 -m $mtu -D 1" "ib_atomic_bw -p $vp -d droce1 -x 1 -m $mtu -D 1 127.0.0.1"
done
# 8 QPs x 128 outstanding 64 KiB WRITEs keep memif's 1024-slot ring full: no QP may starve into retry exhaustion.
check "ib_write_bw -q 8 (a full ring shared fairly)" "$pair" "ib_write_bw -p $vp -d droce0 -x 1 -s 65536 -q 8 -D 2" "ib_write_bw -p $vp -d droce1 -x 1 -s 65536 -q 8 -D 2 127.0.0.1"
check "ib_write_bw -a (all sizes)" "$pair" "ib_write_bw -p $vp -d droce0 -x 1 -a -n 200" "ib_write_bw -p $vp -d droce1 -x 1 -a -n 200 127.0.0.1"
check "ib_write_lat" "$pair" "ib_write_lat -p $vp -d droce0 -x 1 -n 1000" "ib_write_lat -p $vp -d droce1 -x 1 -n 1000 127.0.0.1"
# A pair whose server (droce0, DROCE_STATS=1) must print a device stats line
# matching a pattern: counters that show which mechanism did the work.
server_stats_match() {  # pattern, then the pair's arguments (env assignments first)
  local want=$1; shift
  local out; out=$(env "$@" 2>&1) || { echo "$out"; return 1; }
  echo "$out" | grep "droce droce0: rx"
  grep -Eq "droce0: .*$want" <<<"$out"
}
# The per-QP DROCE_STATS line (printed when a QP is destroyed) carries every
# selective-repeat counter; an SR pair (both devices selective_repeat=on)
# shows them, with no fallback.
server_qp_stats_match() {  # pattern, then the pair's arguments (env assignments first)
  local want=$1; shift
  local out; out=$(env "$@" 2>&1) || { echo "$out"; return 1; }
  echo "$out" | grep "droce droce0 qp"
  grep -Eq "droce0 qp [0-9]+: .*$want" <<<"$out"
}
check "DROCE_STATS QP line: every sr_* counter" server_qp_stats_match \
  "selective_repeat on sr_sacks_sent [0-9]+ sr_sacks_received [0-9]+ sr_retransmitted_packets [0-9]+ sr_out_of_order_placed [0-9]+ sr_dropped [0-9]+ sr_fallbacks 0 tlp_probes [0-9]+ sr_rack_resent [0-9]+ sr_spurious_timeouts [0-9]+" \
  LINK_SET=selective_repeat=on "$pair" "DROCE_STATS=1 ib_write_bw -p $vp -d droce0 -x 1 -s 65536 -n 200" \
  "ib_write_bw -p $vp -d droce1 -x 1 -s 65536 -n 200 127.0.0.1"
# ibv_get_cq_event (through libdroce-preload.so) drives the dataplane in the
# waiting thread: events it finds itself are handed over without the socket;
# with event_busy_poll_us=0 it sleeps at once and the wire's arrival wakes it.
check "ib_send_lat -e: events handed over in process" server_stats_match "\\(([1-9][0-9]*) handed over in process\\)" \
  "$pair" "DROCE_STATS=1 ib_send_lat -p $vp -d droce0 -x 1 -e -n 1000" "ib_send_lat -p $vp -d droce1 -x 1 -e -n 1000 127.0.0.1"
check "ib_send_lat -e, no busy poll: waits sleep and arrivals wake them" server_stats_match \
  "event waits slept [1-9][0-9]* \\(woken by arrival [1-9][0-9]*\\)" LINK_SET=event_busy_poll_us=0 \
  "$pair" "DROCE_STATS=1 ib_send_lat -p $vp -d droce0 -x 1 -e -n 1000" "ib_send_lat -p $vp -d droce1 -x 1 -e -n 1000 127.0.0.1"
# An idle device's empty poll_cq runs no round when its port knows its ring
# empty: on a memif wire the port answers through the wake-up's look at the
# ring's indices (ethdev::EthdevPort::KnownEmpty, doc/verbs.md "Who drives
# the device"); ib_send_lat's waits for the peer are such polls.
check "ib_send_lat: the memif device's empty polls run no round" server_stats_match \
  "empty polls that ran no round \\(nothing to do\\) [1-9][0-9]*" \
  "$pair" "DROCE_STATS=1 ib_send_lat -p $vp -d droce0 -x 1 -n 1000" "ib_send_lat -p $vp -d droce1 -x 1 -n 1000 127.0.0.1"
# progress_nice: the progress thread reports (DROCE_DEBUG) the nice value it
# runs at, read back from the kernel; without CAP_SYS_NICE it is refused
# and keeps the process's own.
# (under the default progress_sched=auto the line ends in a note saying so)
if [ "$(id -u)" = 0 ]; then want_nice="slice 100 us, nice -3( \\(progress_sched=auto[^)]*\\))?\$"; else want_nice="nice -?[0-9]+ \(progress_nice refused"; fi
check "progress_nice=-3: the progress thread runs at it" server_stats_match "progress thread SCHED_OTHER, $want_nice" \
  LINK_SET=progress_nice=-3 "$pair" "DROCE_DEBUG=1 ib_read_lat -p $vp -d droce0 -x 1 -n 300" \
  "ib_read_lat -p $vp -d droce1 -x 1 -n 300 127.0.0.1"
check "ib_read_lat" "$pair" "ib_read_lat -p $vp -d droce0 -x 1 -n 1000" "ib_read_lat -p $vp -d droce1 -x 1 -n 1000 127.0.0.1"
# A READ server never polls: its progress thread serves every READ. It must
# be woken by the arrivals (memif interrupt mode), not only by timers. With
# neither spins nor a hot phase every wait is armed; READs paced 500 us
# apart (perftest's software rate limiter) each find it asleep and must wake
# it (291-300 of 300 measured; a broken wake-up leaves 0-2). ib_read_lat
# back to back would not: with the rings prefaulted (ethdev/prefault.h) the
# next READ comes before the thread sleeps.
rl="--rate_limit=2000 --rate_units=p --rate_limit_type=SW --burst_size=1 -s 64 -n 300"
check "progress thread woken by arrival (memif)" server_stats_match "woken by arrival [1-9][0-9][0-9]+, memif interrupt" \
  LINK_SET="progress_hot_us=0 progress_spins=0" "$pair" \
  "DROCE_STATS=1 ib_read_bw -p $vp -d droce0 -x 1 $rl" "ib_read_bw -p $vp -d droce1 -x 1 $rl 127.0.0.1"
check "ib_write_bw IPv6 GID" env PAIR_IP6=1 "$pair" "ib_write_bw -p $vp -d droce0 -x 2 -D 1" "ib_write_bw -p $vp -d droce1 -x 2 -D 1 127.0.0.1"
check "ibv_rc_pingpong IPv6 GID" env PAIR_IP6=1 "$pair" "ibv_rc_pingpong -p $vp -d droce0 -g 2 -n 200" "ibv_rc_pingpong -p $vp -d droce1 -g 2 -n 200 127.0.0.1"
# UD: address handles resolved over the wire (ARP; ND for IPv6).
check "ibv_ud_pingpong" "$pair" "ibv_ud_pingpong -p $vp -d droce0 -g 1 -n 500" "ibv_ud_pingpong -p $vp -d droce1 -g 1 -n 500 127.0.0.1"
check "ibv_ud_pingpong IPv6 GID" env PAIR_IP6=1 "$pair" "ibv_ud_pingpong -p $vp -d droce0 -g 2 -n 200" "ibv_ud_pingpong -p $vp -d droce1 -g 2 -n 200 127.0.0.1"
check "ib_send_bw -c UD" "$pair" "ib_send_bw -p $vp -d droce0 -x 1 -c UD -D 1" "ib_send_bw -p $vp -d droce1 -x 1 -c UD -D 1 127.0.0.1"
check "ib_send_lat -c UD" "$pair" "ib_send_lat -p $vp -d droce0 -x 1 -c UD -n 500" "ib_send_lat -p $vp -d droce1 -x 1 -c UD -n 500 127.0.0.1"

# qperf's RC tests address the peer by LID only (no GID in their exchange):
# the devices' lid-peer (the wire's other end) makes them work on droce.
# qperf opens and closes its devices per test, and the client's droce1 often
# opens before the server's droce0 listens (its first start fails, a later
# restart connects): every device of the client must still end up with its
# arrival wake-up ("memif interrupt" in its DROCE_STATS line, not "timed
# sleeps only", which the rc_lat device of 3 of 3 runs had before).
qperf_pair() {
  local out; out=$("$pair" "timeout 50 qperf" "DROCE_STATS=1 qperf 127.0.0.1 -li droce1:1 -ri droce0:1 -t 1 $1 rc_bw rc_lat; pkill -x qperf; true") || true
  echo "$out"
  grep -qE '^ +bw += +[0-9.]+ [GMK]B/sec' <<<"$out" && grep -qE '^ +latency += +[0-9.]+ (ns|us|ms)' <<<"$out" &&
    grep -q 'droce droce1: rx' <<<"$out" && ! grep 'droce droce1: rx' <<<"$out" | grep -q 'timed sleeps only'
}
check "qperf rc_bw rc_lat (events)" qperf_pair ""
check "qperf rc_bw rc_lat -cp1 (polling)" qperf_pair "-cp1"

# The lab's program using every RC opcode (zero-length, immediate, inline,
# atomics), then again with the server's receives posted late: RNR NAKs.
if [ -n "${RXE_OPS:-}" ]; then
  rxe_ops_pair() {
    local out; out=$("$pair" "$RXE_OPS -d droce0 -g 1 $1" "$RXE_OPS -d droce1 -g 1 127.0.0.1") || { echo "$out"; return 1; }
    echo "$out"
    [ "$(grep -c '^done' <<<"$out")" -eq 2 ] && grep -q 'server atomic target now 0x1122334455667788' <<<"$out"
  }
  check "rxe_ops (every RC opcode)" rxe_ops_pair ""
  check "rxe_ops -R 300 (RNR NAK)" rxe_ops_pair "-R 300"
fi

# The same programs over af_packet on a veth pair between two network
# namespaces (the side channel runs over the same veth, at 10.99.0.1).
if ip netns add droce-probe-$$ 2>/dev/null; then
  ip netns del droce-probe-$$
  check "veth: ibv_rc_pingpong" env WIRE=veth "$pair" "ibv_rc_pingpong -p $vp -d droce0 -g 1 -n 500" "ibv_rc_pingpong -p $vp -d droce1 -g 1 -n 500 10.99.0.1"
  check "veth: ibv_ud_pingpong" env WIRE=veth "$pair" "ibv_ud_pingpong -p $vp -d droce0 -g 1 -n 300" "ibv_ud_pingpong -p $vp -d droce1 -g 1 -n 300 10.99.0.1"
  check "veth: ibv_rc_pingpong -e" env WIRE=veth "$pair" "ibv_rc_pingpong -p $vp -d droce0 -g 1 -n 500 -e" "ibv_rc_pingpong -p $vp -d droce1 -g 1 -n 500 -e 10.99.0.1"
  for prog in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw; do
    check "veth: $prog -m 2048" env WIRE=veth "$pair" "$prog -p $vp -d droce0 -x 1 -m 2048 -D 1" "$prog -p $vp -d droce1 -x 1 -m 2048 -D 1 10.99.0.1"
  done
  check "veth: ib_write_lat -m 1024" env WIRE=veth "$pair" "ib_write_lat -p $vp -d droce0 -x 1 -m 1024 -n 500" "ib_write_lat -p $vp -d droce1 -x 1 -m 1024 -n 500 10.99.0.1"
  check "veth: progress thread woken by arrival (af_packet)" server_stats_match "woken by arrival [1-9][0-9]*, af_packet socket" WIRE=veth "$pair" \
    "DROCE_STATS=1 ib_read_lat -p $vp -d droce0 -x 1 -m 1024 -n 300" "ib_read_lat -p $vp -d droce1 -x 1 -m 1024 -n 300 10.99.0.1"
  # No broadcast fallback: the peers' MACs must come from ARP / neighbour discovery.
  # DROCE_STATS=1: a failure shows both sides' counters (printed at exit
  # too): timeouts and retransmissions against the peer's rx, the neighbours
  # learnt, ND/ARP frames sent and received, frames dropped for their MAC.
  check "veth: IPv6 GID resolved by neighbour discovery" env WIRE=veth PAIR_IP6=1 LINK_SET=broadcast_unresolved=off \
    "$pair" "DROCE_STATS=1 ibv_rc_pingpong -p $vp -d droce0 -g 2 -n 200" "DROCE_STATS=1 ibv_rc_pingpong -p $vp -d droce1 -g 2 -n 200 10.99.0.1"
  check "veth: IPv4 GID resolved by ARP" env WIRE=veth LINK_SET=broadcast_unresolved=off \
    "$pair" "DROCE_STATS=1 ibv_rc_pingpong -p $vp -d droce0 -g 1 -n 200" "DROCE_STATS=1 ibv_rc_pingpong -p $vp -d droce1 -g 1 -n 200 10.99.0.1"
  check "veth: ib_send_lat -e" env WIRE=veth "$pair" "ib_send_lat -p $vp -d droce0 -x 1 -e -n 500" "ib_send_lat -p $vp -d droce1 -x 1 -e -n 500 10.99.0.1"
else
  echo "SKIP veth: cannot create network namespaces"
fi

echo "verbs over memif and veth: $passed passed, $failed failed"
[ $failed -eq 0 ]
