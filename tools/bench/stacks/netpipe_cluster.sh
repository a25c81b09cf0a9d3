#!/usr/bin/env bash
# NetPIPE between two hosts of a droce-cluster (network namespaces on a Linux
# bridge, veth interfaces, droce0 bound to each host's eth0; doc/netdev.md):
# Open MPI over pml ucx on droce against Open MPI over btl tcp on the same
# interfaces: kernel TCP through veth and a bridge, as between two hosts,
# where run.sh's TCP baseline is the loopback interface. Launched by mpirun on
# host 1 through the cluster's remote shell; the stacks alternate in each
# round. CSV rows as run.sh's (round,test,stack,bytes,value,unit), then
# plot.py's table and plot (NAME.png beside NAME.csv).
#   bash tools/bench/stacks/netpipe_cluster.sh [OUT.csv]       (root; ROUNDS, default 3;
#   STEERING=udp|xdp|af_packet, default auto; NETNS_PREFIX, default npbench)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../tests/stacks/lib.sh"
need mpirun NPopenmpi
out=${1:-$here/results_cluster.csv}
rounds=${ROUNDS:-3}
cluster=$root/tools/droce-cluster
cl=${NETNS_PREFIX:-npbench}-$$
export DROCE_CTL=$ctl
work=$(mktemp -d /tmp/netpipe-cluster.XXXXXX)
cleanup() {
  "$cluster" down --name "$cl" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
"$cluster" up 2 --name "$cl" --steering "${STEERING:-auto}" >/dev/null || { echo "cannot bring the cluster up" >&2; exit 1; }
mpi=(mpirun --allow-run-as-root --oversubscribe --mca plm_rsh_agent "$cluster rsh --name $cl" --host "$cl-1,$cl-2"
     -np 2)
droce=(--mca pml ucx --mca osc ucx --mca btl self -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=droce0:1
       -x UCX_WARN_UNUSED_ENV_VARS=n)
tcp=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0 --mca osc pt2pt)
echo "round,test,stack,bytes,value,unit" >"$out"
for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r of $rounds ($(date -u +%FT%TZ), load $(cut -d' ' -f1 /proc/loadavg))" >&2
  for stack in droce tcp; do
    rm -f "$work/np.out"
    if [ $stack = droce ]; then args=("${droce[@]}"); else args=("${tcp[@]}"); fi
    (cd "$work" && timeout 900 "$cluster" run --name "$cl" 1 "${mpi[@]}" "${args[@]}" \
      NPopenmpi -p 0 -u 4194304 -o "$work/np.out" >"$work/np.log" 2>&1) || { tail -5 "$work/np.log" >&2; continue; }
    # np.out: bytes, Mbps, seconds (one way)
    awk -v r=$r -v s=mpi_$stack '{printf "%s,netpipe_lat,%s,%s,%.3f,us\n%s,netpipe_bw,%s,%s,%.1f,Mbps\n", r, s, $1, $3 * 1e6, r, s, $1, $2}' \
      "$work/np.out" >>"$out"
    echo "NetPIPE $stack: $(wc -l <"$work/np.out") sizes" >&2
  done
done
NETPIPE_TCP_LABEL="Open MPI, btl tcp (kernel, veth + bridge)" \
  NETPIPE_TITLE="NetPIPE between two namespace hosts (droce-cluster), droce vs kernel TCP" /usr/bin/python3 "$here/plot.py" "$out"
