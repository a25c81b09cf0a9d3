#!/usr/bin/env bash
# UCX 1.13 (Debian's ucx-utils, unmodified) on fabric devices: ucx_perftest's
# transport-level tests (UCT) on rc_verbs and ud_verbs, and its protocol-level
# tests (UCP) over UCX_TLS=rc_verbs,ud_verbs,self (no shared memory: the
# traffic is droce's), server and client on one device and across two. Each
# pair runs a batch of tests (both sides read the same batch file), and a
# check passes when every test of the batch printed its final line and
# neither side logged an error: ucx_perftest's exit status does not say
# whether a test of a batch failed. The short iteration counts make this a
# correctness run; tools/bench/stacks measures.
source "$(dirname "$0")/lib.sh"
need ucx_perftest ucx_info
stacks_host droce-stacks-ucx 2
work=$run/ucx
mkdir -p "$work"

# The transport-level matrix: what UCX offers on each transport (rc_verbs
# has no plain atomic swap and ud_verbs no put: UCX's own answers).
cat >"$work/uct.batch" <<'BATCH'
rc_am_lat        -t am_lat  -x rc_verbs -n 300 -w 30
rc_am_bw_short   -t am_bw   -x rc_verbs -D short -n 2000 -w 100
rc_am_bw_bcopy   -t am_bw   -x rc_verbs -D bcopy -s 4096 -n 1000 -w 100
rc_am_bw_zcopy   -t am_bw   -x rc_verbs -D zcopy -s 8192 -n 1000 -w 100
rc_put_lat       -t put_lat -x rc_verbs -n 300 -w 30
rc_put_bw_short  -t put_bw  -x rc_verbs -D short -n 2000 -w 100
rc_put_bw_bcopy  -t put_bw  -x rc_verbs -D bcopy -s 4096 -n 1000 -w 100
rc_put_bw_zcopy  -t put_bw  -x rc_verbs -D zcopy -s 65536 -n 200 -w 20
rc_get_bcopy     -t get     -x rc_verbs -D bcopy -s 4096 -n 300 -w 30
rc_get_zcopy     -t get     -x rc_verbs -D zcopy -s 65536 -n 200 -w 20
rc_add_lat       -t add_lat -x rc_verbs -n 300 -w 30
rc_fadd          -t fadd    -x rc_verbs -n 300 -w 30
rc_cswap         -t cswap   -x rc_verbs -n 300 -w 30
ud_am_lat        -t am_lat  -x ud_verbs -n 300 -w 30
ud_am_bw_short   -t am_bw   -x ud_verbs -D short -n 2000 -w 100
ud_am_bw_bcopy   -t am_bw   -x ud_verbs -D bcopy -s 4000 -n 1000 -w 100
ud_am_bw_zcopy   -t am_bw   -x ud_verbs -D zcopy -s 4000 -n 1000 -w 100
BATCH
# The protocol-level tests UCP applications and Open MPI rely on.
cat >"$work/ucp.batch" <<'BATCH'
tag_lat          -t tag_lat    -n 300 -w 30
tag_bw_8         -t tag_bw     -s 8 -n 2000 -w 100
tag_bw_1m        -t tag_bw     -s 1048576 -n 40 -w 4
ucp_put_bw       -t ucp_put_bw -s 65536 -n 200 -w 20
ucp_get          -t ucp_get    -s 65536 -n 200 -w 20
stream_bw        -t stream_bw  -s 65536 -n 200 -w 20
BATCH

