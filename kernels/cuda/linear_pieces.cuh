// What the tensor-core linear kernels share (linear_mma.cu, linear_mma_resident.cu): the split of
// fp32 x values into bf16 pieces as the A fragments are loaded from a staged x tile.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace nw::cuda::detail {

// x -> up to three bf16 pieces: hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid); each
// difference is exact in fp32 and the pieces sum to x exactly (24 significand bits in three 8-bit
// pieces). One piece is bf16(x), round to nearest even.
// The pieces of two consecutive x values as kParts packed bf16 pairs (first in the low half).
template <int kParts>
__device__ __forceinline__ void PackPieces(float2 v, uint32_t (&out)[kParts]) {
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(v.x, v.y);
    memcpy(&out[i], &b, sizeof(out[i]));
    if (i + 1 < kParts) {
      const float2 f = __bfloat1622float2(b);
      v.x -= f.x;
      v.y -= f.y;
    }
  }
}

// The A fragments (mma m16n8k16, row-major A) of each x piece for one k16 step, from an fp32 x
// tile staged with kXStride floats a row: `ap` points at row g (lane / 4) of the warp's 16, input
// 2 (lane % 4) of the step. Registers 0..3: (g, k), (g + 8, k), (g, k + 8), (g + 8, k + 8).
template <int kXParts, int kXStride>
__device__ __forceinline__ void LoadAFragments(const float* ap, uint32_t (&a)[kXParts][4]) {
  constexpr int kOffsets[4] = {0, 8 * kXStride, 8, 8 * kXStride + 8};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t pieces[kXParts];
    PackPieces<kXParts>(*reinterpret_cast<const float2*>(ap + kOffsets[i]), pieces);
#pragma unroll
    for (int part = 0; part < kXParts; ++part) a[part][i] = pieces[part];
  }
}

}  // namespace nw::cuda::detail
