#!/usr/bin/env bash
# The RDMA programming-decision study (MacArthur & Russell, "A Performance
# Study to Guide RDMA Programming Decisions") on any verbs device: unmodified
# perftest where it can express a case, droce-study (apps/study) where it
# cannot, and kernel TCP (qperf) in the same run.  Writes OUT/results.csv (one
# row per point), then report.py turns it into OUT/results.md and OUT/plots/*.png.
#
# Here, droce0 (server) and droce1 (client) joined by memif, registered by
# tools/verbs-pair.sh for every pair of processes:
#   bash tools/bench/study/run.sh
# Two devices on one host (two rxe devices, two ports of one RNIC cabled back
# to back):
#   bash tools/bench/study/run.sh --pair local --server-dev rxe0 --client-dev rxe1 --gid 1
# A real RNIC with a peer host (server side over ssh, same paths there):
#   bash tools/bench/study/run.sh --pair ssh:peer --host 192.168.1.2 \
#       --server-dev mlx5_0 --client-dev mlx5_0 --gid 3
# Options (environment in brackets):
#   --out DIR          results directory (STUDY_OUT, default tools/bench/study)
#   --pair MODE        droce | local | ssh:HOST (STUDY_PAIR, default droce)
#   --server-dev DEV   (STUDY_SERVER_DEV, default droce0)
#   --client-dev DEV   (STUDY_CLIENT_DEV, default droce1)
#   --gid N            RoCE v2 GID index, both sides (STUDY_GID, default 1)
#   --server-gid N     server's, if it differs (STUDY_SERVER_GID)
#   --host ADDR        the server's address for the side channels (STUDY_HOST,
#                      default 127.0.0.1; with ssh:HOST, HOST)
#   --tool P           droce-study binary (STUDY_TOOL; default BUILD/apps/study/
#                      droce-study, built with ninja first; on a host without
#                      droce's build: cc -O2 -o droce-study apps/study/droce-study.c -libverbs)
#   --remote-tool P    droce-study's path on the ssh peer (STUDY_REMOTE_TOOL,
#                      default the local path)
#   --inline N         largest inline size tried (STUDY_INLINE, default 256;
#                      must not exceed the device's max_inline_data)
#   --reps N           repetitions of the latency comparisons (STUDY_REPS, 3)
#   --blast-reps N     repetitions of the droce-study blast sweeps (STUDY_BLAST_REPS, 3)
#   --quick            a few points per group only (smoke test)
#   --only G1,G2       run only these groups (poll_event inline outstanding
#                      lists wr_ping opcodes large signal mtu tcp)
#   --no-report        do not run report.py
# A failed point is recorded with status=failed and the run goes on; its log
# is kept in OUT/logs/.
set -uo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${STUDY_OUT:-$root/tools/bench/study}
pair=${STUDY_PAIR:-droce}
sdev=${STUDY_SERVER_DEV:-droce0} cdev=${STUDY_CLIENT_DEV:-droce1}
gid=${STUDY_GID:-1} sgid=${STUDY_SERVER_GID:-}
host=${STUDY_HOST:-}
inline_max=${STUDY_INLINE:-256}
reps=${STUDY_REPS:-3} breps=${STUDY_BLAST_REPS:-3}
quick=0 only="" report=1
remote_tool=${STUDY_REMOTE_TOOL:-} tool=${STUDY_TOOL:-}
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift ;;
    --pair) pair=$2; shift ;;
    --server-dev) sdev=$2; shift ;;
    --client-dev) cdev=$2; shift ;;
    --gid) gid=$2; shift ;;
    --server-gid) sgid=$2; shift ;;
    --host) host=$2; shift ;;
    --tool) tool=$2; shift ;;
    --remote-tool) remote_tool=$2; shift ;;
    --inline) inline_max=$2; shift ;;
    --reps) reps=$2; shift ;;
    --blast-reps) breps=$2; shift ;;
    --quick) quick=1 ;;
    --only) only=$2; shift ;;
    --no-report) report=0 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
