#!/usr/bin/env bash
# rdma_cm and UD interop with real Linux Soft-RoCE (rxe, kernel 6.1) in the
# workplace lab's VM (../shared/rocelab): droce0 is the RoCE function of a
# host's interface on the lab's bridge, 192.168.77.3 and fd77::3
# (LAB_LINK=netdev, the default), or a fabric device whose daemon's uplink is
# DPDK af_packet on the lab's lab0, with lab0's MAC, 192.168.77.2 and fd77::2
# (LAB_LINK=af_packet; tools/interop/lab.sh); either way droced plays the
# kernel's CM on QP1 (doc/cm.md). The guest gets fd77::11; rping (IPv4 and IPv6),
# perftest -R, ucmatose, rdma_server/rdma_client, rstream, udaddy (SIDR) and
# ibv_ud_pingpong run unmodified against rxe
# in both roles; the wire is captured and checked. Opt-in (slow: the guest is
# emulated); not part of CI. Needs root. perftest -R's listen race is retried
# in both directions (rxe_server here, droce_server in lab.sh); every case
# runs whatever failed before it, and the run ends with a summary table.
#   bash tools/interop/rxe_cm_lab.sh [results.md]
# It rewrites only its own section of the results file (replace_section,
# tools/interop/lab.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/tools/interop/lab.sh"
out=${1:-$root/doc/interop-rxe.md}
lab_setup droce-cminterop
lab_up
if [ "$lab_link" = netdev ]; then
  trap 'lab_netdev_host_down; lab_down; rm -rf "$DROCE_RUN_DIR"' EXIT
else
  trap 'lab_down; "$ctl" daemon stop >/dev/null 2>&1; rm -rf "$DROCE_RUN_DIR"' EXIT
  mac=$("$lab" ns cat /sys/class/net/lab0/address)