# pair NAME N BATCH 'SERVER ENV AND ARGS' 'CLIENT ENV AND ARGS': the batch between
# a server and a client (VAR=VALUE words first, then ucx_perftest options); N
# picks the side-channel port (one per pair).
pair() {
  local name=$1 p=$((port + $2)) batch=$3
  local senv=() sargs=() cenv=() cargs=() w
  for w in $4; do if [[ $w == *=* ]]; then senv+=("$w"); else sargs+=("$w"); fi; done
  for w in $5; do if [[ $w == *=* ]]; then cenv+=("$w"); else cargs+=("$w"); fi; done
  (cd "$work" && env "${senv[@]}" timeout "$t" ucx_perftest "${sargs[@]}" -p $p -b "$batch" >"$work/$name.server" 2>&1) &
  local server=$!
  wait_listen $server $p
  (cd "$work" && env "${cenv[@]}" timeout "$t" ucx_perftest "${cargs[@]}" -p $p -b "$batch" 127.0.0.1 \
    >"$work/$name.client" 2>&1)
  local crc=$?
  wait $server; local src=$?
  local want got
  want=$(grep -cvE '^\s*(#|$)' "$batch")
  got=$(grep -c "^Final:" "$work/$name.client")
  paste -d' ' <(grep -oE '^\+[a-z0-9_]+' "$work/$name.client" | tr -d +) <(grep "^Final:" "$work/$name.client" | tr -s ' ')
  echo "$got of $want tests finished; client exit $crc, server exit $src"
  if grep -E "UCX  (ERROR|WARN)|Fatal|Segmentation|Aborted" "$work/$name.client" "$work/$name.server"; then return 1; fi
  [ "$got" -eq "$want" ] && [ $crc -eq 0 ] && [ $src -eq 0 ]
}

check "UCT rc_verbs/ud_verbs, server and client on droce0" \
  pair uct_one 1 "$work/uct.batch" "-d droce0:1" "-d droce0:1"
check "UCT rc_verbs/ud_verbs, droce0 <-> droce1" \
  pair uct_two 2 "$work/uct.batch" "-d droce0:1" "-d droce1:1"
ucp=UCX_TLS=rc_verbs,ud_verbs,self
check "UCP over rc_verbs,ud_verbs, server and client on droce0" \
  pair ucp_one 3 "$work/ucp.batch" "$ucp UCX_NET_DEVICES=droce0:1" "$ucp UCX_NET_DEVICES=droce0:1"
check "UCP over rc_verbs,ud_verbs, droce0 <-> droce1" \
  pair ucp_two 4 "$work/ucp.batch" "$ucp UCX_NET_DEVICES=droce0:1" "$ucp UCX_NET_DEVICES=droce1:1"

# What UCX probes and droce does not offer (XRC, DC, ODP, device memory)
# gets the answer of a device without it: no warning or error while UCX
# opens the devices, and the transports are rc_verbs and ud_verbs only.
probes() {
  local out; out=$(UCX_LOG_LEVEL=warn timeout "$t" ucx_info -d 2>&1) || { echo "$out" | tail; return 1; }
  if grep -E "UCX  (ERROR|WARN)" <<<"$out"; then return 1; fi
  local tls; tls=$(grep -B1 -E "Device: droce[01]:1" <<<"$out" | awk '/Transport:/ {print $3}' | sort -u | tr '\n' ' ')
  echo "droce transports: $tls"
  [ "$tls" = "rc_verbs ud_verbs " ]
}
check "ucx_info -d: rc_verbs and ud_verbs only, no warning" probes

# UCX reads each GID's type and network interface from /sys/class/infiniband/
# DEV/ports/1/gid_attrs/ itself, not through libibverbs: libdroce-preload.so
# shows it droce's tree. It finds the interface the device file names (lo
# for a fabric device), nothing it fails to read, and RoCE v2 (UCX's subnet
# check, which it runs for RoCE v2 GIDs only, compares the two addresses).
echo "tag_lat -t tag_lat -n 50 -w 5" >"$work/gid.batch"
gid_attrs() {
  local env="$ucp UCX_IB_ROCE_LOCAL_SUBNET=y UCX_LOG_LEVEL=debug"
  pair gid 5 "$work/gid.batch" "$env UCX_NET_DEVICES=droce0:1" "$env UCX_NET_DEVICES=droce1:1" >/dev/null || return 1
  local out=$work/gid.client
  grep -E "gid_attrs|RoCE LAG level|IP addresses" "$out" | sort -u | cut -c1-200
  ! grep -q "gid_attrs" "$out" && grep -q "RoCE LAG level on droce1:1 (lo)" "$out" &&
    grep -q "IP addresses match with a [0-9]*-bit prefix: local IP is 10.0.0.2, remote IP is 10.0.0.1" "$out"
}
check "UCX reads RoCE v2 and the interface from droce's gid_attrs" gid_attrs

finish stacks_ucx
