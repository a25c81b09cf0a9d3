#!/usr/bin/env bash
# Alternating fabric passes (doc/loss-experiment.md "Running it"): per pass, one
# fabric.sh round (`sr`, stream phase unless LV_LAT is set) per setting, the
# settings' order reversed every other pass; one CSV row per loss point with
# the host's load and, where the tree has them, the repair-time and queue
# counters (both devices' DROCE_STATS device lines, droced's receive bursts).
# A setting is TREE:CAP (TREE a build directory; CAP sr_max_inflight_packets,
# or "-" for the device default).
#   sweep.sh RUN PASSES LOSSES SETTING... >> out.csv
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
run_name=$1 passes=$2 losses=$3; shift 3
settings=("$@")
echo "run,pass,tree,cap,load1,loss_pct,goodput_gbps,p50_us,p99_us,max_us,tx,retransmitted,timeouts,dropped,status,srtt_us,rtt_min_us,inflight_at_rtt,hole_to_resend_n,hole_to_resend_avg_us,hole_to_resend_max_us,resend_to_ack_n,resend_to_ack_avg_us,resend_to_ack_ge512,resend_to_ack_ge2048,sender_rx_full_pct,receiver_rx_full_pct,switch_rx_full_from_sender_pct"
for ((pass = 1; pass <= passes; pass++)); do
  order=("${settings[@]}")
  if ((pass % 2 == 0)); then
    order=(); for ((i = ${#settings[@]} - 1; i >= 0; i--)); do order+=("${settings[$i]}"); done
  fi
  for s in "${order[@]}"; do
    tree=${s%%:*} cap=${s##*:}
    load=$(cut -d' ' -f1 /proc/loadavg)
    set_kv=""; [ "$cap" != "-" ] && set_kv="sr_max_inflight_packets=$cap"
    err=$(mktemp)
    KEEP_LOGS=1 LV_LAT=${LV_LAT:-0} SR_SET="$set_kv" DROCE_BUILD_DIR=$tree \
      bash "$here/fabric.sh" sr "$losses" "${SECS:-2}" 14 8 1 >/dev/null 2>"$err"
    dir=$(sed -n 's/^fabric.sh: logs kept in //p' "$err" | tail -1)
    rm -f "$err"
    [ -n "$dir" ] && [ -f "$dir/sr/raw" ] || { echo "$run_name,$pass,$tree,$cap,$load,,,,,,,,,,failed" ; continue; }
    python3 - "$dir/sr" "$run_name" "$pass" "$tree" "$cap" "$load" <<'PY'
import re, sys
d, run, pas, tree, cap, load = sys.argv[1:]
raw = [l.split() for l in open(f"{d}/raw")]
def kv(line, key):
    m = re.search(r"\b" + key + r" (\d+)", line)
    return int(m.group(1)) if m else None
dev = {}
try:
    for l in open(f"{d}/devlines"):
        f = l.split(None, 2)
        dev.setdefault((f[0], f[1]), l)
except FileNotFoundError:
    pass
srtt = {}
try:
    for l in open(f"{d}/qplines"):
        if " sr:" in l:
            srtt.setdefault(l.split()[0], kv(l, "srtt_us"))
except FileNotFoundError:
    pass
# droced: "process P left droce0 ...: rx N pkts, ..., rx_bursts B (full F)", one per measurement, in order.
sw = []
try:
    for l in open(f"{d}/droced.log"):
        m = re.search(r"left (droce\d) .*rx_bursts (\d+) \(full (\d+)\)", l)
        if m and m.group(1) == "droce0":
            sw.append(100 * int(m.group(3)) / max(1, int(m.group(2))))
except FileNotFoundError:
    pass
pct = lambda a, b: "" if a is None or not b else f"{100 * a / b:.1f}"
avg = lambda a, b: "" if a is None or not b else f"{a / b:.1f}"
for i, r in enumerate(raw):
    p = r[0]
    c, s = dev.get((p, "client"), ""), dev.get((p, "server"), "")
    rows = [run, pas, tree, cap, load] + r[:10] + [
        "" if srtt.get(p) is None else str(srtt[p]),
        "" if kv(c, "sr_rtt_min_us") is None else str(kv(c, "sr_rtt_min_us")),
        avg(kv(c, "sr_rtt_inflight_sum"), kv(c, "sr_rtt_samples")),
        "" if kv(c, "sr_repair_waits") is None else str(kv(c, "sr_repair_waits")),
        avg(kv(c, "sr_repair_wait_us"), kv(c, "sr_repair_waits")),
        "" if kv(c, "sr_repair_wait_max_us") is None else str(kv(c, "sr_repair_wait_max_us")),
        "" if kv(c, "sr_repairs_timed") is None else str(kv(c, "sr_repairs_timed")),
        avg(kv(c, "sr_repair_us"), kv(c, "sr_repairs_timed")),
        "" if kv(c, "sr_repair_ge512us") is None else str(kv(c, "sr_repair_ge512us")),
        "" if kv(c, "sr_repair_ge2048us") is None else str(kv(c, "sr_repair_ge2048us")),
        pct(kv(c, "rx_bursts_full"), kv(c, "rx_bursts")),
        pct(kv(s, "rx_bursts_full"), kv(s, "rx_bursts")),
        f"{sw[i]:.1f}" if i < len(sw) else "",
    ]
    print(",".join(rows))
PY
    # A failed measurement keeps its logs (qplines, devlines, droced.log, the pairs' stderr).
    if grep -qv ' ok$' "$dir/sr/raw"; then echo "sweep.sh: $s pass $pass failed, logs in $dir" >&2; else rm -rf "$dir"; fi
  done
done
