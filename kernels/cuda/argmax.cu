// Argmax on the GPU; see argmax.h. One block per row.
#include <algorithm>

#include "kernels/cuda/argmax.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"

namespace nw::cuda {
namespace {

constexpr int kThreads = 512;

/// True when (va, a) ranks before (vb, b): numbers before NaN, larger first, then lower index.
__device__ __forceinline__ bool Before(float va, int64_t a, float vb, int64_t b) {
  const bool na = va != va, nb = vb != vb;
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return a < b;
}

__global__ void __launch_bounds__(kThreads) ArgmaxKernel(ArgmaxParams p) {
  __shared__ float s_val[kThreads / 32];
  __shared__ int64_t s_idx[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const float* x = p.x + r * p.x_stride;
    float best = quant::QuietNan();
    int64_t best_i = p.n;  // past the end: ranks after any real NaN entry
    for (int64_t i = threadIdx.x; i < p.n; i += kThreads) {
      const float v = x[i];
      if (Before(v, i, best, best_i)) {
        best = v;
        best_i = i;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(detail::kFullMask, best, o);
      const int64_t i = __shfl_xor_sync(detail::kFullMask, best_i, o);
      if (Before(v, i, best, best_i)) {
        best = v;
        best_i = i;
      }
    }
    __syncthreads();  // the previous row's results have been read
    if (lane == 0) {
      s_val[warp] = best;
      s_idx[warp] = best_i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w) {
        if (Before(s_val[w], s_idx[w], best, best_i)) {
          best = s_val[w];
          best_i = s_idx[w];
        }
      }
      p.index[r] = static_cast<int32_t>(best_i);
      if (p.value != nullptr) p.value[r] = best;
    }
  }
}

}  // namespace

Status LaunchArgmax(const ArgmaxParams& params, cudaStream_t stream) {
  ArgmaxParams p = params;
  if (p.rows < 0) return Status::InvalidArgument("Argmax: negative rows");
  if (p.n < 1 || p.n >= (int64_t{1} << 31)) {
    return Status::InvalidArgument("Argmax: n must be in [1, 2^31)");
  }
  if (p.rows == 0) return Status::Ok();
  if (p.x == nullptr || p.index == nullptr) return Status::InvalidArgument("Argmax: null pointer");
  if (p.x_stride == 0) p.x_stride = p.n;
  if (p.x_stride < p.n) return Status::InvalidArgument("Argmax: x_stride below n");
  const unsigned blocks =
      static_cast<unsigned>(std::clamp<int64_t>(p.rows, 1, 16LL * MultiprocessorCount()));
  ArgmaxKernel<<<blocks, kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("ArgmaxKernel");
}

}  // namespace nw::cuda
