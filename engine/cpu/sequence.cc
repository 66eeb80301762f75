#include "engine/cpu/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "engine/cpu/kv_cache.h"
#include "engine/cpu/memory_check.h"
#include "engine/cpu/mhc.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/numerics.h"
#include "engine/cpu/sequence_impl.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/topk.h"
#include "kernels/cpu/vec.h"

namespace nw::cpu {

namespace {

// ---- Weight validation -------------------------------------------------------------------------

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

Status CheckShape(const Tensor& t, const std::vector<int64_t>& want, const std::string& name) {
  if (t.shape != want || t.numel() != Tensor::Numel(want)) {
    return Status::InvalidArgument("weight " + name + " has shape " + t.ShapeString() + " with " +
                                   std::to_string(t.numel()) + " values, expected " +
                                   ShapeString(want));
  }
  return Status::Ok();
}

Status CheckHc(const HcWeights& hc, int64_t mix, int64_t scales, int64_t nd,
               const std::string& name) {
  NW_RETURN_IF_ERROR(CheckShape(hc.fn, {mix, nd}, name + "_fn"));
  NW_RETURN_IF_ERROR(CheckShape(hc.base, {mix}, name + "_base"));
  return CheckShape(hc.scale, {scales}, name + "_scale");
}

Status CheckCompressor(const CompressorWeights& c, int ratio, int64_t dim, int64_t d_model,
                       const std::string& name) {
  if (c.ratio != ratio || c.dim != dim) {
    return Status::InvalidArgument(name + ": ratio/dim " + std::to_string(c.ratio) + "/" +
                                   std::to_string(c.dim) + ", expected " + std::to_string(ratio) +
                                   "/" + std::to_string(dim));
  }
  const int64_t coff = ratio == 4 ? 2 : 1;
  NW_RETURN_IF_ERROR(CheckShape(c.wkv, {coff * dim, d_model}, name + ".wkv.weight"));
  NW_RETURN_IF_ERROR(CheckShape(c.wgate, {coff * dim, d_model}, name + ".wgate.weight"));
  NW_RETURN_IF_ERROR(CheckShape(c.ape, {ratio, coff * dim}, name + ".ape"));
  return CheckShape(c.norm, {dim}, name + ".norm.weight");
}

Status CheckExpert(const ExpertWeights& e, int64_t d_model, int64_t inter,
                   const std::string& name) {
  NW_RETURN_IF_ERROR(CheckShape(e.w1, {inter, d_model}, name + ".w1.weight"));
  NW_RETURN_IF_ERROR(CheckShape(e.w3, {inter, d_model}, name + ".w3.weight"));
  return CheckShape(e.w2, {d_model, inter}, name + ".w2.weight");
}

// Fault indexer-rope-layout (engine/fault.h): RoPE in the half-split (rotate_half) layout, dims
// j and j + pairs as a pair, where V4's indexer rotates interleaved pairs (2j, 2j + 1).
void ApplyRopeHalfSplit(float* x, int pairs, const float* cos, const float* sin) {
  for (int j = 0; j < pairs; ++j) {
    const float a = x[j];
    const float b = x[j + pairs];
    x[j] = a * cos[j] - b * sin[j];
    x[j + pairs] = a * sin[j] + b * cos[j];
  }
}

// The indexer's RoPE (queries and compressed keys): interleaved, or half-split under the fault.
void ApplyIndexerRope(Fault fault, float* x, int pairs, const float* cos, const float* sin) {
  if (fault == Fault::kIndexerRopeLayout) {
    ApplyRopeHalfSplit(x, pairs, cos, sin);
  } else {
    ApplyRope(x, pairs, cos, sin, false);
  }
}

}  // namespace

Status ValidateWeights(const ModelConfig& cfg, const ModelWeights& w) {
  const int64_t V = cfg.vocab_size, D = cfg.dim, H = cfg.n_heads, d = cfg.head_dim;
  const int64_t q = cfg.q_lora_rank, g = cfg.o_groups, R = cfg.o_lora_rank, n = cfg.hc_mult;
  if (V <= 0 || D <= 0 || H <= 0 || d <= 0 || q <= 0 || g <= 0 || R <= 0 || n <= 0 ||
      cfg.n_layers <= 0 || cfg.window_size <= 0) {
    return Status::InvalidArgument("config has a non-positive dimension");
  }
  if (H % g != 0) return Status::InvalidArgument("n_heads must be a multiple of o_groups");
  if (cfg.rope_head_dim <= 0 || cfg.rope_head_dim % 2 != 0 || cfg.rope_head_dim > d) {
    return Status::InvalidArgument("rope_head_dim must be even and at most head_dim");
  }
  if (static_cast<int>(cfg.compress_ratios.size()) < cfg.n_layers) {
    return Status::InvalidArgument("compress_ratios has fewer entries than n_layers");
  }
  NW_RETURN_IF_ERROR(CheckShape(w.embed, {V, D}, "embed.weight"));
  NW_RETURN_IF_ERROR(CheckShape(w.norm, {D}, "norm.weight"));
  NW_RETURN_IF_ERROR(CheckShape(w.head, {V, D}, "head.weight"));
  NW_RETURN_IF_ERROR(CheckHc(w.hc_head, n, 1, n * D, "hc_head"));
  if (static_cast<int>(w.layers.size()) != cfg.n_layers) {
    return Status::InvalidArgument("weights have " + std::to_string(w.layers.size()) +
                                   " layers, config has " + std::to_string(cfg.n_layers));
  }
  for (int l = 0; l < cfg.n_layers; ++l) {
    const BlockWeights& b = w.layers[static_cast<size_t>(l)];
    const std::string P = "layers." + std::to_string(l) + ".";
    const int64_t mix = (2 + n) * n;
    NW_RETURN_IF_ERROR(CheckHc(b.hc_attn, mix, 3, n * D, P + "hc_attn"));
    NW_RETURN_IF_ERROR(CheckHc(b.hc_ffn, mix, 3, n * D, P + "hc_ffn"));
    NW_RETURN_IF_ERROR(CheckShape(b.attn_norm, {D}, P + "attn_norm.weight"));
    NW_RETURN_IF_ERROR(CheckShape(b.ffn_norm, {D}, P + "ffn_norm.weight"));
    const AttentionWeights& a = b.attn;
    NW_RETURN_IF_ERROR(CheckShape(a.attn_sink, {H}, P + "attn.attn_sink"));
    NW_RETURN_IF_ERROR(CheckShape(a.wq_a, {q, D}, P + "attn.wq_a.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.q_norm, {q}, P + "attn.q_norm.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.wq_b, {H * d, q}, P + "attn.wq_b.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.wkv, {d, D}, P + "attn.wkv.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.kv_norm, {d}, P + "attn.kv_norm.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.wo_a, {g * R, H * d / g}, P + "attn.wo_a.weight"));
    NW_RETURN_IF_ERROR(CheckShape(a.wo_b, {D, g * R}, P + "attn.wo_b.weight"));
    const int ratio = cfg.ratio(l);
    if (ratio != 0 && ratio != 4 && ratio != 128) {
      return Status::InvalidArgument(P + ": compress ratio " + std::to_string(ratio) +
                                     " is not 0, 4 or 128");
    }
    if (ratio > 0) {
      if (!a.compressor) return Status::InvalidArgument(P + "attn.compressor is missing");
      NW_RETURN_IF_ERROR(CheckCompressor(*a.compressor, ratio, d, D, P + "attn.compressor"));
    }
    if (ratio == 4) {
      const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
      if (!a.indexer) return Status::InvalidArgument(P + "attn.indexer is missing");
      if (hI <= 0 || !IsPowerOfTwo(cI) || cI < cfg.rope_head_dim) {
        return Status::InvalidArgument(
            "index_head_dim must be a power of two >= rope_head_dim and index_n_heads > 0");
      }
      NW_RETURN_IF_ERROR(CheckShape(a.indexer->wq_b, {hI * cI, q}, P + "attn.indexer.wq_b"));
      NW_RETURN_IF_ERROR(
          CheckShape(a.indexer->weights_proj, {hI, D}, P + "attn.indexer.weights_proj.weight"));
      NW_RETURN_IF_ERROR(
          CheckCompressor(a.indexer->compressor, 4, cI, D, P + "attn.indexer.compressor"));
    }
    const FfnWeights& f = b.ffn;
    const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim;
    NW_RETURN_IF_ERROR(CheckShape(f.gate, {E, D}, P + "ffn.gate.weight"));
    if (static_cast<int64_t>(f.experts.size()) != E) {
      return Status::InvalidArgument(P + "ffn has " + std::to_string(f.experts.size()) +
                                     " experts, expected " + std::to_string(E));
    }
    for (int64_t e = 0; e < E; ++e) {
      NW_RETURN_IF_ERROR(CheckExpert(f.experts[static_cast<size_t>(e)], D, I,
                                     P + "ffn.experts." + std::to_string(e)));
    }
    NW_RETURN_IF_ERROR(CheckExpert(f.shared, D, I, P + "ffn.shared_experts"));
    if (cfg.is_hash_layer(l)) {
      const int64_t k = cfg.n_activated_experts;
      if (static_cast<int64_t>(f.tid2eid.size()) != V * k) {
        return Status::InvalidArgument(P + "ffn.gate.tid2eid has " +
                                       std::to_string(f.tid2eid.size()) + " entries, expected " +
                                       std::to_string(V * k));
      }
      for (int32_t e : f.tid2eid) {
        if (e < 0 || e >= E) {
          return Status::InvalidArgument(P + "ffn.gate.tid2eid has expert id " + std::to_string(e) +
                                         " outside [0, " + std::to_string(E) + ")");
        }
      }
    } else {
      NW_RETURN_IF_ERROR(CheckShape(f.gate_bias, {E}, P + "ffn.gate.bias"));
    }
  }
  return Status::Ok();
}

// ---- The forward pass --------------------------------------------------------------------------

void Sequence::Impl::Init() {
  topk = opts.index_topk > 0 ? opts.index_topk : cfg.index_topk;
  num = Numerics(opts.precision, cfg.head_dim, cfg.rope_head_dim);
  mhc.n = cfg.hc_mult;
  mhc.dim = cfg.dim;
  mhc.sinkhorn_iters = cfg.hc_sinkhorn_iters;
  mhc.hc_eps = static_cast<float>(cfg.hc_eps);
  mhc.norm_eps = static_cast<float>(cfg.norm_eps);
  RopeParams plain;
  plain.rope_dim = cfg.rope_head_dim;
  plain.base = cfg.rope_theta;
  plain.original_seq_len = 0;
  rope_plain = RopeTable(plain, opts.max_tokens);
  RopeParams yarn = plain;
  yarn.base = cfg.compress_rope_theta;
  yarn.original_seq_len = cfg.original_seq_len;
  yarn.factor = cfg.rope_factor;
  yarn.beta_fast = cfg.beta_fast;
  yarn.beta_slow = cfg.beta_slow;
  // Fault compress-rope-base: the compressed layers get the plain layers' table.
  rope_compress = RopeTable(opts.fault == Fault::kCompressRopeBase ? plain : yarn, opts.max_tokens);
  moe_cfg = cfg;
  if (opts.fault == Fault::kSharedExpertNoClamp) moe_cfg.swiglu_clamp_shared_expert = false;

  if (opts.trace != nullptr && opts.trace->layers.empty()) {
    // A fresh sink; a PD decode instance keeps appending to its prefill instance's.
    opts.trace->dim = cfg.dim;
    opts.trace->stream_width = cfg.hc_mult * cfg.dim;
    opts.trace->layers.resize(static_cast<size_t>(cfg.n_layers));
  }
  const bool paged = opts.layout == KvLayout::kPaged;
  kv_pool = std::make_unique<PagePool>(cfg.head_dim);
  index_pool = std::make_unique<PagePool>(std::max(cfg.index_head_dim, 1));
  layers.resize(static_cast<size_t>(cfg.n_layers));
  probe_slot.assign(static_cast<size_t>(cfg.n_layers), -1);
  for (int l = 0; l < cfg.n_layers; ++l) {
    LayerCache& c = layers[static_cast<size_t>(l)];
    const int ratio = cfg.ratio(l);
    c.window = paged ? RowStore::Paged(kv_pool.get(), cfg.window_size)
                     : RowStore::Contiguous(cfg.head_dim, cfg.window_size, 0);
    if (ratio > 0) {
      const int64_t entries = opts.max_tokens / ratio;
      c.compressed = paged ? RowStore::Paged(kv_pool.get(), 0)
                           : RowStore::Contiguous(cfg.head_dim, 0, entries);
      const int64_t coff = ratio == 4 ? 2 : 1;
      c.kv_state = CompressorState(coff * ratio, coff * cfg.head_dim);
    }
    if (ratio == 4) {
      const int64_t entries = opts.max_tokens / ratio;
      c.index_keys = paged ? RowStore::Paged(index_pool.get(), 0)
                           : RowStore::Contiguous(cfg.index_head_dim, 0, entries);
      c.index_state = CompressorState(2 * ratio, 2 * cfg.index_head_dim);
      if (opts.probe) {
        probe_slot[static_cast<size_t>(l)] = static_cast<int>(probes.size());
        IndexerProbe p;
        p.layer = l;
        p.topk = topk;
        probes.push_back(std::move(p));
      }
    }
  }
}

void Sequence::Impl::Compress(const CompressorWeights& cw, bool indexer, const RopeTable& rope,
                              const float* kv, float* score, int64_t n, int64_t s,
                              CompressorState& state, RowStore& store) {
  const int64_t r = cw.ratio, d = cw.dim, rd = cfg.rope_head_dim;
  const bool overlap = r == 4;
  const int64_t width = (overlap ? 2 : 1) * d;
  const int64_t span = (overlap ? 2 : 1) * r;
  for (int64_t t = 0; t < n; ++t) {
    const float* ape = cw.ape.ptr() + ((s + t) % r) * width;
    float* sc = score + t * width;
    for (int64_t c = 0; c < width; ++c) sc[c] += ape[c];
  }
  std::vector<const float*> kv_rows(static_cast<size_t>(span)), score_rows(kv_rows.size());
  std::vector<float> entry(static_cast<size_t>(d)), scratch(static_cast<size_t>((span + 1) * d));
  const CompressParams cp{static_cast<int>(r), static_cast<int>(d), overlap};
  const float hadamard_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const float eps = static_cast<float>(cfg.norm_eps);
  // Entries whose block ends inside the chunk: blocks b with s <= (b+1)r - 1 < s + n.
  for (int64_t b = s / r; b < (s + n) / r; ++b) {
    const int64_t first = overlap ? (b - 1) * r : b * r;
    for (int64_t k = 0; k < span; ++k) {
      const int64_t p = first + k;
      const size_t ks = static_cast<size_t>(k);
      if (p < 0) {
        kv_rows[ks] = score_rows[ks] = nullptr;
      } else if (p >= s) {
        kv_rows[ks] = kv + (p - s) * width;
        score_rows[ks] = score + (p - s) * width;
      } else {
        kv_rows[ks] = state.kv_row(p);
        score_rows[ks] = state.score_row(p);
      }
    }
    CompressPool(cp, kv_rows.data(), score_rows.data(), entry.data(), scratch.data());
    num.Act(entry.data(), d);
    RmsNorm(entry.data(), cw.norm.ptr(), d, eps, entry.data());
    num.Act(entry.data(), d);
    if (indexer) {
      ApplyIndexerRope(opts.fault, entry.data() + d - rd, static_cast<int>(rd / 2), rope.cos(b * r),
                       rope.sin(b * r));
    } else if (opts.fault != Fault::kCompressedKvNoRope) {
      ApplyRope(entry.data() + d - rd, static_cast<int>(rd / 2), rope.cos(b * r), rope.sin(b * r),
                false);
    }
    num.Act(entry.data(), d);
    if (indexer) {
      HadamardTransform(entry.data(), d, hadamard_scale);
      num.Act(entry.data(), d);
      num.IndexK(entry.data(), d);
    } else {
      num.Kv(entry.data());
    }
    std::copy(entry.begin(), entry.end(), store.MutableRow(b));
  }
  // Keep the projections of the last `span` tokens for the entries of later chunks. Fault
  // partial-block-mod4: a multi-token chunk ending 3 tokens into a ratio-4 block keeps none of
  // that partial block (its ring slots keep older rows).
  int64_t keep_end = s + n;
  if (opts.fault == Fault::kPartialBlockMod4 && r == 4 && n > 1 && (s + n) % 4 == 3) {
    keep_end = (s + n) / 4 * 4;
  }
  for (int64_t p = std::max(s, s + n - span); p < keep_end; ++p) {
    std::copy_n(kv + (p - s) * width, width, state.kv_row(p));
    std::copy_n(score + (p - s) * width, width, state.score_row(p));
  }
}

void Sequence::Impl::RecordProbe(int layer, int64_t p, int64_t visible, const float* scores,
                                 const int32_t* topk_out, int n_selected) {
  IndexerProbe& pr = probes[static_cast<size_t>(probe_slot[static_cast<size_t>(layer)])];
  const ProbeRequest& req = *opts.probe;
  const int64_t r = cfg.ratio(layer);
  int64_t best = -1;
  float best_score = std::numeric_limits<float>::quiet_NaN();
  bool hit = false;
  if (req.needle_end > req.needle_begin) {
    // Entry i pools tokens [r(i-1), r(i+1)) (ratio 4 overlaps the previous block).
    const int64_t lo = std::max<int64_t>(0, req.needle_begin / r - 1);
    const int64_t hi = std::min<int64_t>(visible - 1, (req.needle_end - 1) / r + 1);
    for (int64_t i = lo; i <= hi; ++i) {
      const int64_t first = r * (i - 1), last = r * (i + 1) - 1;
      if (last < req.needle_begin || first >= req.needle_end) continue;
      const int64_t rank = RankOf(scores, visible, i);
      if (best < 0 || rank < best) {
        best = rank;
        best_score = scores[i];
      }
      for (int j = 0; j < n_selected; ++j) hit = hit || topk_out[j] == i;
    }
  }
  pr.positions.push_back(p);
  pr.needle_rank.push_back(static_cast<int32_t>(best));
  pr.in_topk.push_back(hit ? 1 : 0);
  pr.num_visible.push_back(static_cast<int32_t>(visible));
  pr.needle_score.push_back(best_score);
  pr.kth_score.push_back(n_selected == topk && topk > 0 ? scores[topk_out[topk - 1]]
                                                        : std::numeric_limits<float>::quiet_NaN());
  // The best entry left out of the selection (the (k+1)-th in rank order).
  int64_t next = -1;
  if (visible > n_selected) {
    std::vector<uint8_t> chosen(static_cast<size_t>(visible), 0);
    for (int j = 0; j < n_selected; ++j) chosen[static_cast<size_t>(topk_out[j])] = 1;
    for (int64_t j = 0; j < visible; ++j) {
      if (chosen[static_cast<size_t>(j)] == 0 &&
          (next < 0 || RanksBefore(scores[j], j, scores[next], next))) {
        next = j;
      }
    }
  }
  pr.next_score.push_back(next >= 0 ? scores[next] : std::numeric_limits<float>::quiet_NaN());
  if (req.keep_topk_sets) {
    pr.topk_sets.insert(pr.topk_sets.end(), topk_out, topk_out + n_selected);
    pr.topk_sets.insert(pr.topk_sets.end(), static_cast<size_t>(topk - n_selected), -1);
  }
}

void Sequence::Impl::SelectEntries(int layer, int64_t p, int64_t key_begin, int64_t visible,
                                   const float* iq, const float* iw, std::vector<int32_t>& selected,
                                   std::vector<float>& scores, std::vector<int32_t>& topk_out,
                                   std::vector<int32_t>& scratch) {
  const bool probe = opts.probe.has_value() && p >= opts.probe->query_begin;
  // key_begin > 0 only under the ragged-key-offset fault: entries before it are not selectable.
  const bool need_scores = probe || key_begin > 0 || (!opts.dense_compressed && visible > topk);
  // Only min(topk, visible - key_begin) entries can be selected; the -1 padding up to topk is
  // implicit.
  const int width = static_cast<int>(std::min<int64_t>(topk, visible - key_begin));
  topk_out.assign(static_cast<size_t>(width), -1);
  int n_sel = 0;
  if (need_scores) {
    scores.resize(static_cast<size_t>(visible));
    scratch.resize(static_cast<size_t>(visible));
    const int R = opts.tp_ranks;
    if (R <= 1) {
      const IndexerParams ip{cfg.index_n_heads, cfg.index_head_dim};
      layers[static_cast<size_t>(layer)].index_keys.ForEachRun(
          0, visible, [&](int64_t first, const float* rows, int64_t count) {
            IndexerScores(ip, iq, iw, rows, count, scores.data() + first);
          });
    } else {
      // Simulated TP: each rank scores its index heads; the partials are summed in rank order
      // (the all-reduce) before top-k.
      const int hr = cfg.index_n_heads / R;
      const IndexerParams ip{hr, cfg.index_head_dim};
      std::fill(scores.begin(), scores.end(), 0.0f);
      std::vector<float> partial(static_cast<size_t>(visible));
      for (int rank = 0; rank < R; ++rank) {
        const float* q_r = iq + static_cast<int64_t>(rank) * hr * cfg.index_head_dim;
        const float* w_r = iw + static_cast<int64_t>(rank) * hr;
        layers[static_cast<size_t>(layer)].index_keys.ForEachRun(
            0, visible, [&](int64_t first, const float* rows, int64_t count) {
              IndexerScores(ip, q_r, w_r, rows, count, partial.data() + first);
            });
        for (int64_t i = 0; i < visible; ++i) {
          scores[static_cast<size_t>(i)] += partial[static_cast<size_t>(i)];
        }
      }
    }
    for (int64_t i = 0; i < key_begin; ++i) {
      scores[static_cast<size_t>(i)] = -std::numeric_limits<float>::infinity();
    }
    n_sel = TopK(scores.data(), visible, width, topk_out.data(), scratch.data());
  } else {
    // Every visible entry is selected (k >= visible): no scores needed.
    n_sel = width;
    for (int j = 0; j < n_sel; ++j) topk_out[static_cast<size_t>(j)] = j;
  }
  if (probe) RecordProbe(layer, p, visible, scores.data(), topk_out.data(), n_sel);
  if (opts.dense_compressed) {
    selected.resize(static_cast<size_t>(visible - key_begin));
    for (int64_t i = key_begin; i < visible; ++i)
      selected[static_cast<size_t>(i - key_begin)] = static_cast<int32_t>(i);
  } else {
    selected.assign(topk_out.begin(), topk_out.begin() + n_sel);
    std::sort(selected.begin(), selected.end());
  }
}

void Sequence::Impl::AttnAfterX(int layer, int64_t n, int64_t s, const AttnRows& r) {
  const AttentionWeights& a = w.layers[static_cast<size_t>(layer)].attn;
  LayerCache& cache = layers[static_cast<size_t>(layer)];
  const int64_t d = cfg.head_dim, rd = cfg.rope_head_dim, nope = d - rd, q = cfg.q_lora_rank;
  const int pairs = static_cast<int>(rd / 2);
  const int ratio = cfg.ratio(layer);
  const RopeTable& rope = ratio > 0 ? rope_compress : rope_plain;
  const float eps = static_cast<float>(cfg.norm_eps);

  // 1. Query latent and the raw KV of every token of the chunk.
  num.Act(r.qr, n * q);
  for (int64_t t = 0; t < n; ++t) RmsNorm(r.qr + t * q, a.q_norm.ptr(), q, eps, r.qr + t * q);
  num.Act(r.qr, n * q);
  num.Act(r.kv, n * d);
  for (int64_t t = 0; t < n; ++t) {
    float* v = r.kv + t * d;
    RmsNorm(v, a.kv_norm.ptr(), d, eps, v);
    num.Act(v, d);
    ApplyRope(v + nope, pairs, rope.cos(s + t), rope.sin(s + t), false);
    num.Act(v, d);
    num.Kv(v);
  }

  // 2. Compressed entries completed by this chunk, and the indexer's weights.
  if (ratio > 0) {
    Compress(*a.compressor, false, rope, r.ckv, r.cscore, n, s, cache.kv_state, cache.compressed);
  }
  if (ratio == 4) {
    const IndexerWeights& ix = *a.indexer;
    Compress(ix.compressor, true, rope, r.ikv, r.iscore, n, s, cache.index_state, cache.index_keys);
    const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
    num.Act(r.iw, n * hI);
    const float wscale = static_cast<float>(std::pow(static_cast<double>(cI), -0.5) *
                                            std::pow(static_cast<double>(hI), -0.5));
    for (int64_t i = 0; i < n * hI; ++i) r.iw[i] *= wscale;
  }
}

void Sequence::Impl::AttnAfterQ(int layer, int64_t n, int64_t s, const AttnRows& r) {
  const int64_t H = cfg.n_heads, d = cfg.head_dim, rd = cfg.rope_head_dim, nope = d - rd;
  const int pairs = static_cast<int>(rd / 2);
  const int ratio = cfg.ratio(layer);
  const RopeTable& rope = ratio > 0 ? rope_compress : rope_plain;
  const float eps = static_cast<float>(cfg.norm_eps);
  num.Act(r.qh, n * H * d);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* v = r.qh + (t * H + h) * d;
      RmsNorm(v, nullptr, d, eps, v);
      num.Act(v, d);
      ApplyRope(v + nope, pairs, rope.cos(s + t), rope.sin(s + t), false);
      num.Act(v, d);
    }
  }
  if (ratio == 4) {
    const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
    num.Act(r.iq, n * hI * cI);
    const float hscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cI)));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < hI; ++h) {
        float* v = r.iq + (t * hI + h) * cI;
        ApplyIndexerRope(opts.fault, v + cI - rd, pairs, rope.cos(s + t), rope.sin(s + t));
        num.Act(v, cI);
        HadamardTransform(v, cI, hscale);
        num.Act(v, cI);
        num.IndexQ(v, cI);
      }
    }
  }
}

