#!/usr/bin/env python3
"""The real-process experiments through droced (tools/cc/run_fabric.sh).

  fabric.py sample CTL DEVICE PERIOD_S      t_s,queue_bytes,queue_frames of DEVICE's bottleneck
                                            (CLOCK_MONOTONIC, as droce-testpmd's stats lines) until killed
  fabric.py cross DIR RATE_MBPS KMIN KMAX    DIR/ns3.<alg>.samples.csv beside DIR/fabric.<alg>.*: cross.<alg>.png, cross.md
  fabric.py analyze DIR TAG RATE_MBPS KMIN KMAX
                                            DIR/TAG.<alg>.c<k>.log and .queue.csv -> TAG.samples.csv,
                                            TAG.summary.csv, TAG.summary.md, TAG.<alg>.png, TAG.queues.png
"""
import csv
import glob
import os
import re
import statistics
import subprocess
import sys
import time

STATS = re.compile(r"^stats client: (.*)$")
QUEUE = re.compile(r"queued (\d+) frames (\d+) B")
ALGS = ["dcqcn", "timely", "hpcc", "swift", "none"]


def sample(ctl, device, period):
    out = sys.stdout
    out.write("t_s,queue_bytes,queue_frames\n")
    nxt = time.monotonic()
    while True:
        t = time.monotonic()
        r = subprocess.run([ctl, "daemon", "status", device], capture_output=True, text=True)
        m = QUEUE.search(r.stdout)
        if m:
            out.write(f"{t:.6f},{m.group(2)},{m.group(1)}\n")
            out.flush()
        nxt += period
        time.sleep(max(0.0, nxt - time.monotonic()))


def fields(line):
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split() if "=" in kv)}


def read_flows(d, tag, alg):
    flows = []
    for path in sorted(glob.glob(os.path.join(d, f"{tag}.{alg}.c*.log")), key=lambda p: int(re.search(r"\.c(\d+)\.log$", p).group(1))):
        rows = [fields(m.group(1)) for m in (STATS.match(l) for l in open(path, errors="replace")) if m]
        final = [l for l in open(path, errors="replace") if l.startswith("client write_bw:")]
        final = fields(final[-1]) if final else {}
        msg_bytes = final["bytes"] / final["messages"] if final.get("messages") else 65536
        for r in rows:
            r["msg_bytes"] = msg_bytes
        flows.append({"rows": rows, "final": final})
    return flows


def read_queue(d, tag, alg):
    path = os.path.join(d, f"{tag}.{alg}.queue.csv")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(float(r["t_s"]), int(r["queue_bytes"])) for r in csv.DictReader(f)]


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)) if xs and any(xs) else float("nan")


def delivered(rows, a, b):
    """A flow's throughput (Gb/s) between its samples nearest to a and b: messages completed over the time."""
    xs = [r for r in rows if a - 1e-9 <= r["t_s"] <= b + 1e-9]
    if len(xs) < 2 or xs[-1]["t_s"] <= xs[0]["t_s"]:
        return None
    return (xs[-1]["messages"] - xs[0]["messages"]) * xs[0]["msg_bytes"] * 8 / (xs[-1]["t_s"] - xs[0]["t_s"]) / 1e9


def smooth(rows, t, width):
    """A flow's throughput over (t - width, t]."""
    return delivered(rows, t - width, t)


