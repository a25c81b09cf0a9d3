# shellcheck shell=bash
# Sourced by the lab scripts (rxe_lab.sh, rxe_cm_lab.sh): what both do to
# start the workplace lab (../shared/rocelab), run a program pair and record
# its result, check the capture, and rewrite their section of the results
# file. The caller sets `root` (the repository) first.

# Finds the lab tool and droce's build, makes DROCE_RUN_DIR (/tmp/TAG.XXXXXX)
# and builds the lab; exits 2 when there is no lab. Sets lab, build, ctl,
# labdir and share.
# shellcheck disable=SC2034  # the callers use these
lab_setup() {  # tag
  lab=${ROCELAB:-$root/../shared/rocelab/rocelab}
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

# droce's environment (droce-ctl env) and the NAME=VALUE words given, for
# droce CMD: runs CMD in the lab's netns, where droce's port is.
lab_droce_env() {  # [NAME=VALUE...]
  env_droce="$("$ctl" env | sed 's/^export //' | tr '\n' ' ')$*"
}
droce() {
  # shellcheck disable=SC2086  # env_droce is NAME=VALUE words
  ip netns exec rocelab env $env_droce timeout 120 bash -c "$1"
}

# One table row a program pair: record NAME ROLES RESULT. `summary` (each
# script's own) picks a result's figure out of a program's output; verdict
# RC GUEST_RC says pass or FAIL.
results=()
record() { results+=("| $1 | $2 | $3 |"); echo "== $1 ($2): $3"; }
verdict() { [ "$1" -eq 0 ] && [ "$2" -eq 0 ] && echo pass || echo "FAIL ($1/$2)"; }

# droce is the server, rxe the client. The guest reaches the side channel at
# the netns' bridge address (.1): .2 is droce's RoCE address, which the kernel
# does not own (droce answers its ARP). droce gets `lab_server_start` seconds
# to listen; the last `lab_tail` lines of each side's output are shown.
lab_server_start=3
lab_tail=4
droce_server() {  # name, droce cmd, guest cmd
  droce "$2" >"$DROCE_RUN_DIR/srv.log" 2>&1 &
  local pid=$!
  sleep "$lab_server_start"
  local g; g=$("$lab" exec -t 120 1 "$3" 2>&1); local grc=$?
  wait $pid; local rc=$?
  tail -"$lab_tail" "$DROCE_RUN_DIR/srv.log"; echo "$g" | tail -3
  record "$1" "droce server, rxe client" "$(verdict $rc $grc) $(echo "$g" | summary)"
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