sgid=${sgid:-$gid}
case $pair in
  droce|local) host=${host:-127.0.0.1} ;;
  ssh:*) ssh_host=${pair#ssh:}; host=${host:-$ssh_host} ;;
  *) echo "--pair droce|local|ssh:HOST" >&2; exit 2 ;;
esac
[ "$quick" = 1 ] && reps=1 breps=1
build=${BUILD:-$root/build}
# The pairs run from another directory: a relative BUILD is taken from where this was started.
case $build in /*) ;; *) build=$PWD/$build ;; esac
if [ -z "$tool" ]; then
  tool=$build/apps/study/droce-study
  [ -f "$build/build.ninja" ] || meson setup "$build" >/dev/null
  ninja -C "$build" >/dev/null || { echo "build failed" >&2; exit 2; }
fi
[ -x "$tool" ] || { echo "no $tool (needs libibverbs-dev at build time)" >&2; exit 2; }
remote_tool=${remote_tool:-$tool}
# Ports of our own: another perftest on this machine keeps its 18515.
pt_port=${STUDY_PERFTEST_PORT:-19515} ds_port=${STUDY_TOOL_PORT:-19600} qp_port=${STUDY_QPERF_PORT:-19544}
timebin=/usr/bin/time
[ -x $timebin ] || timebin=""   # Debian package `time`; without it bash's time keyword is used

mkdir -p "$out/logs"
csv=$out/results.csv
cols="group,tool,program,mode,op,bytes,iters,outstanding,list,signal,inline,events,mtu,unsig"
cols+=",lat_min_us,lat_typ_us,lat_avg_us,lat_p99_us,gbps,mmsgps"
cols+=",server_user_s,server_sys_s,client_user_s,client_sys_s,server_cpu_pct,client_cpu_pct,cpu_scope,rep,load1,status,args"
echo "$cols" >"$csv"
rm -f "$out"/logs/*.log
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

# ---------------------------------------------------------------- running pairs
# Runs SERVER_CMD and CLIENT_CMD as a pair; both outputs go to $log as
# "--- server (rc): cmd" / "--- client (rc): cmd" sections.
run_pair() {  # delay server_cmd client_cmd
  local delay=$1 s=$2 c=$3
  case $pair in
    droce)
      SERVER_DELAY=$delay PAIR_TIMEOUT=${PAIR_TIMEOUT:-120} bash "$root/tools/verbs-pair.sh" "$s" "$c" >"$log" 2>&1 ;;
    *)
      if [ "$pair" = local ]; then timeout 120 bash -c "$s" >"$log.s" 2>&1 &
      else timeout 120 ssh -o BatchMode=yes "$ssh_host" "$s" >"$log.s" 2>&1 &
      fi
      local sp=$!
      sleep "$delay"
      timeout 120 bash -c "$c" >"$log.c" 2>&1; local crc=$?
      wait $sp; local src=$?
      { echo "--- server ($src): $s"; cat "$log.s"; echo "--- client ($crc): $c"; cat "$log.c"; } >"$log"
      rm -f "$log.s" "$log.c"
      [ $crc -eq 0 ] && [ $src -eq 0 ] ;;
  esac
}
section() { sed -n "/^--- $1 (/,/^--- $2 (/p" "$log"; }   # server: section server client

# Wraps a perftest command with a CPU-time report of the whole process.
timed() {
  if [ -n "$timebin" ]; then echo "$timebin -f rusage:%U:%S:%e $*"
  else echo "TIMEFORMAT=rusage:%U:%S:%R; time $*"; fi
}
# "user sys wall" of the side's process, from the rusage line.
rusage_of() { grep -oE 'rusage:[0-9.]+:[0-9.]+:[0-9.]+' | tail -1 | cut -d: -f2- | tr : ' '; }

npoint=0 t_start=$(date +%s)
load1() { cut -d' ' -f1 /proc/loadavg; }   # the machine's load when a point ended (noise marker)
progress() {
  local el=$(( $(date +%s) - t_start ))
  printf '[%3d %02d:%02d] %s\n' "$npoint" $((el / 60)) $((el % 60)) "$*"
}

# perftest point: group program rep size extra-args...
# Latency programs report the typical (median) one-way time (ib_read_lat: the
# READ's full round trip, as perftest prints it); bw programs Gb/s and Mpps.
pt() {
  local group=$1 prog=$2 rep=$3 size=$4; shift 4
  local args="$*" kind=bw
  [[ $prog == *_lat ]] && kind=lat
  npoint=$((npoint + 1))
  log=$out/logs/$(printf %03d $npoint)-$prog.log
  local common="-d DEV -x GID -p $pt_port -F -s $size $args"
  if [ $kind = lat ]; then common+=" -n ${STUDY_LAT_ITERS:-2000}"
  elif [[ " $args " == *" -e "* ]]; then common+=" -n ${STUDY_EVENT_ITERS:-20000} --report_gbits"   # -D does not work with -e
  else common+=" -D ${STUDY_SECS:-1} --report_gbits"; fi
  local scmd cmd
  scmd=$(timed "$prog ${common/DEV/$sdev}"); scmd=${scmd/GID/$sgid}
  cmd=$(timed "$prog ${common/DEV/$cdev} $host"); cmd=${cmd/GID/$gid}
  local tries=0 rc
  while :; do
    run_pair 1 "$scmd" "$cmd"; rc=$?
    tries=$((tries + 1))
    # perftest gives up when it cannot time the CPU clock on a noisy machine: once more.
    if [ $tries -lt 2 ] && { [ $rc -ne 0 ] || grep -q "Can't produce a report" "$log"; }; then continue; fi
    break
  done
  local row su cu
  # (droce's own stderr lines may be glued to perftest's row: keep its numbers only)
  row=$(section client '~~' | grep -E '^ *[0-9]+ +[0-9]+ +[0-9.]+' | head -1 |
        awk '{ o = ""; for (i = 1; i <= NF; i++) { if ($i !~ /^[0-9.]+$/) { sub(/[^0-9.].*$/, "", $i); if ($i != "") o = o " " $i; break } o = o " " $i } print substr(o, 2) }')
  su=$(section server client | rusage_of) cu=$(section client '~~' | rusage_of)
  # The knobs as perftest reports them in its header (defaults differ per device).
  local hdr inl=0 ev=0 t l q m mi lat="" bw=""
  hdr=$(section client '~~')
  [[ " $args " == *" -e "* ]] && ev=1
  field() { grep -m1 -E "^ *$1 *:" <<<"$hdr" | sed -E 's/.*: *([0-9]+).*/\1/'; }
  t=$(field 'TX depth'); l=$(field 'Post List'); q=$(field 'CQ Moderation'); m=$(field 'Mtu'); mi=$(field 'Max inline data')
  [ $kind = lat ] && t=1
  l=${l:-1}
  [ -n "$mi" ] && [ "$mi" -ge "$size" ] && inl=1
  local status=ok
  [ -z "$row" ] && status=failed
  local op
  case $prog in ib_send*) op=send ;; ib_write*) op=write ;; ib_read*) op=read ;; *) op=atomic ;; esac
  if [ $kind = lat ]; then
    # bytes iters min max typical avg stdev p99 p99.9
    lat=$(awk '{print $3","$5","$6","$8",,"}' <<<"$row")
    [ -z "$row" ] && lat=",,,,,"
  else
    # bytes iters peak avg(Gb/s) Mpps
    bw=$(awk '{print ",,,,"$4","$5}' <<<"$row")
    [ -z "$row" ] && bw=",,,,,"
  fi
  local cpu
  cpu=$(awk -v s="$su" -v c="$cu" 'BEGIN {
      split(s, a, " "); split(c, b, " ")
      sp = a[3] > 0 ? (a[1] + a[2]) / a[3] * 100 : ""; cp = b[3] > 0 ? (b[1] + b[2]) / b[3] * 100 : ""
      printf "%s,%s,%s,%s,%s,%s", a[1], a[2], b[1], b[2], sp == "" ? "" : sprintf("%.1f", sp), cp == "" ? "" : sprintf("%.1f", cp) }')
  echo "$group,perftest,$prog,$( [ $kind = lat ] && echo ping || echo blast ),$op,$size,,$t,$l,$q,$inl,$ev,$m,0,${lat}${bw},$cpu,process,$rep,$(load1),$status,$(tr ',' ';' <<<"$args")" >>"$csv"
  [ $status = ok ] && rm -f "$log"
  progress "$group $prog -s $size $args: ${row:-FAILED (log kept: $log)}"
}

