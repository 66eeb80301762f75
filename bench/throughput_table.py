"""Markdown table from gpu_throughput_bench --json and torch_baselines.py --out (same prompts):
needles/s per length and implementation, and the ratio of needlework's best column to the best
of each baseline at batch 1 and, where batched baselines ran ("-bN" implementations), to the best
of each baseline at any batch.

  python3 bench/throughput_table.py TORCH.json NEEDLEWORK.json [NEEDLEWORK_SLOTS_K.json ...]
"""

from __future__ import annotations

import json
import re
import sys


def cell(row: dict | None) -> str:
    if row is None:
        return "not run"
    if "error" in row:
        return row["error"] if len(row["error"]) < 40 else row["error"][:37] + "..."
    return f"{row['needles_per_s']:.2f} ({row.get('found', row.get('passes'))}/{row.get('n', row.get('jobs'))})"


def main() -> None:
    torch_rows = json.load(open(sys.argv[1]))["rows"]
    runs = [json.load(open(f)) for f in sys.argv[2:]]
    impls = []
    for r in torch_rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    by = {(r["impl"], r.get("length")): r for r in torch_rows}
    nw_by = [{r["length"]: r for r in run["rows"]} for run in runs]
    lengths = sorted({length for m in nw_by for length in m})
    head = ["prompt tokens"]
    for run in runs:
        r0 = run["rows"][0]
        prec = r0.get("precision", "fp32")
        head.append(f"needlework `{r0['backend']}` {prec}, {r0.get('slots', 1)} slot(s)")
    batched = any(re.search(r"-b\d+$", i) for i in impls)
    ratios = [("hf", False, "vs best HF"), ("v4", False, "vs best v4.py")]
    if batched:
        ratios += [("hf", True, "vs best HF, any batch"), ("v4", True, "vs best v4.py, any batch")]
    head += [f"`{i}`" for i in impls] + [name for _, _, name in ratios]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for length in lengths:
        rows = [m.get(length) for m in nw_by]
        cells = [f"{length:,}"] + [cell(r) for r in rows]
        cells += [cell(by.get((i, length))) for i in impls]
        ours = max((r["needles_per_s"] for r in rows if r and "needles_per_s" in r), default=None)
        for fam, any_batch, _ in ratios:
            best = max(
                (by[(i, length)]["needles_per_s"] for i in impls
                 if i.startswith(fam) and (any_batch or not re.search(r"-b\d+$", i))
                 and "needles_per_s" in by.get((i, length), {})),
                default=None,
            )
            cells.append(f"{ours / best:.1f}x" if ours and best else "-")
        print("| " + " | ".join(cells) + " |")
    print()
    print("cells: needles/s (found or passed / judged); needlework runs the product path (prompt "
          "build, greedy decode up to the stop token, scoring); the baselines one teacher-forced "
          "forward per needle (\"-bN\": N needles of a length in one forward).")


if __name__ == "__main__":
    main()