void Sequence::Impl::AttnCore(int layer, int64_t n, int64_t s, const AttnRows& r, float* y) {
  const AttentionWeights& a = w.layers[static_cast<size_t>(layer)].attn;
  LayerCache& cache = layers[static_cast<size_t>(layer)];
  const int64_t D = cfg.dim, H = cfg.n_heads, d = cfg.head_dim, rd = cfg.rope_head_dim;
  const int64_t nope = d - rd, W = cfg.window_size, g = cfg.o_groups, R = cfg.o_lora_rank;
  const int pairs = static_cast<int>(rd / 2);
  const int ratio = cfg.ratio(layer);
  const RopeTable& rope = ratio > 0 ? rope_compress : rope_plain;
  const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;

  // 3. Per token: gather window + compressed entries, attend.
  const SparseAttnParams sp{static_cast<int>(H), static_cast<int>(d),
                            static_cast<float>(std::pow(static_cast<double>(d), -0.5))};
  std::vector<const float*> entries;
  std::vector<int32_t> selected, topk_out, scratch_idx;
  std::vector<float> scores, attn_scratch, oa;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = s + t;
    entries.clear();
    for (int64_t wp = std::max<int64_t>(0, p - W + 1); wp <= p; ++wp) {
      entries.push_back(wp >= s ? r.kv + (wp - s) * d : cache.window.Row(wp));
    }
    if (ratio > 0) {
      const int64_t visible = (p + 1) / ratio;
      if (ratio == 4) {
        // Fault ragged-key-range: the chunk's last query's key end for every query of the chunk
        // (its entries are stored already: Compress ran for the whole chunk).
        const int64_t key_end =
            opts.fault == Fault::kRaggedKeyRange && n > 1 ? (s + n) / ratio : visible;
        // Fault ragged-key-offset: the key range starts at the chunk's first entry.
        const int64_t key_begin =
            opts.fault == Fault::kRaggedKeyOffset && n > 1 ? std::min(s / ratio, key_end) : 0;
        SelectEntries(layer, p, key_begin, key_end, r.iq + t * hI * cI, r.iw + t * hI, selected,
                      scores, topk_out, scratch_idx);
        for (int32_t i : selected) entries.push_back(cache.compressed.Row(i));
      } else {
        for (int64_t i = 0; i < visible; ++i) entries.push_back(cache.compressed.Row(i));
      }
    }
    const int64_t m = static_cast<int64_t>(entries.size());
    attn_scratch.resize(static_cast<size_t>(H * (m + 1)));
    float* o = r.o + t * H * d;
    if (opts.tp_ranks <= 1) {
      // wo_a and wo_b run in ForwardRows, over every sequence's rows.
      SparseAttention(sp, r.qh + t * H * d, entries.data(), m, a.attn_sink.ptr(), o,
                      attn_scratch.data());
      num.Act(o, H * d);
      for (int64_t h = 0; h < H; ++h) {
        ApplyRope(o + h * d + nope, pairs, rope.cos(p), rope.sin(p), true);
      }
      num.Act(o, H * d);
    } else {
      // Simulated TP: rank r owns heads [r Hr, (r+1) Hr) and wo_a groups [r gr, (r+1) gr) (the
      // heads of its groups), and columns [r gr R, (r+1) gr R) of wo_b; its partial output is
      // all-reduced (summed in rank order).
      const int Rk = opts.tp_ranks;
      const int64_t Hr = H / Rk, gr = g / Rk;
      const SparseAttnParams spr{static_cast<int>(Hr), static_cast<int>(d), sp.scale};
      oa.resize(static_cast<size_t>(g * R));
      float* yt = y + t * D;
      std::fill(yt, yt + D, 0.0f);
      for (int rank = 0; rank < Rk; ++rank) {
        const int64_t h0 = rank * Hr, g0 = rank * gr;
        float* o_r = o + h0 * d;
        float* oa_r = oa.data() + g0 * R;
        SparseAttention(spr, r.qh + (t * H + h0) * d, entries.data(), m, a.attn_sink.ptr() + h0,
                        o_r, attn_scratch.data());
        num.Act(o_r, Hr * d);
        for (int64_t h = 0; h < Hr; ++h) {
          ApplyRope(o_r + h * d + nope, pairs, rope.cos(p), rope.sin(p), true);
        }
        num.Act(o_r, Hr * d);
        GroupedLinear(o_r, a.wo_a.ptr() + g0 * R * (H * d / g), static_cast<int>(gr), H * d / g, R,
                      oa_r);
        num.Act(oa_r, gr * R);
        for (int64_t i = 0; i < D; ++i) {
          yt[i] += Dot(oa_r, a.wo_b.ptr() + i * g * R + g0 * R, gr * R);
        }
      }
      num.Act(yt, D);
    }
  }
}

