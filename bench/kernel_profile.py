#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch kernel durations by kernel name.

Input: `ncu --import REPORT --csv --page raw --metrics gpu__time_duration.sum` (one row per
launch). Prints, per kernel name, launches and total milliseconds per job (the totals divided by
--jobs), largest first, with each one's share of the whole. With --by-launch it then lists the
same time per launch shape (kernel name, grid and block size, when the export has those columns)
with microseconds per launch: which of a kernel's call sites (a linear's shapes, say) cost most.
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
    ap.add_argument("--by-launch", action="store_true",
                    help="also list time per (kernel, grid, block) with microseconds per launch")
    a = ap.parse_args()
    rows = list(csv.reader(open(a.csv, newline="")))
    head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    cols = rows[head]
    name_i = cols.index("Kernel Name")
    dur_i = cols.index("gpu__time_duration.sum")
    grid_i = cols.index("Grid Size") if "Grid Size" in cols else None
    block_i = cols.index("Block Size") if "Block Size" in cols else None
    unit = rows[head + 1][dur_i] if len(rows) > head + 1 else ""
    scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3, "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit)
    body = rows[head + 1:] if scale is None else rows[head + 2:]
    scale = scale or 1e-6  # raw page: nanoseconds
    total = collections.Counter()
    count = collections.Counter()
    shape_total = collections.Counter()
    shape_count = collections.Counter()
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
        shape = (name,
                 r[grid_i] if grid_i is not None and grid_i < len(r) else "?",
                 r[block_i] if block_i is not None and block_i < len(r) else "?")
        shape_total[shape] += ms
        shape_count[shape] += 1
    whole = sum(total.values())
    print(f"## {a.title}: {whole / a.jobs:.3f} ms of kernels per job, "
          f"{sum(count.values()) / a.jobs:.0f} launches per job")
    for name, ms in total.most_common(a.top):
        print(f"{ms / a.jobs:9.3f} ms {100 * ms / whole:5.1f}% {count[name] / a.jobs:7.0f}x  {name}")
    if a.by_launch:
        print(f"## {a.title}: by launch shape (grid, block)")
        for shape, ms in shape_total.most_common(a.top):
            name, grid, block = shape
            n = shape_count[shape]
            print(f"{ms / a.jobs:9.3f} ms {100 * ms / whole:5.1f}% {n / a.jobs:7.0f}x "
                  f"{1000 * ms / n:9.1f} us/launch  {name} grid {grid} block {block}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
