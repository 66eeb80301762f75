// Exact fp32 linear layers; see linear.h. A block computes a 32 x 64 tile of y with 256 threads.
// 4 lanes: LinearSplitLanesKernel (each thread one lane class of kR rows x kO outputs); 8 lanes:
// LinearKernel<8> (each thread 2 rows x 4 outputs and all 8 partial sums, in registers).
#include <algorithm>
#include <string>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_tile.cuh"

namespace nw::cuda {
namespace detail {
Status LaunchLinearMma(const LinearParams& p, cudaStream_t stream);  // linear_mma.cu
}  // namespace detail
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

  detail::LinearTile<float> tile;
  if (!detail::SetUpLinearTile<kTm>(p, p.w, blockIdx.x, xrow, &tile)) return;
  const float* x = tile.x;
  const float* w = tile.w;
  float* y = tile.y;
  const int64_t row0 = tile.row0;

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

// The 4-lane kernel with the lanes spread over threads: thread (row group rg, output group og,
// lane class l) owns kR rows x kO outputs and accumulates only the k = l (mod 4) products, so a
// thread holds kR x kO partial sums instead of 4 times that and reads its rows and weights of a
// product step from shared memory as 8- or 16-byte loads. A block is 8 row groups x 8 output
// groups x 4 lane classes (256 threads): a tile of 8 kR rows x 8 kO outputs (32 x 64, or 16 x 32
// when the large tile would leave the GPU's multiprocessors idle). The four lane classes of an
// output are adjacent threads; they combine as (s0 + s1) + (s2 + s3) by two shuffles (IEEE
// addition is commutative, so all four hold the same bits), and each writes a share of the rows.
template <int kN>
struct Vec;
template <>
struct Vec<2> {
  using T = float2;
  __device__ static void Load(const float* s, float* r) {
    const float2 v = *reinterpret_cast<const float2*>(s);
    r[0] = v.x;
    r[1] = v.y;
  }
};
template <>
struct Vec<4> {
  using T = float4;
  __device__ static void Load(const float* s, float* r) {
    const float4 v = *reinterpret_cast<const float4*>(s);
    r[0] = v.x;
    r[1] = v.y;
    r[2] = v.z;
    r[3] = v.w;
  }
};
template <int kN>
__device__ __forceinline__ void LoadSmem(const float* s, float* r) {
  if constexpr (kN <= 4) {
    Vec<kN>::Load(s, r);
  } else {
    Vec<4>::Load(s, r);
    Vec<4>::Load(s + 4, r + 4);
  }
}

template <int kR, int kO>
__global__ void __launch_bounds__(kThreads) LinearSplitLanesKernel(LinearParams p) {
  constexpr int kRows = 8 * kR, kOuts = 8 * kO;
  constexpr int kXs = kRows + 2 * kR;  // floats per k row of xs (spreads the banks over l, rg)
  constexpr int kWs = kOuts + 8;       // floats per k row of ws
  __shared__ __align__(16) float xs[kTk][kXs];
  __shared__ __align__(16) float ws[kTk][kWs];
  __shared__ int32_t xrow[kRows];
  const int tid = threadIdx.x;
  const int l = tid & 3;          // lane class
  const int rg = (tid >> 2) & 7;  // rows rg*kR ..
  const int og = tid >> 5;        // outputs og*kO .. (one group per warp)
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kOuts;

  detail::LinearTile<float> tile;
  if (!detail::SetUpLinearTile<kRows>(p, p.w, blockIdx.x, xrow, &tile)) return;
  const float* x = tile.x;
  const float* w = tile.w;
  float* y = tile.y;
  const int64_t row0 = tile.row0;

  float acc[kR][kO];
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kO; ++j) acc[i][j] = 0.0f;

