// Sparse attention on tensor cores for models with few heads (see attention.h,
// SparseAttentionParams::bf16_values): q holds bf16 values in fp32 storage and the KV rows are
// bf16, as under the precision profiles that round activations and KV to bf16. A block of two
// warps takes 16 consecutive queries, each warp 8 of them one after the other. First the block
// finds the smallest and largest set-0 row its queries read; when they lie within 160 rows (a
// sliding window: consecutive queries share all but one row) it stages those rows once into
// shared memory, one barrier, and no query gathers them again. The query's entries go in 32-entry
// tiles; a tile's other rows come through two per-warp buffers: while the warp computes one tile,
// cp.async brings the next tile's rows (16-byte pieces, zero-filled for -1 and out-of-range
// slots), so the gather's latency hides behind the tensor-core work. Each lane keeps where its
// entry's row lies (staged or in the buffer); the fragment loads read rows through those
// offsets, so the values, and the bits, are the same either way. Per tile:
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
constexpr int kHeadsPad = 8;        // the n of m16n8k16
constexpr int kWarps = 2;           // warps per block
constexpr int kQueriesPerWarp = 8;  // consecutive queries a warp takes, one after the other
constexpr int kPerBlock = kWarps * kQueriesPerWarp;
constexpr int kUnionRows = 160;      // most set-0 rows a block stages once for all its queries
constexpr int kTile = 32;            // entries per tile (one lane each for the slots)
constexpr int kStride = kDim + 8;    // bf16 per staged row: conflict-free fragments
constexpr int kPStride = kTile + 8;  // bf16 per P row
constexpr int kPieces = 3;

struct WarpSmem {
  uint16_t q[kHeadsPad * kStride];
  uint16_t kv[2][kTile * kStride];  // the tile being computed and the next one in flight
  uint16_t p[kPieces][kHeadsPad * kPStride];
};

// The rows a block stages once: set-0 rows lo .. lo + span - 1 (span 0: none), every set-0 row
// its queries read (when they span at most kUnionRows rows: a sliding window's consecutive
// queries share all but one of them).
struct BlockRows {
  int64_t lo;
  int span;
};

