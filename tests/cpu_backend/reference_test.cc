// The CPU backend against an independent, deliberately naive model written straight from the
// spec (docs/v4-attention.md §2) in double precision: every compressed entry is pooled from
// its raw tokens, RoPE angles come from the YaRN formula in double, the Hadamard transform is the
// explicit Sylvester matrix, top-k is a full sort. It shares no code with the backend's attention
// path; mHC and MoE (tested on their own) are called as the same per-token functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <numeric>
#include <vector>

#include "engine/cpu/mhc.h"
#include "engine/cpu/moe.h"
#include "engine/cpu/random_weights.h"
#include "engine/cpu/sequence.h"
#include "tests/cpu_backend/test_model.h"

namespace nw::cpu {
namespace {

using Vec = std::vector<double>;

Vec MatVec(const Tensor& w, const Vec& x) {
  const int64_t out = w.dim(0), in = w.dim(1);
  Vec y(static_cast<size_t>(out), 0.0);
  for (int64_t o = 0; o < out; ++o) {
    double s = 0;
    for (int64_t i = 0; i < in; ++i)
      s += static_cast<double>(w.data[static_cast<size_t>(o * in + i)]) * x[static_cast<size_t>(i)];
    y[static_cast<size_t>(o)] = s;
  }
  return y;
}

Vec RmsNormD(const Vec& x, const Tensor* w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * (w ? w->data[i] : 1.0);
  return y;
}

Vec Slice(const Vec& x, size_t begin, size_t n) {
  return Vec(x.begin() + static_cast<std::ptrdiff_t>(begin),
             x.begin() + static_cast<std::ptrdiff_t>(begin + n));
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec ToD(const float* x, int64_t n) { return Vec(x, x + n); }
std::vector<float> ToF(const Vec& x) { return std::vector<float>(x.begin(), x.end()); }

struct NaiveModel {
  const ModelConfig& cfg;
  const ModelWeights& w;
  int topk;
  bool dense;

  double Freq(int layer, int j) const {
    const bool yarn = cfg.ratio(layer) > 0;
    const double base = yarn ? cfg.compress_rope_theta : cfg.rope_theta;
    const int dim = cfg.rope_head_dim;
    const double f = 1.0 / std::pow(base, 2.0 * j / dim);
    if (!yarn || cfg.original_seq_len <= 0) return f;
    auto cd = [&](double rot) {
      return dim * std::log(cfg.original_seq_len / (rot * 2 * std::numbers::pi)) /
             (2 * std::log(base));
    };
    const double low = std::max(std::floor(cd(cfg.beta_fast)), 0.0);
    double high = std::min(std::ceil(cd(cfg.beta_slow)), dim - 1.0);
    if (low == high) high += 0.001;
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    return f / cfg.rope_factor * ramp + f * (1 - ramp);
  }

  // Rotates the last rope_head_dim dims of x (interleaved pairs) by position pos.
  void Rope(int layer, Vec& x, int64_t pos, bool inverse) const {
    const size_t off = x.size() - static_cast<size_t>(cfg.rope_head_dim);
    for (int j = 0; j < cfg.rope_head_dim / 2; ++j) {
      const double a = pos * Freq(layer, j);
      const double c = std::cos(a), s = inverse ? -std::sin(a) : std::sin(a);
      double& x0 = x[off + 2 * static_cast<size_t>(j)];
      double& x1 = x[off + 2 * static_cast<size_t>(j) + 1];
      const double y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
      x0 = y0;
      x1 = y1;
    }
  }

  static Vec Hadamard(const Vec& x) {
    const size_t n = x.size();
    Vec y(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) y[i] += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * x[j];
      y[i] /= std::sqrt(static_cast<double>(n));
    }
    return y;
  }

  // Every complete entry of a compressor over tokens 0..T-1, pooled from the raw tokens.
  std::vector<Vec> Entries(int layer, const CompressorWeights& c, const std::vector<Vec>& x,
                           bool indexer) const {
    const int64_t r = c.ratio, d = c.dim, T = static_cast<int64_t>(x.size());
    const bool overlap = r == 4;
    std::vector<Vec> a(x.size()), g(x.size());
    for (int64_t j = 0; j < T; ++j) {
      a[static_cast<size_t>(j)] = MatVec(c.wkv, x[static_cast<size_t>(j)]);
      g[static_cast<size_t>(j)] = MatVec(c.wgate, x[static_cast<size_t>(j)]);
      for (size_t k = 0; k < g[static_cast<size_t>(j)].size(); ++k) {
        g[static_cast<size_t>(j)][k] += c.ape.data[static_cast<size_t>((j % r) * c.ape.dim(1)) + k];
      }
    }
    std::vector<Vec> entries;
    for (int64_t i = 0; (i + 1) * r <= T; ++i) {
      // (token, column offset) pairs pooled by entry i.
      std::vector<std::pair<int64_t, int64_t>> members;
      if (overlap) {
        for (int64_t j = (i - 1) * r; j < i * r; ++j) {
          if (j >= 0) members.push_back({j, 0});
        }
        for (int64_t j = i * r; j < (i + 1) * r; ++j) members.push_back({j, d});
      } else {
        for (int64_t j = i * r; j < (i + 1) * r; ++j) members.push_back({j, 0});
      }
      Vec e(static_cast<size_t>(d), 0.0);
      for (int64_t ch = 0; ch < d; ++ch) {
        double m = -INFINITY, z = 0, acc = 0;
        for (auto [j, off] : members)
          m = std::max(m, g[static_cast<size_t>(j)][static_cast<size_t>(off + ch)]);
        for (auto [j, off] : members) {
          const double p = std::exp(g[static_cast<size_t>(j)][static_cast<size_t>(off + ch)] - m);
          z += p;
          acc += p * a[static_cast<size_t>(j)][static_cast<size_t>(off + ch)];
        }
        e[static_cast<size_t>(ch)] = acc / z;
      }
      e = RmsNormD(e, &c.norm, cfg.norm_eps);
      Rope(layer, e, r * i, false);
      if (indexer) e = Hadamard(e);
      entries.push_back(e);
    }
    return entries;
  }

  std::vector<Vec> Attention(int layer, const std::vector<Vec>& x) const {
    const AttentionWeights& a = w.layers[static_cast<size_t>(layer)].attn;
    const int64_t T = static_cast<int64_t>(x.size()), H = cfg.n_heads, d = cfg.head_dim;
    const int64_t g = cfg.o_groups, R = cfg.o_lora_rank, ratio = cfg.ratio(layer);
    std::vector<Vec> qr(x.size()), kv(x.size());
    for (int64_t t = 0; t < T; ++t) {
      qr[static_cast<size_t>(t)] =
          RmsNormD(MatVec(a.wq_a, x[static_cast<size_t>(t)]), &a.q_norm, cfg.norm_eps);
      Vec k = RmsNormD(MatVec(a.wkv, x[static_cast<size_t>(t)]), &a.kv_norm, cfg.norm_eps);
      Rope(layer, k, t, false);
      kv[static_cast<size_t>(t)] = k;
    }
    std::vector<Vec> comp, keys;
    if (ratio > 0) comp = Entries(layer, *a.compressor, x, false);
    if (ratio == 4) keys = Entries(layer, a.indexer->compressor, x, true);
    std::vector<Vec> out;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<const Vec*> set;
      for (int64_t j = std::max<int64_t>(0, t - cfg.window_size + 1); j <= t; ++j)
        set.push_back(&kv[static_cast<size_t>(j)]);
      const int64_t visible = ratio > 0 ? (t + 1) / ratio : 0;
      std::vector<int64_t> chosen;
      if (ratio == 128 || (ratio == 4 && dense)) {
        for (int64_t i = 0; i < visible; ++i) chosen.push_back(i);
      } else if (ratio == 4) {
        const IndexerWeights& ix = *a.indexer;
        const int64_t hI = cfg.index_n_heads, cI = cfg.index_head_dim;
        const Vec qi = MatVec(ix.wq_b, qr[static_cast<size_t>(t)]);
        const Vec wt = MatVec(ix.weights_proj, x[static_cast<size_t>(t)]);
        std::vector<Vec> heads;
        for (int64_t h = 0; h < hI; ++h) {
          Vec v = Slice(qi, static_cast<size_t>(h * cI), static_cast<size_t>(cI));
          Rope(layer, v, t, false);
          heads.push_back(Hadamard(v));
        }
        std::vector<double> score(static_cast<size_t>(visible));
        for (int64_t i = 0; i < visible; ++i) {
          double s = 0;
          for (int64_t h = 0; h < hI; ++h) {
            s += wt[static_cast<size_t>(h)] / std::sqrt(double(cI)) / std::sqrt(double(hI)) *
                 std::max(0.0, Dot(heads[static_cast<size_t>(h)], keys[static_cast<size_t>(i)]));
          }
          score[static_cast<size_t>(i)] = s;
        }
        std::vector<int64_t> order(static_cast<size_t>(visible));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
          return score[static_cast<size_t>(p)] > score[static_cast<size_t>(q)];
        });
        order.resize(static_cast<size_t>(std::min<int64_t>(visible, topk)));
        chosen = order;
      }
      for (int64_t i : chosen) set.push_back(&comp[static_cast<size_t>(i)]);
      Vec o(static_cast<size_t>(H * d), 0.0);
      Vec q_all = MatVec(a.wq_b, qr[static_cast<size_t>(t)]);
      for (int64_t h = 0; h < H; ++h) {
        Vec q = RmsNormD(Slice(q_all, static_cast<size_t>(h * d), static_cast<size_t>(d)), nullptr,
                         cfg.norm_eps);
        Rope(layer, q, t, false);
        double denom = std::exp(static_cast<double>(a.attn_sink.data[static_cast<size_t>(h)]));
        Vec acc(static_cast<size_t>(d), 0.0);
        for (const Vec* v : set) {
          const double e = std::exp(Dot(q, *v) / std::sqrt(static_cast<double>(d)));
          denom += e;
          for (int64_t i = 0; i < d; ++i)
            acc[static_cast<size_t>(i)] += e * (*v)[static_cast<size_t>(i)];
        }
        for (double& v : acc) v /= denom;
        Rope(layer, acc, t, true);
        std::copy(acc.begin(), acc.end(), o.begin() + h * d);
      }
      // wo_a per group, then wo_b.
      const int64_t gin = H * d / g;
      Vec low(static_cast<size_t>(g * R), 0.0);
      for (int64_t gi = 0; gi < g; ++gi) {
        for (int64_t r = 0; r < R; ++r) {
          double s = 0;
          for (int64_t i = 0; i < gin; ++i) {
            s += static_cast<double>(a.wo_a.data[static_cast<size_t>((gi * R + r) * gin + i)]) *
                 o[static_cast<size_t>(gi * gin + i)];
          }
          low[static_cast<size_t>(gi * R + r)] = s;
        }
      }
      out.push_back(MatVec(a.wo_b, low));
    }
    return out;
  }

  // Logits of every position, [T, V].
  std::vector<double> Run(const std::vector<int32_t>& tokens) const {
    const int64_t T = static_cast<int64_t>(tokens.size()), D = cfg.dim, n = cfg.hc_mult;
    MhcParams mp;
    mp.n = n;
    mp.dim = D;
    mp.sinkhorn_iters = cfg.hc_sinkhorn_iters;
    mp.hc_eps = static_cast<float>(cfg.hc_eps);
    mp.norm_eps = static_cast<float>(cfg.norm_eps);
    std::vector<std::vector<float>> X(tokens.size());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        X[static_cast<size_t>(t)].insert(
            X[static_cast<size_t>(t)].end(),
            w.embed.data.begin() + tokens[static_cast<size_t>(t)] * D,
            w.embed.data.begin() + (tokens[static_cast<size_t>(t)] + 1) * D);
      }
    }
    std::vector<float> u(static_cast<size_t>(D)), next(static_cast<size_t>(n * D));
    for (int l = 0; l < cfg.n_layers; ++l) {
      const BlockWeights& b = w.layers[static_cast<size_t>(l)];
      std::vector<MhcMix> mixes;
      std::vector<Vec> xs;
      for (int64_t t = 0; t < T; ++t) {
        mixes.push_back(MhcPre(mp, b.hc_attn, X[static_cast<size_t>(t)].data(), u.data()));
        xs.push_back(RmsNormD(ToD(u.data(), D), &b.attn_norm, cfg.norm_eps));
      }
      const std::vector<Vec> ys = Attention(l, xs);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<float> y = ToF(ys[static_cast<size_t>(t)]);
        MhcPost(mp, mixes[static_cast<size_t>(t)], X[static_cast<size_t>(t)].data(), y.data(),
                next.data());
        X[static_cast<size_t>(t)] = next;
        const MhcMix m = MhcPre(mp, b.hc_ffn, X[static_cast<size_t>(t)].data(), u.data());
        const std::vector<float> xf = ToF(RmsNormD(ToD(u.data(), D), &b.ffn_norm, cfg.norm_eps));
        std::vector<float> f(static_cast<size_t>(D));
        MoeForward(cfg, b.ffn, l, xf.data(), tokens[static_cast<size_t>(t)], f.data());
        MhcPost(mp, m, X[static_cast<size_t>(t)].data(), f.data(), next.data());
        X[static_cast<size_t>(t)] = next;
      }
    }
    std::vector<double> logits;
    for (int64_t t = 0; t < T; ++t) {
      MhcHead(mp, w.hc_head, X[static_cast<size_t>(t)].data(), u.data());
      const Vec lg = MatVec(w.head, RmsNormD(ToD(u.data(), D), &w.norm, cfg.norm_eps));
      logits.insert(logits.end(), lg.begin(), lg.end());
    }
    return logits;
  }
};

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, int64_t V) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (err > worst) {
      worst = err;
      at = i;
    }
  }
  EXPECT_LT(worst, 2e-4) << "worst at position " << at / static_cast<size_t>(V) << " token "
                         << at % static_cast<size_t>(V) << ": " << got[at] << " vs " << want[at];
}

