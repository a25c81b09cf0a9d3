#!/usr/bin/env bash
# The communication stacks on droce against perftest on the same devices and
# against the same stacks over kernel TCP (loopback), in one run (issue 33):
#   UCT am_lat (rc_verbs)        vs ib_send_lat -s 8        (one-way latency, typical)
#   UCT put_bw 64 KiB (zcopy)    vs ib_write_bw -s 65536    (messages per second; both with
#                                128 WRITEs in flight: put_bw -O 128, ib_write_bw's tx depth.
#                                put_bw's own default is one, stop-and-wait: put_bw.sh)
#   UCP tag_lat 8 B, tag_bw 8 B and 1 MiB: UCX_TLS=rc_verbs,ud_verbs,self vs UCX_TLS=tcp,self
#   NetPIPE (NPopenmpi, 1 B .. 4 MiB): Open MPI over pml ucx on droce vs pml ob1 + btl tcp
# Server on droce0, client on droce1 (fabric devices of a private run
# directory); TCP over the loopback interface. ROUNDS rounds (default 3),
# every measurement in each round; results.csv rows:
#   round,test,stack,bytes,value,unit
# then plot.py draws NetPIPE's curves and prints the table for results.md.
#   bash tools/bench/stacks/run.sh [OUT.csv]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need ucx_perftest mpirun NPopenmpi ib_send_lat ib_write_bw
out=${1:-$here/results.csv}
rounds=${ROUNDS:-3}
stacks_host droce-bench-stacks 2
work=$run/bench
mkdir -p "$work"
echo "round,test,stack,bytes,value,unit" >"$out"
row() { echo "$@" | tr ' ' ',' >>"$out"; }

# pair PORT 'SERVER CMD' 'CLIENT CMD (the server address appended)': the client's output.
pair() {
  bash -c "$2" >"$work/server.log" 2>&1 &
  local server=$!
  wait_listen $server "$1"
  bash -c "$3 127.0.0.1" >"$work/client.log" 2>&1
  wait $server
  cat "$work/client.log"
}
ucx_final() { awk '/^Final:/ {print $'"$1"'}'; }  # a column of ucx_perftest's final line

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r of $rounds ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))"
  p=$((port + 1))
  v=$(pair $p "ib_send_lat -d droce0 -x 1 -s 8 -n 5000 -p $p" "ib_send_lat -d droce1 -x 1 -s 8 -n 5000 -p $p" |
      awk '$1 == 8 && NF >= 5 {print $5}')
  row $r send_lat perftest 8 "$v" us; echo "ib_send_lat 8 B typical $v us"
  p=$((port + 2))
  v=$(pair $p "ib_write_bw -d droce0 -x 1 -s 65536 -n 5000 -p $p" "ib_write_bw -d droce1 -x 1 -s 65536 -n 5000 -p $p" |
      awk '$1 == 65536 && NF >= 5 {print $5 * 1e6}')
  row $r write_bw perftest 65536 "$v" msg/s; echo "ib_write_bw 64 KiB $v msg/s"
  p=$((port + 3))
  v=$(pair $p "ucx_perftest -d droce0:1 -x rc_verbs -t am_lat -n 20000 -p $p" \
      "ucx_perftest -d droce1:1 -x rc_verbs -t am_lat -n 20000 -p $p" | ucx_final 3)
  row $r am_lat uct_rc_verbs 8 "$v" us; echo "UCT am_lat typical $v us"
  p=$((port + 4))
  v=$(pair $p "ucx_perftest -d droce0:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O 128 -n 5000 -p $p" \
      "ucx_perftest -d droce1:1 -x rc_verbs -t put_bw -D zcopy -s 65536 -O 128 -n 5000 -p $p" | ucx_final 9)
  row $r put_bw uct_rc_verbs 65536 "$v" msg/s; echo "UCT put_bw 64 KiB $v msg/s"
  for stack in droce tcp; do
    if [ $stack = droce ]; then
      senv="UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce0:1" cenv="UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce1:1"
    else
      senv="UCX_TLS=tcp,self UCX_NET_DEVICES=lo" cenv=$senv
    fi
    p=$((port + 5))
    v=$(pair $p "env $senv ucx_perftest -t tag_lat -n 20000 -p $p" "env $cenv ucx_perftest -t tag_lat -n 20000 -p $p" | ucx_final 3)
    row $r tag_lat ucp_$stack 8 "$v" us; echo "UCP tag_lat $stack typical $v us"
    p=$((port + 6))
    v=$(pair $p "env $senv ucx_perftest -t tag_bw -s 8 -n 200000 -p $p" "env $cenv ucx_perftest -t tag_bw -s 8 -n 200000 -p $p" |
        ucx_final 9)
    row $r tag_bw ucp_$stack 8 "$v" msg/s; echo "UCP tag_bw 8 B $stack $v msg/s"
    p=$((port + 7))
    v=$(pair $p "env $senv ucx_perftest -t tag_bw -s 1048576 -n 500 -w 50 -p $p" \
        "env $cenv ucx_perftest -t tag_bw -s 1048576 -n 500 -w 50 -p $p" | ucx_final 7)
    row $r tag_bw ucp_$stack 1048576 "$v" MB/s; echo "UCP tag_bw 1 MiB $stack $v MB/s"
  done
  # NetPIPE: two ranks; droce (pml ucx, no shared memory) and kernel TCP.
  for stack in droce tcp; do
    rm -f "$work/np.out"
    if [ $stack = droce ]; then
      (cd "$work" && OMPI_MCA_pml=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self timeout 600 \
        mpirun --allow-run-as-root --oversubscribe -np 1 -x UCX_NET_DEVICES=droce0:1 NPopenmpi -p 0 -u 4194304 -o np.out \
        : -np 1 -x UCX_NET_DEVICES=droce1:1 NPopenmpi -p 0 -u 4194304 -o np.out >np.log 2>&1)
    else
      (cd "$work" && OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=lo timeout 600 \
        mpirun --allow-run-as-root --oversubscribe -np 2 NPopenmpi -p 0 -u 4194304 -o np.out >np.log 2>&1)
    fi
    # np.out: bytes, Mbps, seconds (one way)
    awk -v r=$r -v s=mpi_$stack '{printf "%s,netpipe_lat,%s,%s,%.3f,us\n%s,netpipe_bw,%s,%s,%.1f,Mbps\n", r, s, $1, $3 * 1e6, r, s, $1, $2}' \
      "$work/np.out" >>"$out"
    echo "NetPIPE $stack: $(wc -l <"$work/np.out") sizes"
  done
done
/usr/bin/python3 "$here/plot.py" "$out"  # Debian's, with python3-matplotlib
