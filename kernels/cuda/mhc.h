// mHC (manifold-constrained hyper-connections) on the GPU, with the CPU reference's arithmetic
// (engine/cpu/mhc.h: the same formulas, orders and separately rounded products and sums; exp is
// evaluated in double and rounded to fp32, and the mean square is a fixed-tree double sum, so
// values agree with the CPU to within its own expf rounding, about 1 ulp, and are usually equal).
// The mixing linear (fn . vec(X)) runs before, through LaunchLinear (linear.h, 4 lanes).
//
// Pre (hc_pre, one warp per token; the Sinkhorn across its lanes when n * n <= 32):
//   mix  = raw_mix * rsqrt(mean(vec(X)^2) + norm_eps)
//   pre  = sigmoid(mix[j] * scale[0] + base[j]) + hc_eps           j < n
//   post = 2 * sigmoid(mix[n + j] * scale[1] + base[n + j])
//   comb = Sinkhorn(softmax rows of mix[2n + ...] * scale[2] + base[2n + ...]) (engine/cpu/mhc.h)
//   u    = sum_i pre_i * X_i
// Head (head = true): only pre (rows = n, one scale) and u.
// Post: X'_j = post_j * y + sum_i comb[i][j] * X_i (one thread per (token, value), all n streams).
// round_bf16 (both) rounds each u / X' value to bf16 as it is stored: an activation rounding point,
// bit-identical to a separate bf16 FakeQuant pass.
// Thread-safety: launchers are reentrant.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.h"

namespace nw::cuda {

inline constexpr int kMaxHcMult = 8;
/// From this many tokens in one LaunchMhcPre (non-head), the Sinkhorn runs one token a thread in
/// a second kernel (independent 20-round chains fill the SMs) instead of across each warp's lanes
/// (one chain a warp, the pre kernel's occupancy the limit). Measured on the H200 at n = 4: the
/// second kernel lost at 8,192 tokens (26 us a launch, one warp per scheduler on half the SMs) and
/// won at 32,768; below the switch, one launch fewer matters more (decode steps, short chunks).
/// Both forms give the same bits.
inline constexpr int64_t kDeferSinkhornTokens = 16384;

struct MhcPreParams {
  const float* x = nullptr;        // [tokens, n * dim] residual streams
  const float* raw_mix = nullptr;  // [tokens, mix_rows] fn . vec(X)
  const float* base = nullptr;     // [mix_rows]
  const float* scale = nullptr;    // [3] (head: [1])
  float* u = nullptr;              // [tokens, dim]
  float* coeffs = nullptr;         // [tokens, 2n + n*n]: pre, post, comb (not written for head)
  int64_t tokens = 0;
  int n = 4;
  int dim = 0;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
  bool head = false;
  bool round_bf16 = false;
};
Status LaunchMhcPre(const MhcPreParams& p, cudaStream_t stream);

struct MhcPostParams {
  const float* x = nullptr;       // [tokens, n * dim]
  const float* y = nullptr;       // [tokens, dim] sub-layer output
  const float* coeffs = nullptr;  // [tokens, 2n + n*n] from LaunchMhcPre
  float* x_out = nullptr;         // [tokens, n * dim], must not alias x
  int64_t tokens = 0;
  int n = 4;
  int dim = 0;
  bool round_bf16 = false;
};
Status LaunchMhcPost(const MhcPostParams& p, cudaStream_t stream);

}  // namespace nw::cuda
