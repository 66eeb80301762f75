#include "engine/cpu/random_weights.h"

#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "common/splitmix64.h"

namespace nw::cpu {

namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : stream_(seed) {}
  uint64_t Next() { return stream_.Next(); }
  /// Uniform in [-1, 1) with 24 random bits.
  float Symmetric() {
    return static_cast<float>(static_cast<double>(Next() >> 40) * 0x1p-23 - 1.0);
  }

 private:
  SplitMix64 stream_;
};

Tensor Uniform(Rng& rng, std::vector<int64_t> shape, float center, float half_width) {
  Tensor t(std::move(shape));
  for (float& v : t.data) v = center + half_width * rng.Symmetric();
  return t;
}

// Linear weight [out, in] with variance 1/in.
Tensor LinearWeight(Rng& rng, int64_t out, int64_t in) {
  return Uniform(rng, {out, in}, 0.0f,
                 static_cast<float>(std::sqrt(3.0 / static_cast<double>(in))));
}

Tensor NormWeight(Rng& rng, int64_t n) { return Uniform(rng, {n}, 1.0f, 0.1f); }

HcWeights Hc(Rng& rng, int64_t mix, int64_t scales, int64_t nd) {
  HcWeights hc;
  hc.fn =
      Uniform(rng, {mix, nd}, 0.0f, static_cast<float>(std::sqrt(3.0 / static_cast<double>(nd))));
  hc.base = Uniform(rng, {mix}, 0.0f, 0.5f);
  hc.scale = Uniform(rng, {scales}, 1.0f, 0.5f);
  return hc;
}

CompressorWeights Compressor(Rng& rng, int ratio, int64_t dim, int64_t d_model) {
  CompressorWeights c;
  c.ratio = ratio;
  c.dim = static_cast<int>(dim);
  const int64_t coff = ratio == 4 ? 2 : 1;
  c.wkv = LinearWeight(rng, coff * dim, d_model);
  c.wgate = LinearWeight(rng, coff * dim, d_model);
  c.ape = Uniform(rng, {ratio, coff * dim}, 0.0f, 0.5f);
  c.norm = NormWeight(rng, dim);
  return c;
}

ExpertWeights Expert(Rng& rng, int64_t d_model, int64_t inter) {
  ExpertWeights e;
  e.w1 = LinearWeight(rng, inter, d_model);
  e.w3 = LinearWeight(rng, inter, d_model);
  e.w2 = LinearWeight(rng, d_model, inter);
  return e;
}

}  // namespace

ModelWeights RandomModelWeights(const ModelConfig& cfg, uint64_t seed) {
  Rng rng(seed);
  const int64_t V = cfg.vocab_size, D = cfg.dim, H = cfg.n_heads, d = cfg.head_dim;
  const int64_t q = cfg.q_lora_rank, g = cfg.o_groups, R = cfg.o_lora_rank, n = cfg.hc_mult;
  const int64_t E = cfg.n_routed_experts, I = cfg.moe_inter_dim, k = cfg.n_activated_experts;
  ModelWeights w;
  w.embed = Uniform(rng, {V, D}, 0.0f, 1.0f);
  w.norm = NormWeight(rng, D);
  w.head = LinearWeight(rng, V, D);
  w.hc_head = Hc(rng, n, 1, n * D);
  for (int l = 0; l < cfg.n_layers; ++l) {
    BlockWeights b;
    b.hc_attn = Hc(rng, (2 + n) * n, 3, n * D);
    b.hc_ffn = Hc(rng, (2 + n) * n, 3, n * D);
    b.attn_norm = NormWeight(rng, D);
    b.ffn_norm = NormWeight(rng, D);
    AttentionWeights& a = b.attn;
    a.attn_sink = Uniform(rng, {H}, 0.0f, 1.0f);
    a.wq_a = LinearWeight(rng, q, D);
    a.q_norm = NormWeight(rng, q);
    a.wq_b = LinearWeight(rng, H * d, q);
    a.wkv = LinearWeight(rng, d, D);
    a.kv_norm = NormWeight(rng, d);
    a.wo_a = LinearWeight(rng, g * R, H * d / g);
    a.wo_b = LinearWeight(rng, D, g * R);
    const int ratio = cfg.ratio(l);
    if (ratio > 0) a.compressor = Compressor(rng, ratio, d, D);
    if (ratio == 4) {
      IndexerWeights ix;
      ix.wq_b = LinearWeight(rng, static_cast<int64_t>(cfg.index_n_heads) * cfg.index_head_dim, q);
      ix.weights_proj = LinearWeight(rng, cfg.index_n_heads, D);
      ix.compressor = Compressor(rng, 4, cfg.index_head_dim, D);
      a.indexer = std::move(ix);
    }
    FfnWeights& f = b.ffn;
    f.gate = LinearWeight(rng, E, D);
    if (cfg.is_hash_layer(l)) {
      // k distinct experts per token: a seeded partial Fisher-Yates shuffle per row.
      std::vector<int32_t> ids(static_cast<size_t>(E));
      f.tid2eid.reserve(static_cast<size_t>(V * k));
      for (int64_t t = 0; t < V; ++t) {
        std::iota(ids.begin(), ids.end(), 0);
        for (int64_t j = 0; j < k; ++j) {
          const int64_t pick = j + static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(E - j));
          std::swap(ids[static_cast<size_t>(j)], ids[static_cast<size_t>(pick)]);
          f.tid2eid.push_back(ids[static_cast<size_t>(j)]);
        }
      }
    } else {
      f.gate_bias = Uniform(rng, {E}, 0.0f, 0.1f);
    }
    for (int64_t e = 0; e < E; ++e) f.experts.push_back(Expert(rng, D, I));
    f.shared = Expert(rng, D, I);
    w.layers.push_back(std::move(b));
  }
  return w;
}

}  // namespace nw::cpu
