# shellcheck shell=bash
# Sourced by the lab scripts (rxe_lab.sh, rxe_cm_lab.sh): what both do to
# start the workplace lab (../shared/rocelab), run a program pair and record
# its result, check the capture, and rewrite their section of the results
# file. The caller sets `root` (the repository) first.

# Finds the lab tool and droce's build, makes DROCE_RUN_DIR (/tmp/TAG.XXXXXX)
# and builds the lab; exits 2 when there is no lab. Sets lab, build, ctl,
# labdir and share. The lab is looked for beside the checkout (../shared)
# and beside a worktree's parent (../../shared).
# shellcheck disable=SC2034,SC2154  # the callers use these; root is theirs
lab_setup() {  # tag
  lab=${ROCELAB:-}
  if [ -z "$lab" ]; then
    for lab in "$root/../shared/rocelab/rocelab" "$root/../../shared/rocelab/rocelab"; do [ -x "$lab" ] && break; done
  fi
  build=${BUILD:-$root/build}
  ctl="$build/apps/ctl/droce-ctl"
  labdir=${ROCELAB_DIR:-/var/tmp/rocelab}
  share=$labdir/share
  [ -x "$lab" ] || { echo "no lab tool at $lab (set ROCELAB)" >&2; exit 2; }
  # /dev/kvm exists on these machines but guests never booted under it (no
  # console output in 300 s); TCG boots in ~20 s.
  export ROCELAB_ACCEL=${ROCELAB_ACCEL:-tcg}
  DROCE_RUN_DIR=$(mktemp -d "/tmp/$1.XXXXXX")
  export DROCE_RUN_DIR
  "$lab" build >/dev/null || exit 2
}

# Boots the lab's guest unless the lab is up already; a lab this script
# booted goes down at exit (lab_down), one it found up stays up, so several
# runs (and both scripts) can share one boot of the emulated guest.
lab_up() {
  lab_booted=0
  if ! "$lab" status >/dev/null 2>&1; then
    "$lab" up 1 || exit 2
    lab_booted=1
  fi
  lab_guest_priority
}
lab_down() { [ "${lab_booted:-0}" -eq 1 ] && "$lab" down >/dev/null 2>&1; }

# The guest is a peer that must answer within the QP's timeout budget:
# ibv_rc_pingpong's hard-coded ACK timeout 14 with retry_cnt 7 gives up
# after 8 x 67 ms of silence (IBTA 9.7.6.1.3), and a TCG guest on a loaded
# 2-core host stops for longer: 0.55 s seen at load 19-24, the ACKs of the
# SEND and of all 7 retries arriving together 1-9 ms after droce gave up
# (rxe itself never gives up: it takes retry_cnt 7 as "retry forever"). Its
# threads (the vCPU and the I/O loop that moves its frames) run at nice
# -10, and droce runs with a floor under every QP's ACK timeout, 2^17 x
# 4.096 us = 0.54 s (min_ack_timeout, doc/transport.md; ConnectX-2
# firmware's floor was about as long), so the budget is 4.3 s.
lab_droce_settings=(set min_ack_timeout=17)
lab_guest_priority() {
  local pid
  pid=$(cat "$labdir/run/vm1.pid" 2>/dev/null) || return 0
  [ -d "/proc/$pid/task" ] || return 0
  # shellcheck disable=SC2046  # one TID a word
  renice -n -10 -p $(ls "/proc/$pid/task") >/dev/null
}

# Where droce0 is (LAB_LINK, default netdev):
#   netdev    droce0 is the RoCE function of a host of its own, as rxe is of the
#             guest's eth0: a network namespace (droce_ns) with a veth to the
#             lab's bridge, the kernel's address 192.168.77.3 (fd77::3) on it,
#             `droce-ctl link add droce0 netdev labh0` (doc/netdev.md). TCP and
#             RoCE use the same address.
#   af_packet the scripts' first way: droce0 on the lab's own lab0 through DPDK
#             af_packet (rxe_lab.sh: a device of its own wire; rxe_cm_lab.sh: a
#             fabric device whose droced has lab0 as its uplink), with
#             192.168.77.2 (fd77::2), which the kernel does not own; programs'
#             TCP side channels use the bridge's 192.168.77.1.
# Sets droce_ns, droce_ip, droce_ip6 (droce0's RoCE addresses) and droce_tcp
# (where a droce server's TCP side channel is reached).
lab_link=${LAB_LINK:-netdev}
case $lab_link in
  netdev) droce_ns=droce-labhost-$$ droce_ip=192.168.77.3 droce_ip6=fd77::3 droce_tcp=192.168.77.3 ;;
  af_packet) droce_ns=rocelab droce_ip=192.168.77.2 droce_ip6=fd77::2 droce_tcp=192.168.77.1 ;;
  *) echo "LAB_LINK must be netdev or af_packet" >&2; exit 2 ;;