# droce-study point(s): group rep args...  (one line per combination)
ds() {
  local group=$1 rep=$2; shift 2
  local args="$*"
  npoint=$((npoint + 1))
  log=$out/logs/$(printf %03d $npoint)-droce-study.log
  local scmd="$remote_tool -d $sdev -x $sgid -p $ds_port"
  local cmd="$tool -d $cdev -x $gid -p $ds_port $args $host"
  run_pair 0.2 "$scmd" "$cmd"
  local rc=$? lines
  lines=$(section client '~~' | grep -E '^(ping|blast),')
  # droce-study: mode,op,bytes,iters,outstanding,list,signal,inline,events,mtu,unsig,
  #   lat_min,lat_typ,lat_avg,lat_p99,gbps,mmsgps,wall,cu,cs,su,ss,cpct,spct
  [ -n "$lines" ] && awk -F, -v OFS=, -v g="$group" -v r="$rep" -v ld="$(load1)" -v a="$(tr ',' ';' <<<"$args")" \
    '{print g,"droce-study","droce-study",$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$21,$22,$19,$20,$24,$23,"measured",r,ld,"ok",a}' \
    <<<"$lines" >>"$csv"
  if [ $rc -ne 0 ]; then
    # Whatever did not print is recorded as failed, with its arguments.
    echo "$group,droce-study,droce-study,,,,,,,,,,,,,,,,,,,,,,,,measured,$rep,$(load1),failed,$(tr ',' ';' <<<"$args")" >>"$csv"
  fi
  [ $rc -eq 0 ] && rm -f "$log"
  local summary
  summary=$(awk -F, '{ if ($1 == "ping") printf " %s:%sus", $3, $13; else printf " %s/t%s/l%s/c%s:%sGb/s", $3, $5, $6, $7, $16 }' <<<"$lines")
  progress "$group droce-study $args:${summary}$( [ $rc -ne 0 ] && echo " FAILED (log kept: $log)")"
}

