"""DeepSeek-V4 in PyTorch, the same architecture as needlework's C++ engine.

This is the training model of models/tiny-v4 and a second reference for the C++ CPU backend
(engine/cpu/sequence.cc): on the same checkpoint, in fp32, the two give the same logits. Config keys
are the Hugging Face names that `nw model init` writes (engine/checkpoint/config.cc ToHfJson), and
the state_dict names, shapes and on-disk dtypes are exactly those of the C++ loader
(engine/checkpoint/tensor_specs.cc, docs/checkpoint-format.md §2), MTP blocks included.

Forward pass (spec: docs/v4-attention.md §2):
  embedding copied to hc_mult streams; per layer hc_pre -> attn_norm -> attention -> hc_post,
  hc_pre -> ffn_norm -> MoE -> hc_post; hc_head -> norm -> head.
Attention, all queries of a sequence at once (the training form):
  q = per-head RMS(wq_b(q_norm(wq_a x))), kv = kv_norm(wkv x), interleaved RoPE on the last
  rope_head_dim dims (compress_rope_theta + YaRN on layers with ratio > 0, rope_theta without YaRN
  on ratio-0 layers); window = raw KV of tokens t-W+1..t; compressed entries i < (t+1)//r (ratio
  128: all of them, ratio 4: the indexer's top-k, or all of them in dense mode); one softmax over
  window + compressed + the per-head sink; inverse RoPE of the output; grouped wo_a, then wo_b.
Compressor (ratio 4 overlapping with channel halves A/B, ratio 128 plain): per-channel softmax
  pooling of wkv x over the block's tokens with scores wgate x + ape, RMSNorm, RoPE at r*i; the
  indexer's compressor (width index_head_dim) then applies the orthonormal Hadamard.
Indexer: q = Hadamard(RoPE(wq_b(qr))), w = weights_proj(x) * c^-1/2 * h^-1/2,
  I[t,i] = sum_h w_h ReLU(q_h . K_i); top-k over the visible entries, higher score first, equal
  scores to the lower index (as kernels/cpu/topk.h).

Training modes (DeepSeek V3.2 paper §2.1): `dense` attends to every visible compressed entry and
returns the indexer's KL loss against the main attention's head-summed distribution over the
compressed entries; `sparse` attends to the indexer's top-k and restricts the KL to that set. The
indexer sees detached inputs, so its loss trains only the indexer.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


def f32(x: float) -> float:
    """Rounds a Python float to the nearest float32 value."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