void Sequence::Impl::AttnEnd(int layer, int64_t n, int64_t s, const float* kv) {
  // 4. The chunk's raw KV joins the window ring (the last W tokens are enough).
  const int64_t d = cfg.head_dim, W = cfg.window_size;
  LayerCache& cache = layers[static_cast<size_t>(layer)];
  for (int64_t p = std::max(s, s + n - W); p < s + n; ++p) {
    std::copy_n(kv + (p - s) * d, d, cache.window.MutableRow(p));
  }
}

namespace {

// A row range of the pass: one part's rows [row0, row0 + n) at positions [s, s + n).
struct PartRows {
  Sequence::Impl* seq;
  int64_t row0;
  int64_t n;
  int64_t s;
};

// Attention of `layer` over the rows of every part: x [N, D] in, y [N, D] out.
void AttentionRows(std::span<const PartRows> parts, int64_t N, bool one_token_each, int layer,
                   const float* x, float* y) {
  const Sequence::Impl& first = *parts.front().seq;
  const ModelConfig& cfg = first.cfg;
  const AttentionWeights& a = first.w.layers[static_cast<size_t>(layer)].attn;
  // Every linear runs weight-stationary (LinearRows: bit-identical to Linear row by row).
  const auto lin = LinearRows;
  const int64_t D = cfg.dim, H = cfg.n_heads, d = cfg.head_dim, q = cfg.q_lora_rank;
  const int64_t g = cfg.o_groups, R = cfg.o_lora_rank;
  const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
  const int ratio = cfg.ratio(layer);
  const int64_t cw = (ratio == 4 ? 2 : 1) * d;
  auto buf = [N](int64_t width, bool used) {
    return std::vector<float>(used ? static_cast<size_t>(N * width) : 0);
  };
  std::vector<float> qr = buf(q, true), qh = buf(H * d, true), kv = buf(d, true);
  std::vector<float> ckv = buf(cw, ratio > 0), cscore = buf(cw, ratio > 0);
  std::vector<float> ikv = buf(2 * cI, ratio == 4), iscore = buf(2 * cI, ratio == 4);
  std::vector<float> iq = buf(hI * cI, ratio == 4), iw = buf(hI, ratio == 4);
  std::vector<float> o = buf(H * d, true);
  auto rows_of = [&](const PartRows& p) {
    auto at = [&p](std::vector<float>& v, int64_t width) {
      return v.empty() ? nullptr : v.data() + p.row0 * width;
    };
    return AttnRows{at(qr, q),      at(qh, H * d),   at(kv, d),          at(ckv, cw),
                    at(cscore, cw), at(ikv, 2 * cI), at(iscore, 2 * cI), at(iq, hI * cI),
                    at(iw, hI),     at(o, H * d)};
  };

  lin(x, N, D, a.wq_a.ptr(), q, qr.data());
  lin(x, N, D, a.wkv.ptr(), d, kv.data());
  if (ratio > 0) {
    lin(x, N, D, a.compressor->wkv.ptr(), cw, ckv.data());
    lin(x, N, D, a.compressor->wgate.ptr(), cw, cscore.data());
  }
  if (ratio == 4) {
    const CompressorWeights& ic = a.indexer->compressor;
    lin(x, N, D, ic.wkv.ptr(), 2 * cI, ikv.data());
    lin(x, N, D, ic.wgate.ptr(), 2 * cI, iscore.data());
    lin(x, N, D, a.indexer->weights_proj.ptr(), hI, iw.data());
  }
  for (const PartRows& p : parts) p.seq->AttnAfterX(layer, p.n, p.s, rows_of(p));
  lin(qr.data(), N, q, a.wq_b.ptr(), H * d, qh.data());
  if (ratio == 4) lin(qr.data(), N, q, a.indexer->wq_b.ptr(), hI * cI, iq.data());
  for (const PartRows& p : parts) p.seq->AttnAfterQ(layer, p.n, p.s, rows_of(p));
  for (const PartRows& p : parts) p.seq->AttnCore(layer, p.n, p.s, rows_of(p), y + p.row0 * D);
  if (first.opts.tp_ranks <= 1) {  // (a sequence with tp_ranks > 1 runs alone)
    std::vector<float> oa(static_cast<size_t>(N * g * R));
    if (one_token_each) {
      GroupedLinearRows(o.data(), N, a.wo_a.ptr(), static_cast<int>(g), H * d / g, R, oa.data());
    } else {
      for (int64_t t = 0; t < N; ++t) {
        GroupedLinear(o.data() + t * H * d, a.wo_a.ptr(), static_cast<int>(g), H * d / g, R,
                      oa.data() + t * g * R);
      }
    }
    for (const PartRows& p : parts) p.seq->num.Act(oa.data() + p.row0 * g * R, p.n * g * R);
    lin(oa.data(), N, g * R, a.wo_b.ptr(), D, y);
    for (const PartRows& p : parts) p.seq->num.Act(y + p.row0 * D, p.n * D);
  }
  for (const PartRows& p : parts) p.seq->AttnEnd(layer, p.n, p.s, kv.data() + p.row0 * d);
}

}  // namespace