esac

# The netdev host: its namespace, a veth whose other end is a port of the
# lab's bridge, the kernel's addresses, and droce0 bound to it with the
# settings given. The host goes with lab_netdev_host_down (the veth with it).
lab_netdev_host_up() {  # [droce-ctl link add words...]
  ip netns add "$droce_ns" || return 1
  ip -n rocelab link add labh$$ type veth peer name labh0 netns "$droce_ns" || return 1
  ip -n rocelab link set labh$$ master labbr0 up
  ip -n "$droce_ns" link set lo up
  ip -n "$droce_ns" addr add 192.168.77.3/24 dev labh0
  ip -n "$droce_ns" -6 addr add fd77::3/64 dev labh0 nodad
  ip -n "$droce_ns" link set labh0 up
  ip netns exec "$droce_ns" env DROCE_RUN_DIR="$DROCE_RUN_DIR" "$ctl" link add droce0 netdev labh0 "$@"
}
lab_netdev_host_down() {
  ip netns exec "$droce_ns" env DROCE_RUN_DIR="$DROCE_RUN_DIR" "$ctl" daemon stop >/dev/null 2>&1
  ip netns pids "$droce_ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip netns del "$droce_ns" 2>/dev/null
  ip -n rocelab link del labh$$ 2>/dev/null
}

# droce's environment (droce-ctl env) and the NAME=VALUE words given, for
# droce CMD: runs CMD in droce's namespace (droce_ns).
lab_droce_env() {  # [NAME=VALUE...]
  env_droce="$("$ctl" env | sed 's/^export //' | tr '\n' ' ')$*"
}
droce() {
  # shellcheck disable=SC2086  # env_droce is NAME=VALUE words
  ip netns exec "$droce_ns" env $env_droce timeout 120 bash -c "$1"
}

# One table row a program pair: record NAME ROLES RESULT. `summary` (each
# script's own) picks a result's figure out of a program's output; verdict
# RC GUEST_RC says pass or FAIL. Every case runs whatever the ones before
# did: a failure is recorded and shown, and the next case starts clean (the
# programs of a failed case are stopped).
results=()
record() { results+=("| $1 | $2 | $3 |"); echo "== $1 ($2): $3"; }
verdict() { [ "$1" -eq 0 ] && [ "$2" -eq 0 ] && echo pass || echo "FAIL ($1/$2)"; }

# What a side printed: a passing side's last lines and droce's QP counters
# (DROCE_STATS); a failing side's error lines, all of them (errors,
# refusals, timeouts, perftest's complaints, droce's QP counters), then its
# last lines.
lab_error_re='error|fail|unable|couldn.t|cannot|can.t|timed? ?out|invalid|refused|reject|unexpected|abort|segmentation|core dumped|^droce .* qp [0-9]+:'
show_side() {  # label rc output
  if [ "$2" -eq 0 ]; then
    echo "$3" | grep -E '^droce .* qp [0-9]+:' | sed 's/^/  | /'
    echo "$3" | tail -3
    return
  fi
  echo "  -- $1 exited $2; its error lines:"
  echo "$3" | grep -iE -- "$lab_error_re" | sed 's/^/  | /'
  echo "  -- its last lines:"
  echo "$3" | tail -6 | sed 's/^/  | /'
}

# Waits for PID, at most SECS; then stops it (SIGTERM to its children: the
# timeout wrapper droce() runs, which passes it on) and reaps it.
wait_or_stop() {  # pid secs
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    kill -0 "$1" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$1" 2>/dev/null && pkill -TERM -P "$1"
  wait "$1"
}

# droced's CM counters (rxe_cm_lab.sh; empty without a daemon).
cm_listening() { "$ctl" daemon status 2>/dev/null | sed -n 's/^cm: [0-9]* ids, \([0-9]*\) listening.*/\1/p'; }
cm_rej_no_listener() { "$ctl" daemon status 2>/dev/null | sed -n 's/^cm:.*rej_no_listener \([0-9]*\).*/\1/p'; }

