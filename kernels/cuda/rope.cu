// RoPE on the GPU; see rope.h. One thread per (row, pair) at a time.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/rope.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;

// Rotates the pair (row r, pair j): the arithmetic both kernels share.
__device__ __forceinline__ void RotatePair(const RopeParams& p, int64_t r, int j, int32_t pos) {
  if (pos < 0 || pos >= p.n_positions) return;
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

// Any pair count: one (row, pair) an iteration, found by 64-bit division.
__global__ void __launch_bounds__(kThreads) RopeKernel(RopeParams p) {
  const int64_t total = p.rows * p.pairs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / p.pairs;
    RotatePair(p, r, static_cast<int>(i % p.pairs), p.positions[r / p.rows_per_position]);
  }
}

// Pair counts that divide the block (powers of two up to 256; the models' rope dims of 64 give
// 32): a thread keeps one pair j and steps over rows by a fixed stride, tracking its row's position
// index as quotient and remainder, so the loop has no division. The generic kernel's two 64-bit
// divisions a pair were most of its instructions (Nsight Compute, an 8K job's query heads: 13.3M
// instructions at 3.1 a cycle); without them the launches took as long (session 19: 0.223 ->
// 0.218 ms a job), the loads bound them. The same pairs and arithmetic.
__global__ void __launch_bounds__(kThreads) RopeRowsKernel(RopeParams p) {
  const int rows_per_block = kThreads / p.pairs;
  const int j = static_cast<int>(threadIdx.x) % p.pairs;
  // rows < 2^31 (LaunchRope): 32-bit quotients.
  const int step = static_cast<int>(gridDim.x) * rows_per_block;
  int r = static_cast<int>(blockIdx.x) * rows_per_block + static_cast<int>(threadIdx.x) / p.pairs;
  const int rows = static_cast<int>(p.rows), rpp = p.rows_per_position;
  if (r >= rows) return;
  const int dq = step / rpp, dm = step % rpp;
  int q = r / rpp, m = r % rpp;
  for (; r < rows; r += step) {
    RotatePair(p, r, j, p.positions[q]);
    q += dq;
    m += dm;
    if (m >= rpp) {
      m -= rpp;
      ++q;
    }
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
  if (kThreads % p.pairs == 0 &&
      p.rows <= INT32_MAX - int64_t{64} * kThreads * MultiprocessorCount()) {
    RopeRowsKernel<<<GridFor(p.rows * p.pairs), kThreads, 0, stream>>>(p);
    return NW_CUDA_LAUNCH_STATUS("RopeRowsKernel");
  }
  RopeKernel<<<GridFor(p.rows * p.pairs), kThreads, 0, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("RopeKernel");
}

}  // namespace nw::cuda
