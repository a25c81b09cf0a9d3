#!/usr/bin/env bash
# End to end: two droce-testpmd processes over a DPDK memif wire run every
# engine at MTU 1024 and 4096, every transfer verified; bad options fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
export DROCE_TESTPMD=$(realpath "${1:-$root/build/apps/testpmd/droce-testpmd}")
. "$root/tests/e2e/engines.sh"
status=0
engine_matrix "$root/tools/memif-pair.sh" 1024 4096
# The raw-wire baselines (no droce): both sides end, counts agree for the stream.
for fwd in raw_lat raw_stream; do
  if out=$(CLIENT_ARGS="--duration 0.3" bash "$root/tools/memif-pair.sh" --fwd "$fwd" --size 64); then
    echo "ok   $fwd: $(echo "$out" | grep '^client' | grep -oE 'mmsgps=[0-9.]+|lat_us_p50=[0-9.]+' | tr '\n' ' ')"
  else
    echo "FAIL $fwd"; echo "$out"; status=1
  fi
done
# raw_stream as fastpath.sh's raw part runs it (bursts, one answer per receive
# burst, the verbs runtime's memif path): every frame the client sent arrives,
# and the client hears answers (else it counts an error and fails).
if out=$(CLIENT_ARGS="--duration 0.3" bash "$root/tools/memif-pair.sh" --fwd raw_stream --size 138 --burst 8 \
    --raw-ack --memif-direct); then
  sent=$(echo "$out" | grep '^client' | grep -oE 'messages=[0-9]+')
  got=$(echo "$out" | grep '^server' | grep -oE 'messages=[0-9]+')
  if [ -n "$sent" ] && [ "$sent" = "$got" ]; then
    echo "ok   raw_stream --burst 8 --raw-ack --memif-direct: $sent"
  else
    echo "FAIL raw_stream --burst 8 --raw-ack --memif-direct: client $sent, server $got"; echo "$out"; status=1
  fi
else
  echo "FAIL raw_stream --burst 8 --raw-ack --memif-direct"; echo "$out"; status=1
