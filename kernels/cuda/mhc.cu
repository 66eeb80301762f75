// mHC on the GPU; see mhc.h. Pre: one warp per token (the Sinkhorn across its lanes, or, for
// chunks of many tokens, one thread per token in a second kernel: same bits); post: one thread per
// (token, value), or four values with vector loads, computing them in all n streams, so each
// input is read once.
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
constexpr int kSinkhornThreads = 128;

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

// The Sinkhorn of one token's n x n logits c (row-major, element i at c[i * stride]), serially:
// row softmax + eps, one column normalisation, then (iters - 1) x {rows, columns}.
__device__ __forceinline__ void SinkhornSerial(float* c, int stride, int n, int iters, float eps) {
  auto at = [&](int j, int k) -> float& { return c[(j * n + k) * stride]; };
  for (int j = 0; j < n; ++j) {
    float mx = at(j, 0);
    for (int k = 1; k < n; ++k) mx = fmaxf(mx, at(j, k));
    float sum = 0.0f;
    for (int k = 0; k < n; ++k) {
      at(j, k) = ExpF(detail::SubRn(at(j, k), mx));
      sum = detail::AddRn(sum, at(j, k));
    }
    for (int k = 0; k < n; ++k) at(j, k) = detail::AddRn(at(j, k) / sum, eps);
  }
  auto columns = [&]() {
    for (int k = 0; k < n; ++k) {
      float sum = 0.0f;
      for (int j = 0; j < n; ++j) sum = detail::AddRn(sum, at(j, k));
      const float den = detail::AddRn(sum, eps);
      for (int j = 0; j < n; ++j) at(j, k) = at(j, k) / den;
    }
  };
  auto rows = [&]() {
    for (int j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int k = 0; k < n; ++k) sum = detail::AddRn(sum, at(j, k));
      const float den = detail::AddRn(sum, eps);
      for (int k = 0; k < n; ++k) at(j, k) = at(j, k) / den;
    }
  };
  columns();
  for (int it = 1; it < iters; ++it) {
    rows();
    columns();
  }
}

