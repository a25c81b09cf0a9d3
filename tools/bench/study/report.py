#!/usr/bin/env python3
"""Turns tools/bench/study/results.csv into results.md and PNG plots: each of
the study's findings reported as held / not held / not evaluated, with the
numbers, and the comparison table against same-run kernel TCP."""
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            try:
                r["value"] = float(r["value"])
            except ValueError:
                r["value"] = None  # a failed point stays visible as such
            rows.append(r)
    return rows


def pick(rows, finding, variant=None, program=None, size=None, metric=None):
    for r in rows:
        if r["finding"] != finding:
            continue
        if variant is not None and r["variant"] != variant:
            continue
        if program is not None and r["program"] != program:
            continue
        if size is not None and int(r["bytes"]) != size:
            continue
        if metric is not None and r["metric"] != metric:
            continue
        return r["value"]
    return None


def fmt(v, unit=""):
    return "failed" if v is None else f"{v:g}{unit}"


def main():
    rows = load(os.path.join(HERE, "results.csv"))
    out = []
    verdicts = []

    # 1. Busy polling beats events up to ~4 KiB; they converge from ~16 KiB.
    sizes = [2, 64, 1024, 4096, 16384, 65536]
    t = ["| bytes | poll (µs) | event (µs) | event/poll |", "| --- | --- | --- | --- |"]
    small_ok, large_conv = True, True
    for s in sizes:
        p, e = pick(rows, "1", "poll", size=s), pick(rows, "1", "event", size=s)
        ratio = e / p if p and e else None
        t.append(f"| {s} | {fmt(p)} | {fmt(e)} | {fmt(round(ratio, 2) if ratio else None)} |")
        if ratio is None:
            small_ok = large_conv = False
        elif s <= 4096 and ratio <= 1.0:
            small_ok = False
        elif s >= 16384 and ratio > 1.25:
            large_conv = False
    held = small_ok and large_conv
    verdicts.append(("1. Busy polling beats events up to ~4 KiB; they converge from ~16 KiB",
                     "held" if held else "not held",
                     "polling faster at every size ≤ 4 KiB: %s; within 25%% from 16 KiB: %s" % (small_ok, large_conv)))
    out += ["## 1. Busy polling vs event notification (SEND/RECV ping, typical one-way latency)", ""] + t + [""]

    # 2. Inline lowers latency below the cache-line size.
    t = ["| bytes | not inline (µs) | inline (µs) |", "| --- | --- | --- |"]
    below = []
    for s in [8, 32, 64, 128, 256]:
        n, i = pick(rows, "2", "no_inline", size=s), pick(rows, "2", "inline", size=s)
        t.append(f"| {s} | {fmt(n)} | {fmt(i)} |")
        if s < 64 and n and i:
            below.append(i < n)
    held = bool(below) and all(below)
    verdicts.append(("2. Inline data lowers one-way time below the cache-line size",
                     "held" if held else "not held",
                     "inline faster at " + ", ".join(str(x) for x in below)))
    out += ["## 2. Inline vs not (SEND/RECV ping)", ""] + t + [""]

    # 3. Throughput saturates with 3-8 outstanding buffers.
    t = ["| outstanding | Gb/s |", "| --- | --- |"]
    series = []
    for o in [1, 2, 4, 8, 16, 32, 64, 128]:
        v = pick(rows, "3", f"outstanding_{o}", metric="gbps")
        series.append((o, v))
        t.append(f"| {o} | {fmt(v)} |")
    vals = [v for _, v in series if v is not None]
    best = max(vals) if vals else None
    sat = next((o for o, v in series if v is not None and best and v >= 0.9 * best), None)
    held = sat is not None and sat <= 8
    verdicts.append(("3. Throughput saturates with 3–8 outstanding buffers",
                     "held" if held else "not held",
                     f"90% of the best ({fmt(best, ' Gb/s')}) first reached at {sat} outstanding"))
    out += ["## 3. Outstanding buffers (4 KiB RDMA WRITE blast)", ""] + t + [""]

    # 4. Posting one WR at a time beats lists.
    t = ["| WRs per post | M msg/s (64 B WRITE) |", "| --- | --- |"]
    rates = {}
    for l in [1, 4, 16]:
        rates[l] = pick(rows, "4", f"post_list_{l}", metric="mmsgps")
        t.append(f"| {l} | {fmt(rates[l])} |")
    held = rates[1] is not None and all(v is None or rates[1] >= v for v in rates.values())
    verdicts.append(("4. Posting WRs one at a time beats collecting them into lists",
                     "held" if held else "not held",
                     ", ".join(f"list {l}: {fmt(v)}" for l, v in rates.items()) + " M msg/s"))
    out += ["## 4. One WR per post vs WR lists", ""] + t + [""]

    # 5. Unsignaled WRITE + READ ping: perftest cannot express it.
    verdicts.append(("5. Unsignaled WRITE followed by READ (ping) lowers one-way time", "not evaluated",
                     "perftest has no such ping; needs the study's own tool (not written yet)"))

    # 6. Opcodes matter little for small messages and converge at large ones.
    t = ["| program | 64 B M msg/s | 1 MiB Gb/s |", "| --- | --- | --- |"]
    small, large = [], []
    for p in ["ib_send_bw", "ib_write_bw", "ib_read_bw"]:
        s_ = pick(rows, "6", "opcode", program=p, size=64, metric="mmsgps")
        l_ = pick(rows, "6", "opcode", program=p, size=1048576, metric="gbps")
        small.append(s_)
        large.append(l_)
        t.append(f"| {p} | {fmt(s_)} | {fmt(l_)} |")
    lat_rows = [(p, pick(rows, "6", "opcode", program=p, size=2)) for p in ["ib_send_lat", "ib_write_lat", "ib_read_lat"]]
    t += ["", "| ping | 2 B typical one-way (µs) |", "| --- | --- |"] + [f"| {p} | {fmt(v)} |" for p, v in lat_rows]
    ok_l = all(v is not None for v in large) and max(large) <= 1.3 * min(large)
    ok_s = all(v is not None for v in small) and max(small) <= 2.0 * min(small)
    verdicts.append(("6. Opcode matters little for small messages; all converge for large ones",
                     "held" if ok_l and ok_s else "not held",
                     f"64 B spread within 2x: {ok_s}; 1 MiB within 30%: {ok_l}"))
    out += ["## 6. Opcodes", ""] + t + [""]

    # Other knobs.
    t = ["| knob | value | result |", "| --- | --- | --- |"]
    for f, v, m in [("signal", "every_1", "mmsgps"), ("signal", "every_16", "mmsgps"),
                    ("mtu", "mtu_1024", "gbps"), ("mtu", "mtu_4096", "gbps")]:
        t.append(f"| {f} | {v} | {fmt(pick(rows, f, v, metric=m))} {'M msg/s' if m == 'mmsgps' else 'Gb/s'} |")
    out += ["## Signalling and MTU", ""] + t + [""]

    # Comparison with same-run TCP.
    tcp_lat = pick(rows, "tcp", "tcp_lat")
    tcp_bw = pick(rows, "tcp", "tcp_bw", metric="gbps")
    tcp_rate = pick(rows, "tcp", "tcp_bw", metric="mmsgps")
    comp = ["| metric | droce | kernel TCP (same run) |", "| --- | --- | --- |",
            f"| 2 B latency, one-way (µs) | {fmt(pick(rows, '1', 'poll', size=2))} (SEND ping) | {fmt(tcp_lat)} |",
            f"| 64 B message rate (M msg/s) | {fmt(pick(rows, '6', 'opcode', program='ib_write_bw', size=64, metric='mmsgps'))} | {fmt(tcp_rate)} |",
            f"| 1 MiB WRITE bandwidth (Gb/s) | {fmt(pick(rows, '6', 'opcode', program='ib_write_bw', size=1048576, metric='gbps'))} | 64 KiB: {fmt(tcp_bw)} |"]

    md = ["# The RDMA programming-decision study on droce", "",
          "Generated by `tools/bench/study/report.py` from `results.csv` (`bash tools/bench/study/run.sh`).",
          "Two droce devices joined by memif on a 2-core VM; perftest unmodified. Noisy machine: compare within",
          "a run. CPU seconds per side are in `results.csv`.", "",
          "## Findings", "", "| finding | verdict | numbers |", "| --- | --- | --- |"]
    md += [f"| {a} | **{b}** | {c} |" for a, b, c in verdicts]
    md += ["", "## droce beside kernel TCP", ""] + comp + [
        "", "Published hardware (ConnectX) and rxe figures are not in this table yet: they must come with a",
        "citation, and none was verified in this run.", ""] + out
    with open(os.path.join(HERE, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        ax[0].plot(sizes, [pick(rows, "1", "poll", size=s) or float("nan") for s in sizes], "o-", label="poll")
        ax[0].plot(sizes, [pick(rows, "1", "event", size=s) or float("nan") for s in sizes], "s-", label="event")
        ax[0].set_xscale("log", base=2); ax[0].set_xlabel("bytes"); ax[0].set_ylabel("one-way µs"); ax[0].legend()
        ax[0].set_title("SEND ping: polling vs events")
        ax[1].plot([o for o, _ in series], [v or float("nan") for _, v in series], "o-")
        ax[1].set_xscale("log", base=2); ax[1].set_xlabel("outstanding"); ax[1].set_ylabel("Gb/s")
        ax[1].set_title("4 KiB WRITE blast")
        fig.tight_layout()
        fig.savefig(os.path.join(HERE, "study.png"), dpi=100)
    except ImportError:
        print("matplotlib missing: no plot", file=sys.stderr)
    print(open(os.path.join(HERE, "results.md")).read())


if __name__ == "__main__":
    main()
