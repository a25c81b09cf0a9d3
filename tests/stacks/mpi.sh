#!/usr/bin/env bash
# Open MPI 4.1 over UCX (pml ucx, osc ucx; shared-memory transports off:
# btl self only, UCX_TLS=rc_verbs,ud_verbs,self) on fabric devices, with 8
# devices registered: the project's MPI program (mpi_check.c: ping-pong with
# data checks, MPI_Allreduce, MPI_Alltoall, MPI_Put/Get/Accumulate) on 4 ranks
# on one device, across two, and with all 8 open; NetPIPE between two ranks
# across two devices (integrity mode: every byte checked); a rank killed
# mid-job: mpirun ends with an error within seconds, and the devices serve
# the next job.
source "$(dirname "$0")/lib.sh"
need mpirun mpicc NPopenmpi
stacks_host droce-stacks-mpi 8
work=$run/mpi
mkdir -p "$work"
mpicc -O2 -o "$work/mpi_check" "$root/tests/stacks/mpi_check.c" || { echo "FAIL mpicc"; exit 1; }
mpi_check=$work/mpi_check
# Local ranks inherit mpirun's environment; an option before the first
# program of an MPMD command line (`-x`, `--mca`) would apply to that one only.
export OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_btl=self UCX_TLS=rc_verbs,ud_verbs,self
mpi=(mpirun --allow-run-as-root --oversubscribe)

# One device: 4 ranks on droce0.
one_device() {
  local out; out=$(timeout "$t" "${mpi[@]}" -np 4 -x UCX_NET_DEVICES=droce0:1 "$mpi_check" -max 1048576 2>&1)
  local rc=$?; echo "$out" | tail -20
  [ $rc -eq 0 ] && grep -qE "^mpi_check: [0-9]+ checks passed on 4 ranks" <<<"$out"
}
check "mpi_check, 4 ranks on droce0" one_device

# Two devices: ranks 0-1 on droce0, 2-3 on droce1; both devices must have
# carried the job's packets (DROCE_STATS at each device's close).
two_devices() {
  local out; out=$(DROCE_STATS=1 timeout "$t" "${mpi[@]}" -np 2 -x UCX_NET_DEVICES=droce0:1 "$mpi_check" -max 1048576 \
    : -np 2 -x UCX_NET_DEVICES=droce1:1 "$mpi_check" -max 1048576 2>&1)
  local rc=$?; grep -v "^droce" <<<"$out" | tail -20
  grep -E "^droce droce[01]: direct paths" <<<"$out" | cut -c1-120
  [ $rc -eq 0 ] && grep -qE "^mpi_check: [0-9]+ checks passed on 4 ranks" <<<"$out" &&
    grep -qE "^droce droce0: rx [1-9][0-9]* pkts" <<<"$out" && grep -qE "^droce droce1: rx [1-9][0-9]* pkts" <<<"$out" &&
    # Lending is on by default (direct_lend): the ranks' long frames were lent.
    grep -qE "direct paths [0-9]+ .* \(lent [1-9][0-9]*\)" <<<"$out"
}
check "mpi_check, 4 ranks across droce0 and droce1" two_devices

# Every rank opens all 8 devices; UCX picks its rails among them. 4 ranks
# with the defaults users run (osc ucx): each rank's pml and osc open a UCP
# context each, and each context every device: 64 (process, device)
# attachments to one droced at once, each a pair of shared-memory rings
# (doc/droced.md "The link to the daemon"; no DPDK port per attachment).
# Its start is the slow part (64 device opens; droced sets up a direct path
# only for the pairs of ports that exchange frames, not all 2016): it gets
# three times the pair timeout.
all_devices() {
  local out; out=$(timeout "$((t * 3))" "${mpi[@]}" -np 4 "$mpi_check" -max 65536 -r 1 2>&1)
  local rc=$?; echo "$out" | tail -20
  [ $rc -eq 0 ] && grep -qE "^mpi_check: [0-9]+ checks passed on 4 ranks" <<<"$out"
}
check "mpi_check, 4 ranks with 8 devices open (osc ucx)" all_devices

# NetPIPE's integrity mode: every message checked, 1 byte to 1 MiB.
netpipe() {
  local out; out=$(cd "$work" && timeout "$t" "${mpi[@]}" -np 1 -x UCX_NET_DEVICES=droce0:1 NPopenmpi -i -u 1048576 -o np.out \
    : -np 1 -x UCX_NET_DEVICES=droce1:1 NPopenmpi -i -u 1048576 -o np.out 2>&1)
  local rc=$?; echo "$out" | tail -5
  local passed; passed=$(grep -c "Integrity check passed" <<<"$out")
  echo "$passed sizes passed"
  [ $rc -eq 0 ] && [ "$passed" -ge 30 ] && ! grep -qi "fail" <<<"$out"
}
check "NetPIPE (NPopenmpi -i) droce0 <-> droce1" netpipe

# A rank killed with SIGKILL mid-job: mpirun ends the job with an error (never
# a hang), and a new job on the same devices passes.
killed_rank() {
  local log=$work/kill.log
  ( timeout "$t" "${mpi[@]}" -np 4 -x UCX_NET_DEVICES=droce0:1 "$mpi_check" -max 65536 -loop 120 >"$log" 2>&1
    echo "mpirun exit $?" >>"$log" ) &
  local job=$! i pid
  for i in $(seq 600); do grep -q "first ping-pong pass done" "$log" && break; sleep 0.1; done
  pid=$(awk '/rank 2 pid/ {print $5}' "$log")
  [ -n "$pid" ] || { echo "the job did not start"; cat "$log"; kill $job; return 1; }
  local t0=$SECONDS
  kill -9 "$pid"
  wait $job
  local took=$((SECONDS - t0))
  tail -8 "$log"; echo "mpirun ended ${took} s after the kill"
  grep -q "mpirun exit 137" "$log" && grep -q "rank 2 .* exited on signal 9" "$log" && [ $took -lt 60 ]
}
check "a rank killed mid-job: mpirun ends with an error" killed_rank
check "the next job on droce0 after the kill" one_device
no_leftovers() {
  local out; out=$("$ctl" link show 2>&1); echo "$out" | grep attached
  ! grep -qE " [1-9][0-9]* attached" <<<"$out"
}
check "no process left attached to a device" no_leftovers

finish stacks_mpi
