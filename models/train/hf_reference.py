#!/usr/bin/env python3
"""Golden outputs of HF transformers' own DeepSeek-V4 (DeepseekV4ForCausalLM) for needlework.

An independent referee for the C++ CPU engine (tests/cpu_backend/hf_reference_test.cc): the model
folder (config.json + model.safetensors, e.g. models/tiny-v4) is loaded by transformers itself,
run in fp32 (TF32 off, attn_implementation "eager", no KV cache: every forward is a full prefill)
on fixed prompts, and the script writes, per prompt:
  - the prompt ids and the effective index_topk;
  - the full logit rows (vocab_size floats) at 8 stored positions, the last one included;
  - the greedy continuation (8 tokens; each step a fresh full forward over prompt + tokens so far)
    with each step's top-1 minus top-2 logit margin;
  - per ratio-4 (CSA) layer and stored position: HF's indexer top-k set (sorted ids), the k-th and
    (k+1)-th scores over the visible compressed entries and the largest |score| there, so that the
    C++ test can leave out near-ties, and whether the set HF actually used equals the top-k
    recomputed from its scores.
It also records what it verified about HF's implementation (see KNOWN DIFFERENCES).

Device command (the H200 image has PyTorch 2.11 and transformers 5.17):

    python3 models/train/hf_reference.py --model models/tiny-v4 --out $OUT/tiny-v4.json

then check in the file as tests/data/hf_reference/tiny-v4.json. It takes well under 2 minutes on
an H200 (7 prompts of 64..2,100 tokens, 9 full forwards each). Needs torch, transformers,
safetensors and numpy only.

Prompts: tests/data/hf_reference/prompts.json (--prompts). Entries with "tokens" are used as they
are (the NIAH prompts there were written by `nw data niah`); entries with "random":
{"seed": S, "length": N} are expanded here into N ids drawn uniformly from [0, vocab_size - 2)
with numpy's PCG64 (np.random.default_rng(S)), which leaves out tiny-v4's special tokens
1022/1023. The output holds the expanded ids, so the C++ side never regenerates them.

KNOWN DIFFERENCES between HF transformers, DeepSeek's inference code and needlework (read from
transformers' src/transformers/models/deepseek_v4/modeling_deepseek_v4.py; the script checks the
first two at run time from the loaded module's source and records the result):
  1. Shared expert clamp: HF's DeepseekV4MLP (the shared expert) always clamps gate to
     <= swiglu_limit and up to [-swiglu_limit, swiglu_limit], like the routed experts. needlework
     does the same when config.json's "swiglu_clamp_shared_expert" is true (the default); the
     shipped tiny-v4 says false (it was trained without the clamp), so the C++ test forces it to
     true. HF does not know the key: the script removes it from the config it hands to HF.
  2. Indexer Hadamard: HF's indexer applies no Hadamard rotation to its queries or compressed keys
     (DeepSeek's code and needlework rotate both). The rotation is orthonormal, so the scores are
     equal up to fp32 rounding; it only matters under FP4/FP8 index simulation, which this script
     does not do.
  3. Top-k ties: HF's indexer and router use torch.topk (ties unspecified); needlework gives ties
     to the lower index. Near-ties are recorded so the test can skip them.
  4. Hash routing with a token routed twice to one expert: HF's experts loop adds that expert once
     per slot (twice), as needlework does (DeepSeek's first release adds it once).
  5. Router weights: HF renormalises the selected scores for every scoring function (with +1e-20);
     DeepSeek and needlework do not renormalise softmax scores. tiny-v4 uses sqrtsoftplus, where
     all three renormalise.
  6. RMSNorm: HF's mean of squares is fp32; needlework sums squares in double. fp32 rounding only.
  7. YaRN: HF's DeepseekV4Config forces attention_factor 1.0 (no mscale on cos/sin), as DeepSeek
     and needlework.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_PROMPTS = os.path.join(REPO, "tests", "data", "hf_reference", "prompts.json")
CLAMP_KEY = "swiglu_clamp_shared_expert"


def fail(msg: str) -> None:
    print(f"hf_reference: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def log(msg: str) -> None:
    print(f"hf_reference: {msg}", flush=True)


try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover - depends on the machine
    fail(f"{e}; this script needs torch and numpy (run it on the GPU machine)")


def fp32_mode() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def stored_positions(n: int, count: int = 8) -> list[int]:
    """`count` positions spread evenly over [0, n), the last one included."""
    return sorted({max(0, round((j + 1) * n / count) - 1) for j in range(count)})


def load_prompts(path: str, vocab: int) -> list[dict]:
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read prompts {path}: {e}")
    out = []
    for i, p in enumerate(doc.get("prompts", [])):
        if "name" not in p:
            fail(f"{path}: prompt {i} has no name")
        q = {"name": p["name"], "index_topk": p.get("index_topk")}
        if "tokens" in p:
            q["tokens"] = [int(t) for t in p["tokens"]]
        elif "random" in p:
            r = p["random"]
            rng = np.random.default_rng(int(r["seed"]))
            q["tokens"] = [int(t) for t in rng.integers(0, vocab - 2, int(r["length"]))]
            q["made_by"] = f"np.random.default_rng({r['seed']}).integers(0, {vocab - 2}, {r['length']})"
        else:
            fail(f"{path}: prompt {p['name']} has neither 'tokens' nor 'random'")
        if not q["tokens"] or max(q["tokens"]) >= vocab or min(q["tokens"]) < 0:
            fail(f"{path}: prompt {p['name']} has ids outside [0, {vocab})")
        out.append(q)
    if not out:
        fail(f"{path}: no prompts")
    return out


def load_model(model_dir: str, device: str):
    try:
        import transformers
        from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
    except ImportError as e:
        fail(f"transformers with DeepseekV4ForCausalLM is needed (5.17 on the device image): {e}")
    cfg_path = os.path.join(model_dir, "config.json")
    try:
        with open(cfg_path) as f:
            raw = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"cannot read {cfg_path}: {e}")
    clamp = raw.pop(CLAMP_KEY, True)
    if not isinstance(clamp, bool):
        fail(f"{cfg_path}: key '{CLAMP_KEY}' must be true or false")
    config = DeepseekV4Config.from_dict(raw)
    kwargs = {"config": config, "attn_implementation": "eager", "output_loading_info": True}
    # The eager experts loop is the code read for KNOWN DIFFERENCES 4; older versions have
    # neither the experts_implementation switch nor the `dtype` spelling.
    attempts = [
        {"dtype": torch.float32, "experts_implementation": "eager"},
        {"dtype": torch.float32},
        {"torch_dtype": torch.float32},
    ]
    errors = []
    for extra in attempts:
        try:
            model, info = DeepseekV4ForCausalLM.from_pretrained(model_dir, **kwargs, **extra)
            break
        except Exception as e:  # noqa: BLE001 - try the next spelling, report all at the end
            errors.append(f"{sorted(extra)}: {type(e).__name__}: {e}")
    else:
        fail(f"cannot load {model_dir} with transformers: " + " | ".join(errors))
    missing = list(info.get("missing_keys", []))
    if missing:
        fail(f"{model_dir}: HF found no weights for {len(missing)} parameters, e.g. {missing[:5]}")
    mismatched = list(info.get("mismatched_keys", []))
    if mismatched:
        fail(f"{model_dir}: shape mismatches {mismatched[:5]}")
    model = model.to(device).eval()
    for name, p in model.named_parameters():
        if p.is_floating_point() and p.dtype != torch.float32:
            fail(f"parameter {name} is {p.dtype}, not float32")
    meta = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "config_file_swiglu_clamp_shared_expert": clamp,
        "unexpected_keys": sorted(info.get("unexpected_keys", []))[:20],
        "attn_implementation": model.config._attn_implementation,
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
    }
    if meta["attn_implementation"] != "eager":
        fail(f"attention implementation is {meta['attn_implementation']}, not eager")
    return model, config, meta


def verify_hf_source(model) -> dict:
    """What the loaded implementation does, read from its own source (KNOWN DIFFERENCES 1, 2)."""
    mod = sys.modules[type(model).__module__]
    src = inspect.getsource(mod)
    notes = {"modeling_file": getattr(mod, "__file__", "?")}
    mlp = getattr(mod, "DeepseekV4MLP", None)
    if mlp is not None:
        s = inspect.getsource(mlp.forward)
        notes["shared_expert_clamped"] = "clamp" in s
    else:
        notes["shared_expert_clamped"] = None
    idx = getattr(mod, "DeepseekV4Indexer", None)
    idx_src = inspect.getsource(idx) if idx is not None else ""
    scorer = getattr(mod, "DeepseekV4IndexerScorer", None)
    idx_src += inspect.getsource(scorer) if scorer is not None else ""
    words = ("hadamard", "rotate_activation", "fast_hadamard")
    notes["indexer_hadamard"] = any(w in idx_src.lower() for w in words)
    notes["hadamard_anywhere_in_module"] = any(w in src.lower() for w in words)
    return notes


class IndexerTap:
    """Forward hooks on every CSA layer's indexer: the scorer's scores [B, S, T] and the indices
    the indexer returned [B, S, k] (-1 for invalid picks)."""

    def __init__(self, model):
        self.layers: list[tuple[int, object]] = []
        self.scores: dict[int, torch.Tensor] = {}
        self.picked: dict[int, torch.Tensor] = {}
        self.active = False
        for i, layer in enumerate(model.model.layers):
            comp = getattr(layer.self_attn, "compressor", None)
            indexer = getattr(comp, "indexer", None) if comp is not None else None
            if indexer is None:
                continue
            scorer = getattr(indexer, "scorer", None)
            if scorer is None:
                fail(f"layer {i}: the indexer has no 'scorer' submodule; adapt IndexerTap")
            self.layers.append((i, indexer))
            scorer.register_forward_hook(self._save(self.scores, i))
            indexer.register_forward_hook(self._save(self.picked, i))

    def _save(self, store: dict, i: int):
        def hook(_module, _inputs, output):
            if self.active:
                store[i] = output.detach()

        return hook

    def set_topk(self, k: int) -> None:
        for _, indexer in self.layers:
            indexer.index_topk = k


@torch.no_grad()
def run_prompt(model, tap: IndexerTap, p: dict, cfg_topk: int, device: str, new_tokens: int):
    k = p["index_topk"] or cfg_topk
    tap.set_topk(k)
    ids = torch.tensor([p["tokens"]], dtype=torch.long, device=device)
    n = ids.shape[1]
    positions = stored_positions(n)
    tap.active = True
    tap.scores.clear()
    tap.picked.clear()
    logits = model(input_ids=ids, use_cache=False).logits[0].float()
    tap.active = False
    out = {
        "name": p["name"],
        "tokens": p["tokens"],
        "index_topk": k,
        "positions": positions,
        # 9 significant digits round-trip every float32 exactly.
        "logits": [[float(f"{v:.9g}") for v in logits[t].tolist()] for t in positions],
        "indexer": [],
    }
    if "made_by" in p:
        out["made_by"] = p["made_by"]
    for layer, _ in tap.layers:
        if layer not in tap.scores or layer not in tap.picked:
            fail(f"prompt {p['name']}: no indexer output captured for layer {layer}")
        scores = tap.scores[layer][0].float()  # [S, T]
        picked = tap.picked[layer][0]  # [S, k']
        rec = {"layer": layer, "topk_sets": [], "kth_score": [], "next_score": [],
               "max_abs_score": [], "num_visible": [], "hf_used_set_agrees": []}
        for t in positions:
            visible = min((t + 1) // 4, scores.shape[-1])
            s = scores[t, :visible]
            used = sorted(int(v) for v in picked[t].tolist() if v >= 0)
            if visible > k:
                top = torch.topk(s, k + 1)
                mine = sorted(int(v) for v in top.indices[:k].tolist())
                kth, nxt = float(top.values[k - 1]), float(top.values[k])
            else:
                mine = list(range(visible))
                kth = nxt = None
            rec["topk_sets"].append(mine)
            rec["kth_score"].append(kth)
            rec["next_score"].append(nxt)
            rec["max_abs_score"].append(float(s.abs().max()) if visible else 0.0)
            rec["num_visible"].append(visible)
            rec["hf_used_set_agrees"].append(used == mine)
        out["indexer"].append(rec)

    greedy, margins = [], []
    cur = ids
    last = logits[-1]
    for step in range(new_tokens):
        if step > 0:
            last = model(input_ids=cur, use_cache=False).logits[0, -1].float()
        top2 = torch.topk(last, 2)
        margins.append(float(top2.values[0] - top2.values[1]))
        nxt = int(top2.indices[0])
        greedy.append(nxt)
        cur = torch.cat([cur, torch.tensor([[nxt]], device=device)], dim=1)
    out["greedy"] = greedy
    out["greedy_top2_margins"] = margins
    out["greedy_max_abs_logit"] = float(logits[-1].abs().max())
    tap.set_topk(cfg_topk)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="folder with config.json and model.safetensors")
    ap.add_argument("--out", required=True, help="output JSON")
    ap.add_argument("--prompts", default=DEFAULT_PROMPTS)
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    a = ap.parse_args()
    t0 = time.time()
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        log("warning: running on the CPU (slow)")
    fp32_mode()
    torch.manual_seed(0)
    model, config, meta = load_model(a.model, device)
    log(f"loaded {a.model} with transformers {meta['transformers_version']}, torch "
        f"{meta['torch_version']}, on {device} ({time.time() - t0:.1f} s)")
    notes = verify_hf_source(model)
    log(f"HF implementation: {notes}")
    if notes.get("shared_expert_clamped") is False:
        log("warning: this HF version does not clamp the shared expert; the C++ test assumes it does")
    tap = IndexerTap(model)
    if not tap.layers:
        fail("no CSA (ratio-4) layer with an indexer found")
    prompts = load_prompts(a.prompts, config.vocab_size)
    results = []
    for p in prompts:
        t1 = time.time()
        r = run_prompt(model, tap, p, config.index_topk, device, a.new_tokens)
        agree = all(all(x["hf_used_set_agrees"]) for x in r["indexer"])
        log(f"{r['name']}: n={len(r['tokens'])} top-k {r['index_topk']} greedy={r['greedy']} "
            f"min top-2 margin {min(r['greedy_top2_margins']):.3g}, recomputed top-k = HF's: "
            f"{agree} ({time.time() - t1:.1f} s)")
        results.append(r)
    doc = {
        "generator": "models/train/hf_reference.py (HF transformers DeepseekV4ForCausalLM, fp32, "
        "TF32 off, eager attention, no KV cache, device " + device + ")",
        "model": os.path.normpath(a.model),
        "needlework_config": {CLAMP_KEY: True},
        "meta": meta,
        "hf_implementation": notes,
        "layers_with_indexer": [i for i, _ in tap.layers],
        "tolerance": "tests/cpu_backend/hf_reference_test.cc: per stored position "
        "max |cpp - hf| <= 1e-4 * max |hf|; greedy tokens equal up to the first HF top-2 near-tie; "
        "top-k sets equal where (kth - next) > 1e-4 * max |score|",
        "prompts": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, a.out)
    log(f"wrote {a.out} ({os.path.getsize(a.out)} bytes) in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
