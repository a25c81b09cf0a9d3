#!/usr/bin/python3
"""Turns the study's results.csv (tools/bench/study/run.sh) into results.md and
PNG plots: each of MacArthur & Russell's six findings reported as held / not
held with the numbers behind the verdict, the other knobs (signalling, MTU,
large messages, CPU per side), and the comparison table: this device vs
published ConnectX and rxe figures vs kernel TCP measured in the same run.

    /usr/bin/python3 tools/bench/study/report.py [--out DIR] [--csv FILE]

Repetitions of a point are combined as "best of N": the lowest typical latency
and the highest throughput, because interference from other work on the
machine only ever adds latency and removes throughput."""
import argparse
import csv
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KEEP_MARK = "<!-- report.py keeps everything from here on -->"
NUM = ["bytes", "iters", "outstanding", "list", "signal", "inline", "events", "mtu", "unsig",
       "lat_min_us", "lat_typ_us", "lat_avg_us", "lat_p99_us", "gbps", "mmsgps",
       "server_user_s", "server_sys_s", "client_user_s", "client_sys_s",
       "server_cpu_pct", "client_cpu_pct", "load1"]

# Published figures for the comparison table.  Each states what was measured;
# none is a same-setup measurement, so the table compares orders of magnitude.
PUBLISHED = {
    "connectx_lat": ("sub-0.6 µs", "ConnectX-6 VPI, vendor headline latency (not a 2 B perftest run): NVIDIA "
                     "ConnectX-6 EN user manual, Introduction, "
                     "https://docs.nvidia.com/networking/display/ConnectX6EN/Introduction"),
    "connectx_lat2": ("sub-0.8 µs", "ConnectX-6 EN 200GbE, vendor product brief (headline latency): "
                      "https://studylib.net/doc/25573930/pb-connectx-6-en-card"),
    "connectx_rate": ("2.55 M msg/s (1 QP); 215 M msg/s (whole adapter)",
                      "1 QP: `ib_read_bw -a` on an mlx5 device over an InfiniBand link, 64 B row: 2.545853 Mpps, "
                      "user report https://github.com/openucx/ucx/issues/8851; whole adapter: ConnectX-6 "
                      "vendor headline (manual above), many QPs and cores"),
    "connectx_bw": ("~97 Gb/s", "ConnectX-4 VPI MCX456A-ECAT, 100GbE through an SN2700 switch, `ib_send_bw` "
                    "at 65536 B, user report on the Mellanox community forum "
                    "(mirror: https://mellanox37.rssing.com/chan-11689808/article3279.html)"),
    "rxe": ("not verified", "no rxe perftest figure (2 B latency, 64 B rate, 64 KiB bandwidth) with a checkable "
            "source was found while writing this report; measure it with this harness "
            "(`--pair local` on two rxe devices, see doc/bench-study.md) rather than quote an unverified one"),
}


def fnum(v):
    if v is None or v == "":
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return None if math.isnan(x) else x


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            for k in NUM:
                r[k] = fnum(r.get(k))
            rows.append(r)
    return rows


def ok(rows):
    return [r for r in rows if r["status"] == "ok"]


def sel(rows, **kw):
    out = []
    for r in rows:
        good = True
        for k, v in kw.items():
            rv = r.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if rv is None or abs(rv - v) > 1e-9:
                    good = False
                    break
            elif rv != v:
                good = False
                break
        if good:
            out.append(r)
    return out


def best(rows, metric):
    """Best of the repetitions: min latency, max throughput."""
    vals = [r[metric] for r in rows if r.get(metric) is not None]
    if not vals:
        return None
    return min(vals) if metric.startswith("lat") else max(vals)


def f(v, nd=3):
    if v is None:
        return "—"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{nd}g}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def human(n):
    n = int(n)
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


def sizes_of(rows):
    return sorted({int(r["bytes"]) for r in rows if r["bytes"] is not None})


def poll_vs_events(g, mode, ops, sizes, metric, lower_is_better):
    """Busy polling (events=0) against event notification (events=1) for each op and size of `mode`:
    the table rows, and each point's (size, ratio) where ratio > 1 means polling did better
    (events/poll for a latency, poll/events for a throughput)."""
    rows, points = [], []
    for op in ops:
        for s in sizes:
            p = best(sel(g, mode=mode, op=op, bytes=s, events=0), metric)
            e = best(sel(g, mode=mode, op=op, bytes=s, events=1), metric)
            rt = ratio(e, p) if lower_is_better else ratio(p, e)
            rows.append([f"{mode} {op}", human(s), f(p), f(e), f(rt, 2)])
            if rt is not None:
                points.append((s, rt))
    return rows, points


