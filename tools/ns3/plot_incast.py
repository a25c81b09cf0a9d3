#!/usr/bin/env python3
"""Plots of the ns-3 incast experiments (tools/ns3/run_incast.sh).

Reads OUT/results.csv and OUT/N<n>_<cc>.samples.csv and writes into OUT:
  queue_N<n>.png        the bottleneck's queue over time, one line per algorithm
  rates_N4.png          each flow's congestion-control rate and goodput, one panel per algorithm
  fct_queue_vs_n.png    the last flow's completion time (against the ideal) and the mean/max queue, by N
and summary.md, the table of results.csv.
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CCS = ["none", "dcqcn", "timely", "hpcc", "swift"]
COLORS = {"none": "black", "dcqcn": "tab:blue", "timely": "tab:orange", "hpcc": "tab:green", "swift": "tab:red"}


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def samples(out, n, cc):
    rows = read_csv(os.path.join(out, f"N{n}_{cc}.samples.csv"))
    return {k: [float(r[k]) for r in rows] for k in rows[0].keys()}


def plot_queues(out, ns):
    for n in ns:
        fig, ax = plt.subplots(figsize=(8, 4))
        for cc in CCS:
            s = samples(out, n, cc)
            ax.plot(s["t_us"], [q / 1e6 for q in s["queue_bytes"]], label=cc, color=COLORS[cc], lw=1)
        ax.set_xlim(0, 3000)
        ax.set_xlabel("time (us, first 3 ms)")
        ax.set_ylabel("bottleneck queue (MB)")
        ax.set_title(f"ns-3 incast {n}:1 at 100 Gb/s, 2 MB per sender, droce transport")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"queue_N{n}.png"), dpi=90)
        plt.close(fig)


def plot_rates(out, n):
    fig, axes = plt.subplots(len(CCS), 1, figsize=(8, 2.2 * len(CCS)), sharex=True)
    for ax, cc in zip(axes, CCS):
        s = samples(out, n, cc)
        for i in range(n):
            ax.plot(s["t_us"], s[f"rate_gbps_{i}"], lw=1, label=f"rate {i}")
            ax.plot(s["t_us"], s[f"goodput_gbps_{i}"], lw=0.7, ls=":", label=f"goodput {i}")
        ax.set_ylabel(f"{cc}\nGb/s")
        ax.set_ylim(0, 105)
        ax.set_xlim(0, 3000)
    axes[0].legend(ncol=4, fontsize=6)
    axes[-1].set_xlabel("time (us, first 3 ms)")
    fig.suptitle(f"ns-3 incast {n}:1: each flow's cc rate (solid) and goodput (dotted)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, f"rates_N{n}.png"), dpi=90)
    plt.close(fig)


def plot_vs_n(out, rows):
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for cc in CCS:
        r = sorted((x for x in rows if x["cc"] == cc), key=lambda x: int(x["senders"]))
        n = [int(x["senders"]) for x in r]
        a.plot(n, [float(x["end_us"]) / float(x["ideal_us"]) for x in r], "o-", label=cc, color=COLORS[cc])
        b.plot(n, [float(x["queue_mean"]) / 1e3 for x in r], "o-", label=f"{cc} mean", color=COLORS[cc])
        b.plot(n, [float(x["queue_max"]) / 1e3 for x in r], "x--", label=f"{cc} max", color=COLORS[cc], lw=0.7)
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("senders")
    a.set_ylabel("last completion / ideal (all bytes at line rate)")
    a.legend()
    b.set_xscale("log", base=2)
    b.set_yscale("log")
    b.set_xlabel("senders")
    b.set_ylabel("bottleneck queue (KB)")
    b.legend(fontsize=6, ncol=2)
    fig.suptitle("ns-3 incast at 100 Gb/s, droce transport, paper defaults")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "fct_queue_vs_n.png"), dpi=90)
    plt.close(fig)


def summary(out, rows):
    cols = ["senders", "cc", "all_done", "end_us", "ideal_us", "fct_p50_us", "queue_mean", "queue_p99",
            "queue_max", "drops", "marks", "int_stamped"]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in rows:
            f.write("| " + " | ".join(r.get(c, "") for c in cols) + " |\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "doc/cc-experiments/ns3"
    rows = read_csv(os.path.join(out, "results.csv"))
    ns = sorted({int(r["senders"]) for r in rows})
    plot_queues(out, ns)
    if 4 in ns:
        plot_rates(out, 4)
    plot_vs_n(out, rows)
    summary(out, rows)


if __name__ == "__main__":
    main()
