// mHC on the GPU; see mhc.h. Pre: one block per token (the Sinkhorn on thread 0, in shared
// memory); post: one thread per output value.
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mhc.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ExpF(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}
__device__ __forceinline__ float SigmoidF(float x) { return 1.0f / detail::AddRn(1.0f, ExpF(-x)); }

__global__ void __launch_bounds__(kThreads) MhcPreKernel(MhcPreParams p) {
  __shared__ double red[kThreads / 32];
  __shared__ float s_pre[kMaxHcMult];
  __shared__ float s_comb[kMaxHcMult * kMaxHcMult];
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim;
  const int mix_rows = p.head ? n : (2 + n) * n;
  for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const float* x = p.x + t * nd;
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < nd; i += kThreads) {
      const double v = x[i];
      ss += v * v;
    }
    ss = detail::BlockSum(ss, red);
    if (threadIdx.x == 0) {
      const float mean_sq = static_cast<float>(ss / static_cast<double>(nd));
      const float rs = 1.0f / sqrtf(detail::AddRn(mean_sq, p.norm_eps));
      const float* raw = p.raw_mix + t * mix_rows;
      for (int j = 0; j < n; ++j) {
        const float m = detail::MulRn(raw[j], rs);
        s_pre[j] = detail::AddRn(SigmoidF(detail::AddRn(detail::MulRn(m, p.scale[0]), p.base[j])),
                                 p.hc_eps);
      }
      if (!p.head) {
        float* co = p.coeffs + t * (2 * n + n * n);
        for (int j = 0; j < n; ++j) {
          co[j] = s_pre[j];
          const float m = detail::MulRn(raw[n + j], rs);
          co[n + j] = detail::MulRn(
              2.0f, SigmoidF(detail::AddRn(detail::MulRn(m, p.scale[1]), p.base[n + j])));
        }
        float* c = s_comb;
        for (int k = 0; k < n * n; ++k) {
          const float m = detail::MulRn(raw[2 * n + k], rs);
          c[k] = detail::AddRn(detail::MulRn(m, p.scale[2]), p.base[2 * n + k]);
        }
        // Row softmax + eps, one column normalisation, then (iters - 1) x {rows, columns}.
        for (int j = 0; j < n; ++j) {
          float* r = c + j * n;
          float mx = r[0];
          for (int k = 1; k < n; ++k) mx = fmaxf(mx, r[k]);
          float sum = 0.0f;
          for (int k = 0; k < n; ++k) {
            r[k] = ExpF(detail::SubRn(r[k], mx));
            sum = detail::AddRn(sum, r[k]);
          }
          for (int k = 0; k < n; ++k) r[k] = detail::AddRn(r[k] / sum, p.hc_eps);
        }
        auto columns = [&]() {
          for (int k = 0; k < n; ++k) {
            float sum = 0.0f;
            for (int j = 0; j < n; ++j) sum = detail::AddRn(sum, c[j * n + k]);
            const float den = detail::AddRn(sum, p.hc_eps);
            for (int j = 0; j < n; ++j) c[j * n + k] = c[j * n + k] / den;
          }
        };
        auto rows = [&]() {
          for (int j = 0; j < n; ++j) {
            float sum = 0.0f;
            for (int k = 0; k < n; ++k) sum = detail::AddRn(sum, c[j * n + k]);
            const float den = detail::AddRn(sum, p.hc_eps);
            for (int k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / den;
          }
        };
        columns();
        for (int it = 1; it < p.sinkhorn_iters; ++it) {
          rows();
          columns();
        }
        for (int k = 0; k < n * n; ++k) co[2 * n + k] = c[k];
      }
    }
    __syncthreads();
    float* u = p.u + t * p.dim;
    for (int d = threadIdx.x; d < p.dim; d += kThreads) {
      float s = 0.0f;
      for (int i = 0; i < n; ++i)
        s = detail::AddRn(s, detail::MulRn(s_pre[i], x[static_cast<int64_t>(i) * p.dim + d]));
      u[d] = s;
    }
    __syncthreads();  // s_pre is rewritten by the next token
  }
}

__global__ void __launch_bounds__(kThreads) MhcPostKernel(MhcPostParams p) {
  const int n = p.n;
  const int64_t nd = static_cast<int64_t>(n) * p.dim;
  const int64_t total = p.tokens * nd;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = idx / nd;
    const int j = static_cast<int>((idx % nd) / p.dim);
    const int64_t d = idx % p.dim;
    const float* co = p.coeffs + t * (2 * n + n * n);
    const float* x = p.x + t * nd;
    float residual = 0.0f;
    for (int i = 0; i < n; ++i)
      residual = detail::AddRn(residual, detail::MulRn(co[2 * n + i * n + j], x[i * p.dim + d]));
    p.x_out[idx] = detail::AddRn(detail::MulRn(co[n + j], p.y[t * p.dim + d]), residual);
  }
}

unsigned GridFor(int64_t work, int threads) {
  const int64_t blocks = (work + threads - 1) / threads;
  const int64_t cap = 32LL * MultiprocessorCount();
  return static_cast<unsigned>(blocks < cap ? (blocks < 1 ? 1 : blocks) : cap);
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
  const unsigned blocks = static_cast<unsigned>(p.tokens < 65535 * 4 ? p.tokens : 65535 * 4);
  MhcPreKernel<<<blocks, kThreads, 0, stream>>>(p);
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
  MhcPostKernel<<<GridFor(p.tokens * p.n * p.dim, kThreads), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("MhcPostKernel");
}

}  // namespace nw::cuda