# Until droce's server PID is ready, at most 60 s: its TCP side channel
# listens in the lab's netns (PORT given), else droced holds more rdma_cm
# listeners than BEFORE. False if the server died first.
droce_wait_listen() {  # pid port before
  local i
  for ((i = 0; i < 600; i++)); do
    kill -0 "$1" 2>/dev/null || return 1
    if [ -n "$2" ]; then
      ip netns exec "$droce_ns" ss -ltnH "sport = :$2" 2>/dev/null | grep -q . && return 0
    elif [ "$(cm_listening)" -gt "${3:-0}" ] 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# Attempts at a program pair that lost perftest -R's listen race (below;
# rxe_server in rxe_cm_lab.sh): under load about one attempt in five loses
# it, two in a row were seen, so three attempts were too few.
lab_attempts=5

# droce is the server, rxe the client. The guest reaches the side channel at
# droce_tcp (the kernel's address of droce's host; with LAB_LINK=af_packet
# the bridge's .1, droce's .2 being no address of the kernel's). The client
# starts once droce's server listens (droce_wait_listen).
#
# perftest -R's listen race, this direction: perftest connects twice (an
# exchange, then the data connection), and its server listens again only
# after the first, so the client's second REQ can reach droced before the
# second listen and is rejected (REJ 8, invalid service ID, as a Linux host
# answers); rxe's perftest then fails ("Failed to connect RDMA CM events")
# and droce's server waits for a peer that is gone. When droced rejected a
# REQ for want of a listener during a failed attempt, both are stopped and
# the pair runs again, at most lab_attempts times, and the result says so.
droce_server() {  # name, droce cmd, guest cmd, [tcp port]
  local attempt pid g grc rc=1 note="" rej listening
  for ((attempt = 1; attempt <= lab_attempts; attempt++)); do
    rej=$(cm_rej_no_listener)
    listening=$(cm_listening)
    droce "$2" >"$DROCE_RUN_DIR/srv.log" 2>&1 &
    pid=$!
    droce_wait_listen $pid "${4:-}" "${listening:-0}" || echo "  (droce's server not listening after 60 s)"
    g=$("$lab" exec -t 120 1 "$3" 2>&1); grc=$?
    if [ $grc -ne 0 ] && [ -n "$rej" ] && [ "$(cm_rej_no_listener)" -gt "$rej" ] && [ $attempt -lt $lab_attempts ]; then
      wait_or_stop $pid 0 >/dev/null 2>&1
      show_side "rxe client, attempt $attempt" $grc "$g"
      echo "  (attempt $attempt: the client's REQ beat the server's listen: REJ 8; once more)"
      note=" (attempt $((attempt + 1)): the $attempt before raced perftest's listen)"
      continue
    fi
    # A client that failed leaves droce's server waiting: 15 s, then it is stopped.
    if [ $grc -eq 0 ]; then wait $pid; else wait_or_stop $pid 15; fi
    rc=$?
    break
  done
  show_side "droce server" $rc "$(cat "$DROCE_RUN_DIR/srv.log")"
  show_side "rxe client" $grc "$g"
  record "$1" "droce server, rxe client" "$(verdict $rc $grc) $(echo "$g" | summary)${note}"
}

# Stops capture NAME and checks it with droce-pcap: sets pcap and check.
lab_capture_check() {  # name
  "$lab" capture stop "$1"
  pcap=$labdir/pcaps/$1.pcap
  check=$("$build/apps/pcap/droce-pcap" check "$pcap" 2>&1 | head -1)
  echo "$check"
}

# The results table, for the section.
lab_results_table() {
  echo "| program | roles | result |"
  echo "| --- | --- | --- |"
  printf '%s\n' "${results[@]}"
}

# The run's summary on stdout: the table and how many cases passed. Returns
# non-zero when a case failed (or none ran), so a lab script run as the last
# command of a job exits with its verdict.
lab_summary() {
  local passed
  passed=$(printf '%s\n' "${results[@]}" | grep -c '| pass')
  echo
  echo "Summary ($(date -u '+%Y-%m-%d %H:%M') UTC): $passed of ${#results[@]} cases passed"
  lab_results_table
  [ "${#results[@]}" -gt 0 ] && [ "$passed" -eq "${#results[@]}" ]
}

# replace_section FILE NAME replaces the lines between "<!-- NAME: begin -->"
# and "<!-- NAME: end -->" in FILE with its stdin (appending the section if
# FILE lacks it), so each script rewrites only its own part of
# doc/interop-rxe.md.
replace_section() {
  local file=$1 name=$2 body
  body=$(cat)
  [ -f "$file" ] || : >"$file"
  python3 - "$file" "$name" "$body" <<'PY'
import sys
path, name, body = sys.argv[1], sys.argv[2], sys.argv[3]
begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
text = open(path).read()
block = f"{begin}\n{body}\n{end}"
if begin in text and end in text:
    head, rest = text.split(begin, 1)
    text = head + block + rest.split(end, 1)[1]
else:
    text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
open(path, "w").write(text)
PY
}
