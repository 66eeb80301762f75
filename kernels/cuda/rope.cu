// RoPE on the GPU; see rope.h. One thread per (row, pair).
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rope.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) RopeKernel(RopeParams p) {
  const int64_t total = p.rows * p.pairs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / p.pairs;
    const int j = static_cast<int>(i % p.pairs);
    const int32_t pos = p.positions[r / p.rows_per_position];
    if (pos < 0 || pos >= p.n_positions) continue;
    float* v0 = p.x + r * p.x_stride + p.offset + (p.half_split ? j : 2 * j);
    float* v1 = p.half_split ? v0 + p.pairs : v0 + 1;
    const float a = *v0, b = *v1;
    const float c = p.cos[static_cast<int64_t>(pos) * p.pairs + j];
    const float sn = p.sin[static_cast<int64_t>(pos) * p.pairs + j];
    const float s = p.inverse ? -sn : sn;
    float x0 = detail::SubRn(detail::MulRn(a, c), detail::MulRn(b, s));
    float x1 = detail::AddRn(detail::MulRn(a, s), detail::MulRn(b, c));
    if (p.round_bf16) {
      x0 = quant::RoundBf16(x0);
      x1 = quant::RoundBf16(x1);
    }
    *v0 = x0;
    *v1 = x1;
  }
}

unsigned GridFor(int64_t total) {
  const int64_t blocks = (total + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 64LL * MultiprocessorCount()));
}

}  // namespace

Status LaunchRope(const RopeParams& params, cudaStream_t stream) {
  RopeParams p = params;
  if (p.rows < 0 || p.pairs < 0 || p.offset < 0 || p.rows_per_position <= 0 || p.n_positions < 0) {
    return Status::InvalidArgument("Rope: negative size or rows_per_position < 1");
  }
  if (p.rows == 0 || p.pairs == 0) return Status::Ok();
  if (p.x == nullptr || p.positions == nullptr || p.cos == nullptr || p.sin == nullptr) {
    return Status::InvalidArgument("Rope: null pointer");
  }
  const int64_t width = p.offset + 2 * static_cast<int64_t>(p.pairs);
  if (p.x_stride == 0) p.x_stride = width;
  if (p.x_stride < width) return Status::InvalidArgument("Rope: x_stride below offset + 2 * pairs");
  RopeKernel<<<GridFor(p.rows * p.pairs), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("RopeKernel");
}

}  // namespace nw::cuda
