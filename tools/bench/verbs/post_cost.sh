#!/usr/bin/env bash
# post_cost.c for one or two release trees, alternating tree by tree
# (A B A B ...): 64 B RDMA WRITEs between two QPs of one device (internal
# loopback on a DPDK net_ring vdev), measured in the program thread's own CPU
# time, which a loaded host's preemptions do not inflate. CSV on stdout:
# tree,qps,run,cpu_ns_per_write,mwrites_per_cpu_s,wall_s.
#   bash tools/bench/verbs/post_cost.sh NAME=BUILD_DIR [NAME=BUILD_DIR]
# Env: RUNS (default 5), WRITES (default 500000), OUTSTANDING (default 128), QPS (default "1 8"), SIGNAL_EVERY,
#      POST_API=wr and INLINE=1 (post_cost.c: ibv_wr_* instead of ibv_post_send, inline data).
set -uo pipefail
cd "$(dirname "$0")/../../.."
names=() dirs=()
for a in "$@"; do names+=("${a%%=*}"); dirs+=("$(cd "${a#*=}" && pwd)"); done
bin=$(mktemp /tmp/post_cost.XXXXXX)
trap 'rm -f "$bin"' EXIT
cc -O2 -Wall tools/bench/verbs/post_cost.c -o "$bin" -libverbs || exit 2
one() {  # build dir, qps
  local run out
  run=$(mktemp -d /tmp/droce-pc.XXXXXX)
  out=$(export DROCE_RUN_DIR=$run
        "$1"/apps/ctl/droce-ctl link add pc0 type vdev vdev net_ring_pc0 ip 10.0.0.9 >/dev/null &&
        eval "$("$1"/apps/ctl/droce-ctl env)" &&
        timeout 120 "$bin" pc0 "${WRITES:-500000}" "${OUTSTANDING:-128}" "$2" 2>/dev/null
        "$1"/apps/ctl/droce-ctl link del pc0 >/dev/null 2>&1)
  rm -rf "$run"
  grep -oE 'cpu_ns_per_write=[0-9.]+|mwrites_per_cpu_s=[0-9.]+|wall_s=[0-9.]+' <<<"$out" | cut -d= -f2 |
    paste -sd, | awk -F, '{print $2 "," $3 "," $1}'
}
for q in ${QPS:-1 8}; do
  for ((r = 1; r <= ${RUNS:-5}; ++r)); do
    for i in "${!names[@]}"; do echo "${names[$i]},$q,$r,$(one "${dirs[$i]}" "$q")"; done
  done
done
