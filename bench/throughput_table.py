"""Markdown table from gpu_throughput_bench --json and torch_baselines.py --out (same prompts):
needles/s per length and implementation, and needlework's ratio to the best of each baseline.

  python3 bench/throughput_table.py NEEDLEWORK.json TORCH.json
"""

from __future__ import annotations

import json
import sys


def cell(row: dict | None) -> str:
    if row is None:
        return "not run"
    if "error" in row:
        return row["error"] if len(row["error"]) < 40 else row["error"][:37] + "..."
    return f"{row['needles_per_s']:.2f} ({row.get('found', row.get('passes'))}/{row.get('n', row.get('jobs'))})"


def main() -> None:
    nw = json.load(open(sys.argv[1]))
    torch_rows = json.load(open(sys.argv[2]))["rows"]
    impls = []
    for r in torch_rows:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    by = {(r["impl"], r.get("length")): r for r in torch_rows}
    head = ["prompt tokens", f"needlework `{nw['rows'][0]['backend']}`"] + [f"`{i}`" for i in impls]
    head += ["vs best HF", "vs best v4.py"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---:|" * len(head))
    for r in nw["rows"]:
        length = r["length"]
        cells = [f"{length:,}", cell(r)] + [cell(by.get((i, length))) for i in impls]
        for fam in ("hf", "v4"):
            best = max(
                (by[(i, length)]["needles_per_s"] for i in impls
                 if i.startswith(fam) and "needles_per_s" in by.get((i, length), {})),
                default=None,
            )
            ok = "needles_per_s" in r
            cells.append(f"{r['needles_per_s'] / best:.1f}x" if ok and best else "-")
        print("| " + " | ".join(cells) + " |")
    print()
    print("cells: needles/s (found or passed / judged); needlework runs the product path (prompt "
          "build, greedy decode up to the stop token, scoring); the baselines one teacher-forced "
          "forward per needle.")


if __name__ == "__main__":
    main()
