#!/usr/bin/env bash
# 8 fabric devices, and programs that open every device of the host: a verbs
# program that starts each one's dataplane and sends a datagram through it,
# UCX's ucx_info and libfabric's fi_info (unmodified Debian packages), and
# empty polls of idle devices (idle_poll.c).
# The MPI job over 8 devices is in mpi.sh.
source "$(dirname "$0")/lib.sh"
need ucx_info fi_info
# empty_poll_skip=on: the idle_poll check's subject (off by default, doc/verbs.md).
stacks_host droce-stacks-dev 8 empty_poll_skip=on
: "${OPEN_DEVICES:?set OPEN_DEVICES to the open_devices program}"
: "${IDLE_POLL:?set IDLE_POLL to the idle_poll program}"

# Every device open at once in one process, each working (a UD datagram to
# itself); what each cost is printed (doc/verbs.md "Memory per open device").
open_all() {
  local out; out=$(timeout "$t" "$OPEN_DEVICES" -min 8 2>&1); local rc=$?
  echo "$out"
  [ $rc -eq 0 ] && grep -q "^8 of 8 devices open and working" <<<"$out"
}
check "one process opens 8 devices and uses each" open_all

# Many attachments at once: 6 processes with all 8 devices open each, 48
# (process, device) pairs on one droced, more than DPDK's 32 ethdev ports
# (each is a pair of shared-memory rings, doc/droced.md "The link to the
# daemon"). Each device of each process works before and after all of them
# are attached, and droced lists all 48.
many_processes() {
  local go=$run/many.go k pids=() rc=0 i
  rm -f "$go"
  for k in 1 2 3 4 5 6; do
    timeout "$t" "$OPEN_DEVICES" -min 8 -wait "$go" >"$run/many.$k.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq 1200); do
    [ "$(cat "$run"/many.*.log 2>/dev/null | grep -c 'devices open and working')" -eq 6 ] && break
    sleep 0.1
  done
  local attached; attached=$("$ctl" daemon status | grep -c "^  process pid .* rings ")
  echo "droced: $attached attachments by rings"
  touch "$go"
  for k in "${!pids[@]}"; do wait "${pids[$k]}" || { rc=1; echo "process $((k + 1)) failed:"; cat "$run/many.$((k + 1)).log"; }; done
  grep -h "devices open and working\|after the wait" "$run"/many.*.log
  [ $rc -eq 0 ] && [ "$attached" -eq 48 ] &&
    [ "$(cat "$run"/many.*.log | grep -c '^after the wait: 8 of 8 devices working')" -eq 6 ]
}
check "6 processes x 8 devices: 48 attachments to one droced, every device working" many_processes

# UCX polls every CQ of every device it opened on each progress call: an
# empty poll of an idle device runs no poll round (DROCE_STATS counts those
# polls), and a datagram that waits in a device's ring is found by the next
# poll all the same (idle_poll.c).
idle_polls() {
  local out; out=$(DROCE_STATS=1 timeout "$t" "$IDLE_POLL" 5000 2>&1); local rc=$?
  grep -E "^idle|->|empty polls" <<<"$out"
  local skipped; skipped=$(awk '/empty polls that ran no round/ && $NF >= 5000 {n++} END {print n + 0}' <<<"$out")
  echo "$skipped of 8 devices skipped the rounds of their empty polls"
  [ $rc -eq 0 ] && [ "$skipped" -eq 8 ] && [ "$(grep -c "the last 100 each found by the first poll" <<<"$out")" -eq 8 ]
}
check "empty polls of 8 idle devices run no round; arrivals are found by the next poll" idle_polls

# UCX: one rc_verbs and one ud_verbs transport per device.
ucx_info_lists_all() {
  local out; out=$(timeout "$t" ucx_info -d 2>&1) || { echo "$out" | tail -20; return 1; }
  local i
  for ((i = 0; i < 8; ++i)); do
    for tl in rc_verbs ud_verbs; do
      grep -A1 "Transport: $tl" <<<"$out" | grep -q "Device: droce$i:1" || { echo "no $tl on droce$i:1"; return 1; }
    done
  done
  ! grep -E "UCX  (ERROR|WARN)|Fatal" <<<"$out"  # the log, not "error handling:" lines
}
check "ucx_info -d: rc_verbs and ud_verbs on droce0..7" ucx_info_lists_all

# libfabric's verbs provider: a DGRAM domain per device, and a MSG domain per
# device found by the device's address (-s as a server binds it, -n as a
# client resolves it). The query without an address binds "localhost",
# which takes the first active device as Linux's cma_bind_loopback does, so
# it lists droce0's MSG domain only, as it would on a host with 8 RoCE NICs.
fi_info_lists_all() {
  local out msg how; out=$(timeout "$t" fi_info -p verbs 2>&1) || { echo "$out" | tail -20; return 1; }
  local i
  for ((i = 0; i < 8; ++i)); do
    grep -q "domain: droce$i-dgram\$" <<<"$out" || { echo "no DGRAM domain droce$i-dgram"; return 1; }
    for how in -s -n; do
      msg=$(timeout "$t" fi_info -p verbs -t FI_EP_MSG "$how" "10.0.0.$((i + 1))" 2>&1) || { echo "$msg" | tail -20; return 1; }
      grep -q "domain: droce$i\$" <<<"$msg" || { echo "fi_info $how 10.0.0.$((i + 1)): no MSG domain droce$i"; echo "$msg"; return 1; }
      ! grep -q "domain: droce[0-9]*\$" <<<"$(grep -v "domain: droce$i\$" <<<"$msg")" ||
        { echo "fi_info $how 10.0.0.$((i + 1)) lists another device's MSG domain"; return 1; }
    done
  done
}
check "fi_info -p verbs: droce0..7, DGRAM, and MSG by address" fi_info_lists_all

finish stacks_devices
