// Internals shared by the sparse-attention kernels (attention.cu, attention_mma.cu). Device code.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/quant/scalar.h"

namespace nw::cuda::detail {

/// Entry slot s of query i: a pointer-free (set, row) pair; row -1 when the slot is unused.
struct Slot {
  int set;
  int64_t row;
};

__device__ __forceinline__ int64_t SetLength(const KvSet& s, int64_t i) {
  if (s.indices == nullptr) return 0;
  if (s.lengths == nullptr) return s.index_stride;
  return min(max(static_cast<int64_t>(s.lengths[i]), int64_t{0}), s.index_stride);
}

__device__ __forceinline__ Slot SlotAt(const SparseAttentionParams& p, int64_t i, int64_t len0,
                                       int64_t s) {
  const int set = s < len0 ? 0 : 1;
  const KvSet& ks = p.sets[set];
  const int64_t idx = ks.indices[i * ks.index_stride + (set == 0 ? s : s - len0)];
  return {set, (idx >= 0 && idx < ks.rows) ? idx : int64_t{-1}};
}

/// 2^x by the SFU (`ex2.approx.ftz`: about 2 ulp, results below 2^-126 flushed to 0, -inf -> 0):
/// what exp2f compiles to, without its range fix-up for subnormal results.
__device__ __forceinline__ float Exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// Scales a thread's S accumulators of kJ n8 column groups (the wgmma / m16n8 layout: group j
/// holds columns 8 j + 2 t4 and + 1 of rows r0 and r1) by scale2, masks the columns `valid(e)`
/// rejects to -inf, and returns the rows' maxima over the quad (mx0, mx1).
template <int kJ, class Valid>
__device__ __forceinline__ void ScaleMaskRowMax(float (&s)[4 * kJ], float scale2, int t4,
                                                Valid valid, float& mx0, float& mx1) {
  mx0 = -INFINITY;
  mx1 = -INFINITY;
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int e = 8 * j + 2 * t4;
    const bool v0 = valid(e), v1 = valid(e + 1);
    s[4 * j] = v0 ? s[4 * j] * scale2 : -INFINITY;
    s[4 * j + 1] = v1 ? s[4 * j + 1] * scale2 : -INFINITY;
    s[4 * j + 2] = v0 ? s[4 * j + 2] * scale2 : -INFINITY;
    s[4 * j + 3] = v1 ? s[4 * j + 3] * scale2 : -INFINITY;
    mx0 = fmaxf(mx0, fmaxf(s[4 * j], s[4 * j + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * j + 2], s[4 * j + 3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFullMask, mx0, off));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFullMask, mx1, off));
  }
}

/// One online-softmax step (base 2) for a thread's two rows of a tensor-core tile: s[n] holds the
/// scaled, masked logits of row 0 in s[n][0..1] and of row 1 in s[n][2..3] (the m16n8 / wgmma
/// accumulator layout), mn0 / mn1 the rows' new maxima. Turns s into the probabilities, adds
/// their sums over the quad to l (after rescaling l by e^(m - mn)), moves m to mn and rescales
/// the output accumulators o (same layout) by the same factors: skipped when every factor of the
/// warp is exactly 1 (no row maximum moved), which leaves the same bits. The warp is converged.
template <int kN, int kO>
__device__ __forceinline__ void SoftmaxStep(float (&s)[kN][4], float (&o)[kO][4], float mn0,
                                            float mn1, float& m0, float& m1, float& l0, float& l1) {
  const float c0 = mn0 == -INFINITY ? 1.0f : Exp2Approx(m0 - mn0);
  const float c1 = mn1 == -INFINITY ? 1.0f : Exp2Approx(m1 - mn1);
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    s[n][0] = mn0 == -INFINITY ? 0.0f : Exp2Approx(s[n][0] - mn0);
    s[n][1] = mn0 == -INFINITY ? 0.0f : Exp2Approx(s[n][1] - mn0);
    s[n][2] = mn1 == -INFINITY ? 0.0f : Exp2Approx(s[n][2] - mn1);
    s[n][3] = mn1 == -INFINITY ? 0.0f : Exp2Approx(s[n][3] - mn1);
    sum0 += s[n][0] + s[n][1];
    sum1 += s[n][2] + s[n][3];
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    sum0 += __shfl_xor_sync(kFullMask, sum0, off);
    sum1 += __shfl_xor_sync(kFullMask, sum1, off);
  }
  l0 = l0 * c0 + sum0;
  l1 = l1 * c1 + sum1;
  m0 = mn0;
  m1 = mn1;
  if (__any_sync(kFullMask, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
    for (int n = 0; n < kO; ++n) {
      o[n][0] *= c0;
      o[n][1] *= c0;
      o[n][2] *= c1;
      o[n][3] *= c1;
    }
  }
}