@dataclass
class V4Config:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    head_dim: int
    rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    window_size: int
    compress_ratios: list[int]
    rope_theta: float
    compress_rope_theta: float
    index_n_heads: int
    index_head_dim: int
    index_topk: int
    hc_mult: int
    hc_sinkhorn_iters: int
    n_routed_experts: int
    n_activated_experts: int
    moe_inter_dim: int
    score_func: str
    route_scale: float
    n_hash_layers: int
    swiglu_limit: float
    max_position_embeddings: int
    # The shared expert's SwiGLU clamped like the routed experts' (DeepSeek's current definition,
    # HF transformers; the C++ default). config.json "swiglu_clamp_shared_expert", default true;
    # models/tiny-v4 was trained with it false (the first release's unclamped shared expert).
    swiglu_clamp_shared_expert: bool = True
    n_mtp_layers: int = 1
    n_shared_experts: int = 1
    original_seq_len: int = 0
    rope_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    hc_eps: float = 1e-6
    norm_eps: float = 1e-6
    bos_token_id: int = -1
    eos_token_id: int = -1
    extra: dict = field(default_factory=dict)

    @staticmethod
    def from_hf(j: dict) -> "V4Config":
        rs = j.get("rope_scaling") or {}
        cfg = V4Config(
            vocab_size=j["vocab_size"],
            dim=j["hidden_size"],
            n_layers=j["num_hidden_layers"],
            n_heads=j["num_attention_heads"],
            head_dim=j["head_dim"],
            rope_head_dim=j["qk_rope_head_dim"],
            q_lora_rank=j["q_lora_rank"],
            o_groups=j["o_groups"],
            o_lora_rank=j["o_lora_rank"],
            window_size=j["sliding_window"],
            compress_ratios=list(j["compress_ratios"]),
            rope_theta=j["rope_theta"],
            compress_rope_theta=j["compress_rope_theta"],
            index_n_heads=j["index_n_heads"],
            index_head_dim=j["index_head_dim"],
            index_topk=j["index_topk"],
            hc_mult=j["hc_mult"],
            hc_sinkhorn_iters=j["hc_sinkhorn_iters"],
            n_routed_experts=j["n_routed_experts"],
            n_activated_experts=j["num_experts_per_tok"],
            moe_inter_dim=j["moe_intermediate_size"],
            score_func=j["scoring_func"],
            route_scale=j["routed_scaling_factor"],
            n_hash_layers=j["num_hash_layers"],
            swiglu_limit=j["swiglu_limit"],
            max_position_embeddings=j["max_position_embeddings"],
            swiglu_clamp_shared_expert=j.get("swiglu_clamp_shared_expert", True),
            n_mtp_layers=j.get("num_nextn_predict_layers", 1),
            n_shared_experts=j.get("n_shared_experts", 1),
            original_seq_len=rs.get("original_max_position_embeddings", 0),
            rope_factor=rs.get("factor", 1.0),
            beta_fast=rs.get("beta_fast", 32.0),
            beta_slow=rs.get("beta_slow", 1.0),
            hc_eps=j.get("hc_eps", 1e-6),
            norm_eps=j.get("rms_norm_eps", 1e-6),
            bos_token_id=j.get("bos_token_id", -1),
            eos_token_id=j.get("eos_token_id", -1),
        )
        assert len(cfg.compress_ratios) == cfg.n_layers + cfg.n_mtp_layers
        assert all(r in (0, 4, 128) for r in cfg.compress_ratios)
        assert cfg.n_heads % cfg.o_groups == 0 and cfg.n_shared_experts == 1
        assert cfg.score_func in ("softmax", "sigmoid", "sqrtsoftplus")
        assert isinstance(cfg.swiglu_clamp_shared_expert, bool), (
            "config key 'swiglu_clamp_shared_expert' must be true or false"
        )
        return cfg

    @staticmethod
    def load(path: str) -> "V4Config":
        with open(path) as f:
            return V4Config.from_hf(json.load(f))


# ---- RoPE ---------------------------------------------------------------------------------------


def rope_frequencies(
    rope_dim: int,
    base: float,
    original_seq_len: int,
    factor: float,
    beta_fast: float,
    beta_slow: float,
) -> list[float]:
    """The rope_dim/2 inverse frequencies, float32 operation by operation as kernels/cpu/rope.cc
    (itself DeepSeek's precompute_freqs_cis), so the tables agree bit for bit with the C++ ones."""
    pairs = rope_dim // 2
    base32, dim32 = f32(base), f32(rope_dim)
    freqs = [f32(1.0 / f32(base32 ** f32(f32(2 * j) / dim32))) for j in range(pairs)]
    if original_seq_len > 0:

        def correction_dim(rot: float) -> float:
            turns = original_seq_len / (rot * 2 * math.pi)
            return rope_dim * math.log(turns) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), rope_dim - 1)
        if low == high:
            high += 0.001
        lowf, span, fac = f32(low), f32(high - low), f32(factor)
        out = []
        for j, fj in enumerate(freqs):
            ramp = min(max(f32(f32(f32(j) - lowf) / span), 0.0), 1.0)
            smooth = f32(1.0 - ramp)
            out.append(f32(f32(f32(fj / fac) * f32(1.0 - smooth)) + f32(fj * smooth)))
        freqs = out
    return freqs


class RopeTable(nn.Module):
    """cos/sin per (position, pair): angle = float32(t * f_j), cos/sin in float64 rounded to
    float32 (as the C++ RopeTable)."""

    def __init__(self, freqs: list[float], max_pos: int):
        super().__init__()
        f = torch.tensor(freqs, dtype=torch.float32)
        ang = torch.outer(torch.arange(max_pos, dtype=torch.float32), f)
        self.register_buffer("cos", ang.double().cos().float(), persistent=False)
        self.register_buffer("sin", ang.double().sin().float(), persistent=False)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool = False):
    """Interleaved RoPE on the whole last dim of x ([..., T, (heads,) 2P]); cos/sin are [T, P]
    broadcast over any dims between T and the pairs."""
    shape = x.shape
    xp = x.float().unflatten(-1, (-1, 2))
    a, b = xp[..., 0], xp[..., 1]
    extra = x.dim() - cos.dim() - 1
    c = cos.view(cos.shape[0], *([1] * extra), cos.shape[1])
    s = sin.view(sin.shape[0], *([1] * extra), sin.shape[1])
    if inverse:
        s = -s
    out = torch.stack([a * c - b * s, a * s + b * c], dim=-1)
    return out.flatten(-2).reshape(shape).to(x.dtype)


