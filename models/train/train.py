"""Trains the tiny DeepSeek-V4 model of models/tiny-v4 to retrieve needles.

Data: shards written by `nw data niah` (tokens.bin int32 + index.jsonl; the answer tokens,
tokenize(" " + value) + EOS, follow each prompt). Shards may still be arriving while training
runs: a shard is read once the file DIR.done exists next to its folder DIR.

Schedule, all keyed to the fraction f of the wall-time budget (so the same recipe fits any speed):
  lengths   octaves [256,512) .. [4096,8192], one octave per step drawn uniformly from those
            allowed by --curriculum (default: f < 0.15 up to 1024 tokens, f < 0.35 up to 2048,
            f < 0.55 up to 4096, then up to 8192);
  attention dense (every visible compressed entry) with the indexer trained by KL against the
            main attention's head-summed distribution over compressed entries (detached inputs),
            then, from f = --sparse-from, sparse: the indexer's top-k decides what ratio-4 layers
            attend to and the KL is restricted to the selected entries;
  loss      cross-entropy on the answer tokens + lm_weight * cross-entropy on the prompt tokens +
            kl_weight * indexer KL;
  optimiser AdamW (0.9, 0.95), weight decay 0.01 on matrices, clip 1.0, linear warm-up over 150
            steps, cosine decay to 10% at f = 1; bf16 autocast, fp32 master weights; MoE selection
            bias updated aux-loss-free (bias += 1e-3 sign(mean load - load)).
--init continues from a checkpoint (the shipped model is a first run plus a continuation).
Outputs (--out): model.safetensors (BF16 layout), train_log.jsonl, summary.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v4 import (  # noqa: E402
    Control,
    Transformer,
    V4Config,
    count_params,
    init_weights,
    load_checkpoint,
    save_checkpoint,
)

OCTAVES = [(256, 512), (512, 1024), (1024, 2048), (2048, 4096), (4096, 8193)]
CURRICULUM = "0.15:1024,0.35:2048,0.55:4096,1.01:8193"


class Shards:
    """NIAH samples from every finished shard, grouped by length octave and sorted by length."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.loaded: set[str] = set()
        self.tokens: list[np.ndarray] = []
        self.octave: list[list[tuple]] = [[] for _ in OCTAVES]
        self.n_samples = 0
        self.n_tokens = 0

    def refresh(self) -> int:
        new = 0
        for d in sorted(glob.glob(self.pattern)):
            if d in self.loaded or not os.path.isdir(d) or not os.path.exists(d + ".done"):
                continue
            toks = np.fromfile(os.path.join(d, "tokens.bin"), dtype=np.int32)
            fid = len(self.tokens)
            self.tokens.append(toks)
            with open(os.path.join(d, "index.jsonl")) as f:
                for line in f:
                    r = json.loads(line)
                    total = r["prompt_len"] + r["answer_len"]
                    for o, (lo, hi) in enumerate(OCTAVES):
                        if lo <= total - 1 < hi:
                            self.octave[o].append((total, fid, r["offset"], r["prompt_len"]))
                            break
                    new += 1
                    self.n_tokens += total
            self.loaded.add(d)
        if new:
            for lst in self.octave:
                lst.sort()
            self.n_samples += new
        return new

    def batch(self, rng: random.Random, max_len: int, tokens_per_step: int, pad: int):
        allowed = [o for o, (lo, _) in enumerate(OCTAVES) if lo < max_len and self.octave[o]]
        o = rng.choice(allowed)
        lst = self.octave[o]  # octave bounds align with the curriculum's length limits
        i = rng.randrange(len(lst))
        bsz = max(1, tokens_per_step // (lst[i][0] - 1))
        i = min(i, max(0, len(lst) - bsz))
        rows = lst[i : i + bsz]
        t = max(r[0] for r in rows) - 1
        inp = np.full((len(rows), t), pad, dtype=np.int64)
        tgt = np.full((len(rows), t), -100, dtype=np.int64)
        ans = np.zeros((len(rows), t), dtype=bool)
        for b, (total, fid, off, plen) in enumerate(rows):
            seq = self.tokens[fid][off : off + total].astype(np.int64)
            inp[b, : total - 1] = seq[:-1]
            tgt[b, : total - 1] = seq[1:]
            ans[b, plen - 1 : total - 1] = True
        return inp, tgt, ans


def parse_curriculum(spec: str) -> list[tuple[float, int]]:
    """Parses "f1:len1,f2:len2,...": before fraction f1 of the budget, prompts up to len1."""
    out = []
    for part in spec.split(","):
        frac, length = part.split(":")
        out.append((float(frac), int(length)))
    return out


def max_len_at(f: float, curriculum: list[tuple[float, int]]) -> int:
    for frac, length in curriculum:
        if f < frac:
            return length
    return curriculum[-1][1]


def lr_at(step: int, f: float, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(f, 1.0))))


