#!/usr/bin/env bash
# The stacks across hosts: a cluster of 3 network namespaces on a bridge
# (tools/droce-cluster: host k is 10.0.0.k, droce0 bound to its eth0), with
# Debian's unmodified packages.
#   - libfabric's verbs provider: fi_pingpong -e msg (RC QPs through rdma_cm)
#     and -e rdm over it (verbs;ofi_rxm), every size, data checked (-c);
#   - Open MPI launched by mpirun through `droce-cluster rsh` (plm_rsh_agent):
#     mpi_check.c on 4 ranks over 3 hosts and NetPIPE between two hosts over
#     UCX (pml ucx); mpi_check over libfabric: mtl ofi on verbs;ofi_rxm (pml
#     cm), btl ofi on verbs;ofi_rxd (pml ob1; the btl refuses ofi_rxm, and
#     the verbs provider alone has no RDM endpoint: doc/stacks.md);
#   - UCX takes droce's GIDs for RoCE v2 and finds their interface (the
#     preload shim shows it droce's sysfs): its subnet check runs, and its
#     packets carry its RoCE v2 traffic class.
# Root only (namespaces, XDP); the cluster is always taken down.
#   STEERING=udp|xdp|af_packet  the devices' steering (droce-ctl link add ... steering; default auto)
#   NETNS_PREFIX=P              the namespaces are P-<pid>-k (default stacks)
source "$(dirname "$0")/lib.sh"
need fi_pingpong mpirun mpicc NPopenmpi ucx_perftest dumpcap tshark
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (network namespaces, XDP)"; exit 77; }
cluster=$root/tools/droce-cluster
cl=${NETNS_PREFIX:-stacks}-$$
export DROCE_CTL=$ctl
work=$(mktemp -d /tmp/stacks-cluster.XXXXXX)
log_dirs=("/run/droce/netns/$cl-1" "/run/droce/netns/$cl-2" "/run/droce/netns/$cl-3")
cleanup() {
  "$cluster" down --name "$cl" >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$work"
}
trap cleanup EXIT
"$cluster" up 3 --name "$cl" --steering "${STEERING:-auto}" >/dev/null || { echo "FAIL cannot bring the cluster up"; exit 1; }
mpicc -O2 -o "$work/mpi_check" "$root/tests/stacks/mpi_check.c" || { echo "FAIL mpicc"; exit 1; }

# fi_pingpong server on host 1, client on host K: every size row has all its
# messages acknowledged (#ack = #sent) with data checks, both sides exit 0.
pingpong() {  # K PROVIDER ENDPOINT
  local k=$1 s=$work/ofi.server c=$work/ofi.client
  timeout "$t" "$cluster" run --name "$cl" 1 fi_pingpong -p "$2" -e "$3" -S all -c -I 5 -B $port >"$s" 2>&1 &
  local server=$!
  local i  # until its side channel listens (in host 1's namespace)
  for i in $(seq 300); do
    ip netns exec "$cl-1" ss -Hltn "sport = :$port" | grep -q . && break
    kill -0 $server 2>/dev/null || break
    sleep 0.1
  done
  timeout "$t" "$cluster" run --name "$cl" "$k" fi_pingpong -p "$2" -e "$3" -S all -c -I 5 -P $port 10.0.0.1 >"$c" 2>&1
  local crc=$?
  wait $server; local src=$?
  tail -4 "$c"; echo "client exit $crc, server exit $src"
  local rows bad
  rows=$(grep -cE '^[0-9]+[kmg]? ' "$c")
  bad=$(awk '/^[0-9]+[kmg]? / { if ("=" $2 != $3) print }' "$c" | wc -l)
  echo "$rows sizes, $bad with a message missing"
  [ $crc -eq 0 ] && [ $src -eq 0 ] && [ "$rows" -ge 40 ] && [ "$bad" -eq 0 ]
}
check "fi_pingpong -p verbs -e msg -S all -c, host 2 -> host 1" pingpong 2 verbs msg
check "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -S all -c, host 3 -> host 1" pingpong 3 'verbs;ofi_rxm' rdm

