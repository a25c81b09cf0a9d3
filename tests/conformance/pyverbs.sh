#!/usr/bin/env bash
# rdma-core v44's own conformance suite (pyverbs) on a droce device, with the
# unmodified runner in ../shared/conformance: one test per process with a time
# limit. Passes when nothing failed, hung or crashed, and every test that
# passes on Linux rxe (../shared/conformance/rxe-6.1-pyverbs-v44.txt) passes
# here too, except those listed in waits-for-ud.txt.
#   tests/conformance/pyverbs.sh [PER_TEST_SECONDS=30] [TEST_ID_REGEX=.]
# Env: BUILD (default ./build), CONFORMANCE_DIR (default ../shared/conformance
# beside the checkout), OUT (result folder, default a temporary one),
# DEVICE=null (a device on DPDK's null port: the QPs of one process meet in
# its internal loopback) or DEVICE=fabric (a device of the host fabric:
# every test process attaches to droced).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
conf=${CONFORMANCE_DIR:-$root/../shared/conformance}
per=${1:-30}; filt=${2:-.}
[ -x "$conf/run-pyverbs.sh" ] || { echo "FAIL: no conformance suite at $conf"; exit 1; }
/usr/bin/python3 -c 'import pyverbs' 2>/dev/null || { echo "FAIL: python3-pyverbs is not installed"; exit 1; }
run=$(mktemp -d /tmp/droce-pyverbs.XXXXXX)
out=${OUT:-$run/results}
export DROCE_RUN_DIR=$run
ctl="$build/apps/ctl/droce-ctl"
cleanup() { "$ctl" daemon stop >/dev/null 2>&1; "$ctl" link del droce0 >/dev/null 2>&1; rm -rf "$run"; }
trap cleanup EXIT
# Everything the suite sends is between QPs of this one device (internal
# loopback). GID 0 (link-local) is the suite's default.
case ${DEVICE:-null} in
  null) wire=(type vdev vdev net_null0) ;;
  fabric) wire=() ;;
  *) echo "FAIL: DEVICE must be null or fabric"; exit 1 ;;
esac
"$ctl" link add droce0 "${wire[@]}" ip 10.0.0.1 ip fd00::1 >/dev/null || { echo "FAIL: link add"; exit 1; }
eval "$("$ctl" env)"
# The runner counts a test as passed by its "... ok" line; a test that prints
# (test_fork does, with -v) splits that line when stdout is unbuffered.
env -u PYTHONUNBUFFERED bash "$conf/run-pyverbs.sh" droce0 "$per" "$filt" "$out"
summary=$(tail -1 "$out/summary.txt" 2>/dev/null)
bad=$(awk '$1!="ok" && $1!="skip"' "$out/summary.txt")
missing=""
while read -r result id; do
  [ "$result" = ok ] || continue
  grep -qE -- "$filt" <<<"$id" || continue
  grep -qxF "$id" "$here/waits-for-ud.txt" && continue
  grep -qxF "ok $id" "$out/summary.txt" || missing+="  $id ($(grep -F " $id" "$out/summary.txt" | cut -d' ' -f1))"$'\n'
done < <(grep -vE '^#' "$conf/rxe-6.1-pyverbs-v44.txt")
echo "skips by reason:"; sed 's/^/  /' "$out/skips.txt"
rc=0
if [ -n "$bad" ]; then echo "FAIL: tests that failed, hung or crashed:"; echo "$bad" | sed 's/^/  /'
  for id in $(awk '$1!="ok" && $1!="skip"{print $2}' "$out/summary.txt"); do echo "--- $id"; tail -20 "$out/$id.log"; done
  rc=1; fi
if [ -n "$missing" ]; then echo "FAIL: passes on rxe but not here:"; printf '%s' "$missing"; rc=1; fi
rxe_ok=$(grep -c '^ok' "$conf/rxe-6.1-pyverbs-v44.txt")
both=$(grep -vE '^#' "$conf/rxe-6.1-pyverbs-v44.txt" | awk '$1=="ok"{print "ok "$2}' | grep -cxFf - "$out/summary.txt")
echo "of rxe's $rxe_ok passing tests, $both pass on droce; $(grep -cvE '^#' "$here/waits-for-ud.txt") wait for UD"
[ $rc -eq 0 ] && echo "PASS pyverbs conformance (${DEVICE:-null} device)" || echo "FAIL pyverbs conformance (${DEVICE:-null} device)"
exit $rc
