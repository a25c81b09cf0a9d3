#!/usr/bin/env bash
# Runs two droce-testpmd processes on DPDK's net_tap PMD: each process creates
# a kernel tap interface, and a Linux bridge joins the two. Both processes,
# both taps and the bridge live in one private network namespace, created here
# and removed on exit (the taps vanish with their processes). No address is
# given to the kernel: droce answers ARP for its own. Arguments go to both
# sides' app options; CLIENT_ARGS to the client only.
# Path MTU 1024 at most: DPDK 22.11's net_tap sends no frame longer than
# 1522 bytes and refuses a larger port MTU (droce-testpmd rejects --mtu 2048).
# Exit status: 0 iff both sides report success.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${DROCE_TESTPMD:-build/apps/testpmd/droce-testpmd}")
tag=$$
ns=droce-tap-$tag br=dbr0 tap_s=dtap-s tap_c=dtap-c
run=$(mktemp -d /tmp/droce-tap.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  rm -rf "$run"
}
trap cleanup EXIT
ip netns add "$ns" || exit 2
ip -n "$ns" link set lo up
ip -n "$ns" link add "$br" type bridge || exit 2
ip -n "$ns" link set "$br" up || exit 2
eal() { echo "--file-prefix=droce-$1-$tag --no-huge -m 512 --no-pci --log-level=error --vdev=net_tap0,iface=$2"; }
# The PMD creates the tap when EAL starts and sets it up; put it on the bridge.
# droce's ARP retries until the peer answers, so a tap joining late is fine.
attach() {  # attach TAP PID
  for _ in $(seq 200); do
    if ip -n "$ns" link show "$1" >/dev/null 2>&1; then
      ip -n "$ns" link set "$1" master "$br" && return 0
    fi
    if ! kill -0 "$2" 2>/dev/null; then
      echo "tap pair: the process that was to create $1 has ended:"
      return 1
    fi
    sleep 0.05
  done
  echo "tap pair: $1 did not appear within 10 s"
  return 1
}
# shellcheck disable=SC2046
timeout 120 ip netns exec "$ns" "$bin" $(eal srv $tap_s) -- --role server --port net_tap0 "$@" \
  >"$run/server.log" 2>&1 &
server=$!
pids+=($server)
attach $tap_s $server || { tail -n 8 "$run/server.log"; exit 1; }
# shellcheck disable=SC2046,SC2086
timeout 120 ip netns exec "$ns" "$bin" $(eal cli $tap_c) -- --role client --port net_tap0 "$@" ${CLIENT_ARGS:-} \
  >"$run/client.log" 2>&1 &
client=$!
pids+=($client)
attach $tap_c $client || { tail -n 8 "$run/client.log"; exit 1; }
wait $client
client_rc=$?
wait $server
server_rc=$?
pids=()
grep -E '^(client|server) ' "$run/client.log" "$run/server.log" | sed 's/^[^:]*://'
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
  echo "tap pair failed (client $client_rc, server $server_rc):"
  grep -v -e 'multiq qdisc' -e 'Disabling rte flow' -e 'tap_nl_dump_ext_ack' "$run/client.log" | tail -n 6
  grep -v -e 'multiq qdisc' -e 'Disabling rte flow' -e 'tap_nl_dump_ext_ack' "$run/server.log" | tail -n 6
  exit 1
fi
