"""Markdown tables of an eval.json written by eval.py (for the model card).

  python3 models/train/eval_table.py models/tiny-v4/eval_pytorch.json
"""

from __future__ import annotations

import json
import sys


def pct(k: int, n: int) -> str:
    return f"{k}/{n}" if n else "-"


def main() -> None:
    rows = json.load(open(sys.argv[1]))["rows"]
    lengths = sorted({r["length"] for r in rows})
    modes = []
    for r in rows:
        if r["topk"] not in modes:
            modes.append(r["topk"])
    cell = {(r["length"], r["topk"]): r for r in rows}

    def name(m: str) -> str:
        return "dense (all entries)" if m == "dense" else f"top-{m}"

    print("Exact match (answer + EOS), fraction found [Wilson 95%]:\n")
    print("| prompt tokens | " + " | ".join(name(m) for m in modes) + " |")
    print("|---:|" + "---:|" * len(modes))
    for length in lengths:
        cells = []
        for m in modes:
            r = cell[(length, m)]
            lo, hi = r["wilson95"]
            cells.append(f"{r['rate']:.2f} [{lo:.2f}, {hi:.2f}]")
        print(f"| {length} | " + " | ".join(cells) + " |")

    print("\nBy task / haystack, dense selection (found/trials):\n")
    kinds = sorted({k for r in rows for k in r["by_task"]})
    print("| task / haystack | " + " | ".join(str(x) for x in lengths) + " |")
    print("|---|" + "---:|" * len(lengths))
    for kind in kinds:
        vals = []
        for length in lengths:
            v = cell[(length, "dense")]["by_task"].get(kind, [0, 0])
            vals.append(pct(v[0], v[1]))
        print(f"| {kind} | " + " | ".join(vals) + " |")

    print("\nNeedle inside the last 128 tokens vs outside, and indexer recall (needles outside")
    print("the window: a compressed entry covering the needle is among the selected entries at")
    print("the last prompt position; one value per ratio-4 layer, 1 and 3):\n")
    print("| prompt tokens | selection | in window | outside | recall L1 | recall L3 |")
    print("|---:|---|---:|---:|---:|---:|")
    for length in lengths:
        for m in modes:
            r = cell[(length, m)]
            rec = r["indexer_recall_far"] or [None, None]
            fmt = ["-" if x is None else f"{x:.2f}" for x in rec]
            print(
                f"| {length} | {name(m)} | {pct(r['found_in_window'], r['n_in_window'])} | "
                f"{pct(r['found_far'], r['n_far'])} | {fmt[0]} | {fmt[1]} |"
            )


if __name__ == "__main__":
    main()
