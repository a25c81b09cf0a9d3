#!/usr/bin/env bash
# netdev-bound droce (AF_XDP) vs the fabric's memif uplink vs kernel TCP,
# across two network namespaces joined by a veth pair (MTU 3000; RDMA path
# MTU 2048 on both droce setups, the AF_XDP port's largest). Issue 32's
# benchmark (doc/netdev.md):
#   - bandwidth: 64 KiB ib_write_bw (-D DURATION; it polls its CQ) and ib_send_bw -e (it
#     sleeps for completions, as iperf3 sleeps in its socket calls) / iperf3 -l 64K (-t DURATION),
#     one stream;
#   - latency: ib_send_lat -s 2 -n ITERS (t_typical) / qperf -m 2 tcp_lat;
#   - CPU per GB: user+system CPU of every process on the path (the two
#     perftest or iperf3 processes, the two droceds) and of the ksoftirqd
#     threads, over the bytes moved.
# TCP runs on the bare veth (before droce binds it) and again with droce's
# XDP program on it (XDP on a veth turns the peer's GSO off).
#   run.sh [ROUNDS=3] [DURATION=5] [ITERS=5000]   (root; prints CSV, then medians)
#   env: STEERINGS="udp xdp" (netdev steerings, doc/netdev.md; a steering may
#   carry device settings after '+', e.g. udp+event_busy_poll_us=200, and
#   commands run in both namespaces before binding after '@', e.g.
#   udp@ethtool_-K_nd0_gro_on: each is a setup of its own in the same rounds),
#   MEMIF=1 (0: skip the fabric uplink), MTU=3000 (the veth's), PATH_MTU=2048
#   (perftest -m), OPS="bw events lat tcp" (the netdev rows measured), IPV6=1
#   (the veth gets fd00::1/64 and fd00::2/64 too; RDMA uses that GID, index
#   2, and iperf3/qperf that address: what udp_gso segments), STARTUP=1 (each
#   bandwidth row gets a "_startup" row: the same pair moving 10 messages,
#   whose CPU is the programs' fixed cost -- perftest spends ~0.2 s of CPU per
#   program measuring its clock rate before it connects; the medians then
#   also give CPU per GB net of it, (cpu - startup cpu) / (bytes - startup
#   bytes); STARTUP=0: none), EVENTS_ITERS (the ib_send_bw -e rows' message
#   count; DURATION x 4000 by default), IDLE_S=2 (see "whole host" below),
#   PIN_LAT="S C" (the latency pairs' server and client, ib_send_lat and qperf
#   alike, run on CPUs S and C, taskset -c: two busy-polling ends the
#   scheduler puts on one CPU hand it over once per time slice, 0.5-1 ms a
#   message on a loaded 2-CPU host, results.md 2026-11-30 04:00)
# Whole host: beside the processes' own CPU, every bandwidth row also gives
# the host's busy time (/proc/stat: user+system+irq+softirq) over the row,
# less the host's busy rate over the IDLE_S seconds just before it times the
# row's wall time: softirq and ksoftirqd work, wherever the kernel ran it,
# lands on both sides alike (host_s; the medians: "host ... s/GB"). Niced
# time is left out: the benchmark runs at nice 0 and displaces niced work
# (other builds on a shared host) rather than adding to it. Meaningful on a
# host with idle time only: on a saturated one the benchmark displaces
# un-niced work too and host_s comes out near zero or negative. host_idle_s
# is the same busy time measured the other way: every CPU's wall time less
# its idle, iowait, niced and stolen time (the kernel times idle periods
# from their entry and exit under NO_HZ), with the same idle-rate
# subtraction; host_s counts scheduler ticks (CONFIG_HZ=250: one sample per
# CPU every 4 ms, each charged whole to what it lands on). The two agree
# over long busy periods; they differ where busy time comes in bursts
# shorter than a tick (a program that sleeps and wakes every few us).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
build=${BUILD:-$root/build}
ctl=$build/apps/ctl/droce-ctl
rounds=${1:-3} dur=${2:-5} iters=${3:-5000}
steerings=${STEERINGS:-udp xdp}  # the netdev devices' steerings measured, in this order
memif=${MEMIF:-1}                # 0: no fabric memif uplink rows
mtu=${MTU:-3000}                 # the veth's; XDP needs at most ~3500
path_mtu=${PATH_MTU:-2048}       # the RDMA path MTU (AF_XDP's largest is 2048)
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (network namespaces, XDP)" >&2; exit 77; }
for t in iperf3 qperf ib_write_bw ib_send_lat; do
  command -v $t >/dev/null || { echo "run.sh: $t not found" >&2; exit 77; }