# ---------------------------------------------------------------------- matrix
SECS=${STUDY_SECS:-1} BSECS=${STUDY_BLAST_SECS:-0.5}
all_sizes=1,4,16,64,256,1K,4K,16K,64K,256K,1M
small_sizes=1,2,4,8,16,32,64,128,256
pt_ping_sizes="2 64 4096 65536"
pt_bw_sizes="2 64 4096 65536 1048576"
outs=1,2,4,8,16,32,64,128
if [ "$quick" = 1 ]; then
  all_sizes=1,4K,64K; small_sizes=8,256; pt_ping_sizes="2"; pt_bw_sizes="64 65536"; outs=1,8,64
fi
inl_sizes=$(tr ',' '\n' <<<"$small_sizes" | awk -v m="$inline_max" '$1 <= m' | paste -sd,)
echo "study: pair=$pair server=$sdev client=$cdev gid=$gid/$sgid host=$host out=$out reps=$reps"
# What report.py says about the setup.
{
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "pair=$pair"; echo "server_dev=$sdev"; echo "client_dev=$cdev"; echo "gid=$gid"; echo "server_gid=$sgid"
  echo "host=$host"; echo "reps=$reps"; echo "blast_reps=$breps"; echo "inline_max=$inline_max"; echo "quick=$quick"
  echo "cpus=$(nproc)"; echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "kernel=$(uname -r)"
  echo "perftest=$(dpkg-query -W -f '${Version}' perftest 2>/dev/null)"
  echo "commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
} >"$out/run-info.txt"

