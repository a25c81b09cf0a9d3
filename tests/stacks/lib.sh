# Sourced by the stacks scripts (ucx.sh, mpi.sh, devices.sh, libfabric.sh):
# unmodified Debian packages of the communication stacks (UCX, Open MPI,
# libfabric) on fabric devices of a private run directory. Builds on
# tests/fabric/lib.sh (check, finish, wait_listen).
#   stacks_host PREFIX N [KEY=VALUE...]
#                          a fresh run directory ($run, exported as DROCE_RUN_DIR) with
#                          fabric devices droce0..droce{N-1} (10.0.0.1..), each with the device
#                          file settings given, the verbs environment exported; daemon
#                          stopped and devices deleted at exit
#   need PROGRAM...        skips the script (exit 77) when a package is missing
#   port_base              a TCP port range of this script's own (side channels): $port
# Iterations are short on purpose: every check runs on 2 shared cores in CI.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../fabric" && pwd)/lib.sh"

stacks_devices=0
stacks_host() {  # PREFIX N [KEY=VALUE...]
  single_host "$1"
  stacks_devices=$2
  trap stacks_host_cleanup EXIT
  local i s sets=()
  for s in "${@:3}"; do sets+=(set "$s"); done
  for ((i = 0; i < $2; ++i)); do
    "$ctl" link add "droce$i" ip "10.0.0.$((i + 1))" "${sets[@]}" >/dev/null || { echo "cannot register droce$i"; exit 1; }
  done
  eval "$("$ctl" env)"
  export UCX_WARN_UNUSED_ENV_VARS=n
}
stacks_host_cleanup() {
  if declare -F after_check >/dev/null; then after_check; fi
  "$ctl" daemon stop >/dev/null 2>&1
  local i
  for ((i = 0; i < stacks_devices; ++i)); do "$ctl" link del "droce$i" >/dev/null 2>&1; done
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}

need() {
  local p
  for p in "$@"; do
    command -v "$p" >/dev/null || { echo "SKIP: $p is not installed (tools/install-deps.sh installs it)"; exit 77; }
  done
}

# A port range of this process's own for side channels (perftest, NetPIPE):
# other helpers' and CI's runs on the same host use theirs.
port=$((20000 + ($$ % 2000) * 10))
