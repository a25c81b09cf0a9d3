#!/usr/bin/env bash
# Fabric benchmark (results.md): unmodified perftest through droced (the host
# fabric daemon) against the direct memif pair, in one invocation, rounds
# alternating so the noisy 2-core host hits all modes alike:
#   direct    droce0 <-> droce1 joined by a memif wire (one process each)
#   fabric    fab0 <-> fab1, two devices of one droced (the pair's direct rings)
#   shared    server and client both on fab0 (one device, two processes; direct rings)
#   switched  sw0 <-> sw1, two devices of a second droced started with
#             DROCED_DIRECT=0: every frame crosses the daemon's switch (the
#             path a pair takes without direct rings)
#   loopback  two QPs of fab0 in one process (the device's internal loopback;
#             tools/bench/verbs/post_cost.c, not perftest: 64 KiB WRITEs, 64 in
#             flight, Gb/s; and one 2 B WRITE at a time, the median time from
#             post to completion, i.e. a round trip, not perftest's half)
# Reports per mode the median of the rounds: 64 KiB ib_write_bw (Gb/s) and
# 2 B ib_send_lat typical (us), the ratios the issue sets goals for, and
# memory: droced's RSS idle and with two processes attached, and the RSS of
# a verbs process (one device open) on either kind of device.
#   bash tools/bench/fabric/run.sh [rounds=3] [seconds_per_bw=3]
set -uo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-3}; secs=${2:-3}
[ -f build-rel/build.ninja ] || meson setup build-rel -Dbuildtype=release >/dev/null
ninja -C build-rel >/dev/null || exit 1
ctl=$PWD/build-rel/apps/ctl/droce-ctl
dir=tools/bench/fabric
run=$(mktemp -d /tmp/droce-fabric-bench.XXXXXX)
run2=$(mktemp -d /tmp/droce-fabric-bench-sw.XXXXXX)
export DROCE_RUN_DIR=$run
cleanup() {
  "$ctl" daemon stop >/dev/null 2>&1
  for d in droce0 droce1 fab0 fab1; do "$ctl" link del $d >/dev/null 2>&1; done
  DROCE_RUN_DIR=$run2 "$ctl" daemon stop >/dev/null 2>&1
  for d in sw0 sw1; do DROCE_RUN_DIR=$run2 "$ctl" link del $d >/dev/null 2>&1; done
  rm -rf "$run" "$run2"
}
trap cleanup EXIT
"$ctl" link add droce0 type memif socket "$run/wire.sock" role server ip 10.0.0.1 >/dev/null || exit 1
"$ctl" link add droce1 type memif socket "$run/wire.sock" role client ip 10.0.0.2 >/dev/null || exit 1
"$ctl" link add fab0 ip 10.1.0.1 >/dev/null || exit 1
"$ctl" link add fab1 ip 10.1.0.2 >/dev/null || exit 1
DROCE_RUN_DIR=$run2 DROCED_DIRECT=0 "$ctl" link add sw0 ip 10.2.0.1 >/dev/null || exit 1
DROCE_RUN_DIR=$run2 DROCED_DIRECT=0 "$ctl" link add sw1 ip 10.2.0.2 >/dev/null || exit 1
eval "$("$ctl" env)"
cc -O2 tools/bench/verbs/post_cost.c -o "$run/post_cost" -libverbs || exit 1
port=19300
# pair SERVER_DEV CLIENT_DEV PROGRAM ARGS: the client's first result row.
# sw* devices belong to the second run directory (its daemon switches every frame).
pair() {
  port=$((port + 1))
  local envs=()
  [[ $1 == sw* ]] && envs=(env DROCE_RUN_DIR="$run2" SYSFS_PATH="$run2/sysfs")
  "${envs[@]}" timeout 120 $3 -d "$1" -x 1 -p $port $4 >"$run/server.log" 2>&1 &
  local s=$!
  for _ in $(seq 100); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  "${envs[@]}" timeout 120 $3 -d "$2" -x 1 -p $port $4 127.0.0.1 2>"$run/client.err" | grep -E '^ *[0-9]+ +[0-9]+ ' | head -1
  wait $s
}
declare -A bw lat
lb_bw="" lb_lat=""
modes=(direct fabric shared switched)
declare -A devs=([direct]="droce0 droce1" [fabric]="fab0 fab1" [shared]="fab0 fab0" [switched]="sw0 sw1")
for ((r = 1; r <= rounds; r++)); do
  for m in "${modes[@]}"; do
    read -r a b <<<"${devs[$m]}"
    # ib_write_bw columns: bytes iters peak avg(MB/s) msgrate; ib_send_lat: bytes iters min max typical ...
    v=$(pair "$a" "$b" ib_write_bw "-s 65536 -D $secs" | awk '{printf "%.2f", $4 * 8 / 1000}')
    bw[$m]+="${v:-failed} "
    v=$(pair "$a" "$b" ib_send_lat "-s 2 -n 5000" | awk '{print $5}')
    lat[$m]+="${v:-failed} "
    echo "round $r $m: write_bw ${bw[$m]} lat ${lat[$m]}" >&2
  done
  v=$(timeout 60 "$run/post_cost" fab0 4000 64 1 65536 | grep -oE 'gbps=[0-9.]+' | cut -d= -f2)
  lb_bw+="${v:-failed} "
  v=$(timeout 60 "$run/post_cost" fab0 5000 1 1 2 | grep -oE 'completion_p50_us=[0-9.]+' | cut -d= -f2)
  lb_lat+="${v:-failed} "
  echo "round $r loopback: write_bw ${lb_bw} completion ${lb_lat}" >&2