def param_groups(model: Transformer, wd: float):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if name.startswith("mtp."):
            p.requires_grad_(False)
            continue
        (decay if p.dim() == 2 and "hc_" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="HF config.json written by nw model init")
    ap.add_argument("--data", required=True, help="glob of shard folders (each with DIR.done)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=300.0, help="training seconds")
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (0: time only)")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--sparse-from", type=float, default=0.6)
    ap.add_argument("--lm-weight", type=float, default=0.1)
    ap.add_argument("--kl-weight", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--curriculum", default=CURRICULUM, help="f:max_len,... (see above)")
    ap.add_argument("--init", default="", help="continue from this checkpoint (safetensors)")
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = V4Config.load(a.config)
    model = Transformer(cfg)
    init_weights(model, a.seed)
    if a.init:
        load_checkpoint(model, a.init)
        print(f"continuing from {a.init}", flush=True)
    curriculum = parse_curriculum(a.curriculum)
    model = model.to(dev).train()
    main_params, mtp_params = count_params(model)
    print(f"params: main {main_params:,}, mtp {mtp_params:,}", flush=True)
    opt = torch.optim.AdamW(param_groups(model, a.wd), lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    pad = cfg.eos_token_id if cfg.eos_token_id >= 0 else 0

    data = Shards(a.data)
    t_wait = time.time()
    while data.refresh() == 0 or not data.octave[0]:
        if time.time() - t_wait > 300:
            raise SystemExit("no training data arrived")
        time.sleep(0.5)
    os.makedirs(a.out, exist_ok=True)
    log = open(os.path.join(a.out, "train_log.jsonl"), "w")

    t0 = time.time()
    step = 0
    acc = {"ans": 0.0, "lm": 0.0, "kl": 0.0, "em": 0.0, "tok": 0, "n": 0}
    sparse_at = None
    t_log = 0.0
    while True:
        el = time.time() - t0
        f = el / a.time_budget
        if f >= 1.0 or (a.max_steps and step >= a.max_steps):
            break
        if step % 50 == 0:
            data.refresh()
        sparse = f >= a.sparse_from
        if sparse and sparse_at is None:
            sparse_at = step
            print(f"step {step}: sparse training from here (t={el:.0f}s)", flush=True)
        max_len = max_len_at(f, curriculum)
        inp, tgt, ans = data.batch(rng, max_len, a.tokens_per_step, pad)
        inp_t = torch.from_numpy(inp).to(dev, non_blocking=True)
        tgt_t = torch.from_numpy(tgt).to(dev, non_blocking=True)
        ans_t = torch.from_numpy(ans).to(dev, non_blocking=True)
        valid = tgt_t >= 0
        lr = lr_at(step, f, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        ctl = Control(sparse=sparse, exact_topk=False, want_kl=True, token_mask=valid, loads=[])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inp_t, ctl)
        ce = F.cross_entropy(
            logits.float().view(-1, cfg.vocab_size), tgt_t.view(-1), reduction="none"
        ).view(tgt_t.shape)
        lm_mask = valid & ~ans_t
        ans_loss = (ce * ans_t).sum() / ans_t.sum().clamp_min(1)
        lm_loss = (ce * lm_mask).sum() / lm_mask.sum().clamp_min(1)
        kl = torch.stack(ctl.kl).mean() if ctl.kl else torch.zeros((), device=dev)
        loss = ans_loss + a.lm_weight * lm_loss + a.kl_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for gate, counts in ctl.loads:
                load = counts[valid].sum(0).float()
                gate.bias += 1e-3 * torch.sign(load.mean() - load)
            hit = (logits.argmax(-1) == tgt_t) | ~ans_t
            em = hit.all(-1).float().mean()
            acc["ans"] += float(ans_loss)
            acc["lm"] += float(lm_loss)
            acc["kl"] += float(kl)
            acc["em"] += float(em)
            acc["tok"] += int(valid.sum())
            acc["n"] += 1
        step += 1
        if step % a.log_every == 0:
            n = acc["n"]
            el = time.time() - t0
            rec = {
                "step": step,
                "time": round(el, 1),
                "lr": lr,
                "max_len": max_len,
                "sparse": sparse,
                "ans_loss": acc["ans"] / n,
                "lm_loss": acc["lm"] / n,
                "kl": acc["kl"] / n,
                "train_em": acc["em"] / n,
                "tokens": acc["tok"],
                "samples_available": data.n_samples,
            }
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(
                f"step {step} t={el:.0f}s len<={max_len} {'sparse' if sparse else 'dense'} "
                f"ans {rec['ans_loss']:.3f} lm {rec['lm_loss']:.3f} kl {rec['kl']:.3f} "
                f"em {rec['train_em']:.2f} tok/s {acc['tok'] / max(el - t_log, 1e-3):.0f} "
                f"data {data.n_samples}",
                flush=True,
            )
            acc = {"ans": 0.0, "lm": 0.0, "kl": 0.0, "em": 0.0, "tok": 0, "n": 0}
            t_log = el
    wall = time.time() - t0
    save_checkpoint(model, os.path.join(a.out, "model.safetensors"))
    summary = {
        "steps": step,
        "train_wall_s": round(wall, 1),
        "sparse_from_step": sparse_at,
        "params_main": main_params,
        "params_mtp": mtp_params,
        "samples_available": data.n_samples,
        "tokens_available": data.n_tokens,
        "args": vars(a),
    }
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
