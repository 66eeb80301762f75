"""Golden outputs of the PyTorch model (v4.py) for the C++ golden test.

Runs a checkpoint in fp32 (TF32 off) on fixed prompts and writes, per prompt, the logits at a few
positions and the greedy continuation, plus margins that tell whether a C++ run within tolerance
could still choose differently (the indexer's k-th vs (k+1)-th score, the MoE gate's, and each
greedy step's top-2 logits).

  python3 models/train/golden.py --model DIR --prompts prompts.json --out golden.json

prompts.json: {"prompts": [{"name", "tokens", "index_topk" (null: the config's),
"positions" (null: n/3, 2n/3, n-1), "max_new_tokens"}]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v4 import Control, Transformer, V4Config, load_checkpoint  # noqa: E402


def fp32_mode() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def load_model(model_dir: str, device: str) -> Transformer:
    cfg = V4Config.load(os.path.join(model_dir, "config.json"))
    model = Transformer(cfg)
    load_checkpoint(model, os.path.join(model_dir, "model.safetensors"))
    return model.to(device).eval()


def topk_margin(record) -> float:
    """Smallest relative gap between the k-th and (k+1)-th visible indexer scores over the rows
    where selection matters (more visible entries than selected)."""
    best = float("inf")
    for scores, visible, allowed in record:
        nsel = allowed.sum(-1)
        rows = visible.sum(-1) > nsel
        if not rows.any():
            continue
        s = scores[rows].masked_fill(~visible[rows], float("-inf"))
        k = int(nsel[rows][0])
        top = s.sort(-1, descending=True).values
        gap = (top[:, k - 1] - top[:, k]).abs() / top[:, 0].abs().clamp_min(1e-30)
        best = min(best, float(gap.min()))
    return best


@torch.no_grad()
def run_prompt(model: Transformer, p: dict, device: str) -> dict:
    ids = torch.tensor([p["tokens"]], dtype=torch.long, device=device)
    n = ids.shape[1]
    positions = p.get("positions") or [n // 3, (2 * n) // 3, n - 1]
    ctl = Control(sparse=True, topk=p.get("index_topk"), exact_topk=True, record=[], gate_gaps=[])
    logits = model(ids, ctl)[0]
    out = {
        "name": p["name"],
        "tokens": p["tokens"],
        "index_topk": p.get("index_topk"),
        "positions": positions,
        "logits": [[float(f"{v:.9g}") for v in logits[i].tolist()] for i in positions],
        "indexer_topk_margin": topk_margin(ctl.record),
        "moe_gate_margin": min(ctl.gate_gaps) if ctl.gate_gaps else None,
    }
    greedy, margins = [], []
    cur = ids
    for _ in range(p.get("max_new_tokens", 8)):
        last = model(cur, Control(sparse=True, topk=p.get("index_topk"), exact_topk=True))[0, -1]
        top2 = last.topk(2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        greedy.append(nxt)
        cur = torch.cat([cur, torch.tensor([[nxt]], device=device)], dim=1)
    out["greedy"] = greedy
    out["greedy_top2_margins"] = margins
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--label", default="", help="what the checkpoint is (for the JSON)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    fp32_mode()
    model = load_model(a.model, a.device)
    with open(a.prompts) as f:
        prompts = json.load(f)["prompts"]
    results = [run_prompt(model, p, a.device) for p in prompts]
    doc = {
        "generator": "models/train/golden.py (PyTorch fp32, TF32 off, device " + a.device + ")",
        "model": a.label,
        "tolerance": "max |cpp - ref| <= 1e-4 * max |ref| per position; greedy tokens equal",
        "prompts": results,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    for r in results:
        print(
            f"golden {r['name']}: n={len(r['tokens'])} greedy={r['greedy']} "
            f"min top2 margin={min(r['greedy_top2_margins']):.3g} "
            f"indexer margin={r['indexer_topk_margin']:.3g} gate margin={r['moe_gate_margin']}"
        )


if __name__ == "__main__":
    main()