done
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "failed"}'; }
# Memory (kB): droced idle, droced with two processes attached (a pair
# mid-run), and a verbs program's RSS on each kind of device.
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null; }
child() { pgrep -P "$1" | head -1; }  # the program under `timeout`
dpid=$(cat "$run/droced.pid" 2>/dev/null)
droced_idle=$(rss "$dpid")
timeout 60 ib_write_bw -d fab0 -x 1 -p 19990 -D 4 >/dev/null 2>&1 & s=$!
sleep 1.5
timeout 60 ib_write_bw -d fab1 -x 1 -p 19990 -D 4 127.0.0.1 >/dev/null 2>&1 & c=$!
sleep 2
droced_two=$(rss "$dpid"); client_fabric=$(rss "$(child $c)")
# The pair's ring memory as both map it (shared pages touched so far).
ring_kb=$(awk '/droce-ring/ {m=1; next} m && /^Rss:/ {s+=$2; m=0} END {print s+0}' "/proc/$(child $c)/smaps" 2>/dev/null)
wait $s $c
timeout 60 ib_write_bw -d droce0 -x 1 -p 19991 -D 4 >/dev/null 2>&1 & s=$!
sleep 1.5
timeout 60 ib_write_bw -d droce1 -x 1 -p 19991 -D 4 127.0.0.1 >/dev/null 2>&1 & c=$!
sleep 2
client_direct=$(rss "$(child $c)")
wait $s $c
{
  echo "metric,value"
  for m in "${modes[@]}"; do
    echo "ib_write_bw_64KiB_gbps_$m,$(median <<<"${bw[$m]}")"
    echo "ib_send_lat_2B_typical_us_$m,$(median <<<"${lat[$m]}")"
    echo "ib_write_bw_64KiB_gbps_${m}_all,\"${bw[$m]% }\""
    echo "ib_send_lat_2B_typical_us_${m}_all,\"${lat[$m]% }\""
  done
  echo "post_cost_64KiB_write_gbps_loopback,$(median <<<"$lb_bw")"
  echo "post_cost_2B_write_completion_p50_us_loopback,$(median <<<"$lb_lat")"
  echo "post_cost_64KiB_write_gbps_loopback_all,\"${lb_bw% }\""
  echo "post_cost_2B_write_completion_p50_us_loopback_all,\"${lb_lat% }\""
  echo "droced_rss_kb_idle,${droced_idle:-?}"
  echo "droced_rss_kb_two_attached,${droced_two:-?}"
  echo "verbs_process_rss_kb_fabric_device,${client_fabric:-?}"
  echo "verbs_process_rss_kb_direct_device,${client_direct:-?}"
  echo "direct_ring_rss_kb_per_path,${ring_kb:-?}"
} >"$dir/results.csv"
cat "$dir/results.csv"
