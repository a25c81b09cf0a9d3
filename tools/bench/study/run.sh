#!/usr/bin/env bash
# The RDMA programming-decision study (MacArthur & Russell) as far as
# unmodified perftest can express it, on any verbs device, plus kernel TCP in
# the same run. Writes results.csv (one row per point) next to this script,
# then report.py turns it into results.md.
#
# Here (droce): two devices joined by memif via tools/verbs-pair.sh:
#   bash tools/bench/study/run.sh
# On a host with an RNIC and a peer host: run each point's server side on
# the peer and set
#   STUDY_PAIR="ssh peer" STUDY_DEV=mlx5_0 STUDY_PEER_DEV=mlx5_0 STUDY_GID=3 STUDY_HOST=peer-ip
# (see doc/bench-study.md for the exact commands).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=tools/bench/study/results.csv
dev=${STUDY_DEV:-droce1} peer_dev=${STUDY_PEER_DEV:-droce0} gid=${STUDY_GID:-1} host=${STUDY_HOST:-127.0.0.1}
iters=${STUDY_ITERS:-3000} secs=${STUDY_SECS:-1}
export SERVER_DELAY=${SERVER_DELAY:-1.5} PAIR_TIMEOUT=${PAIR_TIMEOUT:-120}
if [ -z "${STUDY_PAIR:-}" ]; then
  [ -f build/build.ninja ] || meson setup build >/dev/null
  ninja -C build >/dev/null
fi
# Runs server and client of one perftest point; prints the client's result row
# and both sides' CPU seconds (bash's time: user+sys of the whole process).
point() {  # prog args
  local prog=$1; shift
  local tf="TIMEFORMAT='cpu=%U+%S'"
  local srv="$tf; time $prog -d $peer_dev -x $gid $*" cli="$tf; time $prog -d $dev -x $gid $* $host"
  local o
  if [ -n "${STUDY_PAIR:-}" ]; then
    $STUDY_PAIR "bash -c \"$srv\"" >/tmp/study_srv.$$ 2>&1 &
    sleep 2; o=$(bash -c "$cli" 2>&1); wait; o+=$'\n--- server\n'$(cat /tmp/study_srv.$$)
  else
    o=$(bash tools/verbs-pair.sh "$srv" "$cli" 2>&1)
    # perftest gives up when it cannot time the CPU clock on a noisy machine: once more.
    grep -q "Can't produce a report" <<<"$o" && o=$(bash tools/verbs-pair.sh "$srv" "$cli" 2>&1)
  fi
  local row; row=$(sed -n '/^--- client/,$p' <<<"$o" | grep -E '^ *[0-9]+ +[0-9]+ ' | head -1 | tr -s ' ')
  local cpu_s cpu_c
  cpu_s=$(sed -n '/^--- server/,/^--- client/p' <<<"$o" | grep -oE 'cpu=[0-9.]+\+[0-9.]+' | head -1 | cut -d= -f2 | awk -F+ '{print $1 + $2}')
  cpu_c=$(sed -n '/^--- client/,$p' <<<"$o" | grep -oE 'cpu=[0-9.]+\+[0-9.]+' | head -1 | cut -d= -f2 | awk -F+ '{print $1 + $2}')
  echo "${row:-failed}|${cpu_s:-}|${cpu_c:-}"
}
lat() {  # finding variant prog size extra...  -> typical one-way latency (us)
  local finding=$1 variant=$2 prog=$3 size=$4; shift 4
  local r; r=$(point "$prog" -s "$size" -n "$iters" "$@")
  local v; v=$(cut -d'|' -f1 <<<"$r" | awk '{print $5}')
  echo "$finding,$variant,$prog,$size,lat_us,${v:-failed},$(cut -d'|' -f2 <<<"$r"),$(cut -d'|' -f3 <<<"$r")" | tee -a "$out"
}
bw() {  # finding variant prog size extra...  -> Gb/s and Mmsg/s
  local finding=$1 variant=$2 prog=$3 size=$4; shift 4
  local r; r=$(point "$prog" -s "$size" -D "$secs" "$@")
  local f; f=$(cut -d'|' -f1 <<<"$r")
  local g; g=$(awk '{if ($4 != "") printf "%.3f", $4 * 8 / 1000}' <<<"$f")
  echo "$finding,$variant,$prog,$size,gbps,${g:-failed},$(cut -d'|' -f2 <<<"$r"),$(cut -d'|' -f3 <<<"$r")" | tee -a "$out"
  echo "$finding,$variant,$prog,$size,mmsgps,$(awk '{print $5}' <<<"$f"),," >>"$out"
}

echo "finding,variant,program,bytes,metric,value,server_cpu_s,client_cpu_s" >"$out"
# 1. Busy polling vs event notification, ping (SEND/RECV), by size.
for s in 2 64 1024 4096 16384 65536; do
  lat 1 poll ib_send_lat $s
  lat 1 event ib_send_lat $s -e
done
# 2. Inline vs not, below and above the cache-line size.
for s in 8 32 64 128 256; do
  lat 2 no_inline ib_send_lat $s -I 0
  lat 2 inline ib_send_lat $s -I 256
done
# 3. Outstanding buffers (perftest's tx depth), WRITE blast.
for t in 1 2 4 8 16 32 64 128; do bw 3 "outstanding_$t" ib_write_bw 4096 -t $t; done
# 4. One WR per post vs WR lists.
for l in 1 4 16; do bw 4 "post_list_$l" ib_write_bw 64 -l $l; done
# 6. Opcodes, small and large (blast), and one ping per opcode perftest has.
for p in ib_send_bw ib_write_bw ib_read_bw; do
  bw 6 opcode "$p" 64
  bw 6 opcode "$p" 1048576
done
for p in ib_send_lat ib_write_lat ib_read_lat; do lat 6 opcode "$p" 2; done
# Signalling and MTU (study's other knobs).
bw signal "every_1" ib_write_bw 64 -Q 1
bw signal "every_16" ib_write_bw 64 -Q 16
bw mtu "mtu_1024" ib_write_bw 65536 -m 1024
bw mtu "mtu_4096" ib_write_bw 65536 -m 4096
# Kernel TCP, same run.
qperf >/dev/null 2>&1 & qs=$!
sleep 0.5
tcp=$(qperf 127.0.0.1 -t 2 -uu tcp_lat tcp_bw 2>/dev/null)
tcp64=$(qperf 127.0.0.1 -t 2 -uu -m 64 tcp_bw 2>/dev/null)
kill $qs 2>/dev/null
echo "tcp,tcp_lat,qperf,1,lat_us,$(grep -A1 '^tcp_lat' <<<"$tcp" | awk '$1 == "latency" {printf "%.2f", $3 / 1000}'),," | tee -a "$out"
echo "tcp,tcp_bw,qperf,65536,gbps,$(grep -A1 '^tcp_bw' <<<"$tcp" | awk '$1 == "bw" {printf "%.3f", $3 * 8 / 1e9}'),," | tee -a "$out"
echo "tcp,tcp_bw,qperf,64,mmsgps,$(grep -A1 '^tcp_bw' <<<"$tcp64" | awk '$1 == "bw" {printf "%.4f", $3 / 64 / 1e6}'),," | tee -a "$out"
python3 tools/bench/study/report.py