/// Stores warpgroup c's half of query i's output for the head_dim 512 wgmma kernels: O in the
/// m64n256 accumulator layout (this thread's head rows r0 and r0 + 8, dims 256 c + 8 j + 2 t4 +
/// {0, 1}) times the rows' 1 / sum, rows below n_heads only, rounded to bf16 when asked.
__device__ __forceinline__ void StoreOutputHalf512(const SparseAttentionParams& p, int64_t i, int c,
                                                   int r0, int t4, const float (&o)[128],
                                                   float inv0, float inv1) {
  constexpr int kDim = 512;
  const int r1 = r0 + 8;
  auto store = [&](float v) { return p.round_bf16 ? quant::RoundBf16(v) : v; };
  float* out = p.out + i * p.n_heads * kDim;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int col = (kDim / 2) * c + 8 * j + 2 * t4;
    if (r0 < p.n_heads) {
      *reinterpret_cast<float2*>(out + r0 * kDim + col) =
          make_float2(store(o[4 * j] * inv0), store(o[4 * j + 1] * inv0));
    }
    if (r1 < p.n_heads) {
      *reinterpret_cast<float2*>(out + r1 * kDim + col) =
          make_float2(store(o[4 * j + 2] * inv1), store(o[4 * j + 3] * inv1));
    }
  }
}

/// 16 e4m3 codes times `s` (a power of two) -> 16 bf16, exactly (3 mantissa bits and a
/// power-of-two scale fit): the V4 fp8 KV rows' widening for the tensor-core kernels.
__device__ __forceinline__ void DequantE4m3x16(const uint4& v, float s, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t b[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
#pragma unroll
    for (int hw = 0; hw < 2; ++hw) {
      const uint16_t two = static_cast<uint16_t>(w[e] >> (16 * hw));
      const __half2_raw h =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
      const float2 f = __half22float2(__half2(h));
      b[2 * e + hw] = PackBf16x2(f.x * s, f.y * s);
    }
  }
  lo = make_uint4(b[0], b[1], b[2], b[3]);
  hi = make_uint4(b[4], b[5], b[6], b[7]);
}

/// Whether ue8m0 scale byte `s` takes WidenE4m3x16's bit path: 2^(s - 7) is a normal bf16
/// (s <= 134) and the scale is a normal fp32 (s >= 1; DecodeUe8m0(0) is 2^-127, subnormal, and
/// the fp32 product DequantE4m3x16 rounds twice is kept for it). 0xFF (NaN) is outside.
__device__ __forceinline__ bool E4m3BitPathScale(uint32_t s) { return s - 1u < 134u; }

/// 16 e4m3 codes times 2^(s - 127) -> 16 bf16 by bit moves, for a scale byte s with
/// E4m3BitPathScale: a code's sign, exponent and mantissa bits (s eeee mmm) are placed as the bf16
/// s 0000eeee mmm0000, which is the code's value times 2^-120 (subnormal codes, eeee = 0, land on
/// bf16 subnormals with the same ratio), then one bf16 multiply by 2^(s - 7) (`mul2`, both
/// halves) rounds once, to the nearest even like the fp32 product's bf16 rounding in
/// DequantE4m3x16: the same bits. A prmt puts two codes in the low bytes of 16-bit lanes with
/// their sign replicated above, a shift by 4 and a mask keep the sign at bit 15 and the 7 bits at
/// 10 .. 4: four operations a pair of codes where the cvt path takes six. The NaN codes (0x7F,
/// 0xFF) come out finite: V4 caches hold them only in blocks whose scale is NaN (StoreV4Kv's amax
/// propagates NaN), which take DequantE4m3x16.
__device__ __forceinline__ void WidenE4m3x16(const uint4& v, uint32_t mul2, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  uint32_t b[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    uint32_t y0, y1;  // codes 0, 1 and 2, 3 of the word, sign-extended to 16 bits
    asm("prmt.b32 %0, %1, 0, 0x9180;" : "=r"(y0) : "r"(w[e]));
    asm("prmt.b32 %0, %1, 0, 0xB3A2;" : "=r"(y1) : "r"(w[e]));
    const uint32_t t0 = (y0 << 4) & 0x87F087F0u, t1 = (y1 << 4) & 0x87F087F0u;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(b[2 * e]) : "r"(t0), "r"(mul2));
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(b[2 * e + 1]) : "r"(t1), "r"(mul2));
  }
  lo = make_uint4(b[0], b[1], b[2], b[3]);
  hi = make_uint4(b[4], b[5], b[6], b[7]);
}