fi
# Loss injected on both sides' transmit path: go-back-N must deliver everything intact.
loss_runs "$root/tools/memif-pair.sh" 'messages|retransmitted|dropped_on_purpose' write_bw read_bw send_bw atomic_bw
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
# A pair started here (not by tools/memif-pair.sh) when a test needs the
# logs, its own EAL file prefixes (the telemetry socket) or a client fed from
# a pipe: pair_start DIR SERVER-ARGS... ; pair_client DIR CLIENT-ARGS... ; pair_wait DIR.
pair_eal() {  # pair_eal DIR server|client
  echo "--file-prefix=$(basename "$1")-$2 --no-huge -m 512 --no-pci --log-level=error \
    --vdev=net_memif0,role=$2,socket=$1/memif.sock,socket-abstract=no,bsize=10240"
}
pair_start() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  timeout 120 "$DROCE_TESTPMD" $(pair_eal "$dir" server) -- --role server "$@" >"$dir/server.log" 2>&1 </dev/null &
  echo $! >"$dir/server.pid"
  for _ in $(seq 100); do [ -S "$dir/memif.sock" ] && break; sleep 0.05; done
}
pair_client() {
  local dir=$1; shift
  # shellcheck disable=SC2046
  timeout 120 "$DROCE_TESTPMD" $(pair_eal "$dir" client) -- --role client "$@" >"$dir/client.log" 2>&1
}
pair_wait() { wait "$(cat "$1/server.pid")"; }
pair_show() { echo "--- client"; cat "$1/client.log"; echo "--- server"; cat "$1/server.log"; }
work=$(mktemp -d /tmp/droce-e2e.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The interactive prompt (commands from a pipe, with pauses): counters, a
# refused MTU, start in the background, stats and QPs while it runs, stop
# (result line), another engine on the same connection, start again, quit
# while running.
d=$work/prompt; mkdir -p "$d"
pair_start "$d" --fwd write_bw --size 16384
# Waits (asking 'show port stats') until the run in progress has moved data,
# instead of sleeping a fixed time on a loaded machine.
until_running() {
  local before; before=$(grep -cE '^run: running messages=[1-9]' "$d/client.log" 2>/dev/null)
  for _ in $(seq 100); do
    echo 'show port stats'; sleep 0.2
    [ "$(grep -cE '^run: running messages=[1-9]' "$d/client.log" 2>/dev/null)" -gt "${before:-0}" ] && return
  done
}
{ echo 'show port stats'; echo 'set mtu 3000'; echo 'start'; until_running; echo 'show qp';
  echo 'show qp 17'; echo 'start'; echo 'stop'; echo 'stop'; echo 'set fwd read_bw'; echo 'start'; until_running;
  echo 'stop'; echo 'set fwd send_bw'; echo 'start'; until_running; echo 'quit'; } | pair_client "$d" -i --fwd write_bw --size 16384
crc=$?; pair_wait "$d"; src=$?
if [ $crc -eq 0 ] && [ $src -eq 0 ] &&
   grep -q '^port net_memif0: link up' "$d/client.log" &&
   grep -q 'mtu must be' "$d/client.log" &&
   grep -qE '^run: running messages=[1-9]' "$d/client.log" &&
   grep -qE '^qp 0x0+11 RTS: tx_packets=[1-9].* qp_memory_bytes=[1-9]' "$d/client.log" &&
   grep -q 'already running' "$d/client.log" && grep -q '^not running' "$d/client.log" &&
   grep -qE '^client write_bw: messages=[1-9][0-9]* .*errors=0 verify_failures=0' "$d/client.log" &&
   grep -qE '^client read_bw: messages=[1-9][0-9]* .*errors=0 verify_failures=0' "$d/client.log" &&
   grep -qE '^client send_bw: messages=[1-9][0-9]* .*errors=0 verify_failures=0' "$d/client.log" &&
   [ "$(grep -cE '^server (write|read|send)_bw: messages=[1-9][0-9]* .*errors=0 verify_failures=0' "$d/server.log")" -eq 3 ]; then
  echo "ok   interactive prompt: background start, stop, start again (3 runs on one connection)"
else
  echo "FAIL interactive prompt (client $crc, server $src)"; pair_show "$d"; status=1
fi
# --auto-start: forwarding before the first command; stop prints the result.
d=$work/auto; mkdir -p "$d"
pair_start "$d" --fwd write_lat --size 64
{ until_running; echo 'stop'; echo 'quit'; } | pair_client "$d" -i --auto-start --fwd write_lat --size 64
crc=$?; pair_wait "$d"; src=$?
if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE '^client write_lat: messages=[1-9].* lat_us_p50=[0-9.]+ p99=[0-9.]+ p999=' "$d/client.log"; then
  echo "ok   --auto-start: $(grep -oE 'lat_us_p50=[0-9.]+' "$d/client.log")"
else
  echo "FAIL --auto-start (client $crc, server $src)"; pair_show "$d"; status=1
fi
# Traffic class: 802.1Q tag (VLAN 100, PCP 3), DSCP 26 and ECT(1) on every
# RoCE frame both ways; tagged frames are parsed on receive (the run verifies).
d=$work/tc; mkdir -p "$d"
tc="--vlan 100 --pcp 3 --dscp 26 --ecn ect1"
# shellcheck disable=SC2086
pair_start "$d" --fwd send_bw --size 3000 --mtu 1024 $tc
# shellcheck disable=SC2086
pair_client "$d" --fwd send_bw --size 3000 --mtu 1024 --iterations 50 --pcap-out "$d/c.pcap" $tc
crc=$?; pair_wait "$d"; src=$?
if [ $crc -eq 0 ] && [ $src -eq 0 ] && tc_out=$(python3 "$root/tests/e2e/pcap_fields.py" "$d/c.pcap" --vlan 100 --pcp 3 --dscp 26 --ecn 1); then
  echo "ok   --vlan/--pcp/--dscp/--ecn on the wire: $tc_out"
else
  echo "FAIL traffic class (client $crc, server $src): ${tc_out:-}"; pair_show "$d"; status=1
fi
# IPv6: the peer resolved by neighbour discovery (no static MAC), RoCEv2 over IPv6.
d=$work/v6; mkdir -p "$d"
pair_start "$d" --fwd write_bw --size 8192 --ip 2001:db8::1 --peer-ip 2001:db8::2
pair_client "$d" --fwd write_bw --size 8192 --ip 2001:db8::2 --peer-ip 2001:db8::1 --duration 0.5 --pcap-out "$d/c.pcap"
crc=$?; pair_wait "$d"; src=$?
if [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -qE '^client write_bw: messages=[1-9]' "$d/client.log" &&
   v6_out=$(python3 "$root/tests/e2e/pcap_fields.py" "$d/c.pcap" --ipv6 --nd); then
  echo "ok   IPv6 with neighbour discovery: $v6_out"
else
  echo "FAIL IPv6 (client $crc, server $src): ${v6_out:-}"; pair_show "$d"; status=1
fi
# Telemetry: only with --telemetry; /droce/port and /droce/qp answer with
# dicts on the socket while the engine runs.
d=$work/tel; mkdir -p "$d"
pair_start "$d" --fwd write_bw --size 16384 --telemetry
pair_client "$d" --fwd write_bw --size 16384 --duration 4 &
cpid=$!
sock=/var/run/dpdk/$(basename "$d")-server/dpdk_telemetry.v2
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
tel_out=$(python3 "$root/tests/e2e/telemetry_query.py" "$sock" 2>&1); tel_rc=$?
no_sock=/var/run/dpdk/$(basename "$d")-client/dpdk_telemetry.v2
client_has_socket=0; [ -S "$no_sock" ] && client_has_socket=1
wait $cpid; crc=$?; pair_wait "$d"; src=$?
if [ $crc -eq 0 ] && [ $src -eq 0 ] && [ $tel_rc -eq 0 ] && [ $client_has_socket -eq 0 ]; then
  echo "ok   --telemetry: $tel_out"
else
  echo "FAIL telemetry (client $crc, server $src, query $tel_rc, socket without --telemetry: $client_has_socket): $tel_out"
  pair_show "$d"; status=1
fi
# --stats-period prints progress lines while the engine runs.
if out=$(CLIENT_ARGS="--duration 1 --stats-period 0.25" bash "$root/tools/memif-pair.sh" --fwd write_bw --size 16384) &&
   [ "$(echo "$out" | grep -cE '^stats client: t_s=[0-9.]+ messages=')" -ge 2 ]; then
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
# Two ends started with different path MTUs both say so and fail, instead of
# failing transfers (a QP's path MTU is fixed at RTR).
if out=$(CLIENT_ARGS="--duration 0.5 --mtu 1024" bash "$root/tools/memif-pair.sh" --fwd write_bw --mtu 4096 2>&1); then
  echo "FAIL MTU mismatch accepted"; echo "$out" | tail -5; status=1
elif [ "$(grep -c "the peer's path MTU is" <<<"$out")" -ne 2 ]; then
  echo "FAIL MTU mismatch: not both ends explained it"; echo "$out" | tail -8; status=1
else
  echo "ok   an MTU mismatch is refused by both ends"
fi
# Likewise different --outstanding (the slots the passive side verifies).
if out=$(CLIENT_ARGS="--duration 0.5 --outstanding 32" bash "$root/tools/memif-pair.sh" --fwd write_bw 2>&1); then
  echo "FAIL --outstanding mismatch accepted"; echo "$out" | tail -5; status=1
elif [ "$(grep -c "runs --outstanding" <<<"$out")" -ne 2 ]; then
  echo "FAIL --outstanding mismatch: not both ends explained it"; echo "$out" | tail -8; status=1
else
  echo "ok   an --outstanding mismatch is refused by both ends"
fi
# A server killed (SIGKILL) mid-run: the client's QPs time out, its work
# requests complete with errors, and it exits 1 with its result line — no
# crash (its device must not hand a full TX backlog back to a closed port).
vanish() {
  local run sock srv cli rc
  run=$(mktemp -d /tmp/droce-vanish.XXXXXX); sock=$run/m.sock
  eal() { echo "--file-prefix=droce-vanish-$1-$$ --no-huge -m 512 --no-pci --log-level=error \
    --vdev=net_memif0,role=$2,socket=$sock,socket-abstract=no,bsize=10240"; }
  # shellcheck disable=SC2046
  "$DROCE_TESTPMD" $(eal s server) -- --role server --fwd write_bw >"$run/s.log" 2>&1 & srv=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
  # shellcheck disable=SC2046
  timeout 60 "$DROCE_TESTPMD" $(eal c client) -- --role client --fwd write_bw --duration 10 >"$run/c.log" 2>&1 & cli=$!
  for _ in $(seq 200); do grep -q 'waiting for the link' "$run/c.log" 2>/dev/null && break; sleep 0.05; done
  sleep 1.5
  kill -9 "$srv"; wait "$srv" 2>/dev/null
  wait "$cli"; rc=$?
  cat "$run/c.log"; rm -rf "$run"
  echo "client exit $rc"
  [ "$rc" -eq 1 ]
}
if out=$(vanish 2>&1) && grep -qE '^client write_bw: .* errors=[1-9]' <<<"$out"; then
  echo "ok   a peer killed mid-run: the survivor ends with error completions, no crash"
else
  echo "FAIL a peer killed mid-run"; echo "$out" | tail -8; status=1
fi
for bad in "--fwd nope" "--mtu 3000" "--role boss" "--ip 1.2.3" "--size" "--outstanding 1" "--drop-rate 2" "--qps 4 --fwd send_bw" "--pcap-out /nonexistent/dir/x.pcap" "--dcqcn fast" "--kmin-kb 10 --kmax-kb 5" "--stats-period -1" \
    "--dscp 64" "--dscp -1" "--dscp 2.5" "--ecn ce" "--vlan 0" "--vlan 4095" "--pcp 8" "--vlan" "--auto-start" \
    "--ip 2001:db8::zz" "--ip 2001:db8::1" "--ip ff02::1 --peer-ip 2001:db8::2" "--peer-ip ::" "--telemetry x"; do
  # shellcheck disable=SC2086
  if "$DROCE_TESTPMD" --no-huge -- $bad >/dev/null 2>&1; then echo "FAIL: '$bad' accepted"; status=1; fi
  # shellcheck disable=SC2086
  "$DROCE_TESTPMD" --no-huge -- $bad 2>&1 | grep -q 'droce-testpmd:' || { echo "FAIL: '$bad' gave no message"; status=1; }
done
[ $status -eq 0 ] && echo "memif end-to-end: all passed"
exit $status
