#!/usr/bin/env bash
# Where a netdev-bound device's CPU goes: one 64 KiB ib_send_bw -e run across
# two namespaces on a veth (MTU 9000, IPv6 GID, steering udp with
# udp_gso=on), each end under `perf record -g` (timer sampling: this VM has
# no PMU) with DROCE_STATS=1; then each end's samples in classes (kernel
# copies, the ICRC passes, the socket calls' other work, droce's own code,
# scheduling, perftest's startup clock measurement) and droce's counters.
#   profile.sh [MESSAGES=100000]   (root; env SETTINGS="KEY=VALUE ..." more
#   device settings, SIZE=65536, EVENTS=-e ("" polls), FREQ=2999, OUT=DIR keeps
#   perf.data and the logs)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$here/../../../build}
ctl=$build/apps/ctl/droce-ctl
n=${1:-100000} size=${SIZE:-65536} ev=${EVENTS--e}
[ "$(id -u)" = 0 ] || { echo "profile.sh: needs root" >&2; exit 77; }
command -v perf >/dev/null || { echo "profile.sh: perf not found" >&2; exit 77; }
A=${NETNS_PREFIX:-profile}-$$-a B=${NETNS_PREFIX:-profile}-$$-b
out=${OUT:-$(mktemp -d /tmp/netdevprofile.XXXXXX)}
mkdir -p "$out"
# shellcheck source=udp_gso_pair.sh
. "$here/udp_gso_pair.sh"
cleanup() { udp_gso_pair_cleanup; [ -n "${OUT:-}" ] || rm -rf "$out"; }
trap cleanup EXIT
udp_gso_pair_up || exit 1
ON_ENV=DROCE_STATS=1
rec() { echo "perf record -g -F ${FREQ:-2999} -o $out/$1.data --"; }
# shellcheck disable=SC2046
on $A $(rec recv) ib_send_bw -d droce0 -x 2 -m 4096 -s "$size" $ev -n "$n" >"$out/recv.log" 2>&1 &
s=$!
sleep 1.5
# shellcheck disable=SC2046
on $B $(rec send) ib_send_bw -d droce0 -x 2 -m 4096 -s "$size" $ev -n "$n" 10.0.0.1 >"$out/send.log" 2>&1
wait $s
echo "bandwidth: $(awk -v s="$size" '$1 == s {print $4 " MB/s"}' "$out/send.log" | tail -1)"
for end in recv send; do
  echo "== ${end}er: droce's counters"
  grep -E "^droce droce0: (rx [0-9]|own UDP)" "$out/$end.log" | cut -c1-420
  perf script -i "$out/$end.data" -F comm,tid,ip,sym,dso --no-inline 2>/dev/null | python3 -c '
import collections, sys
def classify(frames):
    top = frames[0] if frames else ""
    if "__vdso_gettimeofday" in top or "gettimeofday@plt" in top:
        return "perftest startup: its clock-rate measurement"
    if "_copy_to_iter" in top or "_copy_from_iter" in top:
        return "kernel copy of the payload"
    if "Crc32" in top or "Fold" in top or "memmove" in top:
        return "user copy + ICRC passes"
    call = next((f.split()[0] for f in frames if "__x64_sys_" in f), None)
    if "finish_task_switch" in top:
        return "scheduling: switched in"
    if call:
        if "sendmmsg" in call: return "sendmmsg, not the copy (the veth and the peer socket in its softirq)"
        if "recvmmsg" in call: return "recvmmsg, not the copy"
        return "other system calls (" + call.replace("__x64_sys_", "") + ")"
    if "[kernel" in top: return "kernel: interrupts, faults"
    if "libdroce" in top: return "droce user code (not the ICRC)"
    return "other user code"
samples, cur = [], None
for line in sys.stdin:
    if not line.strip():
        if cur is not None: samples.append(cur)
        cur = None
    elif not line[0].isspace():
        if cur is not None: samples.append(cur)
        cur = []
    elif cur is not None:
        parts = line.strip().split(None, 1)
        cur.append(parts[1] if len(parts) > 1 else "")
if cur is not None: samples.append(cur)
c = collections.Counter(classify(s) for s in samples)
n = sum(c.values())
startup = c.get("perftest startup: its clock-rate measurement", 0)
freq = int(sys.argv[1])
print(f"  {n} samples (~{n / freq:.2f} s of CPU, ~{(n - startup) / freq:.2f} s not in perftest startup); shares of all / of the latter:")
for k, v in c.most_common():
    rest = "" if k.startswith("perftest") else f" {100 * v / max(n - startup, 1):5.1f} %"
    print(f"  {100 * v / n:5.1f} %{rest}  {k}")
' "${FREQ:-2999}"
done