done
A=${NETNS_PREFIX:-netdevbench}-$$-a B=${NETNS_PREFIX:-netdevbench}-$$-b
UA=$(mktemp -d /tmp/netdevbench-upA.XXXXXX) UB=$(mktemp -d /tmp/netdevbench-upB.XXXXXX)
tmp=$(mktemp -d /tmp/netdevbench.XXXXXX)
cleanup() {
  for ns in $A $B; do ip netns exec $ns "$ctl" daemon stop >/dev/null 2>&1; done
  for d in $UB $UA; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
  for ns in $A $B; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null; ip netns del $ns 2>/dev/null; rm -rf /run/droce/netns/$ns; done
  rm -rf "$UA" "$UB" "$tmp"
}
trap cleanup EXIT
ip netns add $A && ip netns add $B || exit 1
ip -n $A link add nd0 type veth peer name nd0 netns $B
for ns in $A $B; do ip -n $ns link set lo up; ip -n $ns link set nd0 mtu $mtu up; done
ip -n $A addr add 10.0.0.1/24 dev nd0; ip -n $B addr add 10.0.0.2/24 dev nd0
gid=1 tcp_peer=10.0.0.1  # the netdev device's GID index: the IPv4 address (0 is the link-local one)
if [ "${IPV6:-0}" = 1 ]; then
  ip -n $A addr add fd00::1/64 dev nd0 nodad; ip -n $B addr add fd00::2/64 dev nd0 nodad
  gid=2 tcp_peer=fd00::1
fi