# UCX reads each GID's type and interface from /sys/class/infiniband/DEV/
# ports/1/gid_attrs/{types,ndevs}/N itself. RoCE v2 on both sides, and the
# subnet check on (UCX_IB_ROCE_LOCAL_SUBNET): UCX compares the GIDs' IPv4
# addresses under eth0's netmask, which it reaches only for two RoCE v2
# addresses (it refuses a RoCE v1 peer then), and sends with its RoCE v2
# traffic class, DSCP 26, seen on host 2's bridge port.
ucx_roce_v2() {
  local pcap=$work/rocev2.pcapng
  ip netns exec "$cl-sw" timeout 60 dumpcap -q -i p2 -f "udp dst port 4791" -w "$pcap" >/dev/null 2>&1 &
  local cap=$! i
  # Until dumpcap captures (its file has the pcapng header): on a loaded host
  # it can start after UCX's first frames.
  for i in $(seq 100); do
    [ -s "$pcap" ] && break
    kill -0 $cap 2>/dev/null || break
    sleep 0.1
  done
  local ucp=(env UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=droce0:1 UCX_IB_ROCE_LOCAL_SUBNET=y
             UCX_LOG_LEVEL=debug UCX_WARN_UNUSED_ENV_VARS=n timeout "$t" ucx_perftest -t tag_lat -n 300 -p $port)
  "$cluster" run --name "$cl" 1 "${ucp[@]}" >"$work/ucx.server" 2>&1 &
  local server=$!
  for i in $(seq 300); do
    ip netns exec "$cl-1" ss -Hltn "sport = :$port" | grep -q . && break
    kill -0 $server 2>/dev/null || break
    sleep 0.1
  done
  "$cluster" run --name "$cl" 2 "${ucp[@]}" 10.0.0.1 >"$work/ucx.client" 2>&1
  local crc=$?
  wait $server; local src=$?
  sleep 0.5; kill $cap 2>/dev/null; wait $cap 2>/dev/null
  grep -m1 "RoCE LAG level" "$work/ucx.client"; grep -m1 "IP addresses" "$work/ucx.client"; grep "^Final" "$work/ucx.client"
  local dscp; dscp=$(tshark -r "$pcap" -T fields -e ip.dsfield.dscp 2>/dev/null | sort | uniq -c)
  echo "RoCE frames by DSCP from host 2: $dscp"
  [ $crc -eq 0 ] && [ $src -eq 0 ] && grep -q "^Final" "$work/ucx.client" &&
    grep -q "RoCE LAG level on droce0:1 (eth0)" "$work/ucx.client" &&
    grep -q "IP addresses match with a 24-bit prefix: local IP is 10.0.0.2, remote IP is 10.0.0.1" "$work/ucx.client" &&
    [ -n "$dscp" ] && [ "$(awk '{print $2}' <<<"$dscp")" = 26 ]
}
check "UCX sees RoCE v2 GIDs on eth0: its subnet check passes, DSCP 26 on the wire" ucx_roce_v2

# mpirun on host 1 starts its daemons on hosts 2 and 3 through the cluster's
# remote shell; ranks 0-1 on host 1, rank 2 on host 2, rank 3 on host 3.
# btl self only: every byte between ranks, host 1's two included, is droce's.
mpi=(mpirun --allow-run-as-root --oversubscribe --mca plm_rsh_agent "$cluster rsh --name $cl")
four_ranks() {  # MCA ARGS...: mpi_check on 4 ranks over the 3 hosts
  local out; out=$(cd "$work" && timeout "$t" "$cluster" run --name "$cl" 1 "${mpi[@]}" \
    --host "$cl-1:2,$cl-2:1,$cl-3:1" -np 4 "$@" "$work/mpi_check" -max 1048576 2>&1)
  local rc=$?; echo "$out" | tail -15
  [ $rc -eq 0 ] && grep -qE "^mpi_check: [0-9]+ checks passed on 4 ranks" <<<"$out"
}
# Each rank uses its own host's droced and devices: mpirun's environment
# (host 1's DROCE_RUN_DIR) does not follow its daemons to the other hosts.
ranks_on_their_hosts() {
  local out; out=$(cd "$work" && timeout "$t" "$cluster" run --name "$cl" 1 "${mpi[@]}" \
    --host "$cl-1,$cl-2,$cl-3" -np 3 bash -c 'echo "rank $OMPI_COMM_WORLD_RANK run directory $DROCE_RUN_DIR"' 2>&1)
  local rc=$?; echo "$out"
  [ $rc -eq 0 ] && grep -qx "rank 1 run directory /run/droce/netns/$cl-2" <<<"$out" &&
    grep -qx "rank 2 run directory /run/droce/netns/$cl-3" <<<"$out"
}
check "mpirun's ranks on hosts 2 and 3 use their own host's droced" ranks_on_their_hosts
ucx=(--mca pml ucx --mca osc ucx --mca btl self -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_NET_DEVICES=droce0:1
     -x UCX_WARN_UNUSED_ENV_VARS=n)
