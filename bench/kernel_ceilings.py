#!/usr/bin/env python3
"""The V4-Flash-shape kernels against the H200 ceiling that binds each, from a perf log.

Input: the output of `cuda_backend_ops_test --perf`, one log or several (one line a case: name, milliseconds,
TFLOP/s and its share of the bf16 tensor ceiling, GB/s and its share of the measured copy
bandwidth). Prints the markdown table docs/throughput.md carries for issue 13 (target: at least
60 % of whichever ceiling binds): per kernel the best time in the log, the share of its binding
ceiling (tensor throughput for the MMA-bound kernels, copy bandwidth for the streaming ones;
the single 1M-entry top-k row is latency-bound and has none) and whether it reaches the target.
Sparse attention is placed by the roofline: its perf line counts the FLOPs and the bytes it moves
(every gathered row once a query, q, the fp32 output), and at V4-Flash's shape that is 99 FLOP a
byte for bf16 KV and 147 for V4 fp8, both under the H200's ridge (790 TFLOP/s over 4.3 TB/s, 185),
so the larger of its two shares is the one that binds (the table names which).
Exits 1 when the log holds none of the kernels.
"""
import argparse
import re
import sys

# (the perf case's name, the ceiling that binds it, the table's label)
KERNELS = [
    ("indexer decode fp8 paged", "copy", "indexer decode, fp8 keys, paged (64 x 32K keys)"),
    ("indexer decode bf16 paged", "copy", "indexer decode, bf16 keys, paged"),
    ("indexer prefill bf16", "tensor", "indexer prefill, bf16 (4,096 x 16,384)"),
    ("topk prefill 4096 x 16384", "copy", "top-k prefill, 4,096 rows x 16,384, k 512"),
    ("topk decode 64 x 262144", "copy", "top-k decode, 64 rows x 262,144"),
    ("topk 1 x 1048576", "latency", "top-k, 1 row x 1,048,576"),
    ("attn m=2048 bf16 kv, tensor cores", "roofline",
     "sparse attention, m = 2,048, bf16 KV"),
    ("attn m=2048 v4 fp8 kv, tensor cores", "roofline",
     "sparse attention, m = 2,048, V4 fp8 KV"),
]
TARGET = 60.0
LINE = re.compile(
    r"^(?P<name>\S.*?)\s+(?P<ms>[0-9.]+) ms\s+[0-9.]+ TFLOP/s \(\s*(?P<tensor>[0-9.]+)% of\s*\d+\)"
    r"\s+[0-9.]+ GB/s \(\s*(?P<copy>[0-9.]+)% of\s*\d+\)\s*$")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs", nargs="+", help="cuda_backend_ops_test --perf output (one or more)")
    a = ap.parse_args()
    best = {}  # name -> (ms, tensor %, copy %), the fastest run of that case in the log
    for log in a.logs:
        with open(log, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LINE.match(line.rstrip("\n"))
                if not m:
                    continue
                name = m.group("name").strip()
                run = (float(m.group("ms")), float(m.group("tensor")), float(m.group("copy")))
                if name not in best or run[0] < best[name][0]:
                    best[name] = run
    found = [k for k in KERNELS if k[0] in best]
    if not found:
        print(f"{', '.join(a.logs)}: none of the V4-Flash kernels' perf lines", file=sys.stderr)
        return 1
    print("| kernel | time | share of the ceiling that binds | at least 60 %? |")
    print("|---|---:|---:|---|")
    for name, ceiling, label in KERNELS:
        if name not in best:
            print(f"| {label} | not in the log | - | - |")
            continue
        ms, tensor, copy = best[name]
        if ceiling == "latency":
            print(f"| {label} | {ms:.3f} ms | latency-bound (one row) | no |")
            continue
        if ceiling == "roofline":
            ceiling = "tensor" if tensor >= copy else "copy"
        share = tensor if ceiling == "tensor" else copy
        what = "bf16 tensor throughput" if ceiling == "tensor" else "copy bandwidth"
        print(f"| {label} | {ms:.3f} ms | {share:.1f} % of {what} | "
              f"{'yes' if share >= TARGET else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