// The Sinkhorn of many tokens, one thread each (LaunchMhcPre's deferred form): the logits
// MhcPreKernel left in coeffs[t, 2n ..) become the comb matrix. kN > 0: n = kN, the matrix in
// registers and every loop unrolled, so the n rows' (or columns') sums run side by side and a
// round's dependent chain is one sum and one division long; kN = 0: any n, the matrix in shared
// memory laid out element-major (thread t's element i at i * blockDim + t: no bank conflicts).
// The serial order of every sum either way, so the bits of the in-warp form.
template <int kN>
__global__ void __launch_bounds__(kSinkhornThreads) MhcSinkhornKernel(MhcPreParams p) {
  extern __shared__ float comb[];
  const int n = kN > 0 ? kN : p.n, nn = n * n, cw = 2 * n + nn;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kSinkhornThreads + threadIdx.x;
  if (t >= p.tokens) return;
  float* co = p.coeffs + t * cw + 2 * n;
  if constexpr (kN > 0) {
    float c[kN * kN];
#pragma unroll
    for (int i = 0; i < kN * kN; ++i) c[i] = co[i];
    SinkhornSerial(c, 1, kN, p.sinkhorn_iters, p.hc_eps);
#pragma unroll
    for (int i = 0; i < kN * kN; ++i) co[i] = c[i];
  } else {
    float* c = comb + threadIdx.x;
    for (int i = 0; i < nn; ++i) c[i * kSinkhornThreads] = co[i];
    SinkhornSerial(c, kSinkhornThreads, n, p.sinkhorn_iters, p.hc_eps);
    for (int i = 0; i < nn; ++i) co[i] = c[i * kSinkhornThreads];
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
// defer_sinkhorn: the comb logits are left in coeffs for MhcSinkhornKernel.
// kN > 0: n = kN and dim = 32 kM: lane l's values x[l + 32 k], k < kN kM, stay in registers from
// the sum of squares to the pre-mix (which needs value (i, l + 32 m) = k = i kM + m), so the
// pre-mix reads nothing again and its loads do not queue behind its stores. The same values in
// the same order, so the same bits. kN = 0: any n and dim, x read twice.
template <int kN, int kM>
__global__ void __launch_bounds__(kThreads) MhcPreKernel(MhcPreParams p, bool defer_sinkhorn) {
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
    float xv[kN > 0 ? kN * kM : 1];
    if constexpr (kN > 0) {
#pragma unroll
      for (int k = 0; k < kN * kM; ++k) xv[k] = x[lane + 32 * k];
#pragma unroll
      for (int k = 0; k < kN * kM; ++k) {
        const double v = xv[k];
        ss += v * v;
      }
    } else {
      for (int64_t i = lane; i < nd; i += 32) {
        const double v = x[i];
        ss += v * v;
      }
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
      if (defer_sinkhorn) {
        for (int i = lane; i < nn; i += 32) co[2 * n + i] = logit(i);
      } else if (nn <= 32) {
        const float c =
            SinkhornWarp(lane < nn ? logit(lane) : 0.0f, lane, n, p.sinkhorn_iters, p.hc_eps);
        if (lane < nn) co[2 * n + lane] = c;
      } else if (lane == 0) {
        float* c = s_comb_all[warp];
        for (int i = 0; i < nn; ++i) c[i] = logit(i);
        SinkhornSerial(c, 1, n, p.sinkhorn_iters, p.hc_eps);
        for (int i = 0; i < nn; ++i) co[2 * n + i] = c[i];
      }
    }
    __syncwarp();
    float* u = p.u + t * p.dim;
    if constexpr (kN > 0) {
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < kN; ++i) s = detail::AddRn(s, detail::MulRn(s_pre[i], xv[i * kM + m]));
        u[lane + 32 * m] = p.round_bf16 ? quant::RoundBf16(s) : s;
      }
    } else {
      for (int d = lane; d < p.dim; d += 32) {
        float s = 0.0f;
        for (int i = 0; i < n; ++i)
          s = detail::AddRn(s, detail::MulRn(s_pre[i], x[static_cast<int64_t>(i) * p.dim + d]));
        u[d] = p.round_bf16 ? quant::RoundBf16(s) : s;
      }
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

// MhcPostKernel four values at a time (dim % 4 == 0, 16-byte aligned rows): float4 loads and
// stores, the coefficients read once for four values; each value's arithmetic as there.
__global__ void __launch_bounds__(kThreads) MhcPostVec4Kernel(MhcPostParams p) {
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim, quads = p.dim / 4;
  const int64_t total = p.tokens * quads;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = idx / quads;
    const int64_t d = (idx % quads) * 4;
    const float* co = p.coeffs + t * (2 * n + n * n);
    const float* x = p.x + t * nd + d;
    float4 xi[kMaxHcMult];
#pragma unroll
    for (int i = 0; i < kMaxHcMult; ++i) {
      xi[i] = i < n ? *reinterpret_cast<const float4*>(x + i * p.dim)
                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const float4 yv = *reinterpret_cast<const float4*>(p.y + t * p.dim + d);
    float* out = p.x_out + t * nd + d;
    for (int j = 0; j < n; ++j) {
      float4 residual = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int i = 0; i < kMaxHcMult; ++i) {
        if (i < n) {
          const float c = co[2 * n + i * n + j];
          residual.x = detail::AddRn(residual.x, detail::MulRn(c, xi[i].x));
          residual.y = detail::AddRn(residual.y, detail::MulRn(c, xi[i].y));
          residual.z = detail::AddRn(residual.z, detail::MulRn(c, xi[i].z));
          residual.w = detail::AddRn(residual.w, detail::MulRn(c, xi[i].w));
        }
      }
      const float post = co[n + j];
      float4 v;
      v.x = detail::AddRn(detail::MulRn(post, yv.x), residual.x);
      v.y = detail::AddRn(detail::MulRn(post, yv.y), residual.y);
      v.z = detail::AddRn(detail::MulRn(post, yv.z), residual.z);
      v.w = detail::AddRn(detail::MulRn(post, yv.w), residual.w);
      if (p.round_bf16) {
        v.x = quant::RoundBf16(v.x);
        v.y = quant::RoundBf16(v.y);
        v.z = quant::RoundBf16(v.z);
        v.w = quant::RoundBf16(v.w);
      }
      *reinterpret_cast<float4*>(out + j * p.dim) = v;
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
  const bool defer = !p.head && p.tokens >= kDeferSinkhornTokens;
  if (p.n == 4 && p.dim == 256) {  // tiny-v4
    MhcPreKernel<4, 8><<<GridFor(p.tokens * 32, kThreads), kThreads, 0, stream>>>(p, defer);
  } else {
    MhcPreKernel<0, 0><<<GridFor(p.tokens * 32, kThreads), kThreads, 0, stream>>>(p, defer);
  }
  NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("MhcPreKernel"));
  if (!defer) return Status::Ok();
  const unsigned blocks =
      static_cast<unsigned>((p.tokens + kSinkhornThreads - 1) / kSinkhornThreads);
  if (p.n == 4) {  // tiny-v4 and V4
    MhcSinkhornKernel<4><<<blocks, kSinkhornThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("MhcSinkhornKernel");
  }
  const size_t smem = sizeof(float) * p.n * p.n * kSinkhornThreads;  // <= 32 KB (n <= 8)
  MhcSinkhornKernel<0><<<blocks, kSinkhornThreads, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MhcSinkhornKernel");
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
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (p.dim % 4 == 0 && aligned(p.x) && aligned(p.y) && aligned(p.x_out)) {
    MhcPostVec4Kernel<<<GridFor(p.tokens * (p.dim / 4), kThreads), kThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("MhcPostVec4Kernel");
  }
  MhcPostKernel<<<GridFor(p.tokens * p.dim, kThreads), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MhcPostKernel");
}

}  // namespace nw::cuda
