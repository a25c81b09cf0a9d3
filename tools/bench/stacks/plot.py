#!/usr/bin/env python3
"""Plots tools/bench/stacks/run.sh's results and prints the tables of results.md.

  python3 tools/bench/stacks/plot.py results.csv   -> netpipe.png beside the CSV (NAME.png for
                                                      another NAME.csv), tables on stdout
  NETPIPE_TCP_LABEL, NETPIPE_TITLE: the TCP curve's label and the title (netpipe_cluster.sh)

Each value is the median over the rounds of the CSV. NetPIPE's sizes are
matched by message size; the goals are issue 33's.
"""
import csv
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def load(path):
    values = defaultdict(list)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["value"] in ("", None):
                continue
            values[(row["test"], row["stack"], int(row["bytes"]))].append(float(row["value"]))
    return {k: statistics.median(v) for k, v in values.items()}, {k: len(v) for k, v in values.items()}


def main():
    path = Path(sys.argv[1])
    med, count = load(path)

    def get(test, stack, size):
        return med.get((test, stack, size))

    print("| measurement | droce | reference | goal | met |")
    print("| --- | --- | --- | --- | --- |")

    def line(name, ours, ref, goal, met):
        fmt = lambda v: "–" if v is None else (f"{v:,.2f}" if v < 1000 else f"{v:,.0f}")
        print(f"| {name} | {fmt(ours)} | {fmt(ref)} | {goal} | {met} |")

    send, am, tag = get("send_lat", "perftest", 8), get("am_lat", "uct_rc_verbs", 8), get("tag_lat", "ucp_droce", 8)
    line("UCT am_lat 8 B (µs) vs ib_send_lat", am, send, "–", "–")
    ok = tag is not None and send is not None and tag <= send + 0.5
    line("UCP tag_lat 8 B (µs) vs ib_send_lat", tag, send, "≤ ib_send_lat + 0.5 µs", "yes" if ok else "no")
    put, write = get("put_bw", "uct_rc_verbs", 65536), get("write_bw", "perftest", 65536)
    ok = put is not None and write is not None and put >= 0.9 * write
    line("UCT put_bw 64 KiB (msg/s) vs ib_write_bw", put, write, "≥ 90 % of ib_write_bw", "yes" if ok else "no")
    line("UCP tag_lat 8 B (µs): droce vs UCX over TCP", tag, get("tag_lat", "ucp_tcp", 8), "–", "–")
    line("UCP tag_bw 8 B (msg/s): droce vs UCX over TCP", get("tag_bw", "ucp_droce", 8), get("tag_bw", "ucp_tcp", 8), "–", "–")
    line("UCP tag_bw 1 MiB (MB/s): droce vs UCX over TCP", get("tag_bw", "ucp_droce", 1048576),
         get("tag_bw", "ucp_tcp", 1048576), "–", "–")

    sizes = sorted({s for (t, st, s) in med if t == "netpipe_lat" and st == "mpi_droce"}
                   & {s for (t, st, s) in med if t == "netpipe_lat" and st == "mpi_tcp"})
    lat_sizes = [s for s in sizes if s < 4096]
    bw_sizes = [s for s in sizes if s > 65536]
    lat_wins = [s for s in lat_sizes if get("netpipe_lat", "mpi_droce", s) < get("netpipe_lat", "mpi_tcp", s)]
    bw_wins = [s for s in bw_sizes if get("netpipe_bw", "mpi_droce", s) > get("netpipe_bw", "mpi_tcp", s)]
    print()
    print(f"NetPIPE, MPI over droce faster than MPI over kernel TCP: latency at {len(lat_wins)} of {len(lat_sizes)} "
          f"sizes below 4 KiB, bandwidth at {len(bw_wins)} of {len(bw_sizes)} sizes above 64 KiB "
          f"(goal: all; rounds: {max(count.values()) if count else 0}).")
    print()
    print("| bytes | droce µs | TCP µs | droce Mb/s | TCP Mb/s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for s in sizes:
        if s in (1, 8, 64, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304) or s == sizes[-1]:
            print(f"| {s} | {get('netpipe_lat', 'mpi_droce', s):.1f} | {get('netpipe_lat', 'mpi_tcp', s):.1f} "
                  f"| {get('netpipe_bw', 'mpi_droce', s):,.0f} | {get('netpipe_bw', 'mpi_tcp', s):,.0f} |")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for stack, label, style in (("mpi_droce", "Open MPI, pml ucx on droce", "o-"),
                                ("mpi_tcp", os.environ.get("NETPIPE_TCP_LABEL", "Open MPI, btl tcp (kernel, loopback)"),
                                 "s--")):
        xs = [s for s in sizes]
        a.plot(xs, [get("netpipe_lat", stack, s) for s in xs], style, ms=3, label=label)
        b.plot(xs, [get("netpipe_bw", stack, s) / 1000 for s in xs], style, ms=3, label=label)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    a.set_yscale("log")
    a.set_ylabel("one-way time (µs, NetPIPE)")
    a.set_title("NetPIPE latency")
    b.set_ylabel("throughput (Gb/s, NetPIPE)")
    b.set_title("NetPIPE bandwidth")
    title = os.environ.get("NETPIPE_TITLE", "NetPIPE between two ranks, droce0 ↔ droce1 vs kernel TCP")
    fig.suptitle(f"{title} (median of rounds, {path.name})", fontsize=9)
    fig.tight_layout()
    png = path.with_name("netpipe.png" if path.stem == "results"
                         else f"{path.stem}.png")
    fig.savefig(png, dpi=110)
    print(f"\nplot: {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
