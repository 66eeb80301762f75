// Sparse attention on tensor cores (see attention.h): one query per block, 8 warps. Warp w owns
// heads 16 (w % 4) .. +15 and output dims (w / 4) * d/2 .. +d/2. Per 32-entry tile of gathered KV
// rows (bf16 in shared memory, two buffers: the next tile's rows arrive by cp.async while this one
// is computed; V4 fp8 rows are dequantized exactly on the way in, without the overlap):
//   S = Q K^T: each warp multiplies its heads over its half of the dims (mma.sync m16n8k16), the
//     two halves are added through shared memory (same order for both warps of a head group);
//   online softmax in base 2 with the sink as the initial maximum;
//   O += P V: P from the S registers (rounded to bf16), V fragments by ldmatrix.trans.
#include <algorithm>

#include "kernels/cuda/attention_impl.cuh"
#include "kernels/cuda/common.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"

namespace nw::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kTile = 32;            // entries per tile
constexpr int kHeads = 64;           // head rows (zero-padded past n_heads)
constexpr int kXStride = kTile + 8;  // floats per row of the S exchange buffer
constexpr float kLog2e = 1.4426950408889634f;

template <int kDim>
struct MmaSmem {
  static constexpr int kStride = kDim + 8;  // bf16 per row: conflict-free fragment loads
  static constexpr size_t kQ = static_cast<size_t>(kHeads) * kStride * 2;
  static constexpr size_t kKv = static_cast<size_t>(kTile) * kStride * 2;  // one of two buffers
  static constexpr size_t kX = 2ull * kHeads * kXStride * 4;
  // V4 fp8 rows as they lie in the cache (token bytes, then the scales at TokenBytes), staged by
  // cp.async: TokenBytes <= 2 d and ScaleStride <= 16 for d <= 512.
  static constexpr int kRawStride = 2 * kDim + 16;
  static constexpr size_t kRaw = static_cast<size_t>(kTile) * kRawStride;
  static constexpr size_t kBytes = kQ + 2 * kKv + kX;
  static constexpr size_t kBytesFp8 = kBytes + kRaw;
};

template <int kDim, bool kFp8>
__device__ __forceinline__ void LoadTile(const SparseAttentionParams& p, const int* s_set,
                                         const int64_t* s_row, uint16_t* skv) {
  constexpr int kStride = MmaSmem<kDim>::kStride;
  if constexpr (!kFp8) {
    // cp.async (completes at the caller's CpAsyncWait); zeros for skipped entries.
    constexpr int kChunks = kDim / 8;
    for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
      const int r = c / kChunks, cc = c % kChunks;
      const int64_t row = s_row[r];
      uint16_t* dst = skv + r * kStride + cc * 8;
      if (row >= 0) {
        const uint16_t* src = static_cast<const uint16_t*>(p.sets[s_set[r]].kv);
        CpAsync16(dst, src + row * kDim + cc * 8, true);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
    }
  } else {
    // cp.async of the raw rows (completes at the caller's CpAsyncWait): token bytes in 16-byte
    // chunks, then the scale bytes in 4-byte pieces; skipped entries are not copied (DequantTile
    // writes zeros for them).
    const V4KvLayout& l = p.kv_layout;
    const int token_chunks = static_cast<int>(l.TokenBytes() / 16);
    const int scale_words = static_cast<int>(l.ScaleStride() / 4);
    const int per_row = token_chunks + scale_words;
    unsigned char* raw = reinterpret_cast<unsigned char*>(skv);
    for (int c = threadIdx.x; c < kTile * per_row; c += kThreads) {
      const int r = c / per_row, cc = c % per_row;
      const int64_t row = s_row[r];
      if (row < 0) continue;
      const V4Row src = V4RowAt(p.sets[s_set[r]].kv, l, row);
      unsigned char* dst = raw + r * MmaSmem<kDim>::kRawStride;
      if (cc < token_chunks) {
        CpAsync16(dst + cc * 16, src.data + cc * 16, true);
      } else {
        const int wd = cc - token_chunks;
        CpAsync4(dst + l.TokenBytes() + 4 * wd, src.scales + 4 * wd);
      }
    }
  }
}

