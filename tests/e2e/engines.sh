# shellcheck shell=bash disable=SC2034  # status belongs to the sourcing script
# Sourced by the two-process end-to-end tests (memif_testpmd.sh,
# veth_testpmd.sh): runs through a pair script (tools/memif-pair.sh,
# tools/veth-pair.sh: both sides' options as arguments, CLIENT_ARGS the
# client's), prints an "ok"/"FAIL" line a run and sets status=1 on a failure.

# Every engine at each MTU, data verified (a side exits non-zero on an error
# or a verification failure): engine_matrix PAIR_SCRIPT MTU...
engine_matrix() {
  local pair=$1 mtu fwd size out; shift
  for mtu in "$@"; do
    for fwd in write_bw read_bw send_bw atomic_bw write_lat; do
      size=65536
      [ "$fwd" = write_lat ] && size=8
      [ "$fwd" = atomic_bw ] && size=8
      if out=$(CLIENT_ARGS="--duration 0.5" bash "$pair" --fwd "$fwd" --mtu "$mtu" --size "$size" --outstanding 8); then
        echo "ok   $fwd mtu $mtu: $(echo "$out" | grep '^client' | grep -oE 'gbps=[0-9.]+|lat_us_p50=[0-9.]+' | tr '\n' ' ')"
      else
        echo "FAIL $fwd mtu $mtu"; echo "$out"; status=1
      fi
    done
  done
}

# Go-back-N under 1% loss injected on both sides' transmit path: everything
# delivered intact, and something retransmitted. The client's counters that
# FIELDS (an ERE alternation) names are shown: loss_runs PAIR_SCRIPT FIELDS FWD...
loss_runs() {
  local pair=$1 fields=$2 fwd out; shift 2
  for fwd in "$@"; do
    if out=$(CLIENT_ARGS="--duration 0.5" bash "$pair" --fwd "$fwd" --mtu 1024 --size 16384 \
        --outstanding 4 --drop-rate 0.01 --seed 7); then
      echo "ok   $fwd with 1% loss: $(echo "$out" | grep '^client' | grep -oE "($fields)=[0-9]+" | tr '\n' ' ')"
      echo "$out" | grep '^client' | grep -qE 'retransmitted=[1-9]' || { echo "FAIL: no retransmission under loss"; status=1; }
    else
      echo "FAIL $fwd with loss"; echo "$out"; status=1
    fi
  done
}
