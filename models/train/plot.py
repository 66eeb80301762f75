"""Loss curve of a training run (train_log.jsonl from train.py) as a PNG.

  python3 models/train/plot.py --log RUN/train_log.jsonl --out loss.png
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", required=True, action="append", help="repeat: runs in order")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="tiny-v4 training")
    a = ap.parse_args()
    rows, starts, offset = [], [], 0
    for path in a.log:
        run = [json.loads(line) for line in open(path)]
        for r in run:
            r["step"] += offset
        if offset:
            starts.append(offset)
        rows += run
        offset = run[-1]["step"] if run else offset
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.plot(steps, [r["ans_loss"] for r in rows], label="answer CE")
    ax.plot(steps, [r["lm_loss"] for r in rows], label="prompt LM CE")
    ax.plot(steps, [r["kl"] for r in rows], label="indexer KL")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (log scale)")
    ax2 = ax.twinx()
    ax2.plot(steps, [r["train_em"] for r in rows], color="black", lw=1, label="train exact match")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("train-batch exact match")
    bounds = [0] + starts + [steps[-1] + 1]
    for lo, hi in zip(bounds, bounds[1:]):
        sparse = [r["step"] for r in rows if r["sparse"] and lo <= r["step"] < hi]
        if sparse:
            ax.axvline(sparse[0], color="gray", ls="--")
            ax.text(sparse[0], ax.get_ylim()[1], " sparse (top-k)", va="top", fontsize=8)
    for s0 in starts:
        ax.axvline(s0, color="red", ls=":")
        ax.text(s0, ax.get_ylim()[1] * 0.5, " continuation", color="red", fontsize=8)
    prev = None
    for r in rows:
        if r["max_len"] != prev:
            ax.axvline(r["step"], color="lightgray", lw=0.8)
            ax.text(r["step"], ax.get_ylim()[0], f" <= {r['max_len']}", fontsize=7, va="bottom")
            prev = r["max_len"]
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=8)
    ax.set_title(a.title)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
