"""PyTorch evaluation of a checkpoint on held-out NIAH prompts (not needlework's own results).

Each length folder holds `nw data niah` samples of exactly that prompt length. A sample counts as
found when greedy decoding reproduces the answer tokens and the EOS exactly; with teacher forcing
that is one forward pass: every answer position's argmax equals the next answer token. Also
reported: indexer recall (at the last prompt position, whether a compressed entry covering the
needle is among the selected entries, per ratio-4 layer, needles outside the window only).

  python3 models/train/eval.py --model DIR --data ROOT --lengths 512,1024 --topk dense,64,16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden import fp32_mode, load_model  # noqa: E402
from v4 import Control  # noqa: E402


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def load_samples(folder: str) -> list[dict]:
    toks = np.fromfile(os.path.join(folder, "tokens.bin"), dtype=np.int32)
    out = []
    with open(os.path.join(folder, "index.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            total = r["prompt_len"] + r["answer_len"]
            r["seq"] = toks[r["offset"] : r["offset"] + total].astype(np.int64)
            out.append(r)
    return out


@torch.no_grad()
def evaluate(model, samples: list[dict], topk, window: int, device: str, batch_tokens: int):
    """Per sample: (found, needle outside the window, recall per indexer layer or None)."""
    results = []
    total = max(len(s["seq"]) for s in samples)
    bsz = max(1, batch_tokens // total)
    pad = max(model.cfg.eos_token_id, 0)
    for i in range(0, len(samples), bsz):
        chunk = samples[i : i + bsz]
        # Answers differ in length: pad at the end (causal, so earlier positions are unchanged).
        rows = np.full((len(chunk), total), pad, dtype=np.int64)
        for b, s in enumerate(chunk):
            rows[b, : len(s["seq"])] = s["seq"]
        seq = torch.tensor(rows, device=device)
        inp, tgt = seq[:, :-1], seq[:, 1:]
        k = None if topk == "dense" else int(topk)
        ctl = Control(sparse=topk != "dense", topk=k, record=[])
        logits = model(inp, ctl)
        pred = logits.argmax(-1)
        for b, s in enumerate(chunk):
            p0, p1 = s["prompt_len"] - 1, len(s["seq"]) - 1
            found = bool((pred[b, p0:p1] == tgt[b, p0:p1]).all())
            far = s["needle_end"] <= s["prompt_len"] - window
            recall = []
            for scores, visible, allowed in ctl.record:
                if topk == "dense":
                    # The top-k the default selection would take, for the recall of dense runs.
                    kk = model.cfg.index_topk
                    row = scores[b, p0].masked_fill(~visible[b, p0], float("-inf"))
                    kk = min(kk, int(visible[b, p0].sum()))
                    sel = torch.zeros_like(visible[b, p0])
                    sel[torch.sort(row, descending=True, stable=True).indices[:kk]] = True
                else:
                    sel = allowed[b, p0]
                lo = max(0, s["needle_begin"] // 4 - 1)
                hi = (s["needle_end"] - 1) // 4 + 1
                hit = bool(sel[lo : hi + 1].any()) if hi >= lo else False
                recall.append(hit)
            results.append((found, far, recall, f"{s['task']}/{s['haystack']}"))
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="folder with len_<L>/ sample folders")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192")
    ap.add_argument("--topk", default="dense,64,32,16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch-tokens", type=int, default=65536)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    fp32_mode()
    model = load_model(a.model, a.device)
    window = model.cfg.window_size
    rows = []
    for length in [int(x) for x in a.lengths.split(",")]:
        samples = load_samples(os.path.join(a.data, f"len_{length}"))
        for topk in a.topk.split(","):
            res = evaluate(model, samples, topk, window, a.device, a.batch_tokens)
            n = len(res)
            k = sum(r[0] for r in res)
            far = [r for r in res if r[1]]
            near = [r for r in res if not r[1]]
            n_layers = len(res[0][2]) if res else 0
            recall = [
                sum(r[2][j] for r in far) / max(1, len(far)) if far else None
                for j in range(n_layers)
            ]
            row = {
                "length": length,
                "topk": topk,
                "n": n,
                "found": k,
                "rate": k / n,
                "wilson95": wilson(k, n),
                "found_far": sum(r[0] for r in far),
                "n_far": len(far),
                "found_in_window": sum(r[0] for r in near),
                "n_in_window": len(near),
                "indexer_recall_far": recall,
                "by_task": {
                    kind: [sum(r[0] for r in res if r[3] == kind), sum(r[3] == kind for r in res)]
                    for kind in sorted({r[3] for r in res})
                },
            }
            rows.append(row)
            print(
                f"len {length:6d} top-k {topk:>5}: {k}/{n} = {k / n:.3f} "
                f"(far {row['found_far']}/{row['n_far']}, window "
                f"{row['found_in_window']}/{row['n_in_window']}, recall {recall}) "
                + " ".join(f"{kk}={v[0]}/{v[1]}" for kk, v in row["by_task"].items()),
                flush=True,
            )
    with open(a.out, "w") as f:
        json.dump({"model": a.model, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