def small_and_converged(points):
    """Of poll_vs_events' points: (polling better, all) up to 4 KiB, and the ratios from 16 KiB on."""
    small = [rt for s, rt in points if s <= 4096]
    return sum(rt > 1 for rt in small), len(small), [rt for s, rt in points if s >= 16384]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--csv", default=None)
    a = ap.parse_args()
    out_dir = a.out
    all_rows = load(a.csv or os.path.join(out_dir, "results.csv"))
    rows = ok(all_rows)
    failed = [r for r in all_rows if r["status"] != "ok"]
    ds = [r for r in rows if r["tool"] == "droce-study"]
    pt = [r for r in rows if r["tool"] == "perftest"]
    plots = {}
    md, verdicts = [], []

    # ---------------------------------------------------------------- 1
    g = sel(ds, group="poll_event")
    ping_sizes = sizes_of(sel(g, mode="ping"))
    t1, points = poll_vs_events(g, "ping", ("send", "imm"), ping_sizes, "lat_typ_us", lower_is_better=True)
    small_wins, small_total, conv_detail = small_and_converged(points)
    conv_ok, conv_total = sum(rt <= 1.25 for rt in conv_detail), len(conv_detail)
    blast_sizes = sizes_of(sel(g, mode="blast"))
    t1b, points = poll_vs_events(g, "blast", ("send", "imm", "write"), blast_sizes, "gbps", lower_is_better=False)
    bsmall_wins, bsmall_total, bconv = small_and_converged(points)
    bconv_ok, bconv_total = sum(rt <= 1.25 for rt in bconv), len(bconv)
    # perftest cross-check
    t1p = []
    for s in sizes_of(sel(pt, group="poll_event", program="ib_send_lat")):
        p = best(sel(pt, group="poll_event", program="ib_send_lat", bytes=s, events=0), "lat_typ_us")
        e = best(sel(pt, group="poll_event", program="ib_send_lat", bytes=s, events=1), "lat_typ_us")
        t1p.append(["ib_send_lat", human(s), f(p), f(e), f(ratio(e, p), 2)])
    for s in sizes_of(sel(pt, group="poll_event", program="ib_send_bw")):
        p = best(sel(pt, group="poll_event", program="ib_send_bw", bytes=s, events=0), "gbps")
        e = best(sel(pt, group="poll_event", program="ib_send_bw", bytes=s, events=1), "gbps")
        t1p.append(["ib_send_bw (Gb/s)", human(s), f(p), f(e), f(ratio(p, e), 2)])
    first = small_total and small_wins == small_total and bsmall_total and bsmall_wins >= 0.75 * bsmall_total
    second = conv_total and conv_ok >= 0.75 * conv_total and bconv_total and bconv_ok >= 0.75 * bconv_total
    v = "held" if first and second else ("partly held" if first or second else "not held")
    if not (small_total or bsmall_total):
        v = "not evaluated"
    verdicts.append(("1. Busy polling gives lower one-way time and higher throughput than events up to ~4 KiB; "
                     "they converge from ~16 KiB", v,
                     f"≤ 4 KiB: polling faster in {small_wins}/{small_total} ping points and higher throughput in "
                     f"{bsmall_wins}/{bsmall_total} blast points; ≥ 16 KiB: events within 25% of polling in "
                     f"{conv_ok}/{conv_total} ping points (event/poll "
                     f"{', '.join(f(x, 2) for x in conv_detail)}) and {bconv_ok}/{bconv_total} blast points"))
    md += ["## 1. Busy polling vs event notification", "",
           "droce-study ping (one-way = RTT/2, typical = median, best of the repetitions) and blast (16 outstanding):", ""]
    md += table(["case", "size", "poll (µs)", "events (µs)", "events/poll"], t1) + [""]
    md += table(["case", "size", "poll (Gb/s)", "events (Gb/s)", "poll/events"], t1b) + [""]
    if t1p:
        md += ["Unmodified perftest, same comparison:", ""]
        md += table(["program", "size", "poll", "events", "ratio"], t1p) + [""]
    plots["f1"] = (g, ping_sizes, blast_sizes)

    # ---------------------------------------------------------------- 2
    g = sel(ds, group="inline", mode="ping")
    t2 = []
    below_wins, below_total, rel = 0, 0, []
    inl_sizes = sizes_of(g)
    for op in ("send", "imm"):
        for s in inl_sizes:
            n = best([r for r in sel(g, op=op, bytes=s) if r["inline"] == 0], "lat_typ_us")
            i = best([r for r in sel(g, op=op, bytes=s) if r["inline"] == 1], "lat_typ_us")
            t2.append([op, human(s), f(n), f(i), f(ratio(i, n), 2)])
            if s < 64 and n and i:
                below_total += 1
                below_wins += i < n
                rel.append(i / n - 1)
    pt2, pt_inline_note = [], []
    if sel(pt, group="inline") and not [r for r in sel(pt, group="inline") if r["inline"] == 1]:
        pt_inline_note = ["perftest's `-I` runs are left out: perftest 4.5 enables inline only on devices it "
                          "recognises and printed \"Device not recognized to implement inline feature. Disabling "
                          "it\" here (its header then reads `Max inline data : 0[B]`, the CSV's `inline` column).", ""]
    for s in ([] if pt_inline_note else sizes_of(sel(pt, group="inline"))):
        rr = sel(pt, group="inline", bytes=s)
        n = best([r for r in rr if r["inline"] == 0], "lat_typ_us")
        i = best([r for r in rr if r["inline"] == 1], "lat_typ_us")
        pt2.append(["ib_send_lat", human(s), f(n), f(i), f(ratio(i, n), 2)])
    gb = sel(ds, group="inline", mode="blast")
    bl2 = []
    for s in sizes_of(gb):
        n = best([r for r in sel(gb, bytes=s) if r["inline"] == 0], "mmsgps")
        i = best([r for r in sel(gb, bytes=s) if r["inline"] == 1], "mmsgps")
        bl2.append(["blast write (M msg/s)", human(s), f(n), f(i), f(ratio(i, n), 2)])
    held = below_total and below_wins >= 0.75 * below_total and statistics.median(rel) < -0.02
    verdicts.append(("2. Inline data lowers one-way time for messages below the cache-line size (64 B)",
                     "not evaluated" if not below_total else "held" if held else "not held",
                     f"inline faster in {below_wins}/{below_total} ping points below 64 B; median change "
                     f"{f(100 * statistics.median(rel), 2) if rel else '—'}%"))
    md += ["## 2. Inline vs not", "", "droce-study ping, best of the repetitions:", ""]
    md += table(["op", "size", "not inline (µs)", "inline (µs)", "inline/not"], t2 + pt2 + bl2) + [""]
    md += pt_inline_note
    plots["f2"] = (g, inl_sizes)

    # ---------------------------------------------------------------- 3
    g = sel(ds, group="outstanding")
    outs = sorted({int(r["outstanding"]) for r in g})
    t3, sat_list = [], []
    series3 = {}
    for op in ("write", "imm", "send", "read"):
        for s in sizes_of(g):
            ser = [(o, best(sel(g, op=op, bytes=s, outstanding=o), "gbps")) for o in outs]
            vals = [v for _, v in ser if v is not None]
            if not vals:
                continue
            top = max(vals)
            sat = next((o for o, v in ser if v is not None and v >= 0.9 * top), None)
            sat_list.append(sat)
            series3[(op, s)] = ser
            t3.append([f"{op} {human(s)}"] + [f(v) for _, v in ser] + [str(sat)])
    ptser = [(int(r["outstanding"]), r["gbps"]) for r in sel(pt, group="outstanding")]
    ptser.sort()
    if ptser:
        vals = [v for _, v in ptser if v is not None]
        top = max(vals)
        sat = next((o for o, v in ptser if v is not None and v >= 0.9 * top), None)
        t3.append(["ib_write_bw 4 KiB"] + [f(dict(ptser).get(o)) for o in outs] + [str(sat)])
        series3[("ib_write_bw", 4096)] = ptser
        sat_list.append(sat)
    in_range = sum(1 for s in sat_list if s is not None and s <= 8)
    verdicts.append(("3. Throughput saturates with 3–8 outstanding buffers; more give nothing",
                     "not evaluated" if not sat_list else
                     "held" if in_range >= 0.75 * len(sat_list) else "not held",
                     f"90% of the series' best reached by 8 outstanding in {in_range}/{len(sat_list)} series "
                     f"(first reached at: {', '.join(str(s) for s in sat_list)})"))
    md += ["## 3. Outstanding buffers (blast Gb/s)", ""]
    md += table(["series"] + [str(o) for o in outs] + ["90% of best at"], t3) + [""]
    plots["f3"] = series3

    # ---------------------------------------------------------------- 4
    g = sel(ds, group="lists")
    lists = sorted({int(r["list"]) for r in g})
    t4, wins4, tot4 = [], 0, 0
    series4 = {}
    for op in ("write", "imm", "send"):
        for s in sizes_of(g):
            ser = [(l, best(sel(g, op=op, bytes=s, list=l), "mmsgps")) for l in lists]
            if not any(v for _, v in ser):
                continue
            series4[(op, s)] = ser
            one = dict(ser).get(1)
            others = [v for l, v in ser if l > 1 and v is not None]
            gain = ratio(max(others), one) if others else None
            tot4 += 1
            wins4 += gain is not None and gain <= 1.05
            t4.append([f"{op} {human(s)}"] + [f(v) for _, v in ser] + [f(gain, 2)])
    ptl = sorted((int(r["list"]), r["mmsgps"]) for r in sel(pt, group="lists"))
    if ptl:
        one = dict(ptl).get(1)
        others = [v for l, v in ptl if l > 1 and v is not None]
        gain = ratio(max(others), one) if others else None
        tot4 += 1
        wins4 += gain is not None and gain <= 1.05
        t4.append(["ib_write_bw 64 B"] + [f(dict(ptl).get(l)) for l in lists] + [f(gain, 2)])
        series4[("ib_write_bw", 64)] = ptl
    verdicts.append(("4. Posting WRs one at a time as soon as possible beats collecting them into lists",
                     "not evaluated" if not tot4 else "held" if wins4 >= 0.75 * tot4 else "not held",
                     f"one WR per post within 5% of the best list in {wins4}/{tot4} series; best list / one per "
                     f"post: {', '.join(row[-1] for row in t4)}"))
    md += ["## 4. One WR per post vs WR lists (blast, 64 outstanding, M msg/s)", ""]
    md += table(["series"] + [f"list {l}" for l in lists] + ["best list / 1"], t4) + [""]
    plots["f4"] = series4

    # ---------------------------------------------------------------- 5
    g = sel(ds, group="wr_ping")
    t5, w5, n5 = [], 0, 0
    sizes5 = sizes_of(g)
    for s in sizes5:
        sg = best(sel(g, bytes=s, unsig=0), "lat_typ_us")
        us = best(sel(g, bytes=s, unsig=1), "lat_typ_us")
        sp = best(sel(ds, group="poll_event", mode="ping", op="send", bytes=s, events=0), "lat_typ_us")
        t5.append([human(s), f(sg), f(us), f(ratio(us, sg), 2), f(sp)])
        if sg and us:
            n5 += 1
            w5 += us < sg
    pt5 = []
    for p in ("ib_write_lat", "ib_read_lat"):
        for s in sizes_of(sel(pt, group="wr_ping", program=p)):
            pt5.append([p, human(s), f(best(sel(pt, group="wr_ping", program=p, bytes=s), "lat_typ_us"))])
    verdicts.append(("5. An unsignaled WRITE followed by a READ (ping) lowers one-way time",
                     "not evaluated" if not n5 else "held" if w5 >= 0.75 * n5 else "not held",
                     f"unsignaled WRITE + READ faster than signaled WRITE, wait, READ in {w5}/{n5} sizes "
                     f"(ratios {', '.join(r[3] for r in t5)})"))
    md += ["## 5. WRITE + READ ping: unsignaled WRITE vs signaled", "",
           "One-way = half the time from posting the WRITE to the READ's completion:", ""]
    md += table(["size", "signaled WRITE, wait, READ (µs)", "unsignaled WRITE + READ (µs)", "unsig/sig",
                 "SEND ping, for scale (µs)"], t5) + [""]
    if pt5:
        md += ["perftest beside it (ib_write_lat spins on memory; ib_read_lat prints the full READ round trip):", ""]
        md += table(["program", "size", "typical (µs)"], pt5) + [""]
    plots["f5"] = (g, sizes5)

    # ---------------------------------------------------------------- 6
    g = sel(ds, group="opcodes")
    sizes6 = sizes_of(g)
    ops6 = ("send", "imm", "write", "read")
    t6 = []
    for s in sizes6:
        t6.append([human(s)] + [f(best(sel(g, op=op, bytes=s), "mmsgps")) for op in ops6] +
                  [f(best(sel(g, op=op, bytes=s), "gbps")) for op in ops6])
    def spread(s, metric):
        v = [best(sel(g, op=op, bytes=s), metric) for op in ops6]
        v = [x for x in v if x]
        return (max(v) / min(v)) if len(v) == len(ops6) else None
    small = spread(64, "mmsgps")
    large = spread(max(sizes6), "gbps") if sizes6 else None
    held = small is not None and large is not None and small <= 1.5 and large <= 1.2
    verdicts.append(("6. For small messages the opcode matters little; for large ones all converge to the link rate",
                     "not evaluated" if small is None and large is None else
                     "held" if held else ("partly held" if (small and small <= 1.5) or (large and large <= 1.2)
                                          else "not held"),
                     f"64 B message rate best/worst opcode {f(small, 2)} (≤ 1.5 wanted); "
                     f"{human(max(sizes6)) if sizes6 else '—'} Gb/s best/worst {f(large, 2)} (≤ 1.2 wanted)"))
    md += ["## 6. Opcodes (blast, 16 outstanding)", ""]
    md += table(["size"] + [f"{o} M msg/s" for o in ops6] + [f"{o} Gb/s" for o in ops6], t6) + [""]
    t6p = []
    for p in ("ib_send_bw", "ib_write_bw", "ib_read_bw"):
        for s in sizes_of(sel(pt, group="opcodes", program=p)):
            rr = sel(pt, group="opcodes", program=p, bytes=s)
            t6p.append([p, human(s), f(best(rr, "mmsgps")), f(best(rr, "gbps"))])
    for p in ("ib_send_lat", "ib_write_lat", "ib_read_lat"):
        for s in sizes_of(sel(pt, group="opcodes", program=p)):
            t6p.append([p, human(s), "typical " + f(best(sel(pt, group="opcodes", program=p, bytes=s), "lat_typ_us")) + " µs", ""])
    if t6p:
        md += ["Unmodified perftest:", ""] + table(["program", "size", "M msg/s", "Gb/s"], t6p) + [""]
    gl = sel(ds, group="large")
    if gl:
        md += ["Large messages (blast, 2 outstanding):", ""]
        md += table(["op", "size", "Gb/s"], [[r["op"], human(r["bytes"]), f(r["gbps"])] for r in gl]) + [""]
    plots["f6"] = (g, sizes6)

    # ---------------------------------------------------------------- knobs
    md += ["## Full vs periodic signalling (blast, 64 outstanding)", ""]
    g = sel(ds, group="signal")
    sigs = sorted({int(r["signal"]) for r in g})
    t7 = []
    for op in ("write", "send"):
        for s in sizes_of(g):
            t7.append([f"{op} {human(s)} (M msg/s)"] + [f(best(sel(g, op=op, bytes=s, signal=c), "mmsgps")) for c in sigs])
    md += table(["series"] + [f"every {c}" for c in sigs], t7) + [""]
    ptq = [(int(r["signal"]) if r["signal"] else None, r["mmsgps"]) for r in sel(pt, group="signal")]
    if ptq:
        md += ["`ib_write_bw -s 64 -t 128 -Q N` (CQ moderation): " +
               ", ".join(f"Q {q}: {f(v)} M msg/s" for q, v in sorted(ptq, key=lambda x: x[0] or 0)), ""]
    md += ["## MTU 1024 vs 4096", ""]
    g = sel(ds, group="mtu")
    t8 = []
    for s in sizes_of(g):
        t8.append([human(s),
                   f(best(sel(g, mode="blast", bytes=s, mtu=1024), "gbps")),
                   f(best(sel(g, mode="blast", bytes=s, mtu=4096), "gbps")),
                   f(best(sel(g, mode="ping", bytes=s, mtu=1024), "lat_typ_us")),
                   f(best(sel(g, mode="ping", bytes=s, mtu=4096), "lat_typ_us"))])
    md += table(["size", "WRITE blast Gb/s, MTU 1024", "MTU 4096", "SEND ping µs, MTU 1024", "MTU 4096"], t8) + [""]
    ptm = sel(pt, group="mtu")
    if ptm:
        md += ["`ib_write_bw -s 65536 -m M`: " + ", ".join(f"MTU {int(r['mtu'] or 0)}: {f(r['gbps'])} Gb/s" for r in ptm), ""]

    # CPU per side
    md += ["## CPU utilisation per side", "",
           "getrusage (user+sys) over the measured interval, as a percentage of that interval (droce-study; "
           "several threads can make it exceed 100%: droce's progress thread runs in the program). One-sided "
           "targets do no verbs work of their own, so their CPU is droce's dataplane; on a hardware RNIC it is ~0.", ""]
    tc = []
    for grp, mode, op, s, ev in [("poll_event", "ping", "send", 64, 0), ("poll_event", "ping", "send", 64, 1),
                                 ("poll_event", "ping", "send", 65536, 0), ("poll_event", "ping", "send", 65536, 1),
                                 ("poll_event", "blast", "send", 65536, 0), ("poll_event", "blast", "send", 65536, 1),
                                 ("poll_event", "blast", "write", 65536, 0), ("poll_event", "blast", "write", 65536, 1),
                                 ("opcodes", "blast", "read", 65536, 0)]:
        rr = sel(ds, group=grp, mode=mode, op=op, bytes=s, events=ev)
        if not rr:
            continue
        sc = statistics.median([r["server_cpu_pct"] for r in rr if r["server_cpu_pct"] is not None] or [float("nan")])
        cc = statistics.median([r["client_cpu_pct"] for r in rr if r["client_cpu_pct"] is not None] or [float("nan")])
        tc.append([f"{mode} {op} {human(s)}", "events" if ev else "poll", f(sc), f(cc)])
    md += table(["case", "completion", "server CPU %", "client CPU %"], tc) + [""]
    tcp_cpu = sel(rows, tool="qperf")
    if tcp_cpu:
        md += ["qperf's own CPU figures for TCP (`loc/rem_cpus_used`) are machine-wide on one host, not per side: "
               + ", ".join(f"{r['program']} {human(r['bytes'])}: {f(r['client_cpu_pct'])}%" for r in tcp_cpu), ""]

    # ---------------------------------------------------------------- comparison
    lat2 = best(sel(pt, program="ib_send_lat", bytes=2, events=0), "lat_typ_us")
    wlat2 = best(sel(pt, program="ib_write_lat", bytes=2), "lat_typ_us")
    ds_lat1 = best(sel(ds, group="poll_event", mode="ping", op="send", bytes=1, events=0), "lat_typ_us")
    rate64 = best(sel(pt, group="opcodes", program="ib_write_bw", bytes=64), "mmsgps")
    ds_rate64 = best(sel(ds, group="opcodes", op="write", bytes=64), "mmsgps")
    bw64k = best(sel(pt, group="opcodes", program="ib_write_bw", bytes=65536), "gbps")
    ds_bw64k = best(sel(ds, group="opcodes", op="write", bytes=65536), "gbps")
    tcp_lat = best(sel(rows, tool="qperf", program="tcp_lat", bytes=2), "lat_typ_us")
    tcp_rate = best(sel(rows, tool="qperf", program="tcp_bw", bytes=64), "mmsgps")
    tcp_bw = best(sel(rows, tool="qperf", program="tcp_bw", bytes=65536), "gbps")
    comp = table(["metric", "this device (same run)", "kernel TCP (same run, qperf)", "ConnectX (published)", "rxe (published)"], [
        ["2 B one-way latency", f"{f(lat2)} µs (`ib_send_lat`, polling); {f(wlat2)} µs (`ib_write_lat`, memory "
         f"polling); {f(ds_lat1)} µs (droce-study 1 B SEND ping)", f"{f(tcp_lat)} µs (`tcp_lat`)",
         PUBLISHED["connectx_lat"][0] + " [a], " + PUBLISHED["connectx_lat2"][0] + " [b]", PUBLISHED["rxe"][0] + " [e]"],
        ["64 B message rate, 1 QP", f"{f(rate64)} M msg/s (`ib_write_bw`); {f(ds_rate64)} (droce-study WRITE, 16 outstanding)",
         f"{f(tcp_rate)} M msg/s (`tcp_bw -m 64`, one stream)", PUBLISHED["connectx_rate"][0] + " [c]", PUBLISHED["rxe"][0] + " [e]"],
        ["64 KiB bandwidth, 1 QP", f"{f(bw64k)} Gb/s (`ib_write_bw`); {f(ds_bw64k)} (droce-study WRITE)",
         f"{f(tcp_bw)} Gb/s (`tcp_bw -m 64K`)", PUBLISHED["connectx_bw"][0] + " [d]", PUBLISHED["rxe"][0] + " [e]"]])
    notes = [f"- [{k}] {PUBLISHED[n][1]}" for k, n in (("a", "connectx_lat"), ("b", "connectx_lat2"),
                                                       ("c", "connectx_rate"), ("d", "connectx_bw"), ("e", "rxe"))]

    # ---------------------------------------------------------------- header
    elapsed = None
    try:
        elapsed = int(open(os.path.join(out_dir, "elapsed_s")).read().strip())
    except (OSError, ValueError):
        pass
    loads = [r["load1"] for r in all_rows if r["load1"] is not None]
    info = {}
    try:
        for line in open(os.path.join(out_dir, "run-info.txt")):
            k, _, v = line.strip().partition("=")
            info[k] = v
    except OSError:
        pass
    pair = info.get("pair", "")
    if pair == "droce":
        setup = (f"two droce devices ({info.get('server_dev')} server, {info.get('client_dev')} client) joined by a "
                 "memif wire, one process each, registered by `tools/verbs-pair.sh`")
    elif pair:
        setup = (f"{info.get('server_dev')} (server) and {info.get('client_dev')} (client), pairing `{pair}`, "
                 f"side channels to {info.get('host')}")
    else:
        setup = "devices and pairing as given to run.sh (no run-info.txt)"
    if info.get("cpus"):
        setup += f"; client host: {info['cpus']} CPUs ({info.get('cpu', '')}), kernel {info.get('kernel', '')}"
    if info.get("perftest"):
        setup += f", perftest {info['perftest']}"
    if info.get("date"):
        setup += f"; run {info['date']} at commit {info.get('commit', '?')}"
    head = [f"# The RDMA programming-decision study on {info.get('client_dev', 'a verbs device')}", "",
            "Generated by `tools/bench/study/report.py` from `results.csv` (`bash tools/bench/study/run.sh`; "
            "see `doc/bench-study.md`). The study: P. MacArthur and R. D. Russell, \"A Performance Study to Guide "
            "RDMA Programming Decisions\".", "",
            f"Setup: {setup}. "
            + (f"The matrix took {elapsed // 60} min {elapsed % 60} s; " if elapsed is not None else "")
            + f"{len(all_rows)} rows, {len(failed)} failed.",
            "",
            "**Read the numbers with the machine in mind.** Both programs (and, on droce, both dataplanes and "
            f"their progress threads) share {info.get('cpus', os.cpu_count())} CPUs. The 1-minute load average when points ended was median "
            f"{f(statistics.median(loads), 2) if loads else '—'}, max {f(max(loads), 2) if loads else '—'} "
            "(column `load1`; two busy pollers alone make about 2, more means other work shared the machine). "
            "Repeated points are combined as best of N (lowest latency, highest throughput). Differences below "
            "~25% are within this machine's noise.", "",
            "## Findings", ""]
    dev = info.get("client_dev", "this device")
    head += table(["finding (MacArthur & Russell)", f"on {dev}", "numbers"], verdicts) + [""]
    head += [f"## {dev} beside kernel TCP and published hardware", ""] + comp + [""] + notes + [""]
    head += ["The published figures are not same-setup measurements: they come from other machines, links "
             "(100–200 Gb/s) and, for the vendor headlines, many QPs and cores. They show the order of magnitude "
             "a hardware RNIC reaches; the same-run TCP column is the like-for-like baseline.", ""]
    if failed:
        head += ["## Failed points", "", "Kept in the CSV with status `failed`; their logs are in `logs/` when the run "
                 "keeps them.", ""] + table(["group", "tool", "program", "arguments", "status"],
                                            [[r["group"], r["tool"], r["program"], (r.get("args") or "").replace(";", ","),
                                              r["status"]] for r in failed]) + [""]

    # ---------------------------------------------------------------- plots
    pngs = make_plots(out_dir, plots, ds, pt)
    if pngs:
        head += ["Plots: " + ", ".join(f"[`{p}`]({p})" for p in pngs), ""]
    # What follows KEEP_MARK in an existing results.md (the history of earlier
    # runs, written by hand) is kept below the new report.
    path = os.path.join(out_dir, "results.md")
    kept = ""
    if os.path.exists(path):
        old = open(path).read()
        if KEEP_MARK in old:
            kept = "\n" + old[old.index(KEEP_MARK):]
    with open(path, "w") as fo:
        fo.write("\n".join(head + md) + "\n" + kept)
    print(f"wrote {os.path.join(out_dir, 'results.md')} and {len(pngs)} plots")
    for a_, b_, c_ in verdicts:
        print(f"  {b_:12s} {a_}")


