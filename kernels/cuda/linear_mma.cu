// Linear layers on tensor cores (see linear.h, LinearParams::w_bf16): y = x W^T with x rounded to
// bf16 as it is staged (or split into three bf16 pieces that sum to it exactly), the bf16 copy of
// W (one piece, or three that sum to W exactly), mma.sync m16n8k16 and fp32 accumulation. The three
// shapes of the exact kernel (dense, batched, gathered) with the same grid: a block computes a
// 32-row x 64-output tile with four warps, warp w rows 16 (w % 2) .. +15 and outputs
// 32 (w / 2) .. +31 (four n8 tiles), over 64- or 128-wide k tiles staged in shared memory as bf16.
// Every product of two bf16 values is exact in fp32; the summation order is the tensor cores',
// fixed for a shape, so results are deterministic run to run.
// Split k: a dense product whose tiles would leave most multiprocessors idle (few rows, or few
// outputs over a long k: the mHC mixing linear, 24 outputs over 1,024 inputs) splits k into up to
// kMaxSplits ranges, one grid z each, writing fp32 partial tiles; a second kernel adds them in
// range order (deterministic) and applies the output rounding.
#include <algorithm>

#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/linear_tile.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kTm = kLinearTileRows;  // 32 rows per tile (the gathered tiles' height)
constexpr int kTn = 64;               // outputs per tile
// k per shared-memory tile: 128 with one piece on each side (half the staging rounds of a
// 256-input linear, twice the loads in flight), 64 with three pieces on one side (shared memory).
template <int kXParts, int kWParts>
constexpr int TileK() {
  return kXParts == 1 && kWParts == 1 ? 128 : 64;
}

__device__ __forceinline__ uint16_t Bf16Bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  uint16_t u;
  memcpy(&u, &b, sizeof(u));
  return u;
}

// x -> up to three bf16 pieces: hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid); each
// difference is exact in fp32 and the pieces sum to x exactly (24 significand bits in three 8-bit
// pieces).
template <int kParts>
__device__ __forceinline__ void SplitBf16(float v, uint16_t (&out)[kParts]) {
  float r = v;
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    out[i] = Bf16Bits(r);
    uint32_t bits = static_cast<uint32_t>(out[i]) << 16;
    float piece;
    memcpy(&piece, &bits, sizeof(piece));
    r = r - piece;
  }
}

constexpr int kMaxSplits = 8;
constexpr int64_t kMinSplitK = 256;  // k per range at least

// Split k (count > 1; dense, batches 1): grid z = range z of `chunk` inputs, written to
// partial[z][rows][out].
struct SplitK {
  int count = 1;
  int64_t chunk = 0;
  float* partial = nullptr;
};

