#!/usr/bin/env bash
# CI: the 2:1 incast with the paper's DCQCN profile at 25 Gb/s must be fair,
# converge, keep the queue between Kmin and Kmax and drop nothing.
#   ccsim_incast_2to1.sh path/to/droce-ccsim
set -euo pipefail
sim=${1:?usage: $0 droce-ccsim}
kmin=5000
kmax=200000
line=$("$sim" --senders 2 --line-rate-gbps 25 --profile paper --duration-ms 100 \
  --kmin $kmin --kmax $kmax --pmax 0.01 --buffer-bytes 1000000 --seed 1)
echo "$line"
get() { tr ' ' '\n' <<<"$line" | sed -n "s/^$1=//p"; }
fail=0
check() {  # check NAME CONDITION(awk, v = the value)
  local v; v=$(get "$1")
  if [[ -z "$v" || "$v" == never ]] || ! awk -v v="$v" "BEGIN { exit !($2) }"; then
    echo "FAIL: $1=$v, want $2"; fail=1
  fi
}
check jain "v >= 0.99"
check converge_ms "v <= 20"
check drops "v == 0"
check queue_p50 "v >= $kmin"
check queue_p99 "v <= $kmax"
check util "v >= 0.95"
exit $fail
