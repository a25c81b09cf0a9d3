#!/usr/bin/env bash
# Small-message latency probes on two fresh fabric devices (server droce0,
# client droce1), one line per case: CASE LOAD VALUES.
#   bash tools/bench/stacks/lat_probe.sh [KEY=VALUE...]   (device file settings)
# CASES (default "ibsend tag tagpin am"):
#   ibsend  ib_send_lat -s S: t_min, t_typical, t_avg (us)
#   tag     UCP tag_lat (UCX_TLS=rc_verbs,ud_verbs,self): typical, average, overall (us, one way)
#   tagpin  the same, server pinned to CPU 0 and client to CPU 1 (as mpirun binds two ranks)
#   am      UCT am_lat on rc_verbs
#   np      NetPIPE over pml ucx up to NP_UPPER (default 4096): bytes:usec one way (mean)
#   tcp     NetPIPE over pml ob1 + btl tcp on loopback
# S (default 8), N (iterations, default 20000); BUILD=DIR runs another build tree's droce;
# STATS=1 prints each program's DROCE_STATS progress-thread line after its case.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need ib_send_lat ucx_perftest mpirun NPopenmpi
stacks_host droce-bench-latprobe 2 "$@"
cd "$run"
st=""; [ "${STATS:-0}" = 1 ] && st="DROCE_STATS=1"
pair() {  # PORT 'SERVER CMD' 'CLIENT CMD': the client's output, then the server's
  bash -c "$2" >server.log 2>&1 &
  local server=$!
  wait_listen $server "$1"
  bash -c "$3 127.0.0.1" 2>&1
  wait $server
  cat server.log
}
progress() { grep -E "progress polls" | grep -v "rx 0 pkts" | sed 's/.*progress polls/  progress polls/; s/, pm_qos.*//'; }
u="env UCX_TLS=rc_verbs,ud_verbs,self $st"
N=${N:-20000}
S=${S:-8}
p=$port
for c in ${CASES:-ibsend tag tagpin am}; do
  p=$((p + 1))
  case $c in
  ibsend) out=$(pair $p "$st ib_send_lat -d droce0 -x 1 -s $S -n 5000 -p $p" "$st ib_send_lat -d droce1 -x 1 -s $S -n 5000 -p $p")
    v=$(awk '$1 == '"$S"' && NF >= 6 {print $3, $5, $6}' <<<"$out") ;;
  tag|tagpin) a=""; b=""; [ $c = tagpin ] && a="taskset -c 0" b="taskset -c 1"
    out=$(pair $p "$u UCX_NET_DEVICES=droce0:1 $a ucx_perftest -t tag_lat -s $S -n $N -p $p" \
      "$u UCX_NET_DEVICES=droce1:1 $b ucx_perftest -t tag_lat -s $S -n $N -p $p")
    v=$(awk '/^Final:/ {print $3, $4, $5}' <<<"$out") ;;
  am) out=$(pair $p "$st ucx_perftest -d droce0:1 -x rc_verbs -t am_lat -s $S -n $N -p $p" \
      "$st ucx_perftest -d droce1:1 -x rc_verbs -t am_lat -s $S -n $N -p $p")
    v=$(awk '/^Final:/ {print $3, $4, $5}' <<<"$out") ;;
  np) env OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self $st timeout 600 \
      mpirun --allow-run-as-root --oversubscribe -np 1 -x UCX_NET_DEVICES=droce0:1 NPopenmpi -p 0 -u "${NP_UPPER:-4096}" -o np.out \
      : -np 1 -x UCX_NET_DEVICES=droce1:1 NPopenmpi -p 0 -u "${NP_UPPER:-4096}" -o np.out >np.log 2>&1
    out=$(cat np.log); v=$(awk '{printf "%s:%.2f ", $1, $3 * 1e6}' np.out) ;;
  tcp) OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo timeout 600 \
      mpirun --allow-run-as-root --oversubscribe -np 2 NPopenmpi -p 0 -u "${NP_UPPER:-4096}" -o np.out >np.log 2>&1
    out=""; v=$(awk '{printf "%s:%.2f ", $1, $3 * 1e6}' np.out) ;;
  *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  echo "$c $(cut -d' ' -f1 /proc/loadavg) $v"
  [ -n "$st" ] && progress <<<"$out"
done
exit 0