template <int kXParts, int kWParts>
__global__ void __launch_bounds__(kThreads) LinearMmaKernel(LinearParams p, SplitK split) {
  constexpr int kTk = TileK<kXParts, kWParts>();
  constexpr int kStride = kTk + 8;  // bf16 per smem row: conflict-free fragment loads
  __shared__ __align__(16) uint16_t xs[kXParts][kTm * kStride];
  __shared__ __align__(16) uint16_t ws[kWParts][kTn * kStride];
  __shared__ int32_t xrow[kTm];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * kTn;

  int64_t k_begin = 0, k_end = p.in;
  if (split.count > 1) {
    k_begin = static_cast<int64_t>(blockIdx.z) * split.chunk;
    k_end = min(p.in, k_begin + split.chunk);
    p.y = split.partial + static_cast<int64_t>(blockIdx.z) * p.rows * p.out;
    p.y_stride = p.out;
    p.batches = 1;
    p.x_batch_stride = p.w_batch_stride = p.y_batch_stride = 0;  // z is the range, not a batch
    p.round_bf16 = false;
  }
  LinearTile<uint16_t> tile;
  if (!SetUpLinearTile<kTm>(p, p.w_bf16, xrow, &tile)) return;
  const float* x = tile.x;
  const uint16_t* w = tile.w;
  float* y = tile.y;
  const int64_t row0 = tile.row0;

  // Vector loads when every row starts 16-byte aligned (x: 4 floats, w: 8 bf16).
  const bool xvec =
      p.in % 4 == 0 && p.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool wvec = p.in % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
  const int wr = (warp & 1) * 16, wc = (warp >> 1) * 32;
  float acc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTk) {
    // x tile: 32 rows x 64 k as kXParts bf16 pieces (zeros past the edges).
    if (xvec) {
      for (int c = tid; c < kTm * (kTk / 4); c += kThreads) {
        const int r = c / (kTk / 4), kk = (c % (kTk / 4)) * 4;
        const int32_t xr = xrow[r];
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (xr >= 0 && k0 + kk < k_end) {
          v = *reinterpret_cast<const float4*>(x + static_cast<int64_t>(xr) * p.x_stride + k0 + kk);
        }
        uint16_t e0[kXParts], e1[kXParts], e2[kXParts], e3[kXParts];
        SplitBf16<kXParts>(v.x, e0);
        SplitBf16<kXParts>(v.y, e1);
        SplitBf16<kXParts>(v.z, e2);
        SplitBf16<kXParts>(v.w, e3);
#pragma unroll
        for (int part = 0; part < kXParts; ++part) {
          uint2 packed;
          packed.x = static_cast<uint32_t>(e0[part]) | (static_cast<uint32_t>(e1[part]) << 16);
          packed.y = static_cast<uint32_t>(e2[part]) | (static_cast<uint32_t>(e3[part]) << 16);
          *reinterpret_cast<uint2*>(xs[part] + r * kStride + kk) = packed;
        }
      }
    } else {
      for (int c = tid; c < kTm * kTk; c += kThreads) {
        const int r = c / kTk, kk = c % kTk;
        const int32_t xr = xrow[r];
        const float v = (xr >= 0 && k0 + kk < k_end)
                            ? x[static_cast<int64_t>(xr) * p.x_stride + k0 + kk]
                            : 0.0f;
        uint16_t e[kXParts];
        SplitBf16<kXParts>(v, e);
#pragma unroll
        for (int part = 0; part < kXParts; ++part) xs[part][r * kStride + kk] = e[part];
      }
    }
    // w tile: 64 outputs x 64 k, each of the kWParts pieces.
#pragma unroll 1
    for (int part = 0; part < kWParts; ++part) {
      const uint16_t* wp = w + part * p.w_piece_stride;
      if (wvec) {
        for (int c = tid; c < kTn * (kTk / 8); c += kThreads) {
          const int o = c / (kTk / 8), kk = (c % (kTk / 8)) * 8;
          uint4 v = make_uint4(0, 0, 0, 0);
          if (o0 + o < p.out && k0 + kk < k_end) {
            v = *reinterpret_cast<const uint4*>(wp + (o0 + o) * p.in + k0 + kk);
          }
          *reinterpret_cast<uint4*>(ws[part] + o * kStride + kk) = v;
        }
      } else {
        for (int c = tid; c < kTn * kTk; c += kThreads) {
          const int o = c / kTk, kk = c % kTk;
          ws[part][o * kStride + kk] =
              (o0 + o < p.out && k0 + kk < k_end) ? wp[(o0 + o) * p.in + k0 + kk] : uint16_t{0};
        }
      }
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < kTk / 16; ++s) {
      uint32_t a[kXParts][4];
#pragma unroll
      for (int part = 0; part < kXParts; ++part) {
        const uint16_t* ap = xs[part] + (wr + g) * kStride + s * 16 + 2 * t4;
        a[part][0] = *reinterpret_cast<const uint32_t*>(ap);
        a[part][1] = *reinterpret_cast<const uint32_t*>(ap + 8 * kStride);
        a[part][2] = *reinterpret_cast<const uint32_t*>(ap + 8);
        a[part][3] = *reinterpret_cast<const uint32_t*>(ap + 8 * kStride + 8);
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int wpart = kWParts - 1; wpart >= 0; --wpart) {
          const uint16_t* bp = ws[wpart] + (wc + nt * 8 + g) * kStride + s * 16 + 2 * t4;
          const uint32_t b0 = *reinterpret_cast<const uint32_t*>(bp);
          const uint32_t b1 = *reinterpret_cast<const uint32_t*>(bp + 8);
          // Smallest pieces first.
#pragma unroll
          for (int xpart = kXParts - 1; xpart >= 0; --xpart) MmaBf16(acc[nt], a[xpart], b0, b1);
        }
      }
    }
    __syncthreads();
  }

  // C fragment: rows g and g + 8 of the warp's 16, outputs 2 t4 and 2 t4 + 1 of each n8 tile.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = wr + g + 8 * half;
    if (xrow[r] < 0) continue;
    float* yr = y + (row0 + r) * p.y_stride;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int64_t o = o0 + wc + nt * 8 + 2 * t4;
      float v0 = acc[nt][2 * half], v1 = acc[nt][2 * half + 1];
      if (p.round_bf16) {
        v0 = quant::RoundBf16(v0);
        v1 = quant::RoundBf16(v1);
      }
      if (o < p.out) yr[o] = v0;
      if (o + 1 < p.out) yr[o + 1] = v1;
    }
  }
}