check "mpi_check over UCX (pml ucx), 4 ranks on 3 hosts" four_ranks "${ucx[@]}"

# NetPIPE's integrity mode between host 1 and host 2: every message checked,
# up to 1.5 MiB (sizes of 2^k and 3*2^(k-1), plus 1 byte: the last below the
# upper bound is 1572865). Messages beyond UCX's rendezvous threshold go as
# RDMA READs of the sender's buffer, many outstanding. Every size printed must
# pass; Open MPI's own warnings (its launcher's "setpgid ... failed in parent",
# a race it ignores) are no failure of the transfer. NetPIPE ends a run early
# once one size's transfer takes over a second (its STOPTM), which two CPU
# hogs can cause: the sizes up to 1 MiB (1048577, the 36th) must be there,
# 1.5 MiB is checked when NetPIPE gets to it.
netpipe() {
  local out; out=$(cd "$work" && timeout "$t" "$cluster" run --name "$cl" 1 "${mpi[@]}" \
    --host "$cl-1,$cl-2" -np 2 "${ucx[@]}" NPopenmpi -i -u 2097152 -o "$work/np.out" 2>&1)
  local rc=$?; echo "$out" | tail -4
  local sizes passed
  sizes=$(grep -cE '^ *[0-9]+: +[0-9]+ bytes' <<<"$out")
  passed=$(grep -c "Integrity check passed" <<<"$out")
  echo "mpirun exit $rc, $passed of $sizes sizes passed"
  [ $rc -eq 0 ] && [ "$passed" -ge 36 ] && [ "$passed" -eq "$sizes" ] && grep -qE '^ *[0-9]+: +1048577 bytes' <<<"$out" &&
    ! grep -q "Integrity check failed" <<<"$out"
}
check "NetPIPE over UCX (NPopenmpi -i) up to 1.5 MiB, host 1 <-> host 2" netpipe

# libfabric's tagged RDM endpoint: mtl ofi over verbs;ofi_rxm, one-sided over
# the pml (osc pt2pt). libfabric's MR cache is off: a registration it keeps
# cached for memory the program has freed is read by droce's responder when
# a READ request is repeated after its data was taken (doc/stacks.md).
check "mpi_check over libfabric (mtl ofi, verbs;ofi_rxm), 4 ranks on 3 hosts" four_ranks \
  --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include 'verbs;ofi_rxm' --mca osc pt2pt --mca btl self \
  -x FI_MR_CACHE_MAX_COUNT=0
# btl ofi (two-sided too: btl_ofi_mode 2) over verbs;ofi_rxd, the RDM
# endpoint over UD that offers FI_RMA and FI_ATOMIC.
check "mpi_check over libfabric (btl ofi, verbs;ofi_rxd), 4 ranks on 3 hosts" four_ranks \
  --mca pml ob1 --mca btl ofi,self --mca btl_ofi_mode 2 --mca btl_ofi_provider_include 'verbs;ofi_rxd' \
  --mca osc pt2pt

no_leftovers() {
  local k out rc=0
  for k in 1 2 3; do
    out=$(ip netns exec "$cl-$k" "$ctl" link show 2>&1); echo "host $k: $(grep -o '[0-9]* attached' <<<"$out")"
    grep -qE " [1-9][0-9]* attached" <<<"$out" && rc=1
  done
  return $rc
}
check "no process left attached on any host" no_leftovers
down() { "$cluster" down --name "$cl" && ! ip netns list | grep -q "^$cl-"; }
check "the cluster comes down: no namespace left" down

finish stacks_cluster
