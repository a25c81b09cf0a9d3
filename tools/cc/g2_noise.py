#!/usr/bin/env python3
"""How far the 2:1 paper-profile flows wander around the fair share once converged
(doc/cc-experiments.md, "G2 at 25 Gb/s"): per seed, from FROM ms to the end, the
standard deviation of one flow's 1 ms throughput relative to the fair share, how
many 1 ms windows have both flows within +-10 %, and, over the seeds, the
autocorrelation of the difference of the two flows' 1 ms throughput.

  CCSIM=build/apps/ccsim/droce-ccsim tools/cc/g2_noise.py [--rates 25,100] [--seeds 10]
"""
import argparse
import csv
import os
import statistics
import subprocess
import tempfile

COMMON = ["--senders", "2", "--profile", "paper", "--kmin", "5000", "--kmax", "200000", "--pmax", "0.01",
          "--buffer-bytes", "1000000", "--mtu", "1024", "--feedback-delay-us", "4", "--mark-at", "dequeue",
          "--jitter-ns", "50", "--duration-ms", "100", "--sample-us", "100"]


def windows(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    w = []
    for i in range(0, len(rows) - 9, 10):  # 10 x 100 us = 1 ms
        w.append([sum(float(r["thr_gbps_%d" % k]) for r in rows[i:i + 10]) / 10 for k in (0, 1)])
    return w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="25,100")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--from-ms", type=int, default=20)
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ccsim = os.environ.get("CCSIM", os.path.join(root, "build/apps/ccsim/droce-ccsim"))
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (float(x) for x in a.rates.split(",")):
            fair = rate / 2
            acs = []
            print("%g Gb/s, from %d ms:" % (rate, a.from_ms))
            for seed in range(1, a.seeds + 1):
                path = os.path.join(tmp, "s%d.csv" % seed)
                subprocess.run([ccsim, *COMMON, "--line-rate-gbps", "%g" % rate, "--seed", str(seed),
                                "--csv-out", path], check=True, stdout=subprocess.DEVNULL)
                w = windows(path)[a.from_ms:]
                inband = sum(1 for x in w if all(abs(v - fair) <= 0.1 * fair for v in x))
                sd = statistics.pstdev([x[0] for x in w]) / fair
                print("  seed %2d: sd/fair %.3f, windows with both flows within 10 %%: %d/%d" % (
                    seed, sd, inband, len(w)))
                d = [x[0] - x[1] for x in w]
                m = sum(d) / len(d)
                d = [x - m for x in d]
                v = sum(x * x for x in d) / len(d)
                acs.append([sum(d[i] * d[i + k] for i in range(len(d) - k)) / (len(d) - k) / v
                            for k in range(13)])
            ac = [sum(x[k] for x in acs) / len(acs) for k in range(13)]
            print("  autocorrelation of flow0 - flow1 at lag 0..12 ms: " + " ".join("%.2f" % x for x in ac))


if __name__ == "__main__":
    main()
