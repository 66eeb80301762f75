#include "engine/cpu/mhc.h"

#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/ops.h"

namespace nw::cpu {
namespace {

// mix[r] = (fn[r] · vec(X)) * rsqrt(mean(vec(X)^2) + norm_eps) for r < rows (Block.hc_pre and
// ParallelHead.hc_head). The mean square of the n*D inputs is accumulated in double: torch reduces
// it with a cascaded sum, which a plain fp32 loop over 16384 values would not match.
std::vector<float> ComputeMix(const MhcParams& p, const Tensor& fn, int64_t rows, const float* x) {
  const int64_t nd = static_cast<int64_t>(p.n) * p.dim;
  assert(fn.numel() == rows * nd);
  std::vector<float> mix(static_cast<size_t>(rows));
  Linear(x, 1, nd, fn.ptr(), rows, mix.data());
  double sum_sq = 0;
  for (int64_t i = 0; i < nd; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float mean_sq = static_cast<float>(sum_sq / static_cast<double>(nd));
  const float rsqrt = 1.0f / std::sqrt(mean_sq + p.norm_eps);
  for (float& m : mix) m *= rsqrt;
  return mix;
}

// out[d] = sum_i pre[i] * X_i[d], streams summed in index order.
void Collapse(const MhcParams& p, const std::vector<float>& pre, const float* x, float* out) {
  for (int d = 0; d < p.dim; ++d) {
    float s = 0.0f;
    for (int i = 0; i < p.n; ++i) s += pre[i] * x[static_cast<int64_t>(i) * p.dim + d];
    out[d] = s;
  }
}

// comb[j*n + k] /= (sum_k comb[j*n + k] + eps): each row divided by its sum.
void NormaliseRows(std::vector<float>& comb, int n, float eps) {
  for (int j = 0; j < n; ++j) {
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) sum += comb[j * n + k];
    for (int k = 0; k < n; ++k) comb[j * n + k] /= sum + eps;
  }
}

// comb[j*n + k] /= (sum_j comb[j*n + k] + eps): each column divided by its sum.
void NormaliseColumns(std::vector<float>& comb, int n, float eps) {
  for (int k = 0; k < n; ++k) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += comb[j * n + k];
    for (int j = 0; j < n; ++j) comb[j * n + k] /= sum + eps;
  }
}

// kernel.hc_split_sinkhorn on the comb logits [n, n]: row softmax + eps, one column
// normalisation, then (iters - 1) x {rows, columns}.
void Sinkhorn(std::vector<float>& comb, int n, int iters, float eps) {
  for (int j = 0; j < n; ++j) {
    SoftmaxInPlace(comb.data() + j * n, n);
    for (int k = 0; k < n; ++k) comb[j * n + k] += eps;
  }
  NormaliseColumns(comb, n, eps);
  for (int it = 1; it < iters; ++it) {
    NormaliseRows(comb, n, eps);
    NormaliseColumns(comb, n, eps);
  }
}

}  // namespace

MhcParams MhcParamsFromConfig(const ModelConfig& cfg) {
  MhcParams p;
  p.n = cfg.hc_mult;
  p.dim = cfg.dim;
  p.sinkhorn_iters = cfg.hc_sinkhorn_iters;
  p.hc_eps = static_cast<float>(cfg.hc_eps);
  p.norm_eps = static_cast<float>(cfg.norm_eps);
  return p;
}

MhcMix MhcPre(const MhcParams& p, const HcWeights& w, const float* x, float* u) {
  const int n = p.n;
  const int64_t rows = static_cast<int64_t>(2 + n) * n;
  assert(w.base.numel() == rows && w.scale.numel() == 3);
  const std::vector<float> mix = ComputeMix(p, w.fn, rows, x);
  const float* base = w.base.ptr();
  const float* scale = w.scale.ptr();

  MhcMix out;
  out.pre.resize(n);
  out.post.resize(n);
  out.comb.resize(static_cast<size_t>(n) * n);
  for (int j = 0; j < n; ++j) out.pre[j] = Sigmoid(mix[j] * scale[0] + base[j]) + p.hc_eps;
  for (int j = 0; j < n; ++j) out.post[j] = 2.0f * Sigmoid(mix[n + j] * scale[1] + base[n + j]);
  for (int c = 0; c < n * n; ++c) out.comb[c] = mix[2 * n + c] * scale[2] + base[2 * n + c];
  Sinkhorn(out.comb, n, p.sinkhorn_iters, p.hc_eps);

  Collapse(p, out.pre, x, u);
  return out;
}

void MhcPost(const MhcParams& p, const MhcMix& mix, const float* x, const float* y, float* x_out) {
  const int n = p.n;
  const int64_t dim = p.dim;
  for (int j = 0; j < n; ++j) {
    float* out = x_out + j * dim;
    for (int64_t d = 0; d < dim; ++d) {
      float residual = 0.0f;
      for (int i = 0; i < n; ++i) residual += mix.comb[i * n + j] * x[i * dim + d];
      out[d] = mix.post[j] * y[d] + residual;
    }
  }
}

void MhcHead(const MhcParams& p, const HcWeights& w, const float* x, float* out) {
  const int n = p.n;
  assert(w.base.numel() == n && w.scale.numel() >= 1);
  const std::vector<float> mix = ComputeMix(p, w.fn, n, x);
  std::vector<float> pre(n);
  for (int j = 0; j < n; ++j)
    pre[j] = Sigmoid(mix[j] * w.scale.ptr()[0] + w.base.ptr()[j]) + p.hc_eps;
  Collapse(p, pre, x, out);
}

}  // namespace nw::cpu
