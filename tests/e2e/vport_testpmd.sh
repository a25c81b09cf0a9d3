#!/usr/bin/env bash
# End to end over DPDK's other virtual ports: vport_testpmd.sh KIND [droce-testpmd]
#   pcap    net_pcap (iface= live mode) on a veth pair between two namespaces
#   af_xdp  net_af_xdp on a veth pair between two namespaces
#   tap     net_tap: two taps on a Linux bridge in one namespace
#   ring    net_ring: both sides in one process (--role pair)
# Each runs write_bw, read_bw and write_lat (and send_bw, atomic_bw) with data
# verified on both sides (a side exits non-zero on any error or verification
# failure), at the largest path MTU the port carries and at 1024, and checks
# that a too large MTU is refused with a message. Exit 77 (skip) only when the
# kernel lacks what the port needs: network namespaces, AF_XDP sockets,
# /dev/net/tun or the bridge.
set -u
kind=${1:?usage: vport_testpmd.sh pcap|af_xdp|tap|ring [droce-testpmd]}
root=$(cd "$(dirname "$0")/../.." && pwd)
export DROCE_TESTPMD=$(realpath "${2:-$root/build/apps/testpmd/droce-testpmd}")

skip() { echo "SKIP ($kind): $*"; exit 77; }
need_netns() {
  ip netns add droce-probe-$$ 2>/dev/null || skip "cannot create network namespaces here"
  if [ "$kind" = tap ]; then
    if ! ip -n droce-probe-$$ link add dbr0 type bridge 2>/dev/null; then
      ip netns del droce-probe-$$
      skip "the kernel has no Linux bridge (ip link add type bridge failed)"
    fi
  fi
  ip netns del droce-probe-$$
}

eal_ring="--file-prefix=droce-ring-$$ --no-huge -m 512 --no-pci --log-level=error"
case $kind in
  pcap)
    need_netns
    pair() { PMD=pcap bash "$root/tools/veth-pair.sh" "$@"; }
    mtus="4096 1024" too_big="" ;;
  af_xdp)
    need_netns
    # AF_XDP = 44: EAFNOSUPPORT means a kernel built without CONFIG_XDP_SOCKETS.
    if ! err=$(python3 -c 'import socket; socket.socket(44, socket.SOCK_RAW, 0).close()' 2>&1); then
      skip "the kernel has no AF_XDP sockets (socket(AF_XDP) failed: ${err##*: })"
    fi
    pair() { PMD=af_xdp bash "$root/tools/veth-pair.sh" "$@"; }
    mtus="2048 1024" too_big=4096 ;;
  tap)
    need_netns
    [ -c /dev/net/tun ] || skip "no /dev/net/tun (kernel without CONFIG_TUN)"
    pair() { bash "$root/tools/tap-pair.sh" "$@"; }
    mtus="1024" too_big=2048 ;;
  ring)
    # One process: CLIENT_ARGS are the run's own options here.
    pair() {
      local out rc
      # shellcheck disable=SC2086
      out=$(timeout 120 "$DROCE_TESTPMD" $eal_ring -- --role pair "$@" ${CLIENT_ARGS:-} 2>&1)
      rc=$?
      echo "$out" | grep -E '^(client|server) '
      [ $rc -eq 0 ] || { echo "ring pair failed ($rc):"; echo "$out" | tail -n 8; }
      return $rc
    }
    mtus="4096 1024" too_big="" ;;
  *) echo "unknown port kind '$kind' (pcap, af_xdp, tap, ring)"; exit 2 ;;
esac

status=0
summary() { echo "$1" | grep '^client' | grep -oE "$2" | tr '\n' ' '; }
for mtu in $mtus; do
  engines="write_bw read_bw write_lat"
  [ "$mtu" = "${mtus%% *}" ] && engines="write_bw read_bw send_bw atomic_bw write_lat"
  for fwd in $engines; do
    size=65536
    [ "$fwd" = write_lat ] && size=8
    [ "$fwd" = atomic_bw ] && size=8
    if out=$(CLIENT_ARGS="--duration 0.5" pair --fwd "$fwd" --mtu "$mtu" --size "$size" --outstanding 8); then
      # Both result lines, each with verify_failures=0 (the exit status says so too).
      if [ "$(echo "$out" | grep -cE '^(client|server) .* errors=0 verify_failures=0')" -ne 2 ]; then
        echo "FAIL $kind $fwd mtu $mtu: two clean result lines expected"; echo "$out"; status=1
      else
        echo "ok   $kind $fwd mtu $mtu: $(summary "$out" '(messages|gbps|lat_us_p50)=[0-9.]+')"
      fi
    else
      echo "FAIL $kind $fwd mtu $mtu"; echo "$out"; status=1
    fi
  done
done

# go-back-N end to end under 1% injected loss on every side.
if out=$(CLIENT_ARGS="--duration 0.5" pair --fwd write_bw --mtu 1024 --size 16384 --outstanding 4 \
    --drop-rate 0.01 --seed 7); then
  echo "ok   $kind write_bw with 1% loss: $(summary "$out" '(messages|retransmitted)=[0-9]+')"
  echo "$out" | grep '^client' | grep -qE 'retransmitted=[1-9]' || { echo "FAIL: no retransmission under loss"; status=1; }
else
  echo "FAIL $kind write_bw with loss"; echo "$out"; status=1
fi

# A path MTU whose frames the port cannot carry is refused at start-up.
if [ -n "$too_big" ]; then
  out=$(CLIENT_ARGS="--duration 0.5" pair --fwd write_bw --mtu "$too_big" 2>&1)
  if echo "$out" | grep -q "droce-testpmd: --mtu $too_big: port .* path MTU [0-9]* at most"; then
    echo "ok   $kind refuses --mtu $too_big: $(echo "$out" | grep -o 'carries .*at most' | head -n 1)"
  else
    echo "FAIL $kind --mtu $too_big was not refused"; echo "$out"; status=1
  fi
fi

# ring: IPv6 (neighbour discovery) with a VLAN tag, several QPs.
if [ "$kind" = ring ]; then
  if out=$(CLIENT_ARGS="--duration 0.5" pair --fwd read_bw --mtu 2048 --size 16384 --qps 4 --outstanding 8 \
      --ip 2001:db8::1 --peer-ip 2001:db8::2 --vlan 7 --pcp 5); then
    echo "ok   ring read_bw IPv6, VLAN 7, 4 QPs: $(summary "$out" '(messages|gbps)=[0-9.]+')"
  else
    echo "FAIL ring IPv6 / 4 QPs"; echo "$out"; status=1
  fi
  # What --role pair does not do is refused with a message.
  for bad in "-i" "--telemetry" "--pcap-out /dev/null" "--fwd raw_lat"; do
    # shellcheck disable=SC2086
    out=$("$DROCE_TESTPMD" $eal_ring -- --role pair $bad 2>&1)
    if [ $? -ne 0 ] && echo "$out" | grep -q '^droce-testpmd: --role pair runs one RDMA engine once'; then
      echo "ok   ring --role pair $bad refused"
    else
      echo "FAIL ring --role pair $bad was not refused"; echo "$out"; status=1
    fi
  done
fi

[ $status -eq 0 ] && echo "$kind end-to-end: all passed"
exit $status
