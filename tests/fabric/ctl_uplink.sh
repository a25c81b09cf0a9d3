#!/usr/bin/env bash
# The daemon's uplink from droce-ctl (doc/droced.md "Uplinks"): `droce-ctl
# daemon start --uplink SPEC` and `droce-ctl link add NAME ip ADDR uplink
# SPEC` (which starts the daemon with it); bad SPECs are refused with a clear
# message and exit 2 before anything starts or is written (droced refuses
# them too); a good memif uplink shows in `daemon status` and carries traffic
# between two hosts (run directories); DROCED_UPLINK keeps working.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
A=$(mktemp -d /tmp/droce-ctlup-a.XXXXXX); B=$(mktemp -d /tmp/droce-ctlup-b.XXXXXX); C=$(mktemp -d /tmp/droce-ctlup-c.XXXXXX)
log_dirs=("$A" "$B" "$C")
cleanup() {
  local d
  for d in "$A" "$B" "$C"; do DROCE_RUN_DIR=$d "$ctl" daemon stop >/dev/null 2>&1; done
  DROCE_RUN_DIR=$A "$ctl" link del droce0 >/dev/null 2>&1; DROCE_RUN_DIR=$B "$ctl" link del droce2 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$A" "$B" "$C"
}
trap cleanup EXIT
p=${SIDE_PORT:-$((20000 + ($$ + 11) % 20000))}
on() {  # DIR CMD...: a verbs program on host DIR
  local dir=$1; shift
  (export DROCE_RUN_DIR=$dir; eval "$("$ctl" env)"; exec "$@")
}
running() { DROCE_RUN_DIR=$1 "$ctl" daemon status >/dev/null 2>&1; }

# Exit 2, the message names the string and why; no daemon started.
refused() {  # WHY CMD...
  local why=$1; shift
  local out; out=$("$@" 2>&1); local rc=$?
  echo "$rc: $out"
  [ $rc = 2 ] && grep -q -- "$why" <<<"$out" || return 1
  ! running "$C" || { echo "a daemon runs"; return 1; }
}
bad_specs() {
  local s
  while IFS='|' read -r s why; do
    refused "droce-ctl: bad uplink '$s': .*$why" env DROCE_RUN_DIR="$C" "$ctl" daemon start --uplink "$s" || return 1
  done <<EOF2
tcp:10.0.0.9|unknown kind
memif:/tmp/x.sock|memif needs SOCKET and a role
memif:/tmp/x.sock:master|the memif role is server or client
memif:relative.sock:server|absolute path
memif:/tmp/x.sock,id=7:client|must not contain ','
vdev:af_packet0,iface=lo|starts with its driver
pci:03:00.0|a PCI address is DDDD:BB:DD.F
EOF2
}
check "daemon start --uplink: bad strings refused (exit 2, the reason), no daemon started" bad_specs
check "link add ... uplink BAD: refused, the device not registered" bash -c "
  $(declare -f refused running); ctl='$ctl' C='$C'
  refused \"bad uplink 'memif:/x:sideways'\" env DROCE_RUN_DIR='$C' '$ctl' link add droce9 ip 10.0.0.9 uplink memif:/x:sideways &&
  ! DROCE_RUN_DIR='$C' '$ctl' link show droce9 2>/dev/null"
check "DROCED_UPLINK=BAD: refused, named as from the environment" \
  refused "bad uplink 'vdev:'.*(from DROCED_UPLINK)" env DROCE_RUN_DIR="$C" DROCED_UPLINK=vdev: "$ctl" daemon start
check "droced --uplink BAD itself: exit 2 with the reason" \
  refused "droced: --uplink: bad uplink 'memif:/a b:server'" "$build/apps/droced/droced" --run-dir "$C" --foreground --uplink "memif:/a b:server"
check "link add type memif ... uplink: refused (a fabric device's option)" \
  refused "uplink is a fabric device's" env DROCE_RUN_DIR="$C" "$ctl" link add droce9 type memif socket /tmp/x.sock role server ip 10.0.0.9 uplink memif:/tmp/y.sock:server

# Host A: the daemon started by hand with the memif uplink's server side;
# host B: `link add` starts its daemon with the client side.
good_uplink() {
  DROCE_RUN_DIR=$A "$ctl" daemon start --uplink "memif:$A/up.sock:server" || return 1
  DROCE_RUN_DIR=$A "$ctl" link add droce0 ip 10.0.0.1 >/dev/null || return 1
  DROCE_RUN_DIR=$B "$ctl" link add droce2 ip 10.0.0.3 uplink "memif:$A/up.sock:client" >/dev/null || return 1
  DROCE_RUN_DIR=$A "$ctl" daemon status | grep "uplink memif $A/up.sock (server)" &&
    DROCE_RUN_DIR=$B "$ctl" daemon status | grep "uplink memif $A/up.sock (client)"
}
check "daemon start --uplink memif:...:server and link add ... uplink memif:...:client: both in daemon status" good_uplink
check "a running daemon's uplink cannot be changed: daemon start --uplink refused" \
  bash -c "out=\$(DROCE_RUN_DIR='$A' '$ctl' daemon start --uplink 'memif:$A/other.sock:server' 2>&1); rc=\$?; echo \"\$rc \$out\";
           [ \$rc = 2 ] && grep -q 'running for .* already' <<<\"\$out\""
across() {
  timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $A ibv_rc_pingpong -p $p -d droce0 -g 1 -n 200 -c" >"$A/s.log" 2>&1 &
  local s=$!
  sleep 1.5
  timeout "$t" bash -c "$(declare -f on); ctl='$ctl'; on $B ibv_rc_pingpong -p $p -d droce2 -g 1 -n 200 -c 127.0.0.1" >"$A/c.log" 2>&1
  local crc=$?; wait $s; local src=$?
  tail -n 2 "$A/s.log" "$A/c.log"
  [ $crc = 0 ] && [ $src = 0 ] && DROCE_RUN_DIR=$B "$ctl" daemon status | grep -E "uplink memif.*to_uplink [1-9].*rx [1-9]"
}
check "ibv_rc_pingpong -c droce0 (host A) <-> droce2 (host B) over the uplinks droce-ctl set" across
check "DROCED_UPLINK still gives a daemon droce-ctl starts its uplink" bash -c "
  DROCE_RUN_DIR='$C' DROCED_UPLINK='memif:$C/up.sock:server' '$ctl' daemon start &&
  DROCE_RUN_DIR='$C' '$ctl' daemon status | grep 'uplink memif $C/up.sock (server)'"

finish fabric_ctl_uplink
