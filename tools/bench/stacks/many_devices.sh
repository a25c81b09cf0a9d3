#!/usr/bin/env bash
# The cost of many open devices to a program that polls them all (UCX
# progresses every CQ of every interface it opened), for one or two build
# trees, alternating tree by tree (A B A B ...) in each round:
#   empty_poll    empty_poll.c: ibv_poll_cq of 4 idle CQs per device (UCX's
#                 rc_verbs and ud_verbs interfaces, a send and a receive CQ
#                 each), 1 device and 8: thread CPU ns per empty poll, and
#                 (CALLGRIND=1) instructions per empty poll under callgrind
#   tag_lat       UCP tag_lat 8 B (UCX_TLS=rc_verbs,ud_verbs,self), server on
#                 droce0, client on droce1, UCX given 1 device each
#                 (UCX_NET_DEVICES) or all 8; with CALLGRIND=1 also the client
#                 under callgrind: instructions per ucp_worker_progress call
# Fabric devices droce0..7 in a private run directory per tree. CSV on stdout:
#   tree,round,test,devices,value,unit
#   bash tools/bench/stacks/many_devices.sh NAME=BUILD_DIR[:PROVIDER] [NAME=BUILD_DIR[:PROVIDER]]
# PROVIDER: another build of the verbs provider for that tree's programs (its
# RDMAV_DRIVERS prefix, e.g. /tmp/old/libdroce for /tmp/old/libdroce-rdmav34.so),
# to compare two providers beside the same droced.
# Env: ROUNDS (default 3), LAT_ITERS (default 20000), CALLGRIND=1, LINK_SET (device
# file settings for every device, e.g. "empty_poll_skip=on").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need ucx_perftest
names=() dirs=() providers=()
for a in "$@"; do
  spec=${a#*=}
  names+=("${a%%=*}"); dirs+=("$(cd "${spec%%:*}" && pwd)"); providers+=("$([ "$spec" != "${spec#*:}" ] && echo "${spec#*:}")")
done
[ ${#names[@]} -ge 1 ] || { echo "usage: many_devices.sh NAME=BUILD_DIR [NAME=BUILD_DIR]" >&2; exit 2; }
bin=$(mktemp /tmp/empty_poll.XXXXXX)
runs=()
cleanup() {
  local k i
  for k in "${!runs[@]}"; do
    DROCE_RUN_DIR=${runs[$k]} "${ctls[$k]}" daemon stop >/dev/null 2>&1
    for i in 0 1 2 3 4 5 6 7; do DROCE_RUN_DIR=${runs[$k]} "${ctls[$k]}" link del "droce$i" >/dev/null 2>&1; done
    rm -rf "${runs[$k]}"
  done
  rm -f "$bin" "$bin".cg
}
trap cleanup EXIT
cc -O2 -Wall "$here/empty_poll.c" -o "$bin" -libverbs || exit 2
ctls=()
for d in "${dirs[@]}"; do
  r=$(mktemp -d /tmp/droce-many.XXXXXX); runs+=("$r"); ctls+=("$d/apps/ctl/droce-ctl")
  for i in 0 1 2 3 4 5 6 7; do
    DROCE_RUN_DIR=$r "$d/apps/ctl/droce-ctl" link add "droce$i" ip "10.0.0.$((i + 1))" \
      $(for s in ${LINK_SET:-}; do echo set "$s"; done) >/dev/null || exit 2
  done
done
in_tree() {  # INDEX CMD...: CMD with tree INDEX's devices and environment
  local k=$1; shift
  (export DROCE_RUN_DIR=${runs[$k]} UCX_WARN_UNUSED_ENV_VARS=n; eval "$("${ctls[$k]}" env)"
   [ -z "${providers[$k]}" ] || export RDMAV_DRIVERS=${providers[$k]}
   "$@")
}
p=$((port + 7))
tag_lat() {  # INDEX SERVER_DEVICES CLIENT_DEVICES: the client's typical latency (us)
  local k=$1 s
  in_tree "$k" env UCX_TLS=rc_verbs,ud_verbs,self ${2:+UCX_NET_DEVICES=$2} \
    timeout 120 ucx_perftest -t tag_lat -n "${LAT_ITERS:-20000}" -p $p >/dev/null 2>&1 &
  s=$!
  wait_listen $s $p
  in_tree "$k" env UCX_TLS=rc_verbs,ud_verbs,self ${3:+UCX_NET_DEVICES=$3} \
    timeout 120 ucx_perftest -t tag_lat -n "${LAT_ITERS:-20000}" -p $p 127.0.0.1 2>/dev/null | awk '/^Final:/ {print $3}'
  wait $s
}
progress_instructions() {  # INDEX SERVER_DEVICES CLIENT_DEVICES: Ir per ucp_worker_progress call
  local k=$1 s
  in_tree "$k" env UCX_TLS=rc_verbs,ud_verbs,self ${2:+UCX_NET_DEVICES=$2} \
    timeout 300 ucx_perftest -t tag_lat -n 500 -p $p >/dev/null 2>&1 &
  s=$!
  wait_listen $s $p
  in_tree "$k" env UCX_TLS=rc_verbs,ud_verbs,self ${3:+UCX_NET_DEVICES=$3} timeout 300 valgrind --tool=callgrind \
    --toggle-collect=ucp_worker_progress --callgrind-out-file="$bin.cg" ucx_perftest -t tag_lat -n 500 -p $p 127.0.0.1 \
    >/dev/null 2>&1
  wait $s
  local ir calls
  ir=$(grep -E '^(summary|totals):' "$bin.cg" | head -1 | awk '{print $2}')
  # callgrind names a function once ("cfn=(ID) NAME"), then by its ID alone.
  calls=$(awk '/^cfn=\([0-9]+\) ucp_worker_progress$/ {id = $1} $1 == id || $0 ~ "^" id " " {want = 1; next}
               /^calls=/ && want {split($1, c, "="); s += c[2]} {want = 0} END {print s}' "$bin.cg")
  awk -v ir="$ir" -v c="$calls" 'BEGIN {printf "%.0f", ir / c}'
}
echo "tree,round,test,devices,value,unit"
for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  echo "# round $r $(date -u +%FT%TZ) load $(cut -d' ' -f1 /proc/loadavg)" >&2
  for k in "${!names[@]}"; do
    n=${names[$k]}
    for devs in 1 8; do
      list=droce0; [ $devs = 8 ] && list=""
      v=$(in_tree "$k" "$bin" 20000 4 $list | grep -oE 'cpu_ns_per_poll=[0-9.]+' | cut -d= -f2)
      echo "$n,$r,empty_poll_cpu,$devs,$v,ns"
      if [ "${CALLGRIND:-0}" = 1 ]; then
        in_tree "$k" valgrind --tool=callgrind --toggle-collect=PollRounds --callgrind-out-file="$bin.cg" \
          "$bin" 2000 4 $list >/dev/null 2>&1
        ir=$(grep -E '^(summary|totals):' "$bin.cg" | head -1 | awk '{print $2}')
        echo "$n,$r,empty_poll_instructions,$devs,$(awk -v ir="$ir" -v d=$devs 'BEGIN {printf "%.0f", ir / (2000 * 4 * d)}'),instructions"
      fi
    done
    echo "$n,$r,tag_lat,1,$(tag_lat "$k" droce0:1 droce1:1),us"
    echo "$n,$r,tag_lat,8,$(tag_lat "$k" "" ""),us"
    if [ "${CALLGRIND:-0}" = 1 ]; then
      echo "$n,$r,progress_instructions,1,$(progress_instructions "$k" droce0:1 droce1:1),instructions"
      echo "$n,$r,progress_instructions,8,$(progress_instructions "$k" "" ""),instructions"
    fi
  done
done