def analyze(d, tag, rate_mbps, kmin, kmax):
    rate = rate_mbps / 1000.0
    summary, samples = [], []
    algs = [a for a in ALGS if glob.glob(os.path.join(d, f"{tag}.{a}.c*.log"))]
    per_alg = {}
    for alg in algs:
        flows = read_flows(d, tag, alg)
        if not flows or any(not f["rows"] for f in flows):
            print(f"{alg}: a sender printed no stats lines", file=sys.stderr)
            continue
        queue = read_queue(d, tag, alg)
        t0 = min(f["rows"][0]["t_s"] for f in flows)
        spans = [(f["rows"][0]["t_s"], f["rows"][-1]["t_s"]) for f in flows]
        all_from = max(s for s, _ in spans) + 0.5  # every flow running, after the last join settled
        all_to = min(e for _, e in spans)
        means = []
        for f in flows:
            means.append(delivered(f["rows"], all_from, all_to) or 0.0)
        q_all = [b for t, b in queue if all_from <= t <= all_to]
        q_any = [b for t, b in queue if min(s for s, _ in spans) <= t <= max(e for _, e in spans)]
        rtts = [r["rtt_us"] for f in flows for r in f["rows"] if all_from <= r["t_s"] <= all_to and r["rtt_us"] > 0]
        # Convergence after each join / leave: from the event until every running flow's 100 ms mean
        # throughput is within +-20 % of line rate / running flows (and stays so for 100 ms).
        events = sorted([(s, "join") for s, _ in spans[1:]] + [(e, "leave") for _, e in spans[1:]])
        conv = []
        for te, kind in events:
            running = [f for f, (s, e) in zip(flows, spans) if (s <= te + 1e-3 and e > te + 0.05)]
            if kind == "leave":
                running = [f for f, (s, e) in zip(flows, spans) if s < te and e > te + 0.05]
            share = rate / max(1, len(running))
            ok_since, found = None, None
            t = te + 0.1
            end = min([e for _, e in spans if e > te + 0.05] + [te + 5])
            while t <= end:
                vals = [smooth(f["rows"], t, 0.1) for f in running]
                good = all(v is not None and abs(v - share) <= 0.2 * share for v in vals)
                if good and ok_since is None:
                    ok_since = t
                if not good:
                    ok_since = None
                if ok_since is not None and t - ok_since >= 0.1:
                    found = ok_since - te
                    break
                t += 0.02
            conv.append((kind, found))
        joins = [c for k, c in conv if k == "join"]
        leaves = [c for k, c in conv if k == "leave"]
        fmt = lambda cs: " ".join("never" if c is None else f"{c * 1000:.0f}" for c in cs)
        row = {
            "alg": alg,
            "senders": len(flows),
            "flow_mbps": " ".join(f"{m * 1000:.0f}" for m in means),
            "total_mbps": f"{sum(means) * 1000:.0f}",
            "util": f"{sum(means) / rate:.3f}",
            "jain": f"{jain(means):.4f}",
            "queue_p50_kb": f"{pct(q_all, 0.5) / 1e3:.1f}",
            "queue_p99_kb": f"{pct(q_all, 0.99) / 1e3:.1f}",
            "queue_max_kb": f"{max(q_any) / 1e3 if q_any else float('nan'):.1f}",
            "rtt_p50_us": f"{pct(rtts, 0.5):.0f}" if rtts else "-",
            "rtt_p99_us": f"{pct(rtts, 0.99):.0f}" if rtts else "-",
            "join_ms": fmt(joins),
            "leave_ms": fmt(leaves),
            "cnps_rx": int(sum(f["final"].get("cnps_rx", 0) for f in flows)),
            "retransmitted": int(sum(f["final"].get("retransmitted", 0) for f in flows)),
            "timeouts": int(sum(f["final"].get("timeouts", 0) for f in flows)),
        }
        summary.append(row)
        per_alg[alg] = (flows, queue, t0, spans)
        for k, f in enumerate(flows):
            for r in f["rows"]:
                samples.append([alg, k + 1, f"{r['t_s'] - t0:.4f}", r["interval_gbps"], r["cc_rate_gbps"],
                                int(r["cc_window"]), r["rtt_us"], int(r["cnps_rx"])])
    if not summary:
        sys.exit("nothing to analyze")
    with open(os.path.join(d, f"{tag}.samples.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["alg", "flow", "t_s", "gbps", "cc_rate_gbps", "cc_window", "rtt_us", "cnps_rx"])
        w.writerows(samples)
    with open(os.path.join(d, f"{tag}.summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summary[0].keys()))
        w.writeheader()
        w.writerows(summary)
    cols = list(summary[0].keys())
    with open(os.path.join(d, f"{tag}.summary.md"), "w") as f:
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in summary:
            f.write("| " + " | ".join(str(r[c]) for c in cols) + " |\n")
    print(open(os.path.join(d, f"{tag}.summary.md")).read())
    plot(d, tag, per_alg, rate, kmin, kmax)


def plot(d, tag, per_alg, rate, kmin, kmax):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plots", file=sys.stderr)
        return
    for alg, (flows, queue, t0, spans) in per_alg.items():
        fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
        for k, f in enumerate(flows):
            ts = [r["t_s"] - t0 for r in f["rows"]]
            sm = [smooth(f["rows"], r["t_s"], 0.1) for r in f["rows"]]
            ax[0].plot(ts, [float("nan") if v is None else v * 1000 for v in sm], lw=1.4, color=f"C{k}",
                       label=f"flow {k + 1}")
            if any(r["cc_rate_gbps"] > 0 for r in f["rows"]):
                ax[0].plot(ts, [r["cc_rate_gbps"] * 1000 for r in f["rows"]], lw=0.5, ls=":", alpha=0.6, color=f"C{k}")
            ax[2].plot(ts, [r["rtt_us"] for r in f["rows"]], lw=0.6, color=f"C{k}")
        ax[0].axhline(rate * 1000, color="k", lw=0.5)
        ax[0].set_ylabel("Mb/s (100 ms mean;\ndotted: cc rate)")
        ax[0].set_xlim(-0.5, max(e for _, e in spans) - t0 + 0.5)
        ax[0].legend(loc="upper right", fontsize=8)
        ax[0].set_title(f"{alg}: {len(flows)} droce-testpmd senders through droced's {rate * 1000:.0f} Mb/s queued port")
        ax[1].plot([t - t0 for t, _ in queue], [b / 1e3 for _, b in queue], lw=0.6, color="k")
        ax[1].axhline(kmin / 1e3, color="g", lw=0.5, ls="--", label="Kmin")
        ax[1].axhline(kmax / 1e3, color="r", lw=0.5, ls="--", label="Kmax")
        ax[1].set_ylabel("queue KB")
        ax[1].legend(loc="upper right", fontsize=8)
        ax[2].set_ylabel("last RTT sample µs")
        if any(r["rtt_us"] > 0 for f in flows for r in f["rows"]):
            ax[2].set_yscale("log")
        ax[2].set_xlabel("s since the first sender started")
        fig.tight_layout()
        fig.savefig(os.path.join(d, f"{tag}.{alg}.png"), dpi=90)
        plt.close(fig)
    fig, ax = plt.subplots(len(per_alg), 1, figsize=(10, 1.8 * len(per_alg)), sharex=True, squeeze=False)
    for i, (alg, (flows, queue, t0, spans)) in enumerate(per_alg.items()):
        ax[i][0].plot([t - t0 for t, _ in queue], [b / 1e3 for _, b in queue], lw=0.6, color="k")
        ax[i][0].axhline(kmax / 1e3, color="r", lw=0.5, ls="--")
        ax[i][0].set_ylabel(f"{alg}\nqueue KB")
        ax[i][0].set_xlim(-0.5, max(e for _, e in spans) - t0 + 0.5)
    ax[-1][0].set_xlabel("s since the first sender started")
    fig.tight_layout()
    fig.savefig(os.path.join(d, f"{tag}.queues.png"), dpi=90)
    plt.close(fig)


def cross(d, rate_mbps, kmin, kmax):
    """ns-3 (OUT/ns3.<alg>.samples.csv) beside the fabric (OUT/fabric.<alg>.*): OUT/cross.<alg>.png, cross.md."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = []
    for alg in ALGS:
        ns3_path = os.path.join(d, f"ns3.{alg}.samples.csv")
        flows = read_flows(d, "fabric", alg)
        if not os.path.exists(ns3_path) or not flows or any(not f["rows"] for f in flows):
            continue
        with open(ns3_path) as f:
            ns = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
        queue = read_queue(d, "fabric", alg)
        t0 = min(f["rows"][0]["t_s"] for f in flows)
        fig, ax = plt.subplots(2, 2, figsize=(12, 6), sharex=True, sharey="row")
        for k in range(2):
            ax[0][0].plot([r["t_us"] / 1e6 for r in ns], [r[f"goodput_gbps_{k}"] * 1000 for r in ns], color=f"C{k}",
                          label=f"flow {k + 1}")
            ax[0][0].plot([r["t_us"] / 1e6 for r in ns], [r[f"rate_gbps_{k}"] * 1000 for r in ns], color=f"C{k}",
                          ls=":", lw=0.8)
        ax[1][0].plot([r["t_us"] / 1e6 for r in ns], [r["queue_bytes"] / 1e3 for r in ns], color="k", lw=0.8)
        for k, f in enumerate(flows):
            ts = [r["t_s"] - t0 for r in f["rows"]]
            sm = [smooth(f["rows"], r["t_s"], 0.1) for r in f["rows"]]
            ax[0][1].plot(ts, [float("nan") if v is None else v * 1000 for v in sm], color=f"C{k}", label=f"flow {k + 1}")
            if any(r["cc_rate_gbps"] > 0 for r in f["rows"]):
                ax[0][1].plot(ts, [r["cc_rate_gbps"] * 1000 for r in f["rows"]], color=f"C{k}", ls=":", lw=0.8)
        ax[1][1].plot([t - t0 for t, _ in queue], [b / 1e3 for _, b in queue], color="k", lw=0.8)
        for c in range(2):
            ax[1][c].axhline(kmin / 1e3, color="g", ls="--", lw=0.5)
            ax[1][c].axhline(kmax / 1e3, color="r", ls="--", lw=0.5)
            ax[1][c].set_xlabel("s")
        ax[0][0].set_title(f"{alg} in ns-3 (20 ms samples)")
        ax[0][1].set_title(f"{alg} on the fabric (droced, real processes; 100 ms means)")
        ax[0][0].set_ylabel("Mb/s (dotted: cc rate)")
        ax[1][0].set_ylabel("queue KB")
        ax[0][0].legend(fontsize=8)
        ax[1][1].set_xlim(left=-0.2)
        fig.tight_layout()
        fig.savefig(os.path.join(d, f"cross.{alg}.png"), dpi=80)
        plt.close(fig)
        # Steady state: the middle half of the ns-3 run and of the fabric's.
        end_ns = max(r["t_us"] for r in ns if any(r[f"goodput_gbps_{k}"] > 0 for k in range(2))) / 1e6
        ns_mid = [r for r in ns if end_ns * 0.25 <= r["t_us"] / 1e6 <= end_ns * 0.75]
        end_f = min(f["rows"][-1]["t_s"] for f in flows) - t0
        f_q = [b for t, b in queue if end_f * 0.25 <= t - t0 <= end_f * 0.75]
        f_rates = [delivered(f["rows"], t0 + end_f * 0.25, t0 + end_f * 0.75) or 0 for f in flows]
        ns_rates = [statistics.mean(r[f"goodput_gbps_{k}"] for r in ns_mid) for k in range(2)] if ns_mid else [0, 0]
        rows.append({
            "alg": alg,
            "ns3_flow_mbps": " ".join(f"{x * 1000:.0f}" for x in ns_rates),
            "fabric_flow_mbps": " ".join(f"{x * 1000:.0f}" for x in f_rates),
            "ns3_queue_p50_kb": f"{pct([r['queue_bytes'] for r in ns_mid], 0.5) / 1e3:.0f}",
            "fabric_queue_p50_kb": f"{pct(f_q, 0.5) / 1e3:.0f}",
            "ns3_queue_max_kb": f"{max(r['queue_bytes'] for r in ns) / 1e3:.0f}",
            "fabric_queue_max_kb": f"{max((b for _, b in queue), default=0) / 1e3:.0f}",
        })
    if rows:
        cols = list(rows[0].keys())
        with open(os.path.join(d, "cross.md"), "w") as f:
            f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
            for r in rows:
                f.write("| " + " | ".join(r[c] for c in cols) + " |\n")
        print(open(os.path.join(d, "cross.md")).read())


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "sample":
        try:
            sample(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        except KeyboardInterrupt:
            pass
    elif len(sys.argv) == 6 and sys.argv[1] == "cross":
        cross(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) == 7 and sys.argv[1] == "analyze":
        analyze(sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
    else:
        sys.exit(__doc__)