Status ForwardRows(std::span<const RowsPart> parts) {
  if (parts.empty()) return Status::InvalidArgument("forward needs at least one sequence");
  const Sequence::Impl& first = *parts.front().seq;
  const ModelConfig& cfg = first.cfg;
  const ModelWeights& w = first.w;
  std::vector<PartRows> rows;
  int64_t N = 0;
  for (const RowsPart& part : parts) {
    const Sequence::Impl& im = *part.seq;
    const int64_t n = static_cast<int64_t>(part.tokens.size());
    if (n == 0) return Status::InvalidArgument("forward needs at least one token");
    if (&im.cfg != &cfg || &im.w != &w) {
      return Status::InvalidArgument("sequences of one pass must share the config and weights");
    }
    if (parts.size() > 1 && im.opts.tp_ranks > 1) {
      return Status::InvalidArgument("a sequence with tp_ranks > 1 runs alone");
    }
    for (const PartRows& r : rows) {
      if (r.seq == part.seq) return Status::InvalidArgument("a sequence appears twice in a pass");
    }
    if (im.pos + n > im.opts.max_tokens) {
      return Status::OutOfRange("sequence would reach " + std::to_string(im.pos + n) +
                                " tokens, above its capacity of " +
                                std::to_string(im.opts.max_tokens));
    }
    for (int32_t tok : part.tokens) {
      if (tok < 0 || tok >= cfg.vocab_size) {
        return Status::InvalidArgument("token id " + std::to_string(tok) + " outside [0, " +
                                       std::to_string(cfg.vocab_size) + ")");
      }
    }
    rows.push_back(PartRows{part.seq, N, n, im.pos});
    N += n;
  }
  const bool one_token_each = N == static_cast<int64_t>(parts.size());
  // Every linear runs weight-stationary (LinearRows: bit-identical to Linear row by row).
  const auto lin = LinearRows;
  const int64_t D = cfg.dim, hc = cfg.hc_mult, V = cfg.vocab_size;
  const int64_t stream = hc * D;
  const float eps = static_cast<float>(cfg.norm_eps);
  std::vector<int32_t> tokens;  // every row's token
  for (const RowsPart& part : parts)
    tokens.insert(tokens.end(), part.tokens.begin(), part.tokens.end());
  std::vector<float> X(static_cast<size_t>(N * stream)), Xn(X.size());
  for (int64_t t = 0; t < N; ++t) {
    const float* e = w.embed.ptr() + static_cast<int64_t>(tokens[static_cast<size_t>(t)]) * D;
    for (int64_t i = 0; i < hc; ++i) std::copy_n(e, D, X.data() + t * stream + i * D);
  }
  for (const PartRows& p : rows) p.seq->num.Act(X.data() + p.row0 * stream, p.n * stream);

  std::vector<float> u(static_cast<size_t>(D)), x(static_cast<size_t>(N * D)), y(x.size());
  std::vector<MhcMix> mix(static_cast<size_t>(N));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const BlockWeights& b = w.layers[static_cast<size_t>(l)];
    // Attention sub-layer.
    for (const PartRows& p : rows) {
      const Sequence::Impl& im = *p.seq;
      for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
        mix[static_cast<size_t>(t)] = MhcPre(im.mhc, b.hc_attn, X.data() + t * stream, u.data());
        im.num.Act(u.data(), D);
        RmsNorm(u.data(), b.attn_norm.ptr(), D, eps, x.data() + t * D);
        im.num.Act(x.data() + t * D, D);
      }
    }
    AttentionRows(rows, N, one_token_each, l, x.data(), y.data());
    for (const PartRows& p : rows) {
      if (ForwardTrace* tr = p.seq->opts.trace; tr != nullptr) {
        std::vector<float>& a = tr->layers[static_cast<size_t>(l)].attn;
        a.insert(a.end(), y.data() + p.row0 * D, y.data() + (p.row0 + p.n) * D);
      }
    }
    for (const PartRows& p : rows) {
      for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
        MhcPost(p.seq->mhc, mix[static_cast<size_t>(t)], X.data() + t * stream, y.data() + t * D,
                Xn.data() + t * stream);
      }
      p.seq->num.Act(Xn.data() + p.row0 * stream, p.n * stream);
    }
    std::swap(X, Xn);
    // MoE sub-layer.
    for (const PartRows& p : rows) {
      const Sequence::Impl& im = *p.seq;
      for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
        mix[static_cast<size_t>(t)] = MhcPre(im.mhc, b.hc_ffn, X.data() + t * stream, u.data());
        im.num.Act(u.data(), D);
        RmsNorm(u.data(), b.ffn_norm.ptr(), D, eps, x.data() + t * D);
        im.num.Act(x.data() + t * D, D);
      }
    }
    if (first.opts.tp_ranks <= 1) {
      // One pass over the rows of consecutive parts that share their MoE config (every part but
      // those replaying shared-expert-no-clamp); rows do not depend on each other.
      for (size_t i = 0; i < rows.size();) {
        size_t j = i + 1;
        while (j < rows.size() && rows[j].seq->opts.fault == rows[i].seq->opts.fault) ++j;
        const int64_t r0 = rows[i].row0, rn = rows[j - 1].row0 + rows[j - 1].n - r0;
        MoeForwardRows(rows[i].seq->moe_cfg, b.ffn, l, x.data() + r0 * D, tokens.data() + r0, rn,
                       y.data() + r0 * D);
        i = j;
      }
    } else {
      for (int64_t t = 0; t < N; ++t) {
        MoeForwardRanks(first.moe_cfg, b.ffn, l, x.data() + t * D, tokens[static_cast<size_t>(t)],
                        first.opts.tp_ranks, y.data() + t * D);
      }
    }
    for (const PartRows& p : rows) {
      const Sequence::Impl& im = *p.seq;
      for (int64_t t = p.row0; t < p.row0 + p.n; ++t) {
        im.num.Act(y.data() + t * D, D);
        MhcPost(im.mhc, mix[static_cast<size_t>(t)], X.data() + t * stream, y.data() + t * D,
                Xn.data() + t * stream);
        im.num.Act(Xn.data() + t * stream, stream);
      }
      if (ForwardTrace* tr = im.opts.trace; tr != nullptr) {
        std::vector<float>& h = tr->layers[static_cast<size_t>(l)].hidden;
        h.insert(h.end(), Xn.data() + p.row0 * stream, Xn.data() + (p.row0 + p.n) * stream);
      }
    }
    std::swap(X, Xn);
  }

  // Head: the rows whose logits are wanted, through one head linear.
  std::vector<int64_t> head_rows;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartRows& p = rows[i];
    if (parts[i].all_logits != nullptr) {
      for (int64_t t = p.row0; t < p.row0 + p.n; ++t) head_rows.push_back(t);
    } else if (parts[i].last_logits != nullptr) {
      head_rows.push_back(p.row0 + p.n - 1);
    }
  }
  const int64_t M = static_cast<int64_t>(head_rows.size());
  std::vector<float> h(static_cast<size_t>(M * D)), logits(static_cast<size_t>(M * V));
  size_t k = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartRows& p = rows[i];
    for (; k < head_rows.size() && head_rows[k] < p.row0 + p.n; ++k) {
      const int64_t t = head_rows[k];
      float* hk = h.data() + static_cast<int64_t>(k) * D;
      MhcHead(p.seq->mhc, w.hc_head, X.data() + t * stream, u.data());
      p.seq->num.Act(u.data(), D);
      RmsNorm(u.data(), w.norm.ptr(), D, eps, hk);
      p.seq->num.Act(hk, D);
    }
  }
  if (M > 0) lin(h.data(), M, D, w.head.ptr(), V, logits.data());
  k = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PartRows& p = rows[i];
    const RowsPart& part = parts[i];
    if (part.all_logits != nullptr) {
      std::copy_n(logits.data() + static_cast<int64_t>(k) * V, p.n * V, part.all_logits);
      if (part.last_logits != nullptr) {
        std::copy_n(part.all_logits + (p.n - 1) * V, V, part.last_logits);
      }
      k += static_cast<size_t>(p.n);
    } else if (part.last_logits != nullptr) {
      std::copy_n(logits.data() + static_cast<int64_t>(k) * V, V, part.last_logits);
      ++k;
    }
  }
  for (const PartRows& p : rows) p.seq->pos += p.n;
  return Status::Ok();
}