# 1. Busy polling vs event notification: ping (SEND/RECV, WRITE_WITH_IMM/RECV)
#    and blast, by size; perftest's ib_send_lat/ib_send_bw with and without -e.
if want poll_event; then
  for r in $(seq 1 "$reps"); do
    for op in send imm; do
      ds poll_event "$r" -M ping -o $op -s $all_sizes -n 1000 -T 2
      ds poll_event "$r" -M ping -o $op -s $all_sizes -n 1000 -T 2 -e
    done
  done
  for r in $(seq 1 "$breps"); do
    for op in send imm write; do
      ds poll_event "$r" -M blast -o $op -s $all_sizes -t 16 -D "$BSECS"
      ds poll_event "$r" -M blast -o $op -s $all_sizes -t 16 -D "$BSECS" -e
    done
  done
  for s in $pt_ping_sizes; do pt poll_event ib_send_lat 1 "$s"; pt poll_event ib_send_lat 1 "$s" -e; done
  for s in 64 65536; do pt poll_event ib_send_bw 1 "$s"; pt poll_event ib_send_bw 1 "$s" -e; done
fi
# 2. Inline vs not, around the cache-line size (64 B).
if want inline; then
  for r in $(seq 1 "$reps"); do
    for op in send imm; do
      ds inline "$r" -M ping -o $op -s "$inl_sizes" -n 2000 -T 1 -I 0
      ds inline "$r" -M ping -o $op -s "$inl_sizes" -n 2000 -T 1 -I "$inline_max"
    done
  done
  for s in 8 32 128; do
    [ "$s" -le "$inline_max" ] || continue
    pt inline ib_send_lat 1 "$s" -I 0; pt inline ib_send_lat 1 "$s" -I "$inline_max"
  done
  for r in $(seq 1 "$breps"); do
    ds inline "$r" -M blast -o write -s 8,64,256 -t 16 -D "$BSECS" -I 0
    ds inline "$r" -M blast -o write -s 8,64,256 -t 16 -D "$BSECS" -I "$inline_max"
  done
