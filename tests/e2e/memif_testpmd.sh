#!/usr/bin/env bash
# End to end: two droce-testpmd processes over a DPDK memif wire run every
# engine at MTU 1024 and 4096, every transfer verified; bad options fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
export DROCE_TESTPMD=${1:-$root/build/apps/testpmd/droce-testpmd}
status=0
for mtu in 1024 4096; do
  for fwd in write_bw read_bw send_bw write_lat; do
    size=65536
    [ "$fwd" = write_lat ] && size=8
    if out=$(CLIENT_ARGS="--duration 0.5" bash "$root/tools/memif-pair.sh" --fwd "$fwd" --mtu "$mtu" --size "$size" --outstanding 8); then
      echo "ok   $fwd mtu $mtu: $(echo "$out" | grep '^client' | grep -oE 'gbps=[0-9.]+|lat_us_p50=[0-9.]+' | tr '\n' ' ')"
    else
      echo "FAIL $fwd mtu $mtu"; echo "$out"; status=1
    fi
  done
done
for bad in "--fwd nope" "--mtu 3000" "--role boss" "--ip 1.2.3" "--size" "--outstanding 1"; do
  # shellcheck disable=SC2086
  if "$DROCE_TESTPMD" --no-huge -- $bad >/dev/null 2>&1; then echo "FAIL: '$bad' accepted"; status=1; fi
  # shellcheck disable=SC2086
  "$DROCE_TESTPMD" --no-huge -- $bad 2>&1 | grep -q 'droce-testpmd:' || { echo "FAIL: '$bad' gave no message"; status=1; }
done
[ $status -eq 0 ] && echo "memif end-to-end: all passed"
exit $status
