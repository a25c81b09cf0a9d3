#!/usr/bin/env bash
# Runs an unmodified verbs program pair over droce: registers droce0 (memif
# server, 10.0.0.1) and droce1 (memif client, 10.0.0.2) in a private run
# directory, starts the server command, then the client command, and waits
# for both.
#   tools/verbs-pair.sh 'ib_write_bw -d droce0 -x 1' 'ib_write_bw -d droce1 -x 1 127.0.0.1'
# Env: BUILD (build dir, default ./build), PAIR_TIMEOUT (s, default 60),
#      SERVER_DELAY (s before the client starts, default 1; "listen": once
#      a process the server command started holds a listening TCP socket,
#      its side channel, up to 30 s), KEEP_LOGS=1,
#      PAIR_IP6=1 (IPv6 addresses as well: GID index 2),
#      LINK_SET='k=v ...' (device-file settings for both devices, e.g.
#      'progress_wakeup=off'),
#      WIRE=fabric: droce0 and droce1 as devices of the host fabric (droced,
#      started here and stopped at the end; doc/droced.md): any number of
#      programs may open either;
#      SERVER_STAYS=1: the server runs until killed (qperf): stop it after
#      the client;
#      WIRE=veth: af_packet on a veth pair between two network namespaces
#      made here (path MTU <= 2048); the server then runs in one namespace,
#      the client in the other, and reaches the server's side channel at
#      10.99.0.1 (the client command must use that address, not 127.0.0.1).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
ctl="$build/apps/ctl/droce-ctl"
[ $# -eq 2 ] || { echo "usage: $0 'SERVER CMD' 'CLIENT CMD'" >&2; exit 2; }
[ -x "$ctl" ] || { echo "no $ctl: build first" >&2; exit 2; }
run=$(mktemp -d /tmp/droce-verbs.XXXXXX)
export DROCE_RUN_DIR=$run
cleanup() {
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}
trap cleanup EXIT
# PAIR_IP6=1 adds IPv6 addresses too (GID index 2 on both devices).
ip6_0=(); ip6_1=()
[ "${PAIR_IP6:-0}" = 1 ] && { ip6_0=(ip fd00::1); ip6_1=(ip fd00::2); }
wrap_s=() wrap_c=()
if [ "${WIRE:-memif}" = veth ]; then
  tag=$$ ns_s=droce-vs-$$ ns_c=droce-vc-$$
  ip netns add "$ns_s" && ip netns add "$ns_c" || exit 2
  ip link add vs$tag type veth peer name vc$tag || exit 2
  ip link set vs$tag netns "$ns_s"; ip link set vc$tag netns "$ns_c"
  ip -n "$ns_s" addr add 10.99.0.1/24 dev vs$tag; ip -n "$ns_c" addr add 10.99.0.2/24 dev vc$tag
  for ns in "$ns_s" "$ns_c"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_s" link set vs$tag mtu 9000 up; ip -n "$ns_c" link set vc$tag mtu 9000 up
  cleanup() { ip netns del "$ns_s" 2>/dev/null; ip netns del "$ns_c" 2>/dev/null
    "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
    [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"; }
  wire0=(type af_packet iface vs$tag) wire1=(type af_packet iface vc$tag)
  wrap_s=(ip netns exec "$ns_s") wrap_c=(ip netns exec "$ns_c")
elif [ "${WIRE:-memif}" = fabric ]; then
  cleanup() { "$ctl" daemon stop >/dev/null 2>&1
    "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
    [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"; }
  wire0=() wire1=()
else
  wire0=(type memif socket "$run/wire.sock" role server) wire1=(type memif socket "$run/wire.sock" role client)
fi
link_set=()
for kv in ${LINK_SET:-}; do link_set+=(set "$kv"); done
# lid-peer: LID-addressed QPs (qperf's) reach the other end of the wire (a
# fabric device has a LID of its own instead).
lid0=(lid-peer 10.0.0.2) lid1=(lid-peer 10.0.0.1)
[ "${WIRE:-memif}" = fabric ] && lid0=() lid1=()
"$ctl" link add droce0 "${wire0[@]}" ip 10.0.0.1 "${ip6_0[@]}" "${lid0[@]}" "${link_set[@]}" >/dev/null || exit 2
"$ctl" link add droce1 "${wire1[@]}" ip 10.0.0.2 "${ip6_1[@]}" "${lid1[@]}" "${link_set[@]}" >/dev/null || exit 2
eval "$("$ctl" env)"
t=${PAIR_TIMEOUT:-60}
# Each side runs in a directory of its own with core dumps on (the kernel's
# core_pattern "core" writes them there): a side that dies of a signal gets
# its backtrace printed below when gdb is installed.
mkdir -p "$run/s" "$run/c"
timeout "$t" "${wrap_s[@]}" bash -c "cd '$run/s'; ulimit -c unlimited 2>/dev/null; $1" >"$run/server.log" 2>&1 &
server=$!
descendants() { local p; for p in $(pgrep -P "$1"); do echo "$p"; descendants "$p"; done; }
server_listens() {  # a process the server command started holds a listening TCP socket
  local pids; pids=$(descendants "$server" | paste -sd '|' -)
  [ -n "$pids" ] && "${wrap_s[@]}" ss -Hltnp 2>/dev/null | grep -qE "pid=($pids),"
}
if [ "${SERVER_DELAY:-1}" = listen ]; then
  for _ in $(seq 300); do
    server_listens && break
    kill -0 $server 2>/dev/null || break
    sleep 0.1
  done
else
  sleep "${SERVER_DELAY:-1}"
fi
timeout "$t" "${wrap_c[@]}" bash -c "cd '$run/c'; ulimit -c unlimited 2>/dev/null; $2" >"$run/client.log" 2>&1
client_rc=$?
[ "${SERVER_STAYS:-0}" = 1 ] && kill $server 2>/dev/null
wait $server
server_rc=$?
[ "${SERVER_STAYS:-0}" = 1 ] && server_rc=0
echo "--- server ($server_rc): $1"; cat "$run/server.log"
echo "--- client ($client_rc): $2"; cat "$run/client.log"
backtrace() {  # DIR: the core a side left there, if any
  local core; core=$(ls "$1"/core* 2>/dev/null | head -1)
  [ -n "$core" ] && command -v gdb >/dev/null || return 0
  local exe; exe=$(gdb -q -batch -ex 'info proc' -c "$core" 2>/dev/null | sed -n "s/^exe = '\([^ ']*\).*/\1/p")
  [ -n "$exe" ] || exe=$(file "$core" | sed -n "s/.*execfn: '\([^']*\)'.*/\1/p")
  echo "--- backtrace of $core ($exe)"
  gdb -q -batch -ex 'thread apply all bt 12' "$(command -v "$exe" || echo "$exe")" "$core" 2>&1 | grep -E '^Thread|^#' | head -60
}
[ $server_rc -gt 128 ] && backtrace "$run/s"
[ $client_rc -gt 128 ] && backtrace "$run/c"
[ $client_rc -eq 0 ] && [ $server_rc -eq 0 ]
