#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch kernel durations by kernel name.

Input: `ncu --import REPORT --csv --page raw --metrics gpu__time_duration.sum` (one row per
launch). Prints, per kernel name, launches and total milliseconds per job (the totals divided by
--jobs), largest first, with each one's share of the whole.
"""
import argparse
import collections
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--jobs", type=int, default=1, help="jobs the profile covered")
    ap.add_argument("--title", default="")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    rows = list(csv.reader(open(a.csv, newline="")))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    name_i = cols.index("Kernel Name")
    dur_i = cols.index("gpu__time_duration.sum")
    unit = rows[head + 1][dur_i] if len(rows) > head + 1 else ""
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit)
    body = rows[head + 1:] if scale is None else rows[head + 2:]
    scale = scale or 1e-6  # raw page: nanoseconds
    total = collections.Counter()
    count = collections.Counter()
    for r in body:
        if len(r) <= max(name_i, dur_i) or not r[dur_i]:
            continue
        try:
            ms = float(r[dur_i].replace(",", "")) * scale
        except ValueError:
            continue
        name = r[name_i].split("(")[0]
        total[name] += ms
        count[name] += 1
    whole = sum(total.values())
    print(f"## {a.title}: {whole / a.jobs:.3f} ms of kernels per job, "
          f"{sum(count.values()) / a.jobs:.0f} launches per job")
    for name, ms in total.most_common(a.top):
        print(f"{ms / a.jobs:9.3f} ms {100 * ms / whole:5.1f}% {count[name] / a.jobs:7.0f}x  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
