#!/usr/bin/python3
"""Plots tools/bench/loss/results.csv (run.sh) into two PNGs:
goodput relative to loss-free, and p99 completion time of a 64 KiB write
relative to loss-free, against loss, one line per setup/mode/timeout.
Needs Debian's python3-matplotlib (hence /usr/bin/python3).
  plot.py RESULTS.csv OUT_PREFIX   -> OUT_PREFIX-goodput.png, OUT_PREFIX-p99.png
and prints the results as a Markdown table (every row, unsupported ones too).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def pivot(all_rows, metric, title):
    """One line per loss pattern, one column per setup/mode/timeout."""
    keys = []
    for r in all_rows:
        k = (r["setup"], r["mode"], r["timeout"])
        if k not in keys:
            keys.append(k)
    pats = []
    for r in all_rows:
        p = (r["pattern"], r["loss_pct"])
        if p not in pats:
            pats.append(p)
    cell = {}
    for r in all_rows:
        v = r[metric] if r["status"].startswith("ok") and r[metric] else ("n/a" if r["status"] == "unsupported" else r["status"])
        cell[(r["pattern"], r["loss_pct"], r["setup"], r["mode"], r["timeout"])] = v
    print(f"**{title}**\n")
    print("| loss % | " + " | ".join(f"{s} {m}" + (f" t{t}" if t else "") for s, m, t in keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    for pat, loss in pats:
        label = loss + (" (bursty GE)" if pat == "gilbert" else "")
        print(f"| {label} | " + " | ".join(cell.get((pat, loss) + k, "") for k in keys) + " |")
    print()


def table(all_rows):
    cols = ["setup", "mode", "pattern", "loss_pct", "timeout", "goodput_gbps", "goodput_vs_lossless", "p50_us",
            "p99_us", "p99_vs_lossless", "retransmitted_pct", "timeouts", "dropped", "status"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for r in all_rows:
        print("| " + " | ".join(r[c] for c in cols) + " |")


def main():
    all_rows = list(csv.DictReader(open(sys.argv[1])))
    pivot(all_rows, "goodput_vs_lossless", "goodput / loss-free goodput")
    pivot(all_rows, "p99_vs_lossless", "p99 completion of one 64 KiB WRITE / loss-free p99")
    pivot(all_rows, "goodput_gbps", "goodput, Gb/s")
    pivot(all_rows, "p99_us", "p99 completion of one 64 KiB WRITE, us")
    print("**every row of results.csv**\n")
    table(all_rows)
    rows = [r for r in all_rows if r["status"].startswith("ok")]
    prefix = sys.argv[2]
    losses = sorted({float(r["loss_pct"]) for r in rows if r["pattern"] == "random"})
    xpos = {p: i for i, p in enumerate(losses)}
    ge_x = len(losses) + 0.5
    series = {}
    for r in rows:
        key = (r["setup"], r["mode"], r["timeout"])
        series.setdefault(key, []).append(r)
    names = {"inmem": "in-memory wire", "fabric": "fabric (droced)", "tcp": "kernel TCP (veth)"}
    styles = {"gbn": "-", "sr": "--", "tcp": ":"}
    for metric, ylabel, fname, logy in (
        ("goodput_vs_lossless", "goodput / loss-free goodput", "goodput", False),
        ("p99_vs_lossless", "p99 completion of a 64 KiB write / loss-free p99", "p99", True),
    ):
        fig, ax = plt.subplots(figsize=(8, 5))
        for (setup, mode, timeout), rs in sorted(series.items()):
            label = f"{names.get(setup, setup)}: {mode}" + (f", timeout {timeout}" if timeout else "")
            pts = sorted((xpos[float(r["loss_pct"])], float(r[metric])) for r in rs
                         if r["pattern"] == "random" and r[metric])
            if not pts:
                continue
            line, = ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(mode, "-"), marker="o",
                            label=label)
            ge = [float(r[metric]) for r in rs if r["pattern"] == "gilbert" and r[metric]]
            if ge:
                ax.plot([ge_x], ge, marker="s", linestyle="none", color=line.get_color())
        ticks = list(range(len(losses))) + [ge_x]
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{p:g}" for p in losses] + ["1 bursty\n(GE)"])
        ax.set_xlabel("packet loss, % (both directions)")
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
            ax.axhline(3, color="grey", linewidth=0.8)
            ax.text(0, 3.3, "goal for SR at 1 %: <= 3x", color="grey", fontsize=8)
        else:
            top = max([1.1] + [float(r[metric]) * 1.05 for r in rows if r[metric]])
            ax.set_ylim(0, top)
            ax.axhline(0.9, color="grey", linewidth=0.8)
            ax.axhline(0.7, color="grey", linewidth=0.8)
            ax.text(len(losses) - 0.6, 0.915, "SR goals: 90 % at 1 %, 70 % at 5 %", color="grey", fontsize=8,
                    ha="right")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"64 KiB RDMA WRITEs against packet loss: {fname}")
        fig.tight_layout()
        fig.savefig(f"{prefix}-{fname}.png", dpi=100)


if __name__ == "__main__":
    main()
