// mHC (manifold-constrained hyper-connections) for one token, CPU reference.
// Spec: docs/v4-attention.md §2.7 and docs/checkpoint-format.md §2.2; DeepSeek's
// reference Block.hc_pre / hc_post / ParallelHead.hc_head and kernel.hc_split_sinkhorn.
// The residual state of a token is X = n streams of D values (n = hc_mult), row-major [n, D].
//
// Exact semantics (all fp32, as the reference):
//   mix  = (fn · vec(X)) * rsqrt(mean(vec(X)^2) + norm_eps)       (the matmul first, then the
//   scale) pre  = sigmoid(mix[j] * scale[0] + base[j]) + hc_eps            j < n post = 2 *
//   sigmoid(mix[n + j] * scale[1] + base[n + j])          (no eps) comb = softmax_k(mix[2n + j*n +
//   k] * scale[2] + base[2n + j*n + k]) + hc_eps Sinkhorn: comb /= (column sums + hc_eps); then
//   sinkhorn_iters - 1 times
//             { comb /= (row sums + hc_eps); comb /= (column sums + hc_eps) }.
//   The row softmax stands in for the first row normalisation, so sinkhorn_iters counts column
//   normalisations; iters <= 1 both give softmax + eps + one column normalisation.
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "engine/checkpoint/config.h"
#include "engine/checkpoint/weights.h"

namespace nw::cpu {

struct MhcParams {
  int n = 4;                // hc_mult
  int dim = 0;              // D
  int sinkhorn_iters = 20;  // hc_sinkhorn_iters
  float hc_eps = 1e-6f;     // added after sigmoid / softmax and in the Sinkhorn normalisations
  float norm_eps = 1e-6f;   // the rsqrt(mean-square + eps) of the mix input
};

/// hc_mult, dim, hc_sinkhorn_iters, hc_eps and norm_eps of a model.
MhcParams MhcParamsFromConfig(const ModelConfig& cfg);

/// The per-sub-layer mixing weights derived from X.
struct MhcMix {
  std::vector<float> pre;   // [n]
  std::vector<float> post;  // [n]
  std::vector<float> comb;  // [n * n], row-major comb[i * n + j] (Sinkhorn-normalised)
};

/// hc_pre: computes the mix from X with (fn [(2+n)n, n*D], base [(2+n)n], scale [3]) and returns
/// u = sum_i pre_i * X_i ([D]) in `u`.
MhcMix MhcPre(const MhcParams& p, const HcWeights& w, const float* x, float* u);
/// hc_post: X'_j = post_j * y + sum_i comb[i][j] * X_i   (x, x_out: [n, D]; y: [D]).
/// The first comb index runs over the input streams X_i, the second over the output streams.
/// x_out must not alias x.
void MhcPost(const MhcParams& p, const MhcMix& mix, const float* x, const float* y, float* x_out);
/// Head collapse: pre = sigmoid(mix * scale + base) + eps over (fn [n, n*D], base [n],
/// scale [1]); out = sum_i pre_i * X_i ([D]). The final RMSNorm is applied by the caller.
void MhcHead(const MhcParams& p, const HcWeights& w, const float* x, float* out);

}  // namespace nw::cpu
