// Sparse attention on tensor cores for models with few heads (see attention.h,
// SparseAttentionParams::bf16_values): q holds bf16 values in fp32 storage and the KV rows are
// bf16, as under the precision profiles that round activations and KV to bf16. One warp per
// query, two queries a block, no block barriers. The query's entries go in 32-entry tiles through
// two shared-memory buffers: while the warp computes one tile, cp.async brings the next tile's
// rows (16-byte pieces, zero-filled for -1 and out-of-range slots), so the gather's latency hides
// behind the tensor-core work. Per tile:
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
constexpr int kWarps = 2;            // queries per block (5 blocks fit an SM's shared memory)
constexpr int kTile = 32;            // entries per tile (one lane each for the slots)
constexpr int kStride = kDim + 8;    // bf16 per staged row: conflict-free fragments
constexpr int kPStride = kTile + 8;  // bf16 per P row
constexpr int kPieces = 3;

struct WarpSmem {
  uint16_t q[kHeadsPad * kStride];
  uint16_t kv[2][kTile * kStride];  // the tile being computed and the next one in flight
  uint16_t p[kPieces][kHeadsPad * kPStride];
};

// Starts the copies of the tile of entries s0 .. s0 + 31 into `kv` (one group of cp.async) and
// returns the tile's valid-entry mask (bit r: entry s0 + r has a row). Lane r finds entry
// s0 + r's row; a lane then copies 16-byte piece lane % 16 of rows lane / 16, + 2, ...
__device__ __forceinline__ uint32_t StageTile(const SparseAttentionParams& p, int64_t i,
                                              int64_t len0, int64_t total, int64_t s0, uint16_t* kv,
                                              int lane) {
  const int64_t e = s0 + lane;
  const uint16_t* src = nullptr;
  if (e < total) {
    const Slot slot = SlotAt(p, i, len0, e);
    if (slot.row >= 0) src = static_cast<const uint16_t*>(p.sets[slot.set].kv) + slot.row * kDim;
  }
  const uint32_t valid = __ballot_sync(kFullMask, src != nullptr);
  const int piece = lane & 15;
  const void* dummy = p.q;  // a mapped address for the zero-filled copies
#pragma unroll
  for (int it = 0; it < kTile / 2; ++it) {
    const int r = 2 * it + (lane >> 4);
    const auto row = reinterpret_cast<const uint16_t*>(
        __shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(src), r));
    CpAsync16(kv + r * kStride + piece * 8, row != nullptr ? row + piece * 8 : dummy,
              row != nullptr);
  }
  CpAsyncCommit();
  return valid;
}

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

  uint32_t valid = total > 0 ? StageTile(p, i, len0, total, 0, s.kv[0], lane) : 0u;
  for (int64_t s0 = 0, t = 0; s0 < total; s0 += kTile, ++t) {
    const uint16_t* kv = s.kv[t & 1];
    uint32_t next_valid = 0;
    if (s0 + kTile < total) {
      next_valid = StageTile(p, i, len0, total, s0 + kTile, s.kv[(t + 1) & 1], lane);
    } else {
      CpAsyncCommit();  // an empty group: the wait below then always leaves one in flight
    }
    CpAsyncWait<1>();  // this lane's copies of the current tile have landed
    __syncwarp();      // and every lane's

    // S^T: two 16-entry tiles; z[mt][0..1] entry 16 mt + g, heads 2 t4 (+1); [2..3] entry + 8.
    float z[2][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      z[mt][0] = z[mt][1] = z[mt][2] = z[mt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk) {
        const uint16_t* ap = kv + (mt * 16 + g) * kStride + kk * 16 + 2 * t4;
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
        const bool has_row = (valid >> (mt * 16 + g + 8 * half)) & 1u;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float& v = z[mt][2 * half + j];
          v = has_row ? v * p.scale : -INFINITY;
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
      const uint16_t* vrow = kv + (kk * 16 + (mi >> 1) * 8 + rr) * kStride + (mi & 1) * 8;
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
    __syncwarp();  // this buffer and P are rewritten by the next tiles
    valid = next_valid;
  }
  CpAsyncWait<0>();  // nothing left in flight (the last tile's empty group)

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

Status Launch(const SparseAttentionParams& p, cudaStream_t stream) {
  const size_t smem = sizeof(WarpSmem) * kWarps;
  NW_RETURN_IF_ERROR(
      AllowDynamicSharedMemory(reinterpret_cast<const void*>(&SparseAttentionFewHeadsKernel), smem,
                               "SparseAttentionFewHeadsKernel"));
  SparseAttentionFewHeadsKernel<<<static_cast<unsigned>((p.m + kWarps - 1) / kWarps), kWarps * 32,
                                  smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionFewHeadsKernel");
}

}  // namespace

Status LaunchSparseAttentionFewHeads(const SparseAttentionParams& p, cudaStream_t stream) {
  if (p.head_dim != kDim || p.n_heads > kFewHeadsMax || p.kv_format != KvFormat::kBf16) {
    return Status::InvalidArgument(
        "SparseAttention (bf16 values): need head_dim 128, at most 8 heads and bf16 KV");
  }
  if ((reinterpret_cast<uintptr_t>(p.q) % 16) != 0) {
    return Status::InvalidArgument("SparseAttention (bf16 values): q must be 16-byte aligned");
  }
  return Launch(p, stream);
}

}  // namespace nw::cuda::detail
