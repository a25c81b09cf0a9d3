#!/usr/bin/env bash
# Dataplane benchmark: the raw memif wire and droce-testpmd on the same wire,
# in one invocation, reported as ratios (the machine is noisy: compare within
# a run). Writes results.csv next to this script and prints it.
#   [DROCE_BUILD_DIR=dir] bash tools/bench/dataplane/run.sh [seconds_per_point]
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${DROCE_BUILD_DIR:-build-rel}  # any release build tree; created here if missing
secs=${1:-3}
[ -f "$build/build.ninja" ] || meson setup "$build" -Dbuildtype=release >/dev/null
ninja -C "$build" apps/testpmd/droce-testpmd >/dev/null
export DROCE_TESTPMD=$(realpath "$build")/apps/testpmd/droce-testpmd
out=tools/bench/dataplane/results.csv
field() { grep "^$1 " | grep -oE "$2=[0-9.]+" | head -1 | cut -d= -f2; }
point() {  # name side field fwd-args...
  local name=$1 side=$2 key=$3; shift 3
  local v
  v=$(CLIENT_ARGS="--duration $secs" bash tools/memif-pair.sh "$@" | field "$side" "$key")
  echo "$name,$v" | tee -a "$out"
}
echo "metric,value" >"$out"
point raw_half_rtt_64B_p50_us client lat_us_p50 --fwd raw_lat --size 64
point raw_half_rtt_4KiB_p50_us client lat_us_p50 --fwd raw_lat --size 4096
point raw_stream_4KiB_gbps server gbps --fwd raw_stream --size 4096
point droce_write_lat_8B_p50_us client lat_us_p50 --fwd write_lat --size 8
point droce_write_lat_8B_p99_us client p99 --fwd write_lat --size 8
point droce_write_bw_64KiB_mtu4096_gbps server gbps --fwd write_bw --size 65536 --mtu 4096 --outstanding 16
for q in 1 16 256 1024; do
  point droce_write_bw_64KiB_${q}qp_gbps server gbps --fwd write_bw --size 65536 --mtu 4096 --outstanding 1024 --qps $q
done
# Memory one QP occupies (its rings, WQEs, responder resources: measured by
# droce-testpmd from the QP's allocations), with the 1024-QP run's queue sizes.
point droce_qp_memory_bytes_1024qp server qp_memory_bytes --fwd write_bw --size 65536 --mtu 4096 --outstanding 1024 --qps 1024
awk -F, 'NR>1 {v[$1]=$2} END {
  printf "ratio_write_lat_p50_vs_raw_64B,%.2f\n", v["droce_write_lat_8B_p50_us"] / v["raw_half_rtt_64B_p50_us"];
  printf "ratio_write_bw_vs_raw_stream,%.3f\n", v["droce_write_bw_64KiB_mtu4096_gbps"] / v["raw_stream_4KiB_gbps"];
  printf "ratio_1024qp_vs_1qp,%.3f\n", v["droce_write_bw_64KiB_1024qp_gbps"] / v["droce_write_bw_64KiB_1qp_gbps"];
}' "$out" | tee -a "$out"
