#!/usr/bin/env bash
# netdev-bound devices between hosts that are network namespaces
# (doc/netdev.md): hosts A and B joined by a veth pair (nd0 on each side,
# 10.0.0.1/24 and 10.0.0.2/24, fd00::1/64 and fd00::2/64), `droce-ctl link
# add droce0 netdev nd0` on each, nothing else configured; programs use the
# peer's ordinary address. Root only (skipped otherwise). ONLY=REGEX runs
# the checks whose names match; the namespaces (NETNS_PREFIX-<pid>-*, default
# netdevtest) are always removed.
set -uo pipefail
. "$(dirname "$0")/../fabric/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces, XDP)"; exit 77; }
prefix=${NETNS_PREFIX:-netdevtest}
ip netns add "$prefix-probe-$$" 2>/dev/null && ip netns del "$prefix-probe-$$" ||
  { echo "SKIP: no network namespaces"; exit 77; }
EVENTS=${NETDEV_EVENTS:-$build/tests/netns/netdev_events}
MCAST=${MCAST_ATTACH:-$build/tests/netns/mcast_attach}
MCAST_RESTART=${MCAST_RESTART:-$build/tests/netns/mcast_restart}
cluster=$root/tools/droce-cluster
t=${PAIR_TIMEOUT:-60}
A=$prefix-$$-a B=$prefix-$$-b C=$prefix-$$-c QA=$prefix-$$-qa QB=$prefix-$$-qb
logs=$(mktemp -d /tmp/netdevtest.XXXXXX)
log_dirs=("/run/droce/netns/$A" "/run/droce/netns/$B")
FAIL_TAIL=40

cleanup() {
  for ns in "$A" "$B" "$QA" "$QB"; do
    ip netns exec "$ns" "$ctl" daemon stop >/dev/null 2>&1
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/run/droce/netns/$ns"
  done
  DROCE_CTL=$ctl "$cluster" down --name "$C" >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$logs"
}
trap cleanup EXIT

on() {  # NS CMD...: CMD in namespace NS with droce's environment
  local ns=$1; shift
  ip netns exec "$ns" env CTL="$ctl" bash -c 'eval "$("$CTL" env)"; exec "$@"' on "$@"
}
# A server on host $1, then a client on host $3; both must succeed.
pair() {  # SERVER_NS "SERVER CMD" CLIENT_NS "CLIENT CMD"
  local attempt
  for attempt in 1 2; do
    timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $1 $2" >"$logs/server.log" 2>&1 &
    local server=$!
    # The server's side channel: pingpong and perftest listen on TCP 18515,
    # fi_pingpong on 47592; rping listens through the CM (nothing to see).
    # The program's name after an `env VAR=VALUE...` prefix.
    case $(sed -E 's/^env( [A-Z_]+=[^ ]*)+ //' <<<"$2") in
      ibv_*|ib_*) LISTEN_NS=$1 wait_listen $server 18515 ;;
      fi_pingpong*) LISTEN_NS=$1 wait_listen $server 47592 ;;
      *) sleep 1.5 ;;
    esac
    timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $3 $4" >"$logs/client.log" 2>&1
    local crc=$?
    wait $server; local src=$?
    echo "--- server ($src)"; grep -iE "error|fail|status|couldn" "$logs/server.log" | head -5; tail -4 "$logs/server.log"
    echo "--- client ($crc)"; grep -iE "error|fail|status|couldn" "$logs/client.log" | head -5; tail -4 "$logs/client.log"
    [ $src -eq 0 ] && [ $crc -eq 0 ] && return 0
    rping_teardown_race "$logs/server.log" "$logs/client.log" || return 1
    echo "(rping's own teardown race, lib.sh: once more)"
  done
  return 1
}
status() { ip netns exec "$1" "$ctl" daemon status; }
# pair, both programs with DROCE_STATS=1: their counters at exit in $logs/{server,client}.log.
pair_stats() { pair "$1" "env DROCE_STATS=1 $2" "$3" "env DROCE_STATS=1 $4"; }

ip netns add "$A" && ip netns add "$B" || exit 1
ip -n "$A" link add nd0 type veth peer name nd0 netns "$B" || exit 1
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; ip -n "$ns" link set nd0 up; done
ip -n "$A" addr add 10.0.0.1/24 dev nd0; ip -n "$B" addr add 10.0.0.2/24 dev nd0
ip -n "$A" addr add fd00::1/64 dev nd0 nodad; ip -n "$B" addr add fd00::2/64 dev nd0 nodad

# The capture the ICMP checks below rely on sees what they look for: with no
# droce device yet, the kernel answers a UDP 4791 datagram with ICMP port
# unreachable.
icmp_seen_without_droce() {
  ip netns exec "$B" timeout 10 dumpcap -q -i nd0 -f "icmp or icmp6" -w "$logs/control.pcapng" >/dev/null 2>&1 &
  local cap=$!
  sleep 1
  ip netns exec "$B" bash -c 'echo roce >/dev/udp/10.0.0.1/4791'
  sleep 1; kill $cap 2>/dev/null; wait $cap 2>/dev/null
  local n; n=$(tshark -r "$logs/control.pcapng" -Y 'icmp.type == 3' 2>/dev/null | wc -l)
  echo "ICMP unreachable: $n"
  [ "$n" -ge 1 ]
}
check "control: without droce the kernel answers UDP 4791 with ICMP unreachable (the capture sees it)" \
  icmp_seen_without_droce