fi
# RoCEv2 over IPv6 too: a global address on the guest's eth0 (rxe adds its GID).
"$lab" exec 1 'ip -6 addr replace fd77::11/64 dev eth0 && for i in $(seq 30); do
  grep -qs fd77 /sys/class/infiniband/rxe0/ports/1/gids/* && exit 0; sleep 0.5; done; exit 1' >/dev/null || exit 2
if [ "$lab_link" = netdev ]; then
  # The kernel of droce's host answers ARP and ND for its addresses; droced
  # takes only the RoCEv2 frames (doc/netdev.md).
  lab_netdev_host_up "${lab_droce_settings[@]}" || exit 2
  link_words="droce0 the RoCE function of a host namespace's veth on the lab's bridge (\`droce-ctl link add droce0 netdev labh0\`: the kernel's 192.168.77.3 and fd77::3, path MTU 1024)"
else
  # The daemon starts inside the netns (its af_packet socket opens there); it
  # answers ARP for 192.168.77.2 out of the uplink and ARPs for the guest.
  ip netns exec rocelab env DROCE_RUN_DIR="$DROCE_RUN_DIR" DROCED_UPLINK="vdev:net_af_packet_up,iface=lab0" \
    "$ctl" link add droce0 ip 192.168.77.2 ip fd77::2 mac "$mac" mtu 1024 "${lab_droce_settings[@]}" || exit 2
  link_words="droce0 a fabric device (doc/droced.md) whose droced has an af_packet uplink on the lab's lab0 (lab0's MAC, 192.168.77.2 and fd77::2, path MTU 1024)"
fi
# shellcheck disable=SC2119  # no variables of its own here
lab_droce_env
# The guest has librdmacm but not its utilities: the host's (same Debian 12
# build) from the share.
mkdir -p "$share/bin"
for p in rping udaddy ucmatose rdma_server rdma_client rstream; do cp "$(command -v $p)" "$share/bin/" || exit 2; done

summary() {
  grep -oE '[0-9.]+ usec/iter|^ *65536 +[0-9]+ +[0-9.]+ +[0-9.]+|return status [0-9]+|rdma-ping-[0-9]+|rdma_client: end [0-9-]+|^custom .*' |
    tail -1 | tr -s ' '
}
# rxe serves, droce connects; `wait_port` waits for a TCP port in the guest
# (the side channel of ibv_ud_pingpong), else for a LISTEN cm_id in the guest.
# perftest -R's listen race, this direction: perftest connects twice (an
# exchange, then the data connection), and its server listens again only
# after the first: against the emulated guest the second REQ can arrive
# first and is rejected (REJ 8, invalid service ID, as any Linux server
# answers), and perftest's retry then crashes in rdma_resolve_addr on the ids
# it destroyed (a perftest bug, the same over the kernel's rdma_cm). Such a
# run is repeated, at most lab_attempts times (lab.sh), and says so. A
# server whose client failed otherwise is stopped after 15 s, so the next
# case starts clean.
rxe_server() {  # name, guest cmd, droce cmd, [tcp port]
  local attempt j o rc g="" grc=1 note=""
  for ((attempt = 1; attempt <= lab_attempts; attempt++)); do
    j=$("$lab" bg 1 "$2")
    if [ -n "${4:-}" ]; then
      "$lab" waitport 1 "$4" 60 >/dev/null
    else  # an rdma_cm listener: the guest's rdma tool lists it (a fixed wait was too short under load)
      for _ in $(seq 60); do "$lab" exec 1 'rdma res show cm_id | grep -q LISTEN' >/dev/null 2>&1 && break; sleep 1; done
      sleep 1
    fi
    o=$(droce "$3" 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -qE 'RDMA_CM_EVENT_REJECTED; error: 8|Unexpected CM event bl blka 8\b' <<<"$o" && [ $attempt -lt $lab_attempts ]; then
      "$lab" kill "$j" >/dev/null 2>&1; "$lab" wait "$j" 10 >/dev/null 2>&1
      show_side "droce client, attempt $attempt" $rc "$o"
      echo "  (attempt $attempt: perftest's data connection beat the server's second listen: REJ 8; once more)"
      note=" (attempt $((attempt + 1)): the $attempt before raced perftest's second listen)"
      continue
    fi
    local secs=120
    [ $rc -eq 0 ] || secs=15
    g=$("$lab" wait "$j" $secs 2>&1); grc=$?
    [ $grc -eq 124 ] && "$lab" kill "$j" >/dev/null 2>&1
    break
  done
  show_side "droce client" $rc "$o"
  show_side "rxe server" $grc "$g"
  record "$1" "rxe server, droce client" "$(verdict $rc $grc) $(echo "$o" | summary)${note}"
}
# droce serves, rxe connects: droce_server (lab.sh) waits for droced's
# listener (or the TCP port given) and retries perftest's listen race in
# this direction too.

guest_kernel=$("$lab" exec 1 'uname -r' 2>/dev/null | tail -1)
"$lab" capture start cminterop 'udp port 4791 or arp' >/dev/null
rb=/mnt/share/bin
rxe_server "rping -v -C 10" "$rb/rping -s -a 192.168.77.11 -v -C 10" "rping -c -a 192.168.77.11 -v -C 10"
droce_server "rping -v -C 10" "rping -s -a $droce_ip -v -C 10" "$rb/rping -c -a $droce_ip -v -C 10"
rxe_server "rping -C 10 -S 4000" "$rb/rping -s -a 192.168.77.11 -C 10 -S 4000" "rping -c -a 192.168.77.11 -C 10 -S 4000 -v"
droce_server "rping -C 10 -S 4000" "rping -s -a $droce_ip -C 10 -S 4000" "$rb/rping -c -a $droce_ip -C 10 -S 4000 -v"
rxe_server "rping -v -C 10 over IPv6" "$rb/rping -s -a fd77::11 -v -C 10" "rping -c -a fd77::11 -v -C 10"
droce_server "rping -v -C 10 over IPv6" "rping -s -a $droce_ip6 -v -C 10" "$rb/rping -c -a $droce_ip6 -v -C 10"
rxe_server "ib_send_bw -R" "ib_send_bw -d rxe0 -R -F -m 1024 -D 5" "ib_send_bw -d droce0 -R -F -m 1024 -D 5 192.168.77.11"
droce_server "ib_send_bw -R" "ib_send_bw -d droce0 -R -F -m 1024 -D 5" "ib_send_bw -d rxe0 -R -F -m 1024 -D 5 $droce_ip"
rxe_server "ib_write_bw -R" "ib_write_bw -d rxe0 -R -F -m 1024 -D 5" "ib_write_bw -d droce0 -R -F -m 1024 -D 5 192.168.77.11"
droce_server "ib_write_bw -R" "ib_write_bw -d droce0 -R -F -m 1024 -D 5" "ib_write_bw -d rxe0 -R -F -m 1024 -D 5 $droce_ip"
rxe_server "ucmatose -c 2" "$rb/ucmatose -b 192.168.77.11 -c 2" "ucmatose -s 192.168.77.11 -c 2"
droce_server "ucmatose -c 2" "ucmatose -b $droce_ip -c 2" "$rb/ucmatose -s $droce_ip -c 2"
rxe_server "rdma_server / rdma_client" "$rb/rdma_server -s 192.168.77.11" "rdma_client -s 192.168.77.11"
droce_server "rdma_server / rdma_client" "rdma_server -s $droce_ip" "$rb/rdma_client -s $droce_ip"
rxe_server "rstream (rsockets)" "$rb/rstream -b 192.168.77.11 -S 4096 -C 200" "rstream -s 192.168.77.11 -S 4096 -C 200"
droce_server "rstream (rsockets)" "rstream -b $droce_ip -S 4096 -C 200" "$rb/rstream -s $droce_ip -S 4096 -C 200"
rxe_server "udaddy (UD, SIDR)" "$rb/udaddy -b 192.168.77.11" "udaddy -s 192.168.77.11"
droce_server "udaddy (UD, SIDR)" "udaddy -b $droce_ip" "$rb/udaddy -s $droce_ip"
rxe_server "ibv_ud_pingpong (UD, no CM)" "ibv_ud_pingpong -d rxe0 -g 1 -s 512 -n 200" \
  "ibv_ud_pingpong -d droce0 -g 1 -s 512 -n 200 192.168.77.11" 18515
droce_server "ibv_ud_pingpong (UD, no CM)" "ibv_ud_pingpong -d droce0 -g 1 -s 512 -n 200" \
  "ibv_ud_pingpong -d rxe0 -g 1 -s 512 -n 200 $droce_tcp" 18515
# A port nobody listens on: REJ "invalid service ID" (8) both ways, at once.
o=$(droce "rping -c -a 192.168.77.11 -p 7999 -C 1 -v" 2>&1)
record "rping to a closed port" "droce client, rxe host" "$(echo "$o" | grep -q 'REJECTED, error 8\|connect error' && echo "pass (rejected)" || echo FAIL)"
g=$("$lab" exec -t 30 1 "$rb/rping -c -a $droce_ip -p 7999 -C 1 -v" 2>&1)
record "rping to a closed port" "rxe client, droce host" "$(echo "$g" | grep -q 'REJECTED, error 8' && echo "pass (REJECTED 8)" || echo FAIL)"
lab_capture_check cminterop
cmline=$("$ctl" daemon status | grep '^cm:')
echo "$cmline"
# The CM MADs of both ends by attribute, and anything Wireshark's CM
# dissector calls malformed.
mads=""
if command -v tshark >/dev/null; then
  mads=$(tshark -r "$pcap" -Y 'infiniband.mad.attributeid' -T fields -E separator=, -e ip.src -e ipv6.src \
      -e infiniband.mad.attributeid 2>/dev/null |
    awk -F, 'BEGIN { split("REQ MRA REJ REP RTU DREQ DREP SIDR_REQ SIDR_REP", name, " ")
                 for (i = 1; i <= 9; i++) id[sprintf("0x%04x", 15 + i)] = name[i] }
         { n[($1 != "" ? $1 : $2) " " ($3 in id ? id[$3] : $3)]++ }
         END { for (k in n) print k, n[k] }' | sort | awk '{ printf "%s%s %s %d", sep, $1, $2, $3; sep = ", " }')
  malformed=$(tshark -r "$pcap" -Y 'infiniband.mad && _ws.malformed' 2>/dev/null | wc -l)
  mads="$mads; MADs Wireshark calls malformed: $malformed"
fi

{
  echo "## rdma_cm and UD (\`tools/interop/rxe_cm_lab.sh\`)"
  echo
  echo "Run by \`tools/interop/rxe_cm_lab.sh\` on $(date -u +%Y-%m-%d): $link_words,"
  echo "droced the CM on QP1 (doc/cm.md), against rxe (kernel $guest_kernel, rdma-core 44, the"
  echo "kernel's ib_cm/rdma_cm) in the guest; unmodified programs on both sides (the guest runs the host's"
  echo "Debian rdmacm-utils binaries from the share). Results: the last rping line, udaddy's status, perftest's"
  echo "bytes, iterations, peak and average MB/s, pingpong time per iteration (TCG: speeds mean nothing)."
  echo
  lab_results_table
  echo
  echo "Capture of the session checked by droce-pcap (every RoCE frame parsed, ICRC verified):"
  echo
  echo "    $check"
  echo
  echo "droced's CM afterwards (every MAD rxe sent parsed: no malformed-MAD or GSI drop reason listed):"
  echo
  echo "    $cmline"
  if [ -n "$mads" ]; then
    echo
    echo "CM MADs in the capture by sender and attribute (tshark's InfiniBand CM dissector):"
    echo
    echo "    $mads"
  fi
} | replace_section "$out" rxe_cm_lab.sh
echo "wrote its section of $out"
lab_summary
