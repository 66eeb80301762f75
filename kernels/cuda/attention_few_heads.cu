// Sparse attention on tensor cores for models with few heads (see attention.h,
// SparseAttentionParams::bf16_values): q and the KV rows hold bf16 values in fp32 (or bf16)
// storage, as under the precision profiles that round activations and KV to bf16. One warp per
// query, four queries a block, no block barriers. Per 32-entry tile of the query's own entries:
//   S^T = K Q^T on mma.sync m16n8k16: entries are the 16 rows of A, heads (padded to 8) the 8
//     columns of B, so no work is spent on padding rows; bf16 times bf16 is exact, the sums are
//     fp32;
//   online softmax per head, as the SIMT kernel (expf, the sink as the initial maximum);
//   O^T += V^T P^T: dims are the rows of A (ldmatrix.trans from the staged rows), P the B operand,
//     split into three bf16 pieces whose sum is P exactly, smallest first.
// So every product is exact and only the fp32 summation order differs from the CPU, as for the
// tensor-core linears. Deterministic run to run.
#include <cstring>

#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"

namespace nw::cuda::detail {
namespace {

constexpr int kDim = kFewHeadsDim;
constexpr int kHeadsPad = 8;         // the n of m16n8k16
constexpr int kWarps = 4;            // queries per block
constexpr int kTile = 32;            // entries per tile (one lane each for the slots)
constexpr int kStride = kDim + 8;    // bf16 per staged row: conflict-free fragments
constexpr int kPStride = kTile + 8;  // bf16 per P row
constexpr int kPieces = 3;

struct WarpSmem {
  uint16_t q[kHeadsPad * kStride];
  uint16_t kv[kTile * kStride];
  uint16_t p[kPieces][kHeadsPad * kPStride];
  int64_t row[kTile];
  int set[kTile];
};

__device__ __forceinline__ uint16_t Bf16Of(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  uint16_t u;
  memcpy(&u, &b, sizeof(u));
  return u;
}
__device__ __forceinline__ float FloatOfBf16(uint16_t u) {
  const uint32_t bits = static_cast<uint32_t>(u) << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

template <KvFormat kFormat>
__global__ void __launch_bounds__(kWarps * 32)
    SparseAttentionFewHeadsKernel(SparseAttentionParams p) {
  extern __shared__ uint4 smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  WarpSmem& s = reinterpret_cast<WarpSmem*>(smem_raw)[warp];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (i >= p.m) return;
  const int H = p.n_heads;

  // Q (bf16 values) -> bf16 rows; heads past n_heads are zero.
  const float* q = static_cast<const float*>(p.q) + i * H * kDim;
  for (int h = 0; h < kHeadsPad; ++h) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (h < H) v = *reinterpret_cast<const float4*>(q + h * kDim + 4 * lane);
    uint2 packed;
    packed.x = static_cast<uint32_t>(Bf16Of(v.x)) | (static_cast<uint32_t>(Bf16Of(v.y)) << 16);
    packed.y = static_cast<uint32_t>(Bf16Of(v.z)) | (static_cast<uint32_t>(Bf16Of(v.w)) << 16);
    *reinterpret_cast<uint2*>(s.q + h * kStride + 4 * lane) = packed;
  }
  const int64_t len0 = SetLength(p.sets[0], i);
  const int64_t total = len0 + SetLength(p.sets[1], i);

  // This lane's heads: 2 t4 and 2 t4 + 1 (the C columns). m / l as in the SIMT kernel.
  float m[2], l[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int h = 2 * t4 + j;
    m[j] = h < H ? p.sink[h] : 0.0f;
    l[j] = h < H && m[j] != -INFINITY ? 1.0f : 0.0f;
  }
  float o[kDim / 16][4];  // O^T tiles: rows dims 16 dt + g (+8), columns heads 2 t4 (+1)
#pragma unroll
  for (int dt = 0; dt < kDim / 16; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;

  for (int64_t s0 = 0; s0 < total; s0 += kTile) {
    {
      const int64_t e = s0 + lane;
      Slot slot{0, -1};
      if (e < total) slot = SlotAt(p, i, len0, e);
      s.set[lane] = slot.set;
      s.row[lane] = slot.row;
    }
    __syncwarp();
    // Stage the tile's rows as bf16: a lane takes 4 dims of every row.
    for (int r = 0; r < kTile; ++r) {
      const int64_t row = s.row[r];
      uint2 packed = make_uint2(0u, 0u);
      if (row >= 0) {
        if constexpr (kFormat == KvFormat::kFp32) {
          const float4 v = *reinterpret_cast<const float4*>(
              static_cast<const float*>(p.sets[s.set[r]].kv) + row * kDim + 4 * lane);
          packed.x =
              static_cast<uint32_t>(Bf16Of(v.x)) | (static_cast<uint32_t>(Bf16Of(v.y)) << 16);
          packed.y =
              static_cast<uint32_t>(Bf16Of(v.z)) | (static_cast<uint32_t>(Bf16Of(v.w)) << 16);
        } else {
          packed = *reinterpret_cast<const uint2*>(
              static_cast<const uint16_t*>(p.sets[s.set[r]].kv) + row * kDim + 4 * lane);
        }
      }
      *reinterpret_cast<uint2*>(s.kv + r * kStride + 4 * lane) = packed;
    }
    __syncwarp();

    // S^T: two 16-entry tiles; z[mt][0..1] entry 16 mt + g, heads 2 t4 (+1); [2..3] entry + 8.
    float z[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      z[mt][0] = z[mt][1] = z[mt][2] = z[mt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk) {
        const uint16_t* ap = s.kv + (mt * 16 + g) * kStride + kk * 16 + 2 * t4;
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(ap);
        a[1] = *reinterpret_cast<const uint32_t*>(ap + 8 * kStride);
        a[2] = *reinterpret_cast<const uint32_t*>(ap + 8);
        a[3] = *reinterpret_cast<const uint32_t*>(ap + 8 * kStride + 8);
        const uint16_t* bp = s.q + g * kStride + kk * 16 + 2 * t4;
        MmaBf16(z[mt], a, *reinterpret_cast<const uint32_t*>(bp),
                *reinterpret_cast<const uint32_t*>(bp + 8));
      }
    }
    // Scale and mask; per-head maximum over the tile (lanes of one t4 hold one head pair).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const bool valid = s.row[mt * 16 + g + 8 * half] >= 0;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float& v = z[mt][2 * half + j];
          v = valid ? v * p.scale : -INFINITY;
          tile_max[j] = fmaxf(tile_max[j], v);
        }
      }
    }
    float corr[2], sum[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      for (int off = 4; off < 32; off <<= 1) {
        tile_max[j] = fmaxf(tile_max[j], __shfl_xor_sync(kFullMask, tile_max[j], off));
      }
      const float m_new = fmaxf(m[j], tile_max[j]);
      corr[j] = m_new == -INFINITY ? 1.0f : expf(m[j] - m_new);
      sum[j] = 0.0f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float& v = z[mt][2 * half + j];
          v = (m_new == -INFINITY || 2 * t4 + j >= H) ? 0.0f : expf(v - m_new);
          sum[j] += v;
        }
      }
      for (int off = 4; off < 32; off <<= 1) sum[j] += __shfl_xor_sync(kFullMask, sum[j], off);
      l[j] = l[j] * corr[j] + sum[j];
      m[j] = m_new;
    }