# Bad input at link add: each refused with its reason, nothing registered.
for k in 0 1 2; do ip -n "$A" link add x$k type veth peer name y$k; done
ip -n "$A" link set x1 up                                                  # x0: down, x1: no address
ip -n "$A" link set x2 mtu 300 up && ip -n "$A" addr add 10.9.0.1/24 dev x2  # x2: MTU too small
refused() {  # MESSAGE ARGS...: link add fails, says MESSAGE, and leaves no device
  local want=$1; shift
  local out; out=$(ip netns exec "$A" "$ctl" link add "$@" 2>&1) && { echo "accepted: $*"; return 1; }
  echo "$out"
  grep -q -- "$want" <<<"$out" && ! ip netns exec "$A" "$ctl" link show "$1" >/dev/null 2>&1
}
check "link add refuses an interface that does not exist" refused "does not exist" droce9 netdev nosuch0
check "link add refuses a down interface" refused "is down" droce9 netdev x0
check "link add refuses an interface without an address" refused "no IPv4 or global IPv6 address" droce9 netdev x1
check "link add refuses an MTU below RoCE's smallest path MTU" refused "below RoCE's smallest path MTU" droce9 netdev x2
check "link add refuses an unknown steering" refused "steering" droce9 netdev nd0 steering magic

ip netns exec "$A" "$ctl" link add droce0 netdev nd0 steering udp >/dev/null || exit 1
ip netns exec "$B" "$ctl" link add droce0 netdev nd0 steering udp >/dev/null || exit 1
check "link add refuses a second device on the same interface" refused "bound to droce0 already" droce1 netdev nd0
check "each namespace has its own run directory and droced; nd0 steers to the processes' UDP sockets (steering udp)" bash -c "
  [ -S /run/droce/netns/$A/droced.sock ] && [ -S /run/droce/netns/$B/droced.sock ] &&
  ! ip -n $A link show nd0 | grep -q prog/xdp &&
  ip netns exec $A '$ctl' daemon status | grep 'netdev nd0: UDP sockets per process, TC steering on nd0' &&
  ip netns exec $B '$ctl' daemon status | grep -q 'netdev nd0: UDP sockets per process'"
# Whole transmit bursts on the process's socket are the port's property
# (pktio::BurstIo::ReadConcurrently), not a setting droce-ctl writes: the
# device file keeps the table's default (`segmented` below counts the
# bursts).
check "the device file keeps the table's tx_flush_bytes (16384)" bash -c "
  conf=\$(grep -rl '^netdev=nd0' /run/droce/netns/$A --include=droce.conf | head -1) && echo \"\$conf\" &&
  grep -x 'tx_flush_bytes=16384' \"\$conf\""
