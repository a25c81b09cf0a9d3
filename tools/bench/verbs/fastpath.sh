#!/usr/bin/env bash
# The verbs fast path against the engine, for one or more release trees in one
# run (tools/bench/verbs/results.md): the engine's one-core message rate,
# perftest's 64 B and 64 KiB ib_write_bw (1 and 8 QPs), ib_send_lat,
# ib_read_lat, ibv_rc_pingpong -s 64 and ten ib_write_lat -s 2.
# With two trees the metrics alternate tree by tree (A B A B ...), so a
# machine whose speed drifts shifts both; compare within one run only.
#   bash tools/bench/verbs/fastpath.sh NAME=BUILD_DIR [NAME=BUILD_DIR]
#   e.g. bash tools/bench/verbs/fastpath.sh before=/tmp/base/build-rel after=build-rel
#   One build, two device settings: normal=build-rel fifo=build-rel@progress_sched=fifo
#   (NAME=BUILD_DIR@key=value,key=value: droce-ctl link add ... set key=value for that tree).
# Prints CSV rows tree,metric,value,load1 on stdout (a failed run is "failed"; load1: the 1-minute
# load average when the value was taken: the host is shared, so every number carries it).
# Env: SECS (bw duration, default 3), LAT_RUNS (ib_write_lat runs, default 10),
#      BW_ROUNDS (rounds of the 64 B bw pair, default 2), ONLY=bw (the 64 B bw rounds alone),
#      or ONLY=a comma list of engine,bw,bwfab,bw64k,send_lat,read_lat,pingpong,write_lat (those parts alone;
#      bwfab: the 64 B bw rounds over WIRE=fabric, only when asked for by name),
#      raw: the wire's own bound, only when asked for by name: droce-testpmd raw_stream between two processes
#      (tools/memif-pair.sh) over the same memif vdev (bsize 10240) and the verbs runtime's memif path
#      (--memif-direct), 138 B frames (a 64 B WRITE's) in transmit bursts of RAW_BURSTS (default "1 8 32"),
#      one 64 B answer per receive burst (--raw-ack, as the coalesced ACK); with bw in the same run, ratio
#      rows: each tree's median 1-QP ib_write_bw -s 64 over its raw rate at each burst; both raw sides spin
#      without sleeping, so on a busy host they measure their CPU share (results.md),
#      PINGPONG_RUNS (default 2), THREADS=1 (the 64 B bw rounds also give each thread's CPU, runqueue
#      wait, sleeps and preemptions a second, from tools/bench/verbs/thread_time.sh, the server's progress
#      sleeps and the client's AckReq solicits, from DROCE_STATS; the windows assume a quiet host's
#      start-up, under load they may catch a side's set-up).
# perftest's side channel is TCP port 18515: run nothing else that uses it
# meanwhile (the verbs_memif test does), or pairs fail; PORT=n moves every
# pair's side channel (perftest -p, ibv_rc_pingpong -p) to port n.
set -uo pipefail
cd "$(dirname "$0")/../../.."
secs=${SECS:-3}
lat_runs=${LAT_RUNS:-10}
names=() dirs=()
sets=()  # device keys per tree: NAME=BUILD_DIR@key=value,key=value (verbs-pair.sh's LINK_SET)
for a in "$@"; do
  t=${a#*=} k=
  [[ $t == *@* ]] && k=${t#*@} t=${t%%@*}
  names+=("${a%%=*}"); dirs+=("$(cd "$t" && pwd)"); sets+=("${k//,/ }")
done
export SERVER_DELAY=1.5 PAIR_TIMEOUT=120
# A side that died of a signal: verbs-pair.sh's backtrace goes to stderr
# (with the pair's command), not into the row parsing.
crashes() { awk -v cmd="$1" '/^--- backtrace/ {bt = 1; print "fastpath.sh: " cmd > "/dev/stderr"}
  bt {print > "/dev/stderr"; next} {print}'; }
port=${PORT:+-p $PORT}
pair() {  # BUILD dir, server cmd, client args
  BUILD=$1 LINK_SET=$set bash tools/verbs-pair.sh "$2 -d droce0 -x 1 $port $3" "$2 -d droce1 -x 1 $port $3 127.0.0.1" |
    crashes "$2 $3" | sed -n '/^--- client/,$p'
}
row() { grep -E '^ *[0-9]+ +[0-9]+ ' | head -1; }
declare -A got=()  # tree,metric -> values (space-separated), for the ratio rows
put() {
  echo "$1,$2,${3:-failed},$(cut -d' ' -f1 /proc/loadavg)"
  [ -n "${3:-}" ] && got[$1,$2]+="$3 "
}
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
each() {  # runs "$@" once per tree with $name and $b set
  for i in "${!names[@]}"; do name=${names[$i]} b=${dirs[$i]} set=${sets[$i]} "$@"; done
}
engine() { put "$name" engine_64B_write_mmsgs "$(taskset -c 0 "$b"/tools/bench/engine/droce-engine-bench 3 8 1000000 |
  awk -F, '$1 == "write_64B_msg_rate" {print $2}')"; }
bw() {  # size q
  local r
  r=$(pair "$b" ib_write_bw "-s $1 -D $secs -q $2" | row)
  if [ "$1" = 64 ]; then put "$name" "ib_write_bw_64B_${2}qp_mmsgs" "$(awk '{print $5 + 0}' <<<"$r")"
  else put "$name" "ib_write_bw_${1}B_${2}qp_gbps" "$(awk '{printf "%.2f", $4 * 8 / 1000}' <<<"$r")"; fi
}
threads() {  # q: a 64 B pair with thread_time.sh on both ends and DROCE_STATS (THREADS=1)
  local tt log r
  tt=$(mktemp /tmp/droce-fastpath-tt.XXXXXX)
  log=$(OUT=$tt DROCE_STATS=1 BUILD=$b LINK_SET=$set bash tools/verbs-pair.sh \
    "bash $PWD/tools/bench/verbs/thread_time.sh server $(awk -v d="$SERVER_DELAY" -v s="$secs" 'BEGIN {print d + 1.5, d + s + 1}') ib_write_bw -d droce0 -x 1 $port -s 64 -D $secs -q $1" \
    "bash $PWD/tools/bench/verbs/thread_time.sh client 1.5 $((secs + 1)) ib_write_bw -d droce1 -x 1 $port -s 64 -D $secs -q $1 127.0.0.1" |
    crashes "ib_write_bw -s 64 -q $1 (THREADS=1)")
  r=$(sed -n '/^--- client/,$p' <<<"$log" | row)
  put "$name" "ib_write_bw_64B_${1}qp_mmsgs" "$(awk '{print $5 + 0}' <<<"$r")"
  # Per thread and second of its window: CPU, runqueue wait, sleeps (voluntary switches), preemptions.
  while IFS=, read -r _ end comm _ w cpu runq _ vol invol; do
    case $comm in eal-intr-thread | rte_mp_handle) continue ;; esac
    put "$name" "bw64_${1}qp_${end}_${comm}_cpu_ms_per_s" "$(awk -v a="$cpu" -v w="$w" 'BEGIN {printf "%.1f", a / w}')"
    put "$name" "bw64_${1}qp_${end}_${comm}_runq_ms_per_s" "$(awk -v a="$runq" -v w="$w" 'BEGIN {printf "%.1f", a / w}')"
    put "$name" "bw64_${1}qp_${end}_${comm}_sleeps_per_s" "$(awk -v a="$vol" -v w="$w" 'BEGIN {printf "%.0f", a / w}')"
    put "$name" "bw64_${1}qp_${end}_${comm}_preempted_per_s" "$(awk -v a="$invol" -v w="$w" 'BEGIN {printf "%.0f", a / w}')"
  done <"$tt"
  rm -f "$tt"
  # The server's progress sleeps, and the client's AckReq solicits (each a stall of ack_solicit_ns or more).
  put "$name" "bw64_${1}qp_server_progress_sleeps" "$(sed -n '/^--- server/,/^--- client/p' <<<"$log" |
    grep -oE 'progress polls [0-9]+ sleeps [0-9]+' | head -1 | awk '{print $NF}')"
  put "$name" "bw64_${1}qp_client_ack_solicits" "$(sed -n '/^--- client/,$p' <<<"$log" |
    grep -oE 'solicited [0-9]+' | awk '{n += $2} END {print n + 0}')"
}
raw() {  # burst: raw_stream of 138 B frames over memif, the verbs runtime's memif path
  put "$name" "raw_stream_138B_burst${1}_mframes" "$(DROCE_TESTPMD=$b/apps/testpmd/droce-testpmd \
    CLIENT_ARGS="--duration $secs" bash tools/memif-pair.sh --fwd raw_stream --size 138 --burst "$1" --raw-ack \
    --memif-direct | sed -n 's/^client raw_stream:.* mmsgps=\([0-9.]*\).*/\1/p')"
}
bwfab() {  # q: 64 B over WIRE=fabric (droced; two programs on one host share direct rings)
  local r
  r=$(WIRE=fabric pair "$b" ib_write_bw "-s 64 -D $secs -q $1" | row)
  put "$name" "ib_write_bw_64B_${1}qp_fabric_mmsgs" "$(awk '{print $5 + 0}' <<<"$r")"
}
lat() {  # program metric-name
  local r
  r=$(pair "$b" "$1" "-s 2 -n 5000" | row)
  put "$name" "${1}_2B_typical_us" "$(awk '{print $5}' <<<"$r")"
  put "$name" "${1}_2B_p99_us" "$(awk '{print $8}' <<<"$r")"
}
pingpong() {
  local r
  r=$(BUILD=$b LINK_SET=$set bash tools/verbs-pair.sh "ibv_rc_pingpong -d droce0 -g 1 -s 64 -n 5000 $port" \
    "ibv_rc_pingpong -d droce1 -g 1 -s 64 -n 5000 $port 127.0.0.1" | crashes ibv_rc_pingpong | sed -n '/^--- client/,$p' |
    grep -oE '[0-9.]+ usec/iter' | head -1 | awk '{print $1}')
  put "$name" rc_pingpong_64B_us_per_iter "$r"
}
want() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }
want engine && each engine
if [[ ",${ONLY:-}," == *",raw,"* ]]; then for k in ${RAW_BURSTS:-1 8 32}; do each raw "$k"; done; fi
if want bw; then
  if [ "${THREADS:-0}" = 1 ]; then
    for ((k = 1; k <= ${BW_ROUNDS:-2}; ++k)); do each threads 1; each threads 8; done
  else
    for ((k = 1; k <= ${BW_ROUNDS:-2}; ++k)); do each bw 64 1; each bw 64 8; done
  fi
