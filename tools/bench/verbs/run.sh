#!/usr/bin/env bash
# Verbs benchmark (tools/bench/verbs/results.md): unmodified perftest over
# droce on a memif wire, beside the raw memif wire (droce-testpmd raw_lat) and
# kernel TCP on loopback (qperf), all in one invocation; reports ratios (the machine is
# noisy: compare within a run). Writes results.csv and sizes.csv here.
#   bash tools/bench/verbs/run.sh [seconds_per_bw_point]
set -uo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-3}
[ -f build-rel/build.ninja ] || meson setup build-rel -Dbuildtype=release >/dev/null
ninja -C build-rel >/dev/null
export BUILD=$PWD/build-rel DROCE_TESTPMD=$PWD/build-rel/apps/testpmd/droce-testpmd SERVER_DELAY=1.5
export PAIR_TIMEOUT=300
dir=tools/bench/verbs
out=$dir/results.csv
pair() { bash tools/verbs-pair.sh "$1 -d droce0 -x 1 $2" "$1 -d droce1 -x 1 $2 127.0.0.1" | sed -n '/^--- client/,$p'; }
row() { grep -E '^ *[0-9]+ +[0-9]+ ' | head -1; }
echo "metric,value" >"$out"
put() { echo "$1,${2:-failed}" | tee -a "$out"; }  # a run that failed is recorded, not hidden

raw=$(CLIENT_ARGS="--duration $secs" bash tools/memif-pair.sh --fwd raw_lat --size 64 | grep '^client ' |
      grep -oE 'lat_us_p50=[0-9.]+' | cut -d= -f2)
put raw_memif_half_rtt_64B_p50_us "$raw"

# perftest latency columns: bytes iters t_min t_max t_typical t_avg t_stdev p99 p99.9
lat=$(pair ib_write_lat "-s 2 -n 5000" | row)
put ib_write_lat_2B_typical_us "$(awk '{print $5}' <<<"$lat")"
put ib_write_lat_2B_p99_us "$(awk '{print $8}' <<<"$lat")"
# The same with the progress thread woken by timers only (no memif interrupt mode).
lat=$(LINK_SET=progress_wakeup=off pair ib_write_lat "-s 2 -n 5000" | row)
put ib_write_lat_2B_timed_sleeps_typical_us "$(awk '{print $5}' <<<"$lat")"
put ib_write_lat_2B_timed_sleeps_p99_us "$(awk '{print $8}' <<<"$lat")"
lat=$(pair ib_send_lat "-s 2 -n 5000" | row)
put ib_send_lat_2B_typical_us "$(awk '{print $5}' <<<"$lat")"
lat=$(pair ib_send_lat "-s 2 -n 5000 -e" | row)
put ib_send_lat_2B_event_typical_us "$(awk '{print $5}' <<<"$lat")"
# The same with ibv_get_cq_event sleeping at once (no busy-poll window): one OS wake-up per completion.
lat=$(LINK_SET=event_busy_poll_us=0 pair ib_send_lat "-s 2 -n 5000 -e" | row)
put ib_send_lat_2B_event_no_busy_poll_typical_us "$(awk '{print $5}' <<<"$lat")"
lat=$(pair ib_read_lat "-s 2 -n 5000" | row)
put ib_read_lat_2B_typical_us "$(awk '{print $5}' <<<"$lat")"
lat=$(LINK_SET=progress_wakeup=off pair ib_read_lat "-s 2 -n 5000" | row)
put ib_read_lat_2B_timed_sleeps_typical_us "$(awk '{print $5}' <<<"$lat")"
# What one thread wake-up costs here (eventfd ping-pong between two threads):
# event mode pays at least one per one-way trip.
cc -O2 -pthread "$dir/wakeup_floor.c" -o build-rel/wakeup_floor
put os_wakeup_p50_us "$(build-rel/wakeup_floor 20000 0 | grep -oE 'half_rtt_p50_us=[0-9.]+' | cut -d= -f2)"

# bw columns: bytes iters peak avg(MB/s) msgrate(Mpps)
for q in 1 8; do
  bw=$(pair ib_write_bw "-s 65536 -D $secs -q $q" | row)
  put ib_write_bw_64KiB_${q}qp_gbps "$(awk '{printf "%.2f", $4 * 8 / 1000}' <<<"$bw")"
done
bw=$(pair ib_write_bw "-s 64 -D $secs" | row)
put ib_write_bw_64B_mpps "$(awk '{print $5 + 0}' <<<"$bw")"  # +0: an EAL line can end up glued to the number

# All sizes, 1 and 8 QPs (ib_write_bw -a).
echo "qps,bytes,gbps,mpps" >"$dir/sizes.csv"
for q in 1 8; do
  pair ib_write_bw "-a -n 500 -q $q" | grep -E '^ *[0-9]+ +[0-9]+ ' |
    awk -v q=$q '{printf "%d,%d,%.3f,%s\n", q, $1, $4 * 8 / 1000, $5}' >>"$dir/sizes.csv"
done

# Kernel TCP on loopback, same run.
qperf >/dev/null 2>&1 & qs=$!
sleep 0.5
tcp=$(qperf 127.0.0.1 -t "$secs" -uu tcp_bw tcp_lat)
kill $qs 2>/dev/null || true
# -uu: plain units (bytes/sec, ns)
put qperf_tcp_bw_gbps "$(grep -A1 '^tcp_bw' <<<"$tcp" | awk '$1 == "bw" {printf "%.2f", $3 * 8 / 1e9}')"
put qperf_tcp_lat_us "$(grep -A1 '^tcp_lat' <<<"$tcp" | awk '$1 == "latency" {printf "%.2f", $3 / 1000}')"

awk -F, 'NR>1 {v[$1]=$2} END {
  printf "ratio_write_lat_vs_raw_half_rtt,%.2f\n", v["ib_write_lat_2B_typical_us"] / v["raw_memif_half_rtt_64B_p50_us"];
  printf "ratio_write_bw_vs_tcp_bw,%.2f\n", v["ib_write_bw_64KiB_1qp_gbps"] / v["qperf_tcp_bw_gbps"];
  printf "ratio_send_lat_event_vs_poll,%.2f\n", v["ib_send_lat_2B_event_typical_us"] / v["ib_send_lat_2B_typical_us"];
  printf "ratio_write_lat_timed_sleeps_vs_wakeup,%.2f\n", v["ib_write_lat_2B_timed_sleeps_typical_us"] / v["ib_write_lat_2B_typical_us"];
}' "$out" | tee -a "$out"