check "the GID table is nd0's addresses, sysfs names nd0" bash -c "
  $(declare -f on); ctl='$ctl'
  out=\$(on $A ibv_devinfo -v -d droce0) && echo \"\$out\" | grep -E 'GID|state|mtu' &&
  echo \"\$out\" | grep -q 'GID\[  1\]:.*::ffff:10.0.0.1, RoCE v2' && echo \"\$out\" | grep -q 'GID\[  2\]:.*fd00::1, RoCE v2' &&
  echo \"\$out\" | grep -q 'active_mtu:.*1024' &&
  [ \"\$(cat /run/droce/netns/$A/sysfs/class/infiniband/droce0/ports/1/gid_attrs/ndevs/1)\" = nd0 ]"

check "ibv_rc_pingpong B -> A's 10.0.0.1" \
  pair "$A" "ibv_rc_pingpong -d droce0 -g 1 -n 500 -c" "$B" "ibv_rc_pingpong -d droce0 -g 1 -n 500 -c 10.0.0.1"
check "ibv_rc_pingpong over IPv6 (GID 2, fd00::)" \
  pair "$A" "ibv_rc_pingpong -d droce0 -g 2 -n 200 -c" "$B" "ibv_rc_pingpong -d droce0 -g 2 -n 200 -c 10.0.0.1"
check "ib_write_bw 64 KiB B -> A" \
  pair "$A" "ib_write_bw -d droce0 -x 1 -s 65536 -D 2" "$B" "ib_write_bw -d droce0 -x 1 -s 65536 -D 2 10.0.0.1"
# A frame the kernel queued on a process's own socket is taken by the
# program's next poll_cq: the skip of an idle device's empty poll never
# applies while the device has a socket, whose queue only a system call
# reads (doc/verbs.md "Who drives the device"). Skipped, the frame waited
# for the millisecond link check (500-1,000 us typical instead of tens).
lat_polls_run() {
  pair_stats "$A" "ib_send_lat -d droce0 -x 1 -s 2 -n 1000" "$B" "ib_send_lat -d droce0 -x 1 -s 2 -n 1000 10.0.0.1" ||
    return 1
  local f
  for f in "$logs/server.log" "$logs/client.log"; do
    grep -o 'empty polls that ran no round (nothing to do) [0-9]*\|rx [0-9]* datagrams.*empty)' "$f"
    grep -q 'own UDP socket' "$f" && grep -q 'empty polls that ran no round (nothing to do) 0$' "$f" || return 1
  done
}
check "ib_send_lat 2 B: every empty poll_cq runs its round (the socket is read), none skipped" lat_polls_run
check "ibv_ud_pingpong" pair "$A" "ibv_ud_pingpong -d droce0 -g 1 -n 200" "$B" "ibv_ud_pingpong -d droce0 -g 1 -n 200 10.0.0.1"
check "rping (rdma_cm: the kernel's route and neighbour)" \
  pair "$A" "rping -s -a 10.0.0.1 -C 10 -S 2000" "$B" "rping -c -a 10.0.0.1 -C 10 -S 2000 -v"
check "rping over IPv6" pair "$A" "rping -s -a fd00::1 -C 5" "$B" "rping -c -a fd00::1 -C 5 -v"
check "fi_pingpong -p verbs -e msg" \
  pair "$A" "fi_pingpong -p verbs -e msg -I 100 -S 4096" "$B" "fi_pingpong -p verbs -e msg -I 100 -S 4096 10.0.0.1"
check "fi_pingpong -p 'verbs;ofi_rxm' -e rdm" \
  pair "$A" "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 100 -S 4096" "$B" "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 100 -S 4096 10.0.0.1"

# TCP on the same interfaces while RDMA runs: both finish, and the kernel
# never answers a RoCEv2 frame (no ICMP port unreachable in a capture).
tcp_and_rdma() {  # STEERING [PERFTEST_ARGS]
  local more=${2:-}
  ip netns exec "$A" timeout 30 dumpcap -q -i nd0 -f "icmp or icmp6" -w "$logs/a-$1.pcapng" >/dev/null 2>&1 &
  local capa=$!
  ip netns exec "$B" timeout 30 dumpcap -q -i nd0 -f "icmp or icmp6" -w "$logs/b-$1.pcapng" >/dev/null 2>&1 &
  local capb=$!
  ip netns exec "$A" timeout "$t" iperf3 -s -1 -p 5201 >"$logs/iperf-s.log" 2>&1 &
  local ips=$!
  sleep 1
  ip netns exec "$B" timeout "$t" iperf3 -c 10.0.0.1 -p 5201 -t 4 >"$logs/iperf-c.log" 2>&1 &
  local ipc=$!
  # QP timeout 18 (1 s per retry): TCP and RDMA share two loaded cores here,
  # and a sender descheduled past perftest's default budget would fail the
  # pair for the machine's sake, not the interface's.
  pair "$A" "ib_write_bw -d droce0 -x 1 -s 65536 -D 4 -u 18 $more" "$B" "ib_write_bw -d droce0 -x 1 -s 65536 -D 4 -u 18 $more 10.0.0.1"
  local rdma=$?
  wait $ipc; local tcp=$?
  wait $ips
  sleep 1; kill $capa $capb 2>/dev/null; wait $capa $capb 2>/dev/null
  echo "--- iperf3 ($tcp)"; grep -E "sender|receiver" "$logs/iperf-c.log"
  local icmp=0 f
  for f in "$logs/a-$1.pcapng" "$logs/b-$1.pcapng"; do
    [ -s "$f" ] || { echo "no capture $f"; return 1; }
    icmp=$((icmp + $(tshark -r "$f" -Y 'icmp.type == 3 || icmpv6.type == 1' 2>/dev/null | wc -l)))
  done
  echo "ICMP unreachable in the captures: $icmp"
  [ $rdma -eq 0 ] && [ $tcp -eq 0 ] && [ $icmp -eq 0 ]
}
check "iperf3 on nd0 while ib_write_bw runs: both finish, no ICMP unreachable" tcp_and_rdma udp

# The processes' sockets (steering udp): the TC program steered the traffic
# above to them, droced's own socket took none of it; a process killed with
# its socket open leaves no steering behind (droced removes it when the
# process's connection closes).
no_stale_steering() {
  status "$A" | grep "tc: steered" | grep -v "steered 0 " || return 1
  # A pingpong server: it creates its QP, then waits for a client that never comes.
  on "$A" timeout "$t" ibv_rc_pingpong -d droce0 -g 1 -p 18555 >/dev/null 2>&1 &
  local s=$!
  local n=""
  for _ in $(seq 150); do
    n=$(status "$A" | grep -o "processes with sockets [0-9]*"); [ "$n" = "processes with sockets 1" ] && break; sleep 0.1
  done
  echo "while the server runs: $n"
  [ "$n" = "processes with sockets 1" ] || { kill $s; return 1; }
  local p
  for p in $(ip netns pids "$A"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = ibv_rc_pingpong ] && kill -9 $p; done
  wait $s 2>/dev/null
  for _ in $(seq 50); do
    n=$(status "$A" | grep -o "processes with sockets [0-9]*"); [ "$n" = "processes with sockets 0" ] && break; sleep 0.1
  done
  echo "after kill -9: $n"
  [ "$n" = "processes with sockets 0" ]
}
check "steering udp: the TC program steers, a killed process leaves no steering" no_stale_steering

# Another droce device of host A's droced (a fabric device on a private
# address): a program on droce0 (steering udp) reaches it through droced by
# its MAC, not through its socket (where the kernel has no route to it).
host_device() {
  ip netns exec "$A" "$ctl" link add droce1 ip 192.168.77.1 >/dev/null || return 1
  pair "$A" "ibv_rc_pingpong -d droce1 -g 1 -n 100" "$A" "ibv_rc_pingpong -d droce0 -g 1 -n 100 127.0.0.1"
  local rc=$?
  ip netns exec "$A" "$ctl" link del droce1 >/dev/null
  return $rc
}
check "steering udp: a program on droce0 reaches another device of its droced (droce1, 192.168.77.1)" host_device

# ibv_attach_mcast and detach on droce0: bad input gets EINVAL; nd0 is a
# member of the group (the kernel's view) while a QP of the host is attached
# to it, and leaves it with the last one.
mcast_membership() {  # GROUP (IPv4: IGMP, IPv6: MLD)
  on "$A" "$MCAST" droce0 "$1" 2 >"$logs/mcast.log" 2>&1 &
  local p=$! step seen="" tries=600
  # The first step waits for the program's start too (30 s, a loaded CI
  # host); each later one comes SECONDS (2) after the one before.
  for step in attached "one left" detached; do
    for _ in $(seq $tries); do grep -q "^$step" "$logs/mcast.log" && break; sleep 0.05; done
    grep -q "^$step" "$logs/mcast.log" || { seen="$seen, $step: not printed by $(date +%T)"; break; }
    tries=100
    ip -n "$A" maddr show dev nd0 | grep -qw "$1" && seen="$seen, $step: yes" || seen="$seen, $step: no"
  done
  wait $p; local rc=$?
  cat "$logs/mcast.log"; echo "member of $1$seen"
  # ibv_query_gid_ex names nd0 as GID 1's interface (RoCE v2: type 2).
  local ifindex; ifindex=$(ip netns exec "$A" cat /sys/class/net/nd0/ifindex)
  [ $rc -eq 0 ] && [ "$seen" = ", attached: yes, one left: yes, detached: no" ] &&
    grep -qx "gid 1 ndev_ifindex $ifindex gid_type 2" "$logs/mcast.log"
}
check "ibv_attach_mcast: EINVAL for a unicast GID and an unattached group; nd0 a member while a QP is attached; ibv_query_gid_ex names nd0" \
  mcast_membership 239.1.2.4
check "ibv_attach_mcast to an IPv6 group (ff0e::4): nd0 a member while a QP is attached" mcast_membership ff0e::4

# A program attached to a group outlives droced: host A's droced stops and
# starts again while a UD QP is attached; the program sees PORT_ERR and
# PORT_ACTIVE, takes its QP back to RTS, and nd0 is a member of the group
# again (the provider announces its groups to the new droced), so a datagram
# host B sends to the group reaches it. The stop logs no error about telling
# the program (its connection is closed before the interface is unbound).
mcast_after_restart() {  # GROUP
  on "$A" "$MCAST_RESTART" recv droce0 "$1" 40 >"$logs/mcr.log" 2>&1 &
  local p=$! member=no
  for _ in $(seq 200); do grep -q "^attached" "$logs/mcr.log" && break; sleep 0.05; done
  local daemon_log=/run/droce/netns/$A/droced.log stop_errors
  local logged; logged=$(wc -l <"$daemon_log")
  ip netns exec "$A" "$ctl" daemon stop || { kill $p; return 1; }
  # The stop unbinds nd0 after the program's connection closed: nothing is
  # sent on that connection any more (it failed with EBADF, or reached
  # whatever reused the descriptor).
  stop_errors=$(tail -n +$((logged + 1)) "$daemon_log" | grep -E "telling process|Bad file descriptor")
  ip netns exec "$A" "$ctl" daemon start || { kill $p; return 1; }
  for _ in $(seq 600); do grep -q "^ready" "$logs/mcr.log" && break; sleep 0.05; done
  ip -n "$A" maddr show dev nd0 | grep -qw "$1" && member=yes
  timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $B $MCAST_RESTART send droce0 $1 40" >"$logs/mcs.log" 2>&1 &
  local s=$!
  wait $p; local rc=$?
  kill $s 2>/dev/null; wait $s 2>/dev/null
  cat "$logs/mcr.log" "$logs/mcs.log"; echo "nd0 a member of $1 after the restart: $member"
  echo "droced's errors at the stop: ${stop_errors:-none}"
  [ $rc -eq 0 ] && [ $member = yes ] && grep -q "^received 64 bytes" "$logs/mcr.log" && [ -z "$stop_errors" ]
}
check "multicast after a droced restart: the group joined again, a datagram to it arrives, no error at the stop" mcast_after_restart 239.1.2.5

# Another VLAN's frames are never the interface's: a RoCEv2 frame to A's
# nd0 MAC and 10.0.0.1 (QP 1), tagged with VLAN 100, sent from B, moves none
# of the steering's counters; the same frame untagged (the control) does.
# (This kernel has no VLAN interfaces; the kernel moves the tag into the
# frame's metadata before TC and packet sockets see it all the same.)
inject_roce() {  # VLAN (0: untagged)
  local dst; dst=$(ip -n "$A" -br link show nd0 | awk '{print $3}')
  ip netns exec "$B" python3 - "$dst" "$1" <<'PY'
import socket, struct, sys
dst = bytes.fromhex(sys.argv[1].replace(':', '')); vlan = int(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(('nd0', 0))
src = s.getsockname()[4]
bth = bytes([0x64, 0, 0xff, 0xff, 0, 0, 0, 1]) + bytes(4) + bytes(8)  # UD SEND only to QP 1, DETH
payload = bth + bytes(4)  # ICRC (not checked before the steering)
udp = struct.pack('!HHHH', 49152, 4791, 8 + len(payload), 0) + payload
ip = bytearray(struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                           socket.inet_aton('10.0.0.2'), socket.inet_aton('10.0.0.1')))
c = sum(struct.unpack('!10H', bytes(ip))); c = (c & 0xffff) + (c >> 16); c = (c & 0xffff) + (c >> 16)
ip[10:12] = struct.pack('!H', ~c & 0xffff)
tag = struct.pack('!HH', 0x8100, vlan) if vlan else b''
for _ in range(5):
    s.send(dst + src + tag + struct.pack('!H', 0x0800) + bytes(ip) + udp)
PY
}
steering_taken() {  # STEERING: what the steering took so far
  case $1 in
    udp) status "$A" | grep -o 'tc: steered [0-9]* to_daemon [0-9]*' ;;
    xdp) status "$A" | grep -o 'xdp: redirected [0-9]*' ;;
    af_packet) status "$A" | grep -o 'netdev nd0: .*, rx [0-9]* pkts' | grep -o 'rx [0-9]* pkts' ;;
  esac
}
vlan_frames_skipped() {  # STEERING
  local before after control
  before=$(steering_taken "$1"); inject_roce 100; sleep 0.5; after=$(steering_taken "$1")
  inject_roce 0; sleep 0.5; control=$(steering_taken "$1")
  echo "$1: before '$before', after VLAN 100 frames '$after', after untagged ones '$control'"
  [ -n "$before" ] && [ "$before" = "$after" ] && [ "$after" != "$control" ]
}
check "steering udp: VLAN 100 frames for nd0's address are not taken (untagged ones are)" vlan_frames_skipped udp

