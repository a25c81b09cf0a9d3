#!/usr/bin/env bash
# Interop with real Linux Soft-RoCE (rxe, kernel 6.1) in the workplace lab's
# VMs (../shared/rocelab): droce on the lab's veth (lab0, DPDK af_packet)
# runs unmodified verbs programs against rxe in a guest, in both roles, and
# the wire is captured and checked. Opt-in (slow: the guests are emulated);
# not part of .ci/run. Needs root.
#   bash tools/interop/rxe_lab.sh [results.md]
# It rewrites only its own section of the results file (tools/interop/section.sh);
# tools/interop/rxe_cm_lab.sh writes the rdma_cm/UD one.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lab=${ROCELAB:-$root/../shared/rocelab/rocelab}
build=${BUILD:-$root/build}
ctl="$build/apps/ctl/droce-ctl"
out=${1:-$root/doc/interop-rxe.md}
[ -x "$lab" ] || { echo "no lab tool at $lab (set ROCELAB)" >&2; exit 2; }
# /dev/kvm exists on these machines but guests never booted under it (no
# console output in 300 s); TCG boots in ~20 s.
export ROCELAB_ACCEL=${ROCELAB_ACCEL:-tcg}
export DROCE_RUN_DIR=$(mktemp -d /tmp/droce-interop.XXXXXX)
"$lab" build >/dev/null || exit 2
"$lab" up 1 || exit 2
trap '"$lab" down >/dev/null 2>&1; "$ctl" link del droce0 >/dev/null 2>&1; rm -rf "$DROCE_RUN_DIR"' EXIT
mac=$("$lab" ns cat /sys/class/net/lab0/address)
"$ctl" link add droce0 type af_packet iface lab0 ip 192.168.77.2 mac "$mac" || exit 2
env_droce=$("$ctl" env | sed 's/^export //' | tr '\n' ' ')
droce() { ip netns exec rocelab env $env_droce DROCE_STATS=1 timeout 120 bash -c "$1"; }
share=${ROCELAB_DIR:-/var/tmp/rocelab}/share
gcc -O2 -o "$share/rxe_ops" "$root/tests/verbs/rxe_ops.c" -libverbs 2>/dev/null
cp "$share/rxe_ops" "$DROCE_RUN_DIR/rxe_ops"

results=()
record() { results+=("| $1 | $2 | $3 |"); echo "== $1 ($2): $3"; }
# rxe is the server, droce the client.
rxe_server() {  # name, guest cmd, droce cmd, port
  local j; j=$("$lab" bg 1 "$2")
  "$lab" waitport 1 "$4" 60 >/dev/null
  local o; o=$(droce "$3" 2>&1); local rc=$?
  local g; g=$("$lab" wait "$j" 120 2>&1); local grc=$?
  echo "$o" | tail -4; echo "$g" | tail -3
  record "$1" "rxe server, droce client" "$([ $rc -eq 0 ] && [ $grc -eq 0 ] && echo pass || echo "FAIL ($rc/$grc)") $(echo "$o" | grep -oE '[0-9.]+ usec/iter|^ *65536 +[0-9]+ +[0-9.]+ +[0-9.]+' | tail -1 | tr -s ' ')"
}
# droce is the server, rxe the client. The guest reaches the side channel at
# the netns' bridge address (.1): .2 is droce's RoCE address, which the kernel
# does not own (droce answers its ARP).
droce_server() {  # name, droce cmd, guest cmd
  droce "$2" >"$DROCE_RUN_DIR/srv.log" 2>&1 &
  local pid=$!
  sleep 3
  local g; g=$("$lab" exec -t 120 1 "$3" 2>&1); local grc=$?
  wait $pid; local rc=$?
  tail -4 "$DROCE_RUN_DIR/srv.log"; echo "$g" | tail -3
  record "$1" "droce server, rxe client" "$([ $rc -eq 0 ] && [ $grc -eq 0 ] && echo pass || echo "FAIL ($rc/$grc)") $(echo "$g" | grep -oE '[0-9.]+ usec/iter|^ *65536 +[0-9]+ +[0-9.]+ +[0-9.]+' | tail -1 | tr -s ' ')"
}

guest_kernel=$("$lab" exec 1 'uname -r' 2>/dev/null | tail -1)
"$lab" capture start interop >/dev/null
rxe_server "ibv_rc_pingpong" "ibv_rc_pingpong -d rxe0 -g 1 -n 200" "ibv_rc_pingpong -d droce0 -g 1 -n 200 192.168.77.11" 18515
droce_server "ibv_rc_pingpong" "ibv_rc_pingpong -d droce0 -g 1 -n 200" "ibv_rc_pingpong -d rxe0 -g 1 -n 200 192.168.77.1"
rxe_server "ib_write_bw" "ib_write_bw -d rxe0 -x 1 -F -m 1024 -D 5" "ib_write_bw -d droce0 -x 1 -F -m 1024 -D 5 192.168.77.11" 18515
droce_server "ib_write_bw" "ib_write_bw -d droce0 -x 1 -F -m 1024 -D 5" "ib_write_bw -d rxe0 -x 1 -F -m 1024 -D 5 192.168.77.1"
rxe_server "ib_read_bw" "ib_read_bw -d rxe0 -x 1 -F -m 1024 -D 5" "ib_read_bw -d droce0 -x 1 -F -m 1024 -D 5 192.168.77.11" 18515
droce_server "ib_read_bw" "ib_read_bw -d droce0 -x 1 -F -m 1024 -D 5" "ib_read_bw -d rxe0 -x 1 -F -m 1024 -D 5 192.168.77.1"
rxe_server "rxe_ops (every RC opcode)" "/mnt/share/rxe_ops -d rxe0 -g 1" "$DROCE_RUN_DIR/rxe_ops -d droce0 -g 1 192.168.77.11" 18600
droce_server "rxe_ops (every RC opcode)" "$DROCE_RUN_DIR/rxe_ops -d droce0 -g 1" "/mnt/share/rxe_ops -d rxe0 -g 1 192.168.77.1"
"$lab" capture stop interop
pcap=${ROCELAB_DIR:-/var/tmp/rocelab}/pcaps/interop.pcap
check=$("$build/apps/pcap/droce-pcap" check "$pcap" 2>&1 | head -1)
echo "$check"

. "$root/tools/interop/section.sh"
{
  echo "## RC verbs programs (\`tools/interop/rxe_lab.sh\`)"
  echo
  echo "Run by \`tools/interop/rxe_lab.sh\` on $(date -u +%Y-%m-%d): droce (af_packet on the lab's lab0, path MTU 1024)"
  echo "against rxe in a Debian 12 guest (kernel $guest_kernel, rdma-core 44) of \`shared/rocelab\`,"
  echo "unmodified programs on both sides. The guest is emulated (TCG): bandwidths say nothing about either"
  echo "stack's speed, only that data moved. Results: pingpong time per iteration; perftest's"
  echo "bytes, iterations, peak and average MB/s."
  echo
  echo "| program | roles | result |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${results[@]}"
  echo
  echo "Capture of the whole session checked by droce-pcap (every RoCE frame parsed, ICRC verified):"
  echo
  echo "    $check"
} | replace_section "$out" rxe_lab.sh
echo "wrote its section of $out"
