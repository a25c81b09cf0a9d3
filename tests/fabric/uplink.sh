#!/usr/bin/env bash
# Two hosts on this machine (doc/droced.md, "Uplinks"): run directories A
# and B, each with its own droced, joined by a memif uplink (A's daemon the
# memif server, B's the client). droce0 (10.0.0.1) is A's, droce2
# (10.0.0.3) B's; programs of either host reach the other's device through
# both switches: ARP crosses the uplink, unicast for a MAC not on the
# segment goes out of it.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
A=$(mktemp -d /tmp/droce-hostA.XXXXXX) B=$(mktemp -d /tmp/droce-hostB.XXXXXX)
log_dirs=("$A" "$B")
FAIL_TAIL=50
cleanup() {
  for d in "$B" "$A"; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$A" "$B"
}
trap cleanup EXIT
p=${SIDE_PORT:-$((20000 + ($$ + 11) % 20000))}
on() {  # host dir, then a command with that host's verbs environment
  local dir=$1; shift
  (export DROCE_RUN_DIR=$dir; eval "$("$ctl" env)"; exec "$@")
}
DROCE_RUN_DIR=$A DROCED_UPLINK=memif:$A/uplink.sock:server "$ctl" link add droce0 ip 10.0.0.1 >/dev/null || exit 1
DROCE_RUN_DIR=$B DROCED_UPLINK=memif:$A/uplink.sock:client "$ctl" link add droce2 ip 10.0.0.3 >/dev/null || exit 1
check "both daemons report their uplink" bash -c "DROCE_RUN_DIR=$A '$ctl' daemon status | grep 'uplink memif' &&
  DROCE_RUN_DIR=$B '$ctl' daemon status | grep 'uplink memif'"
listening() { DROCE_RUN_DIR=$1 "$ctl" daemon status 2>/dev/null | sed -n 's/^cm: [0-9]* ids, \([0-9]*\) listening.*/\1/p'; }
pair() {  # server host, server cmd, client host, client cmd
  local attempt
  for attempt in 1 2; do
    timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $1 $2" >"$A/server.log" 2>&1 &
    local server=$!
    sleep 1.5
    # An rdma_cm server: the client starts once the server's daemon counts its listener.
    for _ in $(seq 100); do [ "$(listening "$1")" != 0 ] || ! grep -q rping <<<"$2" && break; sleep 0.1; done
    timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $3 $4" >"$A/client.log" 2>&1
    local crc=$?
    wait $server; local src=$?
    echo "--- server ($src)"; tail -4 "$A/server.log"; echo "--- client ($crc)"; tail -4 "$A/client.log"
    [ $src -eq 0 ] && [ $crc -eq 0 ] && return 0
    rping_teardown_race "$A/server.log" "$A/client.log" || return 1
    echo "(rping's own teardown race, lib.sh: once more)"
  done
  return 1
}
check "ibv_rc_pingpong -c host A droce0 <-> host B droce2 across the uplink" \
  pair "$A" "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 500 -c" "$B" "ibv_rc_pingpong -p $p -d droce2 -g 1 -n 500 -c 127.0.0.1"
check "ib_write_bw host B droce2 -> host A droce0 across the uplink" \
  pair "$A" "ib_write_bw -p $p -d droce0 -x 1 -D 2" "$B" "ib_write_bw -p $p -d droce2 -x 1 -D 2 127.0.0.1"
# rdma_cm across the uplink: host B's daemon resolves 10.0.0.1 by ARP out of
# its uplink and its CM's MADs cross both switches to host A's (doc/cm.md).
check "rping -C 10 -S 2000 host B droce2 -> host A droce0 across the uplink (rdma_cm)" \
  pair "$A" "rping -s -a 10.0.0.1 -p $p -C 10 -S 2000" "$B" "rping -c -a 10.0.0.1 -p $p -C 10 -S 2000 -v"
check "uplink counters moved on both" bash -c "DROCE_RUN_DIR=$A '$ctl' daemon status | grep -E 'uplink memif.*to_uplink [1-9].*rx [1-9]' &&
  DROCE_RUN_DIR=$B '$ctl' daemon status | grep -E 'uplink memif.*to_uplink [1-9].*rx [1-9]'"
