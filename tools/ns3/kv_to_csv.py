#!/usr/bin/env python3
"""key=value summary lines (stdin, one per run) -> CSV (stdout), columns of the first line."""
import csv
import shlex
import sys

rows = [dict(kv.split("=", 1) for kv in shlex.split(line)) for line in sys.stdin if line.strip()]
if rows:
    w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0].keys()), extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
