#!/usr/bin/env python3
"""Plots and goal table for the DCQCN experiments (tools/cc/run_experiments.sh).

Reads results.csv (one row per droce-ccsim run) and the seed-1 time series,
writes one PNG per experiment (per-flow throughput and queue over time), a
Jain/utilization-vs-N plot, a DCQCN off-vs-on queue plot, and summary.md:
the per-experiment table over seeds and each goal (doc/cc-experiments.md)
as met / not met.
"""
import argparse
import csv
import os
import statistics
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KMAX = 200000  # the experiments' Kmax, for the off-vs-on plot
FAIR_TOL = 0.10


def load_results(path):
    exps = OrderedDict()
    with open(path) as f:
        for row in csv.DictReader(f):
            exps.setdefault(row["experiment"], []).append(row)
    return exps


GOAL_RED = (5000, 200000, 0.01)  # the goals' switch: Kmin, Kmax, Pmax


def is_variant(row):
    """A run whose configuration is not the goals' (other RED settings or overridden DCQCN knobs)."""
    red = (int(row["kmin"]), int(row["kmax"]), float(row["pmax"]))
    return red != GOAL_RED or row.get("set", "none") != "none"


def dcqcn_label(row):
    if row["dcqcn"] == "off":
        return "off"
    knobs = row.get("set", "none")
    return row["profile"] if knobs == "none" else "%s + %s" % (row["profile"], knobs.replace("+", ", "))


def num(v):
    return float("inf") if v == "never" else float(v)


def load_series(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    t = [float(r["t_us"]) / 1000 for r in rows]  # ms
    q = [int(r["queue_bytes"]) / 1000 for r in rows]  # KB
    n = sum(1 for k in rows[0] if k.startswith("thr_gbps_"))
    thr = [[float(r["thr_gbps_%d" % i]) for r in rows] for i in range(n)]
    rc = [[float(r["rc_gbps_%d" % i]) for r in rows] for i in range(n)]
    return t, q, thr, rc


def window_mean(xs, w):
    """Mean over consecutive non-overlapping windows of w samples (as the convergence test)."""
    return [sum(xs[i:i + w]) / w for i in range(0, len(xs) - w + 1, w)]


def plot_experiment(name, rows, series_dir, out_dir):
    path = os.path.join(series_dir, name + ".csv")
    if not os.path.exists(path):
        return None
    t, q, thr, rc = load_series(path)
    r = rows[0]
    n = int(r["senders"])
    rate = float(r["rate_gbps"])
    w = 10  # 10 x 100 us samples = the 1 ms convergence windows
    tw = [t[i + w - 1] for i in range(0, len(t) - w + 1, w)]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for i in range(n):
        ax1.plot(tw, window_mean(thr[i], w), lw=1.2 if n <= 4 else 0.8, label="flow %d" % i if n <= 4 else None)
    fair = rate / n
    ax1.axhline(fair, color="k", ls="--", lw=0.8, label="fair share")
    ax1.axhspan(fair * (1 - FAIR_TOL), fair * (1 + FAIR_TOL), color="k", alpha=0.06)
    ax1.set_ylabel("throughput, 1 ms mean (Gb/s)")
    ax1.set_ylim(0, rate * 1.05)
    ax1.legend(loc="upper right", fontsize=8)
    dcqcn = "DCQCN %s" % ("off" if r["dcqcn"] == "off" else dcqcn_label(r) + " profile")
    if is_variant(r):
        title = "%s: %d:1 at %g Gb/s (seed 1)\n%s, Pmax %g: a variant, not the goals' configuration" % (
            name, n, rate, dcqcn, float(r["pmax"]))
    else:
        title = "%s: %d:1 at %g Gb/s, %s, Pmax %g (seed 1)" % (name, n, rate, dcqcn, float(r["pmax"]))
    ax1.set_title(title, fontsize=10)
    ax2.plot(t, q, lw=0.6, color="tab:red")
    ax2.axhline(int(r["kmin"]) / 1000, color="k", ls=":", lw=0.8, label="Kmin")
    ax2.axhline(int(r["kmax"]) / 1000, color="k", ls="--", lw=0.8, label="Kmax")
    ax2.set_ylabel("queue (KB, 100 us samples)")
    ax2.set_xlabel("time (ms)")
    ax2.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    png = name + ".png"
    fig.savefig(os.path.join(out_dir, png), dpi=80)
    plt.close(fig)
    return png


def plot_vs_n(exps, out_dir):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for prof, marker in (("paper", "o"), ("mlx5", "s")):
        ns, jmin, umin = [], [], []
        for n in (2, 4, 8, 16):
            name = "incast2_25g_%s" % prof if n == 2 else "n%d_25g_%s" % (n, prof)
            if name not in exps:
                continue
            rows = exps[name]
            ns.append(n)
            jmin.append(min(float(r["jain"]) for r in rows))
            umin.append(min(float(r["util"]) for r in rows))
        ax1.plot(ns, jmin, marker=marker, label=prof)
        ax2.plot(ns, umin, marker=marker, label=prof)
    ax1.axhline(0.99, color="k", ls="--", lw=0.8, label="goal 0.99")
    ax1.set_xscale("log", base=2)
    ax2.set_xscale("log", base=2)
    ax1.set_xlabel("senders N (25 Gb/s)")
    ax2.set_xlabel("senders N (25 Gb/s)")
    ax1.set_ylabel("Jain, second half (min over seeds)")
    ax2.set_ylabel("utilization, second half (min over seeds)")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "jain_util_vs_n.png"), dpi=80)
    plt.close(fig)
    return "jain_util_vs_n.png"