// Starts the copies of the tile of entries s0 .. s0 + 31 (one group of cp.async) and returns the
// tile's valid-entry mask (bit r: entry s0 + r has a row). Lane r finds entry s0 + r's row and
// returns where it lies (uint16 offset from `base`): in the block's staged rows when it is one,
// else in slot r of `kv`, copied there (16-byte piece lane % 16 of rows lane / 16, + 2, ...), or
// zero-filled for a slot without a row.
__device__ __forceinline__ uint32_t StageTile(const SparseAttentionParams& p, int64_t i,
                                              int64_t len0, int64_t total, int64_t s0,
                                              const uint16_t* base, const uint16_t* staged,
                                              BlockRows br, uint16_t* kv, int lane, int* offset) {
  const int64_t e = s0 + lane;
  const uint16_t* src = nullptr;
  bool shared_row = false;
  if (e < total) {
    const Slot slot = SlotAt(p, i, len0, e);
    if (slot.row >= 0) {
      shared_row = slot.set == 0 && br.span > 0;  // then lo <= row < lo + span
      src = static_cast<const uint16_t*>(p.sets[slot.set].kv) + slot.row * kDim;
      if (shared_row) *offset = static_cast<int>(staged - base + (slot.row - br.lo) * kStride);
    }
  }
  if (!shared_row) *offset = static_cast<int>(kv - base + lane * kStride);
  const uint32_t valid = __ballot_sync(kFullMask, src != nullptr);
  const uint32_t copy = ~__ballot_sync(kFullMask, shared_row);
  const int piece = lane & 15;
  const void* dummy = p.q;  // a mapped address for the zero-filled copies
#pragma unroll
  for (int it = 0; it < kTile / 2; ++it) {
    const int r = 2 * it + (lane >> 4);
    const auto row = reinterpret_cast<const uint16_t*>(
        __shfl_sync(kFullMask, reinterpret_cast<uintptr_t>(src), r));
    if ((copy >> r) & 1u) {
      CpAsync16(kv + r * kStride + piece * 8, row != nullptr ? row + piece * 8 : dummy,
                row != nullptr);
    }
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

// One query on one warp (s: the warp's buffers; base: the shared-memory base the row offsets
// count from; staged / br: the block's staged set-0 rows).
__device__ __forceinline__ void OneQuery(const SparseAttentionParams& p, WarpSmem& s, int64_t i,
                                         const uint16_t* base, const uint16_t* staged,
                                         BlockRows br) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
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

  int offset = 0, next_offset = 0;  // where entry s0 + lane's row lies (StageTile)
  uint32_t valid =
      total > 0 ? StageTile(p, i, len0, total, 0, base, staged, br, s.kv[0], lane, &offset) : 0u;
  for (int64_t s0 = 0, t = 0; s0 < total; s0 += kTile, ++t) {
    uint32_t next_valid = 0;
    if (s0 + kTile < total) {
      next_valid = StageTile(p, i, len0, total, s0 + kTile, base, staged, br, s.kv[(t + 1) & 1],
                             lane, &next_offset);
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
      const uint16_t* row0 = base + __shfl_sync(kFullMask, offset, mt * 16 + g);
      const uint16_t* row1 = base + __shfl_sync(kFullMask, offset, mt * 16 + g + 8);
#pragma unroll
      for (int kk = 0; kk < kDim / 16; ++kk) {
        const uint16_t* ap = row0 + kk * 16 + 2 * t4;
        const uint16_t* ap1 = row1 + kk * 16 + 2 * t4;
        uint32_t a[4];
        a[0] = *reinterpret_cast<const uint32_t*>(ap);
        a[1] = *reinterpret_cast<const uint32_t*>(ap1);
        a[2] = *reinterpret_cast<const uint32_t*>(ap + 8);
        a[3] = *reinterpret_cast<const uint32_t*>(ap1 + 8);
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
      const uint16_t* vrow =
          base + __shfl_sync(kFullMask, offset, kk * 16 + (mi >> 1) * 8 + rr) + (mi & 1) * 8;
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
    offset = next_offset;
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

// Shared memory: the block's staged set-0 rows, then each warp's buffers.
constexpr size_t kStagedBytes = size_t{kUnionRows} * kStride * sizeof(uint16_t);
static_assert(kStagedBytes % 16 == 0 && sizeof(WarpSmem) % 16 == 0);

__global__ void __launch_bounds__(kWarps * 32)
    SparseAttentionFewHeadsKernel(SparseAttentionParams p) {
  extern __shared__ uint4 smem_raw[];
  __shared__ int64_t s_lo[kWarps], s_hi[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint16_t* base = reinterpret_cast<const uint16_t*>(smem_raw);
  uint16_t* staged = reinterpret_cast<uint16_t*>(smem_raw);
  WarpSmem& s =
      reinterpret_cast<WarpSmem*>(reinterpret_cast<unsigned char*>(smem_raw) + kStagedBytes)[warp];
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kPerBlock;
  const int64_t qn = min(int64_t{kPerBlock}, p.m - q0);

  // The smallest and largest set-0 row the block's queries read (the same rule as SlotAt).
  const KvSet& w = p.sets[0];
  int64_t lo = INT64_MAX, hi = -1;
  if (w.indices != nullptr) {
    for (int64_t k = 0; k < qn; ++k) {
      const int64_t qi = q0 + k, len = SetLength(w, qi);
      for (int64_t e = threadIdx.x; e < len; e += kWarps * 32) {
        const int64_t idx = w.indices[qi * w.index_stride + e];
        if (idx >= 0 && idx < w.rows) {
          lo = min(lo, idx);
          hi = max(hi, idx);
        }
      }
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(kFullMask, lo, o));
    hi = max(hi, __shfl_xor_sync(kFullMask, hi, o));
  }
  if (lane == 0) {
    s_lo[warp] = lo;
    s_hi[warp] = hi;
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kWarps; ++k) {
    lo = min(lo, s_lo[k]);
    hi = max(hi, s_hi[k]);
  }
  BlockRows br{lo, 0};
  if (hi >= lo && hi - lo < kUnionRows) {
    br.span = static_cast<int>(hi - lo + 1);
    const uint16_t* src = static_cast<const uint16_t*>(w.kv) + lo * kDim;
    for (int c = threadIdx.x; c < br.span * (kDim / 8); c += kWarps * 32) {
      const int r = c / (kDim / 8), piece = c % (kDim / 8);
      CpAsync16(staged + r * kStride + piece * 8, src + r * kDim + piece * 8, true);
    }
    CpAsyncCommit();
    CpAsyncWait<0>();
  }
  __syncthreads();  // the staged rows are every warp's from here

  for (int k = 0; k < kQueriesPerWarp; ++k) {
    const int64_t i = q0 + warp * kQueriesPerWarp + k;
    if (i >= p.m) return;
    OneQuery(p, s, i, base, staged, br);
    __syncwarp();  // the next query rewrites the warp's buffers
  }
}

Status Launch(const SparseAttentionParams& p, cudaStream_t stream) {
  const size_t smem = kStagedBytes + sizeof(WarpSmem) * kWarps;
  NW_RETURN_IF_ERROR(
      AllowDynamicSharedMemory(reinterpret_cast<const void*>(&SparseAttentionFewHeadsKernel), smem,
                               "SparseAttentionFewHeadsKernel"));
  SparseAttentionFewHeadsKernel<<<static_cast<unsigned>((p.m + kPerBlock - 1) / kPerBlock),
                                  kWarps * 32, smem, stream>>>(p);
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