#pragma unroll
    for (int dt = 0; dt < kDim / 16; ++dt) {
      o[dt][0] *= corr[0];
      o[dt][1] *= corr[1];
      o[dt][2] *= corr[0];
      o[dt][3] *= corr[1];
    }
    // P^T pieces into shared memory as [head][entry] (the B operand's layout).
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int e = mt * 16 + g + 8 * half;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float r = z[mt][2 * half + j];
#pragma unroll
          for (int piece = 0; piece < kPieces; ++piece) {
            const uint16_t b = Bf16Of(r);
            s.p[piece][(2 * t4 + j) * kPStride + e] = b;
            r = r - FloatOfBf16(b);
          }
        }
      }
    }
    __syncwarp();
    // O^T += V^T P^T over the tile's two 16-entry steps, smallest pieces first.
    const int mi = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t b[kPieces][2];
#pragma unroll
      for (int piece = 0; piece < kPieces; ++piece) {
        const uint16_t* bp = s.p[piece] + g * kPStride + kk * 16 + 2 * t4;
        b[piece][0] = *reinterpret_cast<const uint32_t*>(bp);
        b[piece][1] = *reinterpret_cast<const uint32_t*>(bp + 8);
      }
      // ldmatrix rows: matrix mi covers entries kk 16 + 8 (mi >> 1) .., dims + 8 (mi & 1).
      const uint16_t* vrow = s.kv + (kk * 16 + (mi >> 1) * 8 + rr) * kStride + (mi & 1) * 8;
#pragma unroll
      for (int dt = 0; dt < kDim / 16; ++dt) {
        uint32_t a[4];
        LdMatrixX4Trans(a, vrow + dt * 16);
#pragma unroll
        for (int piece = kPieces - 1; piece >= 0; --piece) {
          MmaBf16(o[dt], a, b[piece][0], b[piece][1]);
        }
      }
    }
    __syncwarp();  // the tile's rows, slots and P are rewritten by the next tile
  }

  // Normalise and store: lane (g, t4) holds dims 16 dt + g (+8) of heads 2 t4 (+1).
  float* out = p.out + i * H * kDim;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int h = 2 * t4 + j;
    if (h >= H) continue;
    const float inv = 1.0f / l[j];
#pragma unroll
    for (int dt = 0; dt < kDim / 16; ++dt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float v = o[dt][2 * half + j] * inv;
        out[h * kDim + dt * 16 + g + 8 * half] = p.round_bf16 ? quant::RoundBf16(v) : v;
      }
    }
  }
}

template <KvFormat kFormat>
Status LaunchAs(const SparseAttentionParams& p, cudaStream_t stream) {
  const size_t smem = sizeof(WarpSmem) * kWarps;
  void (*kernel)(SparseAttentionParams) = SparseAttentionFewHeadsKernel<kFormat>;
  NW_RETURN_IF_ERROR(AllowDynamicSharedMemory(reinterpret_cast<const void*>(kernel), smem,
                                              "SparseAttentionFewHeadsKernel"));
  kernel<<<static_cast<unsigned>((p.m + kWarps - 1) / kWarps), kWarps * 32, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionFewHeadsKernel");
}

}  // namespace

Status LaunchSparseAttentionFewHeads(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.head_dim != kDim || p.n_heads > kFewHeadsMax ||
      (p.kv_format != KvFormat::kFp32 && p.kv_format != KvFormat::kBf16)) {
    return Status::InvalidArgument(
        "SparseAttention (bf16 values): need head_dim 128, at most 8 heads and fp32 or bf16 KV");
  }
  if ((reinterpret_cast<uintptr_t>(p.q) % 16) != 0) {
    return Status::InvalidArgument("SparseAttention (bf16 values): q must be 16-byte aligned");
  }
  return p.kv_format == KvFormat::kFp32 ? LaunchAs<KvFormat::kFp32>(p, stream)
                                        : LaunchAs<KvFormat::kBf16>(p, stream);
}

}  // namespace nw::cuda::detail
