#!/usr/bin/env bash
# Runs two droce-testpmd processes joined by a DPDK memif wire (no hugepages,
# one --file-prefix each) and prints both result lines. Extra arguments go to
# both sides' app options (e.g. --fwd read_bw --mtu 1024); set CLIENT_ARGS
# for client-only options (e.g. "--duration 5").
# Exit status: 0 iff both sides report success.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${DROCE_TESTPMD:-build/apps/testpmd/droce-testpmd}
run=$(mktemp -d /tmp/droce-memif.XXXXXX)
trap 'rm -rf "$run"' EXIT
sock="$run/memif.sock"
eal() { echo "--file-prefix=droce-$1-$$ --no-huge -m 512 --no-pci --log-level=error \
  --vdev=net_memif0,role=$2,socket=$sock,socket-abstract=no,bsize=10240"; }
# shellcheck disable=SC2046
timeout 120 "$bin" $(eal srv server) -- --role server "$@" >"$run/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
# shellcheck disable=SC2046,SC2086
timeout 120 "$bin" $(eal cli client) -- --role client "$@" ${CLIENT_ARGS:-} >"$run/client.log" 2>&1
client_rc=$?
wait $server
server_rc=$?
grep -E '^(client|server|stats|port|device|qp) ' "$run/client.log" "$run/server.log" | sed 's/^[^:]*://'
if [ $client_rc -ne 0 ] || [ $server_rc -ne 0 ]; then
  echo "memif pair failed (client $client_rc, server $server_rc):"
  tail -n 5 "$run/client.log" "$run/server.log"
  exit 1
fi
