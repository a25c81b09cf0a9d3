#!/usr/bin/env bash
# droce-testpmd on the host fabric (doc/testpmd.md "On the fabric"): two
# droce-testpmd processes open droce0 and droce1 of one droced with
# --device (attach, QPN range, the device's MAC and address) and run the
# RDMA engines across the switch and on one device; N sender processes on
# droce0 share a bottleneck set with `droce-ctl switch set droce1`, their
# frames are CE-marked and every sender receives CNPs (DCQCN); bad --device
# uses are refused with a message.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
single_host droce-fab-testpmd
tp="$build/apps/testpmd/droce-testpmd"
senders=${SENDERS:-3}
after_check() { stop_tracked; }
"$ctl" link add droce0 ip 10.0.0.1 >/dev/null || exit 1
"$ctl" link add droce1 ip 10.0.0.2 >/dev/null || exit 1

# A result line's field.
field() { sed -n "s/.* $2=\([0-9.]*\).*/\1/p" "$1" | tail -1; }
# The result line passed: messages moved, no error, every byte verified.
passed() {  # LOG ENGINE
  grep -q "$2: messages=" "$1" || { echo "no $2 result in $1:"; cat "$1"; return 1; }
  local m e v; m=$(field "$1" messages); e=$(field "$1" errors); v=$(field "$1" verify_failures)
  [ "${m:-0}" -gt 0 ] && [ "$e" = 0 ] && [ "$v" = 0 ] || { echo "$1:"; grep "$2:" "$1"; return 1; }
}
# pair SERVER-ARGS -- CLIENT-ARGS: one run, both sides must pass.
pair() {
  local sargs=() engine=write_bw
  while [ "$1" != -- ]; do sargs+=("$1"); shift; done; shift
  local a; for a in "$@"; do [ "${prev:-}" = --fwd ] && engine=$a; prev=$a; done; prev=
  timeout "$t" "$tp" -- --role server "${sargs[@]}" >"$run/s.log" 2>&1 & local s=$!; track $s
  timeout "$t" "$tp" -- --role client --duration 1 "$@" >"$run/c.log" 2>&1; local rc=$?
  wait $s; local src=$?
  [ $rc = 0 ] && [ $src = 0 ] || { echo "client $rc server $src"; tail -n 5 "$run/c.log" "$run/s.log"; return 1; }
  passed "$run/c.log" "$engine" && passed "$run/s.log" "$engine" && grep -h "$engine:" "$run/c.log" | cut -c1-160
}

for e in write_bw read_bw send_bw atomic_bw; do
  check "$e droce0 (server) <-> droce1 (client) through droced" \
    pair --device droce0 --peer-ip 10.0.0.2 -- --device droce1 --peer-ip 10.0.0.1 --fwd $e
done
lat() {
  pair --device droce0 --peer-ip 10.0.0.2 --size 8 -- --device droce1 --peer-ip 10.0.0.1 --fwd write_lat --size 8 &&
    grep -q 'lat_us_p50=' "$run/c.log"
}
check "write_lat 8 B droce0 <-> droce1 (latency percentiles)" lat
check "write_bw 4 QPs, both processes on droce0 (QPN ranges 1 and 2)" \
  pair --device droce0 --peer-ip 10.0.0.1 --qps 4 --qpn-range 1 --peer-qpn-range 2 -- \
       --device droce0 --peer-ip 10.0.0.1 --qps 4 --qpn-range 2 --peer-qpn-range 1

# The daemon lists a running testpmd with the range it asked for.
listed() {
  timeout "$t" "$tp" -- --role server --device droce1 --peer-ip 10.0.0.1 --qpn-range 7 >"$run/s.log" 2>&1 &
  local s=$!; track $s
  for _ in $(seq 50); do "$ctl" link show droce1 | grep -q "qpns 7168-8191" && break; sleep 0.1; done
  "$ctl" link show droce1 | grep "process pid $(pgrep -P $s).*qpns 7168-8191" || { "$ctl" link show droce1; return 1; }
  # The same range again is another process's: refused, with the daemon's reason.
  local out; out=$(timeout "$t" "$tp" -- --role client --device droce1 --peer-ip 10.0.0.1 --qpn-range 7 2>&1)
  [ $? = 2 ] && grep -q "droce-testpmd: droced refused to attach to droce1: .*another process's" <<<"$out" || { echo "$out"; return 1; }
  echo "$out"
}
check "link show lists a droce-testpmd and its QPN range; the range twice is refused" listed

