#!/usr/bin/env bash
# libfabric 1.17 (Debian's libfabric-bin, unmodified) on fabric devices:
# fi_pingpong with data checks (-c) at every size (-S all) over the verbs
# provider's DGRAM endpoint (UD QPs), on one device and across two, and an
# RDM endpoint over it (verbs;ofi_rxd). The verbs MSG endpoint and RDM over it
# (verbs;ofi_rxm) connect through rdma_cm to an address of a host interface:
# they need droce devices bound to host interfaces (doc/stacks.md).
source "$(dirname "$0")/lib.sh"
need fi_pingpong fi_info
stacks_host droce-stacks-ofi 2

# pingpong N 'SERVER ARGS' 'CLIENT ARGS': every size row must have all its
# messages acknowledged (#ack = #sent), and both sides exit 0.
pingpong() {
  local p=$((port + $1)) s=$run/ofi-$1.server c=$run/ofi-$1.client
  timeout "$t" fi_pingpong $2 -c -I 20 -B $p >"$s" 2>&1 &
  local server=$!
  wait_listen $server $p
  timeout "$t" fi_pingpong $3 -c -I 20 -P $p 127.0.0.1 >"$c" 2>&1
  local crc=$?
  wait $server; local src=$?
  cat "$c"; echo "client exit $crc, server exit $src"
  local rows bad
  rows=$(grep -cE '^[0-9]+[kmg]? ' "$c")
  bad=$(awk '/^[0-9]+[kmg]? / { if ("=" $2 != $3) print }' "$c" | wc -l)
  [ $crc -eq 0 ] && [ $src -eq 0 ] && [ "$rows" -ge "${4:-4}" ] && [ "$bad" -eq 0 ]
}

check "fi_pingpong -e dgram -c, on droce0" pingpong 1 "-p verbs -e dgram -d droce0-dgram" "-p verbs -e dgram -d droce0-dgram" 4
check "fi_pingpong -e dgram -c, droce0 <-> droce1" pingpong 2 "-p verbs -e dgram -d droce0-dgram" "-p verbs -e dgram -d droce1-dgram" 4
check "fi_pingpong -e rdm (verbs;ofi_rxd) -c, droce0 <-> droce1" \
  pingpong 3 "-p verbs;ofi_rxd -e rdm -d droce0-dgram" "-p verbs;ofi_rxd -e rdm -d droce1-dgram" 6

finish stacks_libfabric