# A device that trusts its link without the ICRC check (rx_icrc_trust) does
# not start on a daemon with an uplink: frames from a wire reach it.
trusting() {
  DROCE_RUN_DIR=$A "$ctl" link add droce1 ip 10.0.0.2 set rx_icrc_trust=on >/dev/null || return 1
  local out; out=$(on "$A" ibv_rc_pingpong -d droce1 -g 1 -n 5 2>&1)
  DROCE_RUN_DIR=$A "$ctl" link del droce1 >/dev/null
  echo "$out" | head -3
  grep -q "rx_icrc_trust=on, but droced has an uplink" <<<"$out"
}
check "rx_icrc_trust=on is refused on a daemon with an uplink" trusting

# The same two hosts joined by a netdev instead: each daemon's uplink is
# net_af_packet on one end of a veth pair (root only; path MTU 2048 on
# af_packet, doc/ethdev.md). Host D's end and daemon live in their own
# network namespace, as another host's would: DPDK 22.11's af_packet joins
# PACKET_FANOUT group (pid ^ ifindex) & 0xffff, and two daemons in one
# namespace whose groups collide fail to start (EINVAL; doc/droced.md).
ns=dfu$$
if ip link add dfu$$a type veth peer name dfu$$b 2>/dev/null && ip netns add $ns 2>/dev/null &&
   ip link set dfu$$b netns $ns; then
  for d in "$B" "$A"; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
  C=$(mktemp -d /tmp/droce-hostC.XXXXXX) D=$(mktemp -d /tmp/droce-hostD.XXXXXX)
  cleanup() {
    for d in "$B" "$A" "$D" "$C"; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
    ip link del dfu$$a 2>/dev/null
    ip netns del $ns 2>/dev/null
    [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$A" "$B" "$C" "$D"
  }
  ip link set dfu$$a mtu 9000 up; ip netns exec $ns ip link set dfu$$b mtu 9000 up
  afp="framesz=4096,blocksz=4096,framecnt=1024,qpairs=1"
  DROCE_RUN_DIR=$C DROCED_UPLINK="vdev:net_af_packet_up,iface=dfu$$a,$afp" "$ctl" link add droce0 ip 10.0.0.1 ip fd00::1 mtu 2048 >/dev/null &&
  DROCE_RUN_DIR=$D DROCED_UPLINK="vdev:net_af_packet_up,iface=dfu$$b,$afp" ip netns exec $ns "$ctl" link add droce2 ip 10.0.0.3 ip fd00::3 mtu 2048 >/dev/null ||
    { echo "FAIL registering the af_packet hosts"; failed=$((failed + 1)); }
  A=$C B=$D
  log_dirs=("$C" "$D")
  check "af_packet uplinks on a veth pair: ibv_rc_pingpong -c droce0 <-> droce2" \
    pair "$C" "ibv_rc_pingpong -p $p -d droce0 -g 1 -n 300 -c" "$D" "ibv_rc_pingpong -p $p -d droce2 -g 1 -n 300 -c 127.0.0.1"
  check "af_packet uplinks on a veth pair: ib_write_bw droce2 -> droce0" \
    pair "$C" "ib_write_bw -p $p -d droce0 -x 1 -D 2" "$D" "ib_write_bw -p $p -d droce2 -x 1 -D 2 127.0.0.1"
  check "af_packet uplinks on a veth pair: rping droce2 -> droce0 (rdma_cm, ARP over the uplink)" \
    pair "$C" "rping -s -a 10.0.0.1 -p $p -C 10" "$D" "rping -c -a 10.0.0.1 -p $p -C 10 -v"
  check "af_packet uplinks on a veth pair: rping over IPv6 droce2 -> droce0 (neighbour solicitation over the uplink)" \
    pair "$C" "rping -s -a fd00::1 -p $p -C 10" "$D" "rping -c -a fd00::1 -p $p -C 10 -v"
  check "af_packet uplink counters moved" bash -c "DROCE_RUN_DIR=$D '$ctl' daemon status | grep -E 'uplink net_af_packet_up.*to_uplink [1-9].*rx [1-9]'"
else
  ip link del dfu$$a 2>/dev/null; ip netns del $ns 2>/dev/null
  echo "SKIP af_packet uplinks (cannot create a veth pair or a network namespace: not root?)"
fi
finish uplink
