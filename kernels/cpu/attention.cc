#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vec.h"

namespace nw::cpu {

void SparseAttention(const SparseAttnParams& p, const float* q, const float* const* kv, int64_t n,
                     const float* sink, float* out, float* scratch) {
  const int64_t d = p.head_dim;
  const int heads = p.n_heads;
  float* denom = scratch + static_cast<int64_t>(heads) * n;
  // Logits, one row of n per head; each KV row is read once for all heads.
  for (int64_t j = 0; j < n; ++j) {
    for (int h = 0; h < heads; ++h) scratch[h * n + j] = p.scale * Dot(q + h * d, kv[j], d);
  }
  // Unnormalised probabilities e^{z - m} in place, and the denominators including the sink.
  for (int h = 0; h < heads; ++h) {
    float* z = scratch + h * n;
    float m = sink[h];
    for (int64_t j = 0; j < n; ++j) m = std::max(m, z[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      z[j] = std::exp(z[j] - m);
      sum += z[j];
    }
    denom[h] = sum + std::exp(sink[h] - m);
  }
  std::fill(out, out + heads * d, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    for (int h = 0; h < heads; ++h) Axpy(scratch[h * n + j], kv[j], out + h * d, d);
  }
  for (int h = 0; h < heads; ++h) {
    const float inv = 1.0f / denom[h];
    for (int64_t i = 0; i < d; ++i) out[h * d + i] *= inv;
  }
}

void GroupedLinear(const float* x, const float* w, int groups, int64_t group_in, int64_t rank,
                   float* y) {
  for (int g = 0; g < groups; ++g) {
    const float* xg = x + g * group_in;
    for (int64_t r = 0; r < rank; ++r) {
      const int64_t row = g * rank + r;
      y[row] = Dot(w + row * group_in, xg, group_in);
    }
  }
}

void GroupedLinearRows(const float* x, int64_t rows, const float* w, int groups, int64_t group_in,
                       int64_t rank, float* y) {
  const int64_t in = groups * group_in, out = groups * rank;
  for (int g = 0; g < groups; ++g) {
    for (int64_t r = 0; r < rank; ++r) {
      const int64_t row = g * rank + r;
      const float* wr = w + row * group_in;
      for (int64_t t = 0; t < rows; ++t)
        y[t * out + row] = Dot(wr, x + t * in + g * group_in, group_in);
    }
  }
}

void IndexerScores(const IndexerParams& p, const float* q, const float* w, const float* keys,
                   int64_t n, float* scores) {
  const int64_t c = p.head_dim;
  for (int64_t j = 0; j < n; ++j) {
    const float* k = keys + j * c;
    float s = 0.0f;
    for (int h = 0; h < p.n_heads; ++h) s += w[h] * std::max(Dot(q + h * c, k, c), 0.0f);
    scores[j] = s;
  }
}

void CompressPool(const CompressParams& p, const float* const* kv, const float* const* score,
                  float* out, float* scratch) {
  const int64_t d = p.dim;
  const int span = p.overlap ? 2 * p.ratio : p.ratio;
  float* e = scratch;                 // [span, d]
  float* denom = scratch + span * d;  // [d]
  auto column = [&](int k) -> int64_t { return p.overlap && k >= p.ratio ? d : 0; };
  // Per-channel max over the existing rows.
  std::fill(out, out + d, -std::numeric_limits<float>::infinity());
  for (int k = 0; k < span; ++k) {
    if (score[k] == nullptr) continue;
    const float* s = score[k] + column(k);
    for (int64_t c = 0; c < d; ++c) out[c] = std::max(out[c], s[c]);
  }
  std::fill(denom, denom + d, 0.0f);
  for (int k = 0; k < span; ++k) {
    if (score[k] == nullptr) continue;
    const float* s = score[k] + column(k);
    float* ek = e + k * d;
    for (int64_t c = 0; c < d; ++c) {
      ek[c] = std::exp(s[c] - out[c]);
      denom[c] += ek[c];
    }
  }
  std::fill(out, out + d, 0.0f);
  for (int k = 0; k < span; ++k) {
    if (score[k] == nullptr) continue;
    const float* v = kv[k] + column(k);
    const float* ek = e + k * d;
    for (int64_t c = 0; c < d; ++c) out[c] += v[c] * (ek[c] / denom[c]);
  }
}

}  // namespace nw::cpu
