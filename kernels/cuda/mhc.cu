// mHC on the GPU; see mhc.h. Pre: one warp per token (the Sinkhorn across its lanes); post: one
// thread per (token, value) computing that value of all n streams, so each input is read once.
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mhc.h"
#include "kernels/quant/scalar.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ExpF(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}
__device__ __forceinline__ float SigmoidF(float x) { return 1.0f / detail::AddRn(1.0f, ExpF(-x)); }

constexpr int kPreWarps = kThreads / 32;

unsigned GridFor(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = 32LL * MultiprocessorCount();
  return static_cast<unsigned>(blocks < cap ? (blocks < 1 ? 1 : blocks) : cap);
}

// Sum of x over lanes src0, src0 + stride, ... (n of them) in that order, on every lane.
__device__ __forceinline__ float OrderedSum(float x, int src0, int stride, int n) {
  float s = 0.0f;
  for (int i = 0; i < n; ++i) s = detail::AddRn(s, __shfl_sync(0xFFFFFFFFu, x, src0 + i * stride));
  return s;
}

// The Sinkhorn of one token's n x n logits c (row-major), serially: row softmax + eps, one
// column normalisation, then (iters - 1) x {rows, columns}.
__device__ void SinkhornSerial(float* c, int n, int iters, float eps) {
  for (int j = 0; j < n; ++j) {
    float* r = c + j * n;
    float mx = r[0];
    for (int k = 1; k < n; ++k) mx = fmaxf(mx, r[k]);
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) {
      r[k] = ExpF(detail::SubRn(r[k], mx));
      sum = detail::AddRn(sum, r[k]);
    }
    for (int k = 0; k < n; ++k) r[k] = detail::AddRn(r[k] / sum, eps);
  }
  auto columns = [&]() {
    for (int k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum = detail::AddRn(sum, c[j * n + k]);
      const float den = detail::AddRn(sum, eps);
      for (int j = 0; j < n; ++j) c[j * n + k] = c[j * n + k] / den;
    }
  };
  auto rows = [&]() {
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < n; ++k) sum = detail::AddRn(sum, c[j * n + k]);
      const float den = detail::AddRn(sum, eps);
      for (int k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / den;
    }
  };
  columns();
  for (int it = 1; it < iters; ++it) {
    rows();
    columns();
  }
}

// The same Sinkhorn with element (j, k) on lane j * n + k (n * n <= 32): every sum is gathered
// in the serial order, so the values are the serial version's bits.
__device__ float SinkhornWarp(float c, int lane, int n, int iters, float eps) {
  const int j = lane / n, k = lane % n;
  float mx = __shfl_sync(0xFFFFFFFFu, c, j * n);
  for (int kk = 1; kk < n; ++kk) mx = fmaxf(mx, __shfl_sync(0xFFFFFFFFu, c, j * n + kk));
  c = ExpF(detail::SubRn(c, mx));
  c = detail::AddRn(c / OrderedSum(c, j * n, 1, n), eps);
  auto columns = [&]() { c = c / detail::AddRn(OrderedSum(c, k, n, n), eps); };
  auto rows = [&]() { c = c / detail::AddRn(OrderedSum(c, j * n, 1, n), eps); };
  columns();
  for (int it = 1; it < iters; ++it) {
    rows();
    columns();
  }
  return c;
}