def rope_last(x: torch.Tensor, rd: int, cos, sin, inverse: bool = False) -> torch.Tensor:
    """RoPE on the last rd dims of x, the others unchanged."""
    return torch.cat([x[..., :-rd], apply_rope(x[..., -rd:], cos, sin, inverse)], dim=-1)


def hadamard_matrix(n: int) -> torch.Tensor:
    """Sylvester Walsh-Hadamard matrix scaled by n^-1/2 (symmetric, orthonormal)."""
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h / math.sqrt(n)).float()


# ---- Building blocks ----------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight.float()


def rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.float()
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


def linear(i: int, o: int) -> nn.Linear:
    return nn.Linear(i, o, bias=False)


class Compressor(nn.Module):
    """Gated per-channel softmax pooling of `ratio` tokens (ratio 4: overlapping, 8 tokens through
    channel halves A (previous block) and B (current block))."""

    def __init__(self, cfg: V4Config, ratio: int, width: int, rotate: bool):
        super().__init__()
        self.ratio, self.width, self.rotate = ratio, width, rotate
        self.overlap = ratio == 4
        coff = 2 if self.overlap else 1
        self.rd = cfg.rope_head_dim
        self.wkv = linear(cfg.dim, coff * width)
        self.wgate = linear(cfg.dim, coff * width)
        self.ape = nn.Parameter(torch.zeros(ratio, coff * width))
        self.norm = RMSNorm(width, cfg.norm_eps)

    def forward(self, x: torch.Tensor, rope: RopeTable, hadamard: torch.Tensor | None):
        """x [B, T, D] -> the complete blocks' entries [B, T // ratio, width] (fp32)."""
        b, t, _ = x.shape
        r, d = self.ratio, self.width
        nb = t // r
        if nb == 0:
            return x.new_zeros(b, 0, d, dtype=torch.float32)
        xs = x[:, : nb * r]
        kv = self.wkv(xs).float().view(b, nb, r, -1)
        score = self.wgate(xs).float().view(b, nb, r, -1) + self.ape.float()
        if self.overlap:
            kv_prev = F.pad(kv[:, :-1, :, :d], (0, 0, 0, 0, 1, 0), value=0.0)
            sc_prev = F.pad(score[:, :-1, :, :d], (0, 0, 0, 0, 1, 0), value=float("-inf"))
            kv = torch.cat([kv_prev, kv[..., d:]], dim=2)
            score = torch.cat([sc_prev, score[..., d:]], dim=2)
        c = (kv * score.softmax(dim=2)).sum(dim=2)
        c = self.norm(c)
        pos = torch.arange(nb, device=x.device) * r
        c = rope_last(c, self.rd, rope.cos[pos], rope.sin[pos])
        if self.rotate:
            c = c @ hadamard
        return c


class Indexer(nn.Module):
    def __init__(self, cfg: V4Config):
        super().__init__()
        self.n_heads, self.head_dim = cfg.index_n_heads, cfg.index_head_dim
        self.rd = cfg.rope_head_dim
        self.wq_b = linear(cfg.q_lora_rank, self.n_heads * self.head_dim)
        self.weights_proj = linear(cfg.dim, self.n_heads)
        self.compressor = Compressor(cfg, 4, self.head_dim, rotate=True)
        self.register_buffer("hadamard", hadamard_matrix(self.head_dim), persistent=False)

    def forward(self, x: torch.Tensor, qr: torch.Tensor, rope: RopeTable) -> torch.Tensor:
        """Scores I [B, T, Nc] over every complete entry (visibility is applied by the caller)."""
        b, t, _ = x.shape
        keys = self.compressor(x, rope, self.hadamard)  # [B, Nc, c]
        q = self.wq_b(qr).float().view(b, t, self.n_heads, self.head_dim)
        q = rope_last(q, self.rd, rope.cos[:t], rope.sin[:t])
        q = q @ self.hadamard
        w = self.weights_proj(x).float() * (self.head_dim**-0.5 * self.n_heads**-0.5)
        dots = torch.einsum("bthc,bnc->bthn", q, keys).relu()
        return torch.einsum("bthn,bth->btn", dots, w)