  const int64_t main_end = p.in - p.in % 4;
  for (int64_t k0 = 0; k0 < main_end; k0 += kTk) {
    // Stage x and w transposed: xs[k][row], ws[k][out]; zeros past main_end and the edges.
    for (int idx = tid; idx < kRows * kTk; idx += kThreads) {
      const int r = idx / kTk, k = idx % kTk;
      const int32_t xr = xrow[r];
      const int64_t kk = k0 + k;
      xs[k][r] = (xr >= 0 && kk < main_end) ? x[static_cast<int64_t>(xr) * p.x_stride + kk] : 0.0f;
    }
    for (int idx = tid; idx < kOuts * kTk; idx += kThreads) {
      const int o = idx / kTk, k = idx % kTk;
      const int64_t oo = o0 + o, kk = k0 + k;
      ws[k][o] = (oo < p.out && kk < main_end) ? w[oo * p.in + kk] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int step = 0; step < kTk / 4; ++step) {
      const int k = step * 4 + l;
      float xr[kR], wr[kO];
      LoadSmem<kR>(&xs[k][rg * kR], xr);
      LoadSmem<kO>(&ws[k][og * kO], wr);
#pragma unroll
      for (int i = 0; i < kR; ++i)
#pragma unroll
        for (int j = 0; j < kO; ++j)
          acc[i][j] = detail::AddRn(acc[i][j], detail::MulRn(xr[i], wr[j]));
    }
    __syncthreads();
  }

  // The tail (in % 4 values) goes into lane 0 in order, as on the CPU.
  if (l == 0 && main_end < p.in) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int32_t xr = xrow[rg * kR + i];
      if (xr < 0) continue;
#pragma unroll
      for (int j = 0; j < kO; ++j) {
        const int64_t o = o0 + og * kO + j;
        if (o >= p.out) continue;
        for (int64_t k = main_end; k < p.in; ++k) {
          acc[i][j] = detail::AddRn(
              acc[i][j],
              detail::MulRn(x[static_cast<int64_t>(xr) * p.x_stride + k], w[o * p.in + k]));
        }
      }
    }
  }
  // (s0 + s1) + (s2 + s3) across the four lane classes.
#pragma unroll
  for (int i = 0; i < kR; ++i)
#pragma unroll
    for (int j = 0; j < kO; ++j) {
      const float pair = detail::AddRn(acc[i][j], __shfl_xor_sync(0xFFFFFFFFu, acc[i][j], 1));
      acc[i][j] = detail::AddRn(pair, __shfl_xor_sync(0xFFFFFFFFu, pair, 2));
    }
    // Lane class l writes the thread's (row i, output j) with (i * kO + j) % 4 == l.
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const int r = rg * kR + i;
    if (xrow[r] < 0) continue;
#pragma unroll
    for (int j = 0; j < kO; ++j) {
      const int64_t o = o0 + og * kO + j;
      if ((i * kO + j) % 4 == l && o < p.out) y[(row0 + r) * p.y_stride + o] = acc[i][j];
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
  if (p.x == nullptr || (p.w == nullptr && p.w_bf16 == nullptr) || p.y == nullptr) {
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
  if (p.w_bf16 != nullptr) return detail::LaunchLinearMma(p, stream);
  if (p.round_bf16) {
    return Status::InvalidArgument("Linear: round_bf16 is a tensor-core (w_bf16) option");
  }
  const dim3 grid(static_cast<unsigned>(gathered ? p.max_tiles : (p.rows + kTm - 1) / kTm),
                  static_cast<unsigned>((p.out + kTn - 1) / kTn), static_cast<unsigned>(p.batches));
  if (p.lanes == 4) {
    // The 32 x 64 tile unless it would give fewer than two blocks per multiprocessor.
    const int64_t large_blocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    if (large_blocks >= 2LL * MultiprocessorCount()) {
      LinearSplitLanesKernel<4, 8><<<grid, kThreads, 0, stream>>>(p);
    } else {
      const dim3 small(static_cast<unsigned>(gathered ? p.max_tiles : (p.rows + 15) / 16),
                       static_cast<unsigned>((p.out + 31) / 32), static_cast<unsigned>(p.batches));
      if (gathered) {  // the gathered tiles hold up to 32 rows: keep their rows, narrow outputs
        LinearSplitLanesKernel<4, 4><<<small, kThreads, 0, stream>>>(p);
      } else {
        LinearSplitLanesKernel<2, 4><<<small, kThreads, 0, stream>>>(p);
      }
    }
  } else {
    LinearKernel<8><<<grid, kThreads, 0, stream>>>(p);
  }
  return NW_CUDA_LAUNCH_STATUS("LinearKernel");
}

}  // namespace nw::cuda
