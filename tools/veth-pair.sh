#!/usr/bin/env bash
# Runs two droce-testpmd processes in two network namespaces joined by a veth
# pair, each on a DPDK PMD bound to its end of the veth. The namespaces and
# the veth are created here and removed on exit. Arguments go to both sides'
# app options; CLIENT_ARGS to the client only.
#   PMD: af_packet (default), pcap (net_pcap, iface= live mode) or af_xdp
#        (net_af_xdp; the kernel must have AF_XDP sockets).
#   VETH_MTU (default 9000: RoCE frames above path MTU 1024 exceed 1500;
#        af_xdp: 3000, as the kernel attaches XDP to a veth only while its
#        peer's MTU fits a page: "veth: Peer MTU is too large to set XDP").
# Path MTU: af_packet ring slots are 4 KiB, so up to 2048 (see
# tests/e2e/veth_testpmd.sh); af_xdp receives into 4 KiB UMEM chunks, so up to
# 2048; pcap up to 4096.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${DROCE_TESTPMD:-build/apps/testpmd/droce-testpmd}")
tag=$$
ns_s=droce-s-$tag ns_c=droce-c-$tag
run=$(mktemp -d /tmp/droce-veth.XXXXXX)
cleanup() { ip netns del "$ns_s" 2>/dev/null; ip netns del "$ns_c" 2>/dev/null; rm -rf "$run"; }
trap cleanup EXIT
pmd=${PMD:-af_packet} mtu=${VETH_MTU:-9000}
case $pmd in
  af_packet) port=net_af_packet0 args=",framesz=4096,blocksz=4096,framecnt=1024,qpairs=1" ;;
  pcap) port=net_pcap0 args="" ;;
  af_xdp) port=net_af_xdp0 args="" mtu=${VETH_MTU:-3000} ;;
  *) echo "veth-pair.sh: PMD must be af_packet, pcap or af_xdp, not '$pmd'" >&2; exit 2 ;;
esac
ip netns add "$ns_s" && ip netns add "$ns_c" || exit 2
ip link add vs$tag type veth peer name vc$tag || exit 2
ip link set vs$tag netns "$ns_s" && ip link set vc$tag netns "$ns_c" || exit 2
for side in s c; do
  ns=droce-$side-$tag dev=v$side$tag
  ip -n "$ns" link set "$dev" mtu "$mtu" up || exit 2
  ip -n "$ns" link set lo up
done
eal() { echo "--file-prefix=droce-$1-$tag --no-huge -m 512 --no-pci --log-level=error --vdev=$port,iface=$2$args"; }
# shellcheck disable=SC2046
timeout 120 ip netns exec "$ns_s" "$bin" $(eal srv vs$tag) -- --role server --port $port "$@" >"$run/server.log" 2>&1 &
server=$!
# shellcheck disable=SC2046,SC2086
timeout 120 ip netns exec "$ns_c" "$bin" $(eal cli vc$tag) -- --role client --port $port "$@" ${CLIENT_ARGS:-} >"$run/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
grep -E '^(client|server) ' "$run/client.log" "$run/server.log" | sed 's/^[^:]*://'
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
  echo "veth pair ($pmd) failed (client $client_rc, server $server_rc):"
  tail -n 8 "$run/client.log" "$run/server.log"
  exit 1
fi