TEST(ReferenceTest, TopKSelectionMatchesNaiveModel) {
  const ModelConfig cfg = testing::SmallWindow();
  const ModelWeights w = RandomModelWeights(cfg, 21);
  const std::vector<int32_t> tokens = testing::RandomTokens(300, cfg.vocab_size, 21);
  const NaiveModel naive{cfg, w, cfg.index_topk, false};
  ExpectClose(testing::AllLogits(cfg, w, tokens, {}), naive.Run(tokens), cfg.vocab_size);
}

TEST(ReferenceTest, DenseSelectionMatchesNaiveModel) {
  const ModelConfig cfg = testing::SmallWindow();
  const ModelWeights w = RandomModelWeights(cfg, 22);
  const std::vector<int32_t> tokens = testing::RandomTokens(280, cfg.vocab_size, 22);
  const NaiveModel naive{cfg, w, 0, true};
  SequenceOptions o;
  o.dense_compressed = true;
  ExpectClose(testing::AllLogits(cfg, w, tokens, o), naive.Run(tokens), cfg.vocab_size);
}

TEST(ReferenceTest, TinyAShortPromptMatchesNaiveModel) {
  const ModelConfig cfg = testing::TinyA();
  const ModelWeights w = RandomModelWeights(cfg, 23);
  const std::vector<int32_t> tokens = testing::RandomTokens(140, cfg.vocab_size, 23);
  const NaiveModel naive{cfg, w, cfg.index_topk, false};
  ExpectClose(testing::AllLogits(cfg, w, tokens, {}), naive.Run(tokens), cfg.vocab_size);
}

}  // namespace
}  // namespace nw::cpu