/// V4 fp8 rows staged by LoadTile<kDim, true> (raw) -> bf16 rows of skv, dequantized exactly;
/// zeros for skipped entries.
template <int kDim>
__device__ __forceinline__ void DequantTile(const SparseAttentionParams& p, const int64_t* s_row,
                                            const unsigned char* raw, uint16_t* skv) {
  constexpr int kStride = MmaSmem<kDim>::kStride;
  const V4KvLayout& l = p.kv_layout;
  const int nope_chunks = l.nope() / 16;   // 16 e4m3 codes -> 16 bf16
  const int rope_chunks = l.rope_dim / 8;  // 8 bf16 copied
  const int chunks = nope_chunks + rope_chunks;
  for (int c = threadIdx.x; c < kTile * chunks; c += kThreads) {
    const int r = c / chunks, cc = c % chunks;
    uint4* dst = reinterpret_cast<uint4*>(skv + r * kStride) +
                 (cc < nope_chunks ? 2 * cc : nope_chunks * 2 + (cc - nope_chunks));
    if (s_row[r] < 0) {
      dst[0] = make_uint4(0, 0, 0, 0);
      if (cc < nope_chunks) dst[1] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const unsigned char* data = raw + r * MmaSmem<kDim>::kRawStride;
    if (cc < nope_chunks) {
      const uint4 v = *reinterpret_cast<const uint4*>(data + cc * 16);
      DequantE4m3x16(v, quant::DecodeUe8m0(data[l.TokenBytes() + (cc * 16) / 64]), dst[0], dst[1]);
    } else {
      dst[0] = *reinterpret_cast<const uint4*>(data + l.nope() + (cc - nope_chunks) * 16);
    }
  }
}

template <int kDim, bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) SparseAttentionMmaKernel(SparseAttentionParams p) {
  using Smem = MmaSmem<kDim>;
  constexpr int kStride = Smem::kStride;
  constexpr int kHalf = kDim / 2;
  constexpr int kSteps = kHalf / 16;
  constexpr int kOut = kHalf / 8;  // output n-tiles per warp
  extern __shared__ uint4 smem[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);
  uint16_t* skv_bufs = sq + Smem::kQ / 2;                                // [2][kTile][kStride]
  float* sx = reinterpret_cast<float*>(skv_bufs + Smem::kKv);            // [2][kHeads][kXStride]
  unsigned char* raw = reinterpret_cast<unsigned char*>(sx) + Smem::kX;  // fp8: staged rows
  // Slots of three consecutive tiles: tile u's in [u % 3] (looked up one tile before its load).
  __shared__ int s_set_bufs[3][kTile];
  __shared__ int64_t s_row_bufs[3][kTile];

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int hw = warp & 3, dw = warp >> 2;
  const int64_t i = blockIdx.x;

  // Q -> shared memory (zero rows past n_heads).
  {
    const uint16_t* q = static_cast<const uint16_t*>(p.q) + i * p.n_heads * kDim;
    constexpr int kChunks = kDim / 8;
    for (int c = threadIdx.x; c < kHeads * kChunks; c += kThreads) {
      const int h = c / kChunks, cc = c % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (h < p.n_heads) v = *reinterpret_cast<const uint4*>(q + h * kDim + cc * 8);
      *reinterpret_cast<uint4*>(sq + h * kStride + cc * 8) = v;
    }
  }
  const int64_t len0 = SetLength(p.sets[0], i);
  const int64_t total = len0 + SetLength(p.sets[1], i);
  const int r0 = hw * 16 + g, r1 = r0 + 8;  // this thread's two head rows
  float m0 = r0 < p.n_heads ? p.sink[r0] * kLog2e : 0.0f;
  float m1 = r1 < p.n_heads ? p.sink[r1] * kLog2e : 0.0f;
  float l0 = m0 == -INFINITY ? 0.0f : 1.0f;
  float l1 = m1 == -INFINITY ? 0.0f : 1.0f;
  float o[kOut][4];
#pragma unroll
  for (int n = 0; n < kOut; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  const float scale2 = p.scale * kLog2e;

  const int64_t tiles = (total + kTile - 1) / kTile;
  // Slots of tile u into s_*_bufs[u % 3] (the first kTile threads).
  auto lookup = [&](int64_t u) {
    if (threadIdx.x < kTile && u < tiles) {
      const int64_t s = u * kTile + threadIdx.x;
      Slot slot{0, -1};
      if (s < total) slot = SlotAt(p, i, len0, s);
      s_set_bufs[u % 3][threadIdx.x] = slot.set;
      s_row_bufs[u % 3][threadIdx.x] = slot.row;
    }
  };
  // Tile u's rows into buffer u % 2 (bf16) or the raw staging (fp8); always closes a cp.async
  // group.
  auto issue = [&](int64_t u) {
    if (u < tiles) {
      LoadTile<kDim, kFp8>(
          p, s_set_bufs[u % 3], s_row_bufs[u % 3],
          kFp8 ? reinterpret_cast<uint16_t*>(raw) : skv_bufs + (u & 1) * (Smem::kKv / 2));
    }
    CpAsyncCommit();
  };
  lookup(0);
  lookup(1);
  __syncthreads();
  issue(0);

  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t* s_row = s_row_bufs[t % 3];
    if constexpr (!kFp8) {
      __syncthreads();  // tile t - 1 is no longer read (its buffer, slots and sx are free)
      issue(t + 1);
      lookup(t + 2);
      CpAsyncWait<1>();
      __syncthreads();  // tile t has landed
    } else {
      CpAsyncWait<0>();
      __syncthreads();  // tile t's raw rows have landed; tile t - 1 is no longer read
      DequantTile<kDim>(p, s_row, raw, skv_bufs);
      __syncthreads();  // the raw staging is free
      issue(t + 1);
      lookup(t + 2);
    }
    const uint16_t* skv = skv_bufs + (kFp8 ? 0 : (t & 1) * (Smem::kKv / 2));

    // S partial over this warp's half of the dims.
    constexpr int kN = kTile / 8;  // n-tiles of entries
    float s[kN][4];
#pragma unroll
    for (int n = 0; n < kN; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
    // Fragments by ldmatrix: A (16 heads x 16 dims) per k step, B (8 entries x 2 k steps) per
    // n-tile; each accumulator still takes the k steps in ascending order.
    const uint16_t* qa = sq + (hw * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride +
                         dw * kHalf + (lane >> 4) * 8;
    const uint16_t* kb = skv + (lane & 7) * kStride + dw * kHalf + (lane >> 3) * 8;
#pragma unroll
    for (int kk = 0; kk < kSteps; kk += 2) {
      uint32_t a0[4], a1[4];
      LdMatrixX4(a0, qa + kk * 16);
      LdMatrixX4(a1, qa + (kk + 1) * 16);
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        uint32_t b[4];
        LdMatrixX4(b, kb + n * 8 * kStride + kk * 16);
        MmaBf16(s[n], a0, b[0], b[1]);
        MmaBf16(s[n], a1, b[2], b[3]);
      }
    }
    // Exchange the halves: S = part(dw 0) + part(dw 1) (addition commutes, so both warps agree).
    float* mine = sx + (dw * kHeads) * kXStride;
    const float* other = sx + ((1 - dw) * kHeads) * kXStride;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int e = n * 8 + 2 * t4;
      *reinterpret_cast<float2*>(mine + r0 * kXStride + e) = make_float2(s[n][0], s[n][1]);
      *reinterpret_cast<float2*>(mine + r1 * kXStride + e) = make_float2(s[n][2], s[n][3]);
    }
    __syncthreads();
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const int e = n * 8 + 2 * t4;
      const float2 x0 = *reinterpret_cast<const float2*>(other + r0 * kXStride + e);
      const float2 x1 = *reinterpret_cast<const float2*>(other + r1 * kXStride + e);
      const bool v0 = s_row[e] >= 0, v1 = s_row[e + 1] >= 0;
      s[n][0] = v0 ? (s[n][0] + x0.x) * scale2 : -INFINITY;
      s[n][1] = v1 ? (s[n][1] + x0.y) * scale2 : -INFINITY;
      s[n][2] = v0 ? (s[n][2] + x1.x) * scale2 : -INFINITY;
      s[n][3] = v1 ? (s[n][3] + x1.y) * scale2 : -INFINITY;
      mx0 = fmaxf(mx0, fmaxf(s[n][0], s[n][1]));
      mx1 = fmaxf(mx1, fmaxf(s[n][2], s[n][3]));
    }
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
    }
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    SoftmaxStep(s, o, mn0, mn1, m0, m1, l0, l1);
    // O += P V over the tile's 4 groups of 16 entries.
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      uint32_t a[4];
      a[0] = PackBf16x2(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PackBf16x2(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PackBf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PackBf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      const int mi = lane >> 3, rr = lane & 7;
      const uint16_t* vrow =
          skv + (kk * 16 + (mi & 1) * 8 + rr) * kStride + dw * kHalf + (mi >> 1) * 8;
#pragma unroll
      for (int n = 0; n < kOut; n += 2) {
        uint32_t b[4];
        LdMatrixX4Trans(b, vrow + n * 8);
        MmaBf16(o[n], a, b[0], b[1]);
        MmaBf16(o[n + 1], a, b[2], b[3]);
      }
    }
  }

  CpAsyncWait<0>();  // no copy outlives the block (the trailing group is empty)
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  auto store = [&](float v) { return p.round_bf16 ? quant::RoundBf16(v) : v; };
  float* out = p.out + i * p.n_heads * kDim;
