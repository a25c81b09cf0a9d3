#!/usr/bin/env bash
# End to end over a veth pair between two network namespaces (created and
# removed by tools/veth-pair.sh), each droce-testpmd on DPDK's af_packet PMD:
# every engine at MTU 1024 and 2048 with data verified, and go-back-N under
# injected loss. The peer is resolved by ARP, or by neighbour discovery for
# IPv6 (no static MAC).
# MTU 4096 is not run here: DPDK 22.11's af_packet PMD only puts frames on
# the wire from 4 KiB ring slots (8 KiB slots were seen to send nothing), so
# a frame for path MTU 4096 (4096 + 78 header bytes) does not fit.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
export DROCE_TESTPMD=$(realpath "${1:-$root/build/apps/testpmd/droce-testpmd}")
if ! ip netns add droce-probe-$$ 2>/dev/null; then
  echo "SKIP: cannot create network namespaces here"; exit 77
fi
ip netns del droce-probe-$$
. "$root/tests/e2e/engines.sh"
status=0
engine_matrix "$root/tools/veth-pair.sh" 1024 2048
loss_runs "$root/tools/veth-pair.sh" 'messages|retransmitted' write_bw read_bw
# IPv6 peers resolved by neighbour discovery through the kernel's veth (which
# also carries the kernel's own ND/MLD traffic), with an 802.1Q tag and DSCP.
if out=$(CLIENT_ARGS="--duration 0.5 --ip 2001:db8::2 --peer-ip 2001:db8::1" bash "$root/tools/veth-pair.sh" \
    --fwd write_bw --mtu 1024 --size 16384 --ip 2001:db8::1 --peer-ip 2001:db8::2 --vlan 7 --pcp 5 --dscp 46); then
  echo "ok   IPv6 (ND), VLAN 7, DSCP 46: $(echo "$out" | grep '^client' | grep -oE '(messages|gbps)=[0-9.]+' | tr '\n' ' ')"
else
  echo "FAIL IPv6 over veth"; echo "$out"; status=1
fi
[ $status -eq 0 ] && echo "veth end-to-end: all passed"
exit $status