// y[r, o] = sum over ranges z in order of partial[z][r][o], rounded when asked.
__global__ void LinearSplitSumKernel(LinearParams p, SplitK split) {
  const int64_t total = p.rows * p.out;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = split.partial[i];
    for (int z = 1; z < split.count; ++z) v += split.partial[z * total + i];
    if (p.round_bf16) v = quant::RoundBf16(v);
    p.y[(i / p.out) * p.y_stride + i % p.out] = v;
  }
}

template <int kXParts, int kWParts>
Status LaunchAs(const LinearParams& p, cudaStream_t stream) {
  const bool gathered = p.row_index != nullptr;
  const int64_t row_tiles = gathered ? p.max_tiles : (p.rows + kTm - 1) / kTm;
  const int64_t out_tiles = (p.out + kTn - 1) / kTn;
  SplitK split;
  const int64_t blocks = row_tiles * out_tiles * p.batches;
  const int64_t want = 4LL * MultiprocessorCount();
  if (!gathered && p.batches == 1 && blocks < want && p.in >= 2 * kMinSplitK) {
    const int64_t by_k = p.in / kMinSplitK;
    split.count =
        static_cast<int>(std::min<int64_t>({kMaxSplits, by_k, (want + blocks - 1) / blocks}));
  }
  if (split.count > 1) {
    split.chunk = (p.in + split.count - 1) / split.count;
    constexpr int kTk = TileK<kXParts, kWParts>();
    split.chunk = (split.chunk + kTk - 1) / kTk * kTk;
    split.count = static_cast<int>((p.in + split.chunk - 1) / split.chunk);
  }
  if (split.count <= 1) {
    const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(out_tiles),
                    static_cast<unsigned>(p.batches));
    LinearMmaKernel<kXParts, kWParts><<<grid, kThreads, 0, stream>>>(p, SplitK{});
    return NW_CUDA_LAUNCH_STATUS("LinearMmaKernel");
  }
  NW_ASSIGN_OR_RETURN(auto partial, DeviceBuffer<float>::AllocateOn(
                                        static_cast<size_t>(split.count * p.rows * p.out), stream));
  split.partial = partial.data();
  const dim3 grid(static_cast<unsigned>(row_tiles), static_cast<unsigned>(out_tiles),
                  static_cast<unsigned>(split.count));
  LinearMmaKernel<kXParts, kWParts><<<grid, kThreads, 0, stream>>>(p, split);
  NW_RETURN_IF_ERROR(NW_CUDA_LAUNCH_STATUS("LinearMmaKernel (split k)"));
  const int64_t total = p.rows * p.out;
  LinearSplitSumKernel<<<static_cast<unsigned>(std::clamp<int64_t>((total + 255) / 256, 1, want)),
                         256, 0, stream>>>(p, split);
  return NW_CUDA_LAUNCH_STATUS("LinearSplitSumKernel");
}

}  // namespace

// Called by LaunchLinear after it checked the shared parameters and filled the strides.
Status LaunchLinearMma(const LinearParams& p, cudaStream_t stream) {
  if (p.w_pieces != 1 && p.w_pieces != 3) {
    return Status::InvalidArgument("Linear: w_pieces must be 1 or 3");
  }
  if (p.w_pieces == 3 && p.w_piece_stride <= 0) {
    return Status::InvalidArgument("Linear: three weight pieces need w_piece_stride");
  }
  if (p.x_split) {
    if (p.w_pieces == 3) {
      return Status::InvalidArgument(
          "Linear: x_split with three weight pieces is not supported (nine products a pair)");
    }
    return LaunchAs<3, 1>(p, stream);
  }
  return p.w_pieces == 3 ? LaunchAs<1, 3>(p, stream) : LaunchAs<1, 1>(p, stream);
}

}  // namespace nw::cuda::detail
