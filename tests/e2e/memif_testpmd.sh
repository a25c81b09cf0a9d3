#!/usr/bin/env bash
# End to end: two droce-testpmd processes over a DPDK memif wire run every
# engine at MTU 1024 and 4096, every transfer verified; bad options fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
export DROCE_TESTPMD=$(realpath "${1:-$root/build/apps/testpmd/droce-testpmd}")
status=0
for mtu in 1024 4096; do
  for fwd in write_bw read_bw send_bw atomic_bw write_lat; do
    size=65536
    [ "$fwd" = write_lat ] && size=8
    [ "$fwd" = atomic_bw ] && size=8
    if out=$(CLIENT_ARGS="--duration 0.5" bash "$root/tools/memif-pair.sh" --fwd "$fwd" --mtu "$mtu" --size "$size" --outstanding 8); then
      echo "ok   $fwd mtu $mtu: $(echo "$out" | grep '^client' | grep -oE 'gbps=[0-9.]+|lat_us_p50=[0-9.]+' | tr '\n' ' ')"
    else
      echo "FAIL $fwd mtu $mtu"; echo "$out"; status=1
    fi
  done
done
# Loss injected on both sides' transmit path: go-back-N must deliver everything intact.
for fwd in write_bw read_bw send_bw atomic_bw; do
  if out=$(CLIENT_ARGS="--duration 0.5" bash "$root/tools/memif-pair.sh" --fwd "$fwd" --mtu 1024 --size 16384 \
      --outstanding 4 --drop-rate 0.01 --seed 7); then
    echo "ok   $fwd with 1% loss: $(echo "$out" | grep '^client' | grep -oE '(messages|retransmitted|dropped_on_purpose)=[0-9]+' | tr '\n' ' ')"
    echo "$out" | grep '^client' | grep -qE 'retransmitted=[1-9]' || { echo "FAIL: no retransmission under loss"; status=1; }
  else
    echo "FAIL $fwd with loss"; echo "$out"; status=1
  fi
done
# Many QPs sharing one port and one CQ.
for spec in "write_bw 64" "read_bw 16"; do
  set -- $spec
  if out=$(CLIENT_ARGS="--duration 0.5" bash "$root/tools/memif-pair.sh" --fwd "$1" --qps "$2" --outstanding 256 --size 16384); then
    echo "ok   $1 over $2 QPs: $(echo "$out" | grep '^client' | grep -oE 'gbps=[0-9.]+')"
  else
    echo "FAIL $1 over $2 QPs"; echo "$out"; status=1
  fi
done
# DCQCN end to end: an emulated 5 Gb/s congestion point on the client's
# transmit path marks CE, the server's notification point sends CNPs, the
# client's reaction point (both profiles) receives them; data still verified.
for profile in paper mlx5; do
  if out=$(CLIENT_ARGS="--duration 1 --bottleneck-gbps 5 --kmin-kb 5 --kmax-kb 200 --pmax 0.01" \
      bash "$root/tools/memif-pair.sh" --fwd write_bw --size 65536 --mtu 4096 --dcqcn $profile --line-rate-gbps 10); then
    cli=$(echo "$out" | grep '^client')
    echo "ok   dcqcn $profile behind a 5 Gb/s congestion point: $(echo "$cli" | grep -oE '(gbps|cnps_rx|cp_marked|cp_queue_max_kb)=[0-9.]+' | tr '\n' ' ')"
    echo "$cli" | grep -qE 'cnps_rx=[1-9]' || { echo "FAIL: no CNP reached the reaction point"; status=1; }
    echo "$cli" | grep -qE 'cp_marked=[1-9]' || { echo "FAIL: the congestion point marked nothing"; status=1; }
  else
    echo "FAIL dcqcn $profile"; echo "$out"; status=1
  fi
done
# The interactive prompt (commands from a pipe): counters, a refused MTU, a run, the QP table.
if out=$(printf 'show port stats\nset mtu 3000\nset fwd write_bw\nstart\nshow qp\nquit\n' |
         CLIENT_ARGS="-i --duration 0.5" bash "$root/tools/memif-pair.sh" --fwd write_bw --size 16384) &&
   echo "$out" | grep -q '^port net_memif0: link up' && echo "$out" | grep -q '^client write_bw: messages=[1-9]' &&
   echo "$out" | grep -qE '^qp 0x0+11 RTS: tx_packets=[1-9]'; then
  echo "ok   interactive prompt"
else
  echo "FAIL interactive prompt"; echo "$out"; status=1
fi
# --stats-period prints progress lines while the engine runs.
if out=$(CLIENT_ARGS="--duration 1 --stats-period 0.25" bash "$root/tools/memif-pair.sh" --fwd write_bw --size 16384) &&
   [ "$(echo "$out" | grep -c '^stats client: messages=')" -ge 2 ]; then
  echo "ok   --stats-period"
else
  echo "FAIL --stats-period"; echo "$out"; status=1
fi
# --pcap-out writes a capture droce-pcap (and tshark) can read.
pcap_dir=$(mktemp -d)
if CLIENT_ARGS="--iterations 20 --pcap-out $pcap_dir/client.pcap" bash "$root/tools/memif-pair.sh" --fwd send_bw --size 3000 --mtu 1024 >/dev/null &&
   "$(dirname "$DROCE_TESTPMD")/../pcap/droce-pcap" check "$pcap_dir/client.pcap" | grep -q 'OK packets='; then
  echo "ok   --pcap-out capture verifies"
else
  echo "FAIL --pcap-out"; status=1
fi
rm -rf "$pcap_dir"
for bad in "--fwd nope" "--mtu 3000" "--role boss" "--ip 1.2.3" "--size" "--outstanding 1" "--drop-rate 2" "--qps 4 --fwd send_bw" "--pcap-out /nonexistent/dir/x.pcap" "--dcqcn fast" "--kmin-kb 10 --kmax-kb 5" "--stats-period -1"; do
  # shellcheck disable=SC2086
  if "$DROCE_TESTPMD" --no-huge -- $bad >/dev/null 2>&1; then echo "FAIL: '$bad' accepted"; status=1; fi
  # shellcheck disable=SC2086
  "$DROCE_TESTPMD" --no-huge -- $bad 2>&1 | grep -q 'droce-testpmd:' || { echo "FAIL: '$bad' gave no message"; status=1; }
done
[ $status -eq 0 ] && echo "memif end-to-end: all passed"
exit $status