fi
# 3. Outstanding buffers 1..128 (blast).
if want outstanding; then
  for r in $(seq 1 "$breps"); do
    for op in write imm send read; do ds outstanding "$r" -M blast -o $op -s 4K,64K -t $outs -D "$BSECS"; done
  done
  for t in ${outs//,/ }; do pt outstanding ib_write_bw 1 4096 -t "$t"; done
fi
# 4. One WR per post vs WR lists (ibv_post_send with a chain).
if want lists; then
  for r in $(seq 1 "$breps"); do
    for op in write imm send; do ds lists "$r" -M blast -o $op -s 64,4K -t 64 -l 1,2,4,8,16,32 -D "$BSECS"; done
  done
  for l in 1 4 16; do pt lists ib_write_bw 1 64 -t 128 -l "$l"; done
fi
# 5. Unsignaled WRITE followed by READ (ping) vs signaled WRITE, wait, READ;
#    perftest's memory-polling WRITE ping and READ ping beside them.
if want wr_ping; then
  for r in $(seq 1 "$reps"); do
    ds wr_ping "$r" -M ping -o wr -s 1,64,1K,4K,16K,64K -n 1000 -T 2
    ds wr_ping "$r" -M ping -o wr -s 1,64,1K,4K,16K,64K -n 1000 -T 2 -u
  done
  for s in 2 4096; do pt wr_ping ib_write_lat 1 "$s"; pt wr_ping ib_read_lat 1 "$s"; done
fi
# 6. Opcodes: blast SEND, WRITE, WRITE_WITH_IMM, READ by size; perftest's too.
if want opcodes; then
  for r in $(seq 1 "$breps"); do
    for op in send imm write read; do ds opcodes "$r" -M blast -o $op -s $all_sizes -t 16 -D "$BSECS"; done
  done
  for p in ib_send_bw ib_write_bw ib_read_bw; do for s in $pt_bw_sizes; do pt opcodes $p 1 "$s"; done; done
  for p in ib_send_lat ib_write_lat ib_read_lat; do pt opcodes $p 1 2; done
fi
# Large messages (blast, to 256 MiB), WRITE and READ.
if want large && [ "$quick" = 0 ]; then
  for op in write read; do ds large 1 -M blast -o $op -s 4M,16M,64M,256M -t 2 -D 1; done
fi
# Full vs periodic signaling (perftest -Q is CQ moderation: a completion every Q).
if want signal; then
  for r in $(seq 1 "$breps"); do
    for op in write send; do ds signal "$r" -M blast -o $op -s 64,4K -t 64 -c 1,2,4,8,16,32,64 -D "$BSECS"; done
  done
  for q in 1 16; do pt signal ib_write_bw 1 64 -t 128 -Q "$q"; done
fi
# MTU 1024 vs 4096.
if want mtu; then
  for r in $(seq 1 "$breps"); do
    for m in 1024 4096; do
      ds mtu "$r" -M blast -o write -s 1K,4K,64K,1M -t 16 -D "$BSECS" -m $m
      ds mtu "$r" -M ping -o send -s 1K,4K,64K,1M -n 1000 -T 2 -m $m
    done
  done
  for m in 1024 4096; do pt mtu ib_write_bw 1 65536 -m $m; done
fi
# Kernel TCP in the same run: qperf one-way latency and streaming bandwidth.
if want tcp; then
  qpre=()
  [ "$pair" != droce ] && [ "$pair" != local ] && qpre=(ssh -o BatchMode=yes "$ssh_host")
  if [ ${#qpre[@]} -gt 0 ]; then "${qpre[@]}" "timeout 300 qperf -lp $qp_port" >/dev/null 2>&1 &
  else qperf -lp $qp_port >/dev/null 2>&1 &
  fi
  qs=$!
  sleep 1
  tcp_point() {  # metric-kind size test
    local kind=$1 size=$2 test=$3 o v rate cl cr
    npoint=$((npoint + 1))
    o=$(qperf "$host" -lp $qp_port -t "$SECS" -uu -v -m "$size" "$test" 2>&1)
    cl=$(awk '$1 ~ /^(loc|send)_cpus_used$/ {print $3}' <<<"$o")
    cr=$(awk '$1 ~ /^(rem|recv)_cpus_used$/ {print $3}' <<<"$o")
    if [ "$kind" = lat ]; then
      v=$(awk '$1 == "latency" {printf "%.3f", $3 / 1000}' <<<"$o")
      echo "tcp,qperf,$test,ping,tcp,$size,,1,1,1,0,0,,0,,${v},,,,,,,,,${cr},${cl},system,1,$(load1),$([ -n "$v" ] && echo ok || echo failed),-m $size" >>"$csv"
    else
      v=$(awk '$1 == "bw" {printf "%.4f", $3 * 8 / 1e9}' <<<"$o")
      rate=$(awk '$1 == "msg_rate" {printf "%.5f", $3 / 1e6}' <<<"$o")
      echo "tcp,qperf,$test,blast,tcp,$size,,,1,1,0,0,,0,,,,,${v},${rate},,,,,${cr},${cl},system,1,$(load1),$([ -n "$v" ] && echo ok || echo failed),-m $size" >>"$csv"
    fi
    progress "tcp qperf $test -m $size: ${v:-FAILED} $( [ "$kind" = lat ] && echo us || echo Gb/s)"
  }
  for s in 2 64 4096 65536; do tcp_point lat $s tcp_lat; done
  for s in 64 4096 65536 1048576; do tcp_point bw $s tcp_bw; done
  kill $qs 2>/dev/null; wait $qs 2>/dev/null
fi

el=$(( $(date +%s) - t_start ))
failed=$(grep -c ',failed' "$csv")
echo "study: $npoint runs in $((el / 60))m$((el % 60))s; $failed failed rows; $csv"
echo "$el" >"$out/elapsed_s"
rmdir "$out/logs" 2>/dev/null   # only failed points' logs are kept
[ "$report" = 1 ] && /usr/bin/python3 "$root/tools/bench/study/report.py" --out "$out"
exit 0
