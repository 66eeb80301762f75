// Exact fp32 linear layers; see linear.h. A block computes a 32 x 64 tile of y with 256 threads,
// each owning 2 rows x 4 outputs and `lanes` partial sums per output, in registers.
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear.h"

namespace nw::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTm = kLinearTileRows;  // rows per tile
constexpr int kTn = 64;               // outputs per tile
constexpr int kTk = 32;               // k per shared-memory tile (a multiple of 8)
constexpr int kRowsPerThread = 2;
constexpr int kOutsPerThread = 4;

template <int kLanes>
__device__ __forceinline__ float Combine(const float* s) {
  if constexpr (kLanes == 4) {
    return detail::AddRn(detail::AddRn(s[0], s[1]), detail::AddRn(s[2], s[3]));
  } else {
    const float a = detail::AddRn(detail::AddRn(s[0], s[1]), detail::AddRn(s[2], s[3]));
    const float b = detail::AddRn(detail::AddRn(s[4], s[5]), detail::AddRn(s[6], s[7]));
    return detail::AddRn(a, b);
  }
}

template <int kLanes>
__global__ void __launch_bounds__(kThreads) LinearKernel(LinearParams p) {
  __shared__ float xs[kTm][kTk + 1];
  __shared__ float ws[kTn][kTk + 1];
  __shared__ int32_t xrow[kTm];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;  // outputs tx*4.., rows ty*2..
  // Grid: x = row tiles (up to 2^31 - 1: a million-token chunk's gathered expert tiles), y =
  // output tiles, z = batches.
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kTn;

  const float* x = p.x;
  const float* w = p.w;
  float* y = p.y;
  int64_t row0 = 0, nrows = 0;
  if (p.row_index != nullptr) {
    const int64_t tile = blockIdx.x;
    if (tile >= p.max_tiles) return;
    const int32_t e = p.tile_expert[tile];
    if (e < 0) return;
    w += static_cast<int64_t>(e) * p.out * p.in;
    row0 = p.tile_row0[tile];
    nrows = p.tile_rows[tile];
  } else {
    const int64_t b = blockIdx.z;
    x += b * p.x_batch_stride;
    w += b * p.w_batch_stride;
    y += b * p.y_batch_stride;
    row0 = static_cast<int64_t>(blockIdx.x) * kTm;
    nrows = std::min<int64_t>(kTm, p.rows - row0);
  }
  if (nrows <= 0) return;
  if (tid < kTm) {
    const int64_t r = row0 + tid;
    xrow[tid] =
        tid < nrows ? (p.row_index != nullptr ? p.row_index[r] : static_cast<int32_t>(r)) : -1;
  }
  __syncthreads();

  float acc[kRowsPerThread][kOutsPerThread][kLanes];
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kOutsPerThread; ++j)
#pragma unroll
      for (int l = 0; l < kLanes; ++l) acc[i][j][l] = 0.0f;

  const int64_t main_end = p.in - p.in % kLanes;
  for (int64_t k0 = 0; k0 < main_end; k0 += kTk) {
    // Stage the x and w tiles (zeros past main_end and past the matrix edges).
    for (int idx = tid; idx < kTm * kTk; idx += kThreads) {
      const int r = idx / kTk, k = idx % kTk;
      const int32_t xr = xrow[r];
      const int64_t kk = k0 + k;
      xs[r][k] = (xr >= 0 && kk < main_end) ? x[static_cast<int64_t>(xr) * p.x_stride + kk] : 0.0f;
    }
    for (int idx = tid; idx < kTn * kTk; idx += kThreads) {
      const int o = idx / kTk, k = idx % kTk;
      const int64_t oo = o0 + o, kk = k0 + k;
      ws[o][k] = (oo < p.out && kk < main_end) ? w[oo * p.in + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTk; ++k) {
      float xv[kRowsPerThread], wv[kOutsPerThread];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) xv[i] = xs[ty * kRowsPerThread + i][k];
#pragma unroll
      for (int j = 0; j < kOutsPerThread; ++j) wv[j] = ws[tx * kOutsPerThread + j][k];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i)
#pragma unroll
        for (int j = 0; j < kOutsPerThread; ++j)
          acc[i][j][k % kLanes] = detail::AddRn(acc[i][j][k % kLanes], detail::MulRn(xv[i], wv[j]));
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = ty * kRowsPerThread + i;
    const int32_t xr = xrow[r];
    if (xr < 0) continue;
#pragma unroll
    for (int j = 0; j < kOutsPerThread; ++j) {
      const int64_t o = o0 + tx * kOutsPerThread + j;
      if (o >= p.out) continue;
      // The tail (in % lanes values) goes into lane 0 in order, as on the CPU.
      for (int64_t k = main_end; k < p.in; ++k) {
        acc[i][j][0] = detail::AddRn(
            acc[i][j][0],
            detail::MulRn(x[static_cast<int64_t>(xr) * p.x_stride + k], w[o * p.in + k]));
      }
      y[(row0 + r) * p.y_stride + o] = Combine<kLanes>(acc[i][j]);
    }
  }
}

}  // namespace

Status LaunchLinear(const LinearParams& params, cudaStream_t stream) {
  LinearParams p = params;
  if (p.rows < 0 || p.in <= 0 || p.out <= 0) {
    return Status::InvalidArgument("Linear: rows >= 0, in > 0 and out > 0 required");
  }
  if (p.lanes != 4 && p.lanes != 8) return Status::InvalidArgument("Linear: lanes must be 4 or 8");
  if (p.batches < 1) return Status::InvalidArgument("Linear: batches must be >= 1");
  const bool gathered = p.row_index != nullptr;
  if (gathered && p.max_tiles == 0) return Status::Ok();
  if (!gathered && p.rows == 0) return Status::Ok();
  if (p.x == nullptr || p.w == nullptr || p.y == nullptr) {
    return Status::InvalidArgument("Linear: null pointer");
  }
  if (p.x_stride == 0) p.x_stride = p.in;
  if (p.y_stride == 0) p.y_stride = p.out;
  if (p.x_stride < p.in || p.y_stride < p.out) {
    return Status::InvalidArgument("Linear: a stride is below the row width");
  }
  if (gathered) {
    if (p.tile_expert == nullptr || p.tile_row0 == nullptr || p.tile_rows == nullptr ||
        p.batches != 1) {
      return Status::InvalidArgument("Linear: a gathered product needs its tile list, batches 1");
    }
    if (p.max_tiles > 0x7FFFFFFF) return Status::InvalidArgument("Linear: too many gathered tiles");
  } else if ((p.rows + kTm - 1) / kTm > 0x7FFFFFFF || p.batches > 65535) {
    return Status::InvalidArgument("Linear: too many rows or batches for one launch");
  }
  if ((p.out + kTn - 1) / kTn > 65535) {
    return Status::InvalidArgument("Linear: too many outputs for one launch");
  }
  const dim3 grid(static_cast<unsigned>(gathered ? p.max_tiles : (p.rows + kTm - 1) / kTm),
                  static_cast<unsigned>((p.out + kTn - 1) / kTn), static_cast<unsigned>(p.batches));
  if (p.lanes == 4) {
    LinearKernel<4><<<grid, kThreads, 0, stream>>>(p);
  } else {
    LinearKernel<8><<<grid, kThreads, 0, stream>>>(p);
  }
  return NW_CUDA_LAUNCH_STATUS("LinearKernel");
}

}  // namespace nw::cuda
