# Sourced by the fabric end-to-end scripts (fabric.sh, rdmacm.sh, uplink.sh,
# daemon_loss.sh): the paths, the PASS/FAIL bookkeeping and the one-host
# run directory they share.
#   root, build, ctl, t     the tree, the build, droce-ctl, a program's timeout (PAIR_TIMEOUT)
#   single_host PREFIX      a fresh run directory ($run, exported as DROCE_RUN_DIR), its
#                           daemon stopped and droce0/droce1 deleted at exit (KEEP_LOGS=1 keeps it)
#   check NAME CMD...       runs CMD, prints PASS/FAIL (on FAIL the last FAIL_TAIL lines of its
#                           output, the daemon logs of $log_dirs and what on_fail prints, if the
#                           script defines it); ONLY=REGEX runs the checks whose names match,
#                           VERBOSE=1 prints every output
#                           after_check, if the script defines it, runs after every check and at exit
#   finish NAME             the tally; its status is the script's
#   track PID, stop_tracked programs a check started in the background, ended after it
#   wait_listen PID PORT... until a server listens on its side-channel ports
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
ctl="$build/apps/ctl/droce-ctl"
t=${PAIR_TIMEOUT:-90}
failed=0; passed=0
log_dirs=()

single_host() {
  run=$(mktemp -d "/tmp/$1.XXXXXX")
  export DROCE_RUN_DIR=$run
  log_dirs=("$run")
  trap single_host_cleanup EXIT
}
single_host_cleanup() {
  if declare -F after_check >/dev/null; then after_check; fi
  "$ctl" daemon stop >/dev/null 2>&1
  "$ctl" link del droce0 >/dev/null 2>&1; "$ctl" link del droce1 >/dev/null 2>&1
  [ "${KEEP_LOGS:-0}" = 1 ] || rm -rf "$run"
}

check() {
  local name=$1; shift
  if [ -n "${ONLY:-}" ] && ! grep -qE -- "$ONLY" <<<"$name"; then return 0; fi
  local t0=$SECONDS
  local out; out=$("$@" 2>&1); local rc=$?
  if declare -F after_check >/dev/null; then after_check; fi
  if [ $rc -ne 0 ] && grep -q "Can't produce a report" <<<"$out"; then  # perftest's CPU clock check on a busy VM
    echo "  (perftest could not time the CPU clock: rerunning $name)"
    out=$("$@" 2>&1); rc=$?
    if declare -F after_check >/dev/null; then after_check; fi
  fi
  if [ $rc -eq 0 ]; then
    echo "PASS $name ($((SECONDS - t0)) s)"; passed=$((passed + 1))
  else
    echo "FAIL $name ($((SECONDS - t0)) s)"; echo "$out" | tail -"${FAIL_TAIL:-60}"; failed=$((failed + 1))
    local d
    for d in "${log_dirs[@]}"; do echo "--- $d/droced.log"; tail -20 "$d/droced.log" 2>/dev/null; done
    if declare -F on_fail >/dev/null; then on_fail; fi
  fi
  if [ "${VERBOSE:-0}" = 1 ]; then echo "$out"; fi
  return 0
}

# Programs a check starts in the background: checks run in a subshell, so
# they are listed in a file, and a script's after_check calls stop_tracked
# (a failed check leaves them running). TERM first: timeout(1) passes it on
# to the program it runs, where a KILL ends timeout alone and leaves the
# program running until its own deadline (a droce-testpmd waiting 30 s for a
# hello, beside the next check). What is still there after 5 s is killed.
track() { echo "$1" >>"$run/pids"; }
stop_tracked() {
  [ -f "$run/pids" ] || return 0
  local x
  while read -r x; do kill "$x" 2>/dev/null; done <"$run/pids"
  while read -r x; do
    for _ in $(seq 50); do kill -0 "$x" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$x" 2>/dev/null
  done <"$run/pids"
  : >"$run/pids"
}

finish() {
  echo "$1: $passed passed, $failed failed"
  [ $failed -eq 0 ]
}

# rping of rdma-core 44 has a teardown race of its own: its CM thread exit()s
# when rdma_get_cm_event fails, and its main thread destroys the event
# channel (and frees the struct the CM thread reads the channel from) without
# stopping that thread. If the CM thread, after acknowledging DISCONNECTED, is
# descheduled until the channel is closed, its next rdma_get_cm_event gets
# EBADF ("rdma_get_cm_event: Bad file descriptor") and the program exits
# non-zero or faults while its main thread is still tearing down. The kernel's
# rdma_cm has the same window; later rping polls an eventfd the main thread
# writes instead. True when one of the logs ended that way.
rping_teardown_race() {  # LOG...
  grep -qs "rdma_get_cm_event: Bad file descriptor" "$@"
}

# Waits until a server process PID listens on every TCP PORT given (its side
# channel), at most 30 s, or until it exits. A fixed sleep lost this race on
# a loaded host: the client's connect was refused and both sides failed.
# With LISTEN_NS set, looks in that network namespace.
wait_listen() {  # PID PORT...
  local pid=$1 port; shift
  for port in "$@"; do
    for _ in $(seq 300); do
      ${LISTEN_NS:+ip netns exec "$LISTEN_NS"} ss -Hltn "sport = :$port" | grep -q . && break
      kill -0 "$pid" 2>/dev/null || return 0
      sleep 0.1
    done
  done
}