def select_topk(scores: torch.Tensor, visible: torch.Tensor, k: int, exact: bool) -> torch.Tensor:
    """Boolean [.., Nc] mask of the top-k visible entries per row (all visible ones when fewer).
    exact: equal scores go to the lower index (a stable sort, as the C++ TopK); else torch.topk."""
    k = min(k, scores.shape[-1])
    if k <= 0:
        return torch.zeros_like(visible)
    masked = scores.masked_fill(~visible, float("-inf"))
    if exact:
        idx = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :k]
    else:
        idx = masked.topk(k, dim=-1).indices
    sel = torch.zeros_like(visible).scatter_(-1, idx, True)
    return sel & visible


class Attention(nn.Module):
    def __init__(self, cfg: V4Config, layer_id: int):
        super().__init__()
        self.cfg = cfg
        self.ratio = cfg.compress_ratios[layer_id]
        h, d = cfg.n_heads, cfg.head_dim
        self.attn_sink = nn.Parameter(torch.zeros(h))
        self.wq_a = linear(cfg.dim, cfg.q_lora_rank)
        self.q_norm = RMSNorm(cfg.q_lora_rank, cfg.norm_eps)
        self.wq_b = linear(cfg.q_lora_rank, h * d)
        self.wkv = linear(cfg.dim, d)
        self.kv_norm = RMSNorm(d, cfg.norm_eps)
        self.wo_a = linear(h * d // cfg.o_groups, cfg.o_groups * cfg.o_lora_rank)
        self.wo_b = linear(cfg.o_groups * cfg.o_lora_rank, cfg.dim)
        if self.ratio:
            self.compressor = Compressor(cfg, self.ratio, d, rotate=False)
        if self.ratio == 4:
            self.indexer = Indexer(cfg)

    def forward(self, x: torch.Tensor, rope: RopeTable, ctl: "Control") -> torch.Tensor:
        cfg = self.cfg
        b, t, _ = x.shape
        h, d, rd, win = cfg.n_heads, cfg.head_dim, cfg.rope_head_dim, cfg.window_size
        cos, sin = rope.cos[:t], rope.sin[:t]
        scale = d**-0.5
        dev = x.device

        qr = self.q_norm(self.wq_a(x))
        q = rms(self.wq_b(qr).view(b, t, h, d), cfg.norm_eps)
        q = rope_last(q, rd, cos, sin)
        kv = rope_last(self.kv_norm(self.wkv(x)), rd, cos, sin)
        cdt = torch.bfloat16 if torch.is_autocast_enabled(dev.type) else torch.float32
        qc, kvc = q.to(cdt), kv.to(cdt)

        # Window logits in blocks of W queries against the previous and the current block.
        nb = (t + win - 1) // win
        tp = nb * win
        qb = F.pad(qc, (0, 0, 0, 0, 0, tp - t)).view(b, nb, win, h, d)
        kvp = F.pad(kvc, (0, 0, win, tp - t)).view(b, nb + 1, win, d)
        keys = torch.cat([kvp[:, :-1], kvp[:, 1:]], dim=2)  # [B, nb, 2W, d]
        wl = torch.einsum("bnihd,bnjd->bhnij", qb, keys).float() * scale
        i_idx = torch.arange(win, device=dev).view(win, 1)
        j_idx = torch.arange(2 * win, device=dev).view(1, 2 * win)
        blk = torch.arange(nb, device=dev).view(nb, 1, 1)
        wmask = (j_idx > i_idx) & (j_idx <= i_idx + win) & ((blk > 0) | (j_idx >= win))
        wl = wl.masked_fill(~wmask, float("-inf")).reshape(b, h, tp, 2 * win)[:, :, :t]
        parts = [wl]

        comp = None
        kl = None
        if self.ratio:
            comp = self.compressor(x, rope, None)  # [B, Nc, d]
            nc = comp.shape[1]
            tpos = torch.arange(t, device=dev)
            ends = ((tpos + 1) // self.ratio).view(t, 1)
            visible = torch.arange(nc, device=dev).view(1, nc) < ends
            visible = visible.unsqueeze(0).expand(b, t, nc)
            allowed = visible
            if self.ratio == 4:
                xi, qi = (x.detach(), qr.detach()) if self.training else (x, qr)
                iscore = self.indexer(xi, qi, rope)  # [B, T, Nc]
                topk = ctl.topk if ctl.topk is not None else cfg.index_topk
                if ctl.sparse:
                    allowed = select_topk(iscore.detach(), visible, topk, ctl.exact_topk)
                if ctl.record is not None:
                    ctl.record.append((iscore.detach(), visible, allowed))
            cl = torch.einsum("bthd,bnd->bhtn", qc, comp.to(cdt)).float() * scale
            cl = cl.masked_fill(~allowed.unsqueeze(1), float("-inf"))
            parts.append(cl)
        parts.append(self.attn_sink.float().view(1, h, 1, 1).expand(b, h, t, 1))
        p = torch.cat(parts, dim=-1).softmax(dim=-1)
        pw = p[..., : 2 * win]
        pw = F.pad(pw, (0, 0, 0, tp - t)).view(b, h, nb, win, 2 * win)
        o = torch.einsum("bhnij,bnjd->bnihd", pw.to(cdt), keys).reshape(b, tp, h, d)[:, :t]
        if self.ratio:
            pc = p[..., 2 * win : 2 * win + comp.shape[1]]
            o = o.float() + torch.einsum("bhtn,bnd->bthd", pc.to(cdt), comp.to(cdt)).float()
            if self.ratio == 4 and ctl.want_kl and self.training:
                kl = indexer_kl(pc.detach().sum(1), iscore, allowed, ctl.token_mask)
        o = rope_last(o.float(), rd, cos, sin, inverse=True)
        g = cfg.o_groups
        o = o.reshape(b, t, g, -1)
        wo_a = self.wo_a.weight.view(g, cfg.o_lora_rank, -1)
        o = torch.einsum("btgi,gri->btgr", o.to(cdt), wo_a.to(cdt))
        if kl is not None:
            ctl.kl.append(kl)
        return self.wo_b(o.flatten(2))


def indexer_kl(target: torch.Tensor, iscore: torch.Tensor, allowed: torch.Tensor, token_mask):
    """KL(p || softmax(I)) over the allowed entries of each query row, p = head-summed main
    attention over those entries, L1-normalised. Rows with no allowed entry are skipped."""
    rows = allowed.any(-1)
    if token_mask is not None:
        rows = rows & token_mask
    if not rows.any():
        return iscore.sum() * 0.0
    p = target * allowed
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-20)
    # Rows without an allowed entry keep finite logits (an all -inf row would turn the
    # log-softmax backward into NaN); their p is 0, so they add nothing.
    keep = allowed | ~allowed.any(-1, keepdim=True)
    logq = iscore.float().masked_fill(~keep, float("-inf")).log_softmax(-1)
    logq = logq.masked_fill(~allowed, 0.0)
    term = p * (torch.log(p.clamp_min(1e-30)) - logq)
    return term.sum(-1)[rows].mean()


class Gate(nn.Module):
    def __init__(self, cfg: V4Config, layer_id: int):
        super().__init__()
        self.cfg = cfg
        self.hash = layer_id < cfg.n_hash_layers
        self.weight = nn.Parameter(torch.zeros(cfg.n_routed_experts, cfg.dim))
        if self.hash:
            self.register_buffer(
                "tid2eid", torch.zeros(cfg.vocab_size, cfg.n_activated_experts, dtype=torch.int64)
            )
        else:
            self.register_buffer("bias", torch.zeros(cfg.n_routed_experts))

    def forward(self, x: torch.Tensor, ids: torch.Tensor):
        cfg = self.cfg
        s = F.linear(x.float(), self.weight.float())
        if cfg.score_func == "softmax":
            s = s.softmax(-1)
        elif cfg.score_func == "sigmoid":
            s = s.sigmoid()
        else:
            s = F.softplus(s).sqrt()
        key = None
        if self.hash:
            idx = self.tid2eid[ids]
        else:
            key = (s + self.bias).detach()
            # Equal keys go to the lower expert id (as engine/cpu/moe.cc).
            idx = torch.sort(key, dim=-1, descending=True, stable=True).indices
            idx = idx[..., : cfg.n_activated_experts]
        w = s.gather(-1, idx)
        if cfg.score_func != "softmax":
            w = w / w.sum(-1, keepdim=True)
        return w * cfg.route_scale, idx, key


class Expert(nn.Module):
    def __init__(self, dim: int, inter: int):
        super().__init__()
        self.w1 = linear(dim, inter)
        self.w2 = linear(inter, dim)
        self.w3 = linear(dim, inter)

    def forward(self, x: torch.Tensor, weight: torch.Tensor | None, limit: float) -> torch.Tensor:
        g = self.w1(x).float()
        u = self.w3(x).float()
        if limit > 0:
            u = u.clamp(-limit, limit)
            g = g.clamp(max=limit)
        hmid = F.silu(g) * u
        if weight is not None:
            hmid = weight.unsqueeze(-1) * hmid
        return self.w2(hmid).float()


class MoE(nn.Module):
    def __init__(self, cfg: V4Config, layer_id: int):
        super().__init__()
        self.cfg = cfg
        self.gate = Gate(cfg, layer_id)
        self.experts = nn.ModuleList(
            Expert(cfg.dim, cfg.moe_inter_dim) for _ in range(cfg.n_routed_experts)
        )
        self.shared_experts = Expert(cfg.dim, cfg.moe_inter_dim)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, ctl: "Control") -> torch.Tensor:
        w, idx, key = self.gate(x, ids)
        if ctl.gate_gaps is not None and key is not None:
            top = key.sort(-1, descending=True).values
            k = self.cfg.n_activated_experts
            ctl.gate_gaps.append(float((top[..., k - 1] - top[..., k]).min()))
        y = torch.zeros(*x.shape[:-1], self.cfg.dim, device=x.device, dtype=torch.float32)
        lim = self.cfg.swiglu_limit
        for e, expert in enumerate(self.experts):
            we = (w * (idx == e)).sum(-1)
            if ctl.sparse_experts:
                sel = (idx == e).any(-1)
                if sel.any():
                    y[sel] = y[sel] + expert(x[sel], we[sel], lim)
            else:
                y = y + expert(x, we, lim)
        if ctl.loads is not None and not self.gate.hash:
            ctl.loads.append((self.gate, F.one_hot(idx, self.cfg.n_routed_experts).sum(-2)))
        shared_lim = lim if self.cfg.swiglu_clamp_shared_expert else 0.0
        return y + self.shared_experts(x, None, shared_lim)


