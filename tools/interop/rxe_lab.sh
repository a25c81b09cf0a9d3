#!/usr/bin/env bash
# Interop with real Linux Soft-RoCE (rxe, kernel 6.1) in the workplace lab's
# VMs (../shared/rocelab): droce0 as the RoCE function of a host's interface
# on the lab's bridge (LAB_LINK=netdev, the default; af_packet: on the lab's
# lab0 through DPDK, tools/interop/lab.sh) runs unmodified verbs programs
# against rxe in a guest, in both roles, and the wire is captured and checked. Opt-in (slow: the guests are emulated);
# not part of .ci/run. Needs root. Every case runs whatever failed before it
# (a failing side's error lines are shown, its programs stopped), and the run
# ends with a summary table.
#   bash tools/interop/rxe_lab.sh [results.md]
# It rewrites only its own section of the results file (replace_section,
# tools/interop/lab.sh); tools/interop/rxe_cm_lab.sh writes the rdma_cm/UD one.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/interop/lab.sh"
out=${1:-$root/doc/interop-rxe.md}
lab_setup droce-interop
lab_up
if [ "$lab_link" = netdev ]; then
  trap 'lab_netdev_host_down; lab_down; rm -rf "$DROCE_RUN_DIR"' EXIT
  lab_netdev_host_up "${lab_droce_settings[@]}" || exit 2
  link_words="netdev-bound on a host namespace's veth to the lab's bridge (\`droce-ctl link add droce0 netdev labh0\`, the kernel's 192.168.77.3 on it"
else
  trap 'lab_down; "$ctl" link del droce0 >/dev/null 2>&1; rm -rf "$DROCE_RUN_DIR"' EXIT
  mac=$("$lab" ns cat /sys/class/net/lab0/address)
  "$ctl" link add droce0 type af_packet iface lab0 ip 192.168.77.2 mac "$mac" "${lab_droce_settings[@]}" || exit 2
  link_words="af_packet on the lab's lab0 (192.168.77.2"
fi
lab_droce_env DROCE_STATS=1
gcc -O2 -o "$share/rxe_ops" "$root/tests/verbs/rxe_ops.c" -libverbs 2>/dev/null
cp "$share/rxe_ops" "$DROCE_RUN_DIR/rxe_ops"

summary() { grep -oE '[0-9.]+ usec/iter|^ *(64|65536) +[0-9]+ +[0-9.]+ +[0-9.]+' | tail -1 | tr -s ' '; }
# rxe is the server, droce the client. A server whose client failed waits
# for it: 15 s, then the guest job is stopped, so the next case starts clean.
rxe_server() {  # name, guest cmd, droce cmd, port
  local j; j=$("$lab" bg 1 "$2")
  "$lab" waitport 1 "$4" 60 >/dev/null
  local o; o=$(droce "$3" 2>&1); local rc=$?
  local secs=120
  [ $rc -eq 0 ] || secs=15
  local g; g=$("$lab" wait "$j" $secs 2>&1); local grc=$?
  [ $grc -eq 124 ] && "$lab" kill "$j" >/dev/null 2>&1
  show_side "droce client" $rc "$o"
  show_side "rxe server" $grc "$g"
  record "$1" "rxe server, droce client" "$(verdict $rc $grc) $(echo "$o" | summary)"
}
# droce is the server, rxe the client: droce_server (lab.sh), given the TCP
# port its server listens on.

guest_kernel=$("$lab" exec 1 'uname -r' 2>/dev/null | tail -1)
"$lab" capture start interop >/dev/null
rxe_server "ibv_rc_pingpong" "ibv_rc_pingpong -d rxe0 -g 1 -n 200" "ibv_rc_pingpong -d droce0 -g 1 -n 200 192.168.77.11" 18515
droce_server "ibv_rc_pingpong" "ibv_rc_pingpong -d droce0 -g 1 -n 200" "ibv_rc_pingpong -d rxe0 -g 1 -n 200 $droce_tcp" 18515
rxe_server "ib_write_bw" "ib_write_bw -d rxe0 -x 1 -F -m 1024 -D 5" "ib_write_bw -d droce0 -x 1 -F -m 1024 -D 5 192.168.77.11" 18515
droce_server "ib_write_bw" "ib_write_bw -d droce0 -x 1 -F -m 1024 -D 5" "ib_write_bw -d rxe0 -x 1 -F -m 1024 -D 5 $droce_tcp" 18515
# 64 B unsignaled WRITEs: droce asks rxe for an ACK every 16 packets and on signaled WRs only
# (doc/transport.md "AckReq"); rxe answers what asks, so its ACKs are sparse too.
rxe_server "ib_write_bw -s 64 (sparse AckReq)" "ib_write_bw -d rxe0 -x 1 -F -m 1024 -s 64 -n 20000" "ib_write_bw -d droce0 -x 1 -F -m 1024 -s 64 -n 20000 192.168.77.11" 18515
rxe_server "ib_read_bw" "ib_read_bw -d rxe0 -x 1 -F -m 1024 -D 5" "ib_read_bw -d droce0 -x 1 -F -m 1024 -D 5 192.168.77.11" 18515
droce_server "ib_read_bw" "ib_read_bw -d droce0 -x 1 -F -m 1024 -D 5" "ib_read_bw -d rxe0 -x 1 -F -m 1024 -D 5 $droce_tcp" 18515
rxe_server "rxe_ops (every RC opcode)" "/mnt/share/rxe_ops -d rxe0 -g 1" "$DROCE_RUN_DIR/rxe_ops -d droce0 -g 1 192.168.77.11" 18600
droce_server "rxe_ops (every RC opcode)" "$DROCE_RUN_DIR/rxe_ops -d droce0 -g 1" "/mnt/share/rxe_ops -d rxe0 -g 1 $droce_tcp" 18600
lab_capture_check interop

{
  echo "## RC verbs programs (\`tools/interop/rxe_lab.sh\`)"
  echo
  echo "Run by \`tools/interop/rxe_lab.sh\` on $(date -u +%Y-%m-%d): droce0 $link_words, path MTU 1024)"
  echo "against rxe in a Debian 12 guest (kernel $guest_kernel, rdma-core 44) of \`shared/rocelab\`,"
  echo "unmodified programs on both sides. The guest is emulated (TCG): bandwidths say nothing about either"
  echo "stack's speed, only that data moved. Results: pingpong time per iteration; perftest's"
  echo "bytes, iterations, peak and average MB/s."
  echo
  lab_results_table
  echo
  echo "Capture of the whole session checked by droce-pcap (every RoCE frame parsed, ICRC verified):"
  echo
  echo "    $check"
} | replace_section "$out" rxe_lab.sh
echo "wrote its section of $out"
lab_summary
