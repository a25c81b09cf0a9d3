#!/usr/bin/env bash
# The cross-check (doc/cc-experiments.md "ns-3 beside the fabric"): the same
# 2-sender incast in ns-3 (droce-ns3-incast: droce's transport in every
# host, sim::EgressPort as the switch) and between real processes through
# droced (tools/cc/run_fabric.sh, both senders starting together): one
# RATE_MBPS bottleneck, the same Kmin/Kmax/Pmax, buffer, MTU, WRITE size,
# WRITEs outstanding and algorithm parameters; ns-3's links get DELAY_NS
# each so its base RTT is near the fabric's. Writes OUT/ns3.<alg>.*.csv,
# the fabric's logs and table (fabric.*), and OUT/cross.<alg>.png: each
# flow's throughput and cc rate, and the queue, ns-3 left, fabric right.
#   tools/cc/cross_check.sh [OUT_DIR]     (default doc/cc-experiments/cross)
# Env: BUILD, ALGS, RATE_MBPS (200), SECONDS_RUN (4), DELAY_NS (75000),
#   NS3=0 / FABRIC=0 (skip that side: rerun one, then plot both), and
#   run_fabric.sh's KMIN KMAX PMAX LIMIT SIZE OUTSTANDING CC_PARAMS_<alg>.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/build}
out=${1:-$root/doc/cc-experiments/cross}
algs=${ALGS:-dcqcn timely hpcc swift none}
rate=${RATE_MBPS:-200} secs=${SECONDS_RUN:-4} delay=${DELAY_NS:-75000}
kmin=${KMIN:-20000} kmax=${KMAX:-200000} pmax=${PMAX:-0.2} limit=${LIMIT:-2000000}
size=${SIZE:-65536} outstanding=${OUTSTANDING:-8}
: "${CC_PARAMS_timely=t_low_ns=1000000,t_high_ns=5000000,min_rtt_ns=300000}"
: "${CC_PARAMS_hpcc=base_rtt_ns=1000000}"
: "${CC_PARAMS_swift=base_target_ns=1000000}"
export CC_PARAMS_timely CC_PARAMS_hpcc CC_PARAMS_swift
py=${PYTHON:-/usr/bin/python3}
ns3="$build/sim/ns3/droce-ns3-incast"
[ -x "$ns3" ] || { echo "no $ns3 (meson -Dns3=enabled, libns3-dev)" >&2; exit 2; }
mkdir -p "$out"
gbps=$(awk -v r="$rate" 'BEGIN { print r / 1000 }')
flow_bytes=$(awk -v r="$rate" -v s="$secs" 'BEGIN { printf "%d", r * 1e6 * s / 8 / 2 }')
for alg in $algs; do
  [ "${NS3:-1}" = 0 ] && break
  params_var=CC_PARAMS_$alg
  cmd=("$ns3" --senders 2 --cc "$alg" --rate-gbps "$gbps" --delay-ns "$delay" --mtu 4096 --flow-bytes "$flow_bytes"
       --msg-bytes "$size" --depth "$outstanding" --kmin "$kmin" --kmax "$kmax" --pmax "$pmax" --mark dequeue
       --buffer "$limit" --sample-ns 20000000 --max-ms $((secs * 4000)) --csv "$out/ns3.$alg")
  [ -n "${!params_var:-}" ] && cmd+=(--cc-params "${!params_var//,/ }")
  echo "# $(date -u +%Y-%m-%dT%H:%MZ) ${cmd[*]#$root/}" >>"$out/commands.txt"
  "${cmd[@]}" | tee "$out/ns3.$alg.summary.txt"
done
[ "${FABRIC:-1}" = 0 ] || ALGS="$algs" SENDERS=2 STAGGER=0 HOLD="$secs" RATE_MBPS="$rate" KMIN="$kmin" KMAX="$kmax" PMAX="$pmax" LIMIT="$limit" \
  SIZE="$size" OUTSTANDING="$outstanding" TAG=fabric "$root/tools/cc/run_fabric.sh" "$out"
"$py" "$root/tools/cc/fabric.py" cross "$out" "$rate" "$kmin" "$kmax"