ticks=$(getconf CLK_TCK)
cpu_of() {  # PID...: user+system ticks of the processes (all threads)
  local sum=0 p
  for p in "$@"; do
    [ -r /proc/$p/stat ] || continue
    sum=$((sum + $(awk '{sub(/^.*\) /, ""); print $12 + $13}' /proc/$p/stat)))
  done
  echo $sum
}
softirqd() { cpu_of $(pgrep -x 'ksoftirqd/[0-9]+' 2>/dev/null || pgrep ksoftirqd); }
now_s() { date +%s.%N; }
ncpu=$(nproc)
# Sets HB, the host's busy ticks (user+system+irq+softirq, not niced: each
# tick sampled where it lands, 1/CONFIG_HZ apart), HP, the same busy time
# as the wall time of every CPU less the time they were idle (idle, iowait,
# nice, steal; under NO_HZ the kernel measures idle time from its idle
# entries and exits, not by ticks), both in ticks, and HT, the time read.
host_snap() {
  HT=$(now_s)
  read -r HB HP < <(awk -v n="$ncpu" -v hz="$ticks" -v t="$HT" \
    '$1 == "cpu" {printf "%d %.2f\n", $2 + $4 + $7 + $8, n * t * hz - ($3 + $5 + $6 + $9); exit}' /proc/stat)
}
# The host's busy ticks per second (both measures) while nothing of the
# benchmark runs (RATE, PRATE), then the row's start (H0, P0, T0).
host_start() {
  host_snap; local b0=$HB p0=$HP t0=$HT
  sleep "${IDLE_S:-2}"
  host_snap
  RATE=$(echo "($HB - $b0) / ($HT - $t0)" | bc -l) PRATE=$(echo "($HP - $p0) / ($HT - $t0)" | bc -l)
  H0=$HB P0=$HP T0=$HT
}
# The row's host seconds less the idle rate over its wall time: HOST, HOSTP.
host_end() {
  host_snap
  HOST=$(echo "($HB - $H0 - $RATE * ($HT - $T0)) / $ticks" | bc -l)
  HOSTP=$(echo "($HP - $P0 - $PRATE * ($HT - $T0)) / $ticks" | bc -l)
}
timed() {  # OUT CMD...: runs CMD, appends "cpu SECONDS" (its and its children's user+system) to OUT
  local out=$1; shift
  /usr/bin/time -f "cpu %U %S" -a -o "$out" "$@" >>"$out" 2>&1
}
# Waits (up to 10 s) until a TCP port listens in a namespace: on a loaded
# host a client started a fixed time after its server can find no one there.
listening() {  # NS PORT
  local _
  for _ in $(seq 100); do
    ip netns exec "$1" ss -Hltn "sport = :$2" 2>/dev/null | grep -q . && return 0
    sleep 0.1
  done
}
# A perftest-like pair: server in $1's context, client in $2's. Prints the
# client's output and "cpu S" lines of both.
pair() {  # SERVER_PREFIX... -- CLIENT_PREFIX... (each a command line as words)
  local server=$1 client=$2
  : >"$tmp/s.out"; : >"$tmp/c.out"
  eval "timed $tmp/s.out $server" &
  local s=$!
  # perftest's server listens on TCP 18515: in namespace A (netdev) or here
  # (memif, where other programs' servers may listen too: a fixed wait then).
  if [[ $server == *"netns exec $A "* ]]; then listening $A 18515; else sleep 1.5; fi
  sleep 0.5  # its device is open before it listens; the rest of its setup
  eval "timed $tmp/c.out $client"
  wait $s
}
per_gb() { awk -v c="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0 ? c / (b / 1e9) : 0)}'; }
on_ns() { echo "ip netns exec $1 env CTL=$ctl bash -c 'eval \"\$(\"\$CTL\" env)\"; exec \"\$@\"' on"; }
on_dir() { echo "env DROCE_RUN_DIR=$1 CTL=$ctl bash -c 'eval \"\$(\"\$CTL\" env)\"; exec \"\$@\"' on"; }

echo "setup,round,test,value,unit,cpu_s,bytes,cpu_s_per_GB,softirqd_s,daemons_s,host_s,host_idle_s"
measure_bw() {  # SETUP ROUND SERVER_PREFIX CLIENT_PREFIX DAEMON_PIDS
  local setup=$1 round=$2 sp=$3 cp=$4 dpids=$5
  local d0 k0 d1 k1
  host_start
  d0=$(cpu_of $dpids); k0=$(softirqd)
  local tool=${BW_TOOL:-ib_write_bw}
  # Events cannot be timed by duration (perftest): a count then.
  local amount="-D $dur"
  [ -n "${BW_ITERS:-}" ] && amount="-n $BW_ITERS"
  pair "$sp $tool ${BW_OPTS:-} -d ${DEV_A} -x ${GIDX:-1} -s 65536 $amount -m $path_mtu" "$cp $tool ${BW_OPTS:-} -d ${DEV_B} -x ${GIDX:-1} -s 65536 $amount -m $path_mtu ${PEER}"
  d1=$(cpu_of $dpids); k1=$(softirqd)
  host_end
  local mbs; mbs=$(awk '$1 == 65536 {print $4}' "$tmp/c.out" | tail -1)
  local prog; prog=$(awk '/^cpu/ {s += $2 + $3} END {print s + 0}' "$tmp/s.out" "$tmp/c.out")
  local cpu; cpu=$(echo "$prog + ($d1 - $d0) / $ticks" | bc -l)
  local bytes; bytes=$(echo "${mbs:-0} * 1048576 * $dur" | bc -l)
  [ -n "${BW_ITERS:-}" ] && [ -n "${mbs:-}" ] && bytes=$((BW_ITERS * 65536))
  local soft; soft=$(echo "($k1 - $k0) / $ticks" | bc -l)
  local dcpu; dcpu=$(echo "($d1 - $d0) / $ticks" | bc -l)
  printf '%s,%s,%s,%s,MB/s,%.2f,%.0f,%.3f,%.2f,%.2f,%.2f,%.2f\n' "$setup" "$round" "${MODE:-write_bw_64k}" "${mbs:-0}" "$cpu" "$bytes" \
    "$(per_gb "$cpu" "$bytes")" "$soft" "$dcpu" "$HOST" "$HOSTP"
}
# The same pair moving 10 messages: its CPU is what the programs spend
# whatever they move (perftest's clock-rate measurement, device open, QP
# setup, exit), reported as a "MODE_startup" row.
measure_startup() {  # SETUP ROUND SERVER_PREFIX CLIENT_PREFIX DAEMON_PIDS
  [ "${STARTUP:-1}" = 1 ] || return 0
  local mode=${MODE:-write_bw_64k}
  local row; row=$(MODE=x BW_ITERS=10 measure_bw "$@")
  IFS=, read -r _ _ _ _ _ cpu _ _ soft dcpu host hostp <<<"$row"
  printf '%s,%s,%s_startup,10,msgs,%s,655360,,%s,%s,%s,%s\n' "$1" "$2" "$mode" "$cpu" "$soft" "$dcpu" "$host" "$hostp"
}
pin_s="" pin_c=""
if [ -n "${PIN_LAT:-}" ]; then
  read -r pin_s pin_c <<<"$PIN_LAT"
  pin_s="taskset -c $pin_s" pin_c="taskset -c $pin_c"
fi
measure_lat() {  # SETUP ROUND SERVER_PREFIX CLIENT_PREFIX
  pair "$3 $pin_s ib_send_lat -d ${DEV_A} -x ${GIDX:-1} -s 2 -n $iters" "$4 $pin_c ib_send_lat -d ${DEV_B} -x ${GIDX:-1} -s 2 -n $iters ${PEER}"
  local typ; typ=$(awk '$1 == 2 {print $5}' "$tmp/c.out" | tail -1)
  printf '%s,%s,send_lat_2b,%s,us,,,,,,,\n' "$1" "$2" "${typ:-0}"
}
# One iperf3 stream from B to A, its client given AMOUNT ("-t S" or "-n BYTES");
# outputs and CPU lines in $tmp/s.out and $tmp/c.out.
iperf3_pair() {  # AMOUNT...
  : >"$tmp/s.out"; : >"$tmp/c.out"
  ip netns exec $A bash -c "$(declare -f timed); timed $tmp/s.out timeout $((dur + 60)) iperf3 -s -1 -p 5201" &
  local s=$!
  listening $A 5201
  ip netns exec $B bash -c "$(declare -f timed); timed $tmp/c.out iperf3 -c $tcp_peer -p 5201 -l 64K $* -J"
  wait $s
}
measure_tcp() {  # SETUP ROUND
  local k0 k1
  if [ "${STARTUP:-1}" = 1 ]; then  # iperf3 moving 10 x 64 KiB: its fixed cost
    host_start
    iperf3_pair -n 640K
    host_end
    printf '%s,%s,tcp_bw_64k_startup,10,msgs,%.2f,655360,,,,%.2f,%.2f\n' "$1" "$2" \
      "$(awk '/^cpu/ {s += $2 + $3} END {print s + 0}' "$tmp/s.out" "$tmp/c.out")" "$HOST" "$HOSTP"
  fi
  host_start
  k0=$(softirqd)
  iperf3_pair -t "$dur"
  k1=$(softirqd)
  host_end
  local bytes; bytes=$(python3 -c 'import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[:t.rindex("}")+1]); print(j["end"]["sum_received"]["bytes"])' "$tmp/c.out" 2>/dev/null || echo 0)
  local cpu; cpu=$(awk '/^cpu/ {s += $2 + $3} END {print s + 0}' "$tmp/s.out" "$tmp/c.out")
  local mbs; mbs=$(echo "$bytes / 1048576 / $dur" | bc -l)
  local soft; soft=$(echo "($k1 - $k0) / $ticks" | bc -l)
  printf '%s,%s,tcp_bw_64k,%.2f,MB/s,%.2f,%s,%.3f,%.2f,,%.2f,%.2f\n' "$1" "$2" "$mbs" "$cpu" "$bytes" "$(per_gb "$cpu" "$bytes")" "$soft" "$HOST" "$HOSTP"
  ip netns exec $A $pin_s qperf >/dev/null 2>&1 &
  local q=$!
  listening $A 19765
  local lat; lat=$(ip netns exec $B $pin_c qperf $tcp_peer -m 2 -t $dur tcp_lat 2>/dev/null | awk '/latency/ {v=$3; u=$4} END {if (u == "ms") v *= 1000; print v + 0}')
  kill $q 2>/dev/null; wait $q 2>/dev/null
  printf '%s,%s,tcp_lat_2b,%s,us,,,,,,,\n' "$1" "$2" "$lat"
}

for r in $(seq "$rounds"); do
  # Kernel TCP on the bare veth.
  measure_tcp tcp_veth "$r"
  if [ "$memif" = 1 ]; then
  # The fabric: two run directories (two hosts' droceds) joined by a memif
  # uplink, devices on it (doc/droced.md "Uplinks").
  DROCE_RUN_DIR=$UA DROCED_UPLINK=memif:$UA/up.sock:server "$ctl" link add bench0 ip 10.0.0.1 mtu 2048 >/dev/null
  DROCE_RUN_DIR=$UB DROCED_UPLINK=memif:$UA/up.sock:client "$ctl" link add bench2 ip 10.0.0.3 mtu 2048 >/dev/null
  sleep 2
  DEV_A=bench0 DEV_B=bench2 PEER=127.0.0.1 GIDX=1
  dp="$(cat $UA/droced.pid) $(cat $UB/droced.pid)"
  measure_startup memif_uplink "$r" "$(on_dir $UA)" "$(on_dir $UB)" "$dp"
  measure_bw memif_uplink "$r" "$(on_dir $UA)" "$(on_dir $UB)" "$dp"
  MODE=send_bw_64k_events BW_TOOL=ib_send_bw BW_OPTS=-e measure_startup memif_uplink "$r" "$(on_dir $UA)" "$(on_dir $UB)" "$dp"
  MODE=send_bw_64k_events BW_TOOL=ib_send_bw BW_OPTS=-e BW_ITERS=${EVENTS_ITERS:-$((dur * 4000))} measure_bw memif_uplink "$r" "$(on_dir $UA)" "$(on_dir $UB)" "$dp"
  measure_lat memif_uplink "$r" "$(on_dir $UA)" "$(on_dir $UB)"
  for d in $UB $UA; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
  DROCE_RUN_DIR=$UA "$ctl" link del bench0 >/dev/null; DROCE_RUN_DIR=$UB "$ctl" link del bench2 >/dev/null
  fi
  # netdev-bound devices on the veth, each steering: the processes' own UDP
  # sockets (udp: droced off the data path) and AF_XDP through droced (xdp).
  for variant in $steerings; do
    local_cmds=${variant#*@}; [ "$local_cmds" = "$variant" ] && local_cmds=
    spec=${variant%%@*}
    steering=${spec%%+*}
    sets=()
    if [ "$spec" != "$steering" ]; then
      IFS=+ read -ra kv <<<"${spec#*+}"
      for x in "${kv[@]}"; do sets+=(set "$x"); done
    fi
    if [ -n "$local_cmds" ]; then
      IFS=@ read -ra cmds <<<"$local_cmds"
      for c in "${cmds[@]}"; do for ns in $A $B; do ip netns exec $ns ${c//_/ } >/dev/null; done; done
    fi
    ip netns exec $A "$ctl" link add droce0 netdev nd0 steering $steering "${sets[@]}" >/dev/null &&
      ip netns exec $B "$ctl" link add droce0 netdev nd0 steering $steering "${sets[@]}" >/dev/null || continue
    DEV_A=droce0 DEV_B=droce0 PEER=10.0.0.1 GIDX=$gid
    dp="$(cat /run/droce/netns/$A/droced.pid) $(cat /run/droce/netns/$B/droced.pid)"
    ops=${OPS:-bw events lat tcp}
    if [[ " $ops " == *" bw "* ]]; then
      measure_startup "netdev_$variant" "$r" "$(on_ns $A)" "$(on_ns $B)" "$dp"
      measure_bw "netdev_$variant" "$r" "$(on_ns $A)" "$(on_ns $B)" "$dp"
    fi
    if [[ " $ops " == *" events "* ]]; then
      MODE=send_bw_64k_events BW_TOOL=ib_send_bw BW_OPTS=-e measure_startup "netdev_$variant" "$r" "$(on_ns $A)" "$(on_ns $B)" "$dp"
      MODE=send_bw_64k_events BW_TOOL=ib_send_bw BW_OPTS=-e BW_ITERS=${EVENTS_ITERS:-$((dur * 4000))} measure_bw "netdev_$variant" "$r" "$(on_ns $A)" "$(on_ns $B)" "$dp"
    fi
    if [[ " $ops " == *" lat "* ]]; then measure_lat "netdev_$variant" "$r" "$(on_ns $A)" "$(on_ns $B)"; fi
    # Kernel TCP on the same veth while droce's program is on it.
    if [[ " $ops " == *" tcp "* ]]; then measure_tcp "tcp_veth_with_$steering" "$r"; fi
    for ns in $A $B; do ip netns exec $ns "$ctl" daemon stop >/dev/null; ip netns exec $ns "$ctl" link del droce0 >/dev/null; done
    if [ -n "$local_cmds" ]; then  # an "..._on" command is undone ("..._off"): the next setup starts from the bare veth
      for c in "${cmds[@]}"; do
        case "$c" in *_on) c=${c%_on}_off; for ns in $A $B; do ip netns exec $ns ${c//_/ } >/dev/null 2>&1; done ;; esac
      done
    fi
  done
done | tee "$tmp/rows.csv"

echo
echo "medians over $rounds rounds:"
python3 - "$tmp/rows.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) == 12 and r[0] != "setup"]
startup = {(s, r, t[:-len("_startup")]): (float(cpu or 0), float(b or 0), float(host or 0), float(hostp or 0))
           for s, r, t, v, u, cpu, b, per, soft, daemons, host, hostp in rows if t.endswith("_startup")}
by = {}
for s, r, t, v, u, cpu, b, per, soft, daemons, host, hostp in rows:
    net = host_per = host_net = hostp_net = None
    if cpu and float(b or 0) > 0 and host:
        host_per = float(host) / (float(b) / 1e9)
    if (s, r, t) in startup and cpu and float(b or 0) > startup[(s, r, t)][1]:
        s_cpu, s_bytes, s_host, s_hostp = startup[(s, r, t)]
        net = (float(cpu) - s_cpu) / ((float(b) - s_bytes) / 1e9)
        if host:
            host_net = (float(host) - s_host) / ((float(b) - s_bytes) / 1e9)
        if hostp:
            hostp_net = (float(hostp) - s_hostp) / ((float(b) - s_bytes) / 1e9)
    by.setdefault((s, t, u), []).append((float(v or 0), float(per or 0), float(soft or 0), net, host_per, host_net,
                                         hostp_net))
def med(xs):
    xs = [x for x in xs if x is not None]
    return (statistics.median(xs), xs) if xs else (None, xs)
for (s, t, u), vals in sorted(by.items()):
    mid = statistics.median(v[0] for v in vals)
    per = statistics.median(v[1] for v in vals)
    soft = statistics.median(v[2] for v in vals)
    extra = f"  CPU {per:.3f} s/GB (+ksoftirqd {soft:.2f} s)" if per else ""
    for label, i in (("without startup", 3), ("host", 4), ("host without startup", 5),
                     ("host by idle time without startup", 6)):
        m, xs = med(v[i] for v in vals)
        if m is not None and per:
            extra += f", {label} {m:.3f} s/GB [{', '.join(f'{x:.3f}' for x in xs)}]"
    print(f"  {s:18s} {t:12s} {mid:10.2f} {u}{extra}   [{', '.join(f'{v[0]:.2f}' for v in vals)}]")
PY