// ---- Sequence ----------------------------------------------------------------------------------

Sequence::Sequence(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;
Sequence::~Sequence() = default;

Result<Sequence> Sequence::Create(const ModelConfig& cfg, const ModelWeights& weights,
                                  const SequenceOptions& options) {
  NW_RETURN_IF_ERROR(ValidateWeights(cfg, weights));
  NW_RETURN_IF_ERROR(options.precision.Validate());
  if (options.max_tokens <= 0) {
    return Status::InvalidArgument("sequence capacity (max_tokens) must be positive");
  }
  if (options.prefill_chunk < 0 || options.index_topk < 0) {
    return Status::InvalidArgument("prefill_chunk and index_topk must be >= 0");
  }
  if (options.tp_ranks < 1 || cfg.n_heads % options.tp_ranks != 0 ||
      cfg.o_groups % options.tp_ranks != 0 || cfg.n_routed_experts % options.tp_ranks != 0 ||
      (cfg.num_indexer_layers() > 0 && cfg.index_n_heads % options.tp_ranks != 0)) {
    return Status::InvalidArgument(
        "tp_ranks must be >= 1 and divide n_heads, o_groups, n_routed_experts and "
        "index_n_heads");
  }
  if (cfg.num_indexer_layers() > 0 && options.index_topk == 0 && cfg.index_topk <= 0) {
    return Status::InvalidArgument("index_topk must be positive");
  }
  if (options.probe) {
    const ProbeRequest& p = *options.probe;
    if (p.needle_begin < 0 || p.needle_end < p.needle_begin || p.query_begin < 0) {
      return Status::InvalidArgument(
          "probe ranges must satisfy 0 <= needle_begin <= needle_end "
          "and query_begin >= 0");
    }
  }
  // Before anything is allocated: a request that cannot fit is refused with the numbers.
  NW_RETURN_IF_ERROR(CheckCpuSequenceFits(
      cfg, options.max_tokens, options.prefill_chunk, options.index_topk,
      options.probe ? &*options.probe : nullptr, HostMemoryLimitBytes(options.memory_limit_bytes)));
  auto impl = std::make_unique<Impl>(cfg, weights, options);
  impl->Init();
  return Sequence(std::move(impl));
}

int64_t Sequence::position() const { return impl_->pos; }
int Sequence::index_topk() const { return impl_->topk; }
const std::vector<IndexerProbe>& Sequence::probes() const { return impl_->probes; }

int64_t Sequence::pages_in_use() const {
  return impl_->kv_pool->pages_in_use() + impl_->index_pool->pages_in_use();
}

int64_t Sequence::state_bytes() const {
  const Impl& im = *impl_;
  const auto pool_bytes = [](const PagePool& p) {
    return p.pages_in_use() * kPageSize * p.width() * static_cast<int64_t>(sizeof(float));
  };
  int64_t bytes = pool_bytes(*im.kv_pool) + pool_bytes(*im.index_pool);
  for (const LayerCache& c : im.layers) {
    bytes += c.window.contiguous_bytes() + c.compressed.contiguous_bytes() +
             c.index_keys.contiguous_bytes();
    for (const CompressorState* st : {&c.kv_state, &c.index_state}) {
      bytes += static_cast<int64_t>((st->kv.size() + st->score.size()) * sizeof(float));
    }
  }
  return bytes;
}

SequenceState Sequence::ExportState() const {
  const Impl& im = *impl_;
  const ModelConfig& cfg = im.cfg;
  SequenceState st;
  st.position = im.pos;
  const int64_t d = cfg.head_dim, cI = cfg.index_head_dim;
  auto rows = [](const RowStore& store, int64_t begin, int64_t end, int64_t width,
                 std::vector<float>& out) {
    out.resize(static_cast<size_t>((end - begin) * width));
    for (int64_t i = begin; i < end; ++i) {
      std::copy_n(store.Row(i), width, out.data() + (i - begin) * width);
    }
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const LayerCache& c = im.layers[static_cast<size_t>(l)];
    SequenceLayerState ls;
    ls.ratio = cfg.ratio(l);
    rows(c.window, std::max<int64_t>(0, im.pos - cfg.window_size), im.pos, d, ls.window);
    if (ls.ratio > 0) {
      rows(c.compressed, 0, im.pos / ls.ratio, d, ls.compressed);
      ls.kv_state_kv = c.kv_state.kv;
      ls.kv_state_score = c.kv_state.score;
    }
    if (ls.ratio == 4) {
      rows(c.index_keys, 0, im.pos / 4, cI, ls.index_keys);
      ls.index_state_kv = c.index_state.kv;
      ls.index_state_score = c.index_state.score;
    }
    st.layers.push_back(std::move(ls));
  }
  return st;
}

Status CheckSequenceState(const ModelConfig& cfg, const SequenceState& st, int64_t capacity) {
  if (st.position < 0 || st.position > capacity) {
    return Status::OutOfRange("state position " + std::to_string(st.position) +
                              " outside the sequence capacity " + std::to_string(capacity));
  }
  if (static_cast<int>(st.layers.size()) != cfg.n_layers) {
    return Status::InvalidArgument("state has " + std::to_string(st.layers.size()) +
                                   " layers, config has " + std::to_string(cfg.n_layers));
  }
  const int64_t pos = st.position, d = cfg.head_dim, cI = cfg.index_head_dim;
  auto expect = [](const std::vector<float>& v, int64_t n, const std::string& what) {
    if (static_cast<int64_t>(v.size()) != n) {
      return Status::InvalidArgument("state " + what + " has " + std::to_string(v.size()) +
                                     " values, expected " + std::to_string(n));
    }
    return Status::Ok();
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const SequenceLayerState& ls = st.layers[static_cast<size_t>(l)];
    const std::string P = "layer " + std::to_string(l) + " ";
    if (ls.ratio != cfg.ratio(l)) return Status::InvalidArgument(P + "has another ratio");
    NW_RETURN_IF_ERROR(
        expect(ls.window, std::min<int64_t>(pos, cfg.window_size) * d, P + "window"));
    // A compressor's rolling state: coff * ratio rows of coff * width (coff 2 for ratio 4).
    const int64_t coff = ls.ratio == 4 ? 2 : 1;
    const int64_t ks = ls.ratio > 0 ? coff * ls.ratio * coff * d : 0;
    NW_RETURN_IF_ERROR(
        expect(ls.compressed, ls.ratio > 0 ? pos / ls.ratio * d : 0, P + "compressed"));
    NW_RETURN_IF_ERROR(expect(ls.kv_state_kv, ks, P + "compressor kv state"));
    NW_RETURN_IF_ERROR(expect(ls.kv_state_score, ks, P + "compressor score state"));
    const int64_t is = ls.ratio == 4 ? 8 * 2 * cI : 0;
    NW_RETURN_IF_ERROR(expect(ls.index_keys, ls.ratio == 4 ? pos / 4 * cI : 0, P + "index keys"));
    NW_RETURN_IF_ERROR(expect(ls.index_state_kv, is, P + "indexer kv state"));
    NW_RETURN_IF_ERROR(expect(ls.index_state_score, is, P + "indexer score state"));
  }
  return Status::Ok();
}

Status Sequence::ImportState(const SequenceState& st) {
  Impl& im = *impl_;
  const ModelConfig& cfg = im.cfg;
  if (im.pos != 0) return Status::FailedPrecondition("import needs a fresh sequence");
  // Check everything before writing anything.
  NW_RETURN_IF_ERROR(CheckSequenceState(cfg, st, im.opts.max_tokens));
  const int64_t pos = st.position, d = cfg.head_dim, cI = cfg.index_head_dim;
  auto put = [](RowStore& store, int64_t begin, int64_t end, int64_t width,
                const std::vector<float>& in) {
    for (int64_t i = begin; i < end; ++i) {
      std::copy_n(in.data() + (i - begin) * width, width, store.MutableRow(i));
    }
  };
  for (int l = 0; l < cfg.n_layers; ++l) {
    const SequenceLayerState& ls = st.layers[static_cast<size_t>(l)];
    LayerCache& c = im.layers[static_cast<size_t>(l)];
    put(c.window, std::max<int64_t>(0, pos - cfg.window_size), pos, d, ls.window);
    if (ls.ratio > 0) {
      put(c.compressed, 0, pos / ls.ratio, d, ls.compressed);
      c.kv_state.kv = ls.kv_state_kv;
      c.kv_state.score = ls.kv_state_score;
    }
    if (ls.ratio == 4) {
      put(c.index_keys, 0, pos / 4, cI, ls.index_keys);
      c.index_state.kv = ls.index_state_kv;
      c.index_state.score = ls.index_state_score;
    }
  }
  im.pos = pos;
  return Status::Ok();
}

Status Sequence::Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                         std::vector<float>* all_logits) {
  return impl_->Forward(tokens, last_logits, all_logits);
}

