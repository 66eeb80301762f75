"""What a user would run instead of needlework: HF transformers and models/train/v4.py, timed on the
prompts bench/gpu_throughput_bench exported (--export DIR), on the same GPU in the same call.

One judged needle = one forward over prompt + answer tokens (teacher forcing: found when every
answer position's argmax is the next answer token, which equals greedy decoding), batch 1, as the
issue's figures count it. An implementation name with a "-bN" suffix (v4-bf16-b8) runs N prompts
of a length in one forward, right-padded to the longest: both models are causal (window,
compressed blocks and indexer see only earlier positions), so padding after a prompt changes
none of its logits; the issue's v4.py figures include batch 8. Per implementation and length: needles/s over the timed prompts (after
one untimed warm-up forward), found count, peak GPU memory. A length stops early once --time-cap
seconds are spent; an out-of-memory error is recorded as such.

  python3 bench/torch_baselines.py --prompts DIR --model models/tiny-v4 --out FILE.json \
      [--impls hf-bf16,hf-fp32,v4-bf16,v4-fp32] [--time-cap 60]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "models", "train"))


def load_prompts(folder: str) -> dict[int, list[dict]]:
    by_len: dict[int, list[dict]] = {}
    with open(os.path.join(folder, "prompts.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            toks = np.fromfile(os.path.join(folder, r["tokens"]), dtype="<i4").astype(np.int64)
            r["seq"] = np.concatenate([toks, np.array(r["answer"], dtype=np.int64)])
            r["prompt_len"] = len(toks)
            by_len.setdefault(r["length"], []).append(r)
    return dict(sorted(by_len.items()))


class Hf:
    def __init__(self, model_dir: str, dtype: torch.dtype):
        import hf_reference  # models/train/hf_reference.py: checked loading of the HF model

        model, _, meta = hf_reference.load_model(model_dir, "cuda")
        self.model = model.to(dtype)
        self.meta = meta

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


class V4:
    def __init__(self, model_dir: str, bf16: bool):
        from golden import load_model  # models/train/golden.py

        self.model = load_model(model_dir, "cuda")
        self.bf16 = bf16

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        from v4 import Control

        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.bf16):
            return self.model(ids, Control(sparse=True))


def split_batch(impl: str) -> tuple[str, int]:
    """("v4-bf16", 8) for "v4-bf16-b8"; batch 1 without the suffix."""
    m = re.fullmatch(r"(.+)-b(\d+)", impl)
    return (m.group(1), int(m.group(2))) if m else (impl, 1)


def make(impl: str, model_dir: str):
    if impl == "hf-bf16":
        return Hf(model_dir, torch.bfloat16)
    if impl == "hf-fp32":
        return Hf(model_dir, torch.float32)
    if impl == "v4-bf16":
        return V4(model_dir, True)
    if impl == "v4-fp32":
        return V4(model_dir, False)
    raise SystemExit(f"torch_baselines.py: unknown implementation '{impl}'")


@torch.no_grad()
def judge(m, rs: list[dict]) -> int:
    """Needles found among rs, judged in one forward (right-padded with token 0)."""
    width = max(len(r["seq"]) for r in rs) - 1
    ids = torch.zeros((len(rs), width), dtype=torch.int64)
    for i, r in enumerate(rs):
        ids[i, : len(r["seq"]) - 1] = torch.from_numpy(r["seq"][:-1])
    logits = m.logits(ids.to("cuda"))
    found = 0
    for i, r in enumerate(rs):
        p0, end = r["prompt_len"] - 1, len(r["seq"]) - 1
        pred = logits[i, p0:end].argmax(-1).cpu().numpy()
        found += int((pred == r["seq"][p0 + 1 :]).all())
    return found


def run(impl: str, model_dir: str, prompts: dict[int, list[dict]], cap: float) -> list[dict]:
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    base, batch = split_batch(impl)
    try:
        m = make(base, model_dir)
    except Exception as e:  # noqa: BLE001 - recorded, the other implementations still run
        return [{"impl": impl, "error": f"load: {type(e).__name__}: {e}"}]
    for length, rs in prompts.items():
        row = {"impl": impl, "length": length}
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        try:
            judge(m, rs[:batch])  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            found = n = 0
            for k in range(0, len(rs), batch):
                group = rs[k : k + batch]
                found += judge(m, group)
                n += len(group)
                torch.cuda.synchronize()
                if time.perf_counter() - t0 > cap:
                    break
            wall = time.perf_counter() - t0
            row.update(
                batch=batch,
                n=n,
                found=found,
                wall_s=wall,
                needles_per_s=n / wall,
                peak_gib=torch.cuda.max_memory_allocated() / 2**30,
            )
        except torch.cuda.OutOfMemoryError:
            row["error"] = "out of memory"
        except Exception as e:  # noqa: BLE001 - a length that cannot run is a result too
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    del m
    torch.cuda.empty_cache()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", required=True, help="folder written by gpu_throughput_bench --export")
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--impls", default="hf-bf16,hf-fp32,v4-bf16,v4-fp32")
    ap.add_argument("--max-length", type=int, default=1 << 30, help="skip longer prompts")
    ap.add_argument("--time-cap", type=float, default=60.0, help="seconds per (impl, length)")
    a = ap.parse_args()
    prompts = {k: v for k, v in load_prompts(a.prompts).items() if k <= a.max_length}
    rows = []
    for impl in a.impls.split(","):
        rows += run(impl, a.model, prompts, a.time_cap)
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    try:
        import transformers

        meta["transformers"] = transformers.__version__
    except ImportError:
        pass
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