#pragma unroll
  for (int n = 0; n < kOut; ++n) {
    const int col = dw * kHalf + n * 8 + 2 * t4;
    if (r0 < p.n_heads) {
      *reinterpret_cast<float2*>(out + r0 * kDim + col) =
          make_float2(store(o[n][0] * inv0), store(o[n][1] * inv0));
    }
    if (r1 < p.n_heads) {
      *reinterpret_cast<float2*>(out + r1 * kDim + col) =
          make_float2(store(o[n][2] * inv1), store(o[n][3] * inv1));
    }
  }
}

template <int kDim, bool kFp8>
Status Launch(const SparseAttentionParams& p, cudaStream_t stream) {
  const size_t smem = kFp8 ? MmaSmem<kDim>::kBytesFp8 : MmaSmem<kDim>::kBytes;
  NW_RETURN_IF_ERROR(
      AllowDynamicSharedMemory(reinterpret_cast<const void*>(&SparseAttentionMmaKernel<kDim, kFp8>),
                               smem, "SparseAttentionMmaKernel"));
  SparseAttentionMmaKernel<kDim, kFp8><<<static_cast<unsigned>(p.m), kThreads, smem, stream>>>(p);
  return NW_CUDA_LAUNCH_STATUS("SparseAttentionMmaKernel");
}

}  // namespace

Status LaunchSparseAttentionMma(const SparseAttentionParams& p, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(p.q) % 16) != 0) {
    return Status::InvalidArgument("SparseAttention (tensor cores): q must be 16-byte aligned");
  }
  const bool fp8 = p.kv_format == KvFormat::kV4Fp8;
  if (fp8 && (p.kv_layout.nope() % 16 != 0 || p.kv_layout.rope_dim % 8 != 0 ||
              p.kv_layout.TokenBytes() % 16 != 0)) {
    return Status::InvalidArgument("SparseAttention (tensor cores): V4 layout needs 16-byte rows");
  }
  if (p.head_dim == 512) return fp8 ? Launch<512, true>(p, stream) : Launch<512, false>(p, stream);
  return fp8 ? Launch<128, true>(p, stream) : Launch<128, false>(p, stream);
}

}  // namespace nw::cuda::detail