/// WidenE4m3x16's multiplier for scale byte s (E4m3BitPathScale): bf16 2^(s - 7) in both halves.
__device__ __forceinline__ uint32_t E4m3BitPathMultiplier(uint32_t s) {
  const uint32_t m = (s + 120u) << 7;
  return m | (m << 16);
}

/// Dequantized value c of V4-fp8 row `row` of a paged cache (exactly quant::FakeQuantV4Kv's).
struct V4Row {
  const uint8_t* data;
  const uint8_t* scales;
};

__device__ __forceinline__ V4Row V4RowAt(const void* cache, const V4KvLayout& l, int64_t row) {
  // A 32-bit division where the row fits (always, in practice): the 64-bit one is a long call.
  const bool narrow = row <= 0x7FFFFFFF;
  const int64_t page =
      narrow ? static_cast<int64_t>(static_cast<uint32_t>(row) / static_cast<uint32_t>(l.page_size))
             : row / l.page_size;
  const uint8_t* base = static_cast<const uint8_t*>(cache) + page * l.PageBytes();
  const int64_t off = row - page * l.page_size;
  return {base + off * l.TokenBytes(), base + l.page_size * l.TokenBytes() + off * l.ScaleStride()};
}

__device__ __forceinline__ float V4Value(const V4Row& r, const V4KvLayout& l, int c) {
  const int nope = l.nope();
  if (c < nope) return quant::DecodeE4M3(r.data[c]) * quant::DecodeUe8m0(r.scales[c / 64]);
  const uint16_t* rope = reinterpret_cast<const uint16_t*>(r.data + nope);
  return quant::Bf16BitsToFloat(rope[c - nope]);
}

/// Tensor-core launch (attention_mma.cu); params already validated.
Status LaunchSparseAttentionMma(const SparseAttentionParams& p, cudaStream_t stream);
/// Whether the wgmma kernel (attention_wgmma.cu) takes these validated params: bf16 q and KV,
/// head_dim 512, n_heads <= 64, 16-byte aligned q and kv.
bool WgmmaAttentionApplies(const SparseAttentionParams& p);
/// `kernel`: kWgmmaDimsSplit (and kAuto) the dims-split kernel, kWgmmaEntrySplit / kWgmmaTma the
/// entries-split kernel with rows by cp.async / bulk tensor copies.
Status LaunchSparseAttentionWgmma(const SparseAttentionParams& p, AttentionTcKernel kernel,
                                  cudaStream_t stream);

/// Whether the producer-warpgroup wgmma kernel (attention_pairs.cu) takes these validated params:
/// WgmmaAttentionApplies's for bf16 KV; V4 fp8 KV of head_dim 512 with 64 rope dims, bf16 q.
bool PairsAttentionApplies(const SparseAttentionParams& p);
Status LaunchSparseAttentionPairs(const SparseAttentionParams& p, cudaStream_t stream);

/// The few-heads tensor-core kernel for bf16 values (attention_few_heads.cu): its shapes.
inline constexpr int kFewHeadsDim = 128;
inline constexpr int kFewHeadsMax = 8;
Status LaunchSparseAttentionFewHeads(const SparseAttentionParams& p, cudaStream_t stream);

}  // namespace nw::cuda::detail