# DCQCN with N real senders through one switch port: droce1's port a 1 Gb/s
# ECN-marking bottleneck; N server processes on droce1 (ranges 1..N), N
# DCQCN senders on droce0. Every sender gets CNPs, every receiver CE marks.
dcqcn_shared() {
  "$ctl" switch set droce1 bottleneck rate=1G kmin=20K kmax=200K pmax=0.2 || return 1
  local k pids=()
  for k in $(seq "$senders"); do
    timeout "$t" "$tp" -- --role server --device droce1 --peer-ip 10.0.0.1 --qpn-range "$k" --dcqcn paper \
      >"$run/s$k.log" 2>&1 & pids+=($!); track $!
  done
  # The senders start once every receiver is attached and waiting: on a
  # loaded host attaching several DPDK processes one after another can take
  # longer than a sender's 30 s wait for its peer's hello.
  for k in $(seq "$senders"); do
    for _ in $(seq 600); do grep -qs "waiting for the link" "$run/s$k.log" && break; sleep 0.1; done
  done
  for k in $(seq "$senders"); do
    timeout "$t" "$tp" -- --role client --device droce0 --peer-ip 10.0.0.2 --qpn-range "$k" --dcqcn paper \
      --line-rate-gbps 10 --duration 3 >"$run/c$k.log" 2>&1 & pids+=($!); track $!
  done
  local p rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
  "$ctl" daemon status | grep -A1 "^device droce1" | grep -o "ce_marked [0-9]*" || rc=1
  "$ctl" switch clear droce1
  local total=0
  for k in $(seq "$senders"); do
    passed "$run/c$k.log" write_bw || rc=1
    passed "$run/s$k.log" write_bw || rc=1
    local cnp ce g; cnp=$(field "$run/c$k.log" cnps_rx); ce=$(field "$run/s$k.log" ce_rx); g=$(field "$run/c$k.log" gbps)
    echo "sender $k: $g Gb/s, cnps_rx $cnp (receiver ce_rx $ce)"
    [ "${cnp:-0}" -gt 0 ] && [ "${ce:-0}" -gt 0 ] || rc=1
    total=$(awk -v a="$total" -v b="$g" 'BEGIN { print a + b }')
  done
  echo "total $total Gb/s through the 1 Gb/s bottleneck"
  return $rc
}
check "DCQCN: $senders droce-testpmd senders share droce1's 1 Gb/s switch bottleneck, each gets CNPs" dcqcn_shared

# Bad uses: each exits 2 with a droce-testpmd: message.
refused() {  # PATTERN ARGS...
  local pat=$1; shift
  local out; out=$(timeout 30 "$tp" -- "$@" 2>&1); local rc=$?
  [ $rc = 2 ] && grep -q "droce-testpmd: .*$pat" <<<"$out" || { echo "rc $rc: $out" | tail -3; return 1; }
}
bad_options() {
  refused "needs --peer-ip" --device droce0 &&
  refused "no --port or --mac" --device droce0 --peer-ip 10.0.0.2 --port net_memif0 &&
  refused "not with --device" --device droce0 --peer-ip 10.0.0.2 --role pair &&
  refused "not on the fabric" --device droce0 --peer-ip 10.0.0.2 --fwd raw_lat &&
  refused "go with --device" --qpn-range 2 &&
  refused "qpn-range must be an integer" --device droce0 --peer-ip 10.0.0.2 --qpn-range 0 &&
  refused "bad device name" --device 'x/y' --peer-ip 10.0.0.2 &&
  refused "not an address of droce0" --device droce0 --ip 10.0.0.9 --peer-ip 10.0.0.2 &&
  refused "needs another --peer-qpn-range" --device droce0 --peer-ip 10.0.0.1 &&
  refused "refused to attach to nosuch" --device nosuch --peer-ip 10.0.0.2 &&
  DROCE_RUN_DIR=$run/none refused "daemon is not running" --device droce0 --peer-ip 10.0.0.2
}
check "bad --device uses are refused with a message" bad_options

finish fabric_testpmd