Status Sequence::Impl::Forward(std::span<const int32_t> tokens, std::vector<float>* last_logits,
                               std::vector<float>* all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size()), V = cfg.vocab_size;
  std::vector<float> last, all;
  if (last_logits != nullptr) last.resize(static_cast<size_t>(V));
  if (all_logits != nullptr) all.resize(static_cast<size_t>(n * V));
  const RowsPart part{this, tokens, last_logits != nullptr ? last.data() : nullptr,
                      all_logits != nullptr ? all.data() : nullptr};
  NW_RETURN_IF_ERROR(ForwardRows(std::span<const RowsPart>(&part, 1)));
  if (last_logits != nullptr) *last_logits = std::move(last);
  if (all_logits != nullptr) *all_logits = std::move(all);
  return Status::Ok();
}

Status Sequence::Prefill(std::span<const int32_t> tokens, std::vector<float>* logits) {
  if (tokens.empty()) return Status::InvalidArgument("prefill needs at least one token");
  // ragged-key-offset acts between chunks: a backend that prefills in one pass gets 1,024-token
  // chunks under it (engine/fault.h).
  const int64_t fault_chunk = impl_->opts.fault == Fault::kRaggedKeyOffset ? 1024 : 0;
  const size_t chunk = impl_->opts.prefill_chunk > 0
                           ? static_cast<size_t>(impl_->opts.prefill_chunk)
                       : fault_chunk > 0 ? static_cast<size_t>(fault_chunk)
                                         : tokens.size();
  for (size_t b = 0; b < tokens.size(); b += chunk) {
    const size_t e = std::min(tokens.size(), b + chunk);
    NW_RETURN_IF_ERROR(
        impl_->Forward(tokens.subspan(b, e - b), e == tokens.size() ? logits : nullptr, nullptr));
  }
  return Status::Ok();
}

Status Sequence::Decode(int32_t token, std::vector<float>* logits) {
  return impl_->Forward(std::span<const int32_t>(&token, 1), logits, nullptr);
}

}  // namespace nw::cpu