// One warp per token.
__global__ void __launch_bounds__(kThreads) MhcPreKernel(MhcPreParams p) {
  __shared__ float s_pre_all[kPreWarps][kMaxHcMult];
  __shared__ float s_comb_all[kPreWarps][kMaxHcMult * kMaxHcMult];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* s_pre = s_pre_all[warp];
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim;
  const int mix_rows = p.head ? n : (2 + n) * n;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kPreWarps + warp; t < p.tokens;
       t += static_cast<int64_t>(gridDim.x) * kPreWarps) {
    const float* x = p.x + t * nd;
    double ss = 0.0;
    for (int64_t i = lane; i < nd; i += 32) {
      const double v = x[i];
      ss += v * v;
    }
    for (int off = 16; off > 0; off /= 2) ss += __shfl_down_sync(0xFFFFFFFFu, ss, off);
    ss = __shfl_sync(0xFFFFFFFFu, ss, 0);
    const float mean_sq = static_cast<float>(ss / static_cast<double>(nd));
    const float rs = 1.0f / sqrtf(detail::AddRn(mean_sq, p.norm_eps));
    const float* raw = p.raw_mix + t * mix_rows;
    float* co = p.head ? nullptr : p.coeffs + t * (2 * n + n * n);
    if (lane < n) {
      const float m = detail::MulRn(raw[lane], rs);
      s_pre[lane] = detail::AddRn(
          SigmoidF(detail::AddRn(detail::MulRn(m, p.scale[0]), p.base[lane])), p.hc_eps);
      if (co != nullptr) {
        co[lane] = s_pre[lane];
        const float m2 = detail::MulRn(raw[n + lane], rs);
        co[n + lane] = detail::MulRn(
            2.0f, SigmoidF(detail::AddRn(detail::MulRn(m2, p.scale[1]), p.base[n + lane])));
      }
    }
    if (co != nullptr) {
      const int nn = n * n;
      auto logit = [&](int i) {
        const float m = detail::MulRn(raw[2 * n + i], rs);
        return detail::AddRn(detail::MulRn(m, p.scale[2]), p.base[2 * n + i]);
      };
      if (nn <= 32) {
        const float c =
            SinkhornWarp(lane < nn ? logit(lane) : 0.0f, lane, n, p.sinkhorn_iters, p.hc_eps);
        if (lane < nn) co[2 * n + lane] = c;
      } else if (lane == 0) {
        float* c = s_comb_all[warp];
        for (int i = 0; i < nn; ++i) c[i] = logit(i);
        SinkhornSerial(c, n, p.sinkhorn_iters, p.hc_eps);
        for (int i = 0; i < nn; ++i) co[2 * n + i] = c[i];
      }
    }
    __syncwarp();
    float* u = p.u + t * p.dim;
    for (int d = lane; d < p.dim; d += 32) {
      float s = 0.0f;
      for (int i = 0; i < n; ++i)
        s = detail::AddRn(s, detail::MulRn(s_pre[i], x[static_cast<int64_t>(i) * p.dim + d]));
      u[d] = p.round_bf16 ? quant::RoundBf16(s) : s;
    }
    __syncwarp();  // s_pre is rewritten by the warp's next token
  }
}

__global__ void __launch_bounds__(kThreads) MhcPostKernel(MhcPostParams p) {
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim;
  const int64_t total = p.tokens * p.dim;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = idx / p.dim;
    const int64_t d = idx % p.dim;
    const float* co = p.coeffs + t * (2 * n + n * n);
    const float* x = p.x + t * nd + d;
    float xi[kMaxHcMult];
#pragma unroll
    for (int i = 0; i < kMaxHcMult; ++i) xi[i] = i < n ? x[i * p.dim] : 0.0f;
    const float yv = p.y[idx];
    float* out = p.x_out + t * nd + d;
    for (int j = 0; j < n; ++j) {
      float residual = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxHcMult; ++i) {
        if (i < n) residual = detail::AddRn(residual, detail::MulRn(co[2 * n + i * n + j], xi[i]));
      }
      const float v = detail::AddRn(detail::MulRn(co[n + j], yv), residual);
      out[j * p.dim] = p.round_bf16 ? quant::RoundBf16(v) : v;
    }
  }
}

}  // namespace

Status LaunchMhcPre(const MhcPreParams& p, cudaStream_t stream) {
  if (p.n < 1 || p.n > kMaxHcMult || p.dim <= 0 || p.tokens < 0) {
    return Status::InvalidArgument("MhcPre: n must be in [1, " + std::to_string(kMaxHcMult) +
                                   "], dim > 0");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.x == nullptr || p.raw_mix == nullptr || p.base == nullptr || p.scale == nullptr ||
      p.u == nullptr || (!p.head && p.coeffs == nullptr)) {
    return Status::InvalidArgument("MhcPre: null pointer");
  }
  MhcPreKernel<<<GridFor(p.tokens * 32, kThreads), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MhcPreKernel");
}

Status LaunchMhcPost(const MhcPostParams& p, cudaStream_t stream) {
  if (p.n < 1 || p.n > kMaxHcMult || p.dim <= 0 || p.tokens < 0) {
    return Status::InvalidArgument("MhcPost: n must be in [1, 8], dim > 0");
  }
  if (p.tokens == 0) return Status::Ok();
  if (p.x == nullptr || p.y == nullptr || p.coeffs == nullptr || p.x_out == nullptr) {
    return Status::InvalidArgument("MhcPost: null pointer");
  }
  if (p.x == p.x_out) return Status::InvalidArgument("MhcPost: x_out must not alias x");
  MhcPostKernel<<<GridFor(p.tokens * p.dim, kThreads), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MhcPostKernel");
}

}  // namespace nw::cuda