def plot_off_vs_on(series_dir, out_dir):
    runs = [("off_n2_25g", "DCQCN off"), ("incast2_25g_paper", "paper"), ("incast2_25g_mlx5", "mlx5")]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for name, label in runs:
        path = os.path.join(series_dir, name + ".csv")
        if not os.path.exists(path):
            continue
        t, q, _, _ = load_series(path)
        ax.plot(t, q, lw=0.7, label=label)
    ax.axhline(KMAX / 1000, color="k", ls="--", lw=0.8, label="Kmax")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("queue (KB)")
    ax.set_title("2:1 at 25 Gb/s, 1 MB buffer: queue with DCQCN off and on (seed 1)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "off_vs_on.png"), dpi=80)
    plt.close(fig)
    return "off_vs_on.png"


def plot_rates(name, title, series_dir, out_dir):
    """RC of each flow (100 us samples), its 1 ms throughput and the queue: one run's rate dynamics."""
    path = os.path.join(series_dir, name + ".csv")
    if not os.path.exists(path):
        return None
    t, q, thr, rc = load_series(path)
    w = 10
    tw = [t[i + w - 1] for i in range(0, len(t) - w + 1, w)]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for i in range(len(thr)):
        line, = ax1.plot(t, rc[i], lw=0.5, alpha=0.6, label="RC flow %d (100 us)" % i)
        ax1.plot(tw, window_mean(thr[i], w), lw=1.5, color=line.get_color(), label="throughput flow %d (1 ms)" % i)
    ax1.axhspan(12.5 * (1 - FAIR_TOL), 12.5 * (1 + FAIR_TOL), color="k", alpha=0.06)
    ax1.axhline(12.5, color="k", ls="--", lw=0.8)
    ax1.set_ylabel("Gb/s")
    ax1.set_ylim(0, 26)
    ax1.legend(loc="upper right", fontsize=7, ncol=2)
    ax1.set_title(title, fontsize=10)
    ax2.plot(t, q, lw=0.6, color="tab:red")
    ax2.axhline(5, color="k", ls=":", lw=0.8)
    ax2.axhline(200, color="k", ls="--", lw=0.8)
    ax2.set_ylabel("queue (KB)")
    ax2.set_xlabel("time (ms)")
    fig.tight_layout()
    png = name + ".png"
    fig.savefig(os.path.join(out_dir, png), dpi=80)
    plt.close(fig)
    return png


def fmt_ms(v):
    return "never" if v == float("inf") else "%.0f" % v


def summary(exps):
    lines = []
    lines.append("| experiment | N | Gb/s | DCQCN | Pmax | Jain s1 (min) | converge ms s1 (median, max) | "
                 "stable ms s1 (never/seeds) | queue p50 / p99 / max KB s1 (worst p99) | "
                 "drops s1 / 2nd half (max 2nd half) | CNPs s1 | util s1 (min) |")
    lines.append("|" + "---|" * 12)
    for name, rows in exps.items():
        r = rows[0]
        conv = [num(x["converge_ms"]) for x in rows]
        stab = [num(x["stable_ms"]) for x in rows]
        lines.append(
            "| %s | %s | %s | %s | %g | %.4f (%.4f) | %s (%s, %s) | %s (%d/%d) | %.1f / %.1f / %.1f (%.1f) | "
            "%s / %s (%d) | %s | %.3f (%.3f) |" % (
                name, r["senders"], r["rate_gbps"], dcqcn_label(r), float(r["pmax"]),
                float(r["jain"]), min(float(x["jain"]) for x in rows),
                fmt_ms(conv[0]), fmt_ms(statistics.median(conv)), fmt_ms(max(conv)),
                fmt_ms(stab[0]), sum(1 for s in stab if s == float("inf")), len(rows),
                int(r["queue_p50"]) / 1000, int(r["queue_p99"]) / 1000, int(r["queue_max"]) / 1000,
                max(int(x["queue_p99"]) for x in rows) / 1000,
                r["drops"], r["drops_2h"], max(int(x["drops_2h"]) for x in rows),
                r["cnps"], float(r["util"]), min(float(x["util"]) for x in rows)))
    return lines


def goals(exps):
    out = []
    nseeds = len(next(iter(exps.values())))
    out.append("Goals over %d seeds each (s1 = seed 1):" % nseeds)
    out.append("")
    # G1: Jain >= 0.99 for every N after convergence (second half).
    out.append("**G1: Jain's index >= 0.99 for every N after convergence** (second half of 100 ms):")
    out.append("")
    for prof in ("paper", "mlx5"):
        for n in (2, 4, 8, 16):
            name = "incast2_25g_%s" % prof if n == 2 else "n%d_25g_%s" % (n, prof)
            if name not in exps:
                continue
            j = [float(r["jain"]) for r in exps[name]]
            ok = sum(1 for v in j if v >= 0.99)
            out.append("- %s N=%d: %s, min %.4f, %d/%d seeds >= 0.99" % (
                prof, n, "met" if ok == len(j) else "NOT met", min(j), ok, len(j)))
    out.append("")
    # G2: convergence within 20 ms, 2:1 paper profile.
    out.append("**G2: convergence within 20 ms for 2:1 with the paper profile** (first 1 ms window "
               "with every flow within 10 % of the fair share; `stable` = from then on every window):")
    out.append("")
    for name in ("incast2_25g_paper", "incast2_100g_paper"):
        if name not in exps:
            continue
        c = [num(r["converge_ms"]) for r in exps[name]]
        s = [num(r["stable_ms"]) for r in exps[name]]
        ok = sum(1 for v in c if v <= 20)
        sok = sum(1 for v in s if v <= 20)
        out.append("- %s: %s, converge ms s1 %s, median %s, max %s, %d/%d seeds <= 20 ms; stays within "
                   "10 %% from <= 20 ms in %d/%d seeds (median stable %s ms)" % (
                       name, "met" if ok == len(c) else "NOT met", fmt_ms(c[0]), fmt_ms(statistics.median(c)),
                       fmt_ms(max(c)), ok, len(c), sok, len(s), fmt_ms(statistics.median(s))))
    out.append("")
    # G3: steady-state queue between Kmin and Kmax, no drops.
    out.append("**G3: steady-state queue between Kmin (5 KB) and Kmax (200 KB) with no drops** "
               "(second half: time-weighted p50 >= Kmin, p99 <= Kmax, no drops):")
    out.append("")
    goal_rows = [(n, rows) for n, rows in exps.items() if rows[0]["dcqcn"] != "off" and not is_variant(rows[0])]
    variants = [(n, rows) for n, rows in exps.items() if rows[0]["dcqcn"] != "off" and is_variant(rows[0])]
    out.extend(g3_lines(goal_rows))
    if variants:
        out.append("")
        out.append("Variants — a different configuration from the goals' (other RED settings or DCQCN knobs), "
                   "to show what it would take; they do not count for the goals:")
        out.append("")
        out.extend(g3_lines(variants, variant=True))
    return out


def g3_lines(named_rows, variant=False):
    out = []
    for name, rows in named_rows:
        p50 = [int(r["queue_p50"]) for r in rows]
        p99 = [int(r["queue_p99"]) for r in rows]
        d2 = [int(r["drops_2h"]) for r in rows]
        dall = [int(r["drops"]) for r in rows]
        kmin, kmax = int(rows[0]["kmin"]), int(rows[0]["kmax"])
        ok = sum(1 for a, b, d in zip(p50, p99, d2) if a >= kmin and b <= kmax and d == 0)
        cfg = " (Pmax %g, %s)" % (float(rows[0]["pmax"]), dcqcn_label(rows[0])) if variant else ""
        out.append("- %s%s: %s, %d/%d seeds meet it; p50 min %.1f KB, p99 max %.1f KB, drops 2nd half max %d "
                   "(whole run incl. the start: max %d)" % (
                       name, cfg, ("queue within" if variant else "met") if ok == len(rows) else
                       ("queue not within" if variant else "NOT met"), ok, len(rows), min(p50) / 1000,
                       max(p99) / 1000, max(d2), max(dall)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", required=True)
    ap.add_argument("--series", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    exps = load_results(a.results)
    pngs = []
    for name, rows in exps.items():
        png = plot_experiment(name, rows, a.series, a.out)
        if png:
            pngs.append(png)
    pngs.append(plot_vs_n(exps, a.out))
    pngs.append(plot_off_vs_on(a.series, a.out))
    png = plot_rates("incast2_25g_paper_seed5",
                     "2:1 at 25 Gb/s, paper profile, seed 5 (the slowest to converge): RC and throughput",
                     a.series, a.out)
    if png:
        pngs.append(png)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("<!-- generated by tools/cc/plot.py from results.csv; do not edit -->\n\n")
        f.write("\n".join(summary(exps)) + "\n\n")
        f.write("\n".join(goals(exps)) + "\n\n")
        f.write("Plots: " + ", ".join("[%s](%s)" % (p, p) for p in pngs) + "\n")
    print("wrote %s/summary.md and %d plots" % (a.out, len(pngs)))


if __name__ == "__main__":
    main()