def hc_split_sinkhorn(mix, scale, base, n: int, iters: int, eps: float):
    pre = torch.sigmoid(mix[..., :n] * scale[0] + base[:n]) + eps
    post = 2 * torch.sigmoid(mix[..., n : 2 * n] * scale[1] + base[n : 2 * n])
    comb = (mix[..., 2 * n :] * scale[2] + base[2 * n :]).unflatten(-1, (n, n))
    comb = comb.softmax(-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


class Block(nn.Module):
    def __init__(self, cfg: V4Config, layer_id: int):
        super().__init__()
        self.cfg = cfg
        self.layer_id = layer_id
        n = cfg.hc_mult
        mix = (2 + n) * n
        self.attn = Attention(cfg, layer_id)
        self.ffn = MoE(cfg, layer_id)
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hc_attn_fn = nn.Parameter(torch.zeros(mix, n * cfg.dim))
        self.hc_ffn_fn = nn.Parameter(torch.zeros(mix, n * cfg.dim))
        self.hc_attn_base = nn.Parameter(torch.zeros(mix))
        self.hc_ffn_base = nn.Parameter(torch.zeros(mix))
        self.hc_attn_scale = nn.Parameter(torch.ones(3))
        self.hc_ffn_scale = nn.Parameter(torch.ones(3))

    def hc_pre(self, x, fn, scale, base):
        cfg = self.cfg
        with torch.autocast(x.device.type, enabled=False):
            xf = x.flatten(-2).float()
            mix = F.linear(xf, fn.float()) * torch.rsqrt(
                xf.square().mean(-1, keepdim=True) + cfg.norm_eps
            )
            pre, post, comb = hc_split_sinkhorn(
                mix, scale.float(), base.float(), cfg.hc_mult, cfg.hc_sinkhorn_iters, cfg.hc_eps
            )
            u = (pre.unsqueeze(-1) * x.float()).sum(-2)
        return u, post, comb

    @staticmethod
    def hc_post(y, residual, post, comb):
        # X'_j = post_j * y + sum_i comb[i, j] X_i
        return post.unsqueeze(-1) * y.float().unsqueeze(-2) + torch.einsum(
            "btij,btid->btjd", comb, residual.float()
        )

    def forward(self, x, ids, rope: RopeTable, ctl: "Control"):
        u, post, comb = self.hc_pre(x, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)
        x = self.hc_post(self.attn(self.attn_norm(u), rope, ctl), x, post, comb)
        u, post, comb = self.hc_pre(x, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)
        return self.hc_post(self.ffn(self.ffn_norm(u), ids, ctl), x, post, comb)


class MTPBlock(Block):
    """Multi-token-prediction block: stored in the checkpoint (the loader requires it), never run
    by needlework and not trained here."""

    def __init__(self, cfg: V4Config, layer_id: int):
        super().__init__(cfg, layer_id)
        n = cfg.hc_mult
        self.e_proj = linear(cfg.dim, cfg.dim)
        self.h_proj = linear(cfg.dim, cfg.dim)
        self.enorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hnorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.hc_head_fn = nn.Parameter(torch.zeros(n, n * cfg.dim))
        self.hc_head_base = nn.Parameter(torch.zeros(n))
        self.hc_head_scale = nn.Parameter(torch.ones(1))


@dataclass
class Control:
    """Per-forward switches and outputs."""

    sparse: bool = True  # ratio-4 layers attend to the indexer's top-k (else every visible entry)
    topk: int | None = None  # None: the config's index_topk
    exact_topk: bool = True  # stable tie-break to the lower index (as the C++ engine)
    want_kl: bool = False
    sparse_experts: bool = False  # run each expert on its tokens only (else dense, masked)
    token_mask: torch.Tensor | None = None  # [B, T] rows counted in the KL loss
    kl: list = field(default_factory=list)
    loads: list | None = None
    record: list | None = None  # (indexer scores, visible, allowed) per ratio-4 layer
    gate_gaps: list | None = None  # smallest k-th vs (k+1)-th gate key gap per MoE layer


class Transformer(nn.Module):
    def __init__(self, cfg: V4Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.head = linear(cfg.dim, cfg.vocab_size)
        n = cfg.hc_mult
        self.hc_head_fn = nn.Parameter(torch.zeros(n, n * cfg.dim))
        self.hc_head_base = nn.Parameter(torch.zeros(n))
        self.hc_head_scale = nn.Parameter(torch.ones(1))
        self.mtp = nn.ModuleList(MTPBlock(cfg, cfg.n_layers + j) for j in range(cfg.n_mtp_layers))
        maxp = cfg.max_position_embeddings + 64
        plain = rope_frequencies(cfg.rope_head_dim, cfg.rope_theta, 0, 1.0, 32.0, 1.0)
        yarn = rope_frequencies(
            cfg.rope_head_dim,
            cfg.compress_rope_theta,
            cfg.original_seq_len,
            cfg.rope_factor,
            cfg.beta_fast,
            cfg.beta_slow,
        )
        self.rope_plain = RopeTable(plain, maxp)
        self.rope_compress = RopeTable(yarn, maxp)

    def hidden(self, ids: torch.Tensor, ctl: Control) -> torch.Tensor:
        """Final normed hidden states [B, T, D] (fp32)."""
        cfg = self.cfg
        x = self.embed(ids).float().unsqueeze(2).expand(-1, -1, cfg.hc_mult, -1)
        for layer in self.layers:
            rope = self.rope_compress if layer.attn.ratio else self.rope_plain
            x = layer(x, ids, rope, ctl)
        with torch.autocast(x.device.type, enabled=False):
            xf = x.flatten(-2).float()
            mix = F.linear(xf, self.hc_head_fn.float()) * torch.rsqrt(
                xf.square().mean(-1, keepdim=True) + cfg.norm_eps
            )
            pre = torch.sigmoid(mix * self.hc_head_scale.float() + self.hc_head_base.float())
            u = ((pre + cfg.hc_eps).unsqueeze(-1) * x.float()).sum(-2)
        return self.norm(u)

    def forward(self, ids: torch.Tensor, ctl: Control | None = None) -> torch.Tensor:
        ctl = ctl or Control()
        return self.head(self.hidden(ids, ctl)).float()


# ---- Initialisation, checkpoint I/O -------------------------------------------------------------

def tensor_dtype(name: str) -> str:
    """On-disk dtype of a tensor (docs/checkpoint-format.md §2, BF16 layout)."""
    if name.endswith("tid2eid"):
        return "I64"
    if name.split(".")[-1] in ("attn_sink", "ape", "bias") or any(
        name.split(".")[-1].startswith(p) for p in ("hc_attn_", "hc_ffn_", "hc_head_")
    ):
        return "F32"
    return "BF16"


@torch.no_grad()
def init_weights(model: Transformer, seed: int) -> None:
    """Training initialisation: [out, in] matrices N(0, 1/in), output projections (wo_b, w2)
    scaled by (2 n_layers)^-1/2, norms 1, ape N(0, 0.02^2), hc fn N(0, 0.01/in), hc base as the C++
    random checkpoints (pre = 1/n, post = 1, comb near identity), sinks 0, tid2eid k distinct
    experts per token."""
    cfg = model.cfg
    g = torch.Generator().manual_seed(seed)
    n = cfg.hc_mult
    out_scale = (2 * cfg.n_layers) ** -0.5
    for name, p in model.named_parameters():
        leaf = name.split(".")[-1]
        if leaf == "weight" and p.dim() == 2:
            std = p.shape[1] ** -0.5
            if ".wo_b." in name or ".w2." in name:
                std *= out_scale
            p.copy_(torch.randn(p.shape, generator=g) * std)
        elif leaf == "weight":
            p.fill_(1.0)
        elif leaf == "ape":
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)
        elif leaf.endswith("_fn"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.1 / math.sqrt(p.shape[1]))
        elif leaf.endswith("_scale"):
            p.fill_(1.0)
        elif leaf.endswith("_base"):
            p.zero_()
            p[:n] = -math.log(n - 1) if n > 1 else 4.0
            if p.numel() > n:
                for i in range(n):
                    p[2 * n + i * n + i] = 4.0
        elif leaf == "attn_sink":
            p.zero_()
        else:
            raise ValueError(f"no initialisation for {name}")
    for name, buf in model.named_buffers():
        if name.endswith("tid2eid"):
            k = cfg.n_activated_experts
            rows = [torch.randperm(cfg.n_routed_experts, generator=g)[:k] for _ in range(len(buf))]
            buf.copy_(torch.stack(rows))
        elif name.endswith("gate.bias"):
            buf.zero_()


def export_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The checkpoint tensors with their on-disk dtypes (BF16 layout of docs/checkpoint-format.md §5)."""
    out = {}
    for name, t in model.state_dict().items():
        dt = tensor_dtype(name)
        t = t.detach().cpu()
        if dt == "I64":
            out[name] = t.to(torch.int64).contiguous()
        elif dt == "F32":
            out[name] = t.float().contiguous()
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
    return out


def save_checkpoint(model: Transformer, path: str) -> None:
    from safetensors.torch import save_file

    save_file(export_state(model), path, metadata={"format": "pt"})


def load_checkpoint(model: Transformer, path: str, strict: bool = True) -> None:
    """Loads a checkpoint written by save_checkpoint or by `nw model init` (BF16 layout)."""
    from safetensors.torch import load_file

    sd = load_file(path)
    own = model.state_dict()
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    if strict and (missing or unexpected):
        raise ValueError(f"checkpoint mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    with torch.no_grad():
        for name, t in sd.items():
            if name not in own:
                continue
            if own[name].shape != t.shape:
                raise ValueError(f"{name}: shape {tuple(t.shape)} != {tuple(own[name].shape)}")
            own[name].copy_(t.to(own[name].dtype))


def count_params(model: Transformer) -> tuple[int, int]:
    """(main-model parameters, MTP parameters), tid2eid excluded."""
    total = sum(p.numel() for p in model.parameters())
    mtp = sum(p.numel() for p in model.mtp.parameters())
    return total - mtp, mtp