def make_plots(out_dir, plots, ds, pt):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (Debian: python3-matplotlib): no plots", file=sys.stderr)
        return []
    pdir = os.path.join(out_dir, "plots")
    os.makedirs(pdir, exist_ok=True)
    written = []

    def save(fig, name):
        # Log axes only where there is positive data (a group may be missing or failed).
        for x in fig.axes:
            ys = [v for ln in x.get_lines() for v in ln.get_ydata() if v == v and v > 0]
            if not ys:
                x.set_yscale("linear")
                x.set_xscale("linear")
                x.text(0.5, 0.5, "no data", transform=x.transAxes, ha="center")
        fig.tight_layout()
        fig.savefig(os.path.join(pdir, name), dpi=90)
        plt.close(fig)
        written.append(f"plots/{name}")

    def leg(x):
        if x.get_legend_handles_labels()[0]:
            x.legend(fontsize=7)

    nan = float("nan")
    g, ping_sizes, blast_sizes = plots["f1"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for op, m in (("send", "o"), ("imm", "s")):
        for ev, ls in ((0, "-"), (1, "--")):
            ax[0].plot(ping_sizes, [best(sel(g, mode="ping", op=op, bytes=s, events=ev), "lat_typ_us") or nan
                                    for s in ping_sizes], m + ls, label=f"{op} {'events' if ev else 'poll'}")
    ax[0].set(xscale="log", yscale="log", xlabel="bytes", ylabel="one-way µs (typical)", title="ping: polling vs events")
    for op, m in (("send", "o"), ("imm", "s"), ("write", "^")):
        for ev, ls in ((0, "-"), (1, "--")):
            ax[1].plot(blast_sizes, [best(sel(g, mode="blast", op=op, bytes=s, events=ev), "gbps") or nan
                                     for s in blast_sizes], m + ls, label=f"{op} {'events' if ev else 'poll'}")
    ax[1].set(xscale="log", yscale="log", xlabel="bytes", ylabel="Gb/s", title="blast (16 outstanding)")
    for x in ax:
        leg(x)
        x.axvspan(16384, max(ping_sizes + blast_sizes or [16384]), alpha=0.08)
    save(fig, "f1_poll_vs_events.png")

    g, sizes = plots["f2"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for op, m in (("send", "o"), ("imm", "s")):
        for inl, ls in ((0, "--"), (1, "-")):
            ax.plot(sizes, [best([r for r in sel(g, op=op, bytes=s) if r["inline"] == inl], "lat_typ_us") or nan
                            for s in sizes], m + ls, label=f"{op} {'inline' if inl else 'not inline'}")
    ax.axvline(64, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="bytes", ylabel="one-way µs (typical)", title="inline vs not (64 B: cache line)")
    leg(ax)
    save(fig, "f2_inline.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for (op, s), ser in plots["f3"].items():
        ax.plot([o for o, _ in ser], [v or nan for _, v in ser], "o-", label=f"{op} {human(s)}")
    ax.axvspan(3, 8, alpha=0.1, label="study: saturates at 3–8")
    ax.set(xscale="log", xlabel="outstanding WRs", ylabel="Gb/s", title="outstanding buffers")
    leg(ax)
    save(fig, "f3_outstanding.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for (op, s), ser in plots["f4"].items():
        ax.plot([l for l, _ in ser], [v or nan for _, v in ser], "o-", label=f"{op} {human(s)}")
    ax.set(xscale="log", yscale="log", xlabel="WRs per ibv_post_send", ylabel="M msg/s", title="WR lists")
    leg(ax)
    save(fig, "f4_lists.png")

    g, sizes = plots["f5"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(sizes, [best(sel(g, bytes=s, unsig=0), "lat_typ_us") or nan for s in sizes], "o--",
            label="signaled WRITE, wait, READ")
    ax.plot(sizes, [best(sel(g, bytes=s, unsig=1), "lat_typ_us") or nan for s in sizes], "s-",
            label="unsignaled WRITE + READ")
    ax.plot(sizes, [best(sel(ds, group="poll_event", mode="ping", op="send", bytes=s, events=0), "lat_typ_us") or nan
                    for s in sizes], "^:", label="SEND ping")
    ax.set(xscale="log", yscale="log", xlabel="bytes", ylabel="one-way µs (typical)", title="WRITE + READ ping")
    leg(ax)
    save(fig, "f5_write_read_ping.png")

    g, sizes = plots["f6"]
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for op, m in (("send", "o"), ("imm", "s"), ("write", "^"), ("read", "v")):
        ax[0].plot(sizes, [best(sel(g, op=op, bytes=s), "mmsgps") or nan for s in sizes], m + "-", label=op)
        ax[1].plot(sizes, [best(sel(g, op=op, bytes=s), "gbps") or nan for s in sizes], m + "-", label=op)
    ax[0].set(xscale="log", yscale="log", xlabel="bytes", ylabel="M msg/s", title="opcodes: message rate")
    ax[1].set(xscale="log", yscale="log", xlabel="bytes", ylabel="Gb/s", title="opcodes: throughput")
    for x in ax:
        leg(x)
    save(fig, "f6_opcodes.png")

    g = sel(ds, group="signal")
    gm = sel(ds, group="mtu", mode="blast")
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    sigs = sorted({int(r["signal"]) for r in g})
    for op in ("write", "send"):
        for s in sizes_of(g):
            ax[0].plot(sigs, [best(sel(g, op=op, bytes=s, signal=c), "mmsgps") or nan for c in sigs], "o-",
                       label=f"{op} {human(s)}")
    ax[0].set(xscale="log", yscale="log", xlabel="signal every N WRs", ylabel="M msg/s", title="signalling")
    ms = sizes_of(gm)
    for m in (1024, 4096):
        ax[1].plot(ms, [best(sel(gm, bytes=s, mtu=m), "gbps") or nan for s in ms], "o-", label=f"WRITE, MTU {m}")
    ax[1].set(xscale="log", xlabel="bytes", ylabel="Gb/s", title="MTU")
    for x in ax:
        leg(x)
    save(fig, "knobs_signal_mtu.png")
    return written


if __name__ == "__main__":
    main()