# Addresses added and removed at run time: the GID table follows; a QP pair
# on the removed address errors (QP_FATAL), the pair on 10.0.0.1 goes on.
addr_change() {
  ip -n "$A" addr add 10.0.1.1/24 dev nd0 || return 1
  local gid=""
  for _ in $(seq 50); do
    gid=$(grep -l '0000:0000:0000:0000:0000:ffff:0a00:0101' /run/droce/netns/$A/sysfs/class/infiniband/droce0/ports/1/gids/* 2>/dev/null | head -1)
    [ -n "$gid" ] && break; sleep 0.1
  done
  [ -n "$gid" ] || { echo "10.0.1.1 never became a GID"; return 1; }
  gid=$(basename "$gid"); echo "10.0.1.1 is GID $gid"
  on "$A" "$EVENTS" droce0 "$gid" 1 4 >"$logs/events.log" 2>&1 &
  local ev=$!
  for _ in $(seq 100); do grep -q ready "$logs/events.log" && break; sleep 0.1; done
  ip -n "$A" addr del 10.0.1.1/24 dev nd0
  wait $ev; local rc=$?
  cat "$logs/events.log"
  [ $rc -eq 0 ] && grep -q "event GID_CHANGE" "$logs/events.log" && grep -q "QP_FATAL" "$logs/events.log" &&
    grep -q "pair $gid state 6/6" "$logs/events.log" && grep -q "pair 1 state 3/3" "$logs/events.log" &&
    ! grep -q "ffff:0a00:0101" /run/droce/netns/$A/sysfs/class/infiniband/droce0/ports/1/gids/*
}
check "an address added and removed at run time: GID_CHANGE, its QPs error, others go on" addr_change

# The interface down and up while ib_write_bw runs: PORT_ERR and the QPs
# flushed, PORT_ACTIVE after; the writers end instead of hanging, and new
# traffic runs once the interface is up.
link_flap() {
  on "$A" "$EVENTS" droce0 1 1 10 >"$logs/events.log" 2>&1 &
  local ev=$!
  timeout 30 bash -c "$(declare -f on); ctl='$ctl'; on $A ib_write_bw -d droce0 -x 1 -D 8" >"$logs/server.log" 2>&1 &
  local srv=$!
  sleep 1.5
  timeout 30 bash -c "$(declare -f on); ctl='$ctl'; on $B ib_write_bw -d droce0 -x 1 -D 8 10.0.0.1" >"$logs/client.log" 2>&1 &
  local cli=$!
  sleep 2
  ip -n "$A" link set nd0 down; sleep 1
  local during; during=$(ip netns exec "$A" "$ctl" daemon status | grep -o 'port \(ACTIVE\|DOWN\)' | head -1)
  ip -n "$A" link set nd0 up
  wait $ev; local erc=$?
  wait $cli; local crc=$?
  wait $srv; local src=$?
  cat "$logs/events.log"; echo "port while down: $during; ib_write_bw server $src client $crc (124: a hang)"
  [ $erc -eq 0 ] && [ "$during" = "port DOWN" ] && [ $crc -ne 124 ] && [ $src -ne 124 ] &&
    grep -q "event PORT_ERR" "$logs/events.log" && grep -q "event PORT_ACTIVE" "$logs/events.log" &&
    grep -q "pair 1 state 6/6" "$logs/events.log" && grep -q "port ACTIVE" "$logs/events.log" &&
    sleep 1 && pair "$A" "ibv_rc_pingpong -d droce0 -g 1 -n 100" "$B" "ibv_rc_pingpong -d droce0 -g 1 -n 100 10.0.0.1"
}
check "nd0 down and up during traffic: PORT_ERR, QPs flushed, PORT_ACTIVE, traffic again" link_flap

# droce0 bound again on both ends, with another steering.
rebind() {  # STEERING [set KEY=VALUE...]
  local ns
  for ns in "$A" "$B"; do
    ip netns exec "$ns" "$ctl" link del droce0 || return 1
    ip netns exec "$ns" "$ctl" link add droce0 netdev nd0 steering "$@" >/dev/null || return 1
  done
}
# The index of ADDR in NS's droce0 GID table (sysfs), once it is there.
gid_of() {  # NS ADDR
  local want f _
  want=$(python3 -c 'import ipaddress, sys; print(ipaddress.ip_address(sys.argv[1]).exploded)' "$2")
  for _ in $(seq 50); do
    for f in /run/droce/netns/$1/sysfs/class/infiniband/droce0/ports/1/gids/*; do
      [ "$(cat "$f" 2>/dev/null)" = "$want" ] && { basename "$f"; return 0; }
    done
    sleep 0.1
  done
  return 1
}
# udp_gso: 64 KiB messages over IPv6 leave as segmented sends and arrive
# coalesced (both ends' counters say so), their data checked (-c). The
# fd00:: addresses again (nd0 down above flushed them); min_ack_timeout: a
# process off the CPU for half a second on a loaded host is no failure here.
segmented() {
  ip -n "$A" addr replace fd00::1/64 dev nd0 nodad && ip -n "$B" addr replace fd00::2/64 dev nd0 nodad &&
    rebind udp set udp_gso=on set min_ack_timeout=17 || return 1
  local ga gb
  ga=$(gid_of "$A" fd00::1) && gb=$(gid_of "$B" fd00::2) || { echo "no fd00:: GID"; return 1; }
  pair_stats "$A" "ibv_rc_pingpong -d droce0 -g $ga -s 65536 -n 200 -c" \
    "$B" "ibv_rc_pingpong -d droce0 -g $gb -s 65536 -n 200 -c 10.0.0.1" || return 1
  local f
  for f in "$logs/server.log" "$logs/client.log"; do
    grep -o "coalesced [0-9]*\|segmented [0-9]*[^)]*) in [0-9]* calls" "$f"
    grep -q 'segmented [1-9]' "$f" && grep -q 'coalesced [1-9]' "$f" || return 1
    # Whole bursts (the socket's port says its reader works by system
    # calls): 64 frames of 1 KiB leave in 2 sendmmsg calls per message, the
    # ACKs in at most one more; split at tx_flush_bytes (16 KiB) they took 4.
    local calls; calls=$(grep -o 'segmentation refused [0-9]*) in [0-9]* calls' "$f" | awk '{print $5}')
    [ -n "$calls" ] && [ "$calls" -lt 800 ] || { echo "sendmmsg calls for 200 messages: ${calls:-none} (>= 800: bursts split)"; return 1; }
  done
}
check "steering udp, udp_gso=on: 64 KiB messages over IPv6 segmented and coalesced, data checked" segmented
# udp_gather: long packets' payloads leave from the registered memory (three
# iovecs a datagram), segmented over IPv6 and one by one over IPv4, at
# path MTU 1024 (the veth's 1500); ibv_rc_pingpong -c checks every byte of both directions.
gathered() {
  rebind udp set udp_gso=on set udp_gather=on set min_ack_timeout=17 || return 1
  local ga gb f
  ga=$(gid_of "$A" fd00::1) && gb=$(gid_of "$B" fd00::2) || { echo "no fd00:: GID"; return 1; }
  pair_stats "$A" "ibv_rc_pingpong -d droce0 -g $ga -m 1024 -s 65531 -n 100 -c" \
    "$B" "ibv_rc_pingpong -d droce0 -g $gb -m 1024 -s 65531 -n 100 -c 10.0.0.1" || return 1
  grep -q 'segmented [1-9]' "$logs/client.log" || { echo "IPv6: not segmented"; return 1; }
  for f in "$logs/server.log" "$logs/client.log"; do
    grep -o "payloads sent from registered memory [0-9]*" "$f"
    grep -q 'payloads sent from registered memory [1-9]' "$f" || return 1
  done
  pair_stats "$A" "ibv_rc_pingpong -d droce0 -g 1 -m 1024 -s 65531 -n 100 -c" \
    "$B" "ibv_rc_pingpong -d droce0 -g 1 -m 1024 -s 65531 -n 100 -c 10.0.0.1" || return 1
  for f in "$logs/server.log" "$logs/client.log"; do
    grep -o "payloads sent from registered memory [0-9]*" "$f"
    grep -q 'payloads sent from registered memory [1-9]' "$f" || return 1
  done
}
check "steering udp, udp_gather=on: payloads sent from registered memory, IPv6 segmented and IPv4, data checked" gathered
# Two processes of one host on the netdev-bound device: their frames stay on
# the host (the device's own MAC) and cross droced's switch, then the direct
# ring; UdpIo hands the long SENDs' gather frames to them as they are (the
# ring copies each payload from the registered memory into its slot), so its
# own counter flattens none. ibv_rc_pingpong -c checks every byte.
gathered_on_host() {
  rebind udp set udp_gather=on set min_ack_timeout=17 || return 1
  pair_stats "$A" "ibv_rc_pingpong -d droce0 -g 1 -m 1024 -s 65531 -n 100 -c" \
    "$A" "ibv_rc_pingpong -d droce0 -g 1 -m 1024 -s 65531 -n 100 -c 10.0.0.1" || return 1
  local f
  for f in "$logs/server.log" "$logs/client.log"; do
    grep -o "direct paths [0-9]* .*flattened [0-9]*)" "$f"
    grep -o "payloads sent from registered memory [0-9]* (flattened [0-9]*)" "$f"
    grep -q 'direct paths [1-9].*gathered [1-9]' "$f" || { echo "no gather frame into a direct ring"; return 1; }
    grep -q 'payloads sent from registered memory [0-9]* (flattened 0)' "$f" || { echo "UdpIo flattened"; return 1; }
  done
}
check "steering udp, two processes of one host: gather frames into the direct ring as they are, data checked" \
  gathered_on_host
# event_stream_nap_us: a receiver waiting for completions (ib_send_bw -e)
# inside a stream of coalesced 64 KiB messages naps instead of busy-polling,
# and the stream completes.
napped() {
  rebind udp set udp_gso=on set event_stream_nap_us=20 set min_ack_timeout=17 || return 1
  local ga gb
  ga=$(gid_of "$A" fd00::1) && gb=$(gid_of "$B" fd00::2) || { echo "no fd00:: GID"; return 1; }
  pair_stats "$A" "ib_send_bw -d droce0 -x $ga -s 65536 -e -n 4000" \
    "$B" "ib_send_bw -d droce0 -x $gb -s 65536 -e -n 4000 10.0.0.1" || return 1
  grep -q '^ *65536 *4000 ' "$logs/client.log" || { echo "no bandwidth line"; return 1; }
  grep -o "event wait naps [0-9]* (found nothing [0-9]*)" "$logs/server.log"
  grep -q 'event wait naps [1-9]' "$logs/server.log"
}
check "steering udp, event_stream_nap_us=20: the receiver of ib_send_bw -e naps inside the stream, which completes" napped
# Where XDP is not available: a packet socket with a BPF filter.
fallback() {
  rebind af_packet && status "$A" | grep "netdev nd0: af_packet" && ! ip -n "$A" link show nd0 | grep -q prog/xdp &&
    pair "$A" "ibv_rc_pingpong -d droce0 -g 1 -n 300 -c" "$B" "ibv_rc_pingpong -d droce0 -g 1 -n 300 -c 10.0.0.1" &&
    tcp_and_rdma af_packet && vlan_frames_skipped af_packet
}
check "the af_packet fallback: pingpong, ib_write_bw beside iperf3, no ICMP unreachable" fallback

# AF_XDP through droced (steering xdp): XDP native on the veth. Bound while
# the kernel lacks the interfaces' link-local addresses, given back after (as
# their DAD ends a second after `ip link set up` and droce-cluster binds at
# once): GID 0, fe80:: with the MAC's EUI-64, is steered anyway (below).
xdp_steering() {
  local ns ll_a ll_b
  ll_a=$(ip -n "$A" -6 addr show dev nd0 scope link | awk '/inet6/ {print $2; exit}')
  ll_b=$(ip -n "$B" -6 addr show dev nd0 scope link | awk '/inet6/ {print $2; exit}')
  [ -n "$ll_a" ] && [ -n "$ll_b" ] || { echo "no link-local address on nd0"; return 1; }
  for ns in "$A" "$B"; do ip -n "$ns" -6 addr flush dev nd0 scope link; done
  rebind xdp; local rc=$?
  ip -n "$A" addr add "$ll_a" dev nd0 nodad && ip -n "$B" addr add "$ll_b" dev nd0 nodad || return 1
  [ $rc -eq 0 ] && ip -n $A link show nd0 | grep -q 'prog/xdp.*droce_xdp' && ip -n $B link show nd0 | grep -q 'prog/xdp.*droce_xdp' &&
    status "$A" | grep 'netdev nd0: AF_XDP, XDP native' &&
    pair "$A" "ibv_rc_pingpong -d droce0 -g 1 -n 300 -c" "$B" "ibv_rc_pingpong -d droce0 -g 1 -n 300 -c 10.0.0.1" &&
    tcp_and_rdma xdp && vlan_frames_skipped xdp
}
check "steering xdp: pingpong, ib_write_bw beside iperf3, no ICMP unreachable" xdp_steering

# GID 0 (the default GID, fe80:: with the MAC's EUI-64) is steered to droce as
# every other GID: libfabric's UD-based providers address peers by it.
default_gid() {
  pair "$A" "ibv_ud_pingpong -d droce0 -g 0 -n 200" "$B" "ibv_ud_pingpong -d droce0 -g 0 -n 200 10.0.0.1"
}
check "steering xdp: ibv_ud_pingpong over GID 0 (fe80::, usable after the binding)" default_gid
# droce0 is still bound with steering xdp (above): binding the interface's
# AF_XDP queue again at once can find the kernel still releasing it.
check "daemon stop unbinds nd0 (no XDP program left)" bash -c "
  ip -n $A link show nd0 | grep -q prog/xdp && ip netns exec $A '$ctl' daemon stop && ! ip -n $A link show nd0 | grep -q prog/xdp"

# A veth with 4 RX queues (and 4 TX queues) on each side: with steering
# xdp droced has an AF_XDP socket on every RX queue and sends each flow on
# the TX queue of its UDP source port, which a veth delivers on the peer's RX
# queue of the same number: ib_write_bw with 8 QPs (8 flows) from B to A
# beside iperf3 arrives on at least 2 of A's queues (droced's per-queue
# counters), the frames for us on a queue without a socket stay 0, and no
# ICMP unreachable is seen. Every steering carries 3 pingpong processes at
# once (3 flows, which the sending side spreads over its queues).
multiqueue() {
  ip netns add "$QA" && ip netns add "$QB" || return 1
  ip -n "$QA" link add nd0 numtxqueues 4 numrxqueues 4 type veth peer name nd0 numtxqueues 4 numrxqueues 4 netns "$QB" || return 1
  local ns st p k rc=0
  for ns in "$QA" "$QB"; do ip -n "$ns" link set lo up; ip -n "$ns" link set nd0 up; done
  ip -n "$QA" addr add 10.0.0.1/24 dev nd0; ip -n "$QB" addr add 10.0.0.2/24 dev nd0
  for st in xdp udp af_packet; do
    for ns in "$QA" "$QB"; do
      ip netns exec "$ns" "$ctl" link del droce0 >/dev/null 2>&1
      ip netns exec "$ns" "$ctl" link add droce0 netdev nd0 steering $st >/dev/null || return 1
    done
    if [ $st = xdp ]; then
      status "$QA" | grep "netdev nd0: AF_XDP, XDP native on nd0 (4 RX queues, a socket each)" || return 1
      A=$QA B=$QB tcp_and_rdma xdp-mq "-q 8" || return 1
      local line; line=$(status "$QA" | grep "xdp: redirected")
      echo "host A: $line"; echo "host B: $(status "$QB" | grep "xdp: redirected")"
      grep -q "no_socket 0 " <<<"$line" || return 1
      local busy; busy=$(grep -o "queue:.*" <<<"$line" | tr ' ' '\n' | grep -cE "^[0-3]:[1-9]")
      echo "A's RX queues with frames: $busy"
      [ "$busy" -ge 2 ] || return 1
    fi
    local pids=()
    for k in 0 1 2; do
      on "$QA" timeout "$t" ibv_rc_pingpong -d droce0 -g 1 -n 200 -p $((18600 + k)) >"$logs/mq-s$k.log" 2>&1 &
      pids+=($!)
    done
    for k in 0 1 2; do LISTEN_NS=$QA wait_listen "${pids[$k]}" $((18600 + k)); done
    for k in 0 1 2; do
      on "$QB" timeout "$t" ibv_rc_pingpong -d droce0 -g 1 -n 200 -p $((18600 + k)) 10.0.0.1 >"$logs/mq-c$k.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    echo "steering $st: $(grep -h 'iters in' "$logs"/mq-c*.log | wc -l) of 3 clients done"
  done
  return $rc
}
check "a veth with 4 RX queues: steering xdp on every queue (8 QPs beside iperf3 on 2+ queues); udp and af_packet too" multiqueue

# An interface with more RX queues than droced's memory holds AF_XDP UMEMs
# for (16 MiB each, 7 in the default 256 MiB) is refused with the numbers;
# `droce-ctl daemon start --memory-mb` gives droced more, and the binding
# then takes every queue. A running daemon's memory cannot be changed.
memory_for_queues() {
  [ -e "/run/netns/$QA" ] || ip netns add "$QA" || return 1  # multiqueue's host A, or a new one (ONLY=)
  ip -n "$QA" link set lo up
  ip netns exec "$QA" "$ctl" link del droce0 >/dev/null 2>&1
  ip netns exec "$QA" "$ctl" daemon stop >/dev/null 2>&1
  ip -n "$QA" link add nd8 numtxqueues 8 numrxqueues 8 type veth peer name nd8p numtxqueues 8 numrxqueues 8 || return 1
  ip -n "$QA" link set nd8 up && ip -n "$QA" link set nd8p up && ip -n "$QA" addr add 10.0.8.1/24 dev nd8 || return 1
  local out rc=0
  out=$(ip netns exec "$QA" "$ctl" link add droce8 netdev nd8 steering xdp 2>&1) && { echo "not refused: $out"; return 1; }
  echo "$out"; grep -q "8 RX queues need 16 MiB of AF_XDP UMEM each, droced's memory holds 7" <<<"$out" || return 1
  ip netns exec "$QA" "$ctl" link del droce8 >/dev/null 2>&1
  ip netns exec "$QA" "$ctl" daemon stop >/dev/null
  ip netns exec "$QA" "$ctl" daemon start --memory-mb 512 || return 1
  tr '\0' ' ' </proc/"$(cat /run/droce/netns/$QA/droced.pid)"/cmdline | grep -q -- "--memory-mb 512" || return 1
  ip netns exec "$QA" "$ctl" link add droce8 netdev nd8 steering xdp set tx_flush_bytes=4096 || rc=1
  status "$QA" | grep "netdev nd8: AF_XDP, XDP native on nd8 (8 RX queues, a socket each)" || rc=1
  grep -rlx 'tx_flush_bytes=4096' /run/droce/netns/$QA --include=droce.conf || rc=1  # a `set` reaches the device file
  out=$(ip netns exec "$QA" "$ctl" daemon start --memory-mb 1024 2>&1) && rc=1
  echo "$out"; grep -q "running for .* already" <<<"$out" || rc=1
  ip netns exec "$QA" "$ctl" link del droce8 >/dev/null
  ip netns exec "$QA" "$ctl" daemon stop >/dev/null
  ip -n "$QA" link del nd8
  return $rc
}
check "8 RX queues: refused in droced's default memory, bound after daemon start --memory-mb 512" memory_for_queues

# A cluster of 3 on a bridge (tools/droce-cluster): host 3 <-> host 1 and
# rdma_cm host 2 -> host 3; Open MPI launches through it as its remote shell.
cluster3() {
  export DROCE_CTL=$ctl
  "$cluster" up 3 --name "$C" || return 1
  timeout "$t" "$cluster" run --name "$C" 1 ibv_rc_pingpong -d droce0 -g 1 -n 200 >"$logs/c1.log" 2>&1 &
  local s=$!; sleep 1.5
  timeout "$t" "$cluster" run --name "$C" 3 ibv_rc_pingpong -d droce0 -g 1 -n 200 10.0.0.1 2>&1 | tail -1
  wait $s || return 1
  timeout "$t" "$cluster" run --name "$C" 3 rping -s -a 10.0.0.3 -C 5 >"$logs/c3.log" 2>&1 &
  s=$!; sleep 1.5
  timeout "$t" "$cluster" run --name "$C" 2 rping -c -a 10.0.0.3 -C 5 >/dev/null || return 1
  wait $s || return 1
  if command -v mpirun >/dev/null; then
    timeout "$t" "$cluster" run --name "$C" 1 mpirun --allow-run-as-root --oversubscribe \
      --mca plm_rsh_agent "$cluster rsh --name $C" --host "$C-2,$C-3" -np 2 \
      bash -c 'echo "$(ip -4 -br addr show eth0 | awk "{print \$3}") $DROCE_RUN_DIR"' >"$logs/mpi.log" 2>&1
    cat "$logs/mpi.log"
    # Each rank in its host's namespace and with its host's droced (not mpirun's).
    grep -qx "10.0.0.2/24 /run/droce/netns/$C-2" "$logs/mpi.log" &&
      grep -qx "10.0.0.3/24 /run/droce/netns/$C-3" "$logs/mpi.log" || return 1
  fi
}
check "a cluster of 3 on a bridge: pingpong, rping, mpirun through droce-cluster rsh" cluster3

# Multicast RoCEv2 over the interfaces (rdma_join_multicast, ibv_attach_mcast):
# host 2 (one process) and host 3 (two) join 239.1.2.3 with librdmacm's
# mckey, host 1 sends to it; every receiver gets every datagram; the
# interfaces are members while the QPs are attached (the kernel's IGMP view)
# and leave after; each steering.
mcast_receivers() {  # STEERING
  local k out
  for k in 2 3 4; do
    timeout "$t" "$cluster" run --name "$C" $((k == 4 ? 3 : k)) mckey -m 239.1.2.3 -b 10.0.0.$((k == 4 ? 3 : k)) \
      -C 20 -S 256 >"$logs/mc$k.log" 2>&1 &
    eval "mc$k=\$!"
  done
  # Both joined: the interfaces are members (the kernel's view), droced says so.
  for _ in $(seq 100); do
    out=$(for k in 2 3; do ip netns exec "$C-$k" "$ctl" daemon status | grep -c 'multicast groups: 239.1.2.3'; done | tr -d '\n')
    [ "$out" = 11 ] && break; sleep 0.1
  done
  for k in 2 3; do ip -n "$C-$k" maddr show dev eth0 | grep -q 239.1.2.3 || { echo "host $k: eth0 is no member"; return 1; }; done
  echo "members: hosts 2 and 3"
}
multicast() {  # STEERING
  local k rc=0 mc2 mc3 mc4
  if [ "$1" != auto ]; then
    for k in 1 2 3; do
      ip netns exec "$C-$k" "$ctl" link del droce0 && ip netns exec "$C-$k" "$ctl" link add droce0 netdev eth0 steering "$1" >/dev/null || return 1
    done
  fi
  ip netns exec "$C-1" "$ctl" daemon status | grep "netdev eth0"
  mcast_receivers "$1" || return 1
  timeout "$t" "$cluster" run --name "$C" 1 mckey -m 239.1.2.3 -b 10.0.0.1 -s -C 20 -S 256 >"$logs/mc1.log" 2>&1 || rc=1
  wait $mc2 || rc=1
  wait $mc3 || rc=1
  wait $mc4 || rc=1
  for k in 1 2 3 4; do echo "--- mckey $k"; tail -3 "$logs/mc$k.log"; done
  for k in 2 3 4; do grep -q "data transfers complete" "$logs/mc$k.log" || rc=1; done
  # The last QP gone, each interface left the group.
  for k in 2 3; do
    ip -n "$C-$k" maddr show dev eth0 | grep -q 239.1.2.3 && { echo "host $k: eth0 still a member"; rc=1; }
  done
  return $rc
}
check "multicast: mckey from host 1 to hosts 2 and 3 (two processes on 3) (steering auto)" multicast auto
check "multicast: mckey from host 1 to hosts 2 and 3 (two processes on 3) (steering xdp)" multicast xdp
check "multicast: mckey from host 1 to hosts 2 and 3 (two processes on 3) (steering af_packet)" multicast af_packet
check "the cluster goes down" bash -c "DROCE_CTL='$ctl' '$cluster' down --name '$C' && ! ip netns list | grep -q '^$C-'"

finish netns