fi
if [[ ",${ONLY:-}," == *",bwfab,"* ]]; then
  for ((k = 1; k <= ${BW_ROUNDS:-2}; ++k)); do each bwfab 1; each bwfab 8; done
fi
want bw64k && each bw 65536 1
want send_lat && each lat ib_send_lat
want read_lat && each lat ib_read_lat
if want pingpong; then for ((k = 1; k <= ${PINGPONG_RUNS:-2}; ++k)); do each pingpong; done; fi
if want write_lat; then for ((k = 1; k <= lat_runs; ++k)); do each lat ib_write_lat; done; fi
# The wire's bound against the verbs path, per tree: median 1-QP 64 B ib_write_bw over raw_stream's rate.
for name in "${names[@]}"; do
  bw1=$(median "${got[$name,ib_write_bw_64B_1qp_mmsgs]:-}")
  for k in ${RAW_BURSTS:-1 8 32}; do
    r=$(median "${got[$name,raw_stream_138B_burst${k}_mframes]:-}")
    [ -n "$bw1" ] && [ -n "$r" ] && echo "$name,ratio_bw64_1qp_vs_raw_burst${k},$(awk -v a="$bw1" -v b="$r" 'BEGIN {printf "%.3f", a / b}'),$(cut -d' ' -f1 /proc/loadavg)"
  done
done
